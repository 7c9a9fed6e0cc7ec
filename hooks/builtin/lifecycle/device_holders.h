#pragma once

// Which sandboxes hold each device, for the device-lifecycle hook: a device
// shared by several pods at once (a GPU split by HAMi-core) is initialised by
// the first of them and cleaned up after the last, so that a reset never
// pulls it from under the others. The holders of a device are the sandboxes
// whose devices are initialising or ready. And which sandbox owes a device
// its cleanup: the last holder, once it lets go of a device it touched, until
// that device's cleanup succeeds. No pod is given a device whose cleanup is
// owed (a reset between tenants is never skipped).
//
// Thread-safe: one mutex guards the table; it is a leaf lock (held for a
// lookup only, nothing else taken under it), so callers may hold a sandbox
// slot's lock (sandbox_slots.h) while they call.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/builtin/lifecycle/records.h"

namespace crihook {

class DeviceHolders {
 public:
  // "gpu:0000:18:00.0": a device by its type and PCI address (its minor
  // without one), the same whichever pod names it.
  static std::string deviceId(const DeviceFacts& d);

  // Adds `r`'s sandbox as a holder of each of its devices; per device (in
  // r.devices' order), a pod ("namespace/name") that held it already, or ""
  // when `r` is its first holder. UNAVAILABLE, claiming nothing, while
  // another sandbox owes one of them its cleanup.
  absl::StatusOr<std::vector<std::string>> claim(const DeviceRecord& r);
  // `r`'s sandbox no longer holds its devices. Each one it was the last
  // holder of and touched (r.touched) without cleaning it up (r.cleaned) is
  // owed its cleanup by it from now on; the others are owed nothing by it.
  void release(const DeviceRecord& r);
  // The cleanup of `d` that `key` owed is done (or left to another holder).
  void cleaned(const DeviceFacts& d, const SandboxKey& key);
  // A pod other than `key`'s that holds `d`; "" when none does.
  std::string heldBy(const DeviceFacts& d, const SandboxKey& key) const;
  // A sandbox other than `key` that owes `d` its cleanup; none when none does.
  std::optional<SandboxKey> owedBy(const DeviceFacts& d, const SandboxKey& key) const;

 private:
  mutable Mutex mu_;
  // device id -> its holders: sandbox -> "namespace/name"
  std::map<std::string, std::map<SandboxKey, std::string>> holders_ ABSL_GUARDED_BY(mu_);
  // device id -> the sandboxes that owe it its cleanup -> "namespace/name"
  std::map<std::string, std::map<SandboxKey, std::string>> owed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace crihook
