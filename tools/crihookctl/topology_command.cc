#include "tools/crihookctl/topology_command.h"

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "base/quote.h"
#include "base/text.h"
#include "topology/report.h"
#include "topology/topology.h"
#include "topology/views.h"

namespace crihook::ctl {
namespace {

struct TopologyArgs {
  std::string root, output, format;
  std::optional<std::string> node;  // --node, else the host's name
  topology::DeviceReportOptions report;
};

absl::StatusOr<TopologyArgs> topologyArgs(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--root", true},
                               {"--output", true},
                               {"--format", true},
                               {"--node", true},
                               {"--pcie-id", true}});
  if (!p.ok()) return p.status();
  TopologyArgs a;
  a.root = p->get("--root", "/");
  a.output = p->get("--output", in.options.json ? "json" : "tree");
  a.format = p->get("--format", "yaml");
  if (p->has("--node")) a.node = p->get("--node");
  if (a.output != "tree" && a.output != "json" && a.output != "device-crd" &&
      a.output != "matrix" && a.output != "dot")
    return usageError(
        cat("--output must be tree, json, device-crd, matrix or dot, got ", quote(a.output)));
  if (a.format != "yaml" && a.format != "json")
    return usageError(cat("--format must be yaml or json, got ", a.format));
  if (p->has("--pcie-id")) {
    const std::string id = p->get("--pcie-id");
    if (id != "switch" && id != "root-complex")
      return usageError(cat("--pcie-id must be root-complex or switch, got ", id));
    a.report.pcie_id =
        id == "switch" ? topology::PcieScope::kSwitch : topology::PcieScope::kRootComplex;
  }
  return a;
}

void printWarnings(const topology::Snapshot& snap, std::ostream& err) {
  for (const std::string& w : snap.warnings) err << "warning: " << w << '\n';
}

// Koordinator's Device object. The object goes to a scheduler: what it lacks
// (a GPU's memory, a GPU without a minor) is said beside it, not in it.
void printDeviceObject(const topology::Snapshot& snap, TopologyArgs& a, const Invocation& in) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  a.report.node_name = a.node.value_or(host);
  nlohmann::json device = topology::deviceObject(snap, a.report);
  in.out << (a.format == "json"
                 ? device.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                 : topology::toYaml(device));
  printWarnings(snap, in.err);
  // Without its memory a GPU cannot be shared: Koordinator's scheduler
  // gives a gpu-memory-ratio request ratio x 0 bytes.
  size_t without_memory = 0, reported = 0;
  for (const topology::Gpu& g : snap.gpus) {
    if (!g.nvidia_driver || g.minor < 0) continue;
    ++reported;
    if (g.memory_bytes == 0) ++without_memory;
  }
  if (without_memory > 0) {
    in.err << "WARNING: " << without_memory << " of the " << reported
           << " GPU(s) in this report have no koordinator.sh/gpu-memory. Do not publish it on a "
              "node whose GPUs are shared: Koordinator's scheduler would give a pod asking for "
              "koordinator.sh/gpu-memory-ratio 0 bytes of GPU memory (crihook's gpu hook "
              "refuses such a pod). Run it where NVML answers.\n";
  }
}

}  // namespace

absl::StatusOr<int> cmdTopology(const Invocation& in) {
  auto a = topologyArgs(in);
  if (!a.ok()) return a.status();
  const topology::Snapshot snap = topology::discover(topology::SysRoot(a->root));
  if (a->output == "tree") {
    in.out << topology::tree(snap);
  } else if (a->output == "matrix") {
    in.out << topology::matrixText(topology::connectionMatrix(snap));
  } else if (a->output == "dot") {
    in.out << topology::dot(snap);
    // The picture is for a renderer: what discovery could not read goes beside it.
    printWarnings(snap, in.err);
  } else if (a->output == "json") {
    // What sysfs holds need not be UTF-8: replaced, not thrown on.
    in.out << topology::toJson(snap).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
           << '\n';
  } else {
    printDeviceObject(snap, *a, in);
  }
  return 0;
}

}  // namespace crihook::ctl
