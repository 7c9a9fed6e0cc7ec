#pragma once

// Placement: whether a set of GPUs, RDMA devices and CPUs share a PCIe (a
// root complex or a switch, as the caller means it: topology.h PcieScope), a
// NUMA node, a socket; and, for a request such as "2 GPUs with
// their nearest RDMA NIC and 16 CPUs", the best free set on this node. Pure
// functions of a Snapshot: deterministic, and they say why.

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "topology/topology.h"

namespace crihook::topology {

// From tightest to loosest.
enum class Scope { kSamePcie, kSameNumaNode, kSameSocket, kNone };
std::string_view scopeName(Scope scope);  // Koordinator's words: SamePCIe, SameNUMANode, ...

struct DeviceSet {
  std::vector<std::string> gpus;  // PCI addresses
  std::vector<std::string> rdma;  // PCI addresses (PFs or VFs)
  std::vector<int> cpus;
};

struct ScopeAnswer {
  Scope scope = Scope::kNone;
  std::string why;  // "GPU 0000:1a:00.0, RDMA 0000:1c:00.0 share PCIe root complex pci0000:17"
};

// The tightest scope all of `set` shares, "the same PCIe" meaning what
// `pcie` says (the Device report's pcieID must mean the same). CPUs count for
// NUMA node and socket (they have no PCIe): a set with CPUs is at best
// kSameNumaNode. Devices count on their effective NUMA node. INVALID_ARGUMENT
// naming a device or CPU this node does not have.
absl::StatusOr<ScopeAnswer> sharedScope(const Snapshot& snap, const DeviceSet& set, PcieScope pcie);

struct Request {
  int gpus = 0;
  bool rdma = false;  // with the nearest free RDMA physical function
  int cpus = 0;
};

struct Choice {
  DeviceSet devices;
  Scope scope = Scope::kNone;
  std::string why;
};

// The best free set: every GPU and the NIC on one PCIe (in `pcie`'s meaning;
// CPUs on its NUMA node), else on one NUMA node, else one socket. Ties go to
// the lowest addresses / CPU numbers; CPUs are taken a whole core (all its
// threads) at a time where possible. RESOURCE_EXHAUSTED when no socket can
// hold the request.
absl::StatusOr<Choice> pick(const Snapshot& snap, const Request& request, const DeviceSet& taken,
                            PcieScope pcie);

}  // namespace crihook::topology
