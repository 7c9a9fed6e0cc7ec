// metrics/http_endpoint.cc: the endpoint's bounds against hostile clients
// (request size, read timeout, connections), its socket, TCP on loopback.

#include "metrics/http_endpoint.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/logging.h"
#include "metrics/metric_registry.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/unix_socket.h"
#include "tools/crihookctl/status.h"

namespace crihook::metrics {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

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
  // /big: an answer of 4 MiB, more than a Unix socket buffers; /healthz:
  // "ok", or held until releaseProbes() while hold_probes_.
  void startBig(HttpEndpointOptions o) {
    o.unix_path = dir_.file("metrics.sock");
    endpoint_ = std::make_unique<HttpEndpoint>(
        o,
        [this](const std::string& path, std::function<void(HttpResponse)> reply) {
          if (path == "/big") return reply({200, "text/plain", std::string(4 << 20, 'x')});
          std::lock_guard lock(mu_);
          if (!hold_probes_) return reply({200, "text/plain", "ok\n"});
          held_.push_back(std::move(reply));
        },
        logger("metrics"));
    ASSERT_TRUE(endpoint_->start().ok());
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void releaseProbes() {
    std::vector<std::function<void(HttpResponse)>> replies;
    {
      std::lock_guard lock(mu_);
      replies.swap(held_);
    }
    for (auto& r : replies) r({200, "text/plain", "ok\n"});
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
  std::mutex mu_;
  bool hold_probes_ = false;  // guarded by mu_ once the endpoint runs
  std::vector<std::function<void(HttpResponse)>> held_;
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
  // A method other than GET is refused saying which one is allowed (RFC 9110
  // 15.5.6: a 405 carries Allow).
  const std::string post = get("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(post, HasSubstr("\r\nAllow: GET\r\n"));
  EXPECT_THAT(get("garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
}

// The bound is the request's whole head: exactly max_request_bytes of it,
// ended, is served; that many with no end yet is refused at once.
TEST_F(EndpointTest, ARequestHeadOfTheBoundIsServedAndOneThatGoesOnIsRefused) {
  start({.max_request_bytes = 64});
  const std::string tail = " HTTP/1.1\r\n\r\n";
  const std::string head = "GET /" + std::string(64 - 5 - tail.size(), 'a') + tail;
  ASSERT_EQ(head.size(), 64u);
  EXPECT_THAT(get(head), StartsWith("HTTP/1.1 404"));
  const std::string unended = "GET /" + std::string(59, 'a');
  ASSERT_EQ(unended.size(), 64u);
  EXPECT_THAT(get(unended), StartsWith("HTTP/1.1 431"));
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

// Past the limit a new connection takes the place of the oldest: clients
// that connect and send nothing hold no slot for long.
TEST_F(EndpointTest, AConnectionPastTheLimitTakesTheOldestsPlace) {
  HttpEndpointOptions o;
  o.max_connections = 2;
  o.read_timeout = 60s;  // no other way out for the oldest
  start(o);
  int a = connectUnix(dir_.file("metrics.sock"));
  ASSERT_TRUE(eventually([&] { return endpoint_->connections() == 1; }));
  int b = connectUnix(dir_.file("metrics.sock"));
  ASSERT_TRUE(eventually([&] { return endpoint_->connections() == 2; }))
      << endpoint_->connections();
  EXPECT_THAT(get("GET /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200 OK\r\n"));
  std::string out;
  EXPECT_TRUE(readUntilClosed(a, out, 5s)) << "the oldest was not closed";
  EXPECT_EQ(out, "");
  EXPECT_TRUE(eventually([&] { return endpoint_->connections() == 1; })) << "b is still open";
  ::close(a);
  ::close(b);
}

// A client that asks and never reads an answer larger than the socket
// buffers holds its slot until the write timeout, then is cut.
TEST_F(EndpointTest, AClientThatNeverReadsIsCutAtTheWriteTimeout) {
  HttpEndpointOptions o;
  o.write_timeout = 200ms;
  startBig(o);
  int fd = connectUnix(dir_.file("metrics.sock"));
  ASSERT_GE(fd, 0);
  ::send(fd, "GET /big HTTP/1.1\r\n\r\n", 23, MSG_NOSIGNAL);  // and never read
  ASSERT_TRUE(eventually([&] { return endpoint_->connections() == 1; }));
  EXPECT_TRUE(eventually([&] { return endpoint_->connections() == 0; })) << "not cut";
  ::close(fd);
}

// Every slot held by clients that asked for /metrics and do not read: a
// health probe is still answered, and probes are never closed for another.
TEST_F(EndpointTest, AProbeIsAnsweredWhateverOtherClientsHold) {
  HttpEndpointOptions o;
  o.max_connections = 4;
  o.read_timeout = 60s;  // the late one is refused, not timed out
  o.priority_paths = {"/healthz"};
  startBig(o);
  std::vector<int> stuck;
  for (size_t i = 0; i < o.max_connections; ++i) {
    stuck.push_back(connectUnix(dir_.file("metrics.sock")));
    ::send(stuck.back(), "GET /big HTTP/1.1\r\n\r\n", 23, MSG_NOSIGNAL);
    ASSERT_TRUE(eventually([&] { return endpoint_->connections() == i + 1; }));
  }
  EXPECT_THAT(get("GET /healthz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200 OK\r\n"));

  // Probes that hold every slot are not closed for a scraper.
  for (int fd : stuck) ::close(fd);
  ASSERT_TRUE(eventually([&] { return endpoint_->connections() == 0; }));
  {
    std::lock_guard lock(mu_);
    hold_probes_ = true;
  }
  std::vector<int> probes;
  for (size_t i = 0; i < o.max_connections; ++i) {
    probes.push_back(connectUnix(dir_.file("metrics.sock")));
    ::send(probes.back(), "GET /healthz HTTP/1.1\r\n\r\n", 27, MSG_NOSIGNAL);
  }
  ASSERT_TRUE(eventually([&] { return held() == o.max_connections; }));
  std::string out;
  int late = connectUnix(dir_.file("metrics.sock"));
  EXPECT_TRUE(readUntilClosed(late, out, 5s));
  EXPECT_EQ(out, "") << "refused, no probe closed";
  releaseProbes();
  for (int fd : probes) {
    out.clear();
    EXPECT_TRUE(readUntilClosed(fd, out, 5s));
    EXPECT_THAT(out, StartsWith("HTTP/1.1 200 OK\r\n"));
    ::close(fd);
  }
  ::close(late);
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

// Out of descriptors, accept() fails at once for as long as the connection
// waits in the backlog: the endpoint tries again 10 ms later, then 20, 40 ...
// (not at once, spinning its thread), and serves the connection once
// descriptors are free again.
TEST_F(EndpointTest, AFailingAcceptIsRetriedAfterABackoffNotAtOnce) {
  start();
  const int client = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = dir_.file("metrics.sock");
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  // The lowest free descriptor becomes the limit: no new one can be made.
  struct Limit {
    rlimit saved{};
    Limit() {
      ::getrlimit(RLIMIT_NOFILE, &saved);
      const int lowest_free = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      ::close(lowest_free);
      rlimit low = saved;
      low.rlim_cur = static_cast<rlim_t>(lowest_free);
      ::setrlimit(RLIMIT_NOFILE, &low);
    }
    ~Limit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
  };
  uint64_t failures = 0;
  std::chrono::steady_clock::duration elapsed{};
  {
    Limit limit;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << strerror(errno);
    ASSERT_TRUE(eventually([&] { return endpoint_->acceptFailures() >= 3; }));
    failures = endpoint_->acceptFailures();
    elapsed = std::chrono::steady_clock::now() - t0;
  }
  // Failure k comes at least 10 * (2^(k-1) - 1) ms after the first.
  const double ms = std::chrono::duration<double, std::milli>(elapsed).count();
  EXPECT_LE(static_cast<double>(failures), 1 + std::log2(ms / 10 + 1))
      << failures << " failed accepts in " << ms << "ms";
  const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(client, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string out;
  EXPECT_TRUE(readUntilClosed(client, out, 5s));
  ::close(client);
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200 OK")) << "served once descriptors are free";
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

}  // namespace
}  // namespace crihook::metrics
