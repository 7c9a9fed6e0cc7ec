#pragma once

// The device-lifecycle hook's settings ([hook.settings], lifecycle_hook.h
// lists them), read and checked once when the hook is made; immutable after,
// so every thread reads them without a lock.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/registry.h"

namespace crihook {

// One device type's actions, each list in configured order.
struct TypeActions {
  std::vector<Action> init, cleanup;
};

struct LifecycleSettings {
  std::map<std::string, TypeActions> types;  // gpu, rdma, fpga: the configured ones only
  ActionRoots roots;                         // sys_root is [topology] root
  std::string state_dir;                     // empty: the records die with crihookd
  // The backoff of a failed cleanup: retry_initial, doubled per failure up to retry_max.
  std::chrono::milliseconds retry_initial{1000}, retry_max{300000};
  // How long an init may wait for its sandbox before reconciling calls it
  // orphaned (kubelet gave up, or a later hook refused RunPodSandbox).
  std::chrono::milliseconds orphan_grace{600000};

  // The hook `name`'s settings from `json`; state_dir defaults to
  // <context.state_dir>/devices. INVALID_ARGUMENT "hook NAME: settings.KEY:
  // why" for the first setting that is wrong.
  static absl::StatusOr<LifecycleSettings> parse(const std::string& name, const std::string& json,
                                                 const BuiltinContext& context);

  bool configured(const std::string& type) const { return types.count(type) != 0; }
  // A type's actions; none for a type not configured (a record read at start
  // may name a type the configuration no longer has).
  const TypeActions& actionsOf(const std::string& type) const;
};

}  // namespace crihook
