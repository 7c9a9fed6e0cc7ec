#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hooks/state_store.h"
#include "hooks/wire.h"
#include "test/support/fake_cri_server.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

TEST(CrihookctlExplain, ShowsWhatKubeletSentEachHooksChangeAndWhatTheRuntimeGot) {
  TempDir dir;
  {
    StateStore state(dir.path(), nullptr);
    ASSERT_TRUE(state.load().ok());
    hook::v1::ContainerRecord c = trainerOfTrain0(state);
    auto* env = c.mutable_requested()->add_envs();
    env->set_key("PATH");
    env->set_value("/bin");
    c.mutable_requested()->mutable_linux()->mutable_resources()->set_cpuset_cpus("0-63");
    *c.mutable_sent() = c.requested();
    auto* gpu = c.mutable_sent()->add_envs();
    gpu->set_key("NVIDIA_VISIBLE_DEVICES");
    gpu->set_value("GPU-1");
    c.mutable_sent()->mutable_linux()->mutable_resources()->set_cpuset_cpus("8-15");
    Adjustment a;
    a.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-1"}};
    a.cpuset_cpus = "8-15";
    MergedAdjustment merged;
    ASSERT_TRUE(merged.add("gpu", {.env = a.env}).ok());
    ASSERT_TRUE(merged.add("numa", {.cpuset_cpus = a.cpuset_cpus}).ok());
    *c.add_decisions() = stageDecision("PreCreateContainer", {"gpu", "numa"}, merged);
    c.mutable_resources()->set_cpuset_cpus("8-15");
    state.putContainer(c);
  }
  std::ostringstream out, err;
  ASSERT_EQ(ctl::run({"explain", "--state-dir", dir.path(), "c0ffee"}, out, err), 0) << err.str();
  const std::string text = out.str();
  EXPECT_THAT(text,
              HasSubstr("container c0ffee1234 (trainer)\npod       ml/train-0 (sandbox sb-1)"));
  EXPECT_THAT(text, HasSubstr("kubelet sent:\n  env:         PATH=/bin\n"));
  EXPECT_THAT(text, HasSubstr("PreCreateContainer at "));
  EXPECT_THAT(text, HasSubstr("hooks run: gpu, numa"));
  EXPECT_THAT(text, ::testing::ContainsRegex("set env NVIDIA_VISIBLE_DEVICES=GPU-1 +by gpu"));
  EXPECT_THAT(text, ::testing::ContainsRegex("cpuset_cpus 8-15 +by numa"));
  EXPECT_THAT(
      text,
      HasSubstr("sent to the runtime:\n  env:         PATH=/bin, NVIDIA_VISIBLE_DEVICES=GPU-1"));
  EXPECT_THAT(text, HasSubstr("kept through UpdateContainerResources: cpuset_cpus=8-15"));

  std::ostringstream json;
  ASSERT_EQ(ctl::run({"-o", "json", "explain", "--state-dir", dir.path(), "c0ffee1234"}, json, err),
            0);
  EXPECT_THAT(json.str(), HasSubstr("\"owners\""));

  std::ostringstream none, why;
  EXPECT_EQ(ctl::run({"explain", "--state-dir", dir.path(), "beef"}, none, why), 1);
  EXPECT_THAT(why.str(), HasSubstr("no container beef in " + dir.path()));
}

}  // namespace
}  // namespace crihook::testing
