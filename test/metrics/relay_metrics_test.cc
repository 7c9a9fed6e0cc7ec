// The numbers crihookd exports, through the proxy against the in-process
// fake runtime: every relayed call by method and code, hook runs, rejections,
// failures and timeouts, and the gauges back at zero when the calls are done.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "hooks/hook_interceptor.h"
#include "metrics/call_metrics.h"
#include "metrics/health.h"
#include "metrics/hook_metrics.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"
#include "tools/crihookctl/status.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr const char* kCreate = "/runtime.v1.RuntimeService/CreateContainer";
constexpr const char* kVersion = "/runtime.v1.RuntimeService/Version";

// Refuses containers named "deny", fails on "fail", overruns on "slow".
class MoodyHook : public Hook {
 public:
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase) const override {
    return m == LifecycleMethod::kCreateContainer;
  }
  bool runsInline() const override { return false; }
  HookDecision run(const HookInput& in) override {
    if (in.phase == Phase::kPost) return HookDecision::proceed();
    const auto& req = static_cast<const v1::CreateContainerRequest&>(*in.request);
    const std::string& name = req.config().metadata().name();
    if (name == "deny") return HookDecision::reject(absl::FailedPreconditionError("no GPU"));
    if (name == "fail") return HookDecision::error(absl::InternalError("broken"));
    if (name == "slow") std::this_thread::sleep_for(400ms);
    return HookDecision::proceed();
  }

 private:
  std::string name_ = "moody";
};

class RelayMetricsTest : public ProxyFixture {
 protected:
  void SetUp() override {
    HookSettings settings;
    settings.timeout = 100ms;
    chain_->add(std::make_shared<MoodyHook>(), settings);
    backend_.onUnary(kCreate, [](FakeCall&, std::string* out) {
      v1::CreateContainerResponse r;
      r.set_container_id("ctr-1");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
    backend_.onUnary(kVersion, [](FakeCall&, std::string* out) {
      *out = v1::VersionResponse().SerializeAsString();
      return grpc::Status::OK;
    });
    backend_.start();
    ASSERT_TRUE(state_.load().ok());
    proxy_ = std::make_unique<Server>(proxyConfig(), *hooks_, logger("proxy"));
    proxy_->setCallMetrics(&calls_);
    ASSERT_TRUE(proxy_->start().ok());
    registry_.gaugeFunction("crihook_connections", "c",
                            [this] { return static_cast<double>(proxy_->connections()); });
    registry_.gaugeFunction("crihook_calls_in_flight", "f",
                            [this] { return static_cast<double>(proxy_->activeCalls()); });
    registry_.gaugeFunction("crihook_intercepted_buffered_bytes", "b",
                            [this] { return static_cast<double>(proxy_->bufferedBytes()); });
    metrics::HttpEndpointOptions o;
    o.unix_path = dir_.file("metrics.sock");
    endpoint_ = std::make_unique<metrics::HttpEndpoint>(
        o, metrics::routes(registry_, health_, ready_, "crihookd test"), logger("metrics"));
    ASSERT_TRUE(endpoint_->start().ok());
  }
  void TearDown() override {
    endpoint_.reset();
    stopProxy();
  }

  grpc::Status create(const std::string& name) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb");
    req.mutable_config()->mutable_metadata()->set_name(name);
    grpc::ClientContext ctx;
    std::string reply;
    return genericUnary(channel_, &ctx, kCreate, req.SerializeAsString(), &reply);
  }
  grpc::Status call(const std::string& method) {
    grpc::ClientContext ctx;
    std::string reply;
    return genericUnary(channel_, &ctx, method, "", &reply);
  }

  // The value of one sample of a scrape, -1 when absent.
  double scraped(const std::string& name, const std::map<std::string, std::string>& labels) {
    MetricsListen where;
    where.kind = MetricsListen::Kind::kUnix;
    where.path = dir_.file("metrics.sock");
    auto r = ctl::httpGet(where, "/metrics", 5s);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    auto samples = ctl::parseExposition(r->body);
    EXPECT_TRUE(samples.ok()) << samples.status();
    for (const auto& s : *samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) match = match && s.labels.count(k) && s.labels.at(k) == v;
      if (match) return s.value;
    }
    return -1;
  }
  // Whether a gauge comes to read `want` (the proxy updates it as the
  // call's stream closes, just after the client has its answer).
  bool gaugeReaches(const std::string& name, double want) {
    return eventually([&] { return scraped(name, {}) == want; });
  }
  // Likewise for a counter that is recorded as the stream closes.
  bool counterReaches(const std::string& name, const std::map<std::string, std::string>& labels,
                      double want) {
    return eventually([&] { return scraped(name, labels) == want; });
  }

  metrics::Registry registry_;
  metrics::CallMetrics calls_{registry_};
  metrics::HookMetrics hook_metrics_{registry_};
  metrics::BackendHealth health_{[](std::chrono::milliseconds) { return absl::OkStatus(); }};
  metrics::Readiness ready_;
  std::shared_ptr<HookChain> chain_ = std::make_shared<HookChain>(logger("hook"), &hook_metrics_);
  ChainHolder chains_{chain_};
  StateStore state_{dir_.file("state"), logger("state")};
  std::unique_ptr<HookInterceptor> hooks_ =
      std::make_unique<HookInterceptor>(chains_, state_, logger("hook"), 4, nullptr);
  std::unique_ptr<metrics::HttpEndpoint> endpoint_;
  std::shared_ptr<grpc::Channel> channel_ = proxyChannel();
};

TEST_F(RelayMetricsTest, EveryCallIsCountedByMethodAndCode) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(call(kVersion).ok());
  EXPECT_EQ(call("/runtime.v1.RuntimeService/NoSuchMethod").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(create("ok").ok());
  EXPECT_EQ(create("deny").error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  const std::string v1rs = "runtime.v1.RuntimeService";
  EXPECT_TRUE(counterReaches("crihook_cri_calls_total",
                             {{"service", v1rs}, {"method", "Version"}, {"code", "OK"}}, 3));
  EXPECT_TRUE(counterReaches("crihook_cri_calls_total",
                             {{"service", v1rs}, {"method", "CreateContainer"}, {"code", "OK"}},
                             1));
  EXPECT_TRUE(counterReaches(
      "crihook_cri_calls_total",
      {{"service", v1rs}, {"method", "CreateContainer"}, {"code", "FAILED_PRECONDITION"}}, 1));
  // A method the CRI does not have: counted, under no name of the caller's.
  EXPECT_TRUE(counterReaches("crihook_cri_calls_total",
                             {{"service", "other"}, {"method", "other"}, {"code", "UNIMPLEMENTED"}},
                             1));
  EXPECT_EQ(scraped("crihook_cri_call_duration_seconds_count",
                    {{"service", v1rs}, {"method", "Version"}, {"code", "OK"}}),
            3);
  EXPECT_TRUE(gaugeReaches("crihook_calls_in_flight", 0));
  EXPECT_TRUE(gaugeReaches("crihook_intercepted_buffered_bytes", 0));
  EXPECT_EQ(scraped("crihook_connections", {}), 1);
}

TEST_F(RelayMetricsTest, HookRunsRejectionsFailuresAndTimeouts) {
  EXPECT_TRUE(create("ok").ok());
  EXPECT_FALSE(create("deny").ok());
  EXPECT_FALSE(create("fail").ok());
  EXPECT_FALSE(create("slow").ok());  // 400 ms against a 100 ms timeout
  const std::map<std::string, std::string> pre = {{"hook", "moody"},
                                                  {"stage", "PreCreateContainer"}};
  EXPECT_EQ(scraped("crihook_hook_calls_total", pre), 4);
  EXPECT_EQ(scraped("crihook_hook_rejections_total", pre), 1);
  EXPECT_EQ(scraped("crihook_hook_failures_total", pre), 2);  // "fail" and the timeout
  EXPECT_EQ(scraped("crihook_hook_timeouts_total", pre), 1);
  EXPECT_EQ(scraped("crihook_hook_duration_seconds_count", pre), 4);
  // Only the call that went through reached the post stage.
  EXPECT_EQ(
      scraped("crihook_hook_calls_total", {{"hook", "moody"}, {"stage", "PostCreateContainer"}}),
      1);
}

TEST_F(RelayMetricsTest, HookNumbersCarryOnAcrossAChainReload) {
  EXPECT_TRUE(create("ok").ok());
  HookSettings settings;
  settings.timeout = 100ms;
  auto next = std::make_shared<HookChain>(logger("hook"), &hook_metrics_);
  next->add(std::make_shared<MoodyHook>(), settings);
  chains_.set(next);
  EXPECT_TRUE(create("ok").ok());
  EXPECT_EQ(
      scraped("crihook_hook_calls_total", {{"hook", "moody"}, {"stage", "PreCreateContainer"}}), 2);
}

TEST_F(RelayMetricsTest, AConnectionGoneIsNoLongerCounted) {
  ASSERT_TRUE(call(kVersion).ok());
  EXPECT_TRUE(gaugeReaches("crihook_connections", 1));
  channel_.reset();
  EXPECT_TRUE(gaugeReaches("crihook_connections", 0));
}

}  // namespace
}  // namespace crihook::testing
