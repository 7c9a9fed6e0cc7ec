#include "topology/report.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "base/quote.h"
#include "base/text.h"
#include "topology/holder.h"

namespace crihook::topology {
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.0f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

// A label value the API server accepts: at most 63 characters of
// [A-Za-z0-9-_.], beginning and ending with a letter or digit. koordlet
// writes the model as NVML names it; a value the API refuses would lose the
// whole Device, so anything else becomes '-'.
std::string labelValue(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  }
  s = s.substr(0, 63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && !alnum(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && !alnum(s[i])) ++i;
  return s.substr(i);
}

// The model as koordlet labels it: "NVIDIA A100-SXM4-40GB" -> "A100-SXM4-40GB",
// "Tesla T4" -> "Tesla-T4".
std::string modelLabel(std::string model) {
  if (model.rfind("NVIDIA ", 0) == 0) model.erase(0, 7);
  std::replace(model.begin(), model.end(), ' ', '-');
  return labelValue(model);
}

// A byte count as Kubernetes writes a binary quantity: with the largest of
// Ki, Mi, Gi, Ti, Pi, Ei that divides it exactly, else in bytes.
std::string binaryQuantity(uint64_t bytes) {
  static const char* const kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  size_t i = 0;
  while (bytes != 0 && bytes % 1024 == 0 && i + 1 < std::size(kSuffixes)) {
    bytes /= 1024;
    ++i;
  }
  return cat(bytes, kSuffixes[i]);
}

// Text from sysfs or the driver on a terminal (a model, an RDMA or netdev
// name, a port state): as it is when it is a plain word (a model or a state:
// words) of printable ASCII, short enough to read; otherwise quoted and cut
// short (base/quote.h), so a newline or an escape sequence in a name can
// neither forge a line of the tree nor reach the terminal. Anyone with
// CAP_NET_ADMIN names a netdev, and any byte but '/', ':' and white space
// goes.
std::string shown(std::string_view text, bool words = false) {
  bool plain = text.size() <= kMaxQuotedBytes;
  for (size_t i = 0; plain && i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    plain = c > 0x20 && c < 0x7f && c != '"' && c != '\\';
    plain = plain || (words && c == ' ');
  }
  return plain ? std::string(text) : quote(text);
}

// A device has a port or two; a tree that says hundreds says nothing more.
constexpr size_t kMaxShownPorts = 8;

// What a device hangs off, as the tree groups devices: its switch, else its
// root port, else the root complex's own bus.
std::string attachment(const Locality& l) {
  if (!l.pcie_switch.empty()) return cat("PCIe switch ", shown(l.pcie_switch));
  if (!l.root_port.empty()) return cat("root port ", shown(l.root_port));
  if (!l.root_complex.empty()) return cat("root complex ", shown(l.root_complex), ", no bridge");
  return "no root complex";
}

// Where the NUMA node came from, when it is not the device's own.
std::string numaNote(const Locality& l) {
  if (l.numa_node_from.empty()) return "";
  if (l.numa_node_from == "none")
    return cat(" (numa_node -1, no bridge above knows: node ", l.numa_node, " assumed)");
  return cat(" (numa_node -1: node ", l.numa_node, " of bridge ", shown(l.numa_node_from), ")");
}

nlohmann::json localityJson(const Locality& l) {
  return {{"numa_node", l.numa_node}, {"numa_node_from", l.numa_node_from},
          {"socket", l.socket},       {"pcie_switch", l.pcie_switch},
          {"root_port", l.root_port}, {"root_complex", l.root_complex}};
}

}  // namespace

std::string summary(const Snapshot& snap) {
  return cat(snap.cpus.size(), " CPUs, ", snap.nodes.size(), " NUMA nodes, ", snap.gpus.size(),
             " GPUs, ", snap.rdma.size(), " RDMA devices, ", snap.warnings.size(), " warnings");
}

std::string tree(const Snapshot& snap) {
  std::string out;
  // Group devices: socket -> node -> attachment point (switch or root port).
  struct Group {
    std::vector<const Gpu*> gpus;
    std::vector<const RdmaDevice*> nics;
  };
  std::map<int, std::map<int, std::map<std::string, Group>>> layout;
  for (const NumaNode& n : snap.nodes) layout[n.socket][n.id];
  for (const Gpu& g : snap.gpus) {
    layout[g.where.socket][g.where.numa_node][attachment(g.where)].gpus.push_back(&g);
  }
  for (const RdmaDevice& x : snap.rdma) {
    if (x.isVirtualFunction()) continue;  // listed under their PF
    layout[x.where.socket][x.where.numa_node][attachment(x.where)].nics.push_back(&x);
  }
  // Each node by id, once: a machine of many nodes would otherwise walk them
  // all for each of them.
  std::map<int, const NumaNode*> by_id;
  for (const NumaNode& x : snap.nodes) by_id[x.id] = &x;
  for (const auto& [socket, nodes] : layout) {
    out += socket < 0 ? "socket unknown\n" : cat("socket ", socket, "\n");
    for (const auto& [node, groups] : nodes) {
      const auto found = by_id.find(node);
      const NumaNode* n = found == by_id.end() ? nullptr : found->second;
      if (n != nullptr) {
        out += cat("  NUMA node ", node, ": CPUs ", cpusOrNone(n->cpus), ", ", gib(n->memory_bytes),
                   "\n");
      } else {
        out += cat("  NUMA node ", node, " (not in sysfs)\n");
      }
      for (const auto& [where, group] : groups) {
        out += cat("    ", where, "\n");
        for (const Gpu* g : group.gpus) {
          out += cat("      GPU ", shown(g->address), " ", shown(g->model, true),
                     g->minor >= 0 ? cat(" minor ", g->minor) : std::string(),
                     g->uuid.empty() ? std::string() : cat(" ", shown(g->uuid)), numaNote(g->where),
                     "\n");
        }
        for (const RdmaDevice* x : group.nics) {
          std::string link;
          for (size_t i = 0; i < x->ports.size() && i < kMaxShownPorts; ++i) {
            const RdmaPort& p = x->ports[i];
            link += cat(" port ", p.number, " ", shown(p.link_layer), " ", shown(p.state, true));
          }
          if (x->ports.size() > kMaxShownPorts)
            link += cat(" and ", x->ports.size() - kMaxShownPorts, " more ports");
          out += cat("      RDMA ", shown(x->name), " ", shown(x->address), " ", shown(x->uverbs),
                     x->netdevs.empty() ? std::string() : cat(" ", shown(x->netdevs.front())), link,
                     numaNote(x->where), "\n");
          for (const std::string& vf : x->virtual_functions) {
            const RdmaDevice* v = snap.rdmaByAddress(vf);
            out += cat("        VF ", shown(vf),
                       v ? cat(" ", shown(v->name), " ", shown(v->uverbs)) : std::string(), "\n");
          }
        }
      }
    }
  }
  // Warnings quote what they hold from sysfs; cut to one line all the same.
  for (const std::string& w : snap.warnings) out += cat("warning: ", boundedMessage(w), "\n");
  return out;
}

nlohmann::json toJson(const Snapshot& snap) {
  nlohmann::json j;
  j["root"] = snap.root;
  j["cpus"] = nlohmann::json::array();
  for (const Cpu& c : snap.cpus) {
    j["cpus"].push_back({{"id", c.id},
                         {"socket", c.socket},
                         {"core", c.core},
                         {"numa_node", c.node},
                         {"siblings", c.siblings}});
  }
  j["numa_nodes"] = nlohmann::json::array();
  for (const NumaNode& n : snap.nodes) {
    j["numa_nodes"].push_back({{"id", n.id},
                               {"socket", n.socket},
                               {"cpus", formatCpuList(n.cpus)},
                               {"memory_bytes", n.memory_bytes},
                               {"distances", n.distances}});
  }
  j["gpus"] = nlohmann::json::array();
  for (const Gpu& g : snap.gpus) {
    j["gpus"].push_back({{"address", g.address},
                         {"vendor", g.vendor},
                         {"model", g.model},
                         {"nvidia_driver", g.nvidia_driver},
                         {"minor", g.minor},
                         {"uuid", g.uuid},
                         {"memory_bytes", g.memory_bytes},
                         {"health", g.health},
                         {"locality", localityJson(g.where)}});
  }
  j["rdma"] = nlohmann::json::array();
  for (const RdmaDevice& x : snap.rdma) {
    nlohmann::json ports = nlohmann::json::array();
    for (const RdmaPort& p : x.ports) {
      ports.push_back({{"number", p.number}, {"state", p.state}, {"link_layer", p.link_layer}});
    }
    j["rdma"].push_back({{"name", x.name},
                         {"address", x.address},
                         {"driver", x.driver},
                         {"ports", ports},
                         {"uverbs", x.uverbs},
                         {"uverbs_dev", x.uverbs_dev},
                         {"netdevs", x.netdevs},
                         {"physical_function", x.physical_function},
                         {"virtual_functions", x.virtual_functions},
                         {"locality", localityJson(x.where)}});
  }
  j["pci"] = nlohmann::json::array();
  for (const PciDevice& d : snap.pci) {
    j["pci"].push_back({{"address", d.address},
                        {"vendor", d.vendor},
                        {"device", d.device},
                        {"class", d.class_code},
                        {"driver", d.driver},
                        {"numa_node", d.numa_node},
                        {"reported_numa_node", d.reported_numa_node},
                        {"numa_node_from", d.numa_node_from},
                        {"root_complex", d.root_complex},
                        {"bridges", d.bridges},
                        {"pcie_switch", d.pcie_switch}});
  }
  j["nvidia_driver_version"] = snap.nvidia_driver_version;
  j["warnings"] = snap.warnings;
  return j;
}

std::optional<int> mellanoxMinor(std::string_view name) {
  if (name.substr(0, 3) != "mlx") return std::nullopt;
  size_t i = 3;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 3 || i >= name.size() || name[i] != '_') return std::nullopt;
  const std::string_view n = name.substr(i + 1);
  if (n.empty() || n.size() > 6) return std::nullopt;  // a few hundred devices at most
  for (char c : n) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::stoi(std::string(n));
}

std::vector<std::pair<int, const RdmaDevice*>> rdmaMinors(const Snapshot& snap) {
  std::vector<const RdmaDevice*> functions;
  std::set<std::string> addresses;
  for (const RdmaDevice& x : snap.rdma) {
    if (!x.isVirtualFunction() && addresses.insert(x.address).second) functions.push_back(&x);
  }
  std::vector<std::pair<int, const RdmaDevice*>> out;
  std::set<int> taken;
  std::vector<const RdmaDevice*> others;
  for (const RdmaDevice* x : functions) {
    auto minor = mellanoxMinor(x->name);
    if (minor && taken.insert(*minor).second) {
      out.emplace_back(*minor, x);
    } else {
      others.push_back(x);
    }
  }
  int next = taken.empty() ? 0 : *taken.rbegin() + 1;
  for (const RdmaDevice* x : others) out.emplace_back(next++, x);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

nlohmann::json deviceObject(const Snapshot& snap, const DeviceReportOptions& o) {
  auto topology = [&](const Locality& l, const std::string& address) {
    return nlohmann::json{{"socketID", l.socket},
                          {"nodeID", l.numa_node},
                          {"pcieID", pcieId(l, o.pcie_id)},
                          {"busID", address}};
  };
  // koordlet leaves topology out when it has no PCIe identity for a device.
  auto withTopology = [&](nlohmann::json d, const Locality& l, const std::string& address) {
    if (!pcieId(l, o.pcie_id).empty()) d["topology"] = topology(l, address);
    return d;
  };
  std::vector<const Gpu*> gpus;
  for (const Gpu& g : snap.gpus) {
    if (g.nvidia_driver && g.minor >= 0) gpus.push_back(&g);  // discovery warned of the rest
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const Gpu* a, const Gpu* b) { return a->minor < b->minor; });
  nlohmann::json devices = nlohmann::json::array();
  std::set<std::string> models;
  for (const Gpu* g : gpus) {
    nlohmann::json d{
        {"type", "gpu"},
        {"id", g->uuid.empty() ? g->address : g->uuid},
        {"minor", g->minor},
        {"health", g->health},
        {"resources",
         {{"koordinator.sh/gpu-core", "100"}, {"koordinator.sh/gpu-memory-ratio", "100"}}}};
    if (g->memory_bytes > 0)
      d["resources"]["koordinator.sh/gpu-memory"] = binaryQuantity(g->memory_bytes);
    devices.push_back(withTopology(std::move(d), g->where, g->address));
    models.insert(g->model);
  }

  for (const auto& [minor, x] : rdmaMinors(snap)) {
    nlohmann::json d{{"type", "rdma"},
                     {"id", x->address},
                     {"minor", minor},
                     {"health", x->portsActive()},
                     {"resources", {{"koordinator.sh/rdma", "100"}}}};
    d = withTopology(std::move(d), x->where, x->address);
    if (!x->virtual_functions.empty()) {
      std::vector<std::string> sorted = x->virtual_functions;
      std::sort(sorted.begin(), sorted.end());
      nlohmann::json vfs = nlohmann::json::array();
      for (const std::string& vf : sorted) vfs.push_back({{"minor", -1}, {"busID", vf}});
      d["vfGroups"] = nlohmann::json::array({{{"vfs", vfs}}});
    }
    devices.push_back(std::move(d));
  }

  nlohmann::json labels = nlohmann::json::object();
  if (!gpus.empty()) labels["node.koordinator.sh/gpu-vendor"] = "nvidia";
  if (models.size() == 1) {
    if (std::string m = modelLabel(*models.begin()); !m.empty())
      labels["node.koordinator.sh/gpu-model"] = m;
    if (std::string v = labelValue(snap.nvidia_driver_version); !v.empty())
      labels["node.koordinator.sh/gpu-driver-version"] = v;
  }
  return {{"apiVersion", "scheduling.koordinator.sh/v1alpha1"},
          {"kind", "Device"},
          {"metadata", {{"name", o.node_name}, {"labels", labels}}},
          {"spec", {{"devices", devices}}}};
}

namespace {

void yaml(const nlohmann::json& v, int indent, std::string& out);

// sysfs and procfs text need not be UTF-8 (a driver's model name, a port
// state): a byte that is not becomes U+FFFD rather than an exception.
std::string dumped(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void yamlScalar(const nlohmann::json& v, std::string& out) { out += dumped(v); }

bool plainKey(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != '/')
      return false;
  }
  return true;
}

void yamlEntry(const nlohmann::json& v, int indent, std::string& out) {
  if (v.is_object() && !v.empty()) {
    out += "\n";
    yaml(v, indent + 2, out);
  } else if (v.is_array() && !v.empty()) {
    out += "\n";
    yaml(v, indent, out);
  } else if (v.is_object()) {
    out += " {}\n";
  } else if (v.is_array()) {
    out += " []\n";
  } else {
    out += " ";
    yamlScalar(v, out);
    out += "\n";
  }
}

void yaml(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      out += pad + (plainKey(k) ? k : dumped(nlohmann::json(k))) + ":";
      yamlEntry(x, indent, out);
    }
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (x.is_object() && !x.empty()) {
        // "- " then the object's first key on the same line.
        std::string inner;
        yaml(x, indent + 2, inner);
        out += pad + "- " + inner.substr(static_cast<size_t>(indent) + 2);
      } else {
        out += pad + "-";
        yamlEntry(x, indent, out);
      }
    }
  } else {
    out += pad;
    yamlScalar(v, out);
    out += "\n";
  }
}

}  // namespace

std::string toYaml(const nlohmann::json& value) {
  std::string out;
  yaml(value, 0, out);
  return out;
}

}  // namespace crihook::topology
