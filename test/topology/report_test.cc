// The topology report (topology/report.cc) on make-fixtures.sh's trees:
// Koordinator's Device object as koordlet writes it, its YAML, and the tree
// with hostile names quoted and cut short.

#include "topology/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test/topology/topology_fixtures.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

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

// The API server refuses a label value over 63 characters, and with it the
// whole Device: a long model or driver string is cut to 63, and what the cut
// leaves at its end that is not a letter or digit goes too.
TEST_F(Fixtures, DeviceLabelsAreCutToWhatTheApiServerTakes) {
  topo::Snapshot s = load("dgx");
  const std::string a62(62, 'A');
  for (topo::Gpu& g : s.gpus) g.model = "NVIDIA " + a62 + "-B";  // 64 characters labelled
  s.nvidia_driver_version = std::string(63, '5') + "9";
  nlohmann::json labels = topo::deviceObject(s, {"n"})["metadata"]["labels"];
  EXPECT_EQ(labels["node.koordinator.sh/gpu-model"], a62) << "cut to 63, then its '-'";
  EXPECT_EQ(labels["node.koordinator.sh/gpu-driver-version"], std::string(63, '5'));

  for (topo::Gpu& g : s.gpus) g.model = "NVIDIA " + a62 + "BC";
  labels = topo::deviceObject(s, {"n"})["metadata"]["labels"];
  EXPECT_EQ(labels["node.koordinator.sh/gpu-model"], a62 + "B") << "63 kept";
}

// A NUMA node's memory in whole GiB of 2^30 bytes, as numactl and the
// kernel count it, also on a node of a terabyte.
TEST(Tree, ANodesMemoryIsInGibibytes) {
  topo::Snapshot s = oddMachine();
  s.nodes[0].memory_bytes = uint64_t{1} << 40;
  s.nodes[1].memory_bytes = uint64_t{96} << 30;
  const std::string t = topo::tree(s);
  EXPECT_THAT(t, HasSubstr("  NUMA node 0: CPUs 0-1, 1024 GiB\n"));
  EXPECT_THAT(t, HasSubstr("  NUMA node 1: CPUs none, 96 GiB\n"));
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

}  // namespace
}  // namespace crihook::testing
