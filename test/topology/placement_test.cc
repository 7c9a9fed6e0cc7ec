// Placement (topology/placement.cc) on make-fixtures.sh's trees: the scope a
// set of devices and CPUs shares, in agreement with the Device report's
// pcieID, and the tightest free set a request gets.

#include "topology/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "base/text.h"
#include "test/topology/topology_fixtures.h"
#include "topology/report.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(Fixtures, SharedScopes) {
  const topo::Snapshot s = load("dgx");
  for (topo::PcieScope pcie : {topo::PcieScope::kRootComplex, topo::PcieScope::kSwitch}) {
    SCOPED_TRACE(std::string(topo::pcieScopeName(pcie)));
    auto scope = [&](topo::DeviceSet set) {
      auto a = topo::sharedScope(s, set, pcie);
      EXPECT_TRUE(a.ok()) << a.status();
      return a.ok() ? a->scope : topo::Scope::kNone;
    };
    // One switch per root complex on this machine: both meanings agree.
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}}),
              topo::Scope::kSamePcie);
    EXPECT_EQ(scope({{"0000:1a:00.0"}, {"0000:1c:00.3"}, {}}), topo::Scope::kSamePcie);  // a VF
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:3a:00.0"}, {}, {}}), topo::Scope::kSameNumaNode);
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:1b:00.0"}, {}, {0, 1, 32, 33}}),
              topo::Scope::kSameNumaNode);
    EXPECT_EQ(scope({{"0000:1a:00.0"}, {}, {16}}), topo::Scope::kNone);
    EXPECT_EQ(scope({{"0000:1a:00.0", "0000:9a:00.0"}, {}, {}}), topo::Scope::kNone);
    // GPU 7 (numa_node -1) is on node 1 with GPU 4 and the CPUs there.
    EXPECT_EQ(scope({{"0000:9a:00.0", "0000:bb:00.0"}, {}, {16, 17}}), topo::Scope::kSameNumaNode);
  }
  const topo::DeviceSet pair{{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {}};
  EXPECT_EQ(topo::sharedScope(s, pair, topo::PcieScope::kSwitch)->why,
            "GPU 0000:1a:00.0, GPU 0000:1b:00.0, RDMA 0000:1c:00.0 share PCIe switch 0000:18:00.0");
  EXPECT_EQ(topo::sharedScope(s, pair, topo::PcieScope::kRootComplex)->why,
            "GPU 0000:1a:00.0, GPU 0000:1b:00.0, RDMA 0000:1c:00.0 share PCIe root complex "
            "pci0000:17");
  auto bad = topo::sharedScope(s, {{"0000:77:00.0"}, {}, {}}, topo::PcieScope::kRootComplex);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no GPU 0000:77:00.0 on this node"));
  // An empty set shares no scope, and says so rather than nothing.
  auto none = topo::sharedScope(s, {}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->scope, topo::Scope::kNone);
  EXPECT_EQ(none->why, "nothing to place");

  // The workstation's GPUs hang off one root complex, each on its own root
  // port: the same PCIe as koordlet means it, not behind one switch.
  const topo::Snapshot ws = load("workstation");
  const topo::DeviceSet two{{"0000:01:00.0", "0000:02:00.0"}, {}, {}};
  auto rc = topo::sharedScope(ws, two, topo::PcieScope::kRootComplex);
  EXPECT_EQ(rc->scope, topo::Scope::kSamePcie);
  EXPECT_EQ(rc->why, "GPU 0000:01:00.0, GPU 0000:02:00.0 share PCIe root complex pci0000:00");
  auto sw = topo::sharedScope(ws, two, topo::PcieScope::kSwitch);
  EXPECT_EQ(sw->scope, topo::Scope::kSameNumaNode);
  EXPECT_EQ(topo::sharedScope(ws, {{"0000:01:00.0"}, {}, {}}, topo::PcieScope::kSwitch)->why,
            "GPU 0000:01:00.0 share PCIe root port 0000:00:01.0");
}

// The Device report and the placement check never disagree: two devices
// have the same pcieID exactly when sharedScope says SamePCIe, in either
// meaning, on every fixture.
TEST_F(Fixtures, ReportAndScopeCheckAgreeOnSamePcie) {
  for (const char* name : {"dgx", "workstation", "intel-rdma", "snc"}) {
    const topo::Snapshot s = load(name);
    for (topo::PcieScope pcie : {topo::PcieScope::kRootComplex, topo::PcieScope::kSwitch}) {
      SCOPED_TRACE(cat(name, " ", topo::pcieScopeName(pcie)));
      const nlohmann::json d = topo::deviceObject(s, {"n", pcie});
      int same = 0, apart = 0;
      for (const auto& a : d["spec"]["devices"]) {
        for (const auto& b : d["spec"]["devices"]) {
          topo::DeviceSet set;
          for (const auto* x : {&a, &b}) {
            auto& list = (*x)["type"] == "gpu" ? set.gpus : set.rdma;
            list.push_back((*x)["topology"]["busID"]);
          }
          auto scope = topo::sharedScope(s, set, pcie);
          ASSERT_TRUE(scope.ok()) << scope.status();
          const bool reported = a["topology"]["pcieID"] == b["topology"]["pcieID"];
          EXPECT_EQ(scope->scope == topo::Scope::kSamePcie, reported)
              << a["topology"].dump() << " " << b["topology"].dump() << ": " << scope->why;
          ++(reported ? same : apart);
        }
      }
      if (std::string(name) == "dgx") {
        EXPECT_GT(apart, 0);
      }
      EXPECT_GT(same, 0);
    }
  }
}

TEST_F(Fixtures, PickTakesTheTightestFreeSet) {
  const topo::Snapshot s = load("dgx");
  const auto sw = topo::PcieScope::kSwitch;
  auto choice = topo::pick(s, {2, true, 16}, {}, sw);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->scope, topo::Scope::kSamePcie);
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:1a:00.0", "0000:1b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:1c:00.0"));
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "0-7,32-39");  // 8 whole cores
  EXPECT_EQ(choice->why,
            "GPUs 0000:1a:00.0, 0000:1b:00.0, RDMA mlx5_0 (0000:1c:00.0) share PCIe switch "
            "0000:18:00.0; CPUs 0-7,32-39 are on NUMA node 0");

  // GPU 0 taken: the next switch with two free GPUs and a NIC.
  choice = topo::pick(s, {2, true, 4}, {{"0000:1a:00.0"}, {}, {0, 1, 2, 3, 32}}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_THAT(choice->devices.gpus, ElementsAre("0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->devices.rdma, ElementsAre("0000:3c:00.0"));
  // CPU 32 is taken, so core 0 (0 and 32) is not whole; cores 1-3 are taken;
  // whole cores 4 and 5 come first.
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "4-5,36-37");

  // Node 0 has 4 CPUs free, fewer than asked: the next node's devices and
  // CPUs, never a taken CPU.
  std::vector<int> node0_taken;
  for (int c : s.nodes[0].cpus)
    if (c != 14 && c != 15 && c != 46 && c != 47) node0_taken.push_back(c);
  choice = topo::pick(s, {2, true, 6}, {{}, {}, node0_taken}, sw);
  ASSERT_TRUE(choice.ok()) << choice.status();
  for (int c : choice->devices.cpus) {
    EXPECT_EQ(std::count(node0_taken.begin(), node0_taken.end(), c), 0) << "CPU " << c << " taken";
  }
  EXPECT_THAT(choice->why, HasSubstr("are on NUMA node 1"));

  // Four GPUs: no switch has them, NUMA node 0 does.
  choice = topo::pick(s, {4, true, 0}, {}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSameNumaNode);
  EXPECT_THAT(choice->devices.gpus,
              ElementsAre("0000:1a:00.0", "0000:1b:00.0", "0000:3a:00.0", "0000:3b:00.0"));
  EXPECT_THAT(choice->why, HasSubstr("share NUMA node 0 (no single PCIe switch has enough free)"));

  // Deterministic: the same question, the same answer.
  EXPECT_EQ(topo::pick(s, {4, true, 0}, {}, sw)->devices.gpus, choice->devices.gpus);

  // Koordinator's meaning: the root complex (one per switch here).
  choice = topo::pick(s, {2, true, 0}, {}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->why,
            "GPUs 0000:1a:00.0, 0000:1b:00.0, RDMA mlx5_0 (0000:1c:00.0) share PCIe root complex "
            "pci0000:17");
  // On the workstation the root complex holds all four GPUs; no switch does.
  const topo::Snapshot ws = load("workstation");
  choice = topo::pick(ws, {4, false, 0}, {}, topo::PcieScope::kRootComplex);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSamePcie);
  choice = topo::pick(ws, {2, false, 0}, {}, sw);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->scope, topo::Scope::kSameNumaNode);
  EXPECT_THAT(choice->why, HasSubstr("(no single PCIe switch has enough free)"));

  auto none = topo::pick(s, {9, false, 0}, {}, sw);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no socket of this node has 9 free GPUs"));
}

// CPUs alone, more than one NUMA node has but fewer than a socket: the
// socket's nodes, never another socket's (sub-NUMA clustering: 8 CPUs a node,
// 2 nodes a socket).
TEST_F(Fixtures, PickOfCpusAloneKeepsThemOnOneSocket) {
  const topo::Snapshot s = load("snc");
  auto choice = topo::pick(s, {0, false, 12}, {}, topo::PcieScope::kSwitch);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->scope, topo::Scope::kSameSocket);
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "0-5,16-21");
  EXPECT_EQ(choice->why, "CPUs 0-5,16-21 are on NUMA nodes 0, 1");

  // Socket 0 mostly taken: all 12 from socket 1's two nodes.
  std::vector<int> taken;
  for (int c = 0; c < 8; ++c) taken.insert(taken.end(), {c, c + 16});
  choice = topo::pick(s, {0, false, 12}, {{}, {}, taken}, topo::PcieScope::kSwitch);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(topo::formatCpuList(choice->devices.cpus), "8-13,24-29");
}

}  // namespace
}  // namespace crihook::testing
