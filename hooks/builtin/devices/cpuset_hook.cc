#include "hooks/builtin/devices/cpuset_hook.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/devices/allocation_hook.h"
#include "hooks/builtin/devices/cpu_pools.h"
#include "hooks/runtime_sandboxes.h"
#include "topology/topology.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

class CpusetHook final : public AllocationHook, public Reconciler {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json,
                    const BuiltinContext& context) {
    auto s =
        configure(name, settings_json, "cpuset", [&](const HookSettingsReader& r) -> absl::Status {
          for (auto [key, out] : {std::pair{"unset_cpu_quota", &unset_cpu_quota_},
                                  std::pair{"share_pool", &share_pool_}}) {
            const nlohmann::json* v = r.get(key);
            if (v == nullptr) continue;
            if (!v->is_boolean()) return r.error(key, "expected true or false");
            *out = v->get<bool>();
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    CpuPools::UpdateFn update;
    if (!context.runtime_endpoint.empty()) {
      update = [endpoint = context.runtime_endpoint](const std::string& id, const std::string& cpus,
                                                     const std::string& mems) {
        return updateRuntimeContainerCpuset(endpoint, id, cpus, mems, kRuntimeCallTimeout);
      };
    }
    pools_ = std::make_unique<CpuPools>(
        context.state_dir.empty() ? "" : cat(context.state_dir, "/cpuset/", name, ".json"),
        std::move(update), log_);
    if (share_pool_) pools_->start();
    return absl::OkStatus();
  }

  bool subscribes(LifecycleMethod m, Phase p) const override {
    switch (m) {
      case LifecycleMethod::kCreateContainer:
        return p == Phase::kPre || share_pool_;
      case LifecycleMethod::kUpdateContainerResources:
        return true;
      case LifecycleMethod::kStopContainer:
      case LifecycleMethod::kRemoveContainer:
      case LifecycleMethod::kStopPodSandbox:
      case LifecycleMethod::kRemovePodSandbox:
        return p == Phase::kPost && share_pool_;
      default:
        return false;
    }
  }

  HookDecision run(const HookInput& in) override {
    if (in.phase == Phase::kPre) return AllocationHook::run(in);
    if (share_pool_) observe(in);
    return HookDecision::proceed();
  }

  // Containers of sandboxes the runtime no longer runs (stopped or removed
  // while crihookd was down) hold no CPUs.
  void reconcile(const std::vector<RuntimeSandbox>& sandboxes,
                 std::chrono::system_clock::time_point listed_at) override {
    if (!share_pool_) return;
    std::set<std::string> ready;
    for (const auto& s : sandboxes) {
      if (s.ready) ready.insert(s.id);
    }
    pools_->keepOnly(ready, listed_at);
  }

 private:
  // Each runtime call the pools make waits this long at most: a runtime that
  // does not answer delays the next move, never a CRI call.
  static constexpr std::chrono::seconds kRuntimeCallTimeout{10};

  // A NUMA-aware pod without a cpuset: its NUMA nodes with CPU allocated.
  struct SharedPlacement {
    std::vector<int> node_cpus;  // every CPU of those nodes
    std::string mems;            // the nodes
  };

  absl::StatusOr<std::optional<SharedPlacement>> sharedPlacement(const HookInput& in,
                                                                 const ResourceStatus& status,
                                                                 const std::string& pod) const {
    // koordlet leaves BE pods to its BE share pools (the BECPUManager gate, off by default).
    const auto& labels = in.pod->config().labels();
    if (auto q = labels.find(std::string(kQosClassLabel)); q != labels.end() && q->second == "BE")
      return std::nullopt;
    std::set<int> nodes;
    for (size_t i = 0; i < status.numa_nodes.size(); ++i) {
      const NumaNodeResources& n = status.numa_nodes[i];
      bool has_cpu = false;
      for (const char* key : {"cpu", "kubernetes.io/batch-cpu"}) {
        auto it = n.resources.find(key);
        if (it == n.resources.end()) continue;
        auto q = parseQuantity(it->second);
        if (q && *q > 0) has_cpu = true;
      }
      if (!has_cpu) continue;
      const auto& topo_nodes = in.topology ? in.topology->nodes : std::vector<topo::NumaNode>{};
      auto node = std::find_if(topo_nodes.begin(), topo_nodes.end(),
                               [&](const topo::NumaNode& x) { return x.id == n.node; });
      if (node == topo_nodes.end() || node->cpus.empty()) {
        return absl::FailedPreconditionError(
            cat("annotation ", kResourceStatusAnnotation, " of pod ", pod, ": numaNodeResources[",
                i, "].node: no NUMA node ", n.node, " with CPUs on this node"));
      }
      nodes.insert(n.node);
    }
    if (nodes.empty()) return std::nullopt;
    SharedPlacement out;
    std::set<int> cpus;
    for (const auto& node : in.topology->nodes) {
      if (nodes.count(node.id)) cpus.insert(node.cpus.begin(), node.cpus.end());
    }
    out.node_cpus.assign(cpus.begin(), cpus.end());
    out.mems = topo::formatCpuList({nodes.begin(), nodes.end()});
    return out;
  }

  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    const std::string* text = annotation(in, kResourceStatusAnnotation);
    if (text == nullptr) return Adjustment{};
    auto status = parseResourceStatus(*text, pod, in.topology.get());
    if (!status.ok()) return status.status();
    if (!status->cpuset) {
      if (!share_pool_) return Adjustment{};
      auto placement = sharedPlacement(in, *status, pod);
      if (!placement.ok()) return placement.status();
      if (!*placement) return Adjustment{};
      // The NUMA nodes' CPUs that no pinned container holds, as koordlet's
      // share pool of those nodes; kept so at kubelet's updates too.
      Adjustment a;
      a.cpuset_cpus = topo::formatCpuList(pools_->sharedCpus((*placement)->node_cpus));
      a.cpuset_mems = (*placement)->mems;
      return a;
    }
    std::vector<int> cpus;
    topo::parseCpuList(*status->cpuset, cpus);  // checked by the parser
    std::set<int> nodes;
    for (int c : cpus) {
      const topo::Cpu* cpu = in.topology ? in.topology->cpu(c) : nullptr;
      if (cpu == nullptr) {
        return absl::FailedPreconditionError(cat("annotation ", kResourceStatusAnnotation,
                                                 " of pod ", pod, ": cpuset: no CPU ", c,
                                                 " on this node"));
      }
      if (cpu->node >= 0) nodes.insert(cpu->node);
    }
    Adjustment a;
    a.cpuset_cpus = topo::formatCpuList(cpus);
    if (!nodes.empty()) a.cpuset_mems = topo::formatCpuList({nodes.begin(), nodes.end()});
    // A pinned container is not throttled below its own CPUs (koordlet's
    // UnsetContainerCPUQuota, koordinator#489): runc writes -1 / "max".
    if (unset_cpu_quota_) a.cpu_quota = -1;
    // Held from now, before the runtime creates it: a shared container
    // placed meanwhile already keeps off these CPUs.
    if (share_pool_ && in.method == LifecycleMethod::kCreateContainer && in.request != nullptr) {
      pools_->reserve(creationKey(in), std::move(cpus));
    }
    return a;
  }

  static std::string creationKey(const HookInput& in) {
    const auto& req = static_cast<const ::runtime::v1::CreateContainerRequest&>(*in.request);
    return cat(req.pod_sandbox_id(), "/", req.config().metadata().name(), "/",
               req.config().metadata().attempt());
  }

  // Post stages: who holds which CPUs now.
  void observe(const HookInput& in) {
    namespace v1 = ::runtime::v1;
    const bool ok = in.backend_status.ok() && in.response != nullptr;
    // The runtime no longer runs it: the call succeeded, or it had none.
    const bool gone = ok || in.backend_status.code() == absl::StatusCode::kNotFound;
    switch (in.method) {
      case LifecycleMethod::kCreateContainer:
        return created(in, ok);
      case LifecycleMethod::kUpdateContainerResources:
        return updated(in, ok);
      case LifecycleMethod::kStopContainer:
        if (gone) {
          pools_->forget(static_cast<const v1::StopContainerRequest&>(*in.request).container_id());
        }
        return;
      case LifecycleMethod::kRemoveContainer:
        if (gone) {
          pools_->forget(
              static_cast<const v1::RemoveContainerRequest&>(*in.request).container_id());
        }
        return;
      case LifecycleMethod::kStopPodSandbox:
        if (gone) {
          pools_->forgetSandbox(
              static_cast<const v1::StopPodSandboxRequest&>(*in.request).pod_sandbox_id());
        }
        return;
      case LifecycleMethod::kRemovePodSandbox:
        if (gone) {
          pools_->forgetSandbox(
              static_cast<const v1::RemovePodSandboxRequest&>(*in.request).pod_sandbox_id());
        }
        return;
      default:
        return;
    }
  }

  // PostCreateContainer: a pin reserved at the pre stage is held under the
  // container's id (or given back when the runtime did not create it).
  void created(const HookInput& in, bool ok) {
    const auto& req = static_cast<const ::runtime::v1::CreateContainerRequest&>(*in.request);
    const std::string key = creationKey(in);
    if (!ok) {
      pools_->drop(key);
      return;
    }
    const std::string& id =
        static_cast<const ::runtime::v1::CreateContainerResponse&>(*in.response).container_id();
    CpuOwner owner{req.pod_sandbox_id(), in.pod ? podName(in) : "", req.config().metadata().name()};
    pools_->commit(key, id, owner);
    recordShared(in, id, std::move(owner), req.config().linux().resources().cpuset_cpus());
  }

  // PostUpdateContainerResources: what kubelet's update gave the container.
  void updated(const HookInput& in, bool ok) {
    const auto& req =
        static_cast<const ::runtime::v1::UpdateContainerResourcesRequest&>(*in.request);
    if (!in.container) return;
    if (!ok) {
      pools_->applied(req.container_id(), "");  // unknown: the thread sets it again
      return;
    }
    recordShared(in, req.container_id(),
                 {in.container->sandbox_id(), in.pod ? podName(in) : "",
                  in.container->requested().metadata().name()},
                 req.linux().cpuset_cpus());
  }

  // Whether another hook decided the container's cpuset at its creation
  // (koordlet's share pool, by [hooks.owners] cpuset): that hook keeps it
  // (koordlet moves its containers itself); this one never moves it.
  bool cpusetDecidedElsewhere(const HookInput& in) const {
    if (!in.container) return false;
    for (const auto& d : in.container->decisions()) {
      if (d.stage() != "PreCreateContainer") continue;
      auto it = d.owners().find("cpuset_cpus");
      return it != d.owners().end() && it->second != name_;
    }
    return false;
  }

  // Container `id` of a NUMA-aware pod without a cpuset, which the runtime
  // now runs on `applied`, is moved from now on as pins come and go.
  void recordShared(const HookInput& in, const std::string& id, CpuOwner owner,
                    const std::string& applied) {
    if (!in.pod || cpusetDecidedElsewhere(in)) return;
    const std::string* text = annotation(in, kResourceStatusAnnotation);
    if (text == nullptr) return;
    const std::string pod = podName(in);
    auto status = parseResourceStatus(*text, pod);
    if (!status.ok() || status->cpuset) return;  // refused or pinned at the pre stage
    auto placement = sharedPlacement(in, *status, pod);
    if (!placement.ok() || !*placement) return;
    pools_->addShared(id, std::move(owner), std::move((*placement)->node_cpus),
                      std::move((*placement)->mems), applied);
  }

  bool unset_cpu_quota_ = true;
  bool share_pool_ = true;
  std::unique_ptr<CpuPools> pools_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeCpusetHook(const std::string& name,
                                                     const std::string& settings_json,
                                                     const BuiltinContext& context) {
  auto hook = std::make_shared<CpusetHook>();
  if (auto s = hook->init(name, settings_json, context); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
