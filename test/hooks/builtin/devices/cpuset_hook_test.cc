// The cpuset hook (hooks/builtin/devices/cpuset_hook.h): pinned and
// NUMA-only cpusets on the DGX-shaped and sub-NUMA fixture topologies, the
// CFS quota lift, CPUs kept off pins across a pod's calls, refusals, and
// the one runtime call its pools make (hooks/runtime_sandboxes.h
// updateRuntimeContainerCpuset, tested here as its one caller's).

#include "hooks/builtin/devices/cpuset_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "cri-api/runtime_v1.pb.h"
#include "hooks/runtime_sandboxes.h"
#include "test/hooks/builtin/devices/device_hooks_fixture.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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
  void remove(const std::string& id) {
    ::runtime::v1::RemoveContainerRequest req;
    req.set_container_id(id);
    ::runtime::v1::RemoveContainerResponse resp;
    post(LifecycleMethod::kRemoveContainer, req, resp, absl::OkStatus());
  }
  // StopPodSandbox, or RemovePodSandbox when `remove`, of `sandbox`, the
  // runtime answering `status`.
  void endSandbox(const std::string& sandbox, bool remove, absl::Status status = absl::OkStatus()) {
    ::runtime::v1::StopPodSandboxRequest stop;
    stop.set_pod_sandbox_id(sandbox);
    ::runtime::v1::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(sandbox);
    ::runtime::v1::StopPodSandboxResponse resp;  // any message: read as "answered"
    if (remove) return post(LifecycleMethod::kRemovePodSandbox, rm, resp, status);
    post(LifecycleMethod::kStopPodSandbox, stop, resp, status);
  }

 private:
  void post(LifecycleMethod m, const google::protobuf::Message& req,
            const google::protobuf::Message& resp, absl::Status status) {
    HookInput in = base(m, Phase::kPost, &req, nullptr);
    in.backend_status = status;
    in.response = status.ok() ? &resp : nullptr;
    hook_->run(in);
  }
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

// A pinned pod's CPUs come back to the NUMA-only pods when its sandbox is
// stopped or removed (its containers may have exited without a
// StopContainer), or its container removed; not when the runtime failed the
// call for another reason than that it has no such sandbox.
TEST_F(DeviceHooksTest, CpusetHookGivesAPinBackWhenItsSandboxOrContainerEnds) {
  CpusetCalls calls(make("cpuset", "{}"), topology_);
  const auto node0 = numaOnly(R"([{"node":0,"resources":{"cpu":"4"}}])");
  calls.create("ls-a", "main", "c-a", node0);
  const std::string without_pin = "0-1,6-15,32-47";
  for (bool remove : {false, true}) {
    SCOPED_TRACE(remove ? "RemovePodSandbox" : "StopPodSandbox");
    calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}});
    ASSERT_EQ(calls.update("c-a").adjustment.cpuset_cpus, without_pin);
    calls.endSandbox("lsr", remove, absl::UnavailableError("runtime restarting"));
    EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, without_pin)
        << "the runtime may still run it";
    calls.endSandbox("other", remove);
    EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, without_pin);
    calls.endSandbox("lsr", remove);
    EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, kNode0);
  }
  for (bool remove : {false, true}) {
    calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}});
    calls.endSandbox("lsr", remove, absl::NotFoundError("no such sandbox"));
    EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, kNode0) << "gone already: given back";
  }

  calls.create("lsr", "main", "c-lsr", {{kResourceStatus, R"({"cpuset":"2-5"})"}});
  calls.remove("c-lsr");
  EXPECT_EQ(calls.update("c-a").adjustment.cpuset_cpus, kNode0) << "RemoveContainer";
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
