#pragma once

// The device hooks (built-in hooks on PreCreateContainer) that make a
// container get what the scheduler allocated to its pod, and nothing else:
//
//  builtin = "gpu"     each allocated GPU's /dev/nvidia<minor> plus the NVIDIA
//                      control nodes present on the host (nvidiactl,
//                      nvidia-uvm, nvidia-uvm-tools, nvidia-modeset), as CRI
//                      devices with cgroup permissions; NVIDIA_VISIBLE_DEVICES
//                      set to the allocated GPUs' UUIDs (or minors), replacing
//                      an image's "all". A shared GPU
//                      (koordinator.sh/gpu-memory-ratio below 100) in a pod
//                      labelled koordinator.sh/gpu-isolation-provider=HAMi-core
//                      also gets HAMi-core's limits as Koordinator sets them:
//                      CUDA_DEVICE_MEMORY_LIMIT (bytes of
//                      koordinator.sh/gpu-memory; per device _<i> when the
//                      GPUs differ), CUDA_DEVICE_SM_LIMIT (gpu-core),
//                      LD_PRELOAD of `hami_core_library` (default
//                      /usr/local/vgpu/libvgpu.so, mounted read-only) and
//                      `hami_core_lock_dir` (default /tmp/vgpulock) mounted.
//                      Another vendor's GPU (allocation.h isNvidiaGpu: an id
//                      that is no NVIDIA UUID, or no id on a node without
//                      NVIDIA GPUs) is passed through untouched for its own
//                      device plugin: logged once per pod and named in the
//                      container's crihook.io/gpu-passthrough annotation.
//  builtin = "rdma"    /dev/infiniband/rdma_cm and the uverbs device of each
//                      allocated function (each allocated VF's own, when VFs
//                      are allocated); NCCL_IB_HCA set to their RDMA device
//                      names. The PF is found by id (its PCI address), or,
//                      without one, by the minor the Device report gives it
//                      (report.h rdmaMinors: the N of mlx5_N as koordlet
//                      numbers it, others after); a VF by its busID, a VF of
//                      that PF (allocation.h resolveRdma).
//  builtin = "topology-check"
//                      when the pod asks for joint allocation
//                      (scheduling.koordinator.sh/device-joint-allocate, e.g.
//                      {"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}),
//                      checks that the allocated devices share that scope
//                      (SamePCIe; SameNUMANode; SameSocket) and that the
//                      cpuset is on their NUMA node(s). pcie_scope =
//                      "root-complex" (default) or "switch": what SamePCIe
//                      means (topology/topology.h PcieScope), set as the
//                      Device report's pcieID is (crihookctl topology
//                      --pcie-id) so the check agrees with the scheduler.
//                      on_violation = "annotate" (default: logged, and the
//                      container annotated crihook.io/topology-violation) or
//                      "reject" (FAILED_PRECONDITION).
//  builtin = "cpuset"  as koordlet's CPUSetAllocator: a pod with a cpuset in
//                      the resource-status annotation ("pinned") gets
//                      cpuset_cpus = it, cpuset_mems = the NUMA nodes of those
//                      CPUs (Koordinator never sets mems) and, with
//                      unset_cpu_quota = true (default; koordlet's
//                      --disable-unset-cpu-quota=false), cpu_quota = -1: no
//                      CFS throttling. A pod without one whose
//                      numaNodeResources allocate CPU (not QoS BE), with
//                      share_pool = true (default), runs on those NUMA
//                      nodes' CPUs that no pinned container holds (all of them
//                      when pins hold every one), mems = those nodes; its
//                      running containers are moved (UpdateContainerResources
//                      at the runtime, from the hook's own thread, cpu_pools.h)
//                      when a pinned container is created or stops. Both kept
//                      through kubelet's UpdateContainerResources. The pod-level
//                      cgroup's quota is left to kubelet (outside the CRI).
//
// They read the allocation from the pod's annotations (allocation.h), the
// layout from the topology snapshot, and look host device nodes up under
// `device_root` (default /dev). All four run inline (on the caller's
// thread, in proxy mode a relay event loop) and read memory only: the
// device nodes and HAMi-core's paths come from a HostPaths (host_paths.h)
// whose own thread reads the filesystem; the runtime is called by
// CpuPools' thread. Settings (each hook): device_root, on_error = "reject"
// (default) or "skip"; gpu: visible_devices = "uuid" (default) or "index";
// rdma: nccl_ib_hca = true (default) or false; cpuset: unset_cpu_quota,
// share_pool (booleans, default true).
//
// A malformed annotation is INVALID_ARGUMENT; a device that is not on this
// node (unknown minor, id that does not match, missing device node) is
// FAILED_PRECONDITION; each message names the pod, the annotation and the
// field. With on_error = "skip" the container is created without that hook's
// devices and the reason is logged. Never a half-applied container: a hook
// either returns its whole adjustment or none.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hooks/hook.h"
#include "hooks/registry.h"

namespace crihook {

absl::StatusOr<std::shared_ptr<Hook>> makeGpuHook(const std::string& name,
                                                  const std::string& settings_json);
absl::StatusOr<std::shared_ptr<Hook>> makeRdmaHook(const std::string& name,
                                                   const std::string& settings_json);
absl::StatusOr<std::shared_ptr<Hook>> makeCpusetHook(const std::string& name,
                                                     const std::string& settings_json,
                                                     const BuiltinContext& context = {});
absl::StatusOr<std::shared_ptr<Hook>> makeTopologyCheckHook(const std::string& name,
                                                            const std::string& settings_json);

inline constexpr std::string_view kJointAllocateAnnotation =
    "scheduling.koordinator.sh/device-joint-allocate";
inline constexpr std::string_view kTopologyViolationAnnotation = "crihook.io/topology-violation";
inline constexpr std::string_view kQosClassLabel = "koordinator.sh/qosClass";
// Set on a container whose pod was allocated another vendor's GPUs: their
// ids (or "minor N"), a JSON array.
inline constexpr std::string_view kGpuPassthroughAnnotation = "crihook.io/gpu-passthrough";
inline constexpr std::string_view kGpuIsolationProviderLabel =
    "koordinator.sh/gpu-isolation-provider";

}  // namespace crihook
