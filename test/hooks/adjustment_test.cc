#include "hooks/adjustment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

namespace crihook {
namespace {

using ::testing::ElementsAre;

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(MergedAdjustment, KeepsChainOrderAndRecordsOwners) {
  MergedAdjustment m;
  Adjustment gpu;
  gpu.env = {{"NVIDIA_VISIBLE_DEVICES", "0,1"}, {"NVIDIA_DRIVER_CAPABILITIES", "all"}};
  gpu.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  gpu.cpuset_cpus = "0-7";
  Adjustment rdma;
  rdma.env = {{"NCCL_IB_HCA", "mlx5_0"}};
  rdma.devices = {{"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0", "rw"}};
  ASSERT_TRUE(m.add("gpu", gpu).ok());
  ASSERT_TRUE(m.add("rdma", rdma).ok());
  std::vector<std::string> names;
  for (const EnvVar& e : m.result().env) names.push_back(e.name);
  EXPECT_THAT(names,
              ElementsAre("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NCCL_IB_HCA"));
  EXPECT_EQ(m.ownerOf("env:NCCL_IB_HCA"), "rdma");
  EXPECT_EQ(m.ownerOf("device:/dev/nvidia0"), "gpu");
  EXPECT_EQ(m.ownerOf("cpuset_cpus"), "gpu");
  EXPECT_EQ(m.ownerOf("cpuset_mems"), "");
}

TEST(MergedAdjustment, DifferentValuesForOneFieldFailNamingBothHooks) {
  MergedAdjustment m;
  Adjustment a, b;
  a.env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
  b.env = {{"NVIDIA_VISIBLE_DEVICES", "1"}};
  ASSERT_TRUE(m.add("gpu", a).ok());
  absl::Status s = m.add("legacy-gpu", b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(message(s),
            "hook gpu and hook legacy-gpu both set env NVIDIA_VISIBLE_DEVICES: \"0\" vs \"1\"");

  Adjustment c, d;
  c.cpuset_cpus = "0-3";
  d.cpuset_cpus = "4-7";
  MergedAdjustment m2;
  ASSERT_TRUE(m2.add("numa", c).ok());
  EXPECT_EQ(message(m2.add("cpu", d)),
            "hook numa and hook cpu both set cpuset_cpus: \"0-3\" vs \"4-7\"");

  Adjustment set, remove;
  set.annotations = {{"k", "v"}};
  remove.annotations_remove = {"k"};
  MergedAdjustment m3;
  ASSERT_TRUE(m3.add("a", set).ok());
  EXPECT_EQ(message(m3.add("b", remove)),
            "hook a and hook b both set annotation k: \"v\" vs <removed>");
}

// Every keyed field conflicts at its key: a mount or a device at one
// container path, a label, a hugepage size, a unified cgroup key. The call is
// refused naming both hooks, the key and both values; the first hook's value
// stands and nothing of the second is kept.
TEST(MergedAdjustment, EachKeyedFieldConflictsAtItsKeyNamingBothHooks) {
  struct Case {
    const char* what;
    Adjustment first, second;
    std::string message;
    std::function<void(const Adjustment&)> first_stands;
  };
  std::vector<Case> cases;
  {
    Case c{"mount", {}, {}, "", nullptr};
    c.first.mounts = {{"/models", "/srv/models", true, 0}};
    c.second.mounts = {{"/models", "/scratch/models", true, 0}};
    c.message =
        "hook a and hook b both set mount /models: \"/srv/models (ro) propagation 0\" vs "
        "\"/scratch/models (ro) propagation 0\"";
    c.first_stands = [](const Adjustment& r) {
      ASSERT_EQ(r.mounts.size(), 1u);
      EXPECT_EQ(r.mounts[0].host_path, "/srv/models");
    };
    cases.push_back(std::move(c));
  }
  {
    // The same source, read-only against read-write: still two decisions.
    Case c{"mount mode", {}, {}, "", nullptr};
    c.first.mounts = {{"/models", "/srv/models", true, 0}};
    c.second.mounts = {{"/models", "/srv/models", false, 0}};
    c.message =
        "hook a and hook b both set mount /models: \"/srv/models (ro) propagation 0\" vs "
        "\"/srv/models (rw) propagation 0\"";
    c.first_stands = [](const Adjustment& r) { EXPECT_TRUE(r.mounts.at(0).readonly); };
    cases.push_back(std::move(c));
  }
  {
    Case c{"device", {}, {}, "", nullptr};
    c.first.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
    c.second.devices = {{"/dev/nvidia0", "/dev/nvidia3", "rw"}};
    c.message =
        "hook a and hook b both set device /dev/nvidia0: \"/dev/nvidia0 rw\" vs \"/dev/nvidia3 "
        "rw\"";
    c.first_stands = [](const Adjustment& r) {
      ASSERT_EQ(r.devices.size(), 1u);
      EXPECT_EQ(r.devices[0].host_path, "/dev/nvidia0");
    };
    cases.push_back(std::move(c));
  }
  {
    Case c{"device permissions", {}, {}, "", nullptr};
    c.first.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
    c.second.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rwm"}};
    c.message =
        "hook a and hook b both set device /dev/nvidia0: \"/dev/nvidia0 rw\" vs \"/dev/nvidia0 "
        "rwm\"";
    c.first_stands = [](const Adjustment& r) { EXPECT_EQ(r.devices.at(0).permissions, "rw"); };
    cases.push_back(std::move(c));
  }
  {
    Case c{"label", {}, {}, "", nullptr};
    c.first.labels = {{"team", "vision"}};
    c.second.labels = {{"team", "speech"}};
    c.message = "hook a and hook b both set label team: \"vision\" vs \"speech\"";
    c.first_stands = [](const Adjustment& r) { EXPECT_EQ(r.labels.at("team"), "vision"); };
    cases.push_back(std::move(c));
  }
  {
    Case c{"label removed", {}, {}, "", nullptr};
    c.first.labels = {{"team", "vision"}};
    c.second.labels_remove = {"team"};
    c.message = "hook a and hook b both set label team: \"vision\" vs <removed>";
    c.first_stands = [](const Adjustment& r) {
      EXPECT_EQ(r.labels.at("team"), "vision");
      EXPECT_TRUE(r.labels_remove.empty());
    };
    cases.push_back(std::move(c));
  }
  {
    Case c{"hugepage", {}, {}, "", nullptr};
    c.first.hugepage_limits = {{"2MB", uint64_t{1} << 30}};
    c.second.hugepage_limits = {{"2MB", uint64_t{2} << 30}};
    c.message = "hook a and hook b both set hugepage 2MB: \"1073741824\" vs \"2147483648\"";
    c.first_stands = [](const Adjustment& r) {
      EXPECT_EQ(r.hugepage_limits.at("2MB"), uint64_t{1} << 30);
    };
    cases.push_back(std::move(c));
  }
  {
    Case c{"unified", {}, {}, "", nullptr};
    c.first.unified = {{"memory.high", "8G"}};
    c.second.unified = {{"memory.high", "max"}};
    c.message = "hook a and hook b both set unified memory.high: \"8G\" vs \"max\"";
    c.first_stands = [](const Adjustment& r) { EXPECT_EQ(r.unified.at("memory.high"), "8G"); };
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    MergedAdjustment m;
    ASSERT_TRUE(m.add("a", c.first).ok());
    absl::Status s = m.add("b", c.second);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(message(s), c.message);
    c.first_stands(m.result());
    for (const auto& [field, owner] : m.owners()) EXPECT_EQ(owner, "a") << field.str();
  }
}

// Other keys of the same kinds are not conflicts: both hooks' values are kept.
TEST(MergedAdjustment, DifferentKeysOfOneKindAreMergedNotConflicts) {
  MergedAdjustment m;
  Adjustment a, b;
  a.mounts = {{"/models", "/srv/models", true, 0}};
  b.mounts = {{"/data", "/srv/data", false, 0}};
  a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  b.devices = {{"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0", "rw"}};
  a.labels = {{"team", "vision"}};
  b.labels = {{"tier", "gold"}};
  a.hugepage_limits = {{"2MB", 1 << 30}};
  b.hugepage_limits = {{"1GB", uint64_t{4} << 30}};
  a.unified = {{"memory.high", "8G"}};
  b.unified = {{"pids.max", "1024"}};
  ASSERT_TRUE(m.add("a", a).ok());
  ASSERT_TRUE(m.add("b", b).ok());
  const Adjustment& r = m.result();
  EXPECT_EQ(r.mounts.size(), 2u);
  EXPECT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.labels.size(), 2u);
  EXPECT_EQ(r.hugepage_limits.size(), 2u);
  EXPECT_EQ(r.unified.size(), 2u);
  EXPECT_EQ(m.ownerOf("mount:/data"), "b");
  EXPECT_EQ(m.ownerOf("device:/dev/nvidia0"), "a");
  EXPECT_EQ(m.ownerOf("label:tier"), "b");
  EXPECT_EQ(m.ownerOf("hugepage:1GB"), "b");
  EXPECT_EQ(m.ownerOf("unified:memory.high"), "a");
}

TEST(MergedAdjustment, ConflictLeavesTheMergeUntouched) {
  MergedAdjustment m;
  Adjustment a, b;
  a.env = {{"A", "1"}};
  b.env = {{"B", "2"}, {"A", "other"}};
  b.mounts = {{"/data", "/srv/data", true, 0}};
  ASSERT_TRUE(m.add("first", a).ok());
  ASSERT_FALSE(m.add("second", b).ok());
  ASSERT_EQ(m.result().env.size(), 1u);
  EXPECT_TRUE(m.result().mounts.empty());
  EXPECT_EQ(m.ownerOf("env:B"), "");
}

// Values a hook set may come from a pod annotation: a conflict message
// shows them quoted, one line, cut.
TEST(MergedAdjustment, ConflictMessageQuotesAndCutsTheValues) {
  MergedAdjustment m;
  Adjustment a, b;
  a.env = {{"A", "1\nforged"}};
  b.env = {{"A", std::string(100000, 'y')}};
  ASSERT_TRUE(m.add("first", a).ok());
  const std::string msg = message(m.add("second", b));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;
  EXPECT_NE(msg.find("\"1\\x0aforged\""), std::string::npos) << msg;
}

TEST(MergedAdjustment, SameDecisionTwiceIsNoConflict) {
  MergedAdjustment m;
  Adjustment a;
  a.env = {{"X", "1"}};
  a.cdi_devices = {"nvidia.com/gpu=0"};
  a.mounts = {{"/data", "/srv/data", true, 0}};
  a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  a.labels = {{"team", "vision"}};
  a.hugepage_limits = {{"2MB", 1 << 30}};
  a.unified = {{"memory.high", "8G"}};
  ASSERT_TRUE(m.add("one", a).ok());
  ASSERT_TRUE(m.add("two", a).ok());
  EXPECT_EQ(m.result().env.size(), 1u);
  EXPECT_EQ(m.result().cdi_devices.size(), 1u);
  EXPECT_EQ(m.result().mounts.size(), 1u);
  EXPECT_EQ(m.result().devices.size(), 1u);
  EXPECT_EQ(m.result().labels.size(), 1u);
  EXPECT_EQ(m.result().hugepage_limits.size(), 1u);
  EXPECT_EQ(m.result().unified.size(), 1u);
  EXPECT_EQ(m.ownerOf("env:X"), "one") << "the first hook keeps ownership";
  for (const auto& [field, owner] : m.owners()) EXPECT_EQ(owner, "one") << field.str();
}

TEST(MergedAdjustment, TheResolverDecidesAConflict) {
  // "gpu" wins over anything; a value that lost with a reason is listed.
  using How = MergedAdjustment::Resolution::How;
  MergedAdjustment m([](const FieldKey&, const std::string& holder, std::string_view,
                        const std::string& claimant, std::string_view) {
    if (claimant == "gpu") return MergedAdjustment::Resolution{How::kClaimantTakes, "gpu wins"};
    if (holder == "gpu") return MergedAdjustment::Resolution{How::kHolderKeeps, ""};
    return MergedAdjustment::Resolution{};
  });
  Adjustment other{}, gpu{};
  other.cpuset_cpus = "0-63";
  gpu.cpuset_cpus = "8-15";
  ASSERT_TRUE(m.add("other", other).ok());
  ASSERT_TRUE(m.add("gpu", gpu).ok());
  EXPECT_EQ(*m.result().cpuset_cpus, "8-15");
  EXPECT_EQ(m.ownerOf("cpuset_cpus"), "gpu");
  Adjustment late;
  late.cpuset_cpus = "0-1";
  ASSERT_TRUE(m.add("late", late).ok()) << "losing to the winner is no error";
  EXPECT_EQ(*m.result().cpuset_cpus, "8-15");
  ASSERT_EQ(m.overrides().size(), 1u) << "a loss without a reason is not listed";
  EXPECT_EQ(m.overrides()[0].loser, "other");
  EXPECT_EQ(m.overrides()[0].lost_value, "0-63");
  EXPECT_EQ(m.overrides()[0].why, "gpu wins");
  // Neither decides: a conflict, and nothing of the adjustment is kept.
  Adjustment a{}, b{};
  a.env = {{"X", "1"}};
  b.env = {{"Y", "2"}, {"X", "2"}};
  ASSERT_TRUE(m.add("a", a).ok());
  EXPECT_EQ(m.add("b", b).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.result().env.size(), 1u);
  EXPECT_EQ(m.overrides().size(), 1u);
}

}  // namespace
}  // namespace crihook
