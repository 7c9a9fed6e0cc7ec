#pragma once

// Which devices of a pod the device-lifecycle hook acts on, as the scheduler
// allocated them (scheduling.koordinator.sh/device-allocated) and as the
// topology describes them. Pure: no lock, no I/O but a log line.

#include <spdlog/logger.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/builtin/lifecycle/lifecycle_settings.h"
#include "topology/topology.h"

namespace crihook {

// The devices of the configured types (settings.types) in allocation order:
// GPUs, then RDMA functions, then FPGAs. `allocated` is the annotation's text
// (null: the pod has none, so no devices); `topology` may be null (nothing
// known); `pod` ("namespace/name") is for messages.
// - An NVIDIA GPU gets its UUID, PCI address and node (nvidia<minor>) from
//   the topology; another vendor's GPU (allocation.h isNvidiaGpu) is skipped,
//   with an info line on `log`: its device plugin sets it up.
// - Each RDMA function on its own, found as the rdma hook finds it
//   (allocation.h resolveRdma): the PF, or each allocated VF with its
//   virtfn number as {minor}; its name and uverbs node from the topology.
// - An FPGA's id is its PCI address only when it has that form.
// The allocation's errors as parseDeviceAllocated and resolveRdma give them;
// FAILED_PRECONDITION for VFs of a GPU or an FPGA (they cannot be checked to
// belong to the allocated device).
absl::StatusOr<std::vector<DeviceFacts>> podDevices(const std::string* allocated,
                                                    const topology::Snapshot* topology,
                                                    const std::string& pod,
                                                    const LifecycleSettings& settings,
                                                    spdlog::logger& log);

}  // namespace crihook
