#include "hooks/builtin/noop/noop_hook.h"

#include "config/config_keys.h"
#include "hooks/builtin/settings.h"

namespace crihook {

absl::StatusOr<std::shared_ptr<Hook>> NoopHook::create(const std::string& name,
                                                       const std::string& settings_json) {
  auto settings = HookSettingsReader::parse(name, settings_json);
  if (!settings.ok()) return settings.status();
  if (auto s = settings->checkKnown(configKeyNames("hook.settings", "noop")); !s.ok()) return s;
  auto stages = settings->stages("stages", {{LifecycleMethod::kCreateContainer, Phase::kPre}});
  if (!stages.ok()) return stages.status();
  return std::make_shared<NoopHook>(name, stageMask(*stages));
}

bool NoopHook::subscribes(LifecycleMethod method, Phase phase) const {
  return (stages_ & stageBit(method, phase)) != 0;
}

}  // namespace crihook
