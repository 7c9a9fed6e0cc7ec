#include "hooks/wire.h"

#include <chrono>
#include <cstdint>

#include "base/quote.h"
#include "base/text.h"
#include "hooks/adjustment_schema.h"

namespace crihook {
namespace {

// A hook's reply is bounded in bytes by gRPC (or the module's reply cap);
// each list or map of its adjustment at most this long, far above any
// container's env or mounts, is checked before anything is copied.
constexpr size_t kMaxAdjustmentEntries = 4096;

namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;
using Clock = std::chrono::steady_clock;

}  // namespace

hv1::Adjustment toWire(const Adjustment& a) {
  hv1::Adjustment w;
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->present(a)) f->toWire(a, w);
  }
  return w;
}

absl::StatusOr<Adjustment> fromWire(const hv1::Adjustment& w, std::string_view where) {
  auto bad = [&](std::string_view field, std::string_view why) {
    return absl::InvalidArgumentError(cat(where, ": adjustment.", field, ": ", why));
  };
  // A hook's reply is bounded in bytes by gRPC (or the module's reply cap);
  // its lists and maps, every one the message has, are bounded here before
  // anything is copied or merged.
  const google::protobuf::Reflection* reflection = w.GetReflection();
  const google::protobuf::Descriptor* d = w.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (!f->is_repeated()) continue;
    const int n = reflection->FieldSize(w, f);
    if (static_cast<size_t>(n) > kMaxAdjustmentEntries)
      return bad(f->name(), cat(n, " entries, more than ", kMaxAdjustmentEntries));
  }
  Adjustment a;
  const FieldSpec::Bad report = bad;
  for (const FieldSpec* f : adjustmentSchema()) {
    if (absl::Status s = f->fromWire(w, a, report); !s.ok()) return s;
  }
  return a;
}

hv1::StageDecision stageDecision(const std::string& stage, const std::vector<std::string>& ran,
                                 const MergedAdjustment& merged) {
  hv1::StageDecision d;
  d.set_stage(stage);
  for (const auto& h : ran) d.add_hooks(h);
  *d.mutable_adjustment() = toWire(merged.result());
  for (const auto& [key, owner] : merged.owners()) (*d.mutable_owners())[key.str()] = owner;
  d.set_unix_millis(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count());
  return d;
}

hv1::HookRequest hookRequest(const HookInput& in) {
  hv1::HookRequest r;
  r.set_stage(stageName(in.method, in.phase));
  r.set_api(std::string(apiName(in.api)));
  if (in.pod) *r.mutable_pod() = *in.pod;
  if (in.container) *r.mutable_container() = *in.container;
  if (in.method == LifecycleMethod::kUpdateContainerResources && in.request) {
    const auto& req = static_cast<const v1::UpdateContainerResourcesRequest&>(*in.request);
    if (req.has_linux()) *r.mutable_resources() = req.linux();
  }
  if (in.phase == Phase::kPost) {
    r.set_runtime_code(static_cast<int>(in.backend_status.code()));
    r.set_runtime_message(std::string(in.backend_status.message()));
  }
  if (in.deadline != Clock::time_point::max()) {
    r.set_timeout_millis(std::max<int64_t>(
        0,
        std::chrono::duration_cast<std::chrono::milliseconds>(in.deadline - Clock::now()).count()));
  }
  return r;
}

HookDecision hookDecision(const hv1::HookResponse& reply, Phase phase, const std::string& hook) {
  if (reply.decision() == hv1::HookResponse::REJECT) {
    int code = reply.reject_code();
    if (code <= 0 || code > 16) code = static_cast<int>(absl::StatusCode::kFailedPrecondition);
    // The hook's own words, cut to what a status message may hold.
    return HookDecision::reject(absl::Status(static_cast<absl::StatusCode>(code),
                                             reply.reject_message().empty()
                                                 ? "no reason given"
                                                 : boundedMessage(reply.reject_message())));
  }
  if (reply.decision() != hv1::HookResponse::CONTINUE) {
    return HookDecision::error(absl::InvalidArgumentError(
        cat("reply of hook ", hook, ": decision: unknown value ", reply.decision())));
  }
  if (phase == Phase::kPost || !reply.has_adjustment()) return HookDecision::proceed();
  auto a = fromWire(reply.adjustment(), cat("reply of hook ", hook));
  if (!a.ok()) return HookDecision::error(a.status());
  return HookDecision::proceed(std::move(*a));
}

const std::vector<StageId>& allStages() {
  static const std::vector<StageId> stages = [] {
    std::vector<StageId> s;
    for (auto m : {LifecycleMethod::kRunPodSandbox, LifecycleMethod::kStopPodSandbox,
                   LifecycleMethod::kRemovePodSandbox, LifecycleMethod::kCreateContainer,
                   LifecycleMethod::kStartContainer, LifecycleMethod::kStopContainer,
                   LifecycleMethod::kRemoveContainer, LifecycleMethod::kUpdateContainerResources}) {
      s.push_back({m, Phase::kPre});
      s.push_back({m, Phase::kPost});
    }
    return s;
  }();
  return stages;
}

uint32_t stageMask(const std::vector<StageId>& stages) {
  uint32_t mask = 0;
  for (const StageId& s : stages) mask |= stageBit(s.method, s.phase);
  return mask;
}

absl::StatusOr<StageId> parseStage(std::string_view name) {
  std::string valid;
  for (const StageId& s : allStages()) {
    std::string n = stageName(s.method, s.phase);
    if (n == name) return s;
    valid += valid.empty() ? n : ", " + n;
  }
  return absl::InvalidArgumentError(cat("unknown stage \"", name, "\"; expected one of ", valid));
}

}  // namespace crihook
