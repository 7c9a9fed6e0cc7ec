// Topology discovery, report and placement on fixture trees built by
// make-fixtures.sh (a DGX-shaped server, a workstation, a machine with an
// Intel RDMA NIC and a GPU without a NUMA node), on broken trees, and on this
// machine's own /sys.

#include "topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_cri_server.h"
#include "placement.h"
#include "report.h"

namespace crihook::testing {
namespace {

namespace topo = ::crihook::topology;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Fixtures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string cmd =
        std::string("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh ") + dir_->path();
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string fixture(const std::string& name) { return dir_->file(name); }
  static topo::Snapshot load(const std::string& name) {
    return topo::discover(topo::SysRoot(fixture(name)));
  }
  static inline TempDir* dir_ = nullptr;
};

TEST_F(Fixtures, DgxCpusAndNumaNodes) {
  const topo::Snapshot s = load("dgx");
  EXPECT_THAT(s.warnings, ::testing::IsEmpty());
  ASSERT_EQ(s.cpus.size(), 64u);
  const topo::Cpu* c = s.cpu(17);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->socket, 1);
  EXPECT_EQ(c->core, 1);
  EXPECT_EQ(c->node, 1);
  EXPECT_THAT(c->siblings, ElementsAre(17, 49));
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(topo::formatCpuList(s.nodes[0].cpus), "0-15,32-47");
  EXPECT_EQ(s.nodes[0].socket, 0);
  EXPECT_EQ(s.nodes[1].socket, 1);
  EXPECT_EQ(s.nodes[0].memory_bytes, uint64_t{256} << 30);
  EXPECT_THAT(s.nodes[1].distances, ElementsAre(21, 10));
}

TEST_F(Fixtures, DgxGpusSitInPairsBehindFourSwitches) {
  const topo::Snapshot s = load("dgx");
  ASSERT_EQ(s.gpus.size(), 8u);
  const char* expect[8][4] = {
      // address, switch, root port, root complex
      {"0000:1a:00.0", "0000:18:00.0", "0000:17:00.0", "pci0000:17"},
      {"0000:1b:00.0", "0000:18:00.0", "0000:17:00.0", "pci0000:17"},
      {"0000:3a:00.0", "0000:38:00.0", "0000:37:00.0", "pci0000:37"},
      {"0000:3b:00.0", "0000:38:00.0", "0000:37:00.0", "pci0000:37"},
      {"0000:9a:00.0", "0000:98:00.0", "0000:97:00.0", "pci0000:97"},
      {"0000:9b:00.0", "0000:98:00.0", "0000:97:00.0", "pci0000:97"},
      {"0000:ba:00.0", "0000:b8:00.0", "0000:b7:00.0", "pci0000:b7"},
      {"0000:bb:00.0", "0000:b8:00.0", "0000:b7:00.0", "pci0000:b7"},
  };
  for (int i = 0; i < 8; ++i) {
    const topo::Gpu& g = s.gpus[static_cast<size_t>(i)];
    EXPECT_EQ(g.address, expect[i][0]);
    EXPECT_EQ(g.where.pcie_switch, expect[i][1]) << g.address;
    EXPECT_EQ(g.where.root_port, expect[i][2]) << g.address;
    EXPECT_EQ(g.where.root_complex, expect[i][3]) << g.address;
    EXPECT_EQ(g.minor, i);
    EXPECT_EQ(g.vendor, "nvidia");
    EXPECT_EQ(g.model, "NVIDIA A100-SXM4-40GB");
    EXPECT_EQ(g.where.numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(g.where.socket, i < 4 ? 0 : 1);
  }
  EXPECT_EQ(s.gpus[3].uuid, "GPU-00000003-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(s.nvidia_driver_version, "535.129.03");
  const topo::PciDevice* d = s.pciDevice("0000:1a:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->driver, "nvidia");
  EXPECT_EQ(d->class_code, "0x030200");
  EXPECT_THAT(d->bridges, ElementsAre("0000:17:00.0", "0000:18:00.0", "0000:19:00.0"));
}

TEST_F(Fixtures, DgxRdmaDevicesWithTheirVirtualFunctions) {
  const topo::Snapshot s = load("dgx");
  ASSERT_EQ(s.rdma.size(), 7u);  // mlx5_0..4 and the two VFs of mlx5_0
  const topo::RdmaDevice* pf = s.rdmaByName("mlx5_0");
  ASSERT_NE(pf, nullptr);
  EXPECT_EQ(pf->address, "0000:1c:00.0");
  EXPECT_EQ(pf->driver, "mlx5_core");
  EXPECT_EQ(pf->uverbs, "uverbs0");
  EXPECT_EQ(pf->uverbs_dev, "231:192");
  EXPECT_THAT(pf->netdevs, ElementsAre("ibp28s0"));
  ASSERT_EQ(pf->ports.size(), 1u);
  EXPECT_EQ(pf->ports[0].link_layer, "InfiniBand");
  EXPECT_EQ(pf->ports[0].state, "4: ACTIVE");
  EXPECT_THAT(pf->virtual_functions, ElementsAre("0000:1c:00.2", "0000:1c:00.3"));
  EXPECT_EQ(pf->where.pcie_switch, "0000:18:00.0");  // beside GPUs 0 and 1
  const topo::RdmaDevice* vf = s.rdmaByAddress("0000:1c:00.3");
  ASSERT_NE(vf, nullptr);
  EXPECT_EQ(vf->name, "mlx5_6");
  EXPECT_EQ(vf->uverbs, "uverbs6");
  EXPECT_TRUE(vf->isVirtualFunction());
  EXPECT_EQ(vf->physical_function, "0000:1c:00.0");
  EXPECT_EQ(vf->where.pcie_switch, "0000:18:00.0");
  EXPECT_EQ(s.rdmaByName("mlx5_3")->where.pcie_switch, "0000:98:00.0");  // the 2nd NIC there
  EXPECT_EQ(s.rdmaByName("mlx5_3")->where.numa_node, 1);
}

TEST_F(Fixtures, WorkstationGpusOnRootPortsAndNoRdma) {
  const topo::Snapshot s = load("workstation");
  EXPECT_THAT(s.warnings, ::testing::IsEmpty());
  EXPECT_EQ(s.cpus.size(), 16u);
  ASSERT_EQ(s.nodes.size(), 1u);
  ASSERT_EQ(s.gpus.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.gpus[i].where.pcie_switch, "");
    EXPECT_EQ(s.gpus[i].where.root_port, "0000:00:0" + std::to_string(i + 1) + ".0");
  }
  EXPECT_TRUE(s.rdma.empty());
  EXPECT_EQ(s.nvidia_driver_version, "550.54.14");
}

TEST_F(Fixtures, IntelRdmaNicAndAGpuWithoutNumaNode) {
  const topo::Snapshot s = load("intel-rdma");
  EXPECT_THAT(s.warnings, ::testing::IsEmpty());
  ASSERT_EQ(s.rdma.size(), 1u);
  const topo::RdmaDevice& nic = s.rdma[0];
  EXPECT_EQ(nic.name, "rocep24s0");
  EXPECT_EQ(nic.address, "0000:18:00.0");
  EXPECT_EQ(nic.driver, "ice");
  EXPECT_EQ(nic.ports[0].link_layer, "Ethernet");
  EXPECT_THAT(nic.netdevs, ElementsAre("ens2f0"));
  EXPECT_EQ(nic.where.numa_node, 0);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].vendor, "amd");
  EXPECT_EQ(s.gpus[0].where.numa_node, -1);  // two nodes: the kernel does not say which
  EXPECT_EQ(s.gpus[0].where.socket, -1);
  EXPECT_EQ(s.gpus[0].minor, -1);
  EXPECT_THAT(topo::tree(s), HasSubstr("NUMA node unknown (the device's numa_node is -1)"));
}

TEST_F(Fixtures, DeviceObjectForKoordinator) {
  const topo::Snapshot s = load("dgx");
  nlohmann::json d = topo::deviceObject(s, {"dgx-1", topo::PcieId::kSwitch});
  EXPECT_EQ(d["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
  EXPECT_EQ(d["kind"], "Device");
  EXPECT_EQ(d["metadata"]["name"], "dgx-1");
  EXPECT_EQ(d["metadata"]["labels"]["node.koordinator.sh/gpu-model"], "NVIDIA-A100-SXM4-40GB");
  EXPECT_EQ(d["metadata"]["labels"]["node.koordinator.sh/gpu-vendor"], "nvidia");
  EXPECT_EQ(d["metadata"]["labels"]["node.koordinator.sh/gpu-driver-version"], "535.129.03");
  const auto& devices = d["spec"]["devices"];
  ASSERT_EQ(devices.size(), 13u);  // 8 GPUs, 5 RDMA physical functions
  EXPECT_EQ(devices[1], nlohmann::json::parse(R"({
    "type": "gpu", "id": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd", "minor": 1, "health": true,
    "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"},
    "topology": {"socketID": 0, "nodeID": 0, "pcieID": "0000:18:00.0", "busID": "0000:1b:00.0"}})"));
  EXPECT_EQ(devices[8], nlohmann::json::parse(R"({
    "type": "rdma", "id": "0000:1c:00.0", "minor": 0, "health": true,
    "resources": {"koordinator.sh/rdma": "100"},
    "topology": {"socketID": 0, "nodeID": 0, "pcieID": "0000:18:00.0", "busID": "0000:1c:00.0"},
    "vfGroups": [{"labels": {"type": "general"},
                  "vfs": [{"minor": 0, "busID": "0000:1c:00.2"}, {"minor": 1, "busID": "0000:1c:00.3"}]}]})"));
  // Koordinator's own choice of pcieID, when asked for.
  nlohmann::json rc = topo::deviceObject(s, {"dgx-1", topo::PcieId::kRootComplex});
  EXPECT_EQ(rc["spec"]["devices"][1]["topology"]["pcieID"], "pci0000:17");
  // Without a switch, the root port stands for it.
  nlohmann::json ws = topo::deviceObject(load("workstation"), {"ws", topo::PcieId::kSwitch});
  EXPECT_EQ(ws["spec"]["devices"][2]["topology"]["pcieID"], "0000:00:03.0");

  const std::string yaml = topo::toYaml(d);
  EXPECT_THAT(yaml,
              HasSubstr("apiVersion: \"scheduling.koordinator.sh/v1alpha1\"\nkind: \"Device\"\n"));
  EXPECT_THAT(yaml, HasSubstr("spec:\n  devices:\n  - health: true\n    id: \"GPU-00000000"));
  EXPECT_THAT(yaml,
              HasSubstr("    vfGroups:\n    - labels:\n        type: \"general\"\n      vfs:\n"
                        "      - busID: \"0000:1c:00.2\"\n        minor: 0\n"));
}

TEST_F(Fixtures, SharedScopes) {
  const topo::Snapshot s = load("dgx");
  auto scope = [&](topo::DeviceSet set) {
    auto a = topo::sharedScope(s, set);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->scope : topo::Scope::kNone;
  };
  EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}}),
            topo::Scope::kSamePcieSwitch);
  EXPECT_EQ(scope({{"0000:1a:00.0"}, {"0000:1c:00.3"}, {}}), topo::Scope::kSamePcieSwitch);  // a VF
  EXPECT_EQ(scope({{"0000:1a:00.0", "0000:3a:00.0"}, {}, {}}), topo::Scope::kSameNumaNode);
  EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {}, {0, 1, 32, 33}}),
            topo::Scope::kSameNumaNode);
  EXPECT_EQ(scope({{"0000:1a:00.0"}, {}, {16}}), topo::Scope::kNone);
  EXPECT_EQ(scope({{"0000:1a:00.0", "0000:9a:00.0"}, {}, {}}), topo::Scope::kNone);
  auto why = topo::sharedScope(s, {{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}});
  EXPECT_EQ(why->why,
            "GPU 0000:1a:00.0, GPU 0000:1b:00.0, RDMA 0000:1c:00.0 share PCIe switch 0000:18:00.0");
  auto bad = topo::sharedScope(s, {{"0000:77:00.0"}, {}, {}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no GPU 0000:77:00.0 on this node"));
}

TEST_F(Fixtures, PickTakesTheTightestFreeSet) {
  const topo::Snapshot s = load("dgx");
  auto choice = topo::pick(s, {2, true, 16}, {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->scope, topo::Scope::kSamePcieSwitch);
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:1a:00.0", "0000:1b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:1c:00.0"));
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "0-7,32-39");  // 8 whole cores
  EXPECT_EQ(choice->why,
            "GPUs 0000:1a:00.0, 0000:1b:00.0, RDMA mlx5_0 (0000:1c:00.0) share PCIe switch "
            "0000:18:00.0; CPUs 0-7,32-39 are on NUMA node 0");

  // GPU 0 taken: the next switch with two free GPUs and a NIC.
  choice = topo::pick(s, {2, true, 4}, {{"0000:1a:00.0"}, {}, {0, 1, 2, 3, 32}});
  ASSERT_TRUE(choice.ok());
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:3c:00.0"));
  // CPU 32 is taken, so core 0 (0 and 32) is not whole; cores 1-3 are taken;
  // whole cores 4 and 5 come first.
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "4-5,36-37");

  // Four GPUs: no switch has them, NUMA node 0 does.
  choice = topo::pick(s, {4, true, 0}, {});
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSameNumaNode);
  EXPECT_THAT(choice->devices.gpus,
              ElementsAre("0000:1a:00.0", "0000:1b:00.0", "0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->why, HasSubstr("share NUMA node 0 (no single PCIe switch has enough free)"));

  // Deterministic: the same question, the same answer.
  EXPECT_EQ(topo::pick(s, {4, true, 0}, {})->devices.gpus, choice->devices.gpus);

  auto none = topo::pick(s, {9, false, 0}, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no socket of this node has 9 free GPUs"));
}

TEST_F(Fixtures, BrokenTreesGiveWarningsNamingThePathNeverACrash) {
  TempDir broken;
  std::filesystem::copy(
      fixture("dgx"), broken.path(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const std::string gpu =
      broken.path() + "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0";
  std::ofstream(gpu + "/numa_node") << "garbage\n";
  std::filesystem::remove(broken.path() + "/sys/devices/system/cpu/cpu5/topology/core_id");
  std::filesystem::create_symlink("../../../devices/pci0000:ff/0000:ff:00.0",
                                  broken.path() + "/sys/bus/pci/devices/0000:ff:00.0");
  std::filesystem::remove(broken.path() + "/sys/class/infiniband/mlx5_4/device");
  const topo::Snapshot s = topo::discover(topo::SysRoot(broken.path()));
  const std::string root = topo::SysRoot(broken.path()).root();
  EXPECT_THAT(
      s.warnings,
      ::testing::UnorderedElementsAre(
          root + "/sys/devices/system/cpu/cpu5/topology/core_id: cannot be read",
          root + "/sys/bus/pci/devices/0000:ff:00.0: a dangling link",
          root +
              "/sys/bus/pci/devices/0000:1a:00.0/numa_node: expected an integer, got \"garbage\"",
          root + "/sys/class/infiniband/mlx5_4/device: a dangling link"));
  EXPECT_EQ(s.gpus.size(), 8u);
  EXPECT_EQ(s.gpu("0000:1a:00.0")->where.numa_node, -1);
  EXPECT_EQ(s.cpu(5)->core, -1);
  EXPECT_EQ(s.rdma.size(), 6u);
  EXPECT_THAT(topo::tree(s), HasSubstr("warning: " + root + "/sys/bus/pci/devices/0000:ff:00.0"));
  // An empty or missing root: an empty topology with warnings.
  const topo::Snapshot nothing = topo::discover(topo::SysRoot(broken.path() + "/nowhere"));
  EXPECT_TRUE(nothing.cpus.empty());
  EXPECT_FALSE(nothing.warnings.empty());
}

TEST(HostTopology, AgreesWithNprocAndProcCpuinfo) {
  const topo::Snapshot s = topo::discover(topo::SysRoot("/"));
  EXPECT_EQ(static_cast<long>(s.cpus.size()), ::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  int processors = 0;
  std::map<int, int> physical_id;
  int current = -1;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("processor", 0) == 0) {
      ++processors;
      current = std::stoi(line.substr(line.find(':') + 1));
    } else if (line.rfind("physical id", 0) == 0) {
      physical_id[current] = std::stoi(line.substr(line.find(':') + 1));
    }
  }
  EXPECT_EQ(static_cast<int>(s.cpus.size()), processors);
  for (const topo::Cpu& c : s.cpus) {
    if (physical_id.count(c.id)) {
      EXPECT_EQ(c.socket, physical_id[c.id]) << "cpu " << c.id;
    }
    EXPECT_GE(c.node, 0);
  }
  EXPECT_FALSE(s.nodes.empty());
}

TEST(CpuList, ParsesAndFormats) {
  std::vector<int> v;
  ASSERT_TRUE(topo::parseCpuList("0-3,8,10-11", v));
  EXPECT_THAT(v, ElementsAre(0, 1, 2, 3, 8, 10, 11));
  EXPECT_EQ(topo::formatCpuList(v), "0-3,8,10-11");
  EXPECT_FALSE(topo::parseCpuList("3-1", v));
  EXPECT_FALSE(topo::parseCpuList("a", v));
  EXPECT_FALSE(topo::parseCpuList("1,", v));
}

}  // namespace
}  // namespace crihook::testing
