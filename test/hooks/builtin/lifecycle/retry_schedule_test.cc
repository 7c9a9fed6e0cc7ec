// retry_schedule.h: when failed cleanups are tried again, on the Env's
// monotonic clock (a JumpingClock here: a test moves time instead of
// waiting for it), and the thread that tries them.

#include "hooks/builtin/lifecycle/retry_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include "base/mutex.h"
#include "test/support/eventually.h"
#include "test/support/fault_env.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using namespace std::chrono_literals;

const SandboxKey kA{"uid-a", 0}, kB{"uid-b", 0}, kC{"uid-c", 0}, kD{"uid-d", 0};

std::string ownThreadName() {
  std::ifstream comm("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

// What the schedule ran, in order, and on which thread.
class Runs {
 public:
  void add(const SandboxKey& key) {
    MutexLock lock(mu_);
    keys_.push_back(key.uid);
    threads_.push_back(ownThreadName());
  }
  std::vector<std::string> keys() const {
    MutexLock lock(mu_);
    return keys_;
  }
  std::vector<std::string> threads() const {
    MutexLock lock(mu_);
    return threads_;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> threads_ ABSL_GUARDED_BY(mu_);
};

TEST(RetrySchedule, TheBackoffDoublesPerFailureUpToItsMaximum) {
  JumpingClock clock;
  RetrySchedule fast(clock, 50ms, 200ms, [](const SandboxKey&) {});
  EXPECT_EQ(fast.backoff(1), 50ms);
  EXPECT_EQ(fast.backoff(2), 100ms);
  EXPECT_EQ(fast.backoff(3), 200ms);
  EXPECT_EQ(fast.backoff(4), 200ms);
  EXPECT_EQ(fast.backoff(1000), 200ms);
  RetrySchedule slow(clock, 1s, 5min, [](const SandboxKey&) {});
  EXPECT_EQ(slow.backoff(9), 256s);
  EXPECT_EQ(slow.backoff(10), 5min);
  RetrySchedule odd(clock, 3s, 10s, [](const SandboxKey&) {});
  EXPECT_EQ(odd.backoff(2), 6s);
  EXPECT_EQ(odd.backoff(3), 10s);  // capped, not 12s
}

// Due times as a sandbox's cleanup gets them: each sandbox has one (a later
// schedule replaces it), and the earliest runs first.
TEST(RetrySchedule, TheEarliestDueRunsFirstOnTheNamedThreadEachSandboxOnce) {
  JumpingClock clock;
  Runs runs;
  RetrySchedule retry(clock, 1s, 1s, [&](const SandboxKey& key) { runs.add(key); });
  retry.schedule(kB, 2h);
  retry.schedule(kC, 0ms);
  retry.schedule(kA, 1h);
  retry.schedule(kC, 10h);  // replaces its due time: now the last
  retry.schedule(kD, 3h);
  clock.jump(4h);
  retry.start();
  // d (3h) ran after a and b, and c would have been first had its earlier
  // due time been kept; c (10h) is not due.
  ASSERT_TRUE(eventually([&] { return runs.keys().size() >= 3; }));
  EXPECT_THAT(runs.keys(), ElementsAre("uid-a", "uid-b", "uid-d"));
  EXPECT_THAT(runs.threads(), ::testing::Each("lifecycle-retry"));
  clock.jump(6h);
  ASSERT_TRUE(eventually([&] { return runs.keys().size() >= 4; }));
  EXPECT_THAT(runs.keys(), ElementsAre("uid-a", "uid-b", "uid-d", "uid-c"));
}

// The thread waits on the clock, so a clock that jumps past a due time runs
// it at once, not after the real hour.
TEST(RetrySchedule, AClockThatJumpsPastADueTimeRunsItAtOnce) {
  JumpingClock clock;
  Runs runs;
  RetrySchedule retry(clock, 1s, 1s, [&](const SandboxKey& key) { runs.add(key); });
  retry.start();
  retry.schedule(kA, 1h);
  clock.jump(1h);
  ASSERT_TRUE(eventually([&] { return runs.keys().size() == 1; }));
  EXPECT_THAT(runs.keys(), ElementsAre("uid-a"));
}

// A retry runs without the schedule's lock: it may schedule itself again
// (a cleanup that fails once more); once stopped, nothing runs.
TEST(RetrySchedule, ARetryMayScheduleItselfAgainAndNothingRunsOnceStopped) {
  JumpingClock clock;
  Runs runs;
  RetrySchedule* self = nullptr;
  RetrySchedule retry(clock, 1s, 1s, [&](const SandboxKey& key) {
    runs.add(key);
    if (runs.keys().size() < 3) self->schedule(key, 0ms);
  });
  self = &retry;
  retry.schedule(kA, 0ms);
  retry.start();
  ASSERT_TRUE(eventually([&] { return runs.keys().size() == 3; }));
  retry.stop();
  retry.schedule(kB, 0ms);  // after stop: never runs, never blocks
  retry.stop();
  EXPECT_THAT(runs.keys(), ElementsAre("uid-a", "uid-a", "uid-a"));
}

}  // namespace
}  // namespace crihook::testing
