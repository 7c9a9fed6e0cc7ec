#pragma once

// builtin = "cpuset", as koordlet's CPUSetAllocator:
//  - a pod with a cpuset in the resource-status annotation ("pinned") gets
//    cpuset_cpus = it, cpuset_mems = the NUMA nodes of those CPUs
//    (Koordinator never sets mems) and, with unset_cpu_quota = true
//    (default; koordlet's --disable-unset-cpu-quota=false), cpu_quota = -1:
//    no CFS throttling;
//  - a pod without one whose numaNodeResources allocate CPU (not QoS BE),
//    with share_pool = true (default), runs on those NUMA nodes' CPUs that
//    no pinned container holds (all of them when pins hold every one), mems
//    = those nodes; its running containers are moved (UpdateContainerResources
//    at the runtime, from CpuPools' own thread: cpu_pools.h) when a pinned
//    container is created or stops.
// Both are kept through kubelet's UpdateContainerResources. The pod-level
// cgroup's quota is left to kubelet (outside the CRI). A container whose
// cpuset another hook decided (koordlet's share pool, by [hooks.owners]) is
// never moved.
//
// Stages: Pre CreateContainer and UpdateContainerResources decide; with
// share_pool, Post CreateContainer, UpdateContainerResources,
// Stop/RemoveContainer and Stop/RemovePodSandbox record who holds which
// CPUs. A Reconciler: containers of sandboxes the runtime no longer runs
// (stopped or removed while crihookd was down) hold no CPUs.
//
// Refusals (AllocationHook's error policy): a malformed annotation
// (INVALID_ARGUMENT), a CPU or NUMA node this node does not have
// (FAILED_PRECONDITION), naming the pod, the annotation and the field.
//
// Inline: memory only (the annotation, the topology snapshot, CpuPools'
// records, whose methods never block). State: with a state_dir,
// <state_dir>/cpuset/<hook name>.json (cpu_pools.h).

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hooks/hook.h"
#include "hooks/registry.h"

namespace crihook {

inline constexpr std::string_view kQosClassLabel = "koordinator.sh/qosClass";

// INVALID_ARGUMENT naming the setting when `settings_json` is wrong. Starts
// CpuPools' thread when share_pool is on; `context` gives the runtime to
// call (none: containers are not moved) and the state directory.
absl::StatusOr<std::shared_ptr<Hook>> makeCpusetHook(const std::string& name,
                                                     const std::string& settings_json,
                                                     const BuiltinContext& context = {});

}  // namespace crihook
