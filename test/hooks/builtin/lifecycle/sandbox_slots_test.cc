// sandbox_slots.h: one slot per sandbox, handed out locked, and the index
// of the runtime's sandbox ids.

#include "hooks/builtin/lifecycle/sandbox_slots.h"

#include <gtest/gtest.h>

#include <thread>

#include "test/support/eventually.h"

namespace crihook {
namespace {

const SandboxKey kA{"uid-a", 0}, kA1{"uid-a", 1}, kB{"uid-b", 0};

TEST(SandboxSlots, ASlotIsMadeOnlyWhenAskedForAndThenFoundAgain) {
  SandboxSlots slots;
  EXPECT_EQ(slots.find(kA), nullptr);
  EXPECT_FALSE(slots.withSlot(kA, /*create=*/false, [](Slot&) { ADD_FAILURE(); }));
  std::shared_ptr<Slot> a = slots.find(kA, /*create=*/true);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(slots.find(kA), a);
  EXPECT_EQ(slots.find(kA, /*create=*/true), a);
  slots.find(kB, true);
  slots.find(kA1, true);
  std::vector<SandboxKey> keys;
  for (const auto& [key, slot] : slots.all()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<SandboxKey>{kA, kA1, kB}));
}

TEST(SandboxSlots, TheSlotIsHandedOutWithItsLockHeld) {
  SandboxSlots slots;
  Slot* seen = nullptr;
  bool locked = false;
  EXPECT_TRUE(slots.withSlot(kA, /*create=*/true, [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    seen = &s;
    ++s.running_calls;
    s.record = DeviceRecord{};  // kept: it holds something
    locked = true;
    std::thread([&] {
      if (s.mu.try_lock()) {
        locked = false;
        s.mu.unlock();
      }
    }).join();
  }));
  EXPECT_TRUE(locked);
  EXPECT_EQ(seen, slots.find(kA).get());
  // And released after: another caller gets it.
  EXPECT_TRUE(slots.withSlot(
      kA, /*create=*/false,
      [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { EXPECT_EQ(s.running_calls, 1); }));
}

// A slot a caller leaves without a record holds nothing and is not kept,
// even one the caller asked to make: no call leaves an empty slot behind
// for good (reconciling skips them, so nothing else would remove it).
TEST(SandboxSlots, ASlotLeftWithoutARecordIsNotKept) {
  SandboxSlots slots;
  EXPECT_TRUE(slots.withSlot(kA, /*create=*/true, [](Slot&) {}));
  EXPECT_EQ(slots.find(kA), nullptr);
  EXPECT_TRUE(slots.withSlot(kA, /*create=*/true, [](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    s.record = DeviceRecord{};
  }));
  ASSERT_NE(slots.find(kA), nullptr);
  EXPECT_TRUE(slots.withSlot(
      kA, /*create=*/false, [](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { s.record.reset(); }));
  EXPECT_EQ(slots.find(kA), nullptr);
  EXPECT_TRUE(slots.all().empty());
}

// A caller waiting for a slot's lock while its holder forgets the sandbox
// must not get that slot: what it put there would be lost with it.
TEST(SandboxSlots, ASlotForgottenWhileACallerWaitedForItIsNotHandedOut) {
  SandboxSlots slots;
  std::shared_ptr<Slot> old = slots.find(kA, /*create=*/true);
  Slot* got = nullptr;
  std::thread waiter;
  {
    MutexLock lock(old->mu);
    waiter = std::thread([&] {
      slots.withSlot(kA, /*create=*/true, [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
        got = &s;
        s.record = DeviceRecord{};
      });
    });
    // The waiter has found the old slot (it holds a reference to it: the
    // table, this test and the waiter) and now waits for its lock.
    ASSERT_TRUE(eventually([&] { return old.use_count() == 3; }));
    slots.forget(kA, "");
  }
  waiter.join();
  ASSERT_NE(got, nullptr);
  EXPECT_NE(got, old.get());
  EXPECT_EQ(slots.find(kA).get(), got);
  MutexLock lock(old->mu);
  EXPECT_FALSE(old->record.has_value());
}

TEST(SandboxSlots, TheIndexNamesTheSandboxOfARuntimeIdUntilItIsForgotten) {
  SandboxSlots slots;
  auto loaded = std::make_shared<Slot>();
  slots.add(kB, loaded, "sb-b");
  slots.add(kA1, std::make_shared<Slot>(), "");  // no sandbox made yet
  EXPECT_EQ(slots.find(kB), loaded);
  EXPECT_EQ(slots.keyOf("sb-b"), kB);
  EXPECT_EQ(slots.keyOf(""), std::nullopt);
  slots.index("sb-a1", kA1);
  EXPECT_EQ(slots.keyOf("sb-a1"), kA1);
  EXPECT_EQ(slots.keyOf("sb-unknown"), std::nullopt);
  slots.forget(kB, "sb-b");
  EXPECT_EQ(slots.keyOf("sb-b"), std::nullopt);
  EXPECT_EQ(slots.find(kB), nullptr);
  EXPECT_EQ(slots.keyOf("sb-a1"), kA1);
}

}  // namespace
}  // namespace crihook
