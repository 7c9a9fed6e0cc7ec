// CallSlots: calls in at once, the queue behind them, and each waiter's own
// deadline.

#include "base/call_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test/support/eventually.h"

namespace crihook {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Got = CallSlots::Got;

TEST(CallSlots, TakesSlotsUpToItsCountAndGivesThemBack) {
  CallSlots slots(2, 0);
  const auto far = Clock::now() + 1h;
  EXPECT_EQ(slots.acquire(far), Got::kSlot);
  EXPECT_EQ(slots.acquire(far), Got::kSlot);
  EXPECT_EQ(slots.inUse(), 2u);
  // No queue: the third is refused at once, whatever its deadline.
  EXPECT_EQ(slots.acquire(far), Got::kQueueFull);
  slots.release();
  EXPECT_EQ(slots.acquire(far), Got::kSlot);
}

TEST(CallSlots, AWaiterGetsTheFirstSlotFreed) {
  CallSlots slots(1, 1);
  ASSERT_EQ(slots.acquire(Clock::now() + 1h), Got::kSlot);
  std::atomic<int> got{-1};
  std::thread waiter([&] { got = static_cast<int>(slots.acquire(Clock::now() + 1h)); });
  ASSERT_TRUE(eventually([&] { return slots.waiting() == 1; }));
  // The queue holds one: another is refused at once.
  EXPECT_EQ(slots.acquire(Clock::now() + 1h), Got::kQueueFull);
  slots.release();
  waiter.join();
  EXPECT_EQ(got, static_cast<int>(Got::kSlot));
  EXPECT_EQ(slots.inUse(), 1u);
  EXPECT_EQ(slots.waiting(), 0u);
}

TEST(CallSlots, AWaiterGivesUpAtItsDeadlineAndLeavesTheQueue) {
  CallSlots slots(1, 1);
  ASSERT_EQ(slots.acquire(Clock::now() + 1h), Got::kSlot);
  EXPECT_EQ(slots.acquire(Clock::now() + 20ms), Got::kTimedOut);
  EXPECT_EQ(slots.waiting(), 0u);
  EXPECT_EQ(slots.inUse(), 1u);
  // Its place in the queue is free again.
  std::atomic<int> got{-1};
  std::thread waiter([&] { got = static_cast<int>(slots.acquire(Clock::now() + 1h)); });
  ASSERT_TRUE(eventually([&] { return slots.waiting() == 1; }));
  slots.release();
  waiter.join();
  EXPECT_EQ(got, static_cast<int>(Got::kSlot));
}

TEST(CallSlots, ASlotHeldForAScopeIsGivenBack) {
  CallSlots slots(1, 0);
  ASSERT_EQ(slots.acquire(Clock::now() + 1h), Got::kSlot);
  { CallSlots::Slot held(slots); }
  EXPECT_EQ(slots.inUse(), 0u);
}

}  // namespace
}  // namespace crihook
