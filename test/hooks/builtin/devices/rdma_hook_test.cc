// The rdma hook (hooks/builtin/devices/rdma_hook.h) on the DGX-shaped
// fixture topology and a fixture device root: a PF or the allocated VFs, by
// id, by busID or by the Device report's minor, and how it refuses what is
// not on this node.

#include "hooks/builtin/devices/rdma_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hooks/builtin/devices/allocation.h"
#include "test/hooks/builtin/devices/device_hooks_fixture.h"
#include "test/support/eventually.h"
#include "topology/report.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;

TEST_F(DeviceHooksTest, RdmaHookAddsThePhysicalFunctionOrTheAllocatedVfs) {
  auto rdma = make("rdma");
  HookDecision d = rdma->run(allocated(R"({"rdma":[{"minor":0,"id":"0000:1c:00.0"}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs0<-/infiniband/uverbs0"));
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_0"}));

  d = rdma->run(allocated(
      R"({"rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1c:00.3"}]}}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs6<-/infiniband/uverbs6"));
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_6"}));

  // Several functions: each one's uverbs node with cgroup permissions, and
  // NCCL_IB_HCA naming all of them, in allocation order.
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":2,"id":"0000:9c:00.0"},)"
      R"({"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"busID":"0000:1c:00.3"},{"busID":"0000:1c:00.2"}]}}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs2<-/infiniband/uverbs2",
                                                   "/dev/infiniband/uverbs6<-/infiniband/uverbs6",
                                                   "/dev/infiniband/uverbs5<-/infiniband/uverbs5"));
  for (const DeviceSpec& x : d.adjustment.devices)
    EXPECT_EQ(x.permissions, "rw") << x.container_path;
  ASSERT_EQ(d.adjustment.env.size(), 1u);
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_2,mlx5_6,mlx5_5"}));

  const std::string prefix =
      "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: ";
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:3c:00.0"}]}}]})"));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            prefix +
                "rdma[0].extension.vfs[0].busID: 0000:3c:00.0 is not a VF of mlx5_0 "
                "(0000:1c:00.0)");
  d = rdma->run(allocated(R"({"rdma":[{"minor":0,"id":"0000:1c:00.2"}]})"));
  EXPECT_EQ(std::string(d.status.message()),
            prefix + "rdma[0].id: no RDMA physical function 0000:1c:00.2 on this node");
  d = rdma->run(allocated(R"({"rdma":[{"minor":0,"id":"0000:3c:00.0"}]})"));
  EXPECT_EQ(std::string(d.status.message()),
            prefix + "rdma[0]: no device node " + dir_->file("dev") + "/infiniband/uverbs1");
}

// As Koordinator's scheduler writes it (Go's encoding/json of
// apiext.DeviceAllocations: minor, resources, id, extension; a VF's minor
// -1 from koordlet, or no minor at all for a 0), on the DGX fixture: mlx5_0
// (0000:1c:00.0) has VFs 0000:1c:00.2 (mlx5_5) and 0000:1c:00.3 (mlx5_6).
TEST_F(DeviceHooksTest, RdmaHookFindsVfsByBusIdWhateverTheirMinor) {
  auto rdma = make("rdma");
  auto gpu = make("gpu");
  const std::string full =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},)"
      R"({"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}],)"
      R"("rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}]})";
  HookDecision d = rdma->run(allocated(full));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs6<-/infiniband/uverbs6"));
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_6"}));
  d = gpu->run(allocated(full));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment),
              ElementsAre("/dev/nvidia0<-/nvidia0", "/dev/nvidia1<-/nvidia1",
                          "/dev/nvidiactl<-/nvidiactl", "/dev/nvidia-uvm<-/nvidia-uvm"));
  EXPECT_TRUE(d.adjustment.annotations.empty());

  // The other VF, whose minor Go left out.
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1c:00.0","extension":{"vfs":[{"busID":"0000:1c:00.2"}]}}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs5<-/infiniband/uverbs5"));
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_5"}));

  // Before Koordinator v1.6 there is no id: the PF is mlx5_<minor>, as
  // koordlet numbers it; a VF (mlx5_5) is never one.
  d = rdma->run(allocated(R"({"rdma":[{"minor":2,"resources":{"koordinator.sh/rdma":"100"}}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment), ElementsAre("/dev/infiniband/rdma_cm<-/infiniband/rdma_cm",
                                                   "/dev/infiniband/uverbs2<-/infiniband/uverbs2"));
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_2"}));
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NCCL_IB_HCA", "mlx5_6"}));
  const std::string prefix =
      "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: ";
  d = rdma->run(allocated(R"({"rdma":[{"minor":5,"resources":{"koordinator.sh/rdma":"100"}}]})"));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            prefix +
                "rdma[0].minor: no RDMA physical function with minor 5 on this node (no id: "
                "found by the Device report's minor, mlx*_N as koordlet numbers it)");
  // Without an id the VF must still be the PF's.
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}]})"));
  EXPECT_EQ(std::string(d.status.message()),
            prefix +
                "rdma[0].extension.vfs[0].busID: 0000:1c:00.3 is not a VF of mlx5_1 "
                "(0000:3c:00.0)");
  // A busID that is no PCI address never reaches a lookup.
  d = rdma->run(allocated(
      R"({"rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"../../1c:00.3"}]}}]})"));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument);
}

// An id-less allocation names an RDMA function by the minor the node's Device
// report gave it: a Mellanox one by mlx5_N, another (irdma) by the minor the
// report gave it after them. Resolving and reporting never disagree.
TEST_F(DeviceHooksTest, AnIdlessRdmaAllocationFindsWhatTheDeviceReportNumbered) {
  const topology::Snapshot snap = topology::discover(topology::SysRoot(fixtureTree("intel-rdma")));
  const nlohmann::json device =
      topology::deviceObject(snap, {"n", topology::PcieScope::kRootComplex});
  int checked = 0;
  for (const auto& d : device["spec"]["devices"]) {
    if (d["type"] != "rdma") continue;
    DeviceAllocation a;
    a.minor = d["minor"].get<int>();
    auto f = resolveRdma(a, 0, snap, "ml/a");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->pf->address, d["id"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);  // mlx5_1 (minor 1) and rocep24s0 (minor 2)
}

}  // namespace
}  // namespace crihook::testing
