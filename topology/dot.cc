#include <map>
#include <set>

#include "base/text.h"
#include "topology/views.h"

namespace crihook::topology {
namespace {

// Node IDs are ours ("gpu3", "sw1"): no text from sysfs is ever an ID, so
// escaping only has to make labels safe.
class Graph {
 public:
  // Declares a node once; later calls with the same id are no-ops.
  void node(const std::string& id, const std::string& label, std::string_view attrs = "") {
    if (!declared_.insert(id).second) return;
    nodes_ += cat("  ", id, " [label=\"", label, "\"", attrs.empty() ? "" : ", ", attrs, "];\n");
  }
  void edge(const std::string& from, const std::string& to, std::string_view attrs = "") {
    if (!edges_seen_.insert(from + " " + to).second) return;
    edges_ += cat("  ", from, " -> ", to, attrs.empty() ? "" : cat(" [", attrs, "]"), ";\n");
  }
  std::string text() const {
    return cat(
        "digraph topology {\n"
        "  graph [rankdir=LR, nodesep=0.15, ranksep=0.5, fontname=\"Helvetica\"];\n"
        "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f2f2f2\", "
        "fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [dir=none, color=\"#777777\"];\n",
        nodes_, edges_, "}\n");
  }

 private:
  std::set<std::string> declared_, edges_seen_;
  std::string nodes_, edges_;
};

std::string gib(uint64_t bytes) {
  return fmt::format("{:.0f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

std::string numaText(const MatrixDevice& d) {
  if (!d.numa_node) return "NUMA unknown (numa_node -1)";
  return cat("NUMA ", *d.numa_node, d.numa_inferred ? " (inferred)" : "");
}

}  // namespace

std::string dotEscape(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '&') {
      // Graphviz reads character entities in a plain label ("&#10;" draws a
      // line break): "&amp;" is drawn as the '&' it was.
      out += "&amp;";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      // A visible "\xNN": the backslash itself escaped for DOT.
      out += "\\\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

std::string dot(const Snapshot& snap) {
  const Matrix m = connectionMatrix(snap);
  Graph g;
  auto nodeId = [](std::optional<int> n) { return n ? cat("numa", *n) : std::string("numa_x"); };
  for (const NumaNode& n : snap.nodes) {
    const std::string id = nodeId(n.id);
    g.node(id, cat("NUMA node ", n.id, "\\nCPUs ", cpusOrNone(n.cpus), "\\n", gib(n.memory_bytes)),
           "fillcolor=\"#fff2cc\"");
    if (n.socket >= 0) {
      g.node(cat("socket", n.socket), cat("socket ", n.socket), "fillcolor=\"#fce5cd\"");
      g.edge(cat("socket", n.socket), id);
    }
  }
  std::map<std::string, std::string> ids;  // root complex or switch address -> node ID
  auto idOf = [&](const std::string& key, std::string_view prefix) {
    auto [it, fresh] = ids.emplace(key, "");
    if (fresh) it->second = cat(prefix, ids.size() - 1);
    return it->second;
  };
  for (size_t i = 0; i < m.devices.size(); ++i) {
    const MatrixDevice& d = m.devices[i];
    const std::string id = d.gpu ? cat("gpu", i) : cat("nic", i);
    std::string label;
    if (d.gpu != nullptr) {
      label = cat(d.label, d.gpu->minor >= 0 ? cat(" minor ", d.gpu->minor) : std::string(), "\\n",
                  dotEscape(d.gpu->address), "\\n", dotEscape(d.gpu->model), "\\n", numaText(d));
      g.node(id, label, "fillcolor=\"#d9ead3\"");
    } else {
      const RdmaDevice& x = *d.rdma;
      label = cat(d.label, " ", dotEscape(x.name), x.isVirtualFunction() ? " (VF)" : "", "\\n",
                  dotEscape(x.address));
      for (const RdmaPort& p : x.ports) {
        label += cat("\\nport ", p.number, " ", dotEscape(p.link_layer), " ", dotEscape(p.state));
      }
      label += cat("\\n", numaText(d));
      g.node(id, label,
             x.isVirtualFunction() ? "fillcolor=\"#eaf1fb\", style=\"rounded,dashed,filled\""
                                   : "fillcolor=\"#cfe2f3\"");
      // A VF hangs under its PF when the PF is an RDMA device here too.
      if (x.isVirtualFunction()) {
        bool under_pf = false;
        for (size_t j = 0; j < m.devices.size(); ++j) {
          const RdmaDevice* pf = m.devices[j].rdma;
          if (pf != nullptr && !pf->isVirtualFunction() && pf->address == x.physical_function) {
            g.edge(cat("nic", j), id, "style=dashed");
            under_pf = true;
            break;
          }
        }
        if (under_pf) continue;
      }
    }
    // Its chain: NUMA node -> root complex -> switches, outermost first.
    const PciDevice* pci = snap.pciDevice(d.address());
    std::string parent = nodeId(d.numa_node);
    if (!d.numa_node) g.node(parent, "NUMA node unknown\\n(numa_node -1)", "fillcolor=\"#fff2cc\"");
    if (pci == nullptr) {
      g.edge(parent, id);
      continue;
    }
    if (!pci->root_complex.empty()) {
      const std::string rc = idOf(pci->root_complex, "rc");
      g.node(rc, cat("root complex\\n", dotEscape(pci->root_complex)));
      g.edge(parent, rc);
      parent = rc;
    }
    // A switch is an upstream port with a downstream port below it: every
    // other bridge below the root port (as discover.cc reads the nearest).
    for (size_t b = 1; b + 1 < pci->bridges.size(); b += 2) {
      const std::string sw = idOf(pci->bridges[b], "sw");
      g.node(sw, cat("PCIe switch\\n", dotEscape(pci->bridges[b])), "fillcolor=\"#e6e6e6\"");
      g.edge(parent, sw);
      parent = sw;
    }
    g.edge(parent, id);
  }
  return g.text();
}

}  // namespace crihook::topology
