// apply.h: one adjustment applied to the CRI request where each field lands
// (the container's config, the pod's, or the resources of an update).
#include "hooks/apply.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace crihook {
namespace {

using ::testing::ElementsAre;

TEST(Apply, ContainerGetsEnvInOrderMountsDevicesCdiAndResources) {
  runtime::v1::ContainerConfig c;
  auto add_env = [&](const char* k, const char* v) {
    auto* e = c.add_envs();
    e->set_key(k);
    e->set_value(v);
  };
  add_env("PATH", "/bin");
  add_env("NVIDIA_VISIBLE_DEVICES", "void");
  add_env("DROP_ME", "x");
  auto* m = c.add_mounts();
  m->set_container_path("/data");
  m->set_host_path("/old");
  c.add_cdi_devices()->set_name("vendor.com/dev=a");

  Adjustment a;
  a.env = {{"NVIDIA_VISIBLE_DEVICES", "0"}, {"NCCL_DEBUG", "INFO"}};
  a.env_remove = {"DROP_ME"};
  a.mounts = {{"/data", "/srv/data", true, 1}, {"/models", "/srv/models", true, 0}};
  a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rwm"}};
  a.cdi_devices = {"vendor.com/dev=a", "nvidia.com/gpu=0"};
  a.cpuset_cpus = "8-15";
  a.cpuset_mems = "1";
  a.hugepage_limits = {{"2MB", 1 << 30}};
  a.annotations = {{"crihook.io/gpu", "0"}};
  applyToContainer(a, c);

  std::vector<std::string> env;
  for (const auto& kv : c.envs()) env.push_back(kv.key() + "=" + kv.value());
  EXPECT_THAT(env, ElementsAre("PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", "NCCL_DEBUG=INFO"));
  ASSERT_EQ(c.mounts_size(), 2);
  EXPECT_EQ(c.mounts(0).host_path(), "/srv/data");
  EXPECT_TRUE(c.mounts(0).readonly());
  EXPECT_EQ(c.mounts(0).propagation(), runtime::v1::PROPAGATION_HOST_TO_CONTAINER);
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).permissions(), "rwm");
  ASSERT_EQ(c.cdi_devices_size(), 2);
  EXPECT_EQ(c.cdi_devices(1).name(), "nvidia.com/gpu=0");
  EXPECT_EQ(c.linux().resources().cpuset_cpus(), "8-15");
  EXPECT_EQ(c.linux().resources().cpuset_mems(), "1");
  ASSERT_EQ(c.linux().resources().hugepage_limits_size(), 1);
  EXPECT_EQ(c.linux().resources().hugepage_limits(0).limit(), 1u << 30);
  EXPECT_EQ(c.annotations().at("crihook.io/gpu"), "0");
}

TEST(Apply, ResourcesKeepTheHooksCpusetOverKubeletsUpdate) {
  // kubelet's CPU manager sends its own cpuset; the hook's decision is
  // applied on top, so it survives.
  runtime::v1::LinuxContainerResources r;
  r.set_cpuset_cpus("0-63");
  r.set_cpu_shares(1024);
  Adjustment a;
  a.cpuset_cpus = "8-15";
  applyToResources(a, r);
  EXPECT_EQ(r.cpuset_cpus(), "8-15");
  EXPECT_EQ(r.cpu_shares(), 1024) << "fields the hook has no opinion on stay kubelet's";
}

TEST(Apply, SandboxGetsAnnotationsLabelsAndCgroupParent) {
  runtime::v1::PodSandboxConfig c;
  (*c.mutable_labels())["stale"] = "1";
  Adjustment a;
  a.labels = {{"crihook.io/managed", "true"}};
  a.labels_remove = {"stale"};
  a.cgroup_parent = "/kubepods/burstable/pod1";
  applyToSandbox(a, c);
  EXPECT_EQ(c.labels().size(), 1u);
  EXPECT_EQ(c.labels().at("crihook.io/managed"), "true");
  EXPECT_EQ(c.linux().cgroup_parent(), "/kubepods/burstable/pod1");
  EXPECT_TRUE(Adjustment{}.empty());
  EXPECT_FALSE(a.empty());
}

// Mounts and devices alike: a hook's entry takes the place of the one the
// request has at its container path; other entries stay, new ones go last.
TEST(Apply, AHooksMountOrDeviceReplacesTheOneAtItsContainerPath) {
  runtime::v1::ContainerConfig c;
  auto* m = c.add_mounts();
  m->set_container_path("/data");
  m->set_host_path("/old");
  auto* d = c.add_devices();
  d->set_container_path("/dev/nvidia0");
  d->set_host_path("/dev/nvidia9");
  d->set_permissions("r");
  c.add_devices()->set_container_path("/dev/other");
  Adjustment a;
  a.mounts = {{"/data", "/srv/data", false, 2}};
  a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}, {"/dev/nvidia1", "/dev/nvidia1", "rwm"}};
  applyToContainer(a, c);
  ASSERT_EQ(c.mounts_size(), 1);
  EXPECT_EQ(c.mounts(0).host_path(), "/srv/data");
  EXPECT_EQ(c.mounts(0).propagation(), runtime::v1::PROPAGATION_BIDIRECTIONAL);
  ASSERT_EQ(c.devices_size(), 3);
  EXPECT_EQ(c.devices(0).container_path(), "/dev/nvidia0");
  EXPECT_EQ(c.devices(0).host_path(), "/dev/nvidia0");
  EXPECT_EQ(c.devices(0).permissions(), "rw");
  EXPECT_EQ(c.devices(1).container_path(), "/dev/other");
  EXPECT_EQ(c.devices(2).container_path(), "/dev/nvidia1");
  EXPECT_EQ(c.devices(2).permissions(), "rwm");
}

}  // namespace
}  // namespace crihook
