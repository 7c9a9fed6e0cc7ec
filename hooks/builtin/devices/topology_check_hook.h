#pragma once

// builtin = "topology-check" (PreCreateContainer): when the pod asks for
// joint allocation (scheduling.koordinator.sh/device-joint-allocate, e.g.
// {"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}), checks that
// the allocated devices of those types share that scope (SamePCIe;
// SameNUMANode; SameSocket) and that the pod's cpuset is on their NUMA
// node(s). pcie_scope = "root-complex" (default) or "switch": what SamePCIe
// means (topology/topology.h PcieScope), set as the Device report's pcieID is
// (crihookctl topology --pcie-id) so the check agrees with the scheduler.
// on_violation = "annotate" (default: logged, and the container annotated
// crihook.io/topology-violation with the reasons) or "reject"
// (FAILED_PRECONDITION naming the pod and the reasons).
//
// A malformed request is INVALID_ARGUMENT naming the annotation and the
// field. Devices this node does not have are left to the gpu and rdma hooks
// to refuse; another vendor's GPU is not placed.
//
// Inline: memory only (the annotations and the topology snapshot).

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

inline constexpr std::string_view kJointAllocateAnnotation =
    "scheduling.koordinator.sh/device-joint-allocate";
inline constexpr std::string_view kTopologyViolationAnnotation = "crihook.io/topology-violation";

// INVALID_ARGUMENT naming the setting when `settings_json` is wrong.
absl::StatusOr<std::shared_ptr<Hook>> makeTopologyCheckHook(const std::string& name,
                                                            const std::string& settings_json);

}  // namespace crihook
