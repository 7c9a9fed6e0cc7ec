#include "hooks/registry.h"

#include "base/text.h"
#include "hooks/builtin/cdi/cdi.h"
#include "hooks/builtin/devices/device_hooks.h"
#include "hooks/builtin/lifecycle/lifecycle_hook.h"
#include "hooks/builtin/noop/noop_hook.h"
#include "hooks/builtin/static/static_hook.h"

namespace crihook {

void HookRegistry::add(std::string type, Factory factory) {
  factories_[std::move(type)] = std::move(factory);
}

void HookRegistry::add(std::string type, SimpleFactory factory) {
  add(std::move(type), [factory](const std::string& name, const std::string& settings,
                                 const BuiltinContext&) { return factory(name, settings); });
}

absl::StatusOr<std::shared_ptr<Hook>> HookRegistry::create(const std::string& type,
                                                           const std::string& name,
                                                           const std::string& settings,
                                                           const BuiltinContext& context) const {
  auto it = factories_.find(type);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& t : types()) known += known.empty() ? t : ", " + t;
    return absl::InvalidArgumentError(
        cat("no built-in hook \"", type, "\"; built-in hooks are: ", known));
  }
  return it->second(name, settings, context);
}

std::vector<std::string> HookRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [t, f] : factories_) out.push_back(t);
  return out;
}

HookRegistry builtinHooks() {
  HookRegistry r;
  r.add("cdi", &makeCdiHook);
  r.add("cpuset", HookRegistry::Factory(&makeCpusetHook));
  r.add("device-lifecycle", HookRegistry::Factory(&makeDeviceLifecycleHook));
  r.add("gpu", &makeGpuHook);
  r.add("noop", &NoopHook::create);
  r.add("rdma", &makeRdmaHook);
  r.add("static", &StaticHook::create);
  r.add("topology-check", &makeTopologyCheckHook);
  return r;
}

}  // namespace crihook
