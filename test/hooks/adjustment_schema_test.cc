// The Adjustment schema: every field has one row, every wire field belongs
// to one, the owners' spelling reads back, and a field added to the schema
// alone (supplemental groups) works end to end: hook -> merge -> apply ->
// wire -> state record -> explain.

#include "hooks/adjustment_schema.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "hooks/apply.h"
#include "hooks/chain.h"
#include "hooks/registry.h"
#include "hooks/wire.h"
#include "tools/crihookctl/explain.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
namespace v1 = ::runtime::v1;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr Field kLastField = Field::kSupplementalGroup;

TEST(AdjustmentSchema, EveryFieldHasOneRowAndEveryWireFieldBelongsToOne) {
  std::set<Field> rows;
  std::multiset<std::string> wire;
  for (const FieldSpec* f : adjustmentSchema()) {
    EXPECT_TRUE(rows.insert(f->field).second) << f->name << " has two rows";
    EXPECT_EQ(&fieldSpec(f->field), f) << f->name;
    for (std::string_view w : f->wireFields()) wire.insert(std::string(w));
    EXPECT_FALSE(f->cri.empty()) << f->name << ": where it lands is not written down";
  }
  EXPECT_EQ(rows.size(), static_cast<size_t>(kLastField) + 1) << "a Field without a row";
  std::multiset<std::string> proto;
  const auto* d = hv1::Adjustment::descriptor();
  for (int i = 0; i < d->field_count(); ++i) proto.insert(d->field(i)->name());
  EXPECT_EQ(wire, proto) << "crihook.hook.v1.Adjustment's fields and the rows' differ";
}

// Every row, set alone: not empty, through the wire and back unchanged, a
// resource exactly when resourcesOnly keeps it.
TEST(AdjustmentSchema, EachFieldAloneRoundTripsAndIsOrIsNotAResource) {
  Adjustment full;
  full.env = {{"A", "1"}};
  full.env_remove = {"B"};
  full.mounts = {{"/data", "/srv/data", true, 1}};
  full.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  full.cdi_devices = {"nvidia.com/gpu=0"};
  full.cpuset_cpus = "0-3";
  full.cpuset_mems = "0";
  full.cpu_shares = 1024;
  full.cpu_quota = 50000;
  full.cpu_period = 100000;
  full.memory_limit_bytes = 1 << 30;
  full.memory_swap_limit_bytes = int64_t{2} << 30;
  full.oom_score_adj = 500;
  full.hugepage_limits = {{"2MB", 1 << 30}};
  full.unified = {{"memory.high", "max"}};
  full.annotations = {{"a", "1"}};
  full.annotations_remove = {"b"};
  full.labels = {{"l", "1"}};
  full.labels_remove = {"m"};
  full.cgroup_parent = "/kubepods/pod1";
  full.supplemental_groups = {44, 109};
  for (const FieldSpec* f : adjustmentSchema()) {
    SCOPED_TRACE(std::string(f->name));
    Adjustment one;
    f->overlay(full, one);
    ASSERT_TRUE(f->present(one));
    EXPECT_FALSE(one.empty());
    for (const FieldSpec* g : adjustmentSchema()) {
      if (g != f) {
        EXPECT_FALSE(g->present(one)) << g->name;
      }
    }
    auto back = fromWire(toWire(one), "test");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(toWire(*back), toWire(one)));
    EXPECT_EQ(!resourcesOnly(one).empty(), f->resource());
  }
}

TEST(AdjustmentSchema, OwnersAreTypedAndKeepTheStateFilesSpelling) {
  EXPECT_EQ((FieldKey{Field::kEnv, "NAME"}.str()), "env:NAME");
  EXPECT_EQ((FieldKey{Field::kMount, "/data"}.str()), "mount:/data");
  EXPECT_EQ((FieldKey{Field::kCpusetCpus, ""}.str()), "cpuset_cpus");
  EXPECT_EQ((FieldKey{Field::kHugepage, "2MB"}.str()), "hugepage:2MB");
  EXPECT_EQ((FieldKey{Field::kSupplementalGroup, "44"}.str()), "supplemental_group:44");
  for (const char* text :
       {"env:NAME", "device:/dev/x", "cdi:nvidia.com/gpu=0", "cpuset_cpus", "annotation:a:b",
        "label:tier", "unified:memory.high", "cgroup_parent"}) {
    auto key = FieldKey::parse(text);
    ASSERT_TRUE(key.has_value()) << text;
    EXPECT_EQ(key->str(), text);
  }
  EXPECT_EQ(FieldKey::parse("annotation:a:b")->key, "a:b");
  EXPECT_FALSE(FieldKey::parse("rlimit:nofile").has_value()) << "no such field";
  EXPECT_FALSE(FieldKey::parse("cpuset_cpus:x").has_value()) << "a scalar has no key";
  EXPECT_FALSE(FieldKey::parse("env").has_value()) << "a keyed field needs a key";
}

// The field added through the schema alone, end to end.
TEST(AdjustmentSchema, SupplementalGroupsFromHooksReachTheContainerTheRecordAndExplain) {
  // Hooks: two static hooks as crihookd makes them from its config.
  HookRegistry builtins = builtinHooks();
  HookChain chain(nullptr);
  auto render =
      builtins.create("static", "render", R"({"adjustment": {"supplemental_groups": [109]}})");
  ASSERT_TRUE(render.ok()) << render.status();
  auto video =
      builtins.create("static", "video", R"({"adjustment": {"supplemental_groups": [44, 109]}})");
  ASSERT_TRUE(video.ok()) << video.status();
  chain.add(*render, {});
  chain.add(*video, {});
  v1::CreateContainerRequest request;
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.request = &request;
  auto pod = std::make_shared<hv1::PodRecord>();
  pod->mutable_config()->mutable_metadata()->set_namespace_("ml");
  pod->mutable_config()->mutable_metadata()->set_name("train-0");
  in.pod = pod;
  auto container = std::make_shared<hv1::ContainerRecord>();
  container->mutable_requested()->mutable_metadata()->set_name("trainer");
  in.container = container;

  // Merge: the same group from two hooks is one entry, owned by the first.
  ChainOutcome out = chain.run(in, std::chrono::steady_clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(out.merged.result().supplemental_groups, ElementsAre(109, 44));
  EXPECT_EQ(out.merged.ownerOf(FieldKey{Field::kSupplementalGroup, "109"}), "render");
  EXPECT_EQ(out.merged.ownerOf(FieldKey{Field::kSupplementalGroup, "44"}), "video");

  // Apply: added to what kubelet sent, each once.
  v1::ContainerConfig config;
  config.mutable_linux()->mutable_security_context()->add_supplemental_groups(44);
  applyToContainer(out.merged.result(), config);
  EXPECT_THAT(config.linux().security_context().supplemental_groups(), ElementsAre(44, 109));

  // Wire: checked like every other field.
  hv1::Adjustment bad;
  bad.add_supplemental_groups(-1);
  EXPECT_EQ(fromWire(bad, "reply of hook x").status().message(),
            "reply of hook x: adjustment.supplemental_groups[0]: expected 0 to 4294967294, got -1");

  // State record and explain.
  hv1::PodState state;
  *state.mutable_pod() = *pod;
  hv1::ContainerRecord& c = *state.add_containers();
  c = *container;
  c.set_id("c0ffee");
  *c.add_decisions() = stageDecision("PreCreateContainer", out.ran, out.merged);
  EXPECT_EQ(c.decisions(0).owners().at("supplemental_group:109"), "render");
  EXPECT_THAT(c.decisions(0).adjustment().supplemental_groups(), ElementsAre(109, 44));
  std::ostringstream text;
  ctl::explainContainer(state, "c0ffee", text);
  EXPECT_THAT(text.str(), ContainsRegex("supplemental group 109 +by render"));
  EXPECT_THAT(text.str(), ContainsRegex("supplemental group 44 +by video"));
}

}  // namespace
}  // namespace crihook::testing
