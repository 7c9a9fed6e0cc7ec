// crihook's hook protocol <-> the framework's types: what comes from outside
// crihookd is checked, and an error names the field.

#include "hooks/wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/quote.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::HasSubstr;

TEST(WireTest, AdjustmentRoundTripsKeepingEnvOrder) {
  Adjustment a;
  a.env = {{"Z", "1"}, {"A", "2"}, {"M", "3"}};
  a.env_remove = {"OLD"};
  a.mounts = {{"/data", "/mnt/data", true, 1}};
  a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rwm"}};
  a.cdi_devices = {"nvidia.com/gpu=0"};
  a.cpuset_cpus = "0-3,8";
  a.cpuset_mems = "0";
  a.cpu_quota = -1;
  a.memory_limit_bytes = 1 << 30;
  a.memory_swap_limit_bytes = int64_t{2} << 30;
  a.oom_score_adj = -998;
  a.hugepage_limits = {{"2MB", 4u << 20}};
  a.unified = {{"memory.high", "max"}};
  a.annotations = {{"k", "v"}};
  a.labels_remove = {"l"};
  a.cgroup_parent = "/kubepods/pod1";
  auto back = fromWire(toWire(a), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->env, a.env);
  EXPECT_EQ(back->mounts, a.mounts);
  EXPECT_EQ(back->devices, a.devices);
  EXPECT_EQ(back->cdi_devices, a.cdi_devices);
  EXPECT_EQ(back->cpuset_cpus, a.cpuset_cpus);
  EXPECT_EQ(back->cpu_quota, a.cpu_quota);
  EXPECT_EQ(back->memory_swap_limit_bytes, a.memory_swap_limit_bytes);
  EXPECT_EQ(back->oom_score_adj, a.oom_score_adj);
  EXPECT_EQ(back->hugepage_limits, a.hugepage_limits);
  EXPECT_EQ(back->cgroup_parent, a.cgroup_parent);
  EXPECT_FALSE(back->cpu_shares.has_value());  // unset stays unset
}

TEST(WireTest, EachKindOfBadFieldIsNamed) {
  struct Case {
    const char* what;
    void (*spoil)(hv1::Adjustment&);
    const char* message;
  };
  const Case cases[] = {
      {"env name with =", [](hv1::Adjustment& w) { w.add_env()->set_key("A=B"); },
       "where: adjustment.env[0].key: a variable name cannot hold '='"},
      {"relative device path",
       [](hv1::Adjustment& w) {
         auto* d = w.add_devices();
         d->set_container_path("dev/x");
         d->set_host_path("/dev/null");
       },
       "adjustment.devices[0].container_path: expected an absolute path, got \"dev/x\""},
      {"bad permissions",
       [](hv1::Adjustment& w) {
         auto* d = w.add_devices();
         d->set_container_path("/dev/x");
         d->set_host_path("/dev/null");
         d->set_permissions("rwx");
       },
       "adjustment.devices[0].permissions: expected device cgroup letters"},
      {"relative mount", [](hv1::Adjustment& w) { w.add_mounts()->set_container_path("/a"); },
       "adjustment.mounts[0].host_path: expected an absolute path"},
      {"cdi name", [](hv1::Adjustment& w) { w.add_cdi_devices("gpu0"); },
       "adjustment.cdi_devices[0]: expected a fully qualified CDI device name"},
      {"cpuset", [](hv1::Adjustment& w) { w.set_cpuset_cpus("3-1"); },
       "adjustment.cpuset_cpus: expected a CPU or node list such as \"0-3,8\", got \"3-1\""},
      {"cpuset text", [](hv1::Adjustment& w) { w.set_cpuset_mems("zero"); },
       "adjustment.cpuset_mems"},
      {"negative shares", [](hv1::Adjustment& w) { w.set_cpu_shares(-5); },
       "adjustment.cpu_shares: expected at least 0, got -5"},
      {"oom score above the kernel's range", [](hv1::Adjustment& w) { w.set_oom_score_adj(1001); },
       "adjustment.oom_score_adj: expected -1000 to 1000, got 1001"},
      {"negative swap", [](hv1::Adjustment& w) { w.set_memory_swap_limit_bytes(-1); },
       "adjustment.memory_swap_limit_bytes: expected at least 0, got -1"},
      {"unified path", [](hv1::Adjustment& w) { (*w.mutable_unified())["../x"] = "1"; },
       "adjustment.unified: expected a cgroup file name"},
  };
  for (const Case& c : cases) {
    hv1::Adjustment w;
    c.spoil(w);
    auto a = fromWire(w, "where");
    ASSERT_FALSE(a.ok()) << c.what;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.message)) << c.what;
  }
}

TEST(WireTest, RepliesBecomeDecisions) {
  hv1::HookResponse reply;
  reply.set_decision(hv1::HookResponse::REJECT);
  reply.set_reject_message("no GPU 7 here");
  HookDecision d = hookDecision(reply, Phase::kPre, "gpu");
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);  // code 0 means this
  EXPECT_EQ(d.status.message(), "no GPU 7 here");

  reply.Clear();
  reply.mutable_adjustment()->set_cpuset_cpus("x");
  d = hookDecision(reply, Phase::kPre, "gpu");
  EXPECT_EQ(d.kind, HookDecision::Kind::kError);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("reply of hook gpu: adjustment.cpuset_cpus"));

  reply.Clear();
  reply.mutable_adjustment()->add_env()->set_key("A");
  d = hookDecision(reply, Phase::kPre, "gpu");
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue);
  EXPECT_EQ(d.adjustment.env.size(), 1u);
  EXPECT_TRUE(hookDecision(reply, Phase::kPost, "gpu").adjustment.empty());
}

// What a hook server or module answers is bounded before it is copied or
// merged, and its words are cut and quoted in messages.
TEST(WireTest, HostileRepliesAreBoundedAndQuoted) {
  hv1::Adjustment w;
  for (int i = 0; i <= 4096; ++i)
    w.add_cdi_devices("vendor.com/gpu=0");  // kMaxAdjustmentEntries + 1
  EXPECT_EQ(std::string(fromWire(w, "reply of hook x").status().message()),
            "reply of hook x: adjustment.cdi_devices: 4097 entries, more than 4096");
  w.Clear();
  w.add_env()->set_key(std::string(1 << 20, '=') + "\n");
  const std::string m(fromWire(w, "reply of hook x").status().message());
  EXPECT_LT(m.size(), 200u);
  EXPECT_EQ(m.find('\n'), std::string::npos);

  hv1::HookResponse reply;
  reply.set_decision(hv1::HookResponse::REJECT);
  reply.set_reject_message(std::string(10 << 20, 'y'));
  HookDecision d = hookDecision(reply, Phase::kPre, "gpu");
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_LE(d.status.message().size(), kMaxStatusMessageBytes);
}

TEST(WireTest, StageNamesParseAndUnknownOnesAreListed) {
  auto s = parseStage("PostStopPodSandbox");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->method, LifecycleMethod::kStopPodSandbox);
  EXPECT_EQ(s->phase, Phase::kPost);
  EXPECT_EQ(allStages().size(), 16u);
  auto bad = parseStage("PreCreate");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("unknown stage \"PreCreate\"; expected one of PreRunPodSandbox"));
}

}  // namespace
}  // namespace crihook::testing
