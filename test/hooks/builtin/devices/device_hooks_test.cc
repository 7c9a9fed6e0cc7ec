// The gpu, rdma and cpuset hooks on the DGX-shaped fixture topology and a
// fixture device root: what they add for an allocation, and how they refuse
// one that does not fit this node.

#include "hooks/builtin/devices/device_hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/registry.h"
#include "hooks/runtime_sandboxes.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "topology/report.h"
#include "topology/topology.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DeviceHooksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    topology_ = std::make_shared<const topology::Snapshot>(
        topology::discover(topology::SysRoot(fixtureTree("dgx"))));
    // A device root with what the host would have (plain files stand in:
    // the hooks only look them up).
    std::filesystem::create_directories(dir_->file("dev/infiniband"));
    for (const char* n :
         {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "infiniband/rdma_cm",
          "infiniband/uverbs0", "infiniband/uverbs2", "infiniband/uverbs5", "infiniband/uverbs6"})
      std::ofstream(dir_->file("dev/") + n) << "";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  std::shared_ptr<Hook> make(const std::string& type, std::string settings = "",
                             const std::string& name = "") {
    if (settings.empty()) settings = R"({"device_root": ")" + dir_->file("dev") + "\"}";
    auto h = builtinHooks().create(type, name.empty() ? type : name, settings);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : nullptr;
  }

  static HookInput input(std::map<std::string, std::string> annotations) {
    auto pod = std::make_shared<hv1::PodRecord>();
    pod->mutable_config()->mutable_metadata()->set_name("train-0");
    pod->mutable_config()->mutable_metadata()->set_namespace_("ml");
    for (const auto& [k, v] : annotations) (*pod->mutable_config()->mutable_annotations())[k] = v;
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.pod = pod;
    in.topology = topology_;
    return in;
  }
  static HookInput allocated(const std::string& json) {
    return input({{"scheduling.koordinator.sh/device-allocated", json}});
  }
  static std::vector<std::string> hostPaths(const Adjustment& a) {
    std::vector<std::string> out;
    for (const DeviceSpec& d : a.devices) {
      out.push_back(d.container_path + "<-" + d.host_path.substr(dir_->file("dev").size()));
    }
    return out;
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::shared_ptr<const topology::Snapshot> topology_;
};

TEST_F(DeviceHooksTest, GpuHookAddsTheAllocatedGpusAndTheControlNodesPresent) {
  auto gpu = make("gpu");
  HookDecision d = gpu->run(allocated(
      R"({"gpu":[{"minor":0,"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},{"minor":1}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment),
              ElementsAre("/dev/nvidia0<-/nvidia0", "/dev/nvidia1<-/nvidia1",
                          "/dev/nvidiactl<-/nvidiactl", "/dev/nvidia-uvm<-/nvidia-uvm"));
  // Device nodes with cgroup permissions (read, write; no mknod), so access
  // survives a systemctl daemon-reload.
  for (const DeviceSpec& x : d.adjustment.devices)
    EXPECT_EQ(x.permissions, "rw") << x.container_path;
  ASSERT_EQ(d.adjustment.env.size(), 1u);
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"NVIDIA_VISIBLE_DEVICES",
                                         "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd,"
                                         "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}));
  auto by_index =
      make("gpu", R"({"device_root": ")" + dir_->file("dev") + R"(", "visible_devices": "index"})");
  d = by_index->run(allocated(R"({"gpu":[{"minor":2}]})"));
  EXPECT_EQ(d.adjustment.env[0].value, "2");
  // No allocation, no annotation: nothing.
  EXPECT_TRUE(gpu->run(input({})).adjustment.empty());
  EXPECT_TRUE(gpu->run(allocated(R"({"rdma":[]})")).adjustment.empty());
}

TEST_F(DeviceHooksTest, GpuHookRefusesWhatIsNotOnThisNode) {
  auto gpu = make("gpu");
  const std::string prefix =
      "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: ";
  struct Case {
    const char* json;
    absl::StatusCode code;
    std::string message;
  } cases[] = {
      {R"({"gpu":[{"minor":9}]})", absl::StatusCode::kFailedPrecondition,
       prefix + "gpu[0].minor: no GPU with minor 9 on this node"},
      {R"({"gpu":[{"minor":1,"id":"GPU-other"}]})", absl::StatusCode::kFailedPrecondition,
       prefix + "gpu[0].id: GPU minor 1 is GPU-00000001-aaaa-bbbb-cccc-dddddddddddd on this "
                "node, not \"GPU-other\""},
      // An NVIDIA UUID the node does not have: the scheduler and the node disagree.
      {R"({"gpu":[{"minor":9,"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}]})",
       absl::StatusCode::kFailedPrecondition,
       prefix + "gpu[0].minor: no GPU with minor 9 on this node"},
      {R"({"gpu":[{"minor":3}]})", absl::StatusCode::kFailedPrecondition,
       prefix + "gpu[0]: no device node " + dir_->file("dev") + "/nvidia3"},
      {R"({"gpu":[{"minor":"zero"}]})", absl::StatusCode::kInvalidArgument,
       prefix + "gpu[0].minor: expected a non-negative integer, got \"zero\""},
      // The scheduler may give any type VFs; an NVIDIA GPU's are not a container's.
      {R"({"gpu":[{"minor":1,"extension":{"vfs":[{"busID":"0000:18:00.4"}]}}]})",
       absl::StatusCode::kFailedPrecondition,
       prefix + "gpu[0].extension.vfs: 1 virtual function(s) of GPU minor 1: a container gets "
                "a whole NVIDIA GPU by its /dev/nvidia node; a GPU's SR-IOV functions are for "
                "virtual machines"},
  };
  for (const Case& c : cases) {
    HookDecision d = gpu->run(allocated(c.json));
    EXPECT_EQ(d.kind, HookDecision::Kind::kReject) << c.json;
    EXPECT_EQ(d.status.code(), c.code) << c.json;
    EXPECT_EQ(std::string(d.status.message()), c.message);
  }
  auto lenient =
      make("gpu", R"({"device_root": ")" + dir_->file("dev") + R"(", "on_error": "skip"})");
  HookDecision d = lenient->run(allocated(R"({"gpu":[{"minor":9}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kContinue);
  EXPECT_TRUE(d.adjustment.empty());  // never half applied
}

TEST_F(DeviceHooksTest, SharedGpuInAHamiCorePodGetsHamiCoresLimitsAndLibrary) {
  std::filesystem::create_directories(dir_->file("hami/vgpulock"));
  std::ofstream(dir_->file("hami/libvgpu.so")) << "";
  const std::string lib = dir_->file("hami/libvgpu.so"), lock = dir_->file("hami/vgpulock");
  auto gpu =
      make("gpu", R"({"device_root": ")" + dir_->file("dev") + R"(", "hami_core_library": ")" +
                      lib + R"(", "hami_core_lock_dir": ")" + lock + R"("})");
  auto pod = [](const std::string& allocation, const std::string& provider) {
    HookInput in = allocated(allocation);
    auto record = std::make_shared<hv1::PodRecord>(*in.pod);
    if (!provider.empty())
      (*record->mutable_config()->mutable_labels())["koordinator.sh/gpu-isolation-provider"] =
          provider;
    in.pod = record;
    return in;
  };
  const std::string half =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",)"
      R"("koordinator.sh/gpu-memory-ratio":"50","koordinator.sh/gpu-memory":"40Gi"}}]})";
  HookDecision d = gpu->run(pod(half, "HAMi-core"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(
      d.adjustment.env,
      ElementsAre(EnvVar{"NVIDIA_VISIBLE_DEVICES", "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},
                  EnvVar{"CUDA_DEVICE_MEMORY_LIMIT", "42949672960"},
                  EnvVar{"CUDA_DEVICE_SM_LIMIT", "50"}, EnvVar{"LD_PRELOAD", lib}));
  EXPECT_THAT(d.adjustment.mounts,
              ElementsAre(MountSpec{lib, lib, true}, MountSpec{lock, lock, false}));
  // Koordinator's documents also spell the label in lower case.
  EXPECT_EQ(gpu->run(pod(half, "hami-core")).adjustment.env.size(), 4u);
  // Without the label, or with a whole GPU: no HAMi-core.
  EXPECT_EQ(gpu->run(pod(half, "")).adjustment.env.size(), 1u);
  EXPECT_TRUE(gpu->run(pod(half, "")).adjustment.mounts.empty());
  const std::string whole =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",)"
      R"("koordinator.sh/gpu-memory-ratio":"100","koordinator.sh/gpu-memory":"80Gi"}}]})";
  EXPECT_EQ(gpu->run(pod(whole, "HAMi-core")).adjustment.env.size(), 1u);
  // Two shares of different sizes: a limit per device.
  d = gpu->run(
      pod(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"25",)"
          R"("koordinator.sh/gpu-memory":"1Gi"}},{"minor":1,"resources":{)"
          R"("koordinator.sh/gpu-memory-ratio":"50","koordinator.sh/gpu-memory":"2Gi"}}]})",
          "HAMi-core"));
  EXPECT_THAT(
      d.adjustment.env,
      ElementsAre(::testing::Field(&EnvVar::name, "NVIDIA_VISIBLE_DEVICES"),
                  EnvVar{"CUDA_DEVICE_MEMORY_LIMIT", "1073741824"},
                  EnvVar{"CUDA_DEVICE_MEMORY_LIMIT_0", "1073741824"},
                  EnvVar{"CUDA_DEVICE_MEMORY_LIMIT_1", "2147483648"}, EnvVar{"LD_PRELOAD", lib}));
  // A share without its size is refused, naming the field.
  d = gpu->run(pod(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"50"}}]})",
                   "HAMi-core"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: "
            "gpu[0].resources.koordinator.sh/gpu-memory: missing (pod labelled "
            "koordinator.sh/gpu-isolation-provider=HAMi-core)");
  // A report without the GPU's memory made the scheduler's share 0 bytes: a
  // limit of 0 is never set (issue 31). Refused naming the pod, the GPU and
  // the missing figure; so is a second GPU's 0.
  const std::string zero =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"50",)"
      R"("koordinator.sh/gpu-memory":"0"}}]})";
  d = gpu->run(pod(zero, "HAMi-core"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: "
            "gpu[0].resources.koordinator.sh/gpu-memory: 0 bytes of GPU minor 0 "
            "(GPU-00000000-aaaa-bbbb-cccc-dddddddddddd) for a shared GPU: the node's Device "
            "report has no koordinator.sh/gpu-memory for it (the scheduler's share of an "
            "unknown memory is 0); a CUDA_DEVICE_MEMORY_LIMIT of 0 is never set. Publish a "
            "report with the GPUs' memory (NVML on this node)");
  d = gpu->run(pod(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"25",)"
                   R"("koordinator.sh/gpu-memory":"1Gi"}},{"minor":1,"resources":{)"
                   R"("koordinator.sh/gpu-memory-ratio":"25","koordinator.sh/gpu-memory":"0"}}]})",
                   "HAMi-core"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("gpu[1].resources.koordinator.sh/gpu-memory: 0 bytes of GPU minor 1 "));
  // A node without the library: refused, naming the path and the setting.
  auto without = make("gpu", R"({"device_root": ")" + dir_->file("dev") +
                                 R"(", "hami_core_library": "/nonexistent/libvgpu.so"})");
  d = without->run(pod(half, "HAMi-core"));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "pod ml/train-0 asks for HAMi-core isolation (koordinator.sh/gpu-isolation-provider="
            "HAMi-core), but /nonexistent/libvgpu.so is not on this node (hook gpu: "
            "settings.hami_core_library)");
  d = gpu->run(
      pod(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"half"}}]})",
          "HAMi-core"));
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("gpu[0].resources.koordinator.sh/gpu-memory-ratio: expected a quantity, "
                        "got \"half\""));
}

// The hook reads device nodes from memory (host_paths.h): a node the driver
// creates after crihookd started is found without a restart.
TEST_F(DeviceHooksTest, ADeviceNodeThatAppearsLaterIsFound) {
  TempDir root;
  std::filesystem::create_directories(root.file("dev"));
  std::ofstream(root.file("dev/nvidia0")) << "";
  auto gpu = make("gpu", R"({"device_root": ")" + root.file("dev") + "\"}");
  HookDecision d = gpu->run(allocated(R"({"gpu":[{"minor":1}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0: gpu[0]: no "
            "device node " +
                root.file("dev") + "/nvidia1");
  std::ofstream(root.file("dev/nvidia1")) << "";
  EXPECT_TRUE(eventually([&] {
    return gpu->run(allocated(R"({"gpu":[{"minor":1}]})")).kind == HookDecision::Kind::kContinue;
  }));
  d = gpu->run(allocated(R"({"gpu":[{"minor":1}]})"));
  ASSERT_FALSE(d.adjustment.devices.empty());
  EXPECT_EQ(d.adjustment.devices[0].host_path, root.file("dev") + "/nvidia1");
}

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

// Koordinator's gpu type also carries other vendors' accelerators; their
// device plugins set them up.
TEST_F(DeviceHooksTest, AnotherVendorsGpuIsPassedThroughAndNamedOnTheContainer) {
  auto gpu = make("gpu");
  // An id that is no NVIDIA UUID, on this NVIDIA node: nothing NVIDIA's added.
  HookDecision d = gpu->run(allocated(
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"},"id":"Ascend910-0"}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_TRUE(d.adjustment.devices.empty());
  EXPECT_TRUE(d.adjustment.env.empty());
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/gpu-passthrough"), R"(["Ascend910-0"])");
  // Mixed: the NVIDIA one set up, the other named.
  d = gpu->run(allocated(
      R"({"gpu":[{"minor":0,"resources":null,"id":"npu-\"7\""},{"minor":1,"resources":null,"id":"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}]})"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(hostPaths(d.adjustment),
              ElementsAre("/dev/nvidia1<-/nvidia1", "/dev/nvidiactl<-/nvidiactl",
                          "/dev/nvidia-uvm<-/nvidia-uvm"));
  EXPECT_EQ(d.adjustment.env[0],
            (EnvVar{"NVIDIA_VISIBLE_DEVICES", "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}));
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/gpu-passthrough"), R"(["npu-\"7\""])");

  // Without an id, on a node without NVIDIA GPUs (an AMD GPU and an Intel
  // RDMA NIC): passed through, named by minor.
  HookInput in =
      allocated(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100"}}]})");
  in.topology = std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(fixtureTree("intel-rdma"))));
  d = gpu->run(in);
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_TRUE(d.adjustment.devices.empty());
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/gpu-passthrough"), R"(["minor 0"])");
  // HAMi-core is a CUDA library: nothing of it for another vendor's share.
  std::filesystem::create_directories(dir_->file("hami/vgpulock"));
  std::ofstream(dir_->file("hami/libvgpu.so")) << "";
  auto hami =
      make("gpu", R"({"device_root": ")" + dir_->file("dev") + R"(", "hami_core_library": ")" +
                      dir_->file("hami/libvgpu.so") + R"(", "hami_core_lock_dir": ")" +
                      dir_->file("hami/vgpulock") + R"("})");
  auto record = std::make_shared<hv1::PodRecord>(*in.pod);
  (*record->mutable_config()->mutable_labels())["koordinator.sh/gpu-isolation-provider"] =
      "HAMi-core";
  (*record->mutable_config()->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi","koordinator.sh/gpu-memory-ratio":"50"}}]})";
  in.pod = record;
  d = hami->run(in);
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_TRUE(d.adjustment.env.empty());
  EXPECT_TRUE(d.adjustment.mounts.empty());
  // ... and on this NVIDIA node the same allocation is an NVIDIA GPU.
  d = gpu->run(allocated(R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100"}}]})"));
  EXPECT_EQ(hostPaths(d.adjustment).front(), "/dev/nvidia0<-/nvidia0");
  EXPECT_TRUE(d.adjustment.annotations.empty());
}

TEST_F(DeviceHooksTest, APassedThroughGpuIsLoggedOncePerPodNotPerContainer) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  auto log = logger("hook.gpu-once");
  log->sinks().push_back(sink);
  log->set_level(spdlog::level::info);
  auto gpu = make("gpu", R"({"device_root": ")" + dir_->file("dev") + "\"}", "gpu-once");
  auto pod = [](const std::string& uid) {
    HookInput in = allocated(R"({"gpu":[{"minor":0,"resources":null,"id":"Ascend910-0"}]})");
    auto record = std::make_shared<hv1::PodRecord>(*in.pod);
    record->mutable_config()->mutable_metadata()->set_uid(uid);
    in.pod = record;
    return in;
  };
  for (const char* uid : {"uid-a", "uid-a", "uid-a", "uid-b", "uid-a"})
    EXPECT_EQ(gpu->run(pod(uid)).adjustment.annotations.size(), 1u);
  log->sinks().pop_back();
  const std::string text = lines.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_THAT(text,
              HasSubstr(R"(pod ml/train-0: gpu ["Ascend910-0"] not NVIDIA's: passed through)"));
}

TEST_F(DeviceHooksTest, CpusetHookSetsCpusAndTheirNumaNodes) {
  auto cpuset = make("cpuset", "{}");
  HookDecision d =
      cpuset->run(input({{"scheduling.koordinator.sh/resource-status", R"({"cpuset":"2-5"})"}}));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.cpuset_cpus, "2-5");
  EXPECT_EQ(d.adjustment.cpuset_mems, "0");
  d = cpuset->run(input({{"scheduling.koordinator.sh/resource-status", R"({"cpuset":"14-17"})"}}));
  EXPECT_EQ(d.adjustment.cpuset_mems, "0-1");
  d = cpuset->run(input({{"scheduling.koordinator.sh/resource-status", R"({"cpuset":"60-70"})"}}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/resource-status of pod ml/train-0: cpuset: "
            "CPU 64 is beyond this node's 64 CPUs");
  EXPECT_TRUE(cpuset->run(input({})).adjustment.empty());
}

// Sub-NUMA clustering (the snc fixture: two NUMA nodes per socket, GPU 0 on
// node 1 and mlx5_0 on node 0 of socket 0, GPU 1 on node 2 of socket 1):
// cpuset_mems is the NUMA node of the CPUs, the device's node for CPUs next to
// it, never the socket's number (which is what the other fixtures' nodes
// are); the topology check holds CPUs and devices to a node, not a socket.
TEST_F(DeviceHooksTest, OnASubNumaClusteredNodeMemsAreTheNumaNodeNotTheSocket) {
  auto snc = std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(fixtureTree("snc"))));
  const topology::Gpu* gpu0 = snc->gpuByMinor(0);
  const topology::Gpu* gpu1 = snc->gpuByMinor(1);
  ASSERT_NE(gpu0, nullptr);
  ASSERT_NE(gpu1, nullptr);
  ASSERT_EQ(gpu0->where.numa_node, 1);
  ASSERT_EQ(gpu0->where.socket, 0);
  ASSERT_EQ(topology::formatCpuList(snc->nodes.at(1).cpus), "4-7,20-23");
  auto cpuset = make("cpuset", "{}");
  auto run = [&](const std::shared_ptr<Hook>& hook,
                 std::map<std::string, std::string> annotations) {
    HookInput in = input(std::move(annotations));
    in.topology = snc;
    return hook->run(in);
  };
  auto pinned = [&](const std::string& cpus) {
    return run(cpuset,
               {{"scheduling.koordinator.sh/resource-status", R"({"cpuset":")" + cpus + "\"}"}});
  };
  // Pinned next to GPU 0: its node, 1 (its socket is 0).
  HookDecision d = pinned("4-5,20-21");
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.cpuset_cpus, "4-5,20-21");
  EXPECT_EQ(d.adjustment.cpuset_mems, std::to_string(gpu0->where.numa_node));
  // Next to GPU 1: node 2 (socket 1).
  EXPECT_EQ(pinned("8-9").adjustment.cpuset_mems, std::to_string(gpu1->where.numa_node));
  // Across both nodes of socket 0; the last node of socket 1.
  EXPECT_EQ(pinned("3-4").adjustment.cpuset_mems, "0-1");
  EXPECT_EQ(pinned("12,28").adjustment.cpuset_mems, "3");
  // A NUMA-only pod on node 1: that node's CPUs and memory.
  d = run(cpuset, {{"scheduling.koordinator.sh/resource-status",
                    R"({"numaNodeResources":[{"node":1,"resources":{"cpu":"2"}}]})"}});
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.cpuset_cpus, "4-7,20-23");
  EXPECT_EQ(d.adjustment.cpuset_mems, "1");

  // The topology check: GPU 0 and mlx5_0 share socket 0, not a NUMA node.
  auto check = make("topology-check", "{}");
  auto joint = [&](const std::string& scope, const std::string& alloc, const std::string& cpus) {
    std::map<std::string, std::string> a = {
        {"scheduling.koordinator.sh/device-joint-allocate",
         R"({"deviceTypes":["gpu","rdma"],"requiredScope":")" + scope + "\"}"},
        {"scheduling.koordinator.sh/device-allocated", alloc}};
    if (!cpus.empty())
      a["scheduling.koordinator.sh/resource-status"] = R"({"cpuset":")" + cpus + "\"}";
    return run(check, std::move(a));
  };
  const std::string gpu0_nic0 = R"({"gpu":[{"minor":0}],"rdma":[{"minor":0,"id":"0000:31:00.0"}]})";
  d = joint("SameNUMANode", gpu0_nic0, "");
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
            "asked for SameNUMANode but GPU 0000:18:00.0, RDMA 0000:31:00.0 share socket 0");
  d = joint("SameSocket", gpu0_nic0, "");
  EXPECT_TRUE(d.adjustment.empty()) << d.adjustment.annotations.begin()->second;
  // CPUs on GPU 0's socket but not its node are off the devices' node.
  const std::string gpu0_alone = R"({"gpu":[{"minor":0}]})";
  d = joint("SameNUMANode", gpu0_alone, "0-1");
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
            "CPUs 0-1 are not on the devices' NUMA node 1");
  EXPECT_TRUE(joint("SameNUMANode", gpu0_alone, "4-5").adjustment.empty());
}

// 60,000 nested `[` once crashed crihookd in the message helper's dump().
TEST_F(DeviceHooksTest, CpusetHookRefusesADeeplyNestedResourceStatus) {
  auto cpuset = make("cpuset", "{}");
  const std::string deep =
      R"({"cpuset":)" + std::string(60000, '[') + std::string(60000, ']') + "}";
  HookDecision d = cpuset->run(input({{"scheduling.koordinator.sh/resource-status", deep}}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/resource-status of pod ml/train-0: nested "
            "deeper than 16");
}

// "0-65535," 4,000 times is 32 KB of text for 262 million CPUs; on a node of
// 2 CPUs it is refused from the text, promptly, naming the first CPU beyond.
TEST_F(DeviceHooksTest, CpusetHookChecksTheListAgainstTheNodeBeforeExpandingIt) {
  auto two = std::make_shared<topology::Snapshot>();
  two->cpus.push_back({.id = 0});
  two->cpus.push_back({.id = 1});
  std::string list;
  for (int i = 0; i < 4000; ++i) list += "0-65535,";
  list.pop_back();
  auto cpuset = make("cpuset", "{}");
  HookInput in =
      input({{"scheduling.koordinator.sh/resource-status", R"({"cpuset":")" + list + "\"}"}});
  in.topology = two;
  const auto start = std::chrono::steady_clock::now();
  HookDecision d = cpuset->run(in);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/resource-status of pod ml/train-0: cpuset: "
            "CPU 2 is beyond this node's 2 CPUs");
}

TEST_F(DeviceHooksTest, TopologyCheckHonoursJointAllocationOrSaysWhy) {
  auto check = make("topology-check", "{}");
  const std::string joint = R"({"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"})";
  auto pod = [&](const std::string& alloc, const std::string& cpuset) {
    return input(
        {{"scheduling.koordinator.sh/device-joint-allocate", joint},
         {"scheduling.koordinator.sh/device-allocated", alloc},
         {"scheduling.koordinator.sh/resource-status", R"({"cpuset":")" + cpuset + "\"}"}});
  };
  const std::string same_switch =
      R"({"gpu":[{"minor":0},{"minor":1}],"rdma":[{"minor":0,"id":"0000:1c:00.0"}]})";
  HookDecision d = check->run(pod(same_switch, "0-3"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_TRUE(d.adjustment.empty());

  d = check->run(pod(R"({"gpu":[{"minor":0},{"minor":2}]})", "16-17"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
            "asked for SamePCIe but GPU 0000:1a:00.0, GPU 0000:3a:00.0 share NUMA node 0; "
            "CPUs 16-17 are not on the devices' NUMA node 0");
  // No joint-allocation request: nothing checked.
  EXPECT_TRUE(check->run(allocated(R"({"gpu":[{"minor":0},{"minor":7}]})")).adjustment.empty());

  auto strict = make("topology-check", R"({"on_violation": "reject"})");
  d = strict->run(pod(R"({"gpu":[{"minor":0},{"minor":2}]})", "0-1"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "pod ml/train-0 asked for joint allocation: asked for SamePCIe but GPU "
            "0000:1a:00.0, GPU 0000:3a:00.0 share NUMA node 0");
  EXPECT_EQ(strict->run(pod(same_switch, "0-3")).kind, HookDecision::Kind::kContinue);

  d = strict->run(
      input({{"scheduling.koordinator.sh/device-joint-allocate", R"({"requiredScope":"SameRack"})"},
             {"scheduling.koordinator.sh/device-allocated", same_switch}}));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-joint-allocate of pod ml/train-0: "
            "requiredScope: expected SamePCIe, SameNUMANode or SameSocket, got \"SameRack\"");

  // The annotation is bounded as the allocation is: nesting, and what of it
  // reaches a message.
  d = strict->run(input({{"scheduling.koordinator.sh/device-joint-allocate",
                          R"({"requiredScope":)" + std::string(100000, '[') + "}"},
                         {"scheduling.koordinator.sh/device-allocated", same_switch}}));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-joint-allocate of pod ml/train-0: "
            "nested deeper than 16");
  d = strict->run(input({{"scheduling.koordinator.sh/device-joint-allocate",
                          R"({"requiredScope":")" + std::string(100000, 'x') + "\"}"},
                         {"scheduling.koordinator.sh/device-allocated", same_switch}}));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(d.status.message().size(), 250u);
}

TEST_F(DeviceHooksTest, BadSettingsAreRefused) {
  auto err = [](const std::string& type, const std::string& json) {
    auto h = builtinHooks().create(type, type, json);
    return h.ok() ? std::string("accepted") : std::string(h.status().message());
  };
  EXPECT_EQ(err("gpu", R"({"device_root": "dev"})"),
            "hook gpu: settings.device_root: expected an absolute path, got \"dev\"");
  EXPECT_EQ(err("gpu", R"({"visible_devices": "all"})"),
            "hook gpu: settings.visible_devices: expected \"uuid\" or \"index\", got \"all\"");
  EXPECT_EQ(err("rdma", R"({"nccl_ib_hca": "yes"})"),
            "hook rdma: settings.nccl_ib_hca: expected true or false, got \"yes\"");
  EXPECT_EQ(err("cpuset", R"({"on_error": "retry"})"),
            "hook cpuset: settings.on_error: expected \"reject\" or \"skip\", got \"retry\"");
  EXPECT_EQ(err("cpuset", R"({"device_rot": "/dev"})"),
            "hook cpuset: settings.device_rot: unknown setting");
}

// SamePCIe means what the Device report's pcieID names (pcie_scope, default
// the root complex as koordlet reports it): the check and the scheduler never
// disagree. The workstation's GPUs share a root complex, each on its own root
// port.
TEST_F(DeviceHooksTest, TopologyCheckSamePcieMeansWhatTheDeviceReportSays) {
  auto ws = std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(fixtureTree("workstation"))));
  HookInput in = input(
      {{"scheduling.koordinator.sh/device-joint-allocate", R"({"requiredScope":"SamePCIe"})"},
       {"scheduling.koordinator.sh/device-allocated", R"({"gpu":[{"minor":0},{"minor":1}]})"}});
  in.topology = ws;
  for (const char* setting : {"", "root-complex", "switch"}) {
    SCOPED_TRACE(setting);
    const std::string settings =
        *setting ? std::string(R"({"pcie_scope": ")") + setting + "\"}" : "{}";
    HookDecision d = make("topology-check", settings)->run(in);
    ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
    const auto scope = std::string(setting) == "switch" ? topology::PcieScope::kSwitch
                                                        : topology::PcieScope::kRootComplex;
    const nlohmann::json device = topology::deviceObject(*ws, {"ws", scope});
    const auto& gpus = device["spec"]["devices"];
    const bool reported_same = gpus[0]["topology"]["pcieID"] == gpus[1]["topology"]["pcieID"];
    EXPECT_EQ(d.adjustment.annotations.count("crihook.io/topology-violation") == 0, reported_same);
    if (scope == topology::PcieScope::kSwitch) {
      EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
                "asked for SamePCIe but GPU 0000:01:00.0, GPU 0000:02:00.0 share NUMA node 0");
    } else {
      EXPECT_TRUE(d.adjustment.empty());
    }
  }
  auto h = builtinHooks().create("topology-check", "topology-check", R"({"pcie_scope": "rack"})");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(std::string(h.status().message()),
            "hook topology-check: settings.pcie_scope: expected \"root-complex\" or \"switch\", "
            "got \"rack\"");
}

// A CRI call through the cpuset hook: the pre stage on kubelet's request,
// then (for calls that reach the runtime) the post stage with its answer.
class CpusetCalls {
 public:
  CpusetCalls(std::shared_ptr<Hook> hook, std::shared_ptr<const topology::Snapshot> topology)
      : hook_(std::move(hook)), topology_(std::move(topology)) {}

  // CreateContainer of container `id` (`name`) in sandbox `sandbox` of a pod
  // with `annotations` and `labels`; returns the pre-stage decision.
  // `cpuset_owner`: the hook the merged decision gave cpuset_cpus (as the
  // chain records it; beside koordlet, koordlet's server), when not this one.
  HookDecision create(const std::string& sandbox, const std::string& name, const std::string& id,
                      std::map<std::string, std::string> annotations,
                      std::map<std::string, std::string> labels = {},
                      const std::string& cpuset_owner = "") {
    auto pod = std::make_shared<hv1::PodRecord>();
    pod->set_sandbox_id(sandbox);
    pod->mutable_config()->mutable_metadata()->set_name(sandbox);
    pod->mutable_config()->mutable_metadata()->set_namespace_("ml");
    for (const auto& [k, v] : annotations) (*pod->mutable_config()->mutable_annotations())[k] = v;
    for (const auto& [k, v] : labels) (*pod->mutable_config()->mutable_labels())[k] = v;
    pods_[sandbox] = pod;
    ::runtime::v1::CreateContainerRequest req;
    req.set_pod_sandbox_id(sandbox);
    req.mutable_config()->mutable_metadata()->set_name(name);
    HookInput in = base(LifecycleMethod::kCreateContainer, Phase::kPre, &req, pod);
    HookDecision d = hook_->run(in);
    if (d.kind != HookDecision::Kind::kContinue) return d;
    if (d.adjustment.cpuset_cpus) {
      req.mutable_config()->mutable_linux()->mutable_resources()->set_cpuset_cpus(
          *d.adjustment.cpuset_cpus);
    }
    ::runtime::v1::CreateContainerResponse resp;
    resp.set_container_id(id);
    auto container = std::make_shared<hv1::ContainerRecord>();
    container->set_id(id);
    container->set_sandbox_id(sandbox);
    *container->mutable_requested() = req.config();
    hv1::StageDecision& decision = *container->add_decisions();
    decision.set_stage("PreCreateContainer");
    (*decision.mutable_owners())["cpuset_cpus"] =
        cpuset_owner.empty() ? hook_->name() : cpuset_owner;
    containers_[id] = container;
    HookInput post = base(LifecycleMethod::kCreateContainer, Phase::kPost, &req, pod);
    post.response = id.empty() ? nullptr : &resp;
    if (id.empty()) post.backend_status = absl::UnavailableError("runtime down");
    post.container = container;
    hook_->run(post);
    return d;
  }

  // kubelet's UpdateContainerResources of a stored container.
  HookDecision update(const std::string& id) {
    ::runtime::v1::UpdateContainerResourcesRequest req;
    req.set_container_id(id);
    req.mutable_linux()->set_cpuset_cpus("0-63");
    HookInput in = base(LifecycleMethod::kUpdateContainerResources, Phase::kPre, &req,
                        pods_[containers_[id]->sandbox_id()]);
    in.container = containers_[id];
    HookDecision d = hook_->run(in);
    if (d.adjustment.cpuset_cpus) req.mutable_linux()->set_cpuset_cpus(*d.adjustment.cpuset_cpus);
    ::runtime::v1::UpdateContainerResourcesResponse resp;
    HookInput post = in;
    post.phase = Phase::kPost;
    post.response = &resp;
    hook_->run(post);
    return d;
  }

  void stop(const std::string& id) {
    ::runtime::v1::StopContainerRequest req;
    req.set_container_id(id);
    ::runtime::v1::StopContainerResponse resp;
    HookInput post = base(LifecycleMethod::kStopContainer, Phase::kPost, &req, nullptr);
    post.response = &resp;
    hook_->run(post);
  }

 private:
  HookInput base(LifecycleMethod m, Phase p, const google::protobuf::Message* req,
                 std::shared_ptr<const hv1::PodRecord> pod) {
    HookInput in;
    in.method = m;
    in.phase = p;
    in.request = req;
    in.pod = std::move(pod);
    in.topology = topology_;
    return in;
  }
  std::shared_ptr<Hook> hook_;
  std::shared_ptr<const topology::Snapshot> topology_;
  std::map<std::string, std::shared_ptr<hv1::PodRecord>> pods_;
  std::map<std::string, std::shared_ptr<hv1::ContainerRecord>> containers_;
};

constexpr const char* kResourceStatus = "scheduling.koordinator.sh/resource-status";
// The DGX fixture: node 0 holds CPUs 0-15 and 32-47, node 1 16-31 and 48-63.
constexpr const char* kNode0 = "0-15,32-47";
constexpr const char* kNode1 = "16-31,48-63";

std::map<std::string, std::string> numaOnly(const std::string& nodes_json) {
  return {{kResourceStatus, R"({"numaNodeResources":)" + nodes_json + "}"}};
}

TEST_F(DeviceHooksTest, CpusetHookLiftsTheCfsQuotaOfAPinnedContainer) {
  ASSERT_EQ(topology::formatCpuList(topology_->nodes.at(0).cpus), kNode0);
  ASSERT_EQ(topology::formatCpuList(topology_->nodes.at(1).cpus), kNode1);
  CpusetCalls calls(make("cpuset", "{}"), topology_);
  HookDecision d = calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}},
                                {{"koordinator.sh/qosClass", "LSR"}});
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.cpuset_cpus, "2-5");
  EXPECT_EQ(d.adjustment.cpu_quota, -1);
  // kubelet's update keeps it (kubelet would send its own quota back).
  d = calls.update("c-lsr");
  EXPECT_EQ(d.adjustment.cpuset_cpus, "2-5");
  EXPECT_EQ(d.adjustment.cpu_quota, -1);
  // As koordlet: any pod pinned by resource-status, whatever its QoS label.
  d = calls.create("unlabelled", "main", "c-u", {{kResourceStatus, R"({"cpuset":"6"})"}});
  EXPECT_EQ(d.adjustment.cpu_quota, -1);
  // Not for a NUMA-only pod, nor with the setting off.
  d = calls.create("ls", "main", "c-ls", numaOnly(R"([{"node":1,"resources":{"cpu":"4"}}])"));
  EXPECT_EQ(d.adjustment.cpu_quota, std::nullopt);
  CpusetCalls off(make("cpuset", R"({"unset_cpu_quota": false})"), topology_);
  d = off.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}});
  EXPECT_EQ(d.adjustment.cpuset_cpus, "2-5");
  EXPECT_EQ(d.adjustment.cpu_quota, std::nullopt);
}

TEST_F(DeviceHooksTest, CpusetHookPutsANumaOnlyPodOnItsNodesCpusThatNoPinHolds) {
  CpusetCalls calls(make("cpuset", "{}"), topology_);
  const auto node0 = numaOnly(R"([{"node":0,"resources":{"cpu":"4","memory":"8Gi"}}])");
  HookDecision d = calls.create("ls-a", "main", "c-a", node0);
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.cpuset_cpus, kNode0);
  EXPECT_EQ(d.adjustment.cpuset_mems, "0");

  calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5,34"})"}});
  d = calls.create("ls-b", "main", "c-b", node0);
  EXPECT_EQ(d.adjustment.cpuset_cpus, "0-1,6-15,32-33,35-47");
  // kubelet's update of the first one sees the pin too.
  EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, "0-1,6-15,32-33,35-47");
  // Both nodes; the other node is untouched by the pin.
  d = calls.create("ls-c", "main", "c-c",
                   numaOnly(R"([{"node":0,"resources":{"cpu":"2"}},)"
                            R"({"node":1,"resources":{"cpu":"2"}}])"));
  EXPECT_EQ(d.adjustment.cpuset_cpus, "0-1,6-33,35-63");
  EXPECT_EQ(d.adjustment.cpuset_mems, "0-1");
  // A pin being created (pre stage done, runtime not yet answered) counts:
  // a failed creation gives its CPUs back.
  d = calls.create("lse", "main", "", {{kResourceStatus, R"({"cpuset":"40-47"})"}});
  EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, "0-1,6-15,32-33,35-47");

  calls.stop("c-lsr");
  EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, kNode0);
  EXPECT_EQ(calls.update("c-b").adjustment.cpuset_cpus, kNode0);

  // Every CPU of the node pinned: the pod shares them rather than run nowhere
  // (koordlet leaves it without a cpuset: every CPU of the machine).
  calls.create("lse-all", "main", "c-all", {{kResourceStatus, R"({"cpuset":"0-15,32-47"})"}});
  EXPECT_EQ(calls.create("ls-d", "main", "c-d", node0).adjustment.cpuset_cpus, kNode0);

  // Memory alone is no CPU allocation; BE pods are left to koordlet's BE pools.
  EXPECT_TRUE(
      calls.create("ls-e", "main", "c-e", numaOnly(R"([{"node":0,"resources":{"memory":"1Gi"}}])"))
          .adjustment.empty());
  EXPECT_TRUE(calls.create("be", "main", "c-be", node0, {{"koordinator.sh/qosClass", "BE"}})
                  .adjustment.empty());
  d = calls.create("ls-f", "main", "c-f", numaOnly(R"([{"node":5,"resources":{"cpu":"1"}}])"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/resource-status of pod ml/ls-f: "
            "numaNodeResources[0].node: no NUMA node 5 with CPUs on this node");

  CpusetCalls off(make("cpuset", R"({"share_pool": false})"), topology_);
  EXPECT_TRUE(off.create("ls-a", "main", "c-a", node0).adjustment.empty());
}

// Beside koordlet: a NUMA-only container whose cpuset koordlet's share pool
// won ([hooks.owners] cpuset) is koordlet's to move; the hook never moves it.
TEST_F(DeviceHooksTest, CpusetHookNeverMovesAContainerWhoseCpusetAnotherHookDecided) {
  TempDir dir;
  FakeCriServer runtime(dir.file("runtime.sock"));
  runtime.onUnary("/runtime.v1.RuntimeService/UpdateContainerResources",
                  [](FakeCall&, std::string* out) {
                    *out = "";
                    return grpc::Status::OK;
                  });
  runtime.start();
  BuiltinContext context;
  context.runtime_endpoint = "unix://" + dir.file("runtime.sock");
  auto hook = builtinHooks().create("cpuset", "cpuset", "{}", context);
  ASSERT_TRUE(hook.ok()) << hook.status();
  CpusetCalls calls(*hook, topology_);
  const auto node0 = numaOnly(R"([{"node":0,"resources":{"cpu":"4"}}])");
  // "c-0" sorts first: were it tracked, it would be moved before "c-a".
  calls.create("ls-k", "main", "c-0", node0, {}, "hookserver/koordlet");
  calls.create("ls-a", "main", "c-a", node0);
  calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}});
  auto moved = [&] {
    std::vector<std::string> ids;
    for (const FakeCall& c : runtime.calls()) {
      ::runtime::v1::UpdateContainerResourcesRequest r;
      if (r.ParseFromString(c.request)) ids.push_back(r.container_id());
    }
    return ids;
  };
  ASSERT_TRUE(eventually([&] { return !moved().empty(); }));
  EXPECT_THAT(moved(), ElementsAre("c-a"));
  runtime.stop();
}

TEST(RuntimeCpusetUpdate, GoesOverV1OrV1alpha2AndNamesTheContainer) {
  TempDir dir;
  FakeCriServer runtime(dir.file("runtime.sock"));
  auto ok = [](FakeCall&, std::string* out) {
    *out = "";
    return grpc::Status::OK;
  };
  // An old runtime: v1 is UNIMPLEMENTED, v1alpha2 answers.
  runtime.onUnary("/runtime.v1alpha2.RuntimeService/UpdateContainerResources", ok);
  runtime.start();
  const std::string endpoint = "unix://" + dir.file("runtime.sock");
  ASSERT_TRUE(
      updateRuntimeContainerCpuset(endpoint, "c1", "0,3", "0", std::chrono::seconds(5)).ok());
  ::runtime::v1::UpdateContainerResourcesRequest seen;
  ASSERT_TRUE(seen.ParseFromString(runtime.calls().back().request));
  EXPECT_EQ(runtime.calls().back().method,
            "/runtime.v1alpha2.RuntimeService/UpdateContainerResources");
  EXPECT_EQ(seen.container_id(), "c1");
  EXPECT_EQ(seen.linux().cpuset_cpus(), "0,3");
  EXPECT_EQ(seen.linux().cpuset_mems(), "0");
  EXPECT_EQ(seen.linux().cpu_quota(), 0);  // the runtime keeps what it has
  runtime.onUnary("/runtime.v1.RuntimeService/UpdateContainerResources",
                  [](FakeCall&, std::string*) {
                    return grpc::Status(grpc::StatusCode::NOT_FOUND, "container \"c2\" not found");
                  });
  absl::Status s = updateRuntimeContainerCpuset(endpoint, "c2", "1", "0", std::chrono::seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("UpdateContainerResources of container c2 on " + endpoint));
  runtime.stop();
  EXPECT_EQ(updateRuntimeContainerCpuset(endpoint, "c1", "1", "0", std::chrono::seconds(5)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace crihook::testing
