// nri/translate.h: the CRI requests made from NRI's pod and container, and
// NRI's adjustment made from what the hooks changed in them: each kind of
// change, what NRI 0.6.1 cannot carry, and the device lookup.

#include "nri/translate.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "test/support/fake_cri_server.h"

namespace crihook::nri {
namespace {

namespace v1 = ::runtime::v1;

api::PodSandbox pod() {
  api::PodSandbox p;
  p.set_id("sandbox-1");
  p.set_name("train-0");
  p.set_namespace_("default");
  p.set_uid("uid-1");
  (*p.mutable_annotations())["scheduling.koordinator.sh/device-allocated"] = "{}";
  (*p.mutable_labels())["app"] = "train";
  p.set_runtime_handler("runc");
  p.mutable_linux()->set_cgroup_parent("/kubepods/pod-uid-1");
  return p;
}

api::Container container() {
  api::Container c;
  c.set_id("ctr-1");
  c.set_name("worker");
  c.add_args("/bin/sh");
  c.add_args("-c");
  c.add_args("sleep 1");
  c.add_env("PATH=/usr/bin");
  c.add_env("EMPTY=");
  c.add_env("BARE");
  auto* m = c.add_mounts();
  m->set_destination("/data");
  m->set_type("bind");
  m->set_source("/srv/data");
  m->add_options("rbind");
  m->add_options("ro");
  m->add_options("rslave");
  c.mutable_linux()->mutable_resources()->mutable_cpu()->set_cpus("0-3");
  c.mutable_linux()->mutable_resources()->mutable_memory()->mutable_limit()->set_value(1 << 30);
  (*c.mutable_annotations())["io.kubernetes.container.name"] = "worker";
  return c;
}

absl::StatusOr<DeviceNode> fakeLookup(const std::string& path) {
  if (path == "/dev/nvidia1") return DeviceNode{'c', 195, 1, 0666};
  return absl::NotFoundError("no such device");
}

TEST(NriTranslateTest, TheRequestStandsForWhatTheRuntimePresented) {
  const v1::CreateContainerRequest req = createContainerRequestOf(pod(), container());
  EXPECT_EQ(req.pod_sandbox_id(), "sandbox-1");
  EXPECT_EQ(req.sandbox_config().metadata().name(), "train-0");
  EXPECT_EQ(req.sandbox_config().metadata().namespace_(), "default");
  EXPECT_EQ(req.sandbox_config().metadata().uid(), "uid-1");
  EXPECT_EQ(req.sandbox_config().annotations().at("scheduling.koordinator.sh/device-allocated"),
            "{}");
  EXPECT_EQ(req.sandbox_config().linux().cgroup_parent(), "/kubepods/pod-uid-1");
  const v1::ContainerConfig& c = req.config();
  EXPECT_EQ(c.metadata().name(), "worker");
  ASSERT_EQ(c.command_size(), 3);
  EXPECT_EQ(c.command(2), "sleep 1");
  ASSERT_EQ(c.envs_size(), 3);
  EXPECT_EQ(c.envs(0).key(), "PATH");
  EXPECT_EQ(c.envs(0).value(), "/usr/bin");
  EXPECT_EQ(c.envs(1).key(), "EMPTY");
  EXPECT_EQ(c.envs(2).key(), "BARE");
  ASSERT_EQ(c.mounts_size(), 1);
  EXPECT_EQ(c.mounts(0).container_path(), "/data");
  EXPECT_EQ(c.mounts(0).host_path(), "/srv/data");
  EXPECT_TRUE(c.mounts(0).readonly());
  EXPECT_EQ(c.mounts(0).propagation(), v1::PROPAGATION_HOST_TO_CONTAINER);
  EXPECT_EQ(c.linux().resources().cpuset_cpus(), "0-3");
  EXPECT_EQ(c.linux().resources().memory_limit_in_bytes(), 1 << 30);
  EXPECT_EQ(runPodSandboxRequestOf(pod()).runtime_handler(), "runc");
}

// The pod's overhead and resources, as the runtime presents them, reach the
// hooks' RunPodSandbox request.
TEST(NriTranslateTest, APodsOverheadAndResourcesAreInItsRequest) {
  api::PodSandbox p = pod();
  p.mutable_linux()->mutable_pod_overhead()->mutable_cpu()->mutable_shares()->set_value(25);
  p.mutable_linux()->mutable_pod_resources()->mutable_memory()->mutable_limit()->set_value(1 << 30);
  const v1::RunPodSandboxRequest req = runPodSandboxRequestOf(p);
  EXPECT_EQ(req.config().linux().overhead().cpu_shares(), 25);
  EXPECT_EQ(req.config().linux().resources().memory_limit_in_bytes(), 1 << 30);
}

TEST(NriTranslateTest, NothingChangedIsAnEmptyAdjustment) {
  const v1::CreateContainerRequest req = createContainerRequestOf(pod(), container());
  auto answer = adjustmentOf(req, req, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->adjust.ByteSizeLong(), 0u) << answer->adjust.DebugString();
  EXPECT_TRUE(answer->not_applied.empty());
}

TEST(NriTranslateTest, EnvIsSetInPlaceAppendedInOrderAndRemoved) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  v1::CreateContainerRequest after = before;
  auto* envs = after.mutable_config()->mutable_envs();
  (*envs)[0].set_value("/opt/bin:/usr/bin");  // changed in place
  envs->erase(envs->begin() + 1);             // EMPTY removed
  for (auto [k, v] : {std::pair{"NVIDIA_VISIBLE_DEVICES", "1"}, {"A_LATER", "x"}}) {
    auto* e = after.mutable_config()->add_envs();
    e->set_key(k);
    e->set_value(v);
  }
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  std::vector<std::string> env;
  for (const auto& kv : answer->adjust.env()) env.push_back(kv.key() + "=" + kv.value());
  // PATH changed: removed, then set (NRI refuses a value for a name an
  // earlier plugin set, unless it is removed first).
  EXPECT_EQ(env, (std::vector<std::string>{"-PATH=", "PATH=/opt/bin:/usr/bin",
                                           "NVIDIA_VISIBLE_DEVICES=1", "A_LATER=x", "-EMPTY="}));
}

TEST(NriTranslateTest, AnnotationsAreSetAndRemovedLabelsCannotBe) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  v1::CreateContainerRequest after = before;
  (*after.mutable_config()->mutable_annotations())["crihook.io/gpus"] = "1";
  after.mutable_config()->mutable_annotations()->erase("io.kubernetes.container.name");
  (*after.mutable_config()->mutable_labels())["crihook"] = "yes";
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->adjust.annotations().at("crihook.io/gpus"), "1");
  EXPECT_TRUE(answer->adjust.annotations().count("-io.kubernetes.container.name"));
  ASSERT_EQ(answer->not_applied.size(), 1u);
  EXPECT_EQ(answer->not_applied[0], "labels: NRI cannot change a container's labels");
}

TEST(NriTranslateTest, MountsAreBindMountsAddedReplacedAndRemoved) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  v1::CreateContainerRequest after = before;
  after.mutable_config()->clear_mounts();  // /data removed
  auto* m = after.mutable_config()->add_mounts();
  m->set_container_path("/usr/local/nvidia");
  m->set_host_path("/opt/nvidia");
  m->set_readonly(true);
  m->set_propagation(v1::PROPAGATION_BIDIRECTIONAL);
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.mounts_size(), 2);
  const api::Mount& added = answer->adjust.mounts(0);
  EXPECT_EQ(added.destination(), "/usr/local/nvidia");
  EXPECT_EQ(added.source(), "/opt/nvidia");
  EXPECT_EQ(added.type(), "bind");
  EXPECT_EQ(std::vector<std::string>(added.options().begin(), added.options().end()),
            (std::vector<std::string>{"rbind", "ro", "rshared"}));
  EXPECT_EQ(answer->adjust.mounts(1).destination(), "-/data");
}

// A hook that changes only an existing mount's flags (read-only, then
// propagation) or its source: NRI gets the whole mount again, with the new
// options, each time.
TEST(NriTranslateTest, AMountWhoseFlagsOrSourceChangedIsReplacedWhole) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  ASSERT_TRUE(before.config().mounts(0).readonly());
  auto options = [](const api::Mount& m) {
    return std::vector<std::string>(m.options().begin(), m.options().end());
  };

  v1::CreateContainerRequest after = before;
  after.mutable_config()->mutable_mounts(0)->set_readonly(false);
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.mounts_size(), 1) << "the read-only flag alone changed";
  EXPECT_EQ(answer->adjust.mounts(0).destination(), "/data");
  EXPECT_EQ(options(answer->adjust.mounts(0)), (std::vector<std::string>{"rbind", "rw", "rslave"}));

  after = before;
  after.mutable_config()->mutable_mounts(0)->set_propagation(v1::PROPAGATION_PRIVATE);
  answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.mounts_size(), 1) << "the propagation alone changed";
  EXPECT_EQ(options(answer->adjust.mounts(0)),
            (std::vector<std::string>{"rbind", "ro", "rprivate"}));

  after = before;
  after.mutable_config()->mutable_mounts(0)->set_host_path("/srv/other");
  answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.mounts_size(), 1) << "the source alone changed";
  EXPECT_EQ(answer->adjust.mounts(0).source(), "/srv/other");
}

// A device whose node or permissions changed is given again; one that did
// not is left out.
TEST(NriTranslateTest, ADeviceWhoseNodeOrPermissionsChangedIsGivenAgain) {
  v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  auto* d = before.mutable_config()->add_devices();
  d->set_container_path("/dev/nvidia0");
  d->set_host_path("/dev/nvidia1");
  d->set_permissions("rw");
  auto answer = adjustmentOf(before, before, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->adjust.linux().devices_size(), 0);

  v1::CreateContainerRequest after = before;
  after.mutable_config()->mutable_devices(0)->set_permissions("rwm");
  answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.linux().devices_size(), 1) << "the permissions alone changed";
  EXPECT_EQ(answer->adjust.linux().devices(0).path(), "/dev/nvidia0");
}

TEST(NriTranslateTest, DevicesCarryTheNodesNumbersAndAMissingOneIsAnError) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  v1::CreateContainerRequest after = before;
  auto* d = after.mutable_config()->add_devices();
  d->set_container_path("/dev/nvidia0");
  d->set_host_path("/dev/nvidia1");
  d->set_permissions("rwm");
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->adjust.linux().devices_size(), 1);
  const api::LinuxDevice& dev = answer->adjust.linux().devices(0);
  EXPECT_EQ(dev.path(), "/dev/nvidia0") << "the container's path, the host node's numbers";
  EXPECT_EQ(dev.type(), "c");
  EXPECT_EQ(dev.major(), 195);
  EXPECT_EQ(dev.minor(), 1);
  EXPECT_EQ(dev.file_mode().value(), 0666u);
  EXPECT_TRUE(answer->not_applied.empty());

  d->set_permissions("r");
  answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok());
  ASSERT_EQ(answer->not_applied.size(), 1u);
  EXPECT_NE(answer->not_applied[0].find("NRI 0.6.1 allows rw"), std::string::npos);

  d->set_host_path("/dev/nvidia7");
  answer = adjustmentOf(before, after, fakeLookup);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(answer.status().message().find("\"/dev/nvidia0\""), std::string_view::npos)
      << answer.status();
}

TEST(NriTranslateTest, ResourcesNriSetsAtCreationAndThoseItCannot) {
  const v1::CreateContainerRequest before = createContainerRequestOf(pod(), container());
  v1::CreateContainerRequest after = before;
  auto& r = *after.mutable_config()->mutable_linux()->mutable_resources();
  r.set_cpuset_cpus("4-7");
  r.set_cpuset_mems("1");
  r.set_cpu_shares(2048);
  r.set_cpu_quota(400000);
  r.set_cpu_period(100000);
  r.set_memory_limit_in_bytes(2LL << 30);
  auto* h = r.add_hugepage_limits();
  h->set_page_size("2MB");
  h->set_limit(1 << 30);
  (*r.mutable_unified())["memory.high"] = "max";
  r.set_oom_score_adj(-500);
  r.set_memory_swap_limit_in_bytes(4LL << 30);
  after.mutable_sandbox_config()->mutable_linux()->set_cgroup_parent("/crihook");
  auto answer = adjustmentOf(before, after, fakeLookup);
  ASSERT_TRUE(answer.ok()) << answer.status();
  const api::LinuxResources& res = answer->adjust.linux().resources();
  EXPECT_EQ(res.cpu().cpus(), "4-7");
  EXPECT_EQ(res.cpu().mems(), "1");
  EXPECT_EQ(res.cpu().shares().value(), 2048u);
  EXPECT_EQ(res.cpu().quota().value(), 400000);
  EXPECT_EQ(res.cpu().period().value(), 100000u);
  EXPECT_EQ(res.memory().limit().value(), 2LL << 30);
  ASSERT_EQ(res.hugepage_limits_size(), 1);
  EXPECT_EQ(res.hugepage_limits(0).page_size(), "2MB");
  EXPECT_EQ(res.unified().at("memory.high"), "max");
  EXPECT_EQ(answer->not_applied,
            (std::vector<std::string>{
                "memory swap limit: NRI 0.6.1 sets swap to the memory limit at creation",
                "oom_score_adj: NRI 0.6.1 cannot change it (0.7.0 can)",
                "cgroup parent: NRI 0.6.1 cannot move a pod"}));
}

// CRI's 0 means "not set": it stays unset in NRI's resources (NRI would
// apply a 0), and anything else is carried, 1 included.
TEST(NriTranslateTest, ResourcesOfAnUpdateCarryWhatIsSetAndNoZeros) {
  v1::LinuxContainerResources r;
  api::LinuxResources out = nriResourcesOf(r);
  EXPECT_FALSE(out.cpu().has_shares());
  EXPECT_FALSE(out.cpu().has_quota());
  EXPECT_FALSE(out.cpu().has_period());
  EXPECT_FALSE(out.memory().has_limit());
  EXPECT_FALSE(out.memory().has_swap());
  r.set_cpu_shares(1);
  r.set_cpu_quota(1);
  r.set_cpu_period(1);
  r.set_memory_limit_in_bytes(1);
  r.set_memory_swap_limit_in_bytes(2);
  out = nriResourcesOf(r);
  EXPECT_EQ(out.cpu().shares().value(), 1u);
  EXPECT_EQ(out.cpu().quota().value(), 1);
  EXPECT_EQ(out.cpu().period().value(), 1u);
  EXPECT_EQ(out.memory().limit().value(), 1);
  EXPECT_EQ(out.memory().swap().value(), 2);
}

// An UpdateContainer as nri/front.cc answers it: NRI's resources made CRI's,
// changed by the hooks' pre stage, and made NRI's again for the update sent
// back, which replaces the container's resources. A quota the hooks set
// (the cpuset hook's -1 for a pinned container, a Koordinator server's) or
// NRI asked for is in it; one nobody set (CRI's 0) is not (NRI would apply 0).
TEST(NriTranslateTest, AnUpdateCarriesTheCpuQuotaTheHooksSetAndNoneUnset) {
  api::LinuxResources asked;
  asked.mutable_cpu()->set_cpus("0-7");
  asked.mutable_memory()->mutable_limit()->set_value(1 << 30);
  v1::LinuxContainerResources r = resourcesOf(asked);
  r.set_cpuset_cpus("2-3");  // a hook pins the container, leaving the quota unset
  api::LinuxResources sent = nriResourcesOf(r);
  EXPECT_EQ(sent.cpu().cpus(), "2-3");
  EXPECT_FALSE(sent.cpu().has_quota()) << sent.ShortDebugString();
  r.set_cpu_quota(-1);  // the cpuset hook's: no CFS quota on pinned CPUs
  sent = nriResourcesOf(r);
  ASSERT_TRUE(sent.cpu().has_quota()) << sent.ShortDebugString();
  EXPECT_EQ(sent.cpu().quota().value(), -1);
  r.set_cpu_quota(50000);
  sent = nriResourcesOf(r);
  ASSERT_TRUE(sent.cpu().has_quota()) << sent.ShortDebugString();
  EXPECT_EQ(sent.cpu().quota().value(), 50000);
  EXPECT_EQ(sent.memory().limit().value(), 1 << 30);
  // A quota NRI asked for, which no hook changed, goes back as asked.
  asked.mutable_cpu()->mutable_quota()->set_value(50000);
  sent = nriResourcesOf(resourcesOf(asked));
  ASSERT_TRUE(sent.cpu().has_quota()) << sent.ShortDebugString();
  EXPECT_EQ(sent.cpu().quota().value(), 50000);
}

TEST(NriTranslateTest, StatDeviceTakesDeviceNodesOnly) {
  auto null = statDevice("/dev/null");
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_EQ(null->type, 'c');
  EXPECT_EQ(null->major, 1);
  EXPECT_EQ(null->minor, 3);
  testing::TempDir dir;
  std::ofstream(dir.file("regular")) << "x";
  EXPECT_EQ(statDevice(dir.file("regular")).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_EQ(statDevice(dir.file("fifo")).status().code(), absl::StatusCode::kInvalidArgument)
      << "a FIFO is refused, never opened";
  EXPECT_EQ(statDevice(dir.file("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(statDevice("dev/null").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace crihook::nri
