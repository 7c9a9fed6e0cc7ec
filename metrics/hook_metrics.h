#pragma once

// Per hook and stage numbers: crihook_hook_calls_total, _rejections_total,
// _failures_total, _timeouts_total and crihook_hook_duration_seconds, by
// hook (its configured name, or a Koordinator server's registration file
// name) and stage (PreCreateContainer, ...). They outlive chain reloads:
// a hook that stays keeps counting in the same series.

#include <map>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "metrics/metric_registry.h"

namespace crihook::metrics {

struct HookStageMetrics {
  Counter& calls;       // every run of the hook at the stage
  Counter& rejections;  // it rejected the call (pre stages)
  Counter& failures;    // it failed (error or timeout), whatever its policy
  Counter& timeouts;    // of those, it ran past its budget
  Histogram& duration;  // seconds, each run
};

// Per hook, of its executor (hooks/executor.h): crihook_hook_stuck_workers
// (workers still running a call that timed out), crihook_hook_unhealthy (1
// while refused after timeouts in a row) and crihook_hook_refused_total by
// reason (queue_full, unhealthy): calls answered without running the hook.
struct HookExecutorMetrics {
  Gauge& stuck_workers;
  Gauge& unhealthy;
  Counter& refused_queue_full;
  Counter& refused_unhealthy;
};

class HookMetrics {
 public:
  explicit HookMetrics(Registry& registry);

  // The series of one hook at one stage, made on first use. Locks: call once
  // per (hook, stage) and keep the reference. Thread-safe.
  HookStageMetrics& of(const std::string& hook, const std::string& stage);

  // The executor series of one hook, made on first use. Thread-safe.
  HookExecutorMetrics& executor(const std::string& hook);

 private:
  Family<Counter>&calls_, &rejections_, &failures_, &timeouts_;
  Family<Histogram>& duration_;
  Family<Gauge>&stuck_workers_, &unhealthy_;
  Family<Counter>& refused_;
  Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<HookStageMetrics>> stages_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<HookExecutorMetrics>> executors_ ABSL_GUARDED_BY(mu_);
};

// Device init and cleanup by the device-lifecycle hook, per hook and device
// type: crihook_device_inits_total, _init_failures_total, _cleanups_total,
// _cleanup_failures_total, and crihook_device_cleanups_pending (sandboxes
// whose cleanup is owed).
struct DeviceMetrics {
  DeviceMetrics(Registry& registry, const std::string& hook);
  Counter& inits(const std::string& type);
  Counter& initFailures(const std::string& type);
  Counter& cleanups(const std::string& type);
  Counter& cleanupFailures(const std::string& type);
  Gauge& pending;

 private:
  std::string hook_;
  Family<Counter>&inits_, &init_failures_, &cleanups_, &cleanup_failures_;
};

}  // namespace crihook::metrics
