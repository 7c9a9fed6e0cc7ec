#pragma once

// builtin = "rdma" (PreCreateContainer): /dev/infiniband/rdma_cm and the
// uverbs device of each allocated RDMA function (each allocated VF's own,
// when VFs are allocated), as CRI devices with cgroup permissions "rw";
// NCCL_IB_HCA set to their RDMA device names in allocation order
// (nccl_ib_hca = true, default; false leaves it). The PF is found by id (its
// PCI address), or, without one, by the minor the Device report gives it
// (topology/report.h rdmaMinors: the N of mlx5_N as koordlet numbers it,
// others after); a VF by its busID, a VF of that PF (allocation.h
// resolveRdma).
//
// Refusals (AllocationHook's error policy): a function this node does not
// have, one without a uverbs device, a missing device node:
// FAILED_PRECONDITION naming the pod, the annotation and the field.
//
// Inline, for the gpu hook's reasons (gpu_hook.h): the nodes under
// <device_root>/infiniband come from a HostPaths (host_paths.h).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

// INVALID_ARGUMENT naming the setting when `settings_json` is wrong.
absl::StatusOr<std::shared_ptr<Hook>> makeRdmaHook(const std::string& name,
                                                   const std::string& settings_json);

}  // namespace crihook
