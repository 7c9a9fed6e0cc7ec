#include "hooks/builtin/devices/device_hooks.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "base/logging.h"
#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/builtin/devices/cpu_pools.h"
#include "hooks/builtin/devices/host_paths.h"
#include "hooks/builtin/settings.h"
#include "hooks/process_env.h"
#include "hooks/runtime_sandboxes.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

constexpr const char* kNvidiaControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                               "nvidia-modeset"};

// The last annotation a hook parsed, and what it said: every container of a
// pod carries the same one.
template <typename T>
class LastParsed {
 public:
  template <typename Parse>
  absl::StatusOr<std::shared_ptr<const T>> get(const std::string& text, Parse parse) {
    {
      std::lock_guard lock(mu_);
      if (value_ && text_ == text) return value_;
    }
    absl::StatusOr<T> parsed = parse();
    if (!parsed.ok()) return parsed.status();
    auto value = std::make_shared<const T>(std::move(*parsed));
    std::lock_guard lock(mu_);
    text_ = text;
    value_ = value;
    return value;
  }

 private:
  std::mutex mu_;
  std::string text_;
  std::shared_ptr<const T> value_;
};

// Keys seen, the oldest forgotten past `capacity`: "once per pod" without
// growing with every pod the node ever ran. Thread-safe.
class BoundedSet {
 public:
  explicit BoundedSet(size_t capacity) : capacity_(capacity) {}
  // True when `key` was not in the set (now it is).
  bool insert(const std::string& key) {
    std::lock_guard lock(mu_);
    if (!keys_.insert(key).second) return false;
    order_.push_back(key);
    if (order_.size() > capacity_) {
      keys_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::set<std::string> keys_;
  std::deque<std::string> order_;
};

// What the three hooks share: settings, the pod's annotations, the error policy.
class DeviceHook : public Hook {
 public:
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
  }
  // Memory only: a snapshot, the pod, and HostPaths for what is on the host.
  bool runsInline() const override { return true; }

  HookDecision run(const HookInput& in) override {
    if (!in.pod) return HookDecision::proceed();
    absl::StatusOr<Adjustment> a = decide(in, podName(in));
    if (a.ok()) return HookDecision::proceed(std::move(*a));
    if (!skip_on_error_) return HookDecision::reject(a.status());
    log_->warn("{}; container created without it (on_error = skip)", sv(a.status().message()));
    return HookDecision::proceed();
  }

 protected:
  // Reads the settings every device hook takes; leaves the rest to `more`.
  absl::Status configure(const std::string& name, const std::string& settings_json,
                         std::initializer_list<std::string_view> known,
                         const std::function<absl::Status(const HookSettingsReader&)>& more) {
    name_ = name;
    log_ = logger("hook." + name);
    auto r = HookSettingsReader::parse(name, settings_json);
    if (!r.ok()) return r.status();
    std::vector<std::string_view> all = {"device_root", "on_error"};
    all.insert(all.end(), known.begin(), known.end());
    if (auto s = r->checkKnown(all); !s.ok()) return s;
    if (auto s = r->absolutePath("device_root", device_root_); !s.ok()) return s;
    auto policy = r->oneOf("on_error", {"reject", "skip"});
    if (!policy.ok()) return policy.status();
    skip_on_error_ = *policy == "skip";
    return more(*r);
  }

  virtual absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) = 0;

  static std::string podName(const HookInput& in) {
    const auto& m = in.pod->config().metadata();
    return cat(m.namespace_(), "/", m.name());
  }
  static const std::string* annotation(const HookInput& in, std::string_view key) {
    const auto& a = in.pod->config().annotations();
    auto it = a.find(std::string(key));
    return it == a.end() ? nullptr : &it->second;
  }
  // The pod's allocation (an empty one without the annotation), parsed once
  // per distinct annotation.
  absl::StatusOr<std::shared_ptr<const PodAllocation>> allocation(const HookInput& in,
                                                                  const std::string& pod) {
    const std::string* text = annotation(in, kDeviceAllocatedAnnotation);
    if (text == nullptr) return std::make_shared<const PodAllocation>();
    return allocation_.get(*text, [&] { return parseDeviceAllocated(*text, pod); });
  }
  // A CRI device for /dev/<node>, found at <device_root>/<node> on the host.
  DeviceSpec device(const std::string& node) const {
    return {"/dev/" + node, device_root_ + "/" + node, "rw"};
  }
  static absl::Status notHere(std::string_view pod, std::string_view field, std::string_view why) {
    return absl::FailedPreconditionError(
        cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod, ": ", field, ": ", why));
  }

  std::string name_;
  std::string device_root_ = "/dev";
  bool skip_on_error_ = false;
  std::shared_ptr<spdlog::logger> log_;
  LastParsed<PodAllocation> allocation_;
};

class GpuHook final : public DeviceHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    auto s = configure(name, settings_json,
                       {"visible_devices", "hami_core_library", "hami_core_lock_dir"},
                       [&](const HookSettingsReader& r) {
                         auto v = r.oneOf("visible_devices", {"uuid", "index"});
                         if (!v.ok()) return v.status();
                         by_index_ = *v == "index";
                         if (auto s = r.absolutePath("hami_core_library", hami_library_); !s.ok())
                           return s;
                         return r.absolutePath("hami_core_lock_dir", hami_lock_dir_);
                       });
    if (!s.ok()) return s;
    // Every node this hook hands out is named nvidia*.
    paths_ = std::make_unique<HostPaths>(
        HostPaths::Spec{device_root_, "nvidia", {hami_library_, hami_lock_dir_}}, log_,
        processEnv());
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    auto parsed = allocation(in, pod);
    if (!parsed.ok()) return parsed.status();
    const PodAllocation* alloc = parsed->get();
    if (alloc->gpu.empty()) return Adjustment{};
    Adjustment a;
    std::string visible;
    std::vector<size_t> nvidia;  // indexes of the NVIDIA GPUs, in allocation order
    nlohmann::json passed = nlohmann::json::array();
    for (size_t i = 0; i < alloc->gpu.size(); ++i) {
      const DeviceAllocation& d = alloc->gpu[i];
      const std::string field = cat("gpu[", i, "]");
      if (!isNvidiaGpu(d, in.topology.get())) {
        passed.push_back(passthroughName(d));
        continue;
      }
      const topo::Gpu* g = in.topology ? in.topology->gpuByMinor(d.minor) : nullptr;
      if (g == nullptr)
        return notHere(pod, field + ".minor", cat("no GPU with minor ", d.minor, " on this node"));
      if (!d.id.empty() && !g->uuid.empty() && d.id != g->uuid && d.id != g->address) {
        return notHere(pod, field + ".id",
                       cat("GPU minor ", d.minor, " is ", g->uuid, " on this node, not ",
                           quote(passthroughName(d))));
      }
      if (!d.vfs.empty()) {
        return notHere(pod, field + ".extension.vfs",
                       cat(d.vfs.size(), " virtual function(s) of GPU minor ", d.minor,
                           ": a container gets a whole NVIDIA GPU by its /dev/nvidia node; a "
                           "GPU's SR-IOV functions are for virtual machines"));
      }
      const std::string node = cat("nvidia", d.minor);
      if (!paths_->hasEntry(node))
        return notHere(pod, field, cat("no device node ", device_root_, "/", node));
      a.devices.push_back(device(node));
      visible += cat(visible.empty() ? "" : ",",
                     by_index_ || g->uuid.empty() ? std::to_string(d.minor) : g->uuid);
      nvidia.push_back(i);
    }
    if (!nvidia.empty()) {
      for (const char* control : kNvidiaControlNodes) {
        if (paths_->hasEntry(control)) a.devices.push_back(device(control));
      }
      a.env.push_back({"NVIDIA_VISIBLE_DEVICES", visible});
      if (auto s = hamiCore(in, *alloc, nvidia, pod, a); !s.ok()) return s;
    }
    if (!passed.empty()) {
      // Another vendor's accelerator (Koordinator's gpu type carries them
      // too): its own device plugin sets the container up.
      std::string names = passed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      const std::string& uid = in.pod->config().metadata().uid();
      if (passthrough_logged_.insert(uid.empty() ? pod : uid)) {
        log_->info("pod {}: gpu {} not NVIDIA's: passed through to its vendor's device plugin", pod,
                   names.size() > 512 ? names.substr(0, 509) + "..." : names);
      }
      a.annotations[std::string(kGpuPassthroughAnnotation)] = std::move(names);
    }
    return a;
  }

  // A shared GPU (gpu-memory-ratio below 100) in a pod that asks for HAMi-core
  // isolation: the limits HAMi-core's library reads, the library preloaded,
  // and the library and its lock directory mounted, as Koordinator's koordlet
  // does. Koordinator compares the label to "HAMi-core" exactly; its own
  // documents also write "hami-core", so case is ignored here.
  // `nvidia`: the NVIDIA GPUs' indexes (HAMi-core is a CUDA library).
  absl::Status hamiCore(const HookInput& in, const PodAllocation& alloc,
                        const std::vector<size_t>& nvidia, const std::string& pod,
                        Adjustment& a) const {
    const auto& labels = in.pod->config().labels();
    auto label = labels.find(std::string(kGpuIsolationProviderLabel));
    auto is_hami = [](std::string_view v) {
      return std::equal(v.begin(), v.end(), std::string_view("hami-core").begin(),
                        std::string_view("hami-core").end(),
                        [](char x, char y) { return std::tolower(x) == y; });
    };
    if (label == labels.end() || !is_hami(label->second)) return absl::OkStatus();
    auto quantity = [&](size_t i, std::string_view resource) -> absl::StatusOr<int64_t> {
      const auto& r = alloc.gpu[i].resources;
      auto it = r.find(std::string(resource));
      const std::string field = cat("gpu[", i, "].resources.", resource);
      if (it == r.end()) {
        return absl::InvalidArgumentError(cat("annotation ", kDeviceAllocatedAnnotation, " of pod ",
                                              pod, ": ", field, ": missing (pod labelled ",
                                              kGpuIsolationProviderLabel, "=", label->second, ")"));
      }
      auto v = parseQuantity(it->second);
      if (!v) {
        return absl::InvalidArgumentError(cat("annotation ", kDeviceAllocatedAnnotation, " of pod ",
                                              pod, ": ", field, ": expected a quantity, got \"",
                                              it->second, "\""));
      }
      return *v;
    };
    // A limit of 0 is never set. Koordinator's scheduler computes a ratio
    // request's memory as ratio x the GPU's koordinator.sh/gpu-memory in the
    // node's Device report; a report without it (NVML did not answer) makes
    // that 0, and HAMi-core would give the pod no memory at all.
    auto memoryOf = [&](size_t i) -> absl::StatusOr<int64_t> {
      auto m = quantity(i, "koordinator.sh/gpu-memory");
      if (!m.ok() || *m > 0) return m;
      const DeviceAllocation& d = alloc.gpu[i];
      const topo::Gpu* g = in.topology ? in.topology->gpuByMinor(d.minor) : nullptr;
      return absl::FailedPreconditionError(
          cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod, ": gpu[", i,
              "].resources.koordinator.sh/gpu-memory: ", *m, " bytes of GPU minor ", d.minor,
              g && !g->uuid.empty() ? cat(" (", g->uuid, ")") : "",
              " for a shared GPU: the node's Device report has no koordinator.sh/gpu-memory for it "
              "(the scheduler's share of an unknown memory is 0); a CUDA_DEVICE_MEMORY_LIMIT of 0 "
              "is never set. Publish a report with the GPUs' memory (NVML on this node)"));
    };
    // Koordinator decides by the first GPU (a shared GPU is one GPU).
    const size_t first = nvidia.front();
    auto ratio = quantity(first, "koordinator.sh/gpu-memory-ratio");
    if (!ratio.ok()) return ratio.status();
    if (*ratio >= 100) return absl::OkStatus();
    auto memory = memoryOf(first);
    if (!memory.ok()) return memory.status();
    a.env.push_back({"CUDA_DEVICE_MEMORY_LIMIT", std::to_string(*memory)});
    // HAMi-core reads a per-device limit first (by CUDA index: the position
    // among the visible GPUs): set them when the GPUs differ.
    for (size_t i : nvidia) {
      auto m = memoryOf(i);
      if (!m.ok()) return m.status();
      if (*m == *memory) continue;
      for (size_t j = 0; j < nvidia.size(); ++j) {
        auto mj = memoryOf(nvidia[j]);
        if (!mj.ok()) return mj.status();
        a.env.push_back({cat("CUDA_DEVICE_MEMORY_LIMIT_", j), std::to_string(*mj)});
      }
      break;
    }
    if (alloc.gpu[first].resources.count("koordinator.sh/gpu-core")) {
      auto core = quantity(first, "koordinator.sh/gpu-core");
      if (!core.ok()) return core.status();
      a.env.push_back({"CUDA_DEVICE_SM_LIMIT", std::to_string(*core)});
    }
    // A bind mount of a missing path would fail in the runtime with a message
    // that names neither the pod nor the setting.
    for (const std::string* path : {&hami_library_, &hami_lock_dir_}) {
      if (!paths_->exists(*path)) {
        return absl::FailedPreconditionError(cat(
            "pod ", pod, " asks for HAMi-core isolation (", kGpuIsolationProviderLabel, "=",
            label->second, "), but ", *path, " is not on this node (hook ", name_, ": settings.",
            path == &hami_library_ ? "hami_core_library" : "hami_core_lock_dir", ")"));
      }
    }
    a.env.push_back({"LD_PRELOAD", hami_library_});
    a.mounts.push_back({hami_library_, hami_library_, /*readonly=*/true});
    a.mounts.push_back({hami_lock_dir_, hami_lock_dir_, /*readonly=*/false});
    return absl::OkStatus();
  }

  bool by_index_ = false;
  BoundedSet passthrough_logged_{4096};  // pods whose passed-through GPUs were logged
  std::string hami_library_ = "/usr/local/vgpu/libvgpu.so";
  std::string hami_lock_dir_ = "/tmp/vgpulock";
  std::unique_ptr<HostPaths> paths_;  // <device_root>/nvidia*, and the two paths above
};

class RdmaHook final : public DeviceHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    auto s = configure(name, settings_json, {"nccl_ib_hca"}, [&](const HookSettingsReader& r) {
      if (const auto* v = r.get("nccl_ib_hca")) {
        if (!v->is_boolean())
          return r.error("nccl_ib_hca", cat("expected true or false, got ", shownJson(*v)));
        nccl_ = v->get<bool>();
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    paths_ = std::make_unique<HostPaths>(HostPaths::Spec{device_root_ + "/infiniband", "", {}},
                                         log_, processEnv());
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    auto parsed = allocation(in, pod);
    if (!parsed.ok()) return parsed.status();
    const PodAllocation* alloc = parsed->get();
    if (alloc->rdma.empty()) return Adjustment{};
    Adjustment a;
    if (!paths_->hasEntry("rdma_cm"))
      return notHere(pod, "rdma", cat("no device node ", device_root_, "/infiniband/rdma_cm"));
    a.devices.push_back(device("infiniband/rdma_cm"));
    std::string hcas;
    auto add = [&](const topo::RdmaDevice& x, const std::string& field) -> absl::Status {
      if (x.uverbs.empty()) return notHere(pod, field, cat(x.name, " has no uverbs device"));
      if (!paths_->hasEntry(x.uverbs))
        return notHere(pod, field, cat("no device node ", device_root_, "/infiniband/", x.uverbs));
      a.devices.push_back(device("infiniband/" + x.uverbs));
      hcas += cat(hcas.empty() ? "" : ",", x.name);
      return absl::OkStatus();
    };
    static const topo::Snapshot kNothing;
    const topo::Snapshot& t = in.topology ? *in.topology : kNothing;
    for (size_t i = 0; i < alloc->rdma.size(); ++i) {
      const std::string field = cat("rdma[", i, "]");
      auto functions = resolveRdma(alloc->rdma[i], i, t, pod);
      if (!functions.ok()) return functions.status();
      if (functions->vfs.empty()) {
        if (auto s = add(*functions->pf, field); !s.ok()) return s;
        continue;
      }
      for (size_t j = 0; j < functions->vfs.size(); ++j) {
        const std::string vfield = cat(field, ".extension.vfs[", j, "]");
        const topo::RdmaDevice* vf = t.rdmaByAddress(functions->vfs[j]);
        if (vf == nullptr)
          return notHere(pod, vfield, cat("VF ", functions->vfs[j], " has no RDMA device"));
        if (auto s = add(*vf, vfield); !s.ok()) return s;
      }
    }
    if (nccl_) a.env.push_back({"NCCL_IB_HCA", hcas});
    return a;
  }

  bool nccl_ = true;
  std::unique_ptr<HostPaths> paths_;  // the entries of <device_root>/infiniband
};

class CpusetHook final : public DeviceHook, public Reconciler {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json,
                    const BuiltinContext& context) {
    auto s = configure(name, settings_json, {"unset_cpu_quota", "share_pool"},
                       [&](const HookSettingsReader& r) -> absl::Status {
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
    if (in.phase == Phase::kPre) return DeviceHook::run(in);
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
    const bool gone = ok || in.backend_status.code() == absl::StatusCode::kNotFound;
    switch (in.method) {
      case LifecycleMethod::kCreateContainer: {
        const auto& req = static_cast<const v1::CreateContainerRequest&>(*in.request);
        const std::string key = creationKey(in);
        if (!ok) {
          pools_->drop(key);
          return;
        }
        const std::string& id =
            static_cast<const v1::CreateContainerResponse&>(*in.response).container_id();
        CpuOwner owner{req.pod_sandbox_id(), in.pod ? podName(in) : "",
                       req.config().metadata().name()};
        pools_->commit(key, id, owner);
        recordShared(in, id, std::move(owner), req.config().linux().resources().cpuset_cpus());
        return;
      }
      case LifecycleMethod::kUpdateContainerResources: {
        const auto& req = static_cast<const v1::UpdateContainerResourcesRequest&>(*in.request);
        if (!in.container) return;
        if (!ok) {
          pools_->applied(req.container_id(), "");  // unknown: the thread sets it again
          return;
        }
        recordShared(in, req.container_id(),
                     {in.container->sandbox_id(), in.pod ? podName(in) : "",
                      in.container->requested().metadata().name()},
                     req.linux().cpuset_cpus());
        return;
      }
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

class TopologyCheckHook final : public DeviceHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    return configure(
        name, settings_json, {"on_violation", "pcie_scope"}, [&](const HookSettingsReader& r) {
          auto v = r.oneOf("on_violation", {"annotate", "reject"});
          if (!v.ok()) return v.status();
          reject_ = *v == "reject";
          // What SamePCIe means: what the Device report's pcieID names
          // (crihookctl topology --pcie-id), or the check and the scheduler's
          // view disagree.
          auto scope = r.oneOf("pcie_scope", {"root-complex", "switch"});
          if (!scope.ok()) return scope.status();
          pcie_ = *scope == "switch" ? topo::PcieScope::kSwitch : topo::PcieScope::kRootComplex;
          return absl::OkStatus();
        });
  }

 private:
  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    const std::string* joint = annotation(in, kJointAllocateAnnotation);
    if (joint == nullptr || !in.topology) return Adjustment{};
    auto bad = [&](std::string_view field, std::string_view why) {
      return absl::InvalidArgumentError(
          cat("annotation ", kJointAllocateAnnotation, " of pod ", pod, ": ", field, ": ", why));
    };
    auto parsed_request = parseAnnotationJson(*joint, kJointAllocateAnnotation, pod);
    if (!parsed_request.ok()) return parsed_request.status();
    const nlohmann::json& request = *parsed_request;
    if (!request.is_object()) return bad("", "expected a JSON object");
    std::set<std::string> types;
    if (auto t = request.find("deviceTypes"); t != request.end()) {
      if (!t->is_array()) return bad("deviceTypes", cat("expected an array, got ", shownJson(*t)));
      for (const auto& x : *t) {
        if (x != "gpu" && x != "rdma")
          return bad("deviceTypes", cat("expected gpu or rdma, got ", shownJson(x)));
        types.insert(x.get<std::string>());
      }
    }
    topo::Scope required = topo::Scope::kSamePcie;
    if (auto sc = request.find("requiredScope"); sc != request.end()) {
      if (*sc == "SamePCIe") {
        required = topo::Scope::kSamePcie;
      } else if (*sc == "SameNUMANode") {
        required = topo::Scope::kSameNumaNode;
      } else if (*sc == "SameSocket") {
        required = topo::Scope::kSameSocket;
      } else {
        return bad("requiredScope",
                   cat("expected SamePCIe, SameNUMANode or SameSocket, got ", shownJson(*sc)));
      }
    }
    // The allocated devices, as addresses.
    topo::DeviceSet devices;
    {
      auto parsed = allocation(in, pod);
      if (!parsed.ok()) return parsed.status();
      // What is not on this node is the gpu and rdma hooks' to refuse;
      // another vendor's GPU has no NVIDIA minor to place.
      if (types.empty() || types.count("gpu")) {
        for (const DeviceAllocation& d : (*parsed)->gpu) {
          if (!isNvidiaGpu(d, in.topology.get())) continue;
          if (const topo::Gpu* g = in.topology->gpuByMinor(d.minor))
            devices.gpus.push_back(g->address);
        }
      }
      if (types.empty() || types.count("rdma")) {
        for (size_t i = 0; i < (*parsed)->rdma.size(); ++i) {
          auto f = resolveRdma((*parsed)->rdma[i], i, *in.topology, pod);
          if (!f.ok()) continue;
          if (f->vfs.empty()) devices.rdma.push_back(f->pf->address);
          for (const std::string& vf : f->vfs) devices.rdma.push_back(vf);
        }
      }
    }
    if (devices.gpus.empty() && devices.rdma.empty()) return Adjustment{};
    std::vector<std::string> violations;
    auto scope = topo::sharedScope(*in.topology, devices, pcie_);
    if (!scope.ok())
      return absl::FailedPreconditionError(cat("pod ", pod, ": ", scope.status().message()));
    if (scope->scope > required) {
      violations.push_back(cat("asked for ", topo::scopeName(required), " but ", scope->why));
    }
    // The cpuset on the devices' NUMA node(s).
    if (const std::string* rs = annotation(in, kResourceStatusAnnotation)) {
      auto status = parseResourceStatus(*rs, pod);
      if (!status.ok()) return status.status();
      std::vector<int> cpus;
      if (status->cpuset && topo::parseCpuList(*status->cpuset, cpus)) {
        std::set<int> device_nodes;
        for (const auto& a : devices.gpus)
          device_nodes.insert(in.topology->gpu(a)->where.numa_node);
        for (const auto& a : devices.rdma) {
          if (const auto* x = in.topology->rdmaByAddress(a))
            device_nodes.insert(x->where.numa_node);
        }
        std::vector<int> off;
        for (int c : cpus) {
          const topo::Cpu* cpu = in.topology->cpu(c);
          if (cpu == nullptr || !device_nodes.count(cpu->node)) off.push_back(c);
        }
        if (!off.empty()) {
          std::vector<int> nodes(device_nodes.begin(), device_nodes.end());
          violations.push_back(cat("CPUs ", topo::formatCpuList(off),
                                   " are not on the devices' NUMA node ",
                                   topo::formatCpuList(nodes)));
        }
      }
    }
    if (violations.empty()) return Adjustment{};
    std::string why;
    for (const auto& v : violations) why += cat(why.empty() ? "" : "; ", v);
    const std::string message = cat("pod ", pod, " asked for joint allocation: ", why);
    if (reject_) return absl::FailedPreconditionError(message);
    log_->warn("{}", message);
    Adjustment a;
    a.annotations[std::string(kTopologyViolationAnnotation)] = why;
    return a;
  }

  bool reject_ = false;
  topo::PcieScope pcie_ = topo::PcieScope::kRootComplex;
};

template <typename T>
absl::StatusOr<std::shared_ptr<Hook>> make(const std::string& name, const std::string& settings) {
  auto hook = std::make_shared<T>();
  if (auto s = hook->init(name, settings); !s.ok()) return s;
  return hook;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeGpuHook(const std::string& name, const std::string& s) {
  return make<GpuHook>(name, s);
}
absl::StatusOr<std::shared_ptr<Hook>> makeRdmaHook(const std::string& name, const std::string& s) {
  return make<RdmaHook>(name, s);
}
absl::StatusOr<std::shared_ptr<Hook>> makeCpusetHook(const std::string& name, const std::string& s,
                                                     const BuiltinContext& context) {
  auto hook = std::make_shared<CpusetHook>();
  if (auto st = hook->init(name, s, context); !st.ok()) return st;
  return hook;
}

absl::StatusOr<std::shared_ptr<Hook>> makeTopologyCheckHook(const std::string& name,
                                                            const std::string& s) {
  return make<TopologyCheckHook>(name, s);
}

}  // namespace crihook
