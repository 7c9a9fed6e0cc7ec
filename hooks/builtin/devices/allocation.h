#pragma once

// What the scheduler (Koordinator) decided for a pod, read from the pod's
// annotations:
//  - scheduling.koordinator.sh/device-allocated: by device type (gpu, rdma,
//    fpga), a list of {minor, resources, id, extension}, as Koordinator's
//    scheduler marshals apiext.DeviceAllocations:
//      {"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",...},
//               "id":"GPU-8c25ea37-..."}],
//       "rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},
//                "id":"0000:1f:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1f:00.2"}]}}]}
//    `id` is there since Koordinator v1.6 (GPU UUID, RDMA PF PCI address);
//    `resources` may be null; a VF's `minor` is -1 as koordlet reports it,
//    or absent (Go's omitempty drops a 0), and means nothing: a VF is its
//    busID. Unknown keys (extension.gpuSharedResourceTemplate, ...) are
//    ignored;
//  - scheduling.koordinator.sh/resource-status:
//    {"cpuset": "2-5", "numaNodeResources": [{"node": 0, "resources": {...}}]}.
// Malformed input is INVALID_ARGUMENT naming the pod, the annotation, the
// field and the reason:
//   annotation scheduling.koordinator.sh/device-allocated of pod default/train-0:
//   gpu[1].minor: expected an integer, got "x"
// Bounded: kMaxAnnotationBytes of text, kMaxJsonDepth of nesting,
// kMaxDevicesPerType entries of a type, kMaxVirtualFunctions per entry.

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/bounded_json.h"  // shownJson, for messages about annotation values
#include "base/quote.h"

namespace crihook {

namespace topology {
struct Snapshot;
struct RdmaDevice;
}  // namespace topology

inline constexpr std::string_view kDeviceAllocatedAnnotation =
    "scheduling.koordinator.sh/device-allocated";
inline constexpr std::string_view kResourceStatusAnnotation =
    "scheduling.koordinator.sh/resource-status";

// Kubernetes caps all of a pod's annotations together at 256 KiB.
inline constexpr size_t kMaxAnnotationBytes = 256 * 1024;
// The annotations are 4 levels deep; the bound keeps a hostile one from
// recursing deep into the JSON library.
inline constexpr int kMaxJsonDepth = 16;

// An annotation's JSON, once its size (kMaxAnnotationBytes) and nesting
// (kMaxJsonDepth) are within bounds: INVALID_ARGUMENT naming the annotation
// and the pod otherwise, or when it is not JSON. For every annotation a
// hook reads, not only the two parsed here.
absl::StatusOr<nlohmann::json> parseAnnotationJson(std::string_view text,
                                                   std::string_view annotation,
                                                   std::string_view pod);

// A node has a few dozen GPUs or RDMA functions at most; the bound keeps
// per-container work (lookups, duplicate checks) small.
inline constexpr size_t kMaxDevicesPerType = 128;
// SR-IOV allows 256 VFs per function (Koordinator allocates one per PF).
inline constexpr size_t kMaxVirtualFunctions = 256;

struct VirtualFunctionAllocation {
  int minor = 0;       // as written (-1 from koordlet, absent = 0): not used to find the VF
  std::string bus_id;  // 0000:1f:00.5, checked to be a PCI address
};

struct DeviceAllocation {
  int minor = -1;
  std::string id;  // GPU UUID, RDMA PF PCI address (checked), ...; empty before Koordinator v1.6
  std::map<std::string, std::string> resources;  // koordinator.sh/gpu-core -> "100"
  // extension.vfs: read for any type (the scheduler allocates VFs of any);
  // each hook says what it does with them.
  std::vector<VirtualFunctionAllocation> vfs;
};

struct PodAllocation {
  std::vector<DeviceAllocation> gpu, rdma, fpga;
  bool empty() const { return gpu.empty() && rdma.empty() && fpga.empty(); }
};

// `pod` ("namespace/name") is for messages. An unknown device type is an
// error (a newer scheduler than this crihook: better refused than ignored).
absl::StatusOr<PodAllocation> parseDeviceAllocated(std::string_view json, std::string_view pod);

// "0000:1f:00.2": DDDD:BB:DD.F in lower-case hex, as sysfs names functions
// (topology::isPciAddress: discovery's rule, a domain of up to 8 digits).
bool isPciAddress(std::string_view text);

// "GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d", as NVIDIA's driver and NVML
// name a GPU.
bool isNvidiaGpuUuid(std::string_view text);

// Whether gpu allocation `d` is an NVIDIA GPU. Koordinator's `gpu` type also
// carries other vendors' accelerators (Huawei, Cambricon, MetaX, Baidu, AMD,
// Hygon), set up by their own device plugins. With an id: an NVIDIA UUID
// ("GPU-...") or the PCI address of an NVIDIA GPU of `topology`; without one
// (Koordinator before v1.6): when `topology` has an NVIDIA GPU at all.
// `topology` may be null (nothing known).
bool isNvidiaGpu(const DeviceAllocation& d, const topology::Snapshot* topology);

// How a gpu allocation that is passed through is named in logs and in the
// crihook.io/gpu-passthrough annotation: its id cut to 64 bytes (on a UTF-8
// boundary; quote it before logging), or "minor N" without one.
std::string passthroughName(const DeviceAllocation& d);

// The RDMA functions rdma allocation `index` of the pod names on this node:
// its physical function (by id; without one, the PF the node's Device report
// gives that minor: topology/report.h rdmaMinors) and each allocated VF (by busID,
// which must be one of that PF's VFs). FAILED_PRECONDITION naming the pod,
// the annotation and the field when the node has no such function.
struct RdmaFunctions {
  const topology::RdmaDevice* pf = nullptr;
  std::vector<std::string> vfs;  // the allocated VFs' PCI addresses, in allocation order
  std::vector<int> vf_numbers;   // N of each one's virtfn<N> link under the PF
};
absl::StatusOr<RdmaFunctions> resolveRdma(const DeviceAllocation& d, size_t index,
                                          const topology::Snapshot& topology, std::string_view pod);

struct NumaNodeResources {
  int node = -1;
  std::map<std::string, std::string> resources;  // "cpu" -> "4"
};

struct ResourceStatus {
  std::optional<std::string> cpuset;  // "2-5"
  std::vector<NumaNodeResources> numa_nodes;
};

// A cpuset longer than this is not one a scheduler wrote: every CPU of the
// largest node listed one by one ("0,1,...,4095") is under 20 KiB.
inline constexpr size_t kMaxCpuListBytes = 64 * 1024;

// With `node`, the cpuset is checked against the node's CPUs before it is
// expanded: a CPU beyond them is FAILED_PRECONDITION naming the CPU and the
// node's count (the pod was scheduled for another node). Without (null), only
// its form is checked.
absl::StatusOr<ResourceStatus> parseResourceStatus(std::string_view json, std::string_view pod,
                                                   const topology::Snapshot* node = nullptr);

// A Kubernetes quantity ("100", "16Gi", "1.5G", "500m") as a whole number,
// rounded up as Kubernetes' Quantity.Value() does; nullopt when it is not
// one (or overflows int64).
std::optional<int64_t> parseQuantity(std::string_view text);

}  // namespace crihook
