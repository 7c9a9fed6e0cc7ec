#pragma once

// What the device-lifecycle hook counts (metrics/hook_metrics.h
// DeviceMetrics): per device type, inits and cleanups done and failed; and
// crihook_device_cleanups_pending, the sandboxes that owe a cleanup.
//
// Thread-safe. One mutex guards the set of sandboxes that owe a cleanup
// (the gauge is its size); it is a leaf lock (nothing else is taken under
// it), so callers may hold a sandbox slot's lock (sandbox_slots.h).

#include <memory>
#include <set>
#include <string>

#include "base/mutex.h"
#include "hooks/builtin/lifecycle/records.h"
#include "metrics/hook_metrics.h"

namespace crihook {

class LifecycleMetrics {
 public:
  // The series of hook `hook` in `registry`, which outlives this; a null
  // registry counts nothing.
  LifecycleMetrics(metrics::Registry* registry, const std::string& hook);

  // A device of `type` initialised (every init action done), or refused.
  void initDone(const std::string& type);
  void initFailed(const std::string& type);
  // A device of `type` cleaned up (every cleanup action done), or a cleanup
  // attempt that failed (it is retried).
  void cleanupDone(const std::string& type);
  void cleanupFailed(const std::string& type);

  // Whether sandbox `key` owes a cleanup now (its record's phase is
  // cleanup-pending); `false` also once it is forgotten.
  void setPending(const SandboxKey& key, bool pending);

 private:
  const std::unique_ptr<metrics::DeviceMetrics> series_;  // null without a registry
  Mutex mu_;
  std::set<SandboxKey> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace crihook
