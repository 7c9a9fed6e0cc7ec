#include "hooks/remote/remote_hooks.h"

#include <map>
#include <set>

#include "base/call_slots.h"
#include "base/grpc_channel.h"
#include "base/quote.h"
#include "base/text.h"
#include "cri-api/crihook_hook_v1.pb.h"
#include "cri-api/koordinator_runtime_v1alpha1.pb.h"
#include "hooks/adjustment_schema.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;
namespace koord = ::runtime::v1alpha1;
namespace hv1 = ::crihook::hook::v1;
using Clock = std::chrono::steady_clock;

// A reply is an adjustment of a few KiB; gRPC's default cap (4 MiB) made
// explicit, so what a server may make crihookd hold is written down here.
constexpr size_t kMaxHookReplyBytes = 4 << 20;

// A hook run without a deadline (none of the chain's runs: it gives every
// hook its timeout) still ends.
constexpr auto kDefaultHookDeadline = std::chrono::milliseconds(2000);

Clock::time_point deadlineOf(const HookInput& in) {
  return in.deadline == Clock::time_point::max() ? Clock::now() + kDefaultHookDeadline
                                                 : in.deadline;
}

HookDecision failed(const absl::Status& s, const std::string& endpoint) {
  return HookDecision::error(absl::Status(
      s.code(), cat("hook server ", endpoint, ": ", boundedMessage(sv(s.message()), 1024))));
}

// `reply` from `method` of a server, parsed as `Reply`.
template <typename Reply>
absl::StatusOr<Reply> callServer(const GrpcChannel& channel, std::string_view method,
                                 const google::protobuf::Message& request,
                                 Clock::time_point deadline) {
  auto bytes = channel.call(method, request.SerializeAsString(), deadline);
  if (!bytes.ok()) return bytes.status();
  Reply reply;
  if (!reply.ParseFromString(*bytes)) {
    return absl::InternalError(
        cat("reply to ", method, " does not parse as ", Reply::descriptor()->full_name()));
  }
  return reply;
}

// What both protocols' hooks share: a name, a socket, the stages they are
// called on, and a gRPC deadline that bounds every call. The channel
// (base/grpc_channel.h) keeps a finished run's connection for the next one
// and drops it when the server goes away, so a server that restarts is
// reached again on the next run. Its calls are bounded by its limits
// (RemoteHookLimits): one server's hang never holds another's calls.
class RemoteHook : public Hook {
 public:
  RemoteHook(std::string name, std::string path, const std::vector<StageId>& stages,
             RemoteHookLimits limits)
      : name_(std::move(name)),
        path_(std::move(path)),
        stages_(stageMask(stages)),
        channel_(path_, {.max_reply_bytes = kMaxHookReplyBytes}),
        slots_(limits.calls, limits.queue) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return (stages_ & stageBit(m, p)) != 0;
  }
  bool honoursDeadline() const override { return true; }

 protected:
  // `method` of the server, in one of its call slots: waits for one until
  // `deadline`, refused at once when its queue is full.
  template <typename Reply>
  absl::StatusOr<Reply> ask(std::string_view method, const google::protobuf::Message& request,
                            Clock::time_point deadline) {
    switch (slots_.acquire(deadline)) {
      case CallSlots::Got::kSlot:
        break;
      case CallSlots::Got::kQueueFull:
        return absl::ResourceExhaustedError(cat("refused: ", slots_.slots(),
                                                " calls in flight and ", slots_.queue(),
                                                " waiting for one already"));
      case CallSlots::Got::kTimedOut:
        return absl::DeadlineExceededError(
            cat("none of its ", slots_.slots(), " calls in flight ended before the deadline"));
    }
    CallSlots::Slot held(slots_);
    return callServer<Reply>(channel_, method, request, deadline);
  }

  std::string name_, path_;
  uint32_t stages_;
  GrpcChannel channel_;
  CallSlots slots_;
};

class CrihookRemoteHook final : public RemoteHook {
 public:
  CrihookRemoteHook(std::string name, std::string path, std::vector<StageId> stages,
                    RemoteHookLimits limits)
      : RemoteHook(std::move(name), std::move(path), stages, limits) {}

  HookDecision run(const HookInput& in) override {
    auto reply = ask<hv1::HookResponse>("/crihook.hook.v1.HookService/Handle", hookRequest(in),
                                        deadlineOf(in));
    if (!reply.ok()) return failed(reply.status(), path_);
    return hookDecision(*reply, in.phase, name_);
  }
};

// runtime.v1 and Koordinator's runtime.v1alpha1 LinuxContainerResources have
// the same fields under the same numbers and types (Koordinator copied the
// CRI message), so the bytes of one are the other.
koord::LinuxContainerResources toKoordinator(const v1::LinuxContainerResources& r) {
  koord::LinuxContainerResources out;
  out.ParseFromString(r.SerializeAsString());
  return out;
}

// What a Koordinator server's answer decides. koordlet answers with the
// whole request echoed and its changes made in it, so only a value that
// differs from what this server was sent counts as its decision: an echoed
// value is no opinion and never conflicts with another hook's. Which fields
// are taken, and when, follows koord-runtime-proxy's merge of an answer
// (pkg/runtimeproxy/resexecutor/cri/{pod,container,utils}.go at Koordinator
// a7a1b76): maps are merged key by key, never shrunk; a cgroup parent only
// when set.
void takeMap(const google::protobuf::Map<std::string, std::string>& sent,
             const google::protobuf::Map<std::string, std::string>& answer,
             std::map<std::string, std::string>& out) {
  for (const auto& [k, v] : answer) {
    auto it = sent.find(k);
    if (it == sent.end() || it->second != v) out[k] = v;
  }
}

// Container resources, as koord-runtime-proxy's updateResource() takes them:
// each resource field of the schema by its own rule (adjustment_schema.cc:
// which values count, hugepages never). runtime.v1's and Koordinator's
// LinuxContainerResources are the same message (toKoordinator), so the
// schema's CRI rows read Koordinator's bytes.
void takeResources(const koord::LinuxContainerResources& sent,
                   const koord::LinuxContainerResources& answer, Adjustment& a) {
  v1::LinuxContainerResources was, now;
  was.ParseFromString(sent.SerializeAsString());
  now.ParseFromString(answer.SerializeAsString());
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->resource()) f->takeKoordinatorResources(was, now, a);
  }
}

// The environment a server answers (container_envs, a map: the whole
// environment as it wants it) as changes to the container's list, so the
// list keeps its order: a name with a new value is set in place, a name the
// answer leaves out is removed, a new name is appended (in name order, a map
// has none). koord-runtime-proxy instead rebuilds the list from the map in
// Go's random map order. An empty map is no change: proto3 cannot tell it
// from an absent one (a server that predates container_envs, or has nothing
// to say), and koord-runtime-proxy keeps the environment then too
// (`if response.GetContainerEnvs() != nil`, nil for an empty map on the wire).
void takeEnv(const google::protobuf::RepeatedPtrField<v1::KeyValue>& sent,
             const google::protobuf::Map<std::string, std::string>& answer, Adjustment& a) {
  if (answer.empty()) return;
  std::map<std::string, std::string> last;  // what the server was sent: a name's last value
  for (const v1::KeyValue& kv : sent) last[kv.key()] = kv.value();
  std::set<std::string> seen;
  for (const v1::KeyValue& kv : sent) {
    if (!seen.insert(kv.key()).second) continue;
    auto it = answer.find(kv.key());
    if (it == answer.end()) {
      a.env_remove.push_back(kv.key());
    } else if (it->second != last[kv.key()]) {
      a.env.push_back({kv.key(), it->second});
    }
  }
  std::map<std::string, std::string> added;
  for (const auto& [k, v] : answer) {
    if (!last.count(k)) added[k] = v;
  }
  for (auto& [k, v] : added) a.env.push_back({k, std::move(v)});
}

void podMeta(const HookInput& in, koord::PodSandboxMetadata& meta) {
  if (in.pod) {
    const auto& m = in.pod->config().metadata();
    meta.set_name(m.name());
    meta.set_uid(m.uid());
    meta.set_namespace_(m.namespace_());
    meta.set_attempt(m.attempt());
  } else if (in.identity) {
    meta.set_name(in.identity->pod_name);
    meta.set_uid(in.identity->pod_uid);
    meta.set_namespace_(in.identity->pod_namespace);
  }
}

// Koordinator's service (apis/runtime/v1alpha1/api.proto: package
// runtime.v1alpha1, service RuntimeHookService); cri-api/koordinator_proto_test
// checks the RPC names against the proto.
constexpr std::string_view kKoordinatorService = "/runtime.v1alpha1.RuntimeHookService/";

// A pod's stage as koord-runtime-proxy sends it.
koord::PodSandboxHookRequest podRequest(const HookInput& in) {
  koord::PodSandboxHookRequest req;
  podMeta(in, *req.mutable_pod_meta());
  if (in.pod) {
    const auto& c = in.pod->config();
    req.set_runtime_handler(in.pod->runtime_handler());
    req.mutable_labels()->insert(c.labels().begin(), c.labels().end());
    req.mutable_annotations()->insert(c.annotations().begin(), c.annotations().end());
    req.set_cgroup_parent(c.linux().cgroup_parent());
    if (c.linux().has_overhead()) *req.mutable_overhead() = toKoordinator(c.linux().overhead());
    if (c.linux().has_resources()) *req.mutable_resources() = toKoordinator(c.linux().resources());
  }
  return req;
}

// What a pod-level answer decides; koord-runtime-proxy takes no resources
// from one.
void takePodAnswer(const koord::PodSandboxHookRequest& req,
                   const koord::PodSandboxHookResponse& reply, Adjustment& a) {
  takeMap(req.labels(), reply.labels(), a.labels);
  takeMap(req.annotations(), reply.annotations(), a.annotations);
  if (!reply.cgroup_parent().empty() && reply.cgroup_parent() != req.cgroup_parent())
    a.cgroup_parent = reply.cgroup_parent();
}

// The container's config the server is sent: what the runtime has (sent), or
// what kubelet asked for if no hook changed it; null when the call has none.
const v1::ContainerConfig* containerConfig(const HookInput& in) {
  if (!in.container) return nullptr;
  return in.container->has_sent() ? &in.container->sent() : &in.container->requested();
}

// A container's stage as koord-runtime-proxy sends it.
koord::ContainerResourceHookRequest containerRequest(const HookInput& in) {
  koord::ContainerResourceHookRequest req;
  podMeta(in, *req.mutable_pod_meta());
  if (in.pod) {
    const auto& c = in.pod->config();
    req.mutable_pod_annotations()->insert(c.annotations().begin(), c.annotations().end());
    req.mutable_pod_labels()->insert(c.labels().begin(), c.labels().end());
    req.set_pod_cgroup_parent(c.linux().cgroup_parent());
    if (c.linux().has_resources())
      *req.mutable_pod_resources() = toKoordinator(c.linux().resources());
  }
  // koord-runtime-proxy always sends resources, all zero if none are known.
  req.mutable_container_resources();
  if (const v1::ContainerConfig* config = containerConfig(in)) {
    auto* meta = req.mutable_container_meta();
    meta->set_name(config->metadata().name());
    meta->set_attempt(config->metadata().attempt());
    meta->set_id(in.container->id());
    req.mutable_container_annotations()->insert(config->annotations().begin(),
                                                config->annotations().end());
    if (config->linux().has_resources())
      *req.mutable_container_resources() = toKoordinator(config->linux().resources());
    // A map, as Go's does it: a name given twice keeps its last value.
    for (const v1::KeyValue& kv : config->envs())
      (*req.mutable_container_envs())[kv.key()] = kv.value();
  } else if (in.identity) {
    req.mutable_container_meta()->set_id(in.identity->container_id);
  }
  if (in.method == LifecycleMethod::kUpdateContainerResources && in.request) {
    const auto& u = static_cast<const v1::UpdateContainerResourcesRequest&>(*in.request);
    *req.mutable_container_resources() = toKoordinator(u.linux());
  }
  return req;
}

// What a container-level answer decides.
void takeContainerAnswer(const HookInput& in, const koord::ContainerResourceHookRequest& req,
                         const koord::ContainerResourceHookResponse& reply, Adjustment& a) {
  takeMap(req.container_annotations(), reply.container_annotations(), a.annotations);
  if (reply.has_container_resources())
    takeResources(req.container_resources(), reply.container_resources(), a);
  // The pod's cgroup parent, which the runtime reads from CreateContainer's
  // sandbox config to place the container.
  if (!reply.pod_cgroup_parent().empty() && reply.pod_cgroup_parent() != req.pod_cgroup_parent())
    a.cgroup_parent = reply.pod_cgroup_parent();
  // koord-runtime-proxy takes the environment on CreateContainer only.
  const v1::ContainerConfig* config = containerConfig(in);
  if (in.method == LifecycleMethod::kCreateContainer && config)
    takeEnv(config->envs(), reply.container_envs(), a);
}

// The RuntimeHookService call of a container's stage; null for a stage
// Koordinator's protocol does not have.
const char* containerRpc(const HookInput& in) {
  switch (in.method) {
    case LifecycleMethod::kCreateContainer:
      return "PreCreateContainerHook";
    case LifecycleMethod::kStartContainer:
      return in.phase == Phase::kPre ? "PreStartContainerHook" : "PostStartContainerHook";
    case LifecycleMethod::kStopContainer:
      return "PostStopContainerHook";
    case LifecycleMethod::kUpdateContainerResources:
      return "PreUpdateContainerResourcesHook";
    default:
      return nullptr;
  }
}

class KoordinatorHook final : public RemoteHook {
 public:
  KoordinatorHook(std::string name, std::string path, std::vector<StageId> stages,
                  RemoteHookLimits limits)
      : RemoteHook(std::move(name), std::move(path), stages, limits) {}

  bool appliesTo(const HookInput& in) const override {
    if (!in.pod) return true;
    auto it = in.pod->config().labels().find(kSkipHookServerLabel);
    return it == in.pod->config().labels().end() || it->second != "true";
  }

  HookDecision run(const HookInput& in) override {
    const Clock::time_point deadline = deadlineOf(in);
    Adjustment a;
    if (in.method == LifecycleMethod::kRunPodSandbox ||
        in.method == LifecycleMethod::kStopPodSandbox) {
      const koord::PodSandboxHookRequest req = podRequest(in);
      auto answer = ask<koord::PodSandboxHookResponse>(
          cat(kKoordinatorService, in.method == LifecycleMethod::kRunPodSandbox
                                       ? "PreRunPodSandboxHook"
                                       : "PostStopPodSandboxHook"),
          req, deadline);
      if (!answer.ok()) return failed(answer.status(), path_);
      takePodAnswer(req, *answer, a);
    } else {
      const char* rpc = containerRpc(in);
      if (rpc == nullptr) return HookDecision::proceed();  // not a stage of Koordinator's protocol
      const koord::ContainerResourceHookRequest req = containerRequest(in);
      auto answer =
          ask<koord::ContainerResourceHookResponse>(cat(kKoordinatorService, rpc), req, deadline);
      if (!answer.ok()) return failed(answer.status(), path_);
      takeContainerAnswer(in, req, *answer, a);
    }
    if (in.phase == Phase::kPost) return HookDecision::proceed();
    // The same checks as any other hook's reply (a cpuset that is not a list, ...).
    auto checked = fromWire(toWire(a), cat("reply of hook ", name_));
    if (!checked.ok()) return HookDecision::error(checked.status());
    return HookDecision::proceed(std::move(*checked));
  }
};

}  // namespace

std::shared_ptr<Hook> makeCrihookRemoteHook(std::string name, std::string socket_path,
                                            std::vector<StageId> stages, RemoteHookLimits limits) {
  return std::make_shared<CrihookRemoteHook>(std::move(name), std::move(socket_path),
                                             std::move(stages), limits);
}

std::shared_ptr<Hook> makeKoordinatorHook(std::string name, std::string socket_path,
                                          std::vector<StageId> stages, RemoteHookLimits limits) {
  return std::make_shared<KoordinatorHook>(std::move(name), std::move(socket_path),
                                           std::move(stages), limits);
}

bool isKoordinatorStageWithoutRpc(std::string_view type) {
  return type == "PreRemoveRunPodSandbox";
}

absl::StatusOr<StageId> koordinatorStage(std::string_view type) {
  static const std::pair<const char*, StageId> kTypes[] = {
      {"PreRunPodSandbox", {LifecycleMethod::kRunPodSandbox, Phase::kPre}},
      {"PostStopPodSandbox", {LifecycleMethod::kStopPodSandbox, Phase::kPost}},
      {"PreCreateContainer", {LifecycleMethod::kCreateContainer, Phase::kPre}},
      {"PreStartContainer", {LifecycleMethod::kStartContainer, Phase::kPre}},
      {"PostStartContainer", {LifecycleMethod::kStartContainer, Phase::kPost}},
      {"PostStopContainer", {LifecycleMethod::kStopContainer, Phase::kPost}},
      {"PreUpdateContainerResources", {LifecycleMethod::kUpdateContainerResources, Phase::kPre}},
  };
  std::string known;
  for (const auto& [name, stage] : kTypes) {
    if (type == name) return stage;
    known += cat(known.empty() ? "" : ", ", name);
  }
  return absl::InvalidArgumentError(
      cat("unknown runtime hook \"", type, "\"; Koordinator's are ", known));
}

}  // namespace crihook
