#pragma once

// AllocationHook: what the device hooks (gpu, rdma, cpuset, topology-check)
// share. Each turns what the scheduler decided for a pod (its annotations,
// read by allocation.h) into one PreCreateContainer adjustment:
//  - settings every one of them takes: device_root (absolute, default /dev:
//    where host device nodes are found) and on_error = "reject" (default)
//    or "skip" (the container is created without that hook's part, the
//    reason logged);
//  - run(): the pod's name for messages, decide(), and the error policy; a
//    call without a pod record proceeds unchanged;
//  - the pod's device allocation, parsed once per distinct annotation text
//    (every container of a pod carries the same one).
// Errors name the pod, the annotation and the field: INVALID_ARGUMENT for
// malformed input, FAILED_PRECONDITION for what is not on this node.
// Never half applied: decide() returns its whole adjustment or an error.
//
// Inline (runsInline() true): decide() may read memory only (the pod, the
// topology snapshot, the hook's own records, HostPaths for the filesystem);
// bench/device_hooks_bench.cc measures what that saves.

#include <spdlog/logger.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/builtin/settings.h"
#include "hooks/hook.h"

namespace crihook {

// The last annotation text parsed, and what it said: every container of a
// pod carries the same one. Thread-safe; parses outside the lock.
template <typename T>
class LastParsed {
 public:
  template <typename Parse>
  absl::StatusOr<std::shared_ptr<const T>> get(const std::string& text, Parse parse) {
    {
      MutexLock lock(mu_);
      if (value_ && text_ == text) return value_;
    }
    absl::StatusOr<T> parsed = parse();
    if (!parsed.ok()) return parsed.status();
    auto value = std::make_shared<const T>(std::move(*parsed));
    MutexLock lock(mu_);
    text_ = text;
    value_ = value;
    return value;
  }

 private:
  Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const T> value_ ABSL_GUARDED_BY(mu_);
};

class AllocationHook : public Hook {
 public:
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
  }
  bool runsInline() const override { return true; }  // memory only: see above
  HookDecision run(const HookInput& in) override;

 protected:
  // Reads the settings every device hook takes (device_root, on_error),
  // refuses keys that config/config_keys.cc's table does not give `builtin`
  // (its type: "gpu"), and leaves the rest to `more`. INVALID_ARGUMENT
  // naming the setting.
  absl::Status configure(const std::string& name, const std::string& settings_json,
                         std::string_view builtin,
                         const std::function<absl::Status(const HookSettingsReader&)>& more);

  // The adjustment for a pod with a record (`pod`: "namespace/name").
  virtual absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) = 0;

  static std::string podName(const HookInput& in);
  // The pod's annotation `key`; null without it.
  static const std::string* annotation(const HookInput& in, std::string_view key);
  // The pod's allocation (an empty one without the annotation).
  absl::StatusOr<std::shared_ptr<const PodAllocation>> allocation(const HookInput& in,
                                                                  const std::string& pod);
  // A CRI device for /dev/<node>, found at <device_root>/<node> on the host.
  DeviceSpec device(const std::string& node) const;
  // FAILED_PRECONDITION: `field` of the device-allocated annotation names
  // what this node does not have.
  static absl::Status notHere(std::string_view pod, std::string_view field, std::string_view why);

  std::string name_;
  std::string device_root_ = "/dev";
  std::shared_ptr<spdlog::logger> log_;

 private:
  bool skip_on_error_ = false;
  LastParsed<PodAllocation> allocation_;
};

}  // namespace crihook
