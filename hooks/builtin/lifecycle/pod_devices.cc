#include "hooks/builtin/lifecycle/pod_devices.h"

#include "base/quote.h"
#include "base/text.h"
#include "hooks/builtin/devices/allocation.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

// The scheduler may allocate VFs of any type; only an RDMA VF can be told
// to be its PF's (the node's RDMA devices know their VFs), and an action such
// as pci-reset must never reach a function the pod was not given.
absl::Status vfsRefused(std::string_view pod, std::string_view field, std::string_view whose) {
  return absl::FailedPreconditionError(
      cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod, ": ", field,
          ".extension.vfs: device-lifecycle acts on RDMA virtual functions only; ", whose,
          " cannot be checked to belong to the allocated device"));
}

absl::Status addGpus(const PodAllocation& alloc, const topo::Snapshot* t, const std::string& pod,
                     spdlog::logger& log, std::vector<DeviceFacts>& out) {
  for (size_t i = 0; i < alloc.gpu.size(); ++i) {
    const DeviceAllocation& d = alloc.gpu[i];
    if (!isNvidiaGpu(d, t)) {
      // Its vendor's device plugin sets it up; it has no NVIDIA minor,
      // UUID or node for the actions.
      log.info("pod {}: gpu[{}] ({}) is not an NVIDIA GPU: no init or cleanup for it", pod, i,
               quote(passthroughName(d)));
      continue;
    }
    if (!d.vfs.empty()) return vfsRefused(pod, cat("gpu[", i, "]"), "an NVIDIA GPU's");
    DeviceFacts f{"gpu", static_cast<int>(i), d.minor, d.id};
    if (const topo::Gpu* g = t ? t->gpuByMinor(d.minor) : nullptr) {
      f.uuid = g->uuid;
      f.pci = g->address;
    }
    // The id becomes a command argument only in the form a UUID has.
    if (f.uuid.empty() && isNvidiaGpuUuid(d.id)) f.uuid = d.id;
    f.node = cat("nvidia", d.minor);
    out.push_back(std::move(f));
  }
  return absl::OkStatus();
}

// An RDMA function at `address`, described with what the topology knows of it.
DeviceFacts rdmaFunction(int index, int minor, const std::string& id, const std::string& address,
                         const topo::Snapshot* t) {
  DeviceFacts f{"rdma", index, minor, id};
  f.pci = address;
  if (const topo::RdmaDevice* x = t ? t->rdmaByAddress(address) : nullptr) {
    f.name = x->name;
    if (!x->uverbs.empty()) f.node = "infiniband/" + x->uverbs;
  }
  return f;
}

absl::Status addRdma(const PodAllocation& alloc, const topo::Snapshot* t, const std::string& pod,
                     std::vector<DeviceFacts>& out) {
  static const topo::Snapshot kNothing;
  int index = 0;
  // Each function must be this node's, and each VF one of its PF's: an
  // action such as pci-reset must never reach a device the pod was not given.
  for (size_t i = 0; i < alloc.rdma.size(); ++i) {
    const DeviceAllocation& d = alloc.rdma[i];
    auto functions = resolveRdma(d, i, t ? *t : kNothing, pod);
    if (!functions.ok()) return functions.status();
    if (functions->vfs.empty()) {
      out.push_back(rdmaFunction(index++, d.minor, d.id, functions->pf->address, t));
      continue;
    }
    for (size_t j = 0; j < functions->vfs.size(); ++j) {
      // A VF's minor is its number under its PF (virtfn<N>): Koordinator's
      // is always -1.
      out.push_back(
          rdmaFunction(index++, functions->vf_numbers[j], functions->vfs[j], functions->vfs[j], t));
    }
  }
  return absl::OkStatus();
}

absl::Status addFpgas(const PodAllocation& alloc, const std::string& pod,
                      std::vector<DeviceFacts>& out) {
  for (size_t i = 0; i < alloc.fpga.size(); ++i) {
    const DeviceAllocation& d = alloc.fpga[i];
    if (!d.vfs.empty()) return vfsRefused(pod, cat("fpga[", i, "]"), "an FPGA's");
    DeviceFacts f{"fpga", static_cast<int>(i), d.minor, d.id};
    if (isPciAddress(d.id)) f.pci = d.id;  // becomes a sysfs path
    out.push_back(std::move(f));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<DeviceFacts>> podDevices(const std::string* allocated,
                                                    const topology::Snapshot* topology,
                                                    const std::string& pod,
                                                    const LifecycleSettings& settings,
                                                    spdlog::logger& log) {
  if (allocated == nullptr) return std::vector<DeviceFacts>{};
  auto alloc = parseDeviceAllocated(*allocated, pod);
  if (!alloc.ok()) return alloc.status();
  std::vector<DeviceFacts> out;
  absl::Status s;
  if (settings.configured("gpu")) s = addGpus(*alloc, topology, pod, log, out);
  if (s.ok() && settings.configured("rdma")) s = addRdma(*alloc, topology, pod, out);
  if (s.ok() && settings.configured("fpga")) s = addFpgas(*alloc, pod, out);
  if (!s.ok()) return s;
  return out;
}

}  // namespace crihook
