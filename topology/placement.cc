#include "topology/placement.h"

#include <algorithm>
#include <map>

#include "base/text.h"

namespace crihook::topology {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += cat(out.empty() ? "" : ", ", s);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Free CPUs of the given NUMA nodes, whole cores first (by node, core), `n`
// of them; fewer when there are not enough.
std::vector<int> takeCpus(const Snapshot& snap, const std::vector<int>& nodes, int n,
                          const std::vector<int>& taken) {
  std::vector<const Cpu*> free;
  for (const Cpu& c : snap.cpus) {
    if (std::find(nodes.begin(), nodes.end(), c.node) == nodes.end()) continue;
    if (std::find(taken.begin(), taken.end(), c.id) != taken.end()) continue;
    free.push_back(&c);
  }
  // Cores whose every thread is free come first, so a container does not
  // share a core with another.
  auto whole = [&](const Cpu* c) {
    for (int s : c->siblings)
      if (std::find(taken.begin(), taken.end(), s) != taken.end()) return false;
    return true;
  };
  std::stable_sort(free.begin(), free.end(), [&](const Cpu* a, const Cpu* b) {
    return std::make_tuple(!whole(a), a->node, a->socket, a->core, a->id) <
           std::make_tuple(!whole(b), b->node, b->socket, b->core, b->id);
  });
  std::vector<int> out;
  for (const Cpu* c : free) {
    if (static_cast<int>(out.size()) == n) break;
    out.push_back(c->id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "PCIe switch 0000:18:00.0", "PCIe root complex pci0000:17", ...
std::string pcieWhat(const Locality& l, PcieScope pcie) {
  const std::string& id = pcieId(l, pcie);
  if (pcie == PcieScope::kRootComplex || id == l.root_complex) return "PCIe root complex " + id;
  return (id == l.pcie_switch ? "PCIe switch " : "PCIe root port ") + id;
}

struct Candidate {
  std::vector<const Gpu*> gpus;
  const RdmaDevice* nic = nullptr;
};

// The free devices of one scope, grouped by what they share there (a PCIe
// id, a NUMA node, a socket), the keys in the order first seen.
struct Groups {
  std::map<std::string, Candidate> by_key;
  std::vector<std::string> order;
  Candidate& group(const std::string& key) {
    if (!by_key.count(key)) order.push_back(key);
    return by_key[key];
  }
};

// What devices share at scope `s`: "" when it is not known.
std::string scopeKey(const Locality& l, Scope s, PcieScope pcie) {
  switch (s) {
    case Scope::kSamePcie:
      return pcieId(l, pcie);
    case Scope::kSameNumaNode:
      return l.numa_node < 0 ? "" : cat(l.numa_node);
    case Scope::kSameSocket:
      return l.socket < 0 ? "" : cat(l.socket);
    case Scope::kNone:
      break;
  }
  return "";
}

// The free GPUs and NICs grouped at scope `s`: every GPU of a group, and its
// first NIC.
Groups deviceGroups(const std::vector<const Gpu*>& gpus, const std::vector<const RdmaDevice*>& nics,
                    Scope s, PcieScope pcie) {
  Groups groups;
  for (const Gpu* g : gpus) {
    if (auto k = scopeKey(g->where, s, pcie); !k.empty()) groups.group(k).gpus.push_back(g);
  }
  for (const RdmaDevice* x : nics) {
    auto k = scopeKey(x->where, s, pcie);
    if (k.empty()) continue;
    Candidate& c = groups.group(k);
    if (c.nic == nullptr) c.nic = x;
  }
  return groups;
}

// A request for CPUs only: every NUMA node (or socket) is a group, without
// devices.
Groups cpuGroups(const Snapshot& snap, Scope s) {
  Groups groups;
  for (const NumaNode& n : snap.nodes)
    groups.order.push_back(s == Scope::kSameNumaNode ? cat(n.id) : cat(n.socket));
  groups.order.erase(std::unique(groups.order.begin(), groups.order.end()), groups.order.end());
  return groups;
}

// The NUMA nodes a choice's CPUs come from: those of the chosen devices, else
// those of group `key`; at kSameSocket any node of the socket as well.
std::vector<int> cpuNodes(const Snapshot& snap, const Request& req, const Candidate& c, Scope s,
                          const std::string& key) {
  std::vector<int> nodes;
  auto addNode = [&](int n) {
    if (n >= 0 && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  };
  for (int i = 0; i < req.gpus; ++i) addNode(c.gpus[i]->where.numa_node);
  if (req.rdma) addNode(c.nic->where.numa_node);
  if (nodes.empty()) {
    for (const NumaNode& n : snap.nodes) {
      if ((s == Scope::kSameNumaNode && cat(n.id) == key) ||
          (s == Scope::kSameSocket && cat(n.socket) == key))
        addNode(n.id);
    }
  }
  if (s == Scope::kSameSocket) {
    for (const NumaNode& n : snap.nodes) {
      if (cat(n.socket) == key) addNode(n.id);
    }
  }
  return nodes;
}

// Why `choice` (of group `key`, its CPUs on `nodes`): what its devices
// share, where its CPUs are, and why no tighter scope held it.
std::string whyChosen(const Request& req, const Candidate& c, const Choice& choice,
                      const std::vector<int>& nodes, const std::string& key, PcieScope pcie) {
  const Scope s = choice.scope;
  std::vector<std::string> parts;
  if (!choice.devices.gpus.empty()) parts.push_back("GPUs " + join(choice.devices.gpus));
  if (req.rdma) parts.push_back(cat("RDMA ", c.nic->name, " (", c.nic->address, ")"));
  // kSamePcie has devices: a CPU-only request starts at kSameNumaNode.
  std::string where = s == Scope::kSamePcie
                          ? pcieWhat(req.gpus > 0 ? c.gpus[0]->where : c.nic->where, pcie)
                      : s == Scope::kSameNumaNode ? cat("NUMA node ", key)
                                                  : cat("socket ", key);
  std::string why = cat(join(parts), parts.empty() ? "" : " share ", parts.empty() ? "" : where);
  if (req.cpus > 0) {
    why += cat(parts.empty() ? "" : "; ", "CPUs ", formatCpuList(choice.devices.cpus),
               " are on NUMA node", nodes.size() > 1 ? "s " : " ");
    std::vector<std::string> ns;
    for (int n : nodes) ns.push_back(cat(n));
    why += join(ns);
  }
  if (s != Scope::kSamePcie && (req.gpus > 0 || req.rdma))
    why += cat(" (no single ", pcie == PcieScope::kSwitch ? "PCIe switch" : "PCIe root complex",
               s == Scope::kSameSocket ? " or NUMA node" : "", " has enough free)");
  return why;
}

}  // namespace

std::string_view scopeName(Scope s) {
  switch (s) {
    case Scope::kSamePcie:
      return "SamePCIe";
    case Scope::kSameNumaNode:
      return "SameNUMANode";
    case Scope::kSameSocket:
      return "SameSocket";
    case Scope::kNone:
      break;
  }
  return "None";
}

absl::StatusOr<ScopeAnswer> sharedScope(const Snapshot& snap, const DeviceSet& set,
                                        PcieScope pcie) {
  std::vector<const Locality*> places;
  std::vector<std::string> names;
  for (const std::string& a : set.gpus) {
    const Gpu* g = snap.gpu(a);
    if (g == nullptr) return absl::InvalidArgumentError(cat("no GPU ", a, " on this node"));
    places.push_back(&g->where);
    names.push_back("GPU " + a);
  }
  for (const std::string& a : set.rdma) {
    const RdmaDevice* x = snap.rdmaByAddress(a);
    if (x == nullptr) return absl::InvalidArgumentError(cat("no RDMA device ", a, " on this node"));
    places.push_back(&x->where);
    names.push_back("RDMA " + a);
  }
  std::vector<int> cpu_nodes, cpu_sockets;
  for (int c : set.cpus) {
    const Cpu* cpu = snap.cpu(c);
    if (cpu == nullptr) return absl::InvalidArgumentError(cat("no CPU ", c, " on this node"));
    cpu_nodes.push_back(cpu->node);
    cpu_sockets.push_back(cpu->socket);
  }
  auto all = [&](auto get, const std::vector<int>& cpu_values) -> bool {
    std::optional<decltype(get(*places.front()))> first;
    for (const Locality* l : places) {
      auto v = get(*l);
      if (!first) first = v;
      if (v != *first) return false;
    }
    for (int v : cpu_values) {
      if constexpr (std::is_same_v<decltype(get(*places.front())), int>) {
        if (first && v != *first) return false;
        if (!first) first = v;
      }
    }
    return true;
  };
  ScopeAnswer a;
  const std::string what =
      join(names) +
      (set.cpus.empty() ? "" : cat(names.empty() ? "" : " and ", "CPUs ", formatCpuList(set.cpus)));
  if (places.empty() && set.cpus.empty()) {
    a.why = "nothing to place";
    return a;
  }
  const bool pcie_ok = !places.empty() && set.cpus.empty() &&
                       !pcieId(*places.front(), pcie).empty() &&
                       all([&](const Locality& l) { return pcieId(l, pcie); }, {});
  if (pcie_ok) {
    a.scope = Scope::kSamePcie;
    a.why = cat(what, " share ", pcieWhat(*places.front(), pcie));
    return a;
  }
  const int node = places.empty() ? cpu_nodes.front() : places.front()->numa_node;
  if (node >= 0 && all([](const Locality& l) { return l.numa_node; }, cpu_nodes)) {
    a.scope = Scope::kSameNumaNode;
    a.why = cat(what, " share NUMA node ", node);
    return a;
  }
  const int socket = places.empty() ? cpu_sockets.front() : places.front()->socket;
  if (socket >= 0 && all([](const Locality& l) { return l.socket; }, cpu_sockets)) {
    a.scope = Scope::kSameSocket;
    a.why = cat(what, " share socket ", socket);
    return a;
  }
  a.why = cat(what, " span sockets (or sit where the kernel does not say)");
  return a;
}

absl::StatusOr<Choice> pick(const Snapshot& snap, const Request& req, const DeviceSet& taken,
                            PcieScope pcie) {
  std::vector<const Gpu*> free_gpus;
  for (const Gpu& g : snap.gpus) {
    if (!contains(taken.gpus, g.address)) free_gpus.push_back(&g);
  }
  std::vector<const RdmaDevice*> free_nics;
  for (const RdmaDevice& x : snap.rdma) {
    if (!x.isVirtualFunction() && !contains(taken.rdma, x.address)) free_nics.push_back(&x);
  }
  // Try each scope, tightest first; within a scope, groups in address order.
  for (Scope s : {Scope::kSamePcie, Scope::kSameNumaNode, Scope::kSameSocket}) {
    const bool cpus_only = req.gpus == 0 && !req.rdma;
    if (cpus_only && s == Scope::kSamePcie) continue;  // CPUs have no PCIe
    Groups groups = cpus_only ? cpuGroups(snap, s) : deviceGroups(free_gpus, free_nics, s, pcie);
    for (const std::string& k : groups.order) {
      const Candidate& c = groups.by_key[k];
      if (static_cast<int>(c.gpus.size()) < req.gpus) continue;
      if (req.rdma && c.nic == nullptr) continue;
      Choice choice;
      choice.scope = s;
      for (int i = 0; i < req.gpus; ++i) choice.devices.gpus.push_back(c.gpus[i]->address);
      if (req.rdma) choice.devices.rdma.push_back(c.nic->address);
      const std::vector<int> nodes = cpuNodes(snap, req, c, s, k);
      choice.devices.cpus = takeCpus(snap, nodes, req.cpus, taken.cpus);
      if (static_cast<int>(choice.devices.cpus.size()) < req.cpus) continue;
      choice.why = whyChosen(req, c, choice, nodes, k, pcie);
      return choice;
    }
  }
  return absl::ResourceExhaustedError(cat("no socket of this node has ", req.gpus, " free GPUs",
                                          req.rdma ? " with a free RDMA NIC" : "", " and ",
                                          req.cpus, " free CPUs together"));
}

}  // namespace crihook::topology
