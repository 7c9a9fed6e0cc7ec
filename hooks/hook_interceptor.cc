#include "hooks/hook_interceptor.h"

#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/apply.h"
#include "hooks/wire.h"

namespace crihook {
namespace {

namespace hv1 = ::crihook::hook::v1;

// A container keeps the decisions of this many stages (the first, the
// CreateContainer one, always stays): kubelet may update resources often.
constexpr int kKeptDecisions = 16;

void addDecision(hv1::ContainerRecord& r, hv1::StageDecision d) {
  *r.add_decisions() = std::move(d);
  if (r.decisions_size() > kKeptDecisions) r.mutable_decisions()->DeleteSubrange(1, 1);
}

// Fills what the request did not say of who the call is about (the pod of
// a call that names only a container) from the records.
void completeIdentity(CallIdentity& id, const hv1::PodRecord* pod,
                      const hv1::ContainerRecord* container) {
  if (container) {
    if (id.sandbox_id.empty()) id.sandbox_id = container->sandbox_id();
    if (id.container_name.empty()) id.container_name = container->requested().metadata().name();
  }
  if (pod && id.pod_name.empty()) {
    const auto& meta = pod->config().metadata();
    id.pod_namespace = meta.namespace_();
    id.pod_name = meta.name();
    id.pod_uid = meta.uid();
    if (id.sandbox_id.empty()) id.sandbox_id = pod->sandbox_id();
  }
}

}  // namespace

// What a call carries from its pre-stage to its post-stage.
struct HookInterceptor::CallState {
  std::shared_ptr<const HookChain> chain;
  std::shared_ptr<const topology::Snapshot> topology;
  std::shared_ptr<const hv1::PodRecord> pod;
  std::shared_ptr<const hv1::ContainerRecord> container;
  std::optional<hv1::StageDecision> decision;  // when pre-stage hooks ran
  Adjustment resources;                        // the container's resource decisions after this call
};

HookInterceptor::HookInterceptor(const ChainHolder& chains, StateStore& state,
                                 std::shared_ptr<spdlog::logger> log, size_t workers,
                                 const topology::SnapshotHolder* topology)
    : chains_(chains),
      state_(state),
      topology_(topology),
      log_(std::move(log)),
      pool_("hook-stage", workers) {}

// pool_'s destructor runs every stage posted.
HookInterceptor::~HookInterceptor() = default;

HookInput HookInterceptor::inputOf(const InterceptedCall& call, const CallState& cs, Phase phase) {
  HookInput in;
  in.method = call.method;
  in.phase = phase;
  in.api = call.api;
  in.request = call.request.get();
  in.identity = &call.identity;
  in.pod = cs.pod;
  in.container = cs.container;
  in.topology = cs.topology;
  if (phase == Phase::kPost) {
    in.response = call.response.get();
    in.backend_status = call.backend_status;
  }
  return in;
}

void HookInterceptor::assembleContext(const InterceptedCall& call, CallState& cs) const {
  const LifecycleSpec& spec = specOf(call.method);
  const auto& req = *call.request;
  switch (spec.effect) {
    case Effect::kCreatesSandbox: {
      auto pod = std::make_shared<hv1::PodRecord>();
      *pod->mutable_config() = *spec.podConfig(req);
      pod->set_runtime_handler(std::string(spec.runtimeHandler(req)));
      cs.pod = std::move(pod);
      return;
    }
    case Effect::kCreatesContainer: {
      const std::string sandbox_id(spec.sandboxId(req));
      cs.pod = state_.pod(sandbox_id);
      if (!cs.pod) {  // a pod from before crihookd ran: what kubelet tells us of it
        auto pod = std::make_shared<hv1::PodRecord>();
        pod->set_sandbox_id(sandbox_id);
        *pod->mutable_config() = *spec.podConfig(req);
        cs.pod = std::move(pod);
      }
      auto c = std::make_shared<hv1::ContainerRecord>();
      c->set_sandbox_id(sandbox_id);
      *c->mutable_requested() = *spec.containerConfig(req);
      cs.container = std::move(c);
      return;
    }
    default:
      if (const auto sandbox_id = spec.sandboxId(req); !sandbox_id.empty()) {
        cs.pod = state_.pod(std::string(sandbox_id));
      } else if (const auto container_id = spec.containerId(req); !container_id.empty()) {
        cs.container = state_.container(std::string(container_id));
        if (cs.container) cs.pod = state_.pod(cs.container->sandbox_id());
      }
      return;
  }
}

void HookInterceptor::pre(std::shared_ptr<InterceptedCall> call,
                          std::function<void(absl::Status)> done) {
  auto cs = std::make_shared<CallState>();
  cs->chain = chains_.get();
  if (topology_) cs->topology = topology_->get();
  call->interceptor_data = cs;
  assembleContext(*call, *cs);
  completeIdentity(call->identity, cs->pod.get(), cs->container.get());
  const bool stored_resources = specOf(call->method).mutableResources != nullptr && cs->container &&
                                cs->container->has_resources();
  if (!stored_resources && cs->chain->subscribers(call->method, Phase::kPre) == 0) {
    done(absl::OkStatus());
    return;
  }
  if (!cs->chain->mayBlock(inputOf(*call, *cs, Phase::kPre))) {
    // Pure computation: cheaper here than a hop to the pool and back.
    done(runPre(*call, *cs));
    return;
  }
  pool_.post([this, call, cs, done = std::move(done)] { done(runPre(*call, *cs)); });
}

absl::Status HookInterceptor::runPre(InterceptedCall& call, CallState& cs) {
  ChainOutcome out = cs.chain->run(inputOf(call, cs, Phase::kPre), call.deadline);
  if (!out.status.ok()) {
    // The call's status: sent to kubelet and logged as it stands, so one
    // line and bounded whatever a hook (or the pod's name) put in it.
    constexpr size_t kMaxPodNameBytes = 64 + 253;  // a namespace, a name (DNS subdomain)
    return absl::Status(out.status.code(),
                        boundedMessage(cat(sv(out.status.message()), " (pod ",
                                           boundedMessage(cat(call.identity.pod_namespace, "/",
                                                              call.identity.pod_name),
                                                          kMaxPodNameBytes),
                                           ")")));
  }
  if (!out.ran.empty()) {
    cs.decision = stageDecision(stageName(call.method, Phase::kPre), out.ran, out.merged);
  }
  const Adjustment& a = out.merged.result();
  const LifecycleSpec& spec = specOf(call.method);
  auto& req = *call.request;
  if (spec.mutableResources) {
    // The hooks' resource decisions so far (stored at CreateContainer and
    // at earlier updates) with this stage's over them, sent again whole:
    // kubelet's update would otherwise undo them.
    Adjustment stored;
    if (cs.container && cs.container->has_resources()) {
      // Written by this daemon from a validated adjustment; a record that
      // no longer validates is ignored rather than half applied.
      auto parsed = fromWire(cs.container->resources(), "stored resources");
      if (parsed.ok()) stored = std::move(*parsed);
    }
    cs.resources = overlayResources(std::move(stored), a);
    if (!cs.resources.empty()) {
      applyToResources(cs.resources, *spec.mutableResources(req));
      call.request_changed = true;
    }
    return absl::OkStatus();
  }
  if (spec.effect == Effect::kCreatesContainer) cs.resources = resourcesOnly(a);
  if (a.empty()) return absl::OkStatus();
  if (spec.mutableContainerConfig) {
    applyToContainer(a, *spec.mutableContainerConfig(req),
                     spec.mutableSandboxConfig ? spec.mutableSandboxConfig(req) : nullptr);
    call.request_changed = true;
  } else if (spec.mutableSandboxConfig) {
    applyToSandbox(a, *spec.mutableSandboxConfig(req));
    call.request_changed = true;
  } else if (log_) {
    log_->debug("{}: adjustments have nothing to change on this call; ignored", spec.name);
  }
  return absl::OkStatus();
}

void HookInterceptor::post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) {
  auto* held = std::any_cast<std::shared_ptr<CallState>>(&call->interceptor_data);
  if (held == nullptr) {  // pre never ran (the call failed before it)
    done();
    return;
  }
  std::shared_ptr<CallState> cs = *held;
  // Bookkeeping first: it must happen even when no hook is subscribed.
  record(*call, *cs);
  if (cs->chain->subscribers(call->method, Phase::kPost) == 0) {
    done();
    return;
  }
  if (!cs->chain->mayBlock(inputOf(*call, *cs, Phase::kPost))) {
    runPost(*call, *cs);
    done();
    return;
  }
  pool_.post([this, call, cs, done = std::move(done)] {
    runPost(*call, *cs);
    done();
  });
}

void HookInterceptor::record(const InterceptedCall& call, CallState& cs) {
  const bool ok = call.backend_status.ok() && call.response;
  const bool gone = ok || call.backend_status.code() == absl::StatusCode::kNotFound;
  const LifecycleSpec& spec = specOf(call.method);
  switch (spec.effect) {
    case Effect::kCreatesSandbox: {
      if (!ok) return;
      hv1::PodRecord r = *cs.pod;
      r.set_sandbox_id(std::string(spec.createdId(*call.response)));
      if (call.request_changed) {  // keep what the runtime has: later hooks see the pod as it is
        *r.mutable_config() = *spec.podConfig(*call.request);
      }
      if (cs.decision) *r.add_decisions() = *cs.decision;
      cs.pod = std::make_shared<const hv1::PodRecord>(r);
      state_.putPod(std::move(r));
      return;
    }
    case Effect::kCreatesContainer: {
      if (!ok) return;
      hv1::ContainerRecord r = *cs.container;
      r.set_id(std::string(spec.createdId(*call.response)));
      if (call.request_changed) *r.mutable_sent() = *spec.containerConfig(*call.request);
      if (cs.decision) addDecision(r, *cs.decision);
      if (!cs.resources.empty()) *r.mutable_resources() = toWire(cs.resources);
      cs.container = std::make_shared<const hv1::ContainerRecord>(r);
      // A pod from before crihookd ran becomes known by what kubelet sent with its container.
      if (!state_.pod(r.sandbox_id())) state_.putPod(*cs.pod);
      state_.putContainer(std::move(r));
      return;
    }
    case Effect::kNone: {
      if (!ok || !cs.container) return;
      const bool resources_changed = spec.mutableResources && !cs.resources.empty();
      if (!cs.decision && !resources_changed) return;
      hv1::ContainerRecord r = *cs.container;
      if (cs.decision) addDecision(r, *cs.decision);
      if (resources_changed) *r.mutable_resources() = toWire(cs.resources);
      state_.putContainer(std::move(r));
      return;
    }
    case Effect::kRemovesContainer:
      if (gone) state_.removeContainer(std::string(spec.containerId(*call.request)));
      return;
    case Effect::kRemovesSandbox:
      if (gone) state_.removePod(std::string(spec.sandboxId(*call.request)));
      return;
  }
}

void HookInterceptor::runPost(InterceptedCall& call, const CallState& cs) {
  // The outcome is not needed: post-stage failures were logged and counted by the chain.
  cs.chain->run(inputOf(call, cs, Phase::kPost), std::chrono::steady_clock::time_point::max());
}

}  // namespace crihook
