// Topology discovery, report and placement on fixture trees built by
// make-fixtures.sh (a DGX-shaped server with a BMC's VGA controller and a GPU
// whose numa_node is -1, a workstation, a machine with an Intel RDMA NIC, a
// Mellanox one and a GPU that no bridge places, a sub-NUMA-clustered server
// whose node numbers are never its sockets'), on broken trees, and on this
// machine's own /sys.

#include "topology/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/quote.h"
#include "base/text.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "topology/placement.h"
#include "topology/report.h"

namespace crihook::testing {
namespace {

namespace topo = ::crihook::topology;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// make-fixtures.sh's machines (test/support/fixture_trees.h).
// The dgx fixture's first GPU, under its two switches.
constexpr const char* kDgxGpu0 =
    "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0";

class Fixtures : public ::testing::Test {
 protected:
  static std::string fixture(const std::string& name) { return fixtureTree(name); }
  static topo::Snapshot load(const std::string& name) {
    return topo::discover(topo::SysRoot(fixture(name)));
  }
  // A fixture's tree copied into `to`, links as links, for a test to break.
  static void copyFixture(const std::string& name, const TempDir& to) {
    std::filesystem::copy(
        fixture(name), to.path(),
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  }
};

// What discovery says of a fixture's NVIDIA GPUs: NVML is only asked on the
// host, so their memory is unknown.
auto nvmlUnknown(int gpus) {
  return ::testing::AllOf(::testing::StartsWith("NVML: not asked about a root other than / ("),
                          HasSubstr(std::to_string(gpus) + " NVIDIA GPU(s) is unknown"),
                          HasSubstr("the Device report has no koordinator.sh/gpu-memory for them"));
}

TEST_F(Fixtures, DgxCpusAndNumaNodes) {
  const topo::Snapshot s = load("dgx");
  EXPECT_THAT(s.warnings, ElementsAre(nvmlUnknown(8)));
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
    EXPECT_TRUE(g.nvidia_driver);
  }
  // GPU 7 and its downstream port say -1; the switch's upstream port says 1.
  EXPECT_EQ(s.pciDevice("0000:bb:00.0")->reported_numa_node, -1);
  EXPECT_EQ(s.pciDevice("0000:bb:00.0")->numa_node, 1);
  EXPECT_EQ(s.gpus[7].where.numa_node_from, "0000:b8:00.0");
  EXPECT_EQ(s.gpus[6].where.numa_node_from, "");
  // The BMC's VGA controller is a PCI device, not a GPU.
  const topo::PciDevice* vga = s.pciDevice("0000:03:00.0");
  ASSERT_NE(vga, nullptr);
  EXPECT_EQ(vga->driver, "ast");
  EXPECT_EQ(vga->class_code, "0x030000");
  EXPECT_THAT(vga->bridges, ElementsAre("0000:00:1c.0", "0000:02:00.0"));
  EXPECT_EQ(s.gpu("0000:03:00.0"), nullptr);
  EXPECT_EQ(s.pci.size(), 39u);
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
  EXPECT_THAT(pf->virtual_function_numbers, ElementsAre(0, 1));
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
  EXPECT_TRUE(pf->portsActive());
  EXPECT_EQ(s.rdmaByName("mlx5_4")->ports[0].state, "1: DOWN");
  EXPECT_FALSE(s.rdmaByName("mlx5_4")->portsActive());
}

TEST_F(Fixtures, WorkstationGpusOnRootPortsAndNoRdma) {
  const topo::Snapshot s = load("workstation");
  EXPECT_THAT(s.warnings, ElementsAre(nvmlUnknown(4)));
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
  EXPECT_THAT(s.warnings, ::testing::IsEmpty());  // no NVIDIA GPU: nothing to ask NVML
  ASSERT_EQ(s.rdma.size(), 2u);
  const topo::RdmaDevice& nic = *s.rdmaByName("rocep24s0");
  EXPECT_EQ(nic.address, "0000:18:00.0");
  EXPECT_EQ(nic.driver, "ice");
  EXPECT_EQ(nic.ports[0].link_layer, "Ethernet");
  EXPECT_THAT(nic.netdevs, ElementsAre("ens2f0"));
  EXPECT_EQ(nic.where.numa_node, 0);
  EXPECT_EQ(s.rdmaByName("mlx5_1")->where.numa_node, 1);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].vendor, "amd");
  EXPECT_FALSE(s.gpus[0].nvidia_driver);
  // Neither the GPU nor its bridge says: the first node, and it is said so.
  EXPECT_EQ(s.pciDevice("0000:83:00.0")->reported_numa_node, -1);
  EXPECT_EQ(s.gpus[0].where.numa_node, 0);
  EXPECT_EQ(s.gpus[0].where.numa_node_from, "none");
  EXPECT_EQ(s.gpus[0].where.socket, 0);
  EXPECT_EQ(s.gpus[0].minor, -1);
  EXPECT_THAT(topo::tree(s),
              HasSubstr("GPU 0000:83:00.0 amd 0x740f (numa_node -1, no bridge above knows: node 0 "
                        "assumed)\n"));
  EXPECT_EQ(topo::toJson(s)["gpus"][0]["locality"]["numa_node_from"], "none");
}

// Every entry as Koordinator's scheduler reads it: a minor on each.
void expectEveryDeviceHasAMinor(const nlohmann::json& device) {
  std::set<std::pair<std::string, int>> seen;
  for (const auto& d : device["spec"]["devices"]) {
    ASSERT_TRUE(d.contains("minor") && d["minor"].is_number_integer()) << d.dump();
    EXPECT_TRUE(seen.insert({d["type"].get<std::string>(), d["minor"].get<int>()}).second)
        << "minor twice: " << d.dump();
    EXPECT_GE(d["topology"]["nodeID"].get<int>(), 0) << d.dump();
  }
}

// Sub-NUMA clustering: two NUMA nodes per socket, so a device's NUMA node and
// its socket are different numbers (on the other fixtures node = socket, and
// code that confuses them passes there). Each device is on the node its
// numa_node says; its socket is that node's.
TEST_F(Fixtures, SncDevicesAreOnTheirNumaNodeWhichIsNotTheirSocketsNumber) {
  const topo::Snapshot s = load("snc");
  EXPECT_THAT(s.warnings, ElementsAre(nvmlUnknown(2)));
  ASSERT_EQ(s.cpus.size(), 32u);
  ASSERT_EQ(s.nodes.size(), 4u);
  const char* cpus[4] = {"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"};
  for (int n = 0; n < 4; ++n) {
    const topo::NumaNode& node = s.nodes[static_cast<size_t>(n)];
    EXPECT_EQ(node.id, n);
    EXPECT_EQ(topo::formatCpuList(node.cpus), cpus[n]);
    EXPECT_EQ(node.socket, n / 2) << "node " << n;
    EXPECT_EQ(s.socketOfNode(n), n / 2);
  }
  EXPECT_THAT(s.nodes[1].distances, ElementsAre(12, 10, 21, 21));
  EXPECT_EQ(s.cpu(5)->node, 1);
  EXPECT_EQ(s.cpu(5)->socket, 0);
  EXPECT_EQ(s.cpu(25)->node, 2);
  EXPECT_EQ(s.cpu(25)->socket, 1);
  EXPECT_THAT(s.cpu(25)->siblings, ElementsAre(9, 25));

  // address -> (NUMA node, socket): no device's node number is its socket's.
  const std::map<std::string, std::pair<int, int>> expect = {
      {"0000:18:00.0", {1, 0}},  // GPU 0
      {"0000:31:00.0", {0, 0}},  // mlx5_0
      {"0000:98:00.0", {2, 1}},  // GPU 1
      {"0000:b1:00.0", {3, 1}},  // mlx5_1
  };
  ASSERT_EQ(s.gpus.size(), 2u);
  ASSERT_EQ(s.rdma.size(), 2u);
  std::map<std::string, std::pair<int, int>> seen;
  for (const topo::Gpu& g : s.gpus) seen[g.address] = {g.where.numa_node, g.where.socket};
  for (const topo::RdmaDevice& x : s.rdma) seen[x.address] = {x.where.numa_node, x.where.socket};
  EXPECT_EQ(seen, expect);
  EXPECT_EQ(s.gpus[0].minor, 0);
  EXPECT_EQ(s.rdma[1].name, "mlx5_1");

  // The Device report says the same: nodeID is the node, socketID its socket.
  const nlohmann::json d = topo::deviceObject(s, {"snc-0"});
  std::map<std::string, std::pair<int, int>> reported;
  for (const auto& dev : d["spec"]["devices"]) {
    reported[dev["topology"]["busID"]] = {dev["topology"]["nodeID"], dev["topology"]["socketID"]};
  }
  EXPECT_EQ(reported, expect) << d.dump();

  // The tree nests each node under its own socket.
  const std::string t = topo::tree(s);
  EXPECT_THAT(t, HasSubstr("socket 0\n  NUMA node 0: CPUs 0-3,16-19, 128 GiB\n    root port "
                           "0000:30:01.0\n      RDMA mlx5_0 0000:31:00.0"));
  EXPECT_THAT(t, HasSubstr("  NUMA node 1: CPUs 4-7,20-23, 128 GiB\n    root port 0000:17:01.0\n"
                           "      GPU 0000:18:00.0"));
  EXPECT_THAT(t, HasSubstr("socket 1\n  NUMA node 2: CPUs 8-11,24-27, 128 GiB\n    root port "
                           "0000:97:01.0\n      GPU 0000:98:00.0"));

  // Placement: GPU 0 and mlx5_0 share socket 0 but no NUMA node; GPU 0 and
  // node 1's CPUs share node 1; node 0's CPUs with it only the socket.
  auto gpu0_nic0 =
      topo::sharedScope(s, {{"0000:18:00.0"}, {"0000:31:00.0"}, {}}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(gpu0_nic0.ok());
  EXPECT_EQ(gpu0_nic0->scope, topo::Scope::kSameSocket);
  EXPECT_EQ(gpu0_nic0->why, "GPU 0000:18:00.0, RDMA 0000:31:00.0 share socket 0");
  auto near =
      topo::sharedScope(s, {{"0000:18:00.0"}, {}, {4, 5, 20}}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(near.ok());
  EXPECT_EQ(near->scope, topo::Scope::kSameNumaNode);
  EXPECT_EQ(near->why, "GPU 0000:18:00.0 and CPUs 4-5,20 share NUMA node 1");
  auto far = topo::sharedScope(s, {{"0000:18:00.0"}, {}, {0, 1}}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(far.ok());
  EXPECT_EQ(far->scope, topo::Scope::kSameSocket);
}

TEST_F(Fixtures, DeviceObjectAsKoordletWritesIt) {
  const topo::Snapshot s = load("dgx");
  nlohmann::json d = topo::deviceObject(s, {"dgx-1"});  // pcieID: the root complex
  EXPECT_EQ(d["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
  EXPECT_EQ(d["kind"], "Device");
  EXPECT_EQ(d["metadata"]["name"], "dgx-1");
  EXPECT_EQ(d["metadata"]["labels"], nlohmann::json::parse(R"({
    "node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "A100-SXM4-40GB",
    "node.koordinator.sh/gpu-driver-version": "535.129.03"})"));
  const auto& devices = d["spec"]["devices"];
  ASSERT_EQ(devices.size(), 13u);  // 8 GPUs (not the BMC's VGA), 5 RDMA physical functions
  expectEveryDeviceHasAMinor(d);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devices[i]["type"], "gpu");
    EXPECT_EQ(devices[i]["minor"], i);
    EXPECT_EQ(devices[i]["topology"]["nodeID"], i < 4 ? 0 : 1);  // GPU 7 too (numa_node -1)
    EXPECT_EQ(devices[i]["topology"]["socketID"], i < 4 ? 0 : 1);
  }
  EXPECT_EQ(devices[1], nlohmann::json::parse(R"({
    "type": "gpu", "id": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd", "minor": 1, "health": true,
    "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"},
    "topology": {"socketID": 0, "nodeID": 0, "pcieID": "pci0000:17", "busID": "0000:1b:00.0"}})"));
  EXPECT_EQ(devices[8], nlohmann::json::parse(R"({
    "type": "rdma", "id": "0000:1c:00.0", "minor": 0, "health": true,
    "resources": {"koordinator.sh/rdma": "100"},
    "topology": {"socketID": 0, "nodeID": 0, "pcieID": "pci0000:17", "busID": "0000:1c:00.0"},
    "vfGroups": [{"vfs": [{"minor": -1, "busID": "0000:1c:00.2"},
                          {"minor": -1, "busID": "0000:1c:00.3"}]}]})"));
  for (int i = 8; i < 13; ++i) {
    EXPECT_EQ(devices[i]["type"], "rdma");
    EXPECT_EQ(devices[i]["minor"], i - 8);  // mlx5_N: N
  }
  EXPECT_EQ(devices[12]["id"], "0000:bc:00.0");  // mlx5_4, its port down
  EXPECT_EQ(devices[12]["health"], false);
  EXPECT_EQ(devices[10]["topology"]["pcieID"], "pci0000:97");

  // The PCIe switch, when asked for.
  nlohmann::json sw = topo::deviceObject(s, {"dgx-1", topo::PcieScope::kSwitch});
  EXPECT_EQ(sw["spec"]["devices"][1]["topology"]["pcieID"], "0000:18:00.0");
  EXPECT_EQ(sw["spec"]["devices"][8]["topology"]["pcieID"], "0000:18:00.0");
  // Without a switch, the root port stands for it.
  nlohmann::json ws = topo::deviceObject(load("workstation"), {"ws", topo::PcieScope::kSwitch});
  EXPECT_EQ(ws["spec"]["devices"][2]["topology"]["pcieID"], "0000:00:03.0");
  ws = topo::deviceObject(load("workstation"), {"ws"});
  EXPECT_EQ(ws["spec"]["devices"][2]["topology"]["pcieID"], "pci0000:00");
  EXPECT_EQ(ws["metadata"]["labels"]["node.koordinator.sh/gpu-driver-version"], "550.54.14");

  const std::string yaml = topo::toYaml(d);
  EXPECT_THAT(yaml,
              HasSubstr("apiVersion: \"scheduling.koordinator.sh/v1alpha1\"\nkind: \"Device\"\n"));
  EXPECT_THAT(yaml, HasSubstr("spec:\n  devices:\n  - health: true\n    id: \"GPU-00000000"));
  EXPECT_THAT(yaml, HasSubstr("    vfGroups:\n    - vfs:\n      - busID: \"0000:1c:00.2\"\n"
                              "        minor: -1\n"));
}

// Found by fuzz/fuzz_topology: text from sysfs that is not UTF-8 made
// toYaml throw (nlohmann's dump() refuses it by default).
TEST(DeviceObjectYaml, TextThatIsNotUtf8IsReplacedNotThrown) {
  nlohmann::json d = {{"metadata", {{"name", "n\xff"}}}, {"k\xfe", "v"}};
  std::string yaml;
  ASSERT_NO_THROW(yaml = topo::toYaml(d));
  EXPECT_THAT(yaml, HasSubstr("name: \"n\xef\xbf\xbd\""));
  EXPECT_THAT(yaml, HasSubstr("\"k\xef\xbf\xbd\": \"v\""));
}

TEST_F(Fixtures, DeviceObjectRdmaMinorsNeverCollideAndNoGpuMeansNoGpuLabels) {
  nlohmann::json d = topo::deviceObject(load("intel-rdma"), {"n"});
  EXPECT_EQ(d["metadata"]["labels"], nlohmann::json::object());  // the AMD GPU is not reported
  const auto& devices = d["spec"]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  expectEveryDeviceHasAMinor(d);
  // mlx5_1 keeps koordlet's minor 1; rocep24s0 (koordlet skips it) comes after.
  EXPECT_EQ(devices[0]["id"], "0000:c1:00.0");
  EXPECT_EQ(devices[0]["minor"], 1);
  EXPECT_EQ(devices[0]["topology"]["nodeID"], 1);
  EXPECT_EQ(devices[0]["topology"]["socketID"], 1);
  EXPECT_EQ(devices[1]["id"], "0000:18:00.0");
  EXPECT_EQ(devices[1]["minor"], 2);
  EXPECT_EQ(devices[1]["health"], true);
  EXPECT_EQ(devices[1]["topology"]["pcieID"], "pci0000:16");
  // The AMD GPU stays in the tree and the JSON.
  EXPECT_EQ(topo::toJson(load("intel-rdma"))["gpus"][0]["vendor"], "amd");
}

TEST_F(Fixtures, DeviceObjectGpuMemoryAndMixedModels) {
  topo::Snapshot s = load("dgx");
  s.gpus[0].memory_bytes = uint64_t{40} << 30;
  s.gpus[1].memory_bytes = uint64_t{81559} << 20;  // an H100's 81559 MiB
  s.gpus[2].memory_bytes = 1000;
  nlohmann::json d = topo::deviceObject(s, {"n"});
  const auto& devices = d["spec"]["devices"];
  EXPECT_EQ(devices[0]["resources"]["koordinator.sh/gpu-memory"], "40Gi");
  EXPECT_EQ(devices[1]["resources"]["koordinator.sh/gpu-memory"], "81559Mi");
  EXPECT_EQ(devices[2]["resources"]["koordinator.sh/gpu-memory"], "1000");
  EXPECT_FALSE(devices[3]["resources"].contains("koordinator.sh/gpu-memory"));
  // Two models: koordlet writes the vendor only.
  s.gpus[3].model = "NVIDIA H100 80GB HBM3";
  d = topo::deviceObject(s, {"n"});
  EXPECT_EQ(d["metadata"]["labels"],
            nlohmann::json::parse(R"({"node.koordinator.sh/gpu-vendor": "nvidia"})"));
  for (topo::Gpu& g : s.gpus) g.model = "NVIDIA H100 80GB HBM3";
  d = topo::deviceObject(s, {"n"});
  EXPECT_EQ(d["metadata"]["labels"]["node.koordinator.sh/gpu-model"], "H100-80GB-HBM3");
  for (topo::Gpu& g : s.gpus) g.model = "Tesla T4 /weird\tname-";
  d = topo::deviceObject(s, {"n"});
  EXPECT_EQ(d["metadata"]["labels"]["node.koordinator.sh/gpu-model"], "Tesla-T4--weird-name");
}

TEST_F(Fixtures, NvidiaGpusWithoutAUsableMinorAreLeftOutAndSaidSo) {
  TempDir copy;
  copyFixture("dgx", copy);
  const std::string gpus = copy.path() + "/proc/driver/nvidia/gpus/";
  std::ofstream(gpus + "0000:1b:00.0/information") << "Model: \t\t NVIDIA A100-SXM4-40GB\n";
  std::ofstream(gpus + "0000:3a:00.0/information") << "Device Minor: \t 0\n";  // GPU 0's
  std::ofstream(gpus + "0000:3b:00.0/information") << "Device Minor: \t 255\n";
  std::filesystem::remove(gpus + "0000:9a:00.0/information");
  // A GPU the driver does not list under /proc, bound to vfio-pci: not the
  // NVIDIA driver's.
  std::filesystem::remove_all(gpus + "0000:bb:00.0");
  const std::string bb = copy.path() + "/sys/bus/pci/devices/0000:bb:00.0/driver";
  std::filesystem::remove(bb);
  std::filesystem::create_directories(copy.path() + "/sys/bus/pci/drivers/vfio-pci");
  std::filesystem::create_symlink(
      "../../../../../../bus/pci/drivers/vfio-pci",
      copy.path() +
          "/sys/devices/pci0000:b7/0000:b7:00.0/0000:b8:00.0/0000:b9:01.0/0000:bb:00.0/driver");
  const topo::Snapshot s = topo::discover(topo::SysRoot(copy.path()));
  const std::string root = topo::SysRoot(copy.path()).root() + "/proc/driver/nvidia/gpus/";
  EXPECT_THAT(
      s.warnings,
      ::testing::UnorderedElementsAre(
          root + "0000:1b:00.0/information: no \"Device Minor\": GPU 0000:1b:00.0 has no minor "
                 "and is left out of the Device report",
          root + "0000:3a:00.0/information: Device Minor 0 is also GPU 0000:1a:00.0's: GPU "
                 "0000:3a:00.0 has no minor and is left out of the Device report",
          root + "0000:3b:00.0/information: Device Minor: expected 0-254, got \"255\": GPU "
                 "0000:3b:00.0 has no minor and is left out of the Device report",
          root + "0000:9a:00.0/information: cannot be read: GPU 0000:9a:00.0 has no minor and is "
                 "left out of the Device report",
          nvmlUnknown(7)));
  ASSERT_EQ(s.gpus.size(), 8u);
  EXPECT_FALSE(s.gpu("0000:bb:00.0")->nvidia_driver);
  nlohmann::json d = topo::deviceObject(s, {"n"});
  expectEveryDeviceHasAMinor(d);
  std::vector<std::string> ids;
  for (const auto& x : d["spec"]["devices"]) {
    if (x["type"] == "gpu") ids.push_back(x["topology"]["busID"]);
  }
  EXPECT_THAT(ids, ElementsAre("0000:1a:00.0", "0000:9b:00.0", "0000:ba:00.0"));
}

TEST_F(Fixtures, SharedScopes) {
  const topo::Snapshot s = load("dgx");
  for (topo::PcieScope pcie : {topo::PcieScope::kRootComplex, topo::PcieScope::kSwitch}) {
    SCOPED_TRACE(std::string(topo::pcieScopeName(pcie)));
    auto scope = [&](topo::DeviceSet set) {
      auto a = topo::sharedScope(s, set, pcie);
      EXPECT_TRUE(a.ok()) << a.status();
      return a.ok() ? a->scope : topo::Scope::kNone;
    };
    // One switch per root complex on this machine: both meanings agree.
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}}),
              topo::Scope::kSamePcie);
    EXPECT_EQ(scope({{"0000:1a:00.0"}, {"0000:1c:00.3"}, {}}), topo::Scope::kSamePcie);  // a VF
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:3a:00.0"}, {}, {}}), topo::Scope::kSameNumaNode);
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {}, {0, 1, 32, 33}}),
              topo::Scope::kSameNumaNode);
    EXPECT_EQ(scope({{"0000:1a:00.0"}, {}, {16}}), topo::Scope::kNone);
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:9a:00.0"}, {}, {}}), topo::Scope::kNone);
    // GPU 7 (numa_node -1) is on node 1 with GPU 4 and the CPUs there.
    EXPECT_EQ(scope({{"0000:9a:00.0", "0000:bb:00.0"}, {}, {16, 17}}), topo::Scope::kSameNumaNode);
  }
  const topo::DeviceSet pair{{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}};
  EXPECT_EQ(topo::sharedScope(s, pair, topo::PcieScope::kSwitch)->why,
            "GPU 0000:1a:00.0, GPU 0000:1b:00.0, RDMA 0000:1c:00.0 share PCIe switch 0000:18:00.0");
  EXPECT_EQ(topo::sharedScope(s, pair, topo::PcieScope::kRootComplex)->why,
            "GPU 0000:1a:00.0, GPU 0000:1b:00.0, RDMA 0000:1c:00.0 share PCIe root complex "
            "pci0000:17");
  auto bad = topo::sharedScope(s, {{"0000:77:00.0"}, {}, {}}, topo::PcieScope::kRootComplex);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no GPU 0000:77:00.0 on this node"));

  // The workstation's GPUs hang off one root complex, each on its own root
  // port: the same PCIe as koordlet means it, not behind one switch.
  const topo::Snapshot ws = load("workstation");
  const topo::DeviceSet two{{"0000:01:00.0", "0000:02:00.0"}, {}, {}};
  auto rc = topo::sharedScope(ws, two, topo::PcieScope::kRootComplex);
  EXPECT_EQ(rc->scope, topo::Scope::kSamePcie);
  EXPECT_EQ(rc->why, "GPU 0000:01:00.0, GPU 0000:02:00.0 share PCIe root complex pci0000:00");
  auto sw = topo::sharedScope(ws, two, topo::PcieScope::kSwitch);
  EXPECT_EQ(sw->scope, topo::Scope::kSameNumaNode);
  EXPECT_EQ(topo::sharedScope(ws, {{"0000:01:00.0"}, {}, {}}, topo::PcieScope::kSwitch)->why,
            "GPU 0000:01:00.0 share PCIe root port 0000:00:01.0");
}

// The Device report and the placement check never disagree: two devices
// have the same pcieID exactly when sharedScope says SamePCIe, in either
// meaning, on every fixture.
TEST_F(Fixtures, ReportAndScopeCheckAgreeOnSamePcie) {
  for (const char* name : {"dgx", "workstation", "intel-rdma", "snc"}) {
    const topo::Snapshot s = load(name);
    for (topo::PcieScope pcie : {topo::PcieScope::kRootComplex, topo::PcieScope::kSwitch}) {
      SCOPED_TRACE(cat(name, " ", topo::pcieScopeName(pcie)));
      const nlohmann::json d = topo::deviceObject(s, {"n", pcie});
      int same = 0, apart = 0;
      for (const auto& a : d["spec"]["devices"]) {
        for (const auto& b : d["spec"]["devices"]) {
          topo::DeviceSet set;
          for (const auto* x : {&a, &b}) {
            auto& list = (*x)["type"] == "gpu" ? set.gpus : set.rdma;
            list.push_back((*x)["topology"]["busID"]);
          }
          auto scope = topo::sharedScope(s, set, pcie);
          ASSERT_TRUE(scope.ok()) << scope.status();
          const bool reported = a["topology"]["pcieID"] == b["topology"]["pcieID"];
          EXPECT_EQ(scope->scope == topo::Scope::kSamePcie, reported)
              << a["topology"].dump() << " " << b["topology"].dump() << ": " << scope->why;
          ++(reported ? same : apart);
        }
      }
      if (std::string(name) == "dgx") {
        EXPECT_GT(apart, 0);
      }
      EXPECT_GT(same, 0);
    }
  }
}

TEST_F(Fixtures, PickTakesTheTightestFreeSet) {
  const topo::Snapshot s = load("dgx");
  const auto sw = topo::PcieScope::kSwitch;
  auto choice = topo::pick(s, {2, true, 16}, {}, sw);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->scope, topo::Scope::kSamePcie);
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:1a:00.0", "0000:1b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:1c:00.0"));
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "0-7,32-39");  // 8 whole cores
  EXPECT_EQ(choice->why,
            "GPUs 0000:1a:00.0, 0000:1b:00.0, RDMA mlx5_0 (0000:1c:00.0) share PCIe switch "
            "0000:18:00.0; CPUs 0-7,32-39 are on NUMA node 0");

  // GPU 0 taken: the next switch with two free GPUs and a NIC.
  choice = topo::pick(s, {2, true, 4}, {{"0000:1a:00.0"}, {}, {0, 1, 2, 3, 32}}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:3c:00.0"));
  // CPU 32 is taken, so core 0 (0 and 32) is not whole; cores 1-3 are taken;
  // whole cores 4 and 5 come first.
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "4-5,36-37");

  // Four GPUs: no switch has them, NUMA node 0 does.
  choice = topo::pick(s, {4, true, 0}, {}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSameNumaNode);
  EXPECT_THAT(choice->devices.gpus,
              ElementsAre("0000:1a:00.0", "0000:1b:00.0", "0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->why, HasSubstr("share NUMA node 0 (no single PCIe switch has enough free)"));

  // Deterministic: the same question, the same answer.
  EXPECT_EQ(topo::pick(s, {4, true, 0}, {}, sw)->devices.gpus, choice->devices.gpus);

  // Koordinator's meaning: the root complex (one per switch here).
  choice = topo::pick(s, {2, true, 0}, {}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->why,
            "GPUs 0000:1a:00.0, 0000:1b:00.0, RDMA mlx5_0 (0000:1c:00.0) share PCIe root complex "
            "pci0000:17");
  // On the workstation the root complex holds all four GPUs; no switch does.
  const topo::Snapshot ws = load("workstation");
  choice = topo::pick(ws, {4, false, 0}, {}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSamePcie);
  choice = topo::pick(ws, {2, false, 0}, {}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSameNumaNode);
  EXPECT_THAT(choice->why, HasSubstr("(no single PCIe switch has enough free)"));

  auto none = topo::pick(s, {9, false, 0}, {}, sw);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no socket of this node has 9 free GPUs"));
}

// The kernel writes these as ints: a 64-bit number there is a broken tree,
// warned about, not a value cut to fit (4294967296 used to become node 0,
// 4294967297 core 1).
TEST_F(Fixtures, IntegersPastWhatTheKernelWritesAreWarnedNotCutToFit) {
  TempDir odd;
  copyFixture("dgx", odd);
  const std::string gpu = odd.path() + kDgxGpu0;
  std::ofstream(gpu + "/numa_node") << "4294967296\n";
  std::ofstream(odd.path() + "/sys/devices/system/cpu/cpu6/topology/core_id") << "4294967297\n";
  const topo::Snapshot s = topo::discover(topo::SysRoot(odd.path()));
  const std::string root = topo::SysRoot(odd.path()).root();
  EXPECT_THAT(s.warnings, Contains(root + "/sys/bus/pci/devices/0000:1a:00.0/numa_node: expected "
                                          "an integer from -1 to 1023, got 4294967296"));
  EXPECT_THAT(s.warnings, Contains(root + "/sys/devices/system/cpu/cpu6/topology/core_id: "
                                          "expected an integer from -1 to 2147483647, got "
                                          "4294967297"));
  // Unknown, so its downstream port's node; not node 0 as read.
  EXPECT_EQ(s.gpu("0000:1a:00.0")->where.numa_node, 0);
  EXPECT_EQ(s.gpu("0000:1a:00.0")->where.numa_node_from, "0000:19:00.0");
  EXPECT_EQ(s.cpu(6)->core, -1);
}

TEST_F(Fixtures, BrokenTreesGiveWarningsNamingThePathNeverACrash) {
  TempDir broken;
  copyFixture("dgx", broken);
  const std::string gpu = broken.path() + kDgxGpu0;
  std::ofstream(gpu + "/numa_node") << "garbage\n";
  std::ofstream(broken.path() +
                "/sys/devices/pci0000:97/0000:97:00.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0/"
                "numa_node")
      << "7\n";  // a two-node machine
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
          root + "/sys/class/infiniband/mlx5_4/device: a dangling link",
          root + "/sys/bus/pci/devices/0000:9a:00.0/numa_node: NUMA node 7 does not exist; taken "
                 "as unknown (-1)",
          nvmlUnknown(8)));
  EXPECT_EQ(s.gpus.size(), 8u);
  // Its numa_node unreadable: its downstream port's.
  EXPECT_EQ(s.gpu("0000:1a:00.0")->where.numa_node, 0);
  EXPECT_EQ(s.gpu("0000:1a:00.0")->where.numa_node_from, "0000:19:00.0");
  EXPECT_EQ(s.gpu("0000:9a:00.0")->where.numa_node, 1);
  EXPECT_EQ(s.gpu("0000:9a:00.0")->where.socket, 1);
  EXPECT_EQ(s.cpu(5)->core, -1);
  EXPECT_EQ(s.rdma.size(), 6u);
  EXPECT_THAT(topo::tree(s), HasSubstr("warning: " + root + "/sys/bus/pci/devices/0000:ff:00.0"));
  // An empty or missing root: an empty topology with warnings.
  const topo::Snapshot nothing = topo::discover(topo::SysRoot(broken.path() + "/nowhere"));
  EXPECT_TRUE(nothing.cpus.empty());
  EXPECT_FALSE(nothing.warnings.empty());
}

// Only PCI addresses (dddd:bb:dd.f, as the kernel names devices) are taken
// from sys/bus/pci/devices: a name becomes a sysfs path and a hook's fact.
// Anything else is skipped with a warning that quotes it.
TEST_F(Fixtures, NamesUnderBusPciDevicesThatAreNoPciAddressAreSkippedAndQuoted) {
  TempDir odd;
  copyFixture("dgx", odd);
  const std::string bus = odd.path() + "/sys/bus/pci/devices/";
  const std::string gpu0 =
      "../../../devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/"
      "0000:1a:00.0";
  const std::vector<std::string> bad = {"bogus\x1b[2J\nGPU", "0000:1A:00.0", "0000:1a:00.00",
                                        "0000:1a:20.0",      "0000:1a:00.8", "000:1a:00.0",
                                        "100000000:1a:00.0", "0000:1a.00:0"};
  for (const std::string& name : bad) std::filesystem::create_symlink(gpu0, bus + name);
  const topo::Snapshot s = topo::discover(topo::SysRoot(odd.path()));
  const std::string root = topo::SysRoot(odd.path()).root();
  EXPECT_EQ(s.gpus.size(), 8u);
  EXPECT_EQ(s.pci.size(), load("dgx").pci.size());
  for (const std::string& name : bad) {
    EXPECT_THAT(s.warnings, Contains(root + "/sys/bus/pci/devices/: entry " + quote(name) +
                                     " is not a PCI address (dddd:bb:dd.f); skipped"));
  }
  EXPECT_THAT(s.warnings,
              Contains(HasSubstr("entry \"bogus\\x1b[2J\\x0aGPU\" is not a PCI address")));
}

// Intel VMD puts the NVMe drives behind it in PCI domains from 10000 up:
// five digits, as the kernel names them. Discovery takes them as devices,
// quietly (a VMD server must not warn at every discovery).
TEST_F(Fixtures, DevicesInVmdDomainsAreTakenWithoutAWarning) {
  TempDir vmd;
  copyFixture("dgx", vmd);
  const std::string r = vmd.path();
  const std::string dev = r + "/sys/devices/pci10000:e0/10000:e0:06.0/10000:e1:00.0";
  std::filesystem::create_directories(dev);
  std::ofstream(dev + "/vendor") << "0x144d\n";
  std::ofstream(dev + "/device") << "0xa80a\n";
  std::ofstream(dev + "/class") << "0x010802\n";
  std::ofstream(dev + "/numa_node") << "0\n";
  std::filesystem::create_symlink("../../../devices/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
                                  r + "/sys/bus/pci/devices/10000:e1:00.0");
  const topo::Snapshot s = topo::discover(topo::SysRoot(r));
  EXPECT_EQ(s.pci.size(), load("dgx").pci.size() + 1);
  bool found = false;
  for (const topo::PciDevice& d : s.pci) {
    if (d.address != "10000:e1:00.0") continue;
    found = true;
    EXPECT_EQ(d.root_complex, "pci10000:e0");
    EXPECT_EQ(d.bridges, std::vector<std::string>{"10000:e0:06.0"});
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(s.warnings, Not(Contains(HasSubstr("10000:e"))));
  EXPECT_EQ(s.gpus.size(), 8u);
}

// What drivers and users name is anyone's text: a netdev name may hold any
// byte but '/', ':' and white space (a container with CAP_NET_ADMIN names
// one), an RDMA device is renamed with `rdma dev set`, a model is what the
// driver wrote. In the tree each is quoted and cut short when it is not
// plain, so none forges a line or reaches the terminal as an escape.
TEST_F(Fixtures, HostileNamesInTheTreeAreQuotedAndCutShort) {
  TempDir odd;
  copyFixture("dgx", odd);
  const std::string r = odd.path();
  const std::string sw0 = r + "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/";
  // GPU 0's model: an OSC title sequence, a carriage return, 300 bytes.
  std::ofstream(r + "/proc/driver/nvidia/gpus/0000:1a:00.0/information")
      << "Model: \t\t NVIDIA \x1b]0;pwned\x07"
         "A100\rGPU 0000:00:00.0 "
      << std::string(300, 'Z') << "\nDevice Minor: \t 0\n";
  // mlx5_0's netdev: a newline and a colour.
  const std::string nic0 = sw0 + "0000:19:02.0/0000:1c:00.0/";
  std::filesystem::rename(nic0 + "net/ibp28s0", nic0 + "net/ib\x1b[31m\n      RDMA forged");
  // mlx5_1 renamed to a line of its own; its port's state with an escape.
  std::filesystem::rename(r + "/sys/class/infiniband/mlx5_1",
                          r + "/sys/class/infiniband/mlx5_1\n      GPU 0000:99:00.0 forged");
  std::ofstream(r +
                "/sys/devices/pci0000:37/0000:37:00.0/0000:38:00.0/0000:39:02.0/0000:3c:00.0/"
                "infiniband/mlx5_1/ports/1/state")
      << "4: ACTIVE\x1b[0m\n";
  const topo::Snapshot s = topo::discover(topo::SysRoot(r));
  ASSERT_EQ(s.rdma.size(), 7u);
  const std::string t = topo::tree(s);
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) {
    for (char c : line) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f)
          << "a byte " << int(static_cast<unsigned char>(c)) << " in: " << line;
    }
    EXPECT_FALSE(line.rfind("      RDMA forged", 0) == 0 ||
                 line.rfind("      GPU 0000:99:00.0", 0) == 0 || line.rfind("GPU 0000:00", 0) == 0)
        << "a line forged by a name: " << line;
    EXPECT_LT(line.size(), 400u) << line;
  }
  EXPECT_THAT(t, HasSubstr("GPU 0000:1a:00.0 \"NVIDIA \\x1b]0;pwned\\x07A100\\x0dGPU 0000:00:00.0 "
                           "ZZZZ"));
  EXPECT_THAT(t, HasSubstr("ZZZ\"... minor 0"));
  EXPECT_THAT(t, HasSubstr(" \"ib\\x1b[31m\\x0a      RDMA forged\" port 1"));
  EXPECT_THAT(t, HasSubstr("RDMA \"mlx5_1\\x0a      GPU 0000:99:00.0 forged\" 0000:3c:00.0"));
  EXPECT_THAT(t, HasSubstr("port 1 InfiniBand \"4: ACTIVE\\x1b[0m\"\n"));
  // Plain names stay as they were.
  EXPECT_THAT(t, HasSubstr("RDMA mlx5_2 0000:9c:00.0 uverbs2 "));
}

// sysfs is read as regular files of at most a page or so: a FIFO, a link into
// /dev or an oversized file in the tree is a file that cannot be read, and
// discovery neither blocks nor fills memory on it.
TEST_F(Fixtures, AFifoADeviceOrAHugeFileInTheTreeIsUnreadableNotWaitedOn) {
  TempDir odd;
  copyFixture("dgx", odd);
  const std::string cpu = odd.path() + "/sys/devices/system/cpu/";
  std::filesystem::remove(cpu + "cpu5/topology/core_id");
  ASSERT_EQ(::mkfifo((cpu + "cpu5/topology/core_id").c_str(), 0600), 0);
  std::filesystem::remove(cpu + "cpu6/topology/core_id");
  std::filesystem::create_symlink("/dev/zero", cpu + "cpu6/topology/core_id");
  std::filesystem::remove(cpu + "cpu7/topology/core_id");
  std::ofstream(cpu + "cpu7/topology/core_id") << "7";
  ASSERT_EQ(::truncate((cpu + "cpu7/topology/core_id").c_str(), 1 << 30), 0);  // sparse

  const auto start = std::chrono::steady_clock::now();
  const topo::Snapshot s = topo::discover(topo::SysRoot(odd.path()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const std::string root = topo::SysRoot(odd.path()).root();
  for (int c : {5, 6, 7}) {
    EXPECT_EQ(s.cpu(c)->core, -1) << c;
    EXPECT_THAT(s.warnings, ::testing::Contains(cat(root, "/sys/devices/system/cpu/cpu", c,
                                                    "/topology/core_id: cannot be read")));
  }
  EXPECT_EQ(s.cpus.size(), 64u);
  EXPECT_EQ(topo::SysRoot(odd.path()).read("sys/devices/system/cpu/cpu5/topology/core_id"),
            std::nullopt);
}

// A VF keeps the N of its virtfn<N> link when an earlier one dangles (a VF
// being torn down): device actions template {minor} from it.
TEST_F(Fixtures, AVirtualFunctionKeepsItsNumberWhenAnEarlierLinkDangles) {
  TempDir broken;
  copyFixture("dgx", broken);
  const std::string pf_dir =
      std::filesystem::canonical(broken.path() + "/sys/bus/pci/devices/0000:1c:00.0");
  std::filesystem::remove(pf_dir + "/virtfn0");
  std::filesystem::create_symlink("../0000:1c:00.7", pf_dir + "/virtfn0");
  const topo::Snapshot s = topo::discover(topo::SysRoot(broken.path()));
  const topo::RdmaDevice* pf = s.rdmaByName("mlx5_0");
  ASSERT_NE(pf, nullptr);
  EXPECT_THAT(pf->virtual_functions, ElementsAre("0000:1c:00.3"));
  EXPECT_THAT(pf->virtual_function_numbers, ElementsAre(1));
  EXPECT_THAT(s.warnings, Contains(HasSubstr("virtfn0: a dangling link")));
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
  // Overlapping and unordered ranges count each CPU once.
  ASSERT_TRUE(topo::parseCpuList("8-9,2-4,3-5,9", v));
  EXPECT_THAT(v, ElementsAre(2, 3, 4, 5, 8, 9));
}

// A pod annotation may repeat the widest range until its 256 KiB are full:
// the list is as long as the CPUs it names, never ranges x CPUs (30,000
// copies of "0-65535" used to expand to 2 billion entries, 8 GB).
// 65536 CPUs online, none with a topology directory: the ids Linux cannot
// have (8192 up) dropped with one warning, three unreadable files for each
// of the rest, said in kMaxWarnings warnings and a count, not in 24577 lines
// (the fuzzer's "0-65535" took discovery and the tree past 10 s).
TEST(Discover, ATreeWrongEverywhereSaysSoInBoundedWarnings) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sys/devices/system/cpu"));
  std::ofstream(dir.file("sys/devices/system/cpu/online")) << "0-65535\n";
  const topo::Snapshot s = topo::discover(topo::SysRoot(dir.path()));
  ASSERT_EQ(s.cpus.size(), static_cast<size_t>(topo::kMaxCpus));
  EXPECT_EQ(s.cpus.back().id, topo::kMaxCpus - 1);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_EQ(s.nodes[0].socket, -1);
  ASSERT_EQ(s.warnings.size(), topo::kMaxWarnings + 1);
  EXPECT_EQ(s.warnings[0], dir.path() +
                               "/sys/devices/system/cpu/online: 57344 ids from 8192 up dropped: "
                               "Linux has at most 8192");
  EXPECT_THAT(s.warnings[1], HasSubstr("/sys/devices/system/cpu/cpu0/topology/"));
  EXPECT_EQ(s.warnings.back(), std::to_string(1 + 3 * topo::kMaxCpus - topo::kMaxWarnings) +
                                   " more warnings not listed");
}

// NUMA nodes online up to 65535: Linux has at most 1024, and each node past them
// would cost three reads and a line in every view (the fuzzer's "0-65535"
// took discovery and the views 80 s under ASan). The CPUs a node's list names
// are bounded by kMaxCpus as the online ones are.
TEST(Discover, NodeIdsPastLinuxsBoundAreDroppedWithAWarning) {
  TempDir dir;
  const std::string sys = dir.path() + "/sys/devices/system/";
  std::filesystem::create_directories(sys + "cpu/cpu0/topology");
  std::filesystem::create_directories(sys + "node/node0");
  std::ofstream(sys + "cpu/online") << "0\n";
  std::ofstream(sys + "cpu/cpu0/topology/physical_package_id") << "0\n";
  std::ofstream(sys + "cpu/cpu0/topology/core_id") << "0\n";
  std::ofstream(sys + "cpu/cpu0/topology/thread_siblings_list") << "0,9000\n";
  std::ofstream(sys + "node/online") << "0-1,1024-65535\n";
  std::ofstream(sys + "node/node0/cpulist") << "0,8191-8192\n";
  const topo::Snapshot s = topo::discover(topo::SysRoot(dir.path()));
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes.back().id, 1);
  EXPECT_THAT(s.nodes[0].cpus, ElementsAre(0, 8191));
  ASSERT_EQ(s.cpus.size(), 1u);
  EXPECT_THAT(s.cpus[0].siblings, ElementsAre(0));
  EXPECT_THAT(s.warnings, Contains(sys + "node/online: 64512 ids from 1024 up dropped: "
                                         "Linux has at most 1024"));
  EXPECT_THAT(s.warnings, Contains(sys + "node/node0/cpulist: 1 id from 8192 up dropped: "
                                         "Linux has at most 8192"));
  EXPECT_THAT(s.warnings,
              Contains(sys + "cpu/cpu0/topology/thread_siblings_list: 1 id from 8192 up "
                             "dropped: Linux has at most 8192"));
  // A node with no CPU list is one without CPUs.
  EXPECT_THAT(topo::tree(s), HasSubstr("  NUMA node 1: CPUs none, 0 GiB\n"));
}

TEST(CpuList, RepeatedWideRangesCostTheirCpusOnce) {
  std::string text;
  for (int i = 0; i < 30000; ++i) text += "0-65535,";
  text += "7";
  std::vector<int> v;
  ASSERT_TRUE(topo::parseCpuList(text, v));
  ASSERT_EQ(v.size(), 65536u);
  EXPECT_EQ(v.front(), 0);
  EXPECT_EQ(v.back(), 65535);
}

}  // namespace
}  // namespace crihook::testing
