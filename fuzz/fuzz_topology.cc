// Topology discovery (topology/discover.cc) on a fixture tree whose files
// say what the input says: sysfs and procfs hold what drivers and firmware
// wrote, and discovery must turn any of it into a Snapshot with warnings,
// never a crash or a hang. The report (tree, JSON, Koordinator Device) is
// built from each Snapshot too.
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
#include <string>
#include <string_view>
#include <vector>

#include "topology/report.h"
#include "topology/sysfs.h"
#include "topology/topology.h"

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
  (void)crihook::topology::tree(snap);
  // As crihookctl prints them.
  (void)crihook::topology::toJson(snap).dump(2, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
  const nlohmann::json device = crihook::topology::deviceObject(snap, {.node_name = "fuzz-node"});
  (void)crihook::topology::toYaml(device);
  (void)crihook::topology::rdmaMinors(snap);
  return 0;
}
