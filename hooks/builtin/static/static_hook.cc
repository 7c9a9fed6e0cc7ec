#include "hooks/builtin/static/static_hook.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "base/text.h"
#include "config/config_keys.h"
#include "hooks/builtin/settings.h"

namespace crihook {
namespace {

bool containsAll(const google::protobuf::Map<std::string, std::string>& have,
                 const std::map<std::string, std::string>& want) {
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> StaticHook::create(const std::string& name,
                                                         const std::string& settings_json) {
  auto settings = HookSettingsReader::parse(name, settings_json);
  if (!settings.ok()) return settings.status();
  if (auto s = settings->checkKnown(configKeyNames("hook.settings", "static")); !s.ok()) return s;
  auto hook = std::make_shared<StaticHook>();
  hook->name_ = name;
  const StageId create{LifecycleMethod::kCreateContainer, Phase::kPre};
  auto stages = settings->stages("stages", {create},
                                 {{LifecycleMethod::kRunPodSandbox, Phase::kPre},
                                  create,
                                  {LifecycleMethod::kUpdateContainerResources, Phase::kPre}});
  if (!stages.ok()) return stages.status();
  hook->stages_ = stageMask(*stages);
  for (auto [key, out] :
       {std::pair{"namespaces", &hook->namespaces_}, std::pair{"containers", &hook->containers_}}) {
    auto list = settings->stringList(key);
    if (!list.ok()) return list.status();
    *out = std::move(*list);
  }
  for (auto [key, out] : {std::pair{"pod_labels", &hook->pod_labels_},
                          std::pair{"pod_annotations", &hook->pod_annotations_}}) {
    auto map = settings->stringMap(key);
    if (!map.ok()) return map.status();
    *out = std::move(*map);
  }
  const nlohmann::json* adjustment = settings->get("adjustment");
  if (adjustment == nullptr || !adjustment->is_object())
    return settings->error("adjustment", "expected a table: what this hook sets");
  hook::v1::Adjustment wire;
  if (auto s = google::protobuf::util::JsonStringToMessage(adjustment->dump(), &wire); !s.ok())
    return settings->error("adjustment", s.message().ToString());
  auto parsed = fromWire(wire, cat("hook ", name, ": settings"));
  if (!parsed.ok()) return parsed.status();
  if (parsed->empty()) return settings->error("adjustment", "sets nothing");
  hook->adjustment_ = std::move(*parsed);
  return hook;
}

bool StaticHook::subscribes(LifecycleMethod method, Phase phase) const {
  return (stages_ & stageBit(method, phase)) != 0;
}

bool StaticHook::appliesTo(const HookInput& in) const {
  if (!namespaces_.empty() || !pod_labels_.empty() || !pod_annotations_.empty()) {
    if (!in.pod) return false;  // an unknown pod matches no selector
    const auto& pod = in.pod->config();
    if (!namespaces_.empty() && std::find(namespaces_.begin(), namespaces_.end(),
                                          pod.metadata().namespace_()) == namespaces_.end())
      return false;
    if (!containsAll(pod.labels(), pod_labels_)) return false;
    if (!containsAll(pod.annotations(), pod_annotations_)) return false;
  }
  if (!containers_.empty()) {
    if (!in.container) return false;
    const std::string& n = in.container->requested().metadata().name();
    if (std::find(containers_.begin(), containers_.end(), n) == containers_.end()) return false;
  }
  return true;
}

}  // namespace crihook
