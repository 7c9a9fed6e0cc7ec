// NRI mode's time budget (nri/budget.h): crihookd refuses to start when the
// hooks one NRI event runs could together outlast the runtime's plugin
// timeout, since the runtime then drops crihook and the pod goes on without
// its devices.

#include "nri/budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace crihook::nri {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using M = LifecycleMethod;

// Hooks by stage, as a chain would list its blocking subscribers.
struct Chain {
  std::map<std::pair<M, Phase>, std::vector<TimedHook>> hooks;
  StageHooks fn() const {
    return [this](M m, Phase p) {
      auto it = hooks.find({m, p});
      return it == hooks.end() ? std::vector<TimedHook>{} : it->second;
    };
  }
};

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(NriBudget, EveryStageIsRunByExactlyOneEvent) {
  std::set<std::pair<M, Phase>> seen;
  for (const EventStages& e : eventStages()) {
    for (const Stage& s : e.stages) {
      EXPECT_TRUE(seen.insert({s.method, s.phase}).second)
          << e.event << " repeats a stage another event runs";
    }
  }
  EXPECT_EQ(seen.size(), kLifecycleMethods * 2);
  for (const EventStages& e : eventStages()) {
    for (const Stage& s : e.stages) EXPECT_EQ(eventOf(s.method, s.phase), e.number) << e.event;
  }
}

// Events tied for the longest: the first in the pod's life is named (one
// message whatever the order the chain lists its hooks in).
TEST(NriBudget, OfEventsTiedForTheLongestTheFirstInThePodsLifeIsNamed) {
  Chain c;
  c.hooks[{M::kStopContainer, Phase::kPre}] = {{"drain", 3s}};
  c.hooks[{M::kCreateContainer, Phase::kPre}] = {{"gpu", 3s}};
  c.hooks[{M::kRemovePodSandbox, Phase::kPost}] = {{"reset", 3s}};
  auto s = checkBudget(c.fn(), 2s, 100ms);
  EXPECT_THAT(message(s), HasSubstr("NRI event CreateContainer runs hooks for up to 3s: gpu"));
}

TEST(NriBudget, HooksThatFitUnderThePluginTimeoutPass) {
  Chain c;
  c.hooks[{M::kCreateContainer, Phase::kPre}] = {{"gpu-check", 900ms}, {"koordlet", 1000ms}};
  c.hooks[{M::kRunPodSandbox, Phase::kPre}] = {{"devices", 1900ms}};
  EXPECT_TRUE(checkBudget(c.fn(), 2s, 100ms).ok());
  EXPECT_TRUE(checkBudget(Chain{}.fn(), 2s, 100ms).ok());
}

TEST(NriBudget, AnEventWhoseHooksOverflowIsNamedWithTheValueThatWouldFit) {
  Chain c;
  // RunPodSandbox runs the pre and the post stage before NRI is answered:
  // both count.
  c.hooks[{M::kRunPodSandbox, Phase::kPre}] = {{"devices", 60s}};
  c.hooks[{M::kRunPodSandbox, Phase::kPost}] = {{"devices", 60s}};
  c.hooks[{M::kCreateContainer, Phase::kPre}] = {{"remote", 1500ms}, {"koordlet", 1s}};
  auto s = checkBudget(c.fn(), 2s, 100ms);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // The worst event is named, with each hook, its timeout and stage.
  EXPECT_THAT(message(s), HasSubstr("NRI event RunPodSandbox runs hooks for up to 120s: "
                                    "devices (60s, pre) + devices (60s, post)"));
  EXPECT_THAT(message(s), HasSubstr("nri.plugin_request_timeout = 2s"));
  EXPECT_THAT(message(s), HasSubstr("to at least 120100ms"));
  EXPECT_THAT(message(s), HasSubstr("[plugins.\"io.containerd.nri.v1.nri\"]"));

  // With the device hook fitting, the next offender is CreateContainer.
  c.hooks.erase({M::kRunPodSandbox, Phase::kPost});
  c.hooks[{M::kRunPodSandbox, Phase::kPre}] = {{"devices", 1s}};
  s = checkBudget(c.fn(), 2s, 100ms);
  EXPECT_THAT(message(s), HasSubstr("NRI event CreateContainer runs hooks for up to 2500ms: "
                                    "remote (1500ms, pre) + koordlet (1s, pre)"));
  EXPECT_TRUE(checkBudget(c.fn(), 2600ms, 100ms).ok());
  // The margin is kept: exactly the timeout does not fit.
  EXPECT_FALSE(checkBudget(c.fn(), 2500ms, 100ms).ok());
}

// The runtime's own figure (NRI >= 0.7 sends it at Configure) is named as
// such: the config's key is not what was checked.
TEST(NriBudget, TheRuntimesOwnTimeoutIsNamedAsTheRuntimes) {
  Chain c;
  c.hooks[{M::kRunPodSandbox, Phase::kPre}] = {{"devices", 3s}};
  EXPECT_TRUE(checkBudget(c.fn(), 12s, 100ms).ok());
  auto s = checkBudget(c.fn(), 2s, 100ms, TimeoutSource::kRuntime);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message(s), HasSubstr("the runtime's own, sent at NRI Configure: 2s"));
  EXPECT_THAT(message(s), Not(HasSubstr("nri.plugin_request_timeout = ")));
  EXPECT_THAT(message(s), HasSubstr("to at least 3100ms"));
}

// A post-stage that waits for its own Post* event has its own budget.
TEST(NriBudget, PostStagesOfTheirOwnEventAreCountedApart) {
  Chain c;
  c.hooks[{M::kCreateContainer, Phase::kPre}] = {{"a", 1500ms}};
  c.hooks[{M::kCreateContainer, Phase::kPost}] = {{"a", 1500ms}};
  EXPECT_TRUE(checkBudget(c.fn(), 2s, 100ms).ok());
  c.hooks[{M::kStopContainer, Phase::kPre}] = {{"b", 1500ms}};
  c.hooks[{M::kStopContainer, Phase::kPost}] = {{"b", 1500ms}};
  EXPECT_THAT(message(checkBudget(c.fn(), 2s, 100ms)),
              HasSubstr("NRI event StopContainer runs hooks for up to 3s"));
}

// What the hooks need is subscribed, and what the records need; the rest
// would cost the runtime a round trip per event for nothing.
TEST(NriEvents, RecordsAlwaysNeedTheirEventsHooksAddTheirStagesOnly) {
  auto bit = [](int event) { return int32_t{1} << (event - 1); };
  // RunPodSandbox, RemovePodSandbox, CreateContainer, UpdateContainer,
  // RemoveContainer; Create's and Update's post-stages go with their answer.
  const int32_t records = bit(1) | bit(3) | bit(4) | bit(8) | bit(11);
  EXPECT_EQ(subscribedEvents([](M, Phase) { return false; }), records);
  // A hook that waits for the container to exist: PostCreateContainer.
  EXPECT_EQ(
      subscribedEvents([](M m, Phase p) { return m == M::kCreateContainer && p == Phase::kPost; }),
      records | bit(5));
  // A hook on StartContainer's pre-stage: StartContainer, not its Post*.
  EXPECT_EQ(
      subscribedEvents([](M m, Phase p) { return m == M::kStartContainer && p == Phase::kPre; }),
      records | bit(6));
  // device-lifecycle's clean-up at StopPodSandbox's post-stage.
  EXPECT_EQ(
      subscribedEvents([](M m, Phase p) { return m == M::kStopPodSandbox && p == Phase::kPost; }),
      records | bit(2));
  EXPECT_EQ(subscribedEvents([](M, Phase) { return true; }), 0x7ff);
}

}  // namespace
}  // namespace crihook::nri
