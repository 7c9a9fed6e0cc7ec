#pragma once

// The topology as people and schedulers read it: a tree, JSON, and a
// Koordinator Device object (scheduling.koordinator.sh/v1alpha1).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topology/topology.h"

namespace crihook::topology {

// sockets -> NUMA nodes -> PCIe switches (or root ports) -> GPUs / NICs / VFs,
// then the warnings, one line each. Text from sysfs or the driver (models,
// RDMA and netdev names, port states) is shown as it is when it is plain
// printable ASCII, else quoted and cut short (base/quote.h): a name cannot
// forge a line or send the terminal an escape sequence.
std::string tree(const Snapshot& snap);

// Everything discovered, warnings included.
nlohmann::json toJson(const Snapshot& snap);

struct DeviceReportOptions {
  std::string node_name;
  // What topology.pcieID names (topology.h): the root complex by default, as
  // koordlet reports it; the topology-check hook must be set the same way.
  PcieScope pcie_id = PcieScope::kRootComplex;
};

// The N of an RDMA device named mlx<k>_<N>: koordlet's minor of a Mellanox
// RDMA function. nullopt for other names.
std::optional<int> mellanoxMinor(std::string_view rdma_name);

// Each RDMA physical function (the first of its RDMA devices by name, one per
// PCI function) with the minor the Device report gives it and an id-less
// allocation is resolved by: a Mellanox mlx<k>_N is N, as koordlet numbers
// it; devices koordlet skips (irdma's rocep24s0, ...) get the minors after
// the largest Mellanox one, in name order, so none collide. Sorted by minor.
std::vector<std::pair<int, const RdmaDevice*>> rdmaMinors(const Snapshot& snap);

// The Device object as koordlet writes it, so Koordinator's scheduler can
// consume it; every entry has a minor (the scheduler reads each one's
// unchecked).
//  gpu   one per GPU the NVIDIA driver manages and gives a minor (others,
//        AMD and Intel GPUs included, stay in the tree and the JSON): id the
//        UUID, koordinator.sh/gpu-core and gpu-memory-ratio 100, gpu-memory
//        (a binary quantity) when NVML told it — discovery warns when not.
//  rdma  one per RDMA physical function: id its PCI address, minor the N of a
//        Mellanox mlx<k>_N; devices koordlet skips (irdma's rocep24s0, ...)
//        get the minors after the largest Mellanox one, in name order;
//        health: every port ACTIVE; koordinator.sh/rdma 100; its VFs (minor
//        -1, by PCI address) in one vfGroup without labels.
//  topology  socketID (the real socket; koordlet writes -1), nodeID (the
//        effective NUMA node, never -1), pcieID as the options say, busID.
//  labels    node.koordinator.sh/gpu-vendor "nvidia" when there is an NVIDIA
//        GPU; gpu-model (without "NVIDIA ", spaces as '-') and
//        gpu-driver-version when every GPU is the same model (koordlet
//        writes neither for mixed models).
// Entries are sorted by type, then minor, as koordlet stores them.
nlohmann::json deviceObject(const Snapshot& snap, const DeviceReportOptions& options);

// JSON as YAML (block style; strings quoted).
std::string toYaml(const nlohmann::json& value);

}  // namespace crihook::topology
