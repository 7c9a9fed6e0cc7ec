// The metrics part: the registry and its text format, the HTTP endpoint's
// bounds against hostile clients, and /healthz's cache.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "base/logging.h"
#include "cri-api/runtime_v1.pb.h"
#include "cri-api/runtime_v1.rpcs.h"
#include "metrics/call_metrics.h"
#include "metrics/health.h"
#include "metrics/hook_metrics.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/unix_socket.h"
#include "tools/crihookctl/status.h"

namespace crihook::metrics {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(RegistryTest, CountersAndGaugesHaveHelpTypeAndLabels) {
  Registry r;
  auto& calls = r.counter("crihook_x_total", "Things done.", {"kind"});
  calls.with({"a"}).inc();
  calls.with({"a"}).inc(2);
  calls.with({"b"}).inc();
  r.gauge("crihook_level", "A level.").with({}).set(-4);
  const std::string text = r.expose();
  EXPECT_THAT(text,
              HasSubstr("# HELP crihook_x_total Things done.\n# TYPE crihook_x_total counter\n"
                        "crihook_x_total{kind=\"a\"} 3\ncrihook_x_total{kind=\"b\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE crihook_level gauge\ncrihook_level -4\n"));
}

TEST(RegistryTest, AskingTwiceForAFamilyReturnsTheSameOne) {
  Registry r;
  auto& a = r.counter("crihook_y_total", "Y.", {"k"});
  auto& b = r.counter("crihook_y_total", "Y again.", {"k"});
  EXPECT_EQ(&a, &b);
  a.with({"v"}).inc();
  b.with({"v"}).inc();
  EXPECT_EQ(a.with({"v"}).value(), 2u);
  const std::string text = r.expose();
  EXPECT_EQ(text.find("# HELP crihook_y_total"), text.rfind("# HELP crihook_y_total"));
}

TEST(RegistryTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.counter("crihook_z_total", "back\\slash and\nnewline", {"v"})
      .with({"quote\" back\\slash\nnewline"})
      .inc();
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("# HELP crihook_z_total back\\\\slash and\\nnewline\n"));
  EXPECT_THAT(text, HasSubstr("crihook_z_total{v=\"quote\\\" back\\\\slash\\nnewline\"} 1\n"));
  // Every sample is one line: the newline inside the value did not split it.
  EXPECT_THAT(text, Not(HasSubstr("\nnewline")));
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  static const std::vector<double> kBounds = {0.001, 0.01, 0.1};
  auto& h = r.histogram("crihook_h_seconds", "H.", {"m"}, kBounds).with({"x"});
  h.observe(0.0005);  // first bucket
  h.observe(0.001);   // le is inclusive: first bucket
  h.observe(0.05);    // third
  h.observe(7);       // +Inf only
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("# TYPE crihook_h_seconds histogram\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.001\"} 2\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.01\"} 2\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.1\"} 3\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"
                              "crihook_h_seconds_sum{m=\"x\"} 7.0515\n"
                              "crihook_h_seconds_count{m=\"x\"} 4\n"));
}

TEST(RegistryTest, DefaultLatencyBucketsSpan100usTo30s) {
  const auto& b = latencyBuckets();
  EXPECT_EQ(b.front(), 0.0001);
  EXPECT_EQ(b.back(), 30);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(RegistryTest, AFamilyStopsGrowingAtItsCap) {
  Registry r;
  auto& f = r.counter("crihook_many_total", "Many.", {"k"});
  for (size_t i = 0; i < kMaxSeriesPerFamily + 10; ++i) f.with({std::to_string(i)}).inc();
  size_t series = 0;
  uint64_t overflow = 0;
  f.forEach([&](const std::vector<std::string>& v, const Counter& c) {
    ++series;
    if (v[0] == "overflow") overflow = c.value();
  });
  EXPECT_EQ(series, kMaxSeriesPerFamily + 1);
  EXPECT_EQ(overflow, 10u);
}

TEST(RegistryTest, ConcurrentRecordingLosesNothing) {
  Registry r;
  auto& c = r.counter("crihook_c_total", "C.").with({});
  auto& h = r.histogram("crihook_d_seconds", "D.", {}).with({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(0.002);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_NEAR(h.snapshot().sum, 80.0, 1e-6);
}

// The build's table of RPC names (cri-api/gen_rpcs.py reads the .proto's
// text) against what protoc made of the same file: every service and method,
// in order, nothing more.
TEST(CallMetricsTest, TheRpcTableIsTheProtosServicesAndMethods) {
  const auto* file = runtime::v1::VersionRequest::descriptor()->file();
  std::vector<std::string> from_descriptors, from_table;
  for (int s = 0; s < file->service_count(); ++s) {
    for (int m = 0; m < file->service(s)->method_count(); ++m)
      from_descriptors.push_back(file->service(s)->name() + "/" +
                                 file->service(s)->method(m)->name());
  }
  for (const criapi::Rpc& rpc : criapi::kRuntimeRpcs)
    from_table.push_back(std::string(rpc.service) + "/" + std::string(rpc.method));
  EXPECT_EQ(from_table, from_descriptors);
  EXPECT_GE(from_table.size(), 30u);  // 29 RuntimeService + 5 ImageService RPCs today
}

TEST(CallMetricsTest, KnownMethodsByNameAndCodeUnknownPathsAsOther) {
  Registry r;
  CallMetrics m(r);
  m.record("/runtime.v1.RuntimeService/Version", absl::StatusCode::kOk, 300us);
  m.record("/runtime.v1.RuntimeService/Version", absl::StatusCode::kOk, 300us);
  m.record("/runtime.v1alpha2.ImageService/PullImage", absl::StatusCode::kNotFound, 2s);
  m.record("/made.up/\"path\"", absl::StatusCode::kUnimplemented, 1ms);
  m.record("/another.made.up/path", absl::StatusCode::kUnimplemented, 1ms);
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"runtime.v1.RuntimeService\","
                              "method=\"Version\",code=\"OK\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"runtime.v1alpha2.ImageService\","
                              "method=\"PullImage\",code=\"NOT_FOUND\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"other\",method=\"other\","
                              "code=\"UNIMPLEMENTED\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("made.up")));
  EXPECT_THAT(text,
              HasSubstr("crihook_cri_call_duration_seconds_bucket{service=\"runtime.v1."
                        "RuntimeService\",method=\"Version\",code=\"OK\",le=\"0.00025\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("crihook_cri_call_duration_seconds_bucket{service=\"runtime.v1."
                        "RuntimeService\",method=\"Version\",code=\"OK\",le=\"0.0005\"} 2\n"));
}

TEST(ExpositionTest, CrihookctlParsesWhatTheRegistryWrites) {
  Registry r;
  r.counter("crihook_q_total", "Q.", {"a", "b"}).with({"x\"y\\z\nw", ""}).inc(5);
  r.histogram("crihook_r_seconds", "R.", {}).with({}).observe(0.2);
  auto samples = ctl::parseExposition(r.expose());
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_FALSE(samples->empty());
  EXPECT_EQ((*samples)[0].name, "crihook_q_total");
  EXPECT_EQ((*samples)[0].labels.at("a"), "x\"y\\z\nw");
  EXPECT_EQ((*samples)[0].value, 5);
  EXPECT_EQ(samples->back().name, "crihook_r_seconds_count");
  EXPECT_FALSE(ctl::parseExposition("crihook_bad{a=\"x} 1\n").ok());
  EXPECT_FALSE(ctl::parseExposition("crihook_bad 1x\n").ok());
}

// --- the endpoint ----------------------------------------------------------

int connectUnix(const std::string& path) { return ::crihook::testing::connectUnixSocket(path); }

// Reads until the peer closes (true) or `timeout` passes (false).
bool readUntilClosed(int fd, std::string& out, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // closed, or reset
    out.append(buf, static_cast<size_t>(n));
  }
}

class EndpointTest : public ::testing::Test {
 protected:
  void start(HttpEndpointOptions o = {}) {
    o.unix_path = dir_.file("metrics.sock");
    endpoint_ = std::make_unique<HttpEndpoint>(
        o,
        [this](const std::string& path, std::function<void(HttpResponse)> reply) {
          if (path == "/metrics") {
            reply({200, "text/plain; version=0.0.4; charset=utf-8", registry_.expose()});
          } else {
            reply({404, "text/plain", "no\n"});
          }
        },
        logger("metrics"));
    ASSERT_TRUE(endpoint_->start().ok());
  }
  std::string get(const std::string& request) {
    int fd = connectUnix(dir_.file("metrics.sock"));
    EXPECT_GE(fd, 0);
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string out;
    EXPECT_TRUE(readUntilClosed(fd, out, 5s));
    ::close(fd);
    return out;
  }

  crihook::testing::TempDir dir_;
  Registry registry_;
  std::unique_ptr<HttpEndpoint> endpoint_;
};

TEST_F(EndpointTest, ServesGetAndClosesTheConnection) {
  registry_.counter("crihook_e_total", "E.").with({}).inc();
  start();
  const std::string r = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(r, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\n# HELP crihook_e_total E.\n"));
  EXPECT_THAT(get("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(get("GET /nope HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(get("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab"),
              StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(get("garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
}

TEST_F(EndpointTest, AMegabyteRequestLineIsRefusedAndTheConnectionClosed) {
  start();
  int fd = connectUnix(dir_.file("metrics.sock"));
  ASSERT_GE(fd, 0);
  // The client keeps sending; crihookd answers and closes after 8 KiB.
  std::thread writer([fd] {
    std::string line = "GET /" + std::string(1 << 20, 'a');
    size_t off = 0;
    while (off < line.size()) {
      ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;  // EPIPE / reset: the server closed
      off += static_cast<size_t>(n);
    }
  });
  std::string out;
  const bool closed = readUntilClosed(fd, out, 5s);
  ::shutdown(fd, SHUT_RDWR);
  writer.join();
  ::close(fd);
  EXPECT_TRUE(closed) << "the connection stayed open";
  EXPECT_THAT(out, StartsWith("HTTP/1.1 431"));
  // And the endpoint still serves.
  EXPECT_THAT(get("GET /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200"));
}

TEST_F(EndpointTest, ASilentClientIsCutAtTheReadTimeout) {
  HttpEndpointOptions o;
  o.read_timeout = 300ms;
  start(o);
  int fd = connectUnix(dir_.file("metrics.sock"));
  ASSERT_GE(fd, 0);
  ::send(fd, "GET /met", 8, MSG_NOSIGNAL);  // and nothing more
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  EXPECT_TRUE(readUntilClosed(fd, out, 5s)) << "not cut";
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  EXPECT_EQ(out, "");
  ::close(fd);
}

TEST_F(EndpointTest, ConnectionsPastTheLimitAreClosedAtOnce) {
  HttpEndpointOptions o;
  o.max_connections = 2;
  start(o);
  int a = connectUnix(dir_.file("metrics.sock"));
  int b = connectUnix(dir_.file("metrics.sock"));
  ASSERT_TRUE(eventually([&] { return endpoint_->connections() == 2; }))
      << endpoint_->connections();
  int c = connectUnix(dir_.file("metrics.sock"));
  std::string out;
  EXPECT_TRUE(readUntilClosed(c, out, 2s)) << "the third was not closed";
  EXPECT_EQ(out, "");
  ::close(a);
  ::close(b);
  ::close(c);
}

TEST_F(EndpointTest, ALiveSocketIsNotTakenOver) {
  start();
  HttpEndpointOptions o;
  o.unix_path = dir_.file("metrics.sock");
  HttpEndpoint second(
      o, [](const std::string&, std::function<void(HttpResponse)>) {}, logger("metrics"));
  absl::Status s = second.start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir_.file("metrics.sock")));
}

TEST(EndpointTcpTest, ServesOnLoopback) {
  Registry registry;
  HttpEndpointOptions o;
  o.tcp_host = "127.0.0.1";
  o.tcp_port = 0;
  HttpEndpoint e(
      o,
      [](const std::string&, std::function<void(HttpResponse)> reply) {
        reply({200, "text/plain", "tcp\n"});
      },
      logger("metrics"));
  ASSERT_TRUE(e.start().ok());
  ASSERT_NE(e.port(), 0);
  MetricsListen where;
  where.kind = MetricsListen::Kind::kTcp;
  where.host = "127.0.0.1";
  where.port = e.port();
  auto r = ctl::httpGet(where, "/x", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "tcp\n");
}

// --- health -----------------------------------------------------------------

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

}  // namespace
}  // namespace crihook::metrics
