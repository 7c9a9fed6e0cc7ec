#include "hooks/chain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <thread>

#include "base/logging.h"
#include "base/quote.h"
#include "cri-api/runtime_v1.pb.h"

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
  std::atomic<bool> read_ok{false};
  chain_.add(hook(
                 "late",
                 [&](const HookInput& in) {
                   std::this_thread::sleep_for(200ms);  // long after the chain gave up
                   read_ok = static_cast<const runtime::v1::CreateContainerRequest*>(in.request)
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
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(read_ok.load());
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
  // Going on late is still a timeout.
  h->decision = HookDecision::proceed();
  out = chain_.run(input(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace crihook
