#pragma once

// builtin = "static": the same declared adjustment for every matching pod or
// container — a site-wide env var, a host directory or device every
// container of a namespace needs, a label for pods of a runtime class.
//
// settings:
//   stages      = ["PreCreateContainer"]   (also PreRunPodSandbox,
//                                            PreUpdateContainerResources)
//   namespaces  = ["ml", ...]               pods in these namespaces only
//   pod_labels  = { key = "value" }         pods with all of these labels
//   pod_annotations = { key = "value" }     pods with all of these annotations
//   containers  = ["trainer", ...]          containers of these names only
//   [hook.settings.adjustment]              a crihook.hook.v1.Adjustment in its
//                                           JSON form: env, mounts, devices, ...
// Every setting is checked when crihookd starts; an error names it.

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

class StaticHook final : public Hook {
 public:
  static absl::StatusOr<std::shared_ptr<Hook>> create(const std::string& name,
                                                      const std::string& settings_json);

  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod method, Phase phase) const override;
  bool appliesTo(const HookInput& input) const override;
  bool runsInline() const override { return true; }
  HookDecision run(const HookInput&) override { return HookDecision::proceed(adjustment_); }

 private:
  std::string name_;
  uint32_t stages_ = 0;
  std::vector<std::string> namespaces_, containers_;
  std::map<std::string, std::string> pod_labels_, pod_annotations_;
  Adjustment adjustment_;
};

}  // namespace crihook
