#include "hooks/chain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/logging.h"
#include "base/quote.h"
#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "metrics/hook_metrics.h"
#include "test/hooks/two_gpus.h"
#include "test/support/eventually.h"
#include "topology/topology.h"

namespace crihook {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// A hook whose behaviour the test sets; records the order of calls.
class TestHook : public Hook {
 public:
  TestHook(std::string name, std::function<HookDecision(const HookInput&)> fn, bool inline_ = false,
           std::vector<std::string>* order = nullptr, std::mutex* mu = nullptr)
      : name_(std::move(name)), fn_(std::move(fn)), inline_(inline_), order_(order), mu_(mu) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase) const override {
    return m == LifecycleMethod::kCreateContainer;
  }
  HookDecision run(const HookInput& in) override {
    if (order_) {
      std::lock_guard lock(*mu_);
      order_->push_back(name_);
    }
    return fn_(in);
  }
  bool runsInline() const override { return inline_; }

 private:
  std::string name_;
  std::function<HookDecision(const HookInput&)> fn_;
  bool inline_;
  std::vector<std::string>* order_;
  std::mutex* mu_;
};

class ChainTest : public ::testing::Test {
 protected:
  HookInput input(Phase phase = Phase::kPre,
                  LifecycleMethod m = LifecycleMethod::kCreateContainer) {
    HookInput in;
    in.method = m;
    in.phase = phase;
    in.request = &request_;
    in.identity = &identity_;
    return in;
  }
  std::shared_ptr<TestHook> hook(const std::string& name,
                                 std::function<HookDecision(const HookInput&)> fn,
                                 bool inline_ = true) {
    return std::make_shared<TestHook>(name, std::move(fn), inline_, &order_, &mu_);
  }
  static HookDecision setEnv(const char* k, const char* v) {
    Adjustment a;
    a.env = {{k, v}};
    return HookDecision::proceed(a);
  }

  runtime::v1::CreateContainerRequest request_;
  CallIdentity identity_;
  std::vector<std::string> order_;
  std::mutex mu_;
  HookChain chain_{logger("hook")};
};

TEST_F(ChainTest, EverySubscriberRunsInTheConfiguredOrder) {
  chain_.add(hook("b", [](auto&) { return setEnv("B", "1"); }), {});
  chain_.add(hook(
                 "a", [](auto&) { return setEnv("A", "1"); }, false),
             {});
  chain_.add(hook("c", [](auto&) { return setEnv("C", "1"); }), {});
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(order_, ElementsAre("b", "a", "c"));
  EXPECT_EQ(out.merged.result().env.size(), 3u);
  EXPECT_EQ(out.merged.ownerOf("env:A"), "a");
  // Not subscribed: nothing runs.
  order_.clear();
  EXPECT_TRUE(
      chain_.run(input(Phase::kPre, LifecycleMethod::kStopContainer), Clock::time_point::max())
          .ran.empty());
  EXPECT_TRUE(order_.empty());
}

// Each stage's numbers go to that stage's series: the pre and post stage of
// every lifecycle method, the first method's post stage included.
TEST_F(ChainTest, EachStageIsCountedInItsOwnSeries) {
  class EveryStage : public Hook {
   public:
    const std::string& name() const override { return name_; }
    bool subscribes(LifecycleMethod, Phase) const override { return true; }
    HookDecision run(const HookInput&) override { return HookDecision::proceed(); }
    bool runsInline() const override { return true; }

   private:
    std::string name_ = "every";
  };
  metrics::Registry registry;
  metrics::HookMetrics hook_metrics(registry);
  HookChain chain(logger("hook"), &hook_metrics);
  chain.add(std::make_shared<EveryStage>(), {});
  for (size_t m = 0; m < kLifecycleMethods; ++m) {
    const auto method = static_cast<LifecycleMethod>(m);
    for (int runs = 0; runs <= static_cast<int>(m); ++runs)  // method m: m + 1 runs
      ASSERT_TRUE(chain.run(input(Phase::kPre, method), Clock::time_point::max()).status.ok());
    ASSERT_TRUE(chain.run(input(Phase::kPost, method), Clock::time_point::max()).status.ok());
  }
  for (size_t m = 0; m < kLifecycleMethods; ++m) {
    const auto method = static_cast<LifecycleMethod>(m);
    EXPECT_EQ(hook_metrics.of("every", stageName(method, Phase::kPre)).calls.value(), m + 1)
        << stageName(method, Phase::kPre);
    EXPECT_EQ(hook_metrics.of("every", stageName(method, Phase::kPost)).calls.value(), 1u)
        << stageName(method, Phase::kPost);
  }
}

TEST_F(ChainTest, RejectionStopsTheChainAndNamesTheHook) {
  chain_.add(
      hook("gpu",
           [](auto&) {
             return HookDecision::reject(absl::InvalidArgumentError("minor 9 not on this node"));
           }),
      {.failure_policy = FailurePolicy::kIgnore});
  chain_.add(hook("after", [](auto&) { return HookDecision::proceed(); }), {});
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument)
      << "a rejection is a decision, never ignored";
  EXPECT_EQ(std::string(out.status.message()),
            "hook gpu rejected PreCreateContainer: minor 9 not on this node");
  EXPECT_THAT(order_, ElementsAre("gpu"));
}

TEST_F(ChainTest, FailurePolicyFailStopsIgnoreContinuesAndCounts) {
  chain_.add(hook("flaky", [](auto&) -> HookDecision { throw std::runtime_error("boom"); }),
             {.failure_policy = FailurePolicy::kIgnore});
  chain_.add(hook("broken",
                  [](auto&) { return HookDecision::error(absl::UnavailableError("device busy")); }),
             {.failure_policy = FailurePolicy::kFail});
  chain_.add(hook("never", [](auto&) { return HookDecision::proceed(); }), {});
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(out.status.message()),
            "hook broken failed in PreCreateContainer: device busy");
  ASSERT_EQ(out.ignored.size(), 1u);
  EXPECT_THAT(out.ignored[0], HasSubstr("hook flaky failed in PreCreateContainer: threw: boom"));
  EXPECT_EQ(chain_.counters("flaky").failures.load(), 1u);
  EXPECT_EQ(chain_.counters("broken").failures.load(), 1u);
  EXPECT_EQ(chain_.counters("never").calls.load(), 0u);
}

// What a hook answers is its own text (a module's, a hook server's): a
// failure or rejection message of 1 MiB with newlines reaches neither the
// log nor the caller whole.
TEST_F(ChainTest, AHooksOwnMessageIsCutToOneBoundedLine) {
  const std::string huge = std::string(1 << 20, 'x') + "\nforged log line";
  chain_.add(hook("chatty", [&](auto&) { return HookDecision::error(absl::InternalError(huge)); }),
             {.failure_policy = FailurePolicy::kIgnore});
  chain_.add(hook("rejecting",
                  [&](auto&) { return HookDecision::reject(absl::InvalidArgumentError(huge)); }),
             {});
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  ASSERT_EQ(out.ignored.size(), 1u);
  EXPECT_LE(out.ignored[0].size(), kMaxStatusMessageBytes);
  EXPECT_THAT(out.ignored[0], HasSubstr("hook chatty failed in PreCreateContainer: xxx"));
  EXPECT_EQ(out.ignored[0].find('\n'), std::string::npos);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LE(out.status.message().size(), kMaxStatusMessageBytes);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook rejecting rejected PreCreateContainer: xxx"));
}

TEST_F(ChainTest, HangingHookIsCutOffAtItsTimeout) {
  chain_.add(hook(
                 "slow",
                 [](auto&) {
                   std::this_thread::sleep_for(1s);
                   return HookDecision::proceed();
                 },
                 false),
             {.timeout = 50ms, .failure_policy = FailurePolicy::kFail});
  const auto t0 = Clock::now();
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  EXPECT_LT(Clock::now() - t0, 500ms);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(std::string(out.status.message()),
            "hook slow failed in PreCreateContainer: timed out after 50ms");
  EXPECT_EQ(chain_.counters("slow").timeouts.load(), 1u);
}

TEST_F(ChainTest, TimeoutNeverRunsPastTheCallersDeadline) {
  chain_.add(hook(
                 "slow",
                 [](auto&) {
                   std::this_thread::sleep_for(1s);
                   return HookDecision::proceed();
                 },
                 false),
             {.timeout = 2000ms, .failure_policy = FailurePolicy::kIgnore});
  chain_.add(hook("next", [](auto&) { return HookDecision::proceed(); }), {});
  const auto t0 = Clock::now();
  ChainOutcome out = chain_.run(input(), t0 + 100ms);
  EXPECT_LT(Clock::now() - t0, 600ms);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("deadline passed before hook next"));
}

TEST_F(ChainTest, ConflictFailsNamingBothHooksUnlessOneIsConfiguredToWin) {
  chain_.add(hook("gpu", [](auto&) { return setEnv("CUDA_VISIBLE_DEVICES", "0"); }), {});
  chain_.add(hook("legacy", [](auto&) { return setEnv("CUDA_VISIBLE_DEVICES", "1"); }), {});
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(out.status.message()),
            "PreCreateContainer: hook gpu and hook legacy both set env CUDA_VISIBLE_DEVICES: \"0\" "
            "vs \"1\"");

  HookChain ordered(logger("hook"));
  ordered.add(hook("gpu", [](auto&) { return setEnv("CUDA_VISIBLE_DEVICES", "0"); }),
              {.wins_over = {"legacy"}});
  ordered.add(hook("legacy", [](auto&) { return setEnv("CUDA_VISIBLE_DEVICES", "1"); }), {});
  out = ordered.run(input(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.merged.result().env[0].value, "0");
}

using testing::kUuids;
using testing::twoGpus;

// crihook's device hooks beside koordlet (issue 31): koordlet's answer as
// its GPU and cpuset hooks give it, crihook's as its built-ins do.
class BesideKoordletTest : public ChainTest {
 protected:
  BesideKoordletTest() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_);
    sink->set_pattern("%v");
    log_ = std::make_shared<spdlog::logger>("beside-koordlet", sink);
    log_->set_level(spdlog::level::info);
    beside_ = std::make_unique<HookChain>(log_);
    identity_.pod_namespace = "ml";
    identity_.pod_name = "train-0";
    identity_.container_name = "main";
  }
  HookInput onNode() {
    HookInput in = input();
    in.topology = twoGpus();
    return in;
  }
  static HookDecision decide(Adjustment a) { return HookDecision::proceed(std::move(a)); }

  std::ostringstream lines_;  // before log_: its sink writes here
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<HookChain> beside_;
};

TEST_F(BesideKoordletTest, TheSameGpusByMinorAreNoConflictAndKeepCrihooksUuids) {
  beside_->add(hook("gpu", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", kUuids); }), {});
  beside_->add(
      hook("hookserver/koordlet", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", "2,3"); }),
      {.koordinator = true});
  ChainOutcome out = beside_->run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(out.merged.result().env, ElementsAre(EnvVar{"NVIDIA_VISIBLE_DEVICES", kUuids}));
  EXPECT_EQ(out.merged.ownerOf("env:NVIDIA_VISIBLE_DEVICES"), "gpu");
  EXPECT_TRUE(out.merged.overrides().empty());
  EXPECT_EQ(lines_.str(), "");

  // Whatever the order, the owner's spelling: crihook's, for device env.
  HookChain reversed(log_);
  reversed.add(
      hook("hookserver/koordlet", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", "2,3"); }),
      {.koordinator = true});
  reversed.add(hook("gpu", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", kUuids); }), {});
  out = reversed.run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.merged.result().env[0].value, kUuids);
  EXPECT_EQ(out.merged.ownerOf("env:NVIDIA_VISIBLE_DEVICES"), "gpu");

  // Other GPUs than crihook's: crihook decides, and the loser is logged.
  HookChain other(log_);
  other.add(hook("gpu", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", kUuids); }), {});
  other.add(
      hook("hookserver/koordlet", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", "2"); }),
      {.koordinator = true});
  out = other.run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.merged.result().env[0].value, kUuids);
  EXPECT_EQ(lines_.str(),
            "PreCreateContainer of pod \"ml/train-0\" container \"main\": hook "
            "hookserver/koordlet's env \"NVIDIA_VISIBLE_DEVICES\" \"2\" overridden by hook gpu "
            "([hooks.owners] device_env = \"crihook\")\n");
}

TEST_F(BesideKoordletTest, ACpusetThatDiffersIsKoordletsOneSpeltOtherwiseIsNoConflict) {
  Adjustment numa;  // crihook's cpuset hook: the node's CPUs minus the pins
  numa.cpuset_cpus = "0-15";
  numa.cpuset_mems = "0";
  Adjustment pool;  // koordlet: the NUMA node's share pool
  pool.cpuset_cpus = "4-15";
  pool.cpu_shares = 2048;
  beside_->add(hook("cpuset", [&](auto&) { return decide(numa); }), {});
  beside_->add(hook("hookserver/koordlet", [&](auto&) { return decide(pool); }),
               {.koordinator = true});
  ChainOutcome out = beside_->run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.merged.result().cpuset_cpus, "4-15");
  EXPECT_EQ(out.merged.result().cpuset_mems, "0");  // koordlet has no opinion on mems
  EXPECT_EQ(out.merged.ownerOf("cpuset_cpus"), "hookserver/koordlet");
  EXPECT_EQ(out.merged.ownerOf("cpuset_mems"), "cpuset");
  ASSERT_EQ(out.merged.overrides().size(), 1u);
  EXPECT_EQ(out.merged.overrides()[0].loser, "cpuset");
  EXPECT_EQ(out.merged.overrides()[0].lost_value, "0-15");
  EXPECT_THAT(lines_.str(), HasSubstr("hook cpuset's cpuset_cpus \"0-15\" overridden by hook "
                                      "hookserver/koordlet ([hooks.owners] cpuset = "
                                      "\"koordinator\")"));

  // The same CPUs in another spelling: one decision, nothing logged.
  lines_.str("");
  pool.cpuset_cpus = "8-15,0-7";
  out = beside_->run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_TRUE(out.merged.overrides().empty());
  EXPECT_EQ(lines_.str(), "");

  // Configured otherwise: crihook keeps it, or the difference is refused.
  pool.cpuset_cpus = "4-15";
  HookChain mine(log_);
  mine.setOwners(
      {OwnerSide::kCrihook, OwnerSide::kCrihook, OwnerSide::kKoordinator, OwnerSide::kRefuse});
  mine.add(hook("cpuset", [&](auto&) { return decide(numa); }), {});
  mine.add(hook("hookserver/koordlet", [&](auto&) { return decide(pool); }), {.koordinator = true});
  out = mine.run(onNode(), Clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.merged.result().cpuset_cpus, "0-15");
  HookChain refusing(log_);
  refusing.setOwners(
      {OwnerSide::kCrihook, OwnerSide::kRefuse, OwnerSide::kKoordinator, OwnerSide::kRefuse});
  refusing.add(hook("cpuset", [&](auto&) { return decide(numa); }), {});
  refusing.add(hook("hookserver/koordlet", [&](auto&) { return decide(pool); }),
               {.koordinator = true});
  out = refusing.run(onNode(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(out.status.message()),
            "PreCreateContainer: hook cpuset and hook hookserver/koordlet both set cpuset_cpus: "
            "\"0-15\" vs \"4-15\"");
}

TEST_F(BesideKoordletTest, TwoCrihookHooksOrAFieldNobodyOwnsAreStillRefused) {
  beside_->add(hook("gpu", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", kUuids); }), {});
  beside_->add(hook("site", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", "2"); }), {});
  ChainOutcome out = beside_->run(onNode(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook gpu and hook site both set env NVIDIA_VISIBLE_DEVICES"));
  // ... but the same GPUs spelt otherwise are one decision between them too.
  HookChain same(log_);
  same.add(hook("gpu", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", kUuids); }), {});
  same.add(hook("site", [](auto&) { return setEnv("NVIDIA_VISIBLE_DEVICES", "3,2"); }), {});
  EXPECT_TRUE(same.run(onNode(), Clock::time_point::max()).status.ok());

  HookChain other(log_);
  other.add(hook("static", [](auto&) { return setEnv("HF_HOME", "/models"); }), {});
  other.add(hook("hookserver/koordlet", [](auto&) { return setEnv("HF_HOME", "/data"); }),
            {.koordinator = true});
  out = other.run(onNode(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook static and hook hookserver/koordlet both set env HF_HOME"));
}

TEST_F(ChainTest, PostStageFailuresNeverFailTheCall) {
  chain_.add(
      hook("cleanup",
           [](auto&) { return HookDecision::reject(absl::InternalError("could not reset GPU")); }),
      {.failure_policy = FailurePolicy::kFail});
  ChainOutcome out = chain_.run(input(Phase::kPost), Clock::time_point::max());
  EXPECT_TRUE(out.status.ok());
  ASSERT_EQ(out.ignored.size(), 1u);
  EXPECT_THAT(out.ignored[0],
              HasSubstr("hook cleanup failed in PostCreateContainer: could not reset GPU"));
}

TEST_F(ChainTest, AbandonedHookWorksOnItsOwnCopyOfTheRequest) {
  std::atomic<bool> caller_gone{false};
  std::atomic<int> read{-1};  // -1 not yet; 1 the request as it was sent, 0 anything else
  chain_.add(hook(
                 "late",
                 [&](const HookInput& in) {
                   // Runs on after the chain gave up, until its caller's
                   // request is gone.
                   EXPECT_TRUE(eventually([&] { return caller_gone.load(); }));
                   read = static_cast<const runtime::v1::CreateContainerRequest*>(in.request)
                              ->pod_sandbox_id() == "sb-1";
                   return HookDecision::proceed();
                 },
                 false),
             {.timeout = 20ms, .failure_policy = FailurePolicy::kIgnore});
  {
    runtime::v1::CreateContainerRequest request;
    request.set_pod_sandbox_id("sb-1");
    HookInput in = input();
    in.request = &request;
    EXPECT_TRUE(chain_.run(in, Clock::time_point::max()).status.ok());
  }  // the caller's request is gone
  caller_gone = true;
  ASSERT_TRUE(eventually([&] { return read.load() != -1; }));
  EXPECT_EQ(read.load(), 1);
}

// A hook that bounds its own time (a remote call) gets the deadline and is
// called on the chain's thread, without a watchdog thread.
class DeadlineHook : public Hook {
 public:
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod, Phase) const override { return true; }
  bool honoursDeadline() const override { return true; }
  HookDecision run(const HookInput& in) override {
    thread = std::this_thread::get_id();
    left = in.deadline - Clock::now();
    std::this_thread::sleep_for(overrun);
    return decision;
  }
  std::thread::id thread;
  Clock::duration left{};
  std::chrono::milliseconds overrun{0};
  HookDecision decision = HookDecision::proceed();

 private:
  std::string name_ = "remote";
};

TEST_F(ChainTest, HooksThatHonourTheDeadlineGetItAndRunOnTheChainsThread) {
  auto h = std::make_shared<DeadlineHook>();
  HookSettings s;
  s.timeout = 300ms;
  chain_.add(h, s);
  EXPECT_TRUE(chain_.run(input(), Clock::now() + 100ms).status.ok());
  EXPECT_EQ(h->thread, std::this_thread::get_id());
  EXPECT_GT(h->left, 50ms);  // the caller's deadline, being sooner than the hook's timeout
  EXPECT_LE(h->left, 100ms);
}

TEST_F(ChainTest, ARejectionThatCameLateIsStillTheHooksOwnAnswer) {
  // A device init that failed at its deadline and then cleaned up: what the
  // hook says is more use to kubelet than "ran over its time".
  auto h = std::make_shared<DeadlineHook>();
  h->overrun = 150ms;
  h->decision = HookDecision::reject(absl::FailedPreconditionError("init of gpu 0 timed out"));
  HookSettings s;
  s.timeout = 50ms;
  chain_.add(h, s);
  ChainOutcome out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("init of gpu 0 timed out"));
  EXPECT_EQ(chain_.counters("remote").timeouts.load(), 1u);  // counted all the same
  // Going on late is still a timeout.
  h->decision = HookDecision::proceed();
  out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(chain_.counters("remote").timeouts.load(), 2u);
}

}  // namespace
}  // namespace crihook
