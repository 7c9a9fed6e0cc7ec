// Linger (proxy/linger.h): the bounded wait for a peer's end, on a loop this
// test runs by hand, its bound's timer run at once (expireTimers) rather than
// slept for.

#include "proxy/linger.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "proxy/event_loop.h"

namespace crihook::relay {
namespace {

std::unique_ptr<EventLoop> makeLoop() {
  auto loop = EventLoop::create();
  EXPECT_TRUE(loop.ok()) << loop.status();
  return std::move(*loop);
}

TEST(Linger, ReadsAtOnceAndEndsWithItsReasonAtTheBound) {
  auto loop = makeLoop();
  Linger linger(*loop);
  EXPECT_FALSE(linger.active());
  int reads = 0;
  std::optional<std::string> expired;
  linger.start(
      "write: Broken pipe", [&] { ++reads; }, [&](const std::string& why) { expired = why; });
  EXPECT_TRUE(linger.active());
  EXPECT_EQ(linger.why(), "write: Broken pipe");
  EXPECT_EQ(reads, 0) << "posted, not run inside the call that failed";
  loop->poll();
  EXPECT_EQ(reads, 1) << "what the socket holds is read at once";
  EXPECT_FALSE(expired) << "the bound has not come";
  EXPECT_EQ(loop->expireTimers(), 1u);
  ASSERT_TRUE(expired);
  EXPECT_EQ(*expired, "write: Broken pipe");
}

TEST(Linger, AStoppedWaitNeverExpires) {
  auto loop = makeLoop();
  Linger linger(*loop);
  bool expired = false;
  linger.start(
      "why", [] {}, [&](const std::string&) { expired = true; });
  loop->poll();
  linger.stop();
  EXPECT_EQ(loop->expireTimers(), 0u) << "the bound's timer is gone";
  EXPECT_FALSE(expired);
}

TEST(Linger, StartsOnceTheFirstReasonStands) {
  auto loop = makeLoop();
  Linger linger(*loop);
  int reads = 0;
  std::string expired;
  linger.start(
      "first", [&] { ++reads; }, [&](const std::string& why) { expired += why; });
  linger.start(
      "second", [&] { ++reads; }, [&](const std::string& why) { expired += why; });
  loop->poll();
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(linger.why(), "first");
  EXPECT_EQ(loop->expireTimers(), 1u);
  EXPECT_EQ(expired, "first");
}

}  // namespace
}  // namespace crihook::relay
