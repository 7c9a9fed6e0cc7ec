// metrics/health.cc: /healthz's cache against a probe storm, the probe of a
// runtime's Version, /readyz.

#include "metrics/health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "metrics/metric_registry.h"
#include "test/support/fake_cri_server.h"

namespace crihook::metrics {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(HealthTest, AProbeStormCostsOneProbePerCachePeriod) {
  std::atomic<int> calls{0};
  BackendHealth h(
      [&](std::chrono::milliseconds) {
        ++calls;
        return absl::OkStatus();
      },
      1s, 10s);
  for (int i = 0; i < 50; ++i) {
    std::promise<absl::Status> p;
    h.check([&](absl::Status s) { p.set_value(s); });
    EXPECT_TRUE(p.get_future().get().ok());
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST(HealthTest, AFailingProbeGivesItsReasonAndIsProbedAgainAfterTheCache) {
  std::atomic<bool> up{false};
  BackendHealth h(
      [&](std::chrono::milliseconds) {
        return up ? absl::OkStatus() : absl::UnavailableError("runtime X did not answer");
      },
      1s, 0ms);
  std::promise<absl::Status> p1;
  h.check([&](absl::Status s) { p1.set_value(s); });
  absl::Status s1 = p1.get_future().get();
  EXPECT_THAT(std::string(s1.message()), HasSubstr("runtime X did not answer"));
  up = true;
  std::promise<absl::Status> p2;
  h.check([&](absl::Status s) { p2.set_value(s); });
  EXPECT_TRUE(p2.get_future().get().ok());
}

TEST(HealthTest, RuntimeVersionProbeAgainstAFakeRuntimeAndNone) {
  crihook::testing::TempDir dir;
  crihook::testing::FakeCriServer backend(dir.file("backend.sock"));
  backend.onUnary("/runtime.v1.RuntimeService/Version", [](auto&, std::string* out) {
    *out = "";
    return grpc::Status::OK;
  });
  backend.start();
  EXPECT_TRUE(runtimeVersionProbe("unix://" + dir.file("backend.sock"))(1s).ok());
  absl::Status down = runtimeVersionProbe("unix://" + dir.file("nothing.sock"))(500ms);
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(down.message()), HasSubstr(dir.file("nothing.sock")));
}

TEST(HealthTest, ReadyzFollowsTheReadiness) {
  Registry registry;
  BackendHealth health([](std::chrono::milliseconds) { return absl::OkStatus(); });
  Readiness ready;
  auto handler = routes(registry, health, ready, "crihookd 9.8.7 (git 0123456789ab)");
  auto get = [&](const std::string& path) {
    std::promise<HttpResponse> p;
    handler(path, [&](HttpResponse r) { p.set_value(r); });
    return p.get_future().get();
  };
  EXPECT_EQ(get("/readyz").status, 503);
  EXPECT_THAT(get("/readyz").body, HasSubstr("starting"));
  ready.set(true, "serving");
  EXPECT_EQ(get("/readyz").status, 200);
  // The build answering, on the second line, ready or not.
  EXPECT_EQ(get("/readyz").body, "ok\ncrihookd 9.8.7 (git 0123456789ab)\n");
  ready.set(false, "stopping");
  EXPECT_EQ(get("/readyz").body, "not ready: stopping\ncrihookd 9.8.7 (git 0123456789ab)\n");
  EXPECT_EQ(get("/healthz").status, 200);
  EXPECT_EQ(get("/other").status, 404);
}

// A check that finds a problem (the state folder cannot be written) makes a
// serving crihookd not ready, saying why, until it clears.
TEST(HealthTest, ReadyzIsNotReadyWhileACheckSaysWhy) {
  Registry registry;
  BackendHealth health([](std::chrono::milliseconds) { return absl::OkStatus(); });
  Readiness ready;
  std::atomic<bool> full{true};
  ready.addCheck([&] { return full ? std::string("pod records cannot be written: full") : ""; });
  ready.addCheck([] { return std::string(); });
  auto handler = routes(registry, health, ready, "crihookd 9.8.7");
  auto get = [&](const std::string& path) {
    std::promise<HttpResponse> p;
    handler(path, [&](HttpResponse r) { p.set_value(r); });
    return p.get_future().get();
  };
  ready.set(true, "serving");
  EXPECT_EQ(get("/readyz").status, 503);
  EXPECT_EQ(get("/readyz").body,
            "not ready: pod records cannot be written: full\ncrihookd 9.8.7\n");
  full = false;
  EXPECT_EQ(get("/readyz").status, 200);
  // Not yet serving: the phase says why, whatever the checks.
  full = true;
  ready.set(false, "stopping");
  EXPECT_THAT(get("/readyz").body, HasSubstr("not ready: stopping"));
}

}  // namespace
}  // namespace crihook::metrics
