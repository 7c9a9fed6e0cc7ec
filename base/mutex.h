#pragma once

// Mutex, TimedMutex, MutexLock and CondVar: std::mutex, std::timed_mutex and
// std::condition_variable with clang's thread-safety annotations, so that
// -Wthread-safety (scripts/thread-safety.sh, a CI phase) checks every
// member declared ABSL_GUARDED_BY a mutex and every function declared
// ABSL_EXCLUSIVE_LOCKS_REQUIRED one. libstdc++'s own types carry no
// annotations; these add nothing at run time (every member is inline and
// forwards).
//
// How a class uses them:
//
//   mutable Mutex mu_;
//   std::map<...> slots_ ABSL_GUARDED_BY(mu_);
//   void evict() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
//
//   MutexLock lock(mu_);
//   while (!ready_) cv_.wait(lock);   // a loop the analysis can follow
//
// A predicate passed as a lambda is a function of its own to the analysis:
// it starts with `mu_.assertHeld();` (true: the condition variable calls it
// with the lock held).

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace crihook {

class MonotonicClock;  // base/env.h: waits on a CondVar by its own clock

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the calling code holds the mutex (a condition
  // variable's predicate); checks nothing at run time.
  void assertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// A mutex whose lock can give up at a deadline (one call at a time, each
// with its own budget).
class ABSL_LOCKABLE TimedMutex {
 public:
  TimedMutex() = default;
  TimedMutex(const TimedMutex&) = delete;
  TimedMutex& operator=(const TimedMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  template <typename Clock, typename Duration>
  bool tryLockUntil(std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock_until(deadline);
  }
  void assertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::timed_mutex mu_;
};

// Holds a Mutex for its scope; unlock() and lock() release and take it again
// within the scope (the analysis follows both).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : lock_(mu.mu_) {}
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() ABSL_UNLOCK_FUNCTION() { lock_.unlock(); }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable over a MutexLock. Each wait returns with the lock
// held again; spurious wake-ups happen, so wait in a loop on the condition.
class CondVar {
 public:
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // std::cv_status::timeout once `deadline` has passed.
  template <typename Clock, typename Duration>
  std::cv_status waitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    return cv_.wait_until(lock.lock_, deadline);
  }
  template <typename Rep, typename Period>
  std::cv_status waitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(lock.lock_, timeout);
  }
  // The predicate forms: `pred` starts with the mutex's assertHeld().
  template <typename Pred>
  void wait(MutexLock& lock, Pred pred) {
    cv_.wait(lock.lock_, pred);
  }
  template <typename Clock, typename Duration, typename Pred>
  bool waitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline, Pred pred) {
    return cv_.wait_until(lock.lock_, deadline, pred);
  }
  template <typename Rep, typename Period, typename Pred>
  bool waitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    return cv_.wait_for(lock.lock_, timeout, pred);
  }
  // Waits as `clock` waits until `deadline` by its own time (base/env.h
  // MonotonicClock::waitUntil: a test's fake clock polls, so that a jump is
  // seen): returns on a notification, the deadline or spuriously.
  template <typename ClockT>
  void waitUntilBy(MutexLock& lock, const ClockT& clock, typename ClockT::time_point deadline) {
    clock.waitUntil(cv_, lock.lock_, deadline);
  }
  void notifyOne() noexcept { cv_.notify_one(); }
  void notifyAll() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace crihook
