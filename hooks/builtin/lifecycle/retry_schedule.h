#pragma once

// When the device-lifecycle hook tries a failed cleanup again, and the
// thread that does it ("lifecycle-retry"). Each sandbox has one due time
// (a later schedule() replaces it), measured on the Env's monotonic clock
// (base/env.h: setting the date never moves it; a clock that jumps ahead
// runs what is now due once, at once). The earliest due runs first.
//
// Locks: one mutex guards the due times and the stop flag. It is a leaf
// lock for callers (schedule() takes nothing under it, so it may be called
// with a sandbox slot's lock held); the thread releases it before it runs a
// retry, so a retry may take a slot's lock and schedule() again.

#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "base/env.h"
#include "base/mutex.h"
#include "hooks/builtin/lifecycle/records.h"

namespace crihook {

class RetrySchedule {
 public:
  // Runs a due retry: called on the schedule's thread, without its lock.
  using Run = std::function<void(const SandboxKey&)>;

  // Backoff from `initial`, doubled per failure after the first, at most
  // `max`. `clock` outlives this. Nothing runs before start().
  RetrySchedule(MonotonicClock& clock, std::chrono::milliseconds initial,
                std::chrono::milliseconds max, Run run);
  // stop().
  ~RetrySchedule();
  RetrySchedule(const RetrySchedule&) = delete;
  RetrySchedule& operator=(const RetrySchedule&) = delete;

  // Starts the thread. Once.
  void start();
  // Ends the thread: blocks until a retry under way has returned. Due
  // retries that did not run are dropped. Idempotent.
  void stop();

  // `key`'s retry is due `delay` from now (by the clock), replacing any
  // earlier due time of it. Never blocks on a retry.
  void schedule(const SandboxKey& key, std::chrono::milliseconds delay);
  // The delay before the next try after `failures` failed ones (1: initial).
  std::chrono::milliseconds backoff(uint32_t failures) const;

 private:
  void loop();

  MonotonicClock& clock_;
  const std::chrono::milliseconds initial_, max_;
  const Run run_;
  Mutex mu_;
  CondVar cv_;  // a due time added or stop()
  std::map<SandboxKey, MonotonicClock::time_point> due_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started and joined by the owner's thread only
};

}  // namespace crihook
