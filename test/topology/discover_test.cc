// Topology discovery (topology/discover.cc) on make-fixtures.sh's trees (a
// DGX-shaped server with a BMC's VGA controller and a GPU whose numa_node is
// -1, a workstation, a machine with an Intel RDMA NIC, a Mellanox one and a
// GPU that no bridge places, a sub-NUMA-clustered server whose node numbers
// are never its sockets'), on broken trees, and on this machine's own /sys;
// CPU lists parsed and formatted.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/quote.h"
#include "test/topology/topology_fixtures.h"
#include "topology/placement.h"
#include "topology/report.h"
#include "topology/topology.h"

namespace crihook::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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

// A line of a GPU's information file without a colon is no field, even one
// that names one: a file cut short after "Device Minor" has no minor.
TEST_F(Fixtures, AnInformationLineWithoutAColonIsNoField) {
  TempDir copy;
  copyFixture("dgx", copy);
  const std::string info = copy.path() + "/proc/driver/nvidia/gpus/0000:1b:00.0/information";
  std::ofstream(info) << "Model: \t\t NVIDIA A100-SXM4-40GB\nModel\nDevice Minor";
  const topo::Snapshot s = topo::discover(topo::SysRoot(copy.path()));
  EXPECT_EQ(s.gpu("0000:1b:00.0")->model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(s.gpu("0000:1b:00.0")->minor, -1);
  EXPECT_THAT(s.warnings, Contains(topo::SysRoot(copy.path()).root() +
                                   "/proc/driver/nvidia/gpus/0000:1b:00.0/information: no "
                                   "\"Device Minor\": GPU 0000:1b:00.0 has no minor and is left "
                                   "out of the Device report"));
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

// NVML as discovery asks it on a GPU node, through a fake NVML
// (test/topology/fake_nvml.cc) answering for the dgx fixture's eight GPUs
// as each test tells it: what the Device report says of their memory and
// health, and what an operator reads when NVML cannot say.
class FakeNvml : public Fixtures {
 protected:
  void TearDown() override {
    ::unsetenv("CRIHOOK_FAKE_NVML_GPUS");
    ::unsetenv("CRIHOOK_FAKE_NVML_INIT");
  }
  // The dgx fixture's GPUs as NVML names them, each with 40 GiB, but for
  // those `instead` answers otherwise ("!<rc>": its memory query fails;
  // "": NVML does not know it).
  static void nvmlKnows(const std::map<std::string, std::string>& instead = {}) {
    std::string spec;
    for (const char* bus : {"1a", "1b", "3a", "3b", "9a", "9b", "ba", "bb"}) {
      const std::string address = "0000:" + std::string(bus) + ":00.0";
      auto it = instead.find(address);
      const std::string answer = it == instead.end() ? std::to_string(kForty) : it->second;
      std::string nvml_name = "0000" + address;  // 00000000:1A:00.0
      for (char& c : nvml_name) c = static_cast<char>(std::toupper(c));
      if (!answer.empty()) spec += nvml_name + "=" + answer + ";";
    }
    ASSERT_EQ(::setenv("CRIHOOK_FAKE_NVML_GPUS", spec.c_str(), 1), 0);
  }
  static topo::Snapshot discoverWith(const std::string& library) {
    return topo::discover(topo::SysRoot(fixture("dgx")), {.nvml_library = library});
  }
  // What the Device report says of the GPU at `address`.
  static nlohmann::json reported(const topo::Snapshot& s, const std::string& address) {
    const nlohmann::json report = topo::deviceObject(s, {"dgx-1"});
    for (const auto& d : report["spec"]["devices"]) {
      if (d["type"] == "gpu" && d["topology"]["busID"] == address) return d;
    }
    ADD_FAILURE() << "GPU " << address << " is not in the Device report";
    return {};
  }
  static constexpr uint64_t kForty = uint64_t{40} << 30;
};

TEST_F(FakeNvml, EachGpusMemoryAndHealthComeFromNvml) {
  nvmlKnows({{"0000:9b:00.0", std::to_string(uint64_t{80} << 30)}});
  const topo::Snapshot s = discoverWith(FAKE_NVML_PATH);
  EXPECT_THAT(s.warnings, ::testing::IsEmpty());
  ASSERT_EQ(s.gpus.size(), 8u);
  for (const topo::Gpu& g : s.gpus) {
    EXPECT_TRUE(g.health) << g.address;
    EXPECT_EQ(g.memory_bytes, g.address == "0000:9b:00.0" ? uint64_t{80} << 30 : kForty)
        << g.address;
  }
  const nlohmann::json d = reported(s, "0000:1a:00.0");
  EXPECT_EQ(d["health"], true);
  EXPECT_EQ(d["resources"]["koordinator.sh/gpu-memory"], "40Gi");
  EXPECT_EQ(reported(s, "0000:9b:00.0")["resources"]["koordinator.sh/gpu-memory"], "80Gi");
}

TEST_F(FakeNvml, AGpuNvmlCannotFindOrMeasureIsReportedUnhealthyNamingTheCall) {
  nvmlKnows({{"0000:3a:00.0", ""}, {"0000:bb:00.0", "!15"}});  // 15: NVML_ERROR_GPU_IS_LOST
  const topo::Snapshot s = discoverWith(FAKE_NVML_PATH);
  EXPECT_THAT(s.warnings,
              ElementsAre("NVML: GPU 0000:3a:00.0: nvmlDeviceGetHandleByPciBusId_v2 returned 6; "
                          "reported unhealthy, without koordinator.sh/gpu-memory",
                          "NVML: GPU 0000:bb:00.0: nvmlDeviceGetMemoryInfo returned 15; "
                          "reported unhealthy, without koordinator.sh/gpu-memory"));
  for (const char* lost : {"0000:3a:00.0", "0000:bb:00.0"}) {
    EXPECT_FALSE(s.gpu(lost)->health) << lost;
    const nlohmann::json d = reported(s, lost);
    EXPECT_EQ(d["health"], false) << lost;
    EXPECT_FALSE(d["resources"].contains("koordinator.sh/gpu-memory")) << d.dump();
  }
  EXPECT_TRUE(s.gpu("0000:3b:00.0")->health);
  EXPECT_EQ(reported(s, "0000:3b:00.0")["resources"]["koordinator.sh/gpu-memory"], "40Gi");
}

TEST_F(FakeNvml, AnNvmlThatCannotAnswerLeavesEveryGpusMemoryUnknownAndSaysWhy) {
  nvmlKnows();
  auto unknown = [](const std::string& library, const std::string& why) {
    return library + ": " + why +
           "; the memory of 8 NVIDIA GPU(s) is unknown and the Device report has no "
           "koordinator.sh/gpu-memory for them";
  };
  const std::string partial = FAKE_NVML_WITHOUT_MEMORY_INFO_PATH;
  topo::Snapshot s = discoverWith(partial);
  EXPECT_THAT(s.warnings, ElementsAre(unknown(partial,
                                              "lacks nvmlInit_v2, nvmlShutdown, "
                                              "nvmlDeviceGetHandleByPciBusId_v2 or "
                                              "nvmlDeviceGetMemoryInfo")));
  for (const topo::Gpu& g : s.gpus) EXPECT_EQ(g.memory_bytes, 0u) << g.address;

  ASSERT_EQ(::setenv("CRIHOOK_FAKE_NVML_INIT", "9", 1), 0);  // NVML_ERROR_DRIVER_NOT_LOADED
  s = discoverWith(FAKE_NVML_PATH);
  EXPECT_THAT(s.warnings, ElementsAre(unknown(FAKE_NVML_PATH, "nvmlInit_v2 returned 9")));
  for (const topo::Gpu& g : s.gpus) {
    EXPECT_EQ(g.memory_bytes, 0u) << g.address;
    EXPECT_TRUE(g.health) << g.address << ": NVML said nothing of it";
  }
  EXPECT_FALSE(reported(s, "0000:1a:00.0")["resources"].contains("koordinator.sh/gpu-memory"));

  s = discoverWith("/nonexistent/libnvidia-ml.so.1");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_THAT(s.warnings[0], ::testing::StartsWith("/nonexistent/libnvidia-ml.so.1: cannot be "
                                                   "loaded: \"/nonexistent/libnvidia-ml.so.1: "));
  EXPECT_THAT(s.warnings[0], HasSubstr("the memory of 8 NVIDIA GPU(s) is unknown"));
}

// What discovery keeps of a name under sys/bus/pci/devices, and what the
// hooks take as a device, becomes a path: every digit of a PCI address is
// checked, a name with any other byte in any place is none.
TEST(PciAddress, EveryDigitIsLowerCaseHex) {
  const std::string good = "0000:1f:00.2";
  ASSERT_TRUE(topo::isPciAddress(good));
  // Each end of a digit's range: device 0x1f is the last, function 7 too.
  for (const char* edge : {"0000:00:00.0", "0000:ff:1f.7", "ffff:ff:10.0"})
    EXPECT_TRUE(topo::isPciAddress(edge)) << edge;
  for (size_t i = 0; i < good.size(); ++i) {
    if (good[i] == ':' || good[i] == '.') continue;
    for (char c : {'g', 'F', '/', ' '}) {
      std::string bad = good;
      bad[i] = c;
      EXPECT_FALSE(topo::isPciAddress(bad)) << quote(bad);
    }
  }
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

// A pod annotation may repeat the widest range until its 256 KiB are full:
// the list is as long as the CPUs it names, never ranges x CPUs (30,000
// copies of "0-65535" used to expand to 2 billion entries, 8 GB).
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
