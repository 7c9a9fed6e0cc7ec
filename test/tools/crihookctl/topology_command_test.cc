#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hooks/builtin/lifecycle/records.h"
#include "hooks/state_store.h"
#include "test/support/fixture_trees.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// make-fixtures.sh's machines (test/support/fixture_trees.h).
class CrihookctlTopology : public ::testing::Test {};

TEST_F(CrihookctlTopology, PrintsTheFixtureAsTreeJsonAndDeviceObject) {
  const std::string root = fixtureTree("dgx");
  Result tree = ctl({"topology", "--root", root});
  ASSERT_EQ(tree.code, 0) << tree.err;
  EXPECT_THAT(tree.out, HasSubstr("socket 1\n  NUMA node 1: CPUs 16-31,48-63, 256 GiB\n"
                                  "    PCIe switch 0000:98:00.0\n"));
  Result json = ctl({"topology", "--root", root, "--output", "json"});
  ASSERT_EQ(json.code, 0);
  EXPECT_EQ(nlohmann::json::parse(json.out)["gpus"].size(), 8u);
  Result crd = ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json",
                    "--node", "gpu-node-7", "--pcie-id", "root-complex"});
  ASSERT_EQ(crd.code, 0) << crd.err;
  auto device = nlohmann::json::parse(crd.out);
  EXPECT_EQ(device["metadata"]["name"], "gpu-node-7");
  EXPECT_EQ(device["spec"]["devices"][0]["topology"]["pcieID"], "pci0000:17");
  // What the object lacks is said on stderr: no NVML for a fixture's GPUs.
  EXPECT_THAT(crd.err, HasSubstr("warning: NVML: not asked about a root other than /"));
  EXPECT_THAT(crd.err, HasSubstr("the Device report has no koordinator.sh/gpu-memory"));
  EXPECT_THAT(crd.err, HasSubstr("WARNING: 8 of the 8 GPU(s) in this report have no "
                                 "koordinator.sh/gpu-memory. Do not publish it on a node whose "
                                 "GPUs are shared"));
  Result sw = ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json",
                   "--pcie-id", "switch"});
  ASSERT_EQ(sw.code, 0) << sw.err;
  EXPECT_EQ(nlohmann::json::parse(sw.out)["spec"]["devices"][0]["topology"]["pcieID"],
            "0000:18:00.0");
  Result by_default =
      ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json"});
  EXPECT_EQ(nlohmann::json::parse(by_default.out)["spec"]["devices"][0]["topology"]["pcieID"],
            "pci0000:17");
  Result yaml = ctl({"topology", "--root", root, "--output", "device-crd", "--node", "n"});
  EXPECT_THAT(yaml.out, HasSubstr("kind: \"Device\"\n"));
  Result bad = ctl({"topology", "--output", "xml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err,
              HasSubstr("--output must be tree, json, device-crd, matrix or dot, got \"xml\""));
}

// The matrix and the picture (topology/views.h; cell by cell in
// test/topology/views_test.cc): what the command prints.
TEST_F(CrihookctlTopology, PrintsTheMatrixAndTheDotGraph) {
  const std::string root = fixtureTree("dgx");
  Result matrix = ctl({"topology", "--root", root, "--output", "matrix"});
  ASSERT_EQ(matrix.code, 0) << matrix.err;
  EXPECT_THAT(matrix.out, ::testing::StartsWith("      GPU0  GPU1  GPU2"));
  EXPECT_THAT(matrix.out, ::testing::ContainsRegex("\nGPU0 +X +PIX +NODE +NODE +SYS "));
  EXPECT_THAT(matrix.out, ::testing::ContainsRegex("\nGPU7 .* 16-31,48-63 +1\\*\n"));
  EXPECT_THAT(matrix.out, HasSubstr("NIC Legend:\n\n  NIC0: mlx5_0 0000:1c:00.0\n"));
  Result dot = ctl({"topology", "--root", root, "--output", "dot"});
  ASSERT_EQ(dot.code, 0) << dot.err;
  EXPECT_THAT(dot.out, ::testing::StartsWith("digraph topology {\n"));
  EXPECT_THAT(dot.out, HasSubstr("label=\"PCIe switch\\n0000:18:00.0\""));
  EXPECT_THAT(dot.err, HasSubstr("warning: NVML: not asked about a root other than /"));
}

// Found by fuzz/fuzz_topology: a byte that is not UTF-8 in what a driver
// wrote (here a GPU's model name) made `topology` die on an exception.
TEST_F(CrihookctlTopology, TextThatIsNotUtf8IsReplacedNotFatal) {
  TempDir copy;  // the shared tree stays as the script made it
  std::filesystem::copy(
      fixtureTree("workstation"), copy.path(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const std::string root = copy.path();
  std::string info;
  for (const auto& e : std::filesystem::directory_iterator(root + "/proc/driver/nvidia/gpus")) {
    info = e.path().string() + "/information";
    break;
  }
  ASSERT_FALSE(info.empty());
  std::ofstream(info, std::ios::app) << "Model: \xff\xfeGPU\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"topology", "--root", root, "--output", "json"},
        std::vector<std::string>{"topology", "--root", root, "--output", "device-crd", "--format",
                                 "json", "--node", "n"},
        std::vector<std::string>{"topology", "--root", root, "--output", "device-crd", "--node",
                                 "n"}}) {
    Result r = ctl(args);
    EXPECT_EQ(r.code, 0) << args[3] << ": " << r.err;
  }
  EXPECT_THAT(ctl({"topology", "--root", root, "--output", "json"}).out,
              HasSubstr("\xef\xbf\xbd\xef\xbf\xbdGPU"))
      << "the model, with U+FFFD for each byte that is not UTF-8";
}

// explain and devices say where a pod's devices and CPUs sit, so a wrong
// allocation shows: here on the dgx fixture, GPU 0 (switch 0000:18:00.0,
// NUMA 0) with mlx5_1 (another switch and root complex of NUMA 0) and CPUs
// 16-19 of NUMA 1.
TEST_F(CrihookctlTopology, ExplainAndDevicesPlaceThePodOnTheMachine) {
  const std::string root = fixtureTree("dgx");
  TempDir state_dir;
  {
    StateStore state(state_dir.path(), nullptr);
    ASSERT_TRUE(state.load().ok());
    hook::v1::ContainerRecord c = trainerOfTrain0(state);
    *c.mutable_sent() = c.requested();
    for (const char* node : {"nvidia0", "nvidiactl", "infiniband/rdma_cm", "infiniband/uverbs1"}) {
      auto* d = c.mutable_sent()->add_devices();
      d->set_container_path(std::string("/dev/") + node);
      d->set_host_path(std::string("/dev/") + node);
    }
    c.mutable_sent()->mutable_linux()->mutable_resources()->set_cpuset_cpus("16-19");
    state.putContainer(c);
  }
  Result explain = ctl({"explain", "--state-dir", state_dir.path(), "--root", root, "c0ffee"});
  ASSERT_EQ(explain.code, 0) << explain.err;
  EXPECT_THAT(explain.out,
              HasSubstr("\non the machine (" + root +
                        "):\n"
                        "  GPU0 (minor 0, 0000:1a:00.0): switch 0000:18:00.0, root complex "
                        "pci0000:17, NUMA 0, socket 0\n"
                        "  NIC1 mlx5_1 (0000:3c:00.0): switch 0000:38:00.0, root complex "
                        "pci0000:37, NUMA 0, socket 0\n"
                        "  cpus 16-19 on NUMA 1 (socket 1)\n"
                        "  farthest link between its devices: NODE (GPU0 - NIC1)\n"
                        "  cpus 16-19 off its devices' NUMA node 0\n"));

  TempDir records_dir;
  DeviceRecord r;
  r.key = {"uid-a", 0};
  r.pod = {"ml", "train-0", "uid-a"};
  r.phase = DevicePhase::kReady;
  r.devices = {{"gpu", 0, 7, "", "GPU-7", "0000:bb:00.0", "", "nvidia7"},
               {"rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", ""}};
  ASSERT_TRUE(DeviceRecordDir(records_dir.path()).save(r).ok());
  Result devices = ctl({"devices", "--state-dir", records_dir.path(), "--root", root});
  ASSERT_EQ(devices.code, 0) << devices.err;
  EXPECT_THAT(devices.out,
              HasSubstr("\nml/train-0 (attempt 0) on the machine (" + root +
                        "):\n"
                        "  GPU7 (minor 7, 0000:bb:00.0): switch 0000:b8:00.0, root complex "
                        "pci0000:b7, NUMA 1 (numa_node -1: of bridge 0000:b8:00.0), socket 1\n"
                        "  NIC6 mlx5_6 (0000:1c:00.3, a VF): switch 0000:18:00.0, root complex "
                        "pci0000:17, NUMA 0, socket 0\n"
                        "  farthest link between its devices: SYS (GPU7 - NIC6)\n"));
  EXPECT_THAT(devices.out, Not(HasSubstr("cpus")));
}

}  // namespace
}  // namespace crihook::testing
