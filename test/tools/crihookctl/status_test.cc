#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "metrics/health.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"
#include "test/support/fake_cri_server.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

// A metrics endpoint as crihookd serves it, with numbers the test sets.
class CrihookctlStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.gauge("crihook_build_info", "v", {"version", "commit"})
        .with({"9.9.9", "abcdef012345-dirty"})
        .set(1);
    registry_.gauge("crihook_process_start_time_seconds", "t")
        .with({})
        .set(std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count() -
             3725);
    auto& calls = registry_.counter("crihook_cri_calls_total", "c", {"service", "method", "code"});
    calls.with({"runtime.v1.RuntimeService", "RunPodSandbox", "OK"}).inc(7);
    calls.with({"runtime.v1.RuntimeService", "RunPodSandbox", "FAILED_PRECONDITION"}).inc(2);
    calls.with({"runtime.v1.RuntimeService", "Version", "OK"}).inc(40);
    registry_.counter("crihook_hook_calls_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(9);
    registry_.counter("crihook_hook_failures_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(3);
    registry_.counter("crihook_hook_timeouts_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(1);
    registry_.gauge("crihook_device_cleanups_pending", "p", {"hook"}).with({"devices"}).set(2);
    metrics::HttpEndpointOptions o;
    o.unix_path = dir_.file("metrics.sock");
    endpoint_ = std::make_unique<metrics::HttpEndpoint>(
        o, metrics::routes(registry_, health_, ready_, "crihookd test"), logger("metrics"));
    ASSERT_TRUE(endpoint_->start().ok());
  }

  TempDir dir_;
  metrics::Registry registry_;
  std::atomic<bool> backend_up_{true};
  metrics::BackendHealth health_{
      [this](std::chrono::milliseconds) {
        return backend_up_ ? absl::OkStatus()
                           : absl::UnavailableError("runtime unix:///x did not answer Version");
      },
      std::chrono::seconds(1), std::chrono::milliseconds(0)};
  metrics::Readiness ready_;
  std::unique_ptr<metrics::HttpEndpoint> endpoint_;
};

TEST_F(CrihookctlStatus, SummarisesHealthReadinessCallsHooksAndCleanups) {
  ready_.set(true, "serving");
  Result r = ctl({"status", "--metrics", dir_.file("metrics.sock")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("crihookd 9.9.9 (git abcdef012345-dirty) at "));
  EXPECT_THAT(r.out, HasSubstr("up 1h02m"));
  EXPECT_THAT(r.out, HasSubstr("backend:  healthy"));
  EXPECT_THAT(r.out, HasSubstr("ready:    yes"));
  EXPECT_THAT(r.out, HasSubstr("pending device cleanups 2"));
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex(
                  "runtime.v1.RuntimeService/RunPodSandbox +9 +2  \\(FAILED_PRECONDITION 2\\)"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("gpu +9 +0 +3 +1"));
}

TEST_F(CrihookctlStatus, AnUnhealthyBackendOrNotReadyExitsOneWithTheReason) {
  ready_.set(false, "stopping");
  backend_up_ = false;
  Result r = ctl({"status", "--metrics", "unix://" + dir_.file("metrics.sock")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("UNHEALTHY: runtime unix:///x did not answer Version"));
  EXPECT_THAT(r.out, HasSubstr("ready:    NO: not ready: stopping"));
}

// Either alone is enough: a runtime that answers while crihookd is still
// starting (or already stopping) is no healthy node either.
TEST_F(CrihookctlStatus, HealthyButNotReadyExitsOne) {
  ready_.set(false, "starting");
  Result r = ctl({"status", "--metrics", dir_.file("metrics.sock")});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("backend:  healthy"));
  EXPECT_THAT(r.out, HasSubstr("ready:    NO: not ready: starting"));
  EXPECT_EQ(r.err, "");
}

TEST_F(CrihookctlStatus, JsonCarriesTheSameNumbers) {
  ready_.set(true, "serving");
  Result r = ctl({"-o", "json", "status", "--metrics", dir_.file("metrics.sock")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["version"], "9.9.9");
  EXPECT_EQ(j["commit"], "abcdef012345-dirty");
  EXPECT_GE(j["uptime_seconds"].get<int64_t>(), 3725);
  EXPECT_EQ(j["backend"]["healthy"], true);
  EXPECT_EQ(j["pending_cleanups"], 2);
  bool found = false;
  for (const auto& m : j["methods"]) {
    if (m["method"] == "runtime.v1.RuntimeService/RunPodSandbox") {
      found = true;
      EXPECT_EQ(m["calls"], 9);
      EXPECT_EQ(m["errors"], 2);
      EXPECT_EQ(m["by_code"]["FAILED_PRECONDITION"], 2);
    }
  }
  EXPECT_TRUE(found) << r.out;
  ASSERT_EQ(j["hooks"].size(), 1u);
  EXPECT_EQ(j["hooks"][0]["failures"], 3);
  EXPECT_EQ(j["hooks"][0]["timeouts"], 1);
}

TEST_F(CrihookctlStatus, TheEndpointComesFromTheConfigFileAndUnreachableExitsOne) {
  ready_.set(true, "serving");
  std::ofstream(dir_.file("c.toml"))
      << "[server]\nlisten = \"" << dir_.file("crihook.sock") << "\"\n";
  Result r = ctl({"status", "--config", dir_.file("c.toml")});
  EXPECT_EQ(r.code, 0) << r.err;  // metrics.sock beside the CRI socket
  Result gone = ctl({"-t", "2", "status", "--metrics", dir_.file("nothing.sock")});
  EXPECT_EQ(gone.code, 1);
  EXPECT_THAT(gone.err, HasSubstr("metrics endpoint " + dir_.file("nothing.sock")));
}

// A config file or an endpoint crihookctl cannot use is the operator's to
// fix: exit 2 with the reason, not the usage text, and nothing dialled.
TEST_F(CrihookctlStatus, AConfigOrEndpointThatCannotBeUsedExitsTwoNamingIt) {
  Result absent = ctl({"status", "--config", dir_.file("absent.toml")});
  EXPECT_EQ(absent.code, 2);
  EXPECT_THAT(absent.err, ::testing::StartsWith("crihookctl: config " + dir_.file("absent.toml")));
  EXPECT_THAT(absent.err, ::testing::Not(HasSubstr("usage:")));
  Result named = ctl({"status", "--metrics", "metrics.example.com:9100"});
  EXPECT_EQ(named.code, 2);
  EXPECT_THAT(named.err, HasSubstr("--metrics: metrics.listen: expected an IP address as HOST"));
  EXPECT_EQ(named.out, "");
}

}  // namespace
}  // namespace crihook::testing
