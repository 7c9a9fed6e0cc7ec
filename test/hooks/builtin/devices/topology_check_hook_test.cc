// The topology-check hook (hooks/builtin/devices/topology_check_hook.h):
// joint-allocation requests held to the devices' shared scope and the
// cpuset's NUMA nodes, annotated or refused, and SamePCIe meaning what the
// Device report's pcieID means.

#include "hooks/builtin/devices/topology_check_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/hooks/builtin/devices/device_hooks_fixture.h"
#include "topology/report.h"

namespace crihook::testing {
namespace {

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

// Sub-NUMA clustering (the snc fixture: two NUMA nodes per socket, GPU 0 on
// node 1 and mlx5_0 on node 0 of socket 0): devices and CPUs are held to a
// NUMA node, never to the socket whose number the other fixtures' nodes
// share. (DeviceHooksTest.OnASubNumaClusteredNodeMemsAreTheNumaNodeNotTheSocket
// checks the same beside the cpuset hook's mems.)
TEST_F(DeviceHooksTest, TopologyCheckHoldsASubNumaClusteredNodeToItsNumaNodes) {
  auto snc = std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(fixtureTree("snc"))));
  auto check = make("topology-check", "{}");
  auto joint = [&](const std::string& scope, const std::string& alloc, const std::string& cpus) {
    HookInput in = input({{"scheduling.koordinator.sh/device-joint-allocate",
                           R"({"deviceTypes":["gpu","rdma"],"requiredScope":")" + scope + "\"}"},
                          {"scheduling.koordinator.sh/device-allocated", alloc}});
    if (!cpus.empty()) {
      auto record = std::make_shared<hv1::PodRecord>(*in.pod);
      (*record->mutable_config()
            ->mutable_annotations())["scheduling.koordinator.sh/resource-status"] =
          R"({"cpuset":")" + cpus + "\"}";
      in.pod = record;
    }
    in.topology = snc;
    return check->run(in);
  };
  const std::string gpu0_nic0 = R"({"gpu":[{"minor":0}],"rdma":[{"minor":0,"id":"0000:31:00.0"}]})";
  HookDecision d = joint("SameNUMANode", gpu0_nic0, "");
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
            "asked for SameNUMANode but GPU 0000:18:00.0, RDMA 0000:31:00.0 share socket 0");
  EXPECT_TRUE(joint("SameSocket", gpu0_nic0, "").adjustment.empty());
  const std::string gpu0_alone = R"({"gpu":[{"minor":0}]})";
  d = joint("SameNUMANode", gpu0_alone, "0-1");
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/topology-violation"),
            "CPUs 0-1 are not on the devices' NUMA node 1");
  EXPECT_TRUE(joint("SameNUMANode", gpu0_alone, "4-5").adjustment.empty());
}

}  // namespace
}  // namespace crihook::testing
