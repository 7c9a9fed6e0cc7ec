// pod_devices.h: which devices of a pod the device-lifecycle hook acts on,
// from the scheduler's annotation and the DGX-shaped fixture topology.

#include "hooks/builtin/lifecycle/pod_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/logging.h"
#include "base/text.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "topology/topology.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu0[] = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";

class PodDevicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    topology_ = std::make_shared<const topology::Snapshot>(
        topology::discover(topology::SysRoot(fixtureTree("dgx"))));
  }
  // Settings that configure `types` (with no actions: only which matter here).
  static LifecycleSettings configured(std::initializer_list<const char*> types) {
    LifecycleSettings s;
    for (const char* t : types) s.types[t] = {};
    return s;
  }
  absl::StatusOr<std::vector<DeviceFacts>> devices(
      const std::string& annotation, const LifecycleSettings& s,
      const topology::Snapshot* topology = topology_.get()) {
    return podDevices(&annotation, topology, "ml/train-0", s, *logger("hook.devices"));
  }

  static inline std::shared_ptr<const topology::Snapshot> topology_;
};

TEST_F(PodDevicesTest, APodWithoutTheAnnotationHasNoDevices) {
  auto d = podDevices(nullptr, topology_.get(), "ml/web-0", configured({"gpu", "rdma", "fpga"}),
                      *logger("hook.devices"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
}

TEST_F(PodDevicesTest, TheConfiguredTypesInAllocationOrderDescribedByTheTopology) {
  const std::string annotation =
      R"({"fpga":[{"minor":0,"id":"0000:5e:00.0"},{"minor":1,"id":"fpga-1"}],)"
      R"("rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}],)"
      R"("gpu":[{"minor":0},{"minor":1}]})";
  auto all = devices(annotation, configured({"gpu", "rdma", "fpga"}));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 5u);
  const DeviceFacts& gpu0 = (*all)[0];
  EXPECT_EQ(gpu0.describe(), cat("gpu 0 (minor 0, ", kGpu0, ", ", gpu0.pci, ")"));
  EXPECT_FALSE(gpu0.pci.empty());
  EXPECT_EQ(gpu0.node, "nvidia0");
  EXPECT_EQ((*all)[1].describe(),
            cat("gpu 1 (minor 1, GPU-00000001-aaaa-bbbb-cccc-dddddddddddd, ", (*all)[1].pci, ")"));
  // The allocated VF, not its PF; its {minor} is its virtfn number.
  const DeviceFacts& vf = (*all)[2];
  EXPECT_EQ(vf.describe(), "rdma 0 (minor 1, mlx5_6, 0000:1c:00.3)");
  EXPECT_EQ(vf.id, "0000:1c:00.3");
  EXPECT_EQ(vf.node, "infiniband/uverbs6");
  // An FPGA's id is a PCI address only when it has that form.
  EXPECT_EQ((*all)[3].describe(), "fpga 0 (minor 0, 0000:5e:00.0)");
  EXPECT_EQ((*all)[4].describe(), "fpga 1 (minor 1)");
  EXPECT_EQ((*all)[4].id, "fpga-1");

  auto gpus = devices(annotation, configured({"gpu"}));
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].type, "gpu");
}

TEST_F(PodDevicesTest, AnRdmaPhysicalFunctionIsFoundByKoordletsMinorWithoutAnId) {
  auto d = devices(R"({"rdma":[{"minor":2,"resources":{"koordinator.sh/rdma":"100"}}]})",
                   configured({"rdma"}));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].name, "mlx5_2");
  EXPECT_EQ((*d)[0].minor, 2);
  EXPECT_EQ((*d)[0].node, "infiniband/uverbs2");
}

TEST_F(PodDevicesTest, AnotherVendorsGpuIsLeftToItsDevicePlugin) {
  auto d = devices(R"({"gpu":[{"minor":0,"id":"Ascend910-0"},{"minor":1}]})", configured({"gpu"}));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].index, 1);
}

// Only an id shaped as an NVIDIA UUID becomes {uuid}: without the topology
// it is all that tells an NVIDIA GPU, and an id of another form (a PCI
// address) never reaches a command as one.
TEST_F(PodDevicesTest, AGpuIdBecomesItsUuidOnlyInTheFormAUuidHas) {
  auto alone = devices(cat(R"({"gpu":[{"minor":0,"id":")", kGpu0, R"("},{"minor":1}]})"),
                       configured({"gpu"}), nullptr);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->size(), 1u);  // nothing says the second is NVIDIA's
  EXPECT_EQ((*alone)[0].uuid, kGpu0);
  EXPECT_EQ((*alone)[0].pci, "");
  EXPECT_EQ((*alone)[0].node, "nvidia0");

  const std::string gpu0_pci = topology_->gpuByMinor(0)->address;
  auto by_pci =
      devices(cat(R"({"gpu":[{"minor":9,"id":")", gpu0_pci, R"("}]})"), configured({"gpu"}));
  ASSERT_TRUE(by_pci.ok()) << by_pci.status();
  ASSERT_EQ(by_pci->size(), 1u);
  EXPECT_EQ((*by_pci)[0].id, gpu0_pci);
  EXPECT_EQ((*by_pci)[0].uuid, "");
  EXPECT_EQ((*by_pci)[0].node, "nvidia9");
}

TEST_F(PodDevicesTest, VfsThatCannotBeCheckedAndFunctionsNotOfThisNodeAreRefused) {
  auto gpu_vf = devices(R"({"gpu":[{"minor":0,"extension":{"vfs":[{"busID":"0000:18:00.4"}]}}]})",
                        configured({"gpu"}));
  EXPECT_EQ(gpu_vf.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(gpu_vf.status().message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: "
            "gpu[0].extension.vfs: device-lifecycle acts on RDMA virtual functions only; an "
            "NVIDIA GPU's cannot be checked to belong to the allocated device");
  auto fpga_vf = devices(R"({"fpga":[{"minor":0,"extension":{"vfs":[{"busID":"0000:5e:00.1"}]}}]})",
                         configured({"fpga"}));
  EXPECT_EQ(fpga_vf.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fpga_vf.status().message()),
              HasSubstr("fpga[0].extension.vfs: device-lifecycle acts on RDMA virtual functions "
                        "only; an FPGA's cannot"));
  // Not configured: not looked at.
  EXPECT_TRUE(devices(R"({"fpga":[{"minor":0,"extension":{"vfs":[{"busID":"0000:5e:00.1"}]}}]})",
                      configured({"gpu"}))
                  .ok());
  auto foreign = devices(
      R"({"rdma":[{"minor":1,"id":"0000:3c:00.0","extension":{"vfs":[{"busID":"0000:1c:00.2"}]}}]})",
      configured({"rdma"}));
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(foreign.status().message()),
              HasSubstr("rdma[0].extension.vfs[0].busID: 0000:1c:00.2 is not a VF of mlx5_1"));
  auto bad = devices("{not json", configured({"gpu"}));
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("of pod ml/train-0"));
}

}  // namespace
}  // namespace crihook::testing
