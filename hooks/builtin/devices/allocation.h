#pragma once

// What the scheduler (Koordinator) decided for a pod, read from the pod's
// annotations:
//  - scheduling.koordinator.sh/device-allocated: by device type (gpu, rdma,
//    fpga), a list of {minor, id, resources, extension}; an RDMA entry may
//    carry extension.vfs [{minor, busID}];
//  - scheduling.koordinator.sh/resource-status:
//    {"cpuset": "2-5", "numaNodeResources": [{"node": 0, "resources": {...}}]}.
// Malformed input is INVALID_ARGUMENT naming the pod, the annotation, the
// field and the reason:
//   annotation scheduling.koordinator.sh/device-allocated of pod default/train-0:
//   gpu[1].minor: expected an integer, got "x"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook {

inline constexpr std::string_view kDeviceAllocatedAnnotation =
    "scheduling.koordinator.sh/device-allocated";
inline constexpr std::string_view kResourceStatusAnnotation =
    "scheduling.koordinator.sh/resource-status";

struct VirtualFunctionAllocation {
  int minor = -1;
  std::string bus_id;  // 0000:1f:00.5
};

struct DeviceAllocation {
  int minor = -1;
  std::string id;                                // GPU UUID, RDMA PCI address, ...
  std::map<std::string, std::string> resources;  // koordinator.sh/gpu-core -> "100"
  std::vector<VirtualFunctionAllocation> vfs;    // rdma: extension.vfs
};

struct PodAllocation {
  std::vector<DeviceAllocation> gpu, rdma, fpga;
  bool empty() const { return gpu.empty() && rdma.empty() && fpga.empty(); }
};

// `pod` ("namespace/name") is for messages. An unknown device type is an
// error (a newer scheduler than this crihook: better refused than ignored).
absl::StatusOr<PodAllocation> parseDeviceAllocated(std::string_view json, std::string_view pod);

struct NumaNodeResources {
  int node = -1;
  std::map<std::string, std::string> resources;  // "cpu" -> "4"
};

struct ResourceStatus {
  std::optional<std::string> cpuset;  // "2-5"
  std::vector<NumaNodeResources> numa_nodes;
};

absl::StatusOr<ResourceStatus> parseResourceStatus(std::string_view json, std::string_view pod);

// A Kubernetes quantity ("100", "16Gi", "1.5G", "500m") as a whole number,
// rounded up as Kubernetes' Quantity.Value() does; nullopt when it is not
// one (or overflows int64).
std::optional<int64_t> parseQuantity(std::string_view text);

}  // namespace crihook
