#pragma once

// The device hooks: built-in hooks that make a container get what the
// scheduler (Koordinator) allocated to its pod, and nothing else. One file
// each, with its contract in its header:
//
//  builtin = "gpu"             gpu_hook.h: NVIDIA device nodes,
//                              NVIDIA_VISIBLE_DEVICES, HAMi-core's limits
//                              for shared GPUs; other vendors' passed through
//  builtin = "rdma"            rdma_hook.h: rdma_cm and uverbs nodes,
//                              NCCL_IB_HCA
//  builtin = "cpuset"          cpuset_hook.h (with cpu_pools.h): pinned and
//                              NUMA-only cpusets, moved as pins come and go
//  builtin = "topology-check"  topology_check_hook.h: joint-allocation
//                              scopes and the cpuset's NUMA nodes
//
// What they share (allocation_hook.h): they read the allocation from the
// pod's annotations (allocation.h) and the layout from the topology
// snapshot; settings device_root (default /dev) and on_error = "reject"
// (default) or "skip"; INVALID_ARGUMENT for a malformed annotation,
// FAILED_PRECONDITION for what is not on this node, each message naming the
// pod, the annotation and the field; never a half-applied container.
//
// All four run inline (on the caller's thread, in proxy mode a relay event
// loop) and read memory only: the filesystem (device nodes, HAMi-core's
// paths) is read by HostPaths' own thread (host_paths.h), the runtime is
// called by CpuPools' own thread (cpu_pools.h).
//
// This header is what hooks/registry.cc includes: the four factories.

#include "hooks/builtin/devices/cpuset_hook.h"          // IWYU pragma: export
#include "hooks/builtin/devices/gpu_hook.h"             // IWYU pragma: export
#include "hooks/builtin/devices/rdma_hook.h"            // IWYU pragma: export
#include "hooks/builtin/devices/topology_check_hook.h"  // IWYU pragma: export
