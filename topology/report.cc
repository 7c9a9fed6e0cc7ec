#include "report.h"

#include <map>
#include <set>

#include "holder.h"
#include "text.h"

namespace crihook::topology {
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.0f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

std::string pcieIdOf(const Locality& l, PcieId kind) {
  if (kind == PcieId::kRootComplex) return l.root_complex;
  if (!l.pcie_switch.empty()) return l.pcie_switch;
  return l.root_port.empty() ? l.root_complex : l.root_port;
}

std::string labelValue(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  }
  return s.substr(0, 63);
}

nlohmann::json localityJson(const Locality& l) {
  return {{"numa_node", l.numa_node},
          {"socket", l.socket},
          {"pcie_switch", l.pcie_switch},
          {"root_port", l.root_port},
          {"root_complex", l.root_complex}};
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
    layout[g.where.socket][g.where.numa_node]
          [g.where.pcie_switch.empty() ? "root port " + g.where.root_port
                                       : "PCIe switch " + g.where.pcie_switch]
              .gpus.push_back(&g);
  }
  for (const RdmaDevice& x : snap.rdma) {
    if (x.isVirtualFunction()) continue;  // listed under their PF
    layout[x.where.socket][x.where.numa_node]
          [x.where.pcie_switch.empty() ? "root port " + x.where.root_port
                                       : "PCIe switch " + x.where.pcie_switch]
              .nics.push_back(&x);
  }
  for (const auto& [socket, nodes] : layout) {
    out += socket < 0 ? "socket unknown\n" : cat("socket ", socket, "\n");
    for (const auto& [node, groups] : nodes) {
      const NumaNode* n = nullptr;
      for (const NumaNode& x : snap.nodes) n = x.id == node ? &x : n;
      if (n != nullptr) {
        out += cat("  NUMA node ", node, ": CPUs ", formatCpuList(n->cpus), ", ",
                   gib(n->memory_bytes), "\n");
      } else {
        out += "  NUMA node unknown (the device's numa_node is -1)\n";
      }
      for (const auto& [where, group] : groups) {
        out += cat("    ", where, "\n");
        for (const Gpu* g : group.gpus) {
          out += cat("      GPU ", g->address, " ", g->model,
                     g->minor >= 0 ? cat(" minor ", g->minor) : std::string(),
                     g->uuid.empty() ? std::string() : " " + g->uuid, "\n");
        }
        for (const RdmaDevice* x : group.nics) {
          std::string link;
          for (const RdmaPort& p : x->ports)
            link += cat(" port ", p.number, " ", p.link_layer, " ", p.state);
          out += cat("      RDMA ", x->name, " ", x->address, " ", x->uverbs,
                     x->netdevs.empty() ? std::string() : " " + x->netdevs.front(), link, "\n");
          for (const std::string& vf : x->virtual_functions) {
            const RdmaDevice* v = snap.rdmaByAddress(vf);
            out +=
                cat("        VF ", vf, v ? cat(" ", v->name, " ", v->uverbs) : std::string(), "\n");
          }
        }
      }
    }
  }
  for (const std::string& w : snap.warnings) out += cat("warning: ", w, "\n");
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
                        {"root_complex", d.root_complex},
                        {"bridges", d.bridges},
                        {"pcie_switch", d.pcie_switch}});
  }
  j["nvidia_driver_version"] = snap.nvidia_driver_version;
  j["warnings"] = snap.warnings;
  return j;
}

nlohmann::json deviceObject(const Snapshot& snap, const DeviceReportOptions& o) {
  nlohmann::json devices = nlohmann::json::array();
  auto topology = [&](const Locality& l, const std::string& address) {
    return nlohmann::json{{"socketID", l.socket},
                          {"nodeID", l.numa_node},
                          {"pcieID", pcieIdOf(l, o.pcie_id)},
                          {"busID", address}};
  };
  std::set<std::string> vendors, models;
  for (const Gpu& g : snap.gpus) {
    nlohmann::json d{
        {"type", "gpu"},
        {"id", g.uuid.empty() ? g.address : g.uuid},
        {"health", g.health},
        {"resources",
         {{"koordinator.sh/gpu-core", "100"}, {"koordinator.sh/gpu-memory-ratio", "100"}}},
        {"topology", topology(g.where, g.address)}};
    if (g.minor >= 0) d["minor"] = g.minor;
    if (g.memory_bytes > 0) {
      d["resources"]["koordinator.sh/gpu-memory"] = cat(g.memory_bytes / (1024 * 1024), "Mi");
    }
    devices.push_back(std::move(d));
    vendors.insert(g.vendor);
    models.insert(g.model);
  }
  int minor = 0;
  for (const RdmaDevice& x : snap.rdma) {
    if (x.isVirtualFunction()) continue;
    nlohmann::json d{{"type", "rdma"},
                     {"id", x.address},
                     {"minor", minor++},
                     {"health", true},
                     {"resources", {{"koordinator.sh/rdma", "100"}}},
                     {"topology", topology(x.where, x.address)}};
    if (!x.virtual_functions.empty()) {
      nlohmann::json vfs = nlohmann::json::array();
      for (size_t i = 0; i < x.virtual_functions.size(); ++i) {
        vfs.push_back({{"minor", static_cast<int>(i)}, {"busID", x.virtual_functions[i]}});
      }
      d["vfGroups"] = nlohmann::json::array({{{"labels", {{"type", "general"}}}, {"vfs", vfs}}});
    }
    devices.push_back(std::move(d));
  }
  nlohmann::json labels = nlohmann::json::object();
  // One value per label: a node of mixed GPUs names the first.
  if (!vendors.empty()) labels["node.koordinator.sh/gpu-vendor"] = labelValue(*vendors.begin());
  if (!models.empty()) labels["node.koordinator.sh/gpu-model"] = labelValue(*models.begin());
  if (!snap.nvidia_driver_version.empty())
    labels["node.koordinator.sh/gpu-driver-version"] = labelValue(snap.nvidia_driver_version);
  return {{"apiVersion", "scheduling.koordinator.sh/v1alpha1"},
          {"kind", "Device"},
          {"metadata", {{"name", o.node_name}, {"labels", labels}}},
          {"spec", {{"devices", devices}}}};
}

namespace {

void yaml(const nlohmann::json& v, int indent, std::string& out);

void yamlScalar(const nlohmann::json& v, std::string& out) { out += v.dump(); }

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
      out += pad + (plainKey(k) ? k : nlohmann::json(k).dump()) + ":";
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
