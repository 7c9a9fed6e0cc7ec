#include "hooks/builtin/devices/allocation_hook.h"

#include <vector>

#include "base/logging.h"
#include "base/text.h"
#include "config/config_keys.h"

namespace crihook {

HookDecision AllocationHook::run(const HookInput& in) {
  if (!in.pod) return HookDecision::proceed();
  absl::StatusOr<Adjustment> a = decide(in, podName(in));
  if (a.ok()) return HookDecision::proceed(std::move(*a));
  if (!skip_on_error_) return HookDecision::reject(a.status());
  log_->warn("{}; container created without it (on_error = skip)", sv(a.status().message()));
  return HookDecision::proceed();
}

absl::Status AllocationHook::configure(
    const std::string& name, const std::string& settings_json, std::string_view builtin,
    const std::function<absl::Status(const HookSettingsReader&)>& more) {
  name_ = name;
  log_ = logger("hook." + name);
  auto r = HookSettingsReader::parse(name, settings_json);
  if (!r.ok()) return r.status();
  if (auto s = r->checkKnown(configKeyNames("hook.settings", builtin)); !s.ok()) return s;
  if (auto s = r->absolutePath("device_root", device_root_); !s.ok()) return s;
  auto policy = r->oneOf("on_error", {"reject", "skip"});
  if (!policy.ok()) return policy.status();
  skip_on_error_ = *policy == "skip";
  return more(*r);
}

std::string AllocationHook::podName(const HookInput& in) {
  const auto& m = in.pod->config().metadata();
  return cat(m.namespace_(), "/", m.name());
}

const std::string* AllocationHook::annotation(const HookInput& in, std::string_view key) {
  const auto& a = in.pod->config().annotations();
  auto it = a.find(std::string(key));
  return it == a.end() ? nullptr : &it->second;
}

absl::StatusOr<std::shared_ptr<const PodAllocation>> AllocationHook::allocation(
    const HookInput& in, const std::string& pod) {
  const std::string* text = annotation(in, kDeviceAllocatedAnnotation);
  if (text == nullptr) return std::make_shared<const PodAllocation>();
  return allocation_.get(*text, [&] { return parseDeviceAllocated(*text, pod); });
}

DeviceSpec AllocationHook::device(const std::string& node) const {
  return {"/dev/" + node, device_root_ + "/" + node, "rw"};
}

absl::Status AllocationHook::notHere(std::string_view pod, std::string_view field,
                                     std::string_view why) {
  return absl::FailedPreconditionError(
      cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod, ": ", field, ": ", why));
}

}  // namespace crihook
