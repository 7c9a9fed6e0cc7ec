// crihookd against a hostile client on its socket: header lists held per
// connection, the budget of buffered intercepted calls, a request that never
// completes, connections without a preface or idle, too many connections,
// and a daemon out of file descriptors. Each limit is configured small so
// that reaching it takes a fraction of a second.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "cri-api/runtime_v1.pb.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"
#include "test/support/unix_socket.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace v1 = runtime::v1;

constexpr const char* kVersion = "/runtime.v1.RuntimeService/Version";
constexpr const char* kRunPodSandbox = "/runtime.v1.RuntimeService/RunPodSandbox";
constexpr const char* kEvents = "/runtime.v1.RuntimeService/GetContainerEvents";
constexpr int kResourceExhausted = 8;
constexpr int kDeadlineExceeded = 4;
constexpr int kInternal = 13;

// A plain socket connected to `path`: a client that never speaks. -1 when
// the connect fails.
int connectRaw(const std::string& path) { return ::crihook::testing::connectUnixSocket(path); }

// True once the peer closed `fd` (EOF or reset) within `timeout`; whatever
// it sent before (SETTINGS, GOAWAY) is read and dropped.
bool closedByPeer(int fd, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

std::string versionRequest() {
  v1::VersionRequest req;
  req.set_version("v1");
  return grpcFrame(req.SerializeAsString());
}

class LimitsTest : public ProxyFixture {
 protected:
  void SetUp() override {
    backend_.onUnary(kVersion, [](FakeCall&, std::string* out) {
      v1::VersionResponse r;
      r.set_runtime_name("fake");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
  }

  std::string sock() const { return dir_.file("crihook.sock"); }

  // A Version call on a fresh connection is answered.
  void expectServed() {
    RawH2Client client(sock());
    RawH2Result r = client.call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    EXPECT_EQ(r.grpc_status, 0) << "a call on another connection: " << r.grpc_message;
  }

  // A connection that makes one call, then idles: true once crihookd has
  // sent it GOAWAY and closed it, which takes server.idle_timeout.
  bool idleConnectionClosed() {
    RawH2Client idle(sock());
    RawH2Result ok = idle.call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    EXPECT_EQ(ok.grpc_status, 0) << ok.grpc_message;
    return eventually([&] {
      idle.run(20ms);
      return !idle.usable();
    });
  }
};

TEST_F(LimitsTest, HeaderListsHeldOnOneConnectionAreCappedAndOtherConnectionsAreServed) {
  backend_.start();
  startProxy();
  // 19 fields of 3,000 bytes: HPACK indexes the field once (nghttp2 indexes
  // fields up to 3/4 of its 4 KiB table), so every further
  // block costs a few bytes on the wire and decodes to ~58 KB,
  // just under what one request may hold. The streams stay open (an
  // intercepted method waiting for its message), so their headers are held.
  RawHeaders padded = RawH2Client::grpcHeaders(kRunPodSandbox);
  for (int i = 0; i < 19; ++i) padded.emplace_back("x-pad", std::string(3000, 'a'));
  constexpr int kConnections = 4;
  constexpr int kStreams = 200;  // ~12 MB decoded per connection
  std::vector<std::unique_ptr<RawH2Client>> clients;
  std::vector<std::vector<int32_t>> ids(kConnections);
  for (int c = 0; c < kConnections; ++c) {
    clients.push_back(std::make_unique<RawH2Client>(sock()));
    for (int s = 0; s < kStreams; ++s) ids[c].push_back(clients[c]->open(padded));
    // A call behind them is answered (or refused) only once the server has
    // read every block before it.
    RawH2Result barrier = clients[c]->call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    ASSERT_TRUE(barrier.closed) << "connection " << c;
  }
  // The daemon holds at most its per-connection cap (1 MiB) per connection,
  // not 800 x 59 KB = 47 MB.
  EXPECT_LE(proxy_->heldHeaderBytes(), kConnections * ((1 << 20) + (64 << 10)));
  for (int c = 0; c < kConnections; ++c) {
    int refused = 0;
    std::string message;
    for (int32_t id : ids[c]) {
      RawH2Result r = clients[c]->result(id);
      if (r.grpc_status == kResourceExhausted) {
        ++refused;
        message = r.grpc_message;
      }
    }
    EXPECT_GT(refused, kStreams / 2) << "connection " << c;
    EXPECT_THAT(message, HasSubstr("header")) << "connection " << c;
  }
  expectServed();
  clients.clear();
  EXPECT_TRUE(eventually([&] { return proxy_->heldHeaderBytes() == 0; }))
      << proxy_->heldHeaderBytes() << " header bytes still held after the clients left";
}

TEST_F(LimitsTest, BufferedInterceptedCallsAreRefusedPastTheConnectionAndProcessBudgets) {
  backend_.start();
  Config config = proxyConfig();
  config.max_connection_buffered_bytes = 20 << 20;
  config.max_buffered_bytes = 40 << 20;
  startProxy(nullptr, config);
  // 12 MiB of a 15 MiB message: buffered whole, never complete.
  const std::string part = grpcFrame(std::string(15 << 20, 'x')).substr(0, 12 << 20);
  const RawHeaders headers = RawH2Client::grpcHeaders(kRunPodSandbox);

  auto a = std::make_unique<RawH2Client>(sock());
  a->open(headers, part);
  ASSERT_TRUE(eventually([&] {
    a->run(10ms);
    return proxy_->bufferedBytes() >= (12 << 20);
  }));
  // A second one on the same connection passes its 20 MiB.
  RawH2Result second = a->wait(a->open(headers, part));
  ASSERT_TRUE(second.closed) << "a call past the connection's budget is answered";
  EXPECT_EQ(second.grpc_status, kResourceExhausted);
  EXPECT_THAT(second.grpc_message, HasSubstr("server.max_connection_buffered_bytes"));

  // Other connections each stay under their own budget until the process's
  // 40 MiB is reached.
  RawH2Client b(sock()), c(sock()), d(sock());
  b.open(headers, part);
  ASSERT_TRUE(eventually([&] {
    b.run(10ms);
    return proxy_->bufferedBytes() >= (24 << 20);
  }));
  c.open(headers, part);
  ASSERT_TRUE(eventually([&] {
    c.run(10ms);
    return proxy_->bufferedBytes() >= (36 << 20);
  }));
  RawH2Result over = d.wait(d.open(headers, part));
  ASSERT_TRUE(over.closed) << "a call past the process's budget is answered";
  EXPECT_EQ(over.grpc_status, kResourceExhausted);
  EXPECT_THAT(over.grpc_message, HasSubstr("server.max_buffered_bytes"));
  EXPECT_LE(proxy_->bufferedBytes(), 40 << 20);

  // Calls that end give their bytes back.
  a.reset();
  EXPECT_TRUE(eventually([&] { return proxy_->bufferedBytes() <= (24 << 20); }));
  expectServed();
}

TEST_F(LimitsTest, RequestThatNeverCompletesIsAnsweredDeadlineExceededAndReleased) {
  backend_.start();
  Config config = proxyConfig();
  config.request_timeout = 300ms;
  startProxy(nullptr, config);
  RawH2Client client(sock());
  const RawHeaders headers = RawH2Client::grpcHeaders(kRunPodSandbox);
  // Headers and no message at all; half a message.
  const int32_t bare = client.open(headers);
  const int32_t half = client.open(headers, grpcFrame(std::string(4096, 'x')).substr(0, 2048));
  const auto started = std::chrono::steady_clock::now();
  RawH2Result r1 = client.wait(bare, 5s);
  RawH2Result r2 = client.wait(half, 5s);
  const auto took = std::chrono::steady_clock::now() - started;
  for (const RawH2Result& r : {r1, r2}) {
    ASSERT_TRUE(r.closed) << "an incomplete request is not held forever";
    EXPECT_EQ(r.grpc_status, kDeadlineExceeded);
    EXPECT_THAT(r.grpc_message, HasSubstr("server.request_timeout"));
  }
  EXPECT_GE(took, 250ms);
  EXPECT_EQ(proxy_->bufferedBytes(), 0);
  // The connection itself goes on serving.
  RawH2Result ok = client.call(RawH2Client::grpcHeaders(kVersion), versionRequest());
  EXPECT_EQ(ok.grpc_status, 0) << ok.grpc_message;
}

TEST_F(LimitsTest, ConnectionWithoutAPrefaceIsClosedAfterThePrefaceTimeout) {
  backend_.start();
  Config config = proxyConfig();
  config.preface_timeout = 200ms;
  startProxy(nullptr, config);
  const auto started = std::chrono::steady_clock::now();
  int silent = connectRaw(sock());
  ASSERT_GE(silent, 0);
  EXPECT_TRUE(closedByPeer(silent, 5s)) << "a connection that never sends a preface is closed";
  EXPECT_GE(std::chrono::steady_clock::now() - started, 150ms);
  ::close(silent);
  // A client that speaks is not cut at the preface timeout.
  RawH2Client client(sock());
  client.run(600ms);
  RawH2Result ok = client.call(RawH2Client::grpcHeaders(kVersion), versionRequest());
  EXPECT_EQ(ok.grpc_status, 0) << ok.grpc_message;
}

TEST_F(LimitsTest, IdleConnectionIsClosedButOneHoldingAnEventStreamIsNot) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  backend_.onStream(kEvents, [&](FakeCall&, const std::function<bool(const std::string&)>& write) {
    v1::ContainerEventResponse ev;
    ev.set_container_id("c0");
    if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
    released.wait_for(10s);
    ev.set_container_id("c1");
    if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
    return grpc::Status::OK;
  });
  backend_.start();
  Config config = proxyConfig();
  config.idle_timeout = 300ms;
  startProxy(nullptr, config);

  // kubelet's GetContainerEvents: one stream open far past the idle timeout.
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto reader = stub->GetContainerEvents(&ctx, v1::GetEventsRequest());
  v1::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  EXPECT_EQ(ev.container_id(), "c0");

  // A connection whose only call has ended is closed once idle.
  EXPECT_TRUE(idleConnectionClosed()) << "an idle connection gets GOAWAY and is closed";
  // Two more, one after the other: the event stream has outlived the idle
  // timeout three times over, and still delivers.
  EXPECT_TRUE(idleConnectionClosed());
  EXPECT_TRUE(idleConnectionClosed());
  release.set_value();
  ASSERT_TRUE(reader->Read(&ev)) << "the event stream was cut";
  EXPECT_EQ(ev.container_id(), "c1");
  EXPECT_FALSE(reader->Read(&ev));
  grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(LimitsTest, ConnectionsPastTheLimitAreClosedAtOnceAndLetInWhenOthersLeave) {
  backend_.start();
  Config config = proxyConfig();
  config.max_connections = 3;
  startProxy(nullptr, config);
  std::vector<std::unique_ptr<RawH2Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<RawH2Client>(sock()));
    RawH2Result r = clients.back()->call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    ASSERT_EQ(r.grpc_status, 0) << r.grpc_message;
  }
  int fourth = connectRaw(sock());
  ASSERT_GE(fourth, 0);
  EXPECT_TRUE(closedByPeer(fourth, 3s)) << "a connection past the limit is closed at once";
  ::close(fourth);
  // The three still work.
  for (auto& c : clients) {
    RawH2Result r = c->call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    EXPECT_EQ(r.grpc_status, 0) << r.grpc_message;
  }
  clients.pop_back();
  EXPECT_TRUE(eventually([&] {
    RawH2Client next(sock());
    return next.call(RawH2Client::grpcHeaders(kVersion), versionRequest()).grpc_status == 0;
  })) << "a connection is let in once one of the three has left";
}

TEST_F(LimitsTest, RuntimesReplyHeadersAreBoundedAsRequestsAre) {
  // What crihookd keeps of a runtime's reply headers: those on its side
  // connection (a call crihookd answers, here one on a connection that
  // opened while the runtime was down, which crihookd stands in for; the
  // runtime's blocks on kubelet's own connection go through as they came,
  // capped by kubelet's SETTINGS_MAX_HEADER_LIST_SIZE).
  startProxy();
  RawH2Client client(sock());
  RawH2Result down =
      client.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("hi"));
  ASSERT_EQ(down.grpc_status, 14) << down.grpc_message;
  // The runtime is hostile this time: a 3 KiB header block that decodes to
  // ~300 KB.
  RawH2Backend raw(dir_.file("backend.sock"));
  RawH2Result r =
      client.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/HugeHeaders"), "");
  ASSERT_TRUE(r.closed);
  EXPECT_EQ(r.grpc_status, kInternal);
  EXPECT_THAT(r.grpc_message, HasSubstr("reply headers pass 65536 bytes"));
  EXPECT_LT(r.grpc_message.size(), 1024u);
  EXPECT_TRUE(eventually([&] { return proxy_->heldHeaderBytes() == 0; }));
  // The connection goes on: the runtime's next reply is relayed.
  RawH2Result echo =
      client.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("hi"));
  EXPECT_EQ(echo.grpc_status, 0) << echo.grpc_message;
  EXPECT_EQ(echo.body, grpcFrame("hi"));
}

// utime + stime of `pid`, in clock ticks.
long cpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start at ")".
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

size_t linesContaining(const std::string& text, const std::string& what) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

TEST_F(LimitsTest, OutOfDescriptorsTheDaemonBacksOffInsteadOfSpinning) {
  backend_.start();
  const std::string config_path = dir_.file("crihook.toml");
  std::ofstream(config_path) << "[server]\nlisten = \"" << sock() << "\"\n"
                             << "[backend]\nendpoint = \"unix://" << dir_.file("backend.sock")
                             << "\"\n[hooks]\nstate_dir = \"\"\nhookserver_dir = \"\"\n";
  const std::string log = dir_.file("crihookd.log");
  // 64 descriptors: start-up takes some 20, the rest go to connections.
  ChildProcess daemon("/usr/bin/prlimit",
                      {"--nofile=64:64", CRIHOOKD_BINARY, "--config", config_path}, log);
  ASSERT_TRUE(waitForFile(sock(), 5s)) << readFile(log);
  std::vector<int> fds;
  for (int i = 0; i < 100; ++i) {
    int fd = connectRaw(sock());
    if (fd >= 0) fds.push_back(fd);
  }
  ASSERT_TRUE(eventually([&] { return readFile(log).find("accept") != std::string::npos; }))
      << "the daemon never ran out of descriptors:\n"
      << readFile(log);
  const size_t lines_before = linesContaining(readFile(log), "accept");
  const long ticks_before = cpuTicks(daemon.pid());
  std::this_thread::sleep_for(1s);  // the span the spinning is measured over
  const long ticks = cpuTicks(daemon.pid()) - ticks_before;
  const size_t lines = linesContaining(readFile(log), "accept") - lines_before;
  EXPECT_LE(ticks, sysconf(_SC_CLK_TCK) / 10) << "CPU time over 1 s at the descriptor limit";
  EXPECT_LE(lines, 3u) << "accept warnings logged over 1 s";

  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(eventually(
      [&] {
        try {
          RawH2Client client(sock());
          return client.call(RawH2Client::grpcHeaders(kVersion), versionRequest()).grpc_status == 0;
        } catch (const std::exception&) {
          return false;
        }
      },
      10s))
      << "served again once descriptors are free";
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0);
}

}  // namespace
}  // namespace crihook::testing
