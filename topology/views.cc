#include "topology/views.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "base/text.h"

namespace crihook::topology {
namespace {

// Text from sysfs on a terminal: printable ASCII, one line, cut short.
constexpr size_t kMaxShownBytes = 64;
std::string printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxShownBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  if (text.size() > kMaxShownBytes) out += "...";
  return out;
}

// mlx5_2 before mlx5_10: runs of digits compare as numbers.
bool nameLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      std::string_view x = a.substr(i, ie - i), y = b.substr(j, je - j);
      while (x.size() > 1 && x.front() == '0') x.remove_prefix(1);
      while (y.size() > 1 && y.front() == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

// The switch a bridge of a chain (root port first) belongs to: a PCIe switch
// is an upstream port with downstream ports below it, so a chain alternates
// root port, upstream, downstream, upstream, ... (discover.cc reads the
// nearest switch the same way). The root port stands for itself.
const std::string& switchOf(const std::vector<std::string>& chain, size_t i) {
  return i == 0 || i % 2 == 1 ? chain[i] : chain[i - 1];
}

struct Place {
  const PciDevice* pci = nullptr;
  std::optional<int> node;
  bool inferred = false;
};

Place placeOf(const Snapshot& snap, const std::string& address) {
  Place p;
  p.pci = snap.pciDevice(address);
  if (p.pci == nullptr) return p;
  const std::string& from = p.pci->numa_node_from;
  // With one node, a device that does not say is on it all the same.
  if (from != "none" || snap.nodes.size() <= 1) p.node = p.pci->numa_node;
  p.inferred = !from.empty();
  return p;
}

// The link between two rows of the matrix (never one row with itself).
Link linkBetween(const Place& a, const Place& b) {
  if (a.pci == nullptr || b.pci == nullptr) return Link::kSys;
  // Two RDMA devices of one PCI function (one per port on some NICs).
  if (a.pci == b.pci) return Link::kPix;
  const PciDevice& x = *a.pci;
  const PciDevice& y = *b.pci;
  if (!x.root_complex.empty() && x.root_complex == y.root_complex) {
    size_t k = 0;  // bridges both lie below
    while (k < x.bridges.size() && k < y.bridges.size() && x.bridges[k] == y.bridges[k]) ++k;
    if (k == 0) return Link::kPhb;
    // The bridges between the two: the one they meet at and those below it
    // on either side; PIX when they are all one switch's ports (or one
    // bridge).
    std::set<std::string> switches{switchOf(x.bridges, k - 1)};
    for (size_t i = k; i < x.bridges.size(); ++i) switches.insert(switchOf(x.bridges, i));
    for (size_t i = k; i < y.bridges.size(); ++i) switches.insert(switchOf(y.bridges, i));
    return switches.size() <= 1 ? Link::kPix : Link::kPxb;
  }
  if (a.node && b.node && *a.node == *b.node) return Link::kNode;
  return Link::kSys;
}

const NumaNode* nodeById(const Snapshot& snap, int id) {
  for (const NumaNode& n : snap.nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

// Where a row's device sits, for a pod's picture: its switch, else its root
// port, else the root complex's bus; the root complex; its NUMA node (and
// the bridge it was taken from) and that node's socket.
std::string whereText(const Snapshot& snap, const MatrixDevice& d) {
  const Locality& l = d.gpu ? d.gpu->where : d.rdma->where;
  std::string s;
  if (l.root_complex.empty()) {
    s = "under no root complex sysfs shows";
  } else {
    s = !l.pcie_switch.empty() ? cat("switch ", printable(l.pcie_switch))
        : !l.root_port.empty() ? cat("root port ", printable(l.root_port))
                               : std::string("on the root complex's bus (no bridge above it)");
    s += cat(", root complex ", printable(l.root_complex));
  }
  s += ", NUMA ";
  if (!d.numa_node) return s + "unknown (numa_node -1)";
  s += cat(*d.numa_node);
  if (!l.numa_node_from.empty() && l.numa_node_from != "none")
    s += cat(" (numa_node -1: of bridge ", printable(l.numa_node_from), ")");
  const int socket = snap.socketOfNode(*d.numa_node);
  if (socket >= 0) s += cat(", socket ", socket);
  return s;
}

// The row of the matrix holding `g` or `x`; m.devices.size() when none does.
size_t rowOf(const Matrix& m, const Gpu* g, const RdmaDevice* x) {
  for (size_t i = 0; i < m.devices.size(); ++i) {
    if ((g && m.devices[i].gpu == g) || (x && m.devices[i].rdma == x)) return i;
  }
  return m.devices.size();
}

// A pod's GPU by its PCI address, else its minor.
const Gpu* podGpu(const Snapshot& snap, const PodDevice& p) {
  const Gpu* g = p.pci.empty() ? nullptr : snap.gpu(p.pci);
  if (g == nullptr && p.minor >= 0) g = snap.gpuByMinor(p.minor);
  return g;
}

// A pod's RDMA device by its name, else its PCI address, else its uverbs.
const RdmaDevice* podRdma(const Snapshot& snap, const PodDevice& p) {
  const RdmaDevice* x = p.name.empty() ? nullptr : snap.rdmaByName(p.name);
  if (x == nullptr && !p.pci.empty()) x = snap.rdmaByAddress(p.pci);
  for (const RdmaDevice& r : snap.rdma) {
    if (x == nullptr && !p.uverbs.empty() && r.uverbs == p.uverbs) x = &r;
  }
  return x;
}

// A line per device of a pod, appended to `out`: where it sits, or why it
// is not placed. Returns the rows placed, each once, in the pod's order.
std::vector<size_t> podDeviceLines(const Snapshot& snap, const Matrix& m,
                                   const std::vector<PodDevice>& devices, std::string_view indent,
                                   std::string& out) {
  std::vector<size_t> placed;
  for (const PodDevice& p : devices) {
    size_t row = m.devices.size();
    std::string what;
    if (p.type == "gpu") {
      row = rowOf(m, podGpu(snap, p), nullptr);
      what = p.minor >= 0 ? cat("GPU minor ", p.minor) : cat("GPU ", printable(p.pci));
    } else if (p.type == "rdma") {
      row = rowOf(m, nullptr, podRdma(snap, p));
      what = cat("RDMA ", printable(!p.name.empty() ? p.name : !p.pci.empty() ? p.pci : p.uverbs));
    } else {
      out += cat(indent, printable(p.type), p.minor >= 0 ? cat(" minor ", p.minor) : "",
                 ": not a GPU or RDMA device; not placed\n");
      continue;
    }
    if (row == m.devices.size()) {
      out += cat(indent, what, ": not in this machine's topology\n");
      continue;
    }
    const MatrixDevice& d = m.devices[row];
    if (d.gpu != nullptr) {
      out += cat(indent, d.label, " (",
                 d.gpu->minor >= 0 ? cat("minor ", d.gpu->minor, ", ") : std::string(),
                 printable(d.gpu->address), "): ", whereText(snap, d), "\n");
    } else {
      out += cat(indent, d.label, " ", printable(d.rdma->name), " (", printable(d.rdma->address),
                 d.rdma->isVirtualFunction() ? ", a VF" : "", "): ", whereText(snap, d), "\n");
    }
    if (std::find(placed.begin(), placed.end(), row) == placed.end()) placed.push_back(row);
  }
  return placed;
}

// A pod's CPUs by the NUMA node they are on.
using CpusByNode = std::map<int, std::vector<int>>;

// The lines on a pod's CPUs, appended to `out`: by NUMA node, then those the
// machine does not have. Returns them by node (empty when `cpuset` is not
// known, not pinned or not a CPU list).
CpusByNode podCpuLines(const Snapshot& snap, std::optional<std::string_view> cpuset,
                       std::string_view indent, std::string& out) {
  CpusByNode by_node;
  std::vector<int> cpus;
  if (!cpuset) return by_node;  // not known: nothing to say
  if (cpuset->empty()) {
    out += cat(indent, "cpus: not pinned (any CPU of the machine)\n");
    return by_node;
  }
  if (!parseCpuList(*cpuset, cpus)) {
    out += cat(indent, "cpus \"", printable(*cpuset), "\": not a CPU list\n");
    return by_node;
  }
  // Each CPU's node by id, once: the cpuset may name every CPU up to 65535,
  // and a walk over the machine's CPUs for each would be quadratic.
  std::map<int, int> node_of;
  for (const Cpu& cpu : snap.cpus) node_of.emplace(cpu.id, cpu.node);
  std::vector<int> nowhere;
  for (int c : cpus) {
    auto it = node_of.find(c);
    if (it != node_of.end() && it->second >= 0) {
      by_node[it->second].push_back(c);
    } else {
      nowhere.push_back(c);
    }
  }
  for (const auto& [node, list] : by_node) {
    const int socket = snap.socketOfNode(node);
    out += cat(indent, "cpus ", formatCpuList(list), " on NUMA ", node,
               socket >= 0 ? cat(" (socket ", socket, ")") : std::string(), "\n");
  }
  if (!nowhere.empty())
    out += cat(indent, "cpus ", formatCpuList(nowhere), ": not CPUs of this machine\n");
  return by_node;
}

// What is wrong at a glance: the farthest link between a pod's devices.
void farthestLinkLine(const Matrix& m, const std::vector<size_t>& placed, std::string_view indent,
                      std::string& out) {
  if (placed.size() < 2) return;
  size_t a = placed[0], b = placed[1];
  for (size_t i : placed) {
    for (size_t j : placed) {
      if (m.links[i][j] > m.links[a][b]) a = i, b = j;
    }
  }
  out += cat(indent, "farthest link between its devices: ", linkName(m.links[a][b]), " (",
             m.devices[a].label, " - ", m.devices[b].label, ")\n");
}

// What is wrong at a glance: a pod's CPUs off its devices' NUMA nodes (or
// that none is), when every device's node and some CPUs' are known.
void offNodeCpusLine(const Matrix& m, const std::vector<size_t>& placed, const CpusByNode& cpus,
                     std::string_view indent, std::string& out) {
  std::set<int> device_nodes;
  for (size_t i : placed) {
    if (!m.devices[i].numa_node) return;
    device_nodes.insert(*m.devices[i].numa_node);
  }
  if (placed.empty() || cpus.empty()) return;
  std::vector<int> off;
  for (const auto& [node, list] : cpus) {
    if (!device_nodes.count(node)) off.insert(off.end(), list.begin(), list.end());
  }
  std::string nodes;
  for (int n : device_nodes) nodes += cat(nodes.empty() ? "" : ",", n);
  const char* plural = device_nodes.size() > 1 ? "s " : " ";
  if (off.empty()) {
    out += cat(indent, "cpus on its devices' NUMA node", plural, nodes, "\n");
  } else {
    out += cat(indent, "cpus ", formatCpuList(off), " off its devices' NUMA node", plural, nodes,
               "\n");
  }
}

}  // namespace

std::string_view linkName(Link link) {
  switch (link) {
    case Link::kSelf:
      return "X";
    case Link::kPix:
      return "PIX";
    case Link::kPxb:
      return "PXB";
    case Link::kPhb:
      return "PHB";
    case Link::kNode:
      return "NODE";
    case Link::kSys:
      return "SYS";
  }
  return "?";
}

const std::string& MatrixDevice::address() const { return gpu ? gpu->address : rdma->address; }

Matrix connectionMatrix(const Snapshot& snap) {
  Matrix m;
  std::vector<Place> places;
  auto add = [&](std::string label, const Gpu* g, const RdmaDevice* x) {
    MatrixDevice d;
    d.label = std::move(label);
    d.gpu = g;
    d.rdma = x;
    Place p = placeOf(snap, d.address());
    d.numa_node = p.node;
    d.numa_inferred = p.node && p.inferred;
    if (const NumaNode* n = p.node ? nodeById(snap, *p.node) : nullptr) d.cpus = n->cpus;
    m.devices.push_back(std::move(d));
    places.push_back(p);
  };
  for (const Gpu& g : snap.gpus) add(cat("GPU", m.devices.size()), &g, nullptr);
  std::vector<const RdmaDevice*> nics;
  for (const RdmaDevice& x : snap.rdma) nics.push_back(&x);
  std::stable_sort(nics.begin(), nics.end(), [](const RdmaDevice* a, const RdmaDevice* b) {
    return nameLess(a->name, b->name);
  });
  for (size_t i = 0; i < nics.size(); ++i) add(cat("NIC", i), nullptr, nics[i]);
  const size_t n = m.devices.size();
  m.links.assign(n, std::vector<Link>(n, Link::kSys));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      m.links[i][j] = i == j ? Link::kSelf : linkBetween(places[i], places[j]);
    }
  }
  return m;
}

std::string matrixText(const Matrix& m) {
  const size_t n = m.devices.size();
  if (n == 0) return "no GPU and no RDMA device\n";
  size_t label_width = 0;
  for (const MatrixDevice& d : m.devices) label_width = std::max(label_width, d.label.size());
  label_width += 2;
  const size_t cell = std::max<size_t>(label_width, 6);
  std::vector<std::string> cpus, numa;
  bool inferred = false, unknown = false, cpuless = false;
  for (const MatrixDevice& d : m.devices) {
    // Never a blank cell: a column read by position would shift. A node
    // without CPUs is a memory-only one, or one whose cpulist was unreadable.
    const bool none = d.numa_node && d.cpus.empty();
    cpus.push_back(!d.numa_node ? "N/A" : cpusOrNone(d.cpus));
    numa.push_back(d.numa_node ? cat(*d.numa_node, d.numa_inferred ? "*" : "") : "N/A");
    inferred = inferred || d.numa_inferred;
    unknown = unknown || !d.numa_node;
    cpuless = cpuless || none;
  }
  size_t cpu_width = std::string_view("CPU Affinity").size() + 2;
  for (const std::string& c : cpus) cpu_width = std::max(cpu_width, c.size() + 2);

  std::string out = pad("", label_width);
  for (const MatrixDevice& d : m.devices) out += pad(d.label, cell);
  out += pad("CPU Affinity", cpu_width) + "NUMA Affinity\n";
  for (size_t i = 0; i < n; ++i) {
    out += pad(m.devices[i].label, label_width);
    for (size_t j = 0; j < n; ++j) out += pad(std::string(linkName(m.links[i][j])), cell);
    out += pad(cpus[i], cpu_width) + numa[i] + "\n";
  }
  out +=
      "\nLegend:\n\n"
      "  X    = the device itself\n"
      "  SYS  = through PCIe and the interconnect between NUMA nodes (QPI/UPI, Infinity\n"
      "         Fabric), or across root complexes with a NUMA node unknown\n"
      "  NODE = through PCIe and between the PCIe host bridges of one NUMA node\n"
      "  PHB  = through PCIe and a PCIe host bridge (the CPU's root complex)\n"
      "  PXB  = through several PCIe bridges or switches, not the host bridge\n"
      "  PIX  = through at most one PCIe bridge or switch\n"
      "  NVLink (nvidia-smi's NV#) is not in sysfs: GPUs are classed by their PCIe path\n";
  if (inferred) {
    out +=
        "  *    = NUMA node inferred: the device's numa_node is -1; that of the nearest\n"
        "         bridge above it, or the machine's only node\n";
  }
  if (unknown) {
    out += "  N/A  = NUMA node unknown: numa_node -1 on the device and every bridge above\n";
  }
  if (cpuless) out += "  none = the device's NUMA node has no CPUs (or sysfs did not list them)\n";
  std::string gpus, nics;
  for (const MatrixDevice& d : m.devices) {
    if (d.gpu != nullptr) {
      gpus += cat("  ", d.label, ": ", printable(d.gpu->address), " ", printable(d.gpu->model),
                  d.gpu->minor >= 0 ? cat(", minor ", d.gpu->minor) : std::string(), "\n");
      continue;
    }
    const RdmaDevice& x = *d.rdma;
    std::string vf;
    if (x.isVirtualFunction()) {
      const RdmaDevice* pf = nullptr;
      for (const MatrixDevice& e : m.devices) {
        if (e.rdma != nullptr && e.rdma->address == x.physical_function) pf = e.rdma;
      }
      vf = cat(", VF of ", pf ? printable(pf->name) : printable(x.physical_function));
    }
    nics += cat("  ", d.label, ": ", printable(x.name), " ", printable(x.address), vf, "\n");
  }
  if (!gpus.empty()) out += "\nGPU Legend:\n\n" + gpus;
  if (!nics.empty()) out += "\nNIC Legend:\n\n" + nics;
  return out;
}

std::string podPicture(const Snapshot& snap, const std::vector<PodDevice>& devices,
                       std::optional<std::string_view> cpuset, std::string_view indent) {
  const Matrix m = connectionMatrix(snap);
  std::string out;
  const std::vector<size_t> placed = podDeviceLines(snap, m, devices, indent, out);
  const CpusByNode cpus = podCpuLines(snap, cpuset, indent, out);
  farthestLinkLine(m, placed, indent, out);
  offNodeCpusLine(m, placed, cpus, indent, out);
  return out;
}

}  // namespace crihook::topology
