// Topology discovery (topology/discover.cc) on a fixture tree whose files
// say what the input says: sysfs and procfs hold what drivers and firmware
// wrote, and discovery must turn any of it into a Snapshot with warnings,
// never a crash or a hang. The report (tree, JSON, Koordinator Device) is
// built from each Snapshot too, and the views people read (the connection
// matrix, the Graphviz picture, a pod's picture), each checked for what a
// reader relies on: the matrix square and symmetric, every row of its text
// as many cells as the header says; no byte of any view a control byte (but
// the newline ending a line) or non-ASCII; every DOT string closed on its
// own line, and no '&' in a label that Graphviz would read as an entity.
//
// The tree is fixed (built once): two NUMA nodes, four CPUs, an NVIDIA GPU
// behind a bridge, a Mellanox NIC with one SR-IOV VF. The input is split at
// NUL bytes into the contents of the files kParts names, in that order; a
// file past the input's last part is absent. Two parts are the text of
// symlinks (sysfs's bus and class links), so links out of the root and
// dangling ones come up too.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/report.h"
#include "topology/sysfs.h"
#include "topology/topology.h"
#include "topology/views.h"

namespace {

namespace fs = std::filesystem;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_topology: %s\n", what);
    std::abort();
  }
}

constexpr const char* kCpu = "sys/devices/system/cpu/";
constexpr const char* kNode = "sys/devices/system/node/";
constexpr const char* kBridge = "sys/devices/pci0000:00/0000:00:01.0";
constexpr const char* kGpu = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
constexpr const char* kNic = "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0";
constexpr const char* kVf = "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.1";

struct Part {
  std::string path;  // under the root
  bool link;         // the part is a symlink's target, not a file's contents
};

// In the order of the input's parts: the files most worth varying first.
const std::vector<Part>& parts() {
  static const std::vector<Part> p = {
      {std::string(kCpu) + "online", false},
      {std::string(kNode) + "online", false},
      {std::string(kNode) + "node0/cpulist", false},
      {std::string(kNode) + "node0/meminfo", false},
      {std::string(kNode) + "node0/distance", false},
      {std::string(kCpu) + "cpu0/topology/physical_package_id", false},
      {std::string(kCpu) + "cpu0/topology/core_id", false},
      {std::string(kCpu) + "cpu0/topology/thread_siblings_list", false},
      {std::string(kGpu) + "/vendor", false},
      {std::string(kGpu) + "/class", false},
      {std::string(kGpu) + "/numa_node", false},
      {"proc/driver/nvidia/gpus/0000:01:00.0/information", false},
      {"proc/driver/nvidia/version", false},
      {std::string(kBridge) + "/numa_node", false},
      {std::string(kNic) + "/infiniband/mlx5_0/ports/1/state", false},
      {std::string(kNic) + "/infiniband/mlx5_0/ports/1/link_layer", false},
      {std::string(kNic) + "/infiniband_verbs/uverbs0/ibdev", false},
      {"sys/bus/pci/devices/0000:01:00.0", true},
      {"sys/class/infiniband/mlx5_0", true},
  };
  return p;
}

void writeFile(const fs::path& p, std::string_view text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void link(const fs::path& root, const std::string& target_rel, const std::string& at) {
  const fs::path where = root / at;
  fs::create_directories(where.parent_path());
  fs::remove(where);
  fs::create_symlink(fs::relative(root / target_rel, where.parent_path()), where);
}

// The fixed part of the tree, built once per process.
const std::string& root() {
  static const std::string r = [] {
    std::string tmpl = fs::temp_directory_path() / "fuzz-topology.XXXXXX";
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    const fs::path root = tmpl;
    for (int c = 1; c < 4; ++c) {
      const std::string t = std::string(kCpu) + "cpu" + std::to_string(c) + "/topology/";
      writeFile(root / (t + "physical_package_id"), c < 2 ? "0\n" : "1\n");
      writeFile(root / (t + "core_id"), std::to_string(c % 2) + "\n");
      writeFile(root / (t + "thread_siblings_list"), std::to_string(c) + "\n");
    }
    writeFile(root / kNode / "node1/cpulist", "2-3\n");
    writeFile(root / kNode / "node1/distance", "21 10\n");
    struct Pci {
      const char* dir;
      const char* vendor;
      const char* device;
      const char* cls;
      const char* numa;
      const char* driver;
    };
    for (const Pci& d : {Pci{kBridge, "0x8086", "0x347a", "0x060400", "0", "pcieport"},
                         Pci{kGpu, "0x10de", "0x2330", "0x030200", "0", "nvidia"},
                         Pci{"sys/devices/pci0000:00/0000:00:02.0", "0x8086", "0x347b", "0x060400",
                             "0", "pcieport"},
                         Pci{kNic, "0x15b3", "0x101d", "0x020000", "0", "mlx5_core"},
                         Pci{kVf, "0x15b3", "0x101e", "0x020000", "0", "mlx5_core"}}) {
      writeFile(root / d.dir / "vendor", std::string(d.vendor) + "\n");
      writeFile(root / d.dir / "device", std::string(d.device) + "\n");
      writeFile(root / d.dir / "class", std::string(d.cls) + "\n");
      writeFile(root / d.dir / "numa_node", std::string(d.numa) + "\n");
      fs::create_directories(root / "sys/bus/pci/drivers" / d.driver);
      link(root, std::string("sys/bus/pci/drivers/") + d.driver, std::string(d.dir) + "/driver");
      const std::string addr = fs::path(d.dir).filename();
      link(root, d.dir, "sys/bus/pci/devices/" + addr);
    }
    link(root, kNic, std::string(kNic) + "/infiniband/mlx5_0/device");
    writeFile(root / kNic / "infiniband_verbs/uverbs0/dev", "231:192\n");
    fs::create_directories(root / kNic / "net/eth0");
    link(root, kVf, std::string(kNic) + "/virtfn0");
    link(root, kNic, std::string(kVf) + "/physfn");
    return std::string(root);
  }();
  return r;
}

// Printable ASCII, lines ended by '\n': what reaches a terminal or a file.
void checkPrintable(std::string_view text, const char* what) {
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b != '\n' && (b < 0x20 || b >= 0x7f)) {
      fprintf(stderr, "fuzz_topology: %s: byte 0x%02x\n", what, b);
      std::abort();
    }
  }
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  return out;
}

size_t words(std::string_view line) {
  size_t n = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != ' ' && (i == 0 || line[i - 1] == ' ')) ++n;
  }
  return n;
}

void checkMatrix(const crihook::topology::Matrix& m) {
  namespace topo = crihook::topology;
  const size_t n = m.devices.size();
  check(m.links.size() == n, "the matrix has not a row per device");
  for (size_t i = 0; i < n; ++i) {
    const topo::MatrixDevice& d = m.devices[i];
    check((d.gpu == nullptr) != (d.rdma == nullptr), "a row that is not one GPU or one NIC");
    check(m.links[i].size() == n, "a matrix row of another length");
    check(m.links[i][i] == topo::Link::kSelf, "a device not X to itself");
    for (size_t j = 0; j < n; ++j) {
      check(m.links[i][j] == m.links[j][i], "the matrix is not symmetric");
      check(i == j || m.links[i][j] != topo::Link::kSelf, "X between two devices");
    }
    check(d.numa_node.has_value() || !d.numa_inferred, "an unknown node marked inferred");
  }
  const std::string text = topo::matrixText(m);
  checkPrintable(text, "matrix");
  if (n == 0) return;
  const std::vector<std::string_view> l = lines(text);
  check(l.size() > n, "the matrix text lacks rows");
  // The header: a column per device, "CPU Affinity", "NUMA Affinity".
  check(words(l[0]) == n + 4, "the matrix header has another number of cells");
  for (size_t i = 1; i <= n; ++i) {
    // The label, a cell per device, CPU Affinity, NUMA Affinity: none blank.
    check(words(l[i]) == n + 3, "a matrix row with another number of cells");
  }
}

// Every DOT string closes on the line it opens, backslashes escape, and a
// label's '&' is "&amp;" (Graphviz reads "&#10;" as a line break).
void checkDot(std::string_view text) {
  checkPrintable(text, "dot");
  check(text.substr(0, 19) == "digraph topology {\n", "the graph does not begin as one");
  check(text.size() >= 2 && text.substr(text.size() - 2) == "}\n", "the graph does not end");
  for (std::string_view line : lines(text)) {
    check(line == "}" || line.substr(0, 7) == "digraph" || line.substr(0, 2) == "  ",
          "a line of the graph that is no statement");
    bool in = false;
    for (size_t i = 0; i < line.size(); ++i) {
      if (!in) {
        in = line[i] == '"';
      } else if (line[i] == '\\') {
        ++i;  // escaped
      } else if (line[i] == '"') {
        in = false;
      } else if (line[i] == '&') {
        check(line.substr(i, 5) == "&amp;", "an '&' that Graphviz reads as an entity");
      }
    }
    check(!in, "a DOT string left open at the end of a line");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path r = root();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t at = 0;
  for (size_t i = 0; i < parts().size(); ++i) {
    const Part& p = parts()[i];
    const fs::path where = r / p.path;
    std::error_code ec;
    fs::remove(where, ec);
    if (at > input.size()) continue;  // past the last part: absent
    size_t end = input.find('\0', at);
    if (end == std::string_view::npos) end = input.size();
    const std::string text(input.substr(at, end - at));
    at = end + 1;
    if (p.link) {
      fs::create_directories(where.parent_path());
      fs::create_symlink(text, where, ec);  // an empty target fails: absent
    } else {
      writeFile(where, text);
    }
  }

  const crihook::topology::Snapshot snap =
      crihook::topology::discover(crihook::topology::SysRoot(r));
  check(snap.root == fs::canonical(r).string(), "the snapshot names another root");
  for (const auto& w : snap.warnings) check(!w.empty(), "an empty warning");
  // As crihookctl prints them.
  (void)crihook::topology::toJson(snap).dump(2, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
  const nlohmann::json device = crihook::topology::deviceObject(snap, {.node_name = "fuzz-node"});
  (void)crihook::topology::toYaml(device);
  (void)crihook::topology::rdmaMinors(snap);
  checkPrintable(crihook::topology::tree(snap), "tree");

  checkMatrix(crihook::topology::connectionMatrix(snap));
  checkDot(crihook::topology::dot(snap));
  // A pod given every device the snapshot has, by each name a record or a
  // container's device paths give it, and some it has not.
  std::vector<crihook::topology::PodDevice> pod;
  for (const auto& g : snap.gpus) {
    pod.push_back({.type = "gpu", .minor = g.minor, .pci = g.address});
    pod.push_back({.type = "gpu", .minor = g.minor});
  }
  for (const auto& x : snap.rdma) {
    pod.push_back({.type = "rdma", .name = x.name});
    pod.push_back({.type = "rdma", .pci = x.address});
    pod.push_back({.type = "rdma", .uverbs = x.uverbs});
  }
  pod.push_back({.type = "gpu", .minor = 254});
  pod.push_back({.type = "fpga\n\x1b", .minor = 1});
  // The cpuset: the input's first part (the online CPUs' text), anything.
  const std::string_view cpuset = input.substr(0, input.find('\0'));
  for (std::optional<std::string_view> cpus :
       {std::optional<std::string_view>(cpuset), std::optional<std::string_view>(""),
        std::optional<std::string_view>()}) {
    const std::string picture = crihook::topology::podPicture(snap, pod, cpus);
    checkPrintable(picture, "podPicture");
    for (std::string_view line : lines(picture)) {
      check(line.substr(0, 2) == "  ", "a line of the pod's picture not indented");
    }
  }
  return 0;
}
