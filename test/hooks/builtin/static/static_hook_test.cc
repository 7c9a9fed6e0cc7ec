// builtin = "static" and builtin = "noop", made through the registry as
// crihookd makes them from its config.

#include "hooks/builtin/static/static_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "hooks/registry.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<Hook>> make(const std::string& type, const std::string& json) {
  return builtinHooks().create(type, "h", json);
}

std::string error(const std::string& type, const std::string& json) {
  auto h = make(type, json);
  return h.ok() ? "no error" : std::string(h.status().message());
}

HookInput podInput(const std::string& ns, const std::string& container) {
  auto pod = std::make_shared<hv1::PodRecord>();
  pod->mutable_config()->mutable_metadata()->set_namespace_(ns);
  (*pod->mutable_config()->mutable_labels())["team"] = "ml";
  auto c = std::make_shared<hv1::ContainerRecord>();
  c->mutable_requested()->mutable_metadata()->set_name(container);
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.pod = pod;
  in.container = c;
  return in;
}

TEST(StaticHookTest, SetsItsAdjustmentOnMatchingContainersOnly) {
  auto h = make("static", R"({
    "namespaces": ["ml"], "pod_labels": {"team": "ml"}, "containers": ["trainer"],
    "adjustment": {"env": [{"key": "B", "value": "1"}, {"key": "A", "value": "2"}],
                   "mounts": [{"container_path": "/data", "host_path": "/srv/data", "readonly": true}],
                   "devices": [{"container_path": "/dev/fuse", "host_path": "/dev/fuse"}]}})");
  ASSERT_TRUE(h.ok()) << h.status();
  Hook& hook = **h;
  EXPECT_TRUE(hook.subscribes(LifecycleMethod::kCreateContainer, Phase::kPre));
  EXPECT_FALSE(hook.subscribes(LifecycleMethod::kStartContainer, Phase::kPre));
  EXPECT_TRUE(hook.runsInline());
  EXPECT_TRUE(hook.appliesTo(podInput("ml", "trainer")));
  EXPECT_FALSE(hook.appliesTo(podInput("default", "trainer")));
  EXPECT_FALSE(hook.appliesTo(podInput("ml", "sidecar")));
  HookInput unknown;  // a pod crihook never saw matches no selector
  EXPECT_FALSE(hook.appliesTo(unknown));
  HookDecision d = hook.run(podInput("ml", "trainer"));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue);
  ASSERT_EQ(d.adjustment.env.size(), 2u);
  EXPECT_EQ(d.adjustment.env[0].name, "B");  // the order written
  EXPECT_EQ(d.adjustment.mounts[0].host_path, "/srv/data");
  EXPECT_EQ(d.adjustment.devices[0].permissions, "rw");
}

// Every selector must match, by key and value: a label or annotation that is
// missing or has another value leaves the pod out.
TEST(StaticHookTest, PodLabelsAndAnnotationsMustMatchByKeyAndValue) {
  auto h = make("static", R"({
    "pod_labels": {"team": "ml"}, "pod_annotations": {"crihook.io/models": "on"},
    "adjustment": {"env": [{"key": "HF_HOME", "value": "/models"}]}})");
  ASSERT_TRUE(h.ok()) << h.status();
  Hook& hook = **h;
  auto pod = [](std::map<std::string, std::string> labels,
                std::map<std::string, std::string> annotations) {
    HookInput in = podInput("ml", "trainer");
    auto p = std::make_shared<hv1::PodRecord>(*in.pod);
    p->mutable_config()->clear_labels();
    for (const auto& [k, v] : labels) (*p->mutable_config()->mutable_labels())[k] = v;
    for (const auto& [k, v] : annotations) (*p->mutable_config()->mutable_annotations())[k] = v;
    in.pod = p;
    return in;
  };
  EXPECT_TRUE(
      hook.appliesTo(pod({{"team", "ml"}, {"tier", "gold"}}, {{"crihook.io/models", "on"}})));
  EXPECT_FALSE(hook.appliesTo(pod({{"team", "web"}}, {{"crihook.io/models", "on"}})));
  EXPECT_FALSE(hook.appliesTo(pod({}, {{"crihook.io/models", "on"}})));
  EXPECT_FALSE(hook.appliesTo(pod({{"team", "ml"}}, {{"crihook.io/models", "off"}})));
  EXPECT_FALSE(hook.appliesTo(pod({{"team", "ml"}}, {})));
}

TEST(StaticHookTest, BadSettingsAreRefusedNamingTheSetting) {
  EXPECT_THAT(error("static", "{}"), HasSubstr("hook h: settings.adjustment: expected a table"));
  EXPECT_THAT(error("static", R"({"adjustment": {}})"),
              HasSubstr("settings.adjustment: sets nothing"));
  EXPECT_THAT(error("static", R"({"adjustment": {"env": 3}})"), HasSubstr("settings.adjustment"));
  EXPECT_THAT(error("static", R"({"adjustment": {"cpuset_cpus": "a-b"}})"),
              HasSubstr("hook h: settings: adjustment.cpuset_cpus"));
  EXPECT_THAT(error("static", R"({"adjustmnet": {}})"),
              HasSubstr("settings.adjustmnet: unknown setting"));
  EXPECT_THAT(error("static",
                    R"({"stages": ["PostStartContainer"], "adjustment": {"labels": {"a": "b"}}})"),
              HasSubstr("settings.stages[0]: this hook cannot act on PostStartContainer"));
  EXPECT_THAT(error("static", R"({"namespaces": "ml", "adjustment": {"labels": {"a": "b"}}})"),
              HasSubstr("settings.namespaces: expected an array of strings"));
  EXPECT_THAT(error("tpu", "{}"),
              HasSubstr("no built-in hook \"tpu\"; built-in hooks are: cdi, cpuset, "
                        "device-lifecycle, gpu, noop, rdma, static, topology-check"));
}

TEST(NoopHookTest, SubscribesToTheGivenStagesAndDecidesNothing) {
  auto h = make("noop", R"({"stages": ["PreStartContainer", "PostStopPodSandbox"]})");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE((*h)->subscribes(LifecycleMethod::kStartContainer, Phase::kPre));
  EXPECT_TRUE((*h)->subscribes(LifecycleMethod::kStopPodSandbox, Phase::kPost));
  EXPECT_FALSE((*h)->subscribes(LifecycleMethod::kCreateContainer, Phase::kPre));
  EXPECT_TRUE((*h)->run(HookInput{}).adjustment.empty());
  auto fallback = make("noop", "{}");
  ASSERT_TRUE(fallback.ok());
  EXPECT_TRUE((*fallback)->subscribes(LifecycleMethod::kCreateContainer, Phase::kPre));
  EXPECT_THAT(error("noop", R"({"stages": ["Sometime"]})"),
              HasSubstr("settings.stages[0]: unknown stage \"Sometime\""));
}

}  // namespace
}  // namespace crihook::testing
