#pragma once

// builtin = "noop": decides nothing, on the stages it is given. What the
// framework costs by itself (bench/hook_chain_bench.cc measures it), and a
// way to check a node's hook wiring without changing any container.
//
// settings: stages = ["PreCreateContainer", ...] (default PreCreateContainer)

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

class NoopHook final : public Hook {
 public:
  static absl::StatusOr<std::shared_ptr<Hook>> create(const std::string& name,
                                                      const std::string& settings_json);

  NoopHook(std::string name, uint32_t stages) : name_(std::move(name)), stages_(stages) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod method, Phase phase) const override;
  bool runsInline() const override { return true; }
  HookDecision run(const HookInput&) override { return HookDecision::proceed(); }

 private:
  std::string name_;
  uint32_t stages_;
};

}  // namespace crihook
