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
