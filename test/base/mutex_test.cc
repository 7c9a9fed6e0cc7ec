// base/mutex.h and base/thread_name.h: the annotated lock types behave as
// the std ones they wrap, and a named thread carries its name. That the
// annotations bite is scripts/thread-safety.sh's check (it compiles
// test/base/thread_safety_violation.cc and expects clang to refuse it).
#include "base/mutex.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "base/thread_name.h"

namespace crihook {
namespace {

using namespace std::chrono_literals;

TEST(MutexTest, AWaiterWakesWhenTheConditionItWaitsForIsSet) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(mu);
    ready = true;
    cv.notifyAll();
  });
  {
    MutexLock lock(mu);
    while (!ready) cv.wait(lock);
    EXPECT_TRUE(ready);
  }
  setter.join();
}

TEST(MutexTest, AWaitWithADeadlineThatNobodySignalsTimesOut) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(mu);
  EXPECT_EQ(cv.waitUntil(lock, std::chrono::steady_clock::now() + 5ms), std::cv_status::timeout);
  EXPECT_FALSE(cv.waitFor(lock, 1ms, [&] {
    mu.assertHeld();
    return false;
  }));
}

TEST(MutexTest, AScopedLockReleasedInItsScopeLetsAnotherThreadIn) {
  Mutex mu;
  MutexLock lock(mu);
  lock.unlock();
  const auto other_thread_gets_it = [&] {
    bool got = false;
    std::thread([&] {
      if (mu.try_lock()) {
        got = true;
        mu.unlock();
      }
    }).join();
    return got;
  };
  EXPECT_TRUE(other_thread_gets_it());
  lock.lock();
  EXPECT_FALSE(other_thread_gets_it());
}

TEST(MutexTest, ATimedLockGivesUpAtItsDeadlineWhileAnotherHoldsIt) {
  TimedMutex mu;
  mu.lock();
  bool got = false;
  std::thread([&] {
    if (mu.tryLockUntil(std::chrono::steady_clock::now() + 5ms)) {
      got = true;
      mu.unlock();
    }
  }).join();
  EXPECT_FALSE(got);
  mu.unlock();
  if (mu.tryLockUntil(std::chrono::steady_clock::now())) {
    got = true;
    mu.unlock();
  }
  EXPECT_TRUE(got);
}

// A clock of a test's own, shaped as base/env.h's MonotonicClock: it does
// the waiting, on the caller's condition variable and held lock.
struct RecordingClock {
  using time_point = std::chrono::steady_clock::time_point;
  void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 time_point deadline) const {
    held_while_waiting = lock.owns_lock();
    waited_until = deadline;
    cv.wait_until(lock, std::chrono::steady_clock::now() + 1ms);
  }
  mutable bool held_while_waiting = false;
  mutable time_point waited_until;
};

TEST(MutexTest, AWaitByAClockIsThatClocksWaitAndReturnsWithTheLockHeld) {
  Mutex mu;
  CondVar cv;
  RecordingClock clock;
  const auto deadline = std::chrono::steady_clock::now() + 1h;
  MutexLock lock(mu);
  cv.waitUntilBy(lock, clock, deadline);
  EXPECT_TRUE(clock.held_while_waiting);
  EXPECT_EQ(clock.waited_until, deadline);
  bool other_got_it = false;
  std::thread([&] {
    if (mu.try_lock()) {
      other_got_it = true;
      mu.unlock();
    }
  }).join();
  EXPECT_FALSE(other_got_it);
}

std::string ownThreadName() {
  std::ifstream comm("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

TEST(ThreadNameTest, ANamedThreadShowsItsNameCutToWhatTheKernelKeeps) {
  std::string seen, cut;
  namedThread("hook-worker", [&] { seen = ownThreadName(); }).join();
  namedThread("a-name-much-longer-than-fifteen", [&] { cut = ownThreadName(); }).join();
  EXPECT_EQ(seen, "hook-worker");
  EXPECT_EQ(cut, "a-name-much-lon");
}

}  // namespace
}  // namespace crihook
