#include "hooks/builtin/lifecycle/lifecycle_settings.h"

#include "base/bounded_json.h"
#include "base/text.h"
#include "config/config_keys.h"
#include "hooks/builtin/settings.h"

namespace crihook {
namespace {

// settings.<type> = {init = [actions], cleanup = [actions]}.
absl::StatusOr<TypeActions> parseTypeActions(const HookSettingsReader& r, const std::string& name,
                                             const std::string& type, const nlohmann::json& t) {
  if (!t.is_object()) return r.error(type, cat("expected a table, got ", shownJson(t)));
  TypeActions actions;
  for (const auto& [k, list] : t.items()) {
    if (!findConfigKey("hook.settings.type", k, "device-lifecycle"))
      return r.error(type, cat("unknown key \"", k, "\" (known: ",
                               configKeyList("hook.settings.type", "device-lifecycle"), ")"));
    if (!list.is_array())
      return r.error(cat(type, ".", k), cat("expected an array of actions, got ", shownJson(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      auto a = Action::parse(list[i], cat("hook ", name, ": settings.", type, ".", k, "[", i, "]"));
      if (!a.ok()) return a.status();
      (k == "init" ? actions.init : actions.cleanup).push_back(std::move(*a));
    }
  }
  return actions;
}

}  // namespace

absl::StatusOr<LifecycleSettings> LifecycleSettings::parse(const std::string& name,
                                                           const std::string& json,
                                                           const BuiltinContext& context) {
  auto r = HookSettingsReader::parse(name, json);
  if (!r.ok()) return r.status();
  if (auto s = r->checkKnown(configKeyNames("hook.settings", "device-lifecycle")); !s.ok())
    return s;
  LifecycleSettings out;
  for (const char* type : {"gpu", "rdma", "fpga"}) {
    const nlohmann::json* t = r->get(type);
    if (t == nullptr) continue;
    auto actions = parseTypeActions(*r, name, type, *t);
    if (!actions.ok()) return actions.status();
    out.types[type] = std::move(*actions);
  }
  out.state_dir = context.state_dir.empty() ? "" : context.state_dir + "/devices";
  out.roots.sys_root = context.topology_root;
  for (auto s :
       {r->absolutePath("state_dir", out.state_dir),
        r->absolutePath("device_root", out.roots.device_root),
        r->duration("retry_initial", out.retry_initial), r->duration("retry_max", out.retry_max),
        r->duration("orphan_grace", out.orphan_grace)}) {
    if (!s.ok()) return s;
  }
  if (out.retry_max < out.retry_initial) return r->error("retry_max", "is less than retry_initial");
  return out;
}

const TypeActions& LifecycleSettings::actionsOf(const std::string& type) const {
  static const TypeActions kNone;
  auto it = types.find(type);
  return it == types.end() ? kNone : it->second;
}

}  // namespace crihook
