#pragma once

// The topology as people and schedulers read it: a tree, JSON, and a
// Koordinator Device object (scheduling.koordinator.sh/v1alpha1).

#include <nlohmann/json.hpp>
#include <string>

#include "topology.h"

namespace crihook::topology {

// sockets -> NUMA nodes -> PCIe switches (or root ports) -> GPUs / NICs / VFs.
std::string tree(const Snapshot& snap);

// Everything discovered, warnings included.
nlohmann::json toJson(const Snapshot& snap);

// What a Device's topology.pcieID names. Koordinator's own agent puts the root
// complex there ("pci0000:17"), so every device under one CPU root complex is
// "the same PCIe", switches or not. crihook names the PCIe switch by default
// (the upstream port of the switch above the device; for a device on a root
// port without a switch, that root port), so "same PCIe" means "behind one
// switch": the GPUs and the NIC that exchange data without crossing the CPU.
enum class PcieId { kSwitch, kRootComplex };

struct DeviceReportOptions {
  std::string node_name;
  PcieId pcie_id = PcieId::kSwitch;
};

// The Device object: a gpu entry per GPU (id the UUID, else the PCI address;
// koordinator.sh/gpu-core and -memory-ratio 100, gpu-memory when NVML told
// it), an rdma entry per physical RDMA function (id its PCI address,
// koordinator.sh/rdma 100, its VFs in vfGroups), labels for GPU vendor, model
// and driver version.
nlohmann::json deviceObject(const Snapshot& snap, const DeviceReportOptions& options);

// JSON as YAML (block style; strings quoted).
std::string toYaml(const nlohmann::json& value);

}  // namespace crihook::topology
