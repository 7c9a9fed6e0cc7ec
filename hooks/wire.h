#pragma once

// crihook's hook protocol (cri-api/crihook_hook_v1.proto) and the hook
// framework's own types: one conversion in each direction, shared by remote
// hook servers, hook modules, the state directory and the static hook's
// settings. Whatever comes from outside crihookd (a reply, a module's answer,
// an operator's settings) is validated here, and an error names the field.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cri-api/crihook_hook_v1.pb.h"
#include "hooks/adjustment.h"
#include "hooks/hook.h"

namespace crihook {

hook::v1::Adjustment toWire(const Adjustment& a);

// Checks and converts. INVALID_ARGUMENT naming the field, prefixed by
// `where` ("reply of hook x: adjustment.devices[1].container_path: expected an
// absolute path, got \"dev/x\"").
absl::StatusOr<Adjustment> fromWire(const hook::v1::Adjustment& a, std::string_view where);

// What one stage's hooks decided, with owners, as kept in the state records.
hook::v1::StageDecision stageDecision(const std::string& stage, const std::vector<std::string>& ran,
                                      const MergedAdjustment& merged);

// The request a remote hook or a module gets for `input`.
hook::v1::HookRequest hookRequest(const HookInput& input);

// A remote hook's or module's answer as a decision. An invalid reply is
// kError (its failure policy decides), naming `hook` and the field.
HookDecision hookDecision(const hook::v1::HookResponse& reply, Phase phase,
                          const std::string& hook);

// Every stage as "PreCreateContainer" etc. with its method and phase, in a
// fixed order (method order of LifecycleMethod, pre before post).
struct StageId {
  LifecycleMethod method;
  Phase phase;
};
const std::vector<StageId>& allStages();
// Stages as bits of a mask (bit method*2+phase), for hooks' subscriptions.
constexpr uint32_t stageBit(LifecycleMethod method, Phase phase) {
  return uint32_t{1} << (static_cast<int>(method) * 2 + static_cast<int>(phase));
}
uint32_t stageMask(const std::vector<StageId>& stages);

// "PreCreateContainer" -> its stage; INVALID_ARGUMENT listing the valid names.
absl::StatusOr<StageId> parseStage(std::string_view name);

}  // namespace crihook
