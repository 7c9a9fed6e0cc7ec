#include "hooks/builtin/devices/gpu_hook.h"

#include <algorithm>
#include <deque>
#include <set>
#include <vector>

#include "base/mutex.h"
#include "base/quote.h"
#include "base/text.h"
#include "hooks/builtin/devices/allocation_hook.h"
#include "hooks/builtin/devices/host_paths.h"
#include "hooks/process_env.h"
#include "topology/topology.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

constexpr const char* kNvidiaControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                               "nvidia-modeset"};

// Keys seen, the oldest forgotten past `capacity`: "once per pod" without
// growing with every pod the node ever ran. Thread-safe.
class BoundedSet {
 public:
  explicit BoundedSet(size_t capacity) : capacity_(capacity) {}
  // True when `key` was not in the set (now it is).
  bool insert(const std::string& key) {
    MutexLock lock(mu_);
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
  Mutex mu_;
  std::set<std::string> keys_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
};

// A shared GPU in a pod that asks for HAMi-core isolation: the limits
// HAMi-core's library reads, as Koordinator's koordlet sets them. One per
// call; `label` is the pod's koordinator.sh/gpu-isolation-provider.
class HamiLimits {
 public:
  HamiLimits(const HookInput& in, const PodAllocation& alloc, const std::string& pod,
             const std::string& label)
      : in_(in), alloc_(alloc), pod_(pod), label_(label) {}

  // The env of GPUs `nvidia` (indexes into alloc.gpu, NVIDIA's only: HAMi-core
  // is a CUDA library); false when the first is a whole GPU (no limits).
  absl::StatusOr<bool> add(const std::vector<size_t>& nvidia, Adjustment& a) const {
    // Koordinator decides by the first GPU (a shared GPU is one GPU).
    const size_t first = nvidia.front();
    auto ratio = quantity(first, "koordinator.sh/gpu-memory-ratio");
    if (!ratio.ok()) return ratio.status();
    if (*ratio >= 100) return false;
    auto memory = memoryOf(first);
    if (!memory.ok()) return memory.status();
    a.env.push_back({"CUDA_DEVICE_MEMORY_LIMIT", std::to_string(*memory)});
    if (auto s = addPerDevice(nvidia, *memory, a); !s.ok()) return s;
    if (alloc_.gpu[first].resources.count("koordinator.sh/gpu-core")) {
      auto core = quantity(first, "koordinator.sh/gpu-core");
      if (!core.ok()) return core.status();
      a.env.push_back({"CUDA_DEVICE_SM_LIMIT", std::to_string(*core)});
    }
    return true;
  }

 private:
  // HAMi-core reads a per-device limit first (by CUDA index: the position
  // among the visible GPUs): set them when the GPUs differ from `first`'s.
  absl::Status addPerDevice(const std::vector<size_t>& nvidia, int64_t first, Adjustment& a) const {
    for (size_t i : nvidia) {
      auto m = memoryOf(i);
      if (!m.ok()) return m.status();
      if (*m == first) continue;
      for (size_t j = 0; j < nvidia.size(); ++j) {
        auto mj = memoryOf(nvidia[j]);
        if (!mj.ok()) return mj.status();
        a.env.push_back({cat("CUDA_DEVICE_MEMORY_LIMIT_", j), std::to_string(*mj)});
      }
      break;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> quantity(size_t i, std::string_view resource) const {
    const auto& r = alloc_.gpu[i].resources;
    auto it = r.find(std::string(resource));
    const std::string field = cat("gpu[", i, "].resources.", resource);
    if (it == r.end()) {
      return absl::InvalidArgumentError(cat("annotation ", kDeviceAllocatedAnnotation, " of pod ",
                                            pod_, ": ", field, ": missing (pod labelled ",
                                            kGpuIsolationProviderLabel, "=", label_, ")"));
    }
    auto v = parseQuantity(it->second);
    if (!v) {
      return absl::InvalidArgumentError(cat("annotation ", kDeviceAllocatedAnnotation, " of pod ",
                                            pod_, ": ", field, ": expected a quantity, got \"",
                                            it->second, "\""));
    }
    return *v;
  }

  // A limit of 0 is never set. Koordinator's scheduler computes a ratio
  // request's memory as ratio x the GPU's koordinator.sh/gpu-memory in the
  // node's Device report; a report without it (NVML did not answer) makes
  // that 0, and HAMi-core would give the pod no memory at all.
  absl::StatusOr<int64_t> memoryOf(size_t i) const {
    auto m = quantity(i, "koordinator.sh/gpu-memory");
    if (!m.ok() || *m > 0) return m;
    const DeviceAllocation& d = alloc_.gpu[i];
    const topo::Gpu* g = in_.topology ? in_.topology->gpuByMinor(d.minor) : nullptr;
    return absl::FailedPreconditionError(
        cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod_, ": gpu[", i,
            "].resources.koordinator.sh/gpu-memory: ", *m, " bytes of GPU minor ", d.minor,
            g && !g->uuid.empty() ? cat(" (", g->uuid, ")") : "",
            " for a shared GPU: the node's Device report has no koordinator.sh/gpu-memory for it "
            "(the scheduler's share of an unknown memory is 0); a CUDA_DEVICE_MEMORY_LIMIT of 0 "
            "is never set. Publish a report with the GPUs' memory (NVML on this node)"));
  }

  const HookInput& in_;
  const PodAllocation& alloc_;
  const std::string& pod_;
  const std::string& label_;
};

class GpuHook final : public AllocationHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    auto s = configure(name, settings_json, "gpu", [&](const HookSettingsReader& r) {
      auto v = r.oneOf("visible_devices", {"uuid", "index"});
      if (!v.ok()) return v.status();
      by_index_ = *v == "index";
      if (auto s = r.absolutePath("hami_core_library", hami_library_); !s.ok()) return s;
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
  // One allocated NVIDIA GPU as this node has it.
  struct NvidiaGpu {
    std::string node;     // nvidia<minor>
    std::string visible;  // its NVIDIA_VISIBLE_DEVICES entry
  };

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
      if (!isNvidiaGpu(d, in.topology.get())) {
        passed.push_back(passthroughName(d));
        continue;
      }
      auto gpu = nvidiaGpu(in, d, i, pod);
      if (!gpu.ok()) return gpu.status();
      a.devices.push_back(device(gpu->node));
      visible += cat(visible.empty() ? "" : ",", gpu->visible);
      nvidia.push_back(i);
    }
    if (!nvidia.empty()) {
      for (const char* control : kNvidiaControlNodes) {
        if (paths_->hasEntry(control)) a.devices.push_back(device(control));
      }
      a.env.push_back({"NVIDIA_VISIBLE_DEVICES", visible});
      if (auto s = hamiCore(in, *alloc, nvidia, pod, a); !s.ok()) return s;
    }
    if (!passed.empty()) passThrough(in, pod, passed, a);
    return a;
  }

  // GPU `d` (gpu[i] of the allocation) checked against this node.
  absl::StatusOr<NvidiaGpu> nvidiaGpu(const HookInput& in, const DeviceAllocation& d, size_t i,
                                      const std::string& pod) const {
    const std::string field = cat("gpu[", i, "]");
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
    NvidiaGpu out{cat("nvidia", d.minor),
                  by_index_ || g->uuid.empty() ? std::to_string(d.minor) : g->uuid};
    if (!paths_->hasEntry(out.node))
      return notHere(pod, field, cat("no device node ", device_root_, "/", out.node));
    return out;
  }

  // Another vendor's accelerator (Koordinator's gpu type carries them too):
  // its own device plugin sets the container up.
  void passThrough(const HookInput& in, const std::string& pod, const nlohmann::json& passed,
                   Adjustment& a) {
    std::string names = passed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string& uid = in.pod->config().metadata().uid();
    if (passthrough_logged_.insert(uid.empty() ? pod : uid)) {
      log_->info("pod {}: gpu {} not NVIDIA's: passed through to its vendor's device plugin", pod,
                 names.size() > 512 ? names.substr(0, 509) + "..." : names);
    }
    a.annotations[std::string(kGpuPassthroughAnnotation)] = std::move(names);
  }

  // HAMi-core for a pod that asks for it: HamiLimits, the library
  // preloaded, and the library and its lock directory mounted, as
  // Koordinator's koordlet does. Koordinator compares the label to
  // "HAMi-core" exactly; its own documents also write "hami-core", so case
  // is ignored here.
  absl::Status hamiCore(const HookInput& in, const PodAllocation& alloc,
                        const std::vector<size_t>& nvidia, const std::string& pod,
                        Adjustment& a) const {
    const auto& labels = in.pod->config().labels();
    auto label = labels.find(std::string(kGpuIsolationProviderLabel));
    constexpr std::string_view kHami = "hami-core";
    if (label == labels.end() ||
        !std::equal(label->second.begin(), label->second.end(), kHami.begin(), kHami.end(),
                    [](char x, char y) { return std::tolower(x) == y; }))
      return absl::OkStatus();
    auto limited = HamiLimits(in, alloc, pod, label->second).add(nvidia, a);
    if (!limited.ok()) return limited.status();
    if (!*limited) return absl::OkStatus();
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

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeGpuHook(const std::string& name,
                                                  const std::string& settings_json) {
  auto hook = std::make_shared<GpuHook>();
  if (auto s = hook->init(name, settings_json); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
