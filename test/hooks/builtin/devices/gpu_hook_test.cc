// The gpu hook (hooks/builtin/devices/gpu_hook.h) on the DGX-shaped
// fixture topology and a fixture device root: the devices and env it adds
// for an allocation, HAMi-core for shared GPUs, other vendors' GPUs passed
// through, how it refuses what is not on this node, and device nodes and
// HAMi-core's paths that appear after the hook was made.

#include "hooks/builtin/devices/gpu_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "test/hooks/builtin/devices/device_hooks_fixture.h"
#include "test/support/eventually.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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
  const std::string text = lines.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_THAT(text,
              HasSubstr(R"(pod ml/train-0: gpu ["Ascend910-0"] not NVIDIA's: passed through)"));
  // It remembers the last 4096 pods: the oldest one, forgotten once 4096
  // came after it, is logged again; the next oldest is not.
  for (int i = 0; i < 4095; ++i) gpu->run(pod("uid-" + std::to_string(i)));
  lines.str("");
  gpu->run(pod("uid-b"));
  gpu->run(pod("uid-a"));
  log->sinks().pop_back();
  const std::string again = lines.str();
  EXPECT_EQ(std::count(again.begin(), again.end(), '\n'), 1) << again;
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

}  // namespace
}  // namespace crihook::testing
