// HTTP/2 edge cases a gRPC server library will not produce on demand, from a
// runtime that speaks raw HTTP/2: resets, trailers-only replies, GOAWAY.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "cri-api/runtime_v1.pb.h"
#include "proxy/ping_acks.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class H2EdgeTest : public ProxyFixture {
 protected:
  grpc::Status call(const std::string& method, const std::string& request, std::string* reply,
                    const std::shared_ptr<grpc::Channel>& ch) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return genericUnary(ch, &ctx, method, request, reply);
  }
  // After the runtime's first connection ended: the next call succeeds, on
  // a second connection.
  void expectTheNextCallOnANewConnection(const RawH2Backend& raw,
                                         const std::shared_ptr<grpc::Channel>& ch) {
    std::string reply;
    const grpc::Status next = call("/runtime.v1.RuntimeService/Echo", "on a new one", &reply, ch);
    ASSERT_TRUE(next.ok()) << next.error_message();
    EXPECT_EQ(reply, "on a new one");
    EXPECT_EQ(raw.connections(), 2);
  }
};

TEST_F(H2EdgeTest, BackendResetReachesTheCallerAsTheSameStatus) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  auto ch = proxyChannel();
  std::string reply;
  EXPECT_EQ(call("/runtime.v1.RuntimeService/ResetCancel", "x", &reply, ch).error_code(),
            grpc::StatusCode::CANCELLED);
  EXPECT_EQ(call("/runtime.v1.RuntimeService/ResetInternal", "x", &reply, ch).error_code(),
            grpc::StatusCode::INTERNAL);
  // The connection and crihookd are fine afterwards.
  ASSERT_TRUE(call("/runtime.v1.RuntimeService/Echo", "still here", &reply, ch).ok());
  EXPECT_EQ(reply, "still here");
}

TEST_F(H2EdgeTest, TrailersOnlyReplyIsRelayedAsIs) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  std::string reply;
  grpc::Status s = call("/runtime.v1.RuntimeService/TrailersOnly", "x", &reply, proxyChannel());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "denied by raw backend");
}

TEST_F(H2EdgeTest, BackendGoawayMovesLaterCallsToANewConnection) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  auto ch = proxyChannel();
  std::string reply;
  const grpc::Status last =
      call("/runtime.v1.RuntimeService/GoawayEcho", "last on this connection", &reply, ch);
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_EQ(reply, "last on this connection");
  // The old connection takes no new stream after its GOAWAY: the next call
  // only succeeds on a connection opened after it.
  expectTheNextCallOnANewConnection(raw, ch);
}

// A runtime that shuts down right behind its last reply: a frame crihookd
// writes while the reply is still coming (here the ACK of the runtime's
// SETTINGS) fails, EPIPE. The reply, sent before the runtime closed, still
// reaches the caller; the connection ends with it (the CI's flake of the
// test above: "backend connection lost: write: Broken pipe").
TEST_F(H2EdgeTest, AReplySentBeforeTheRuntimeClosedArrivesThoughAWriteFailed) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  auto ch = proxyChannel();
  std::string reply;
  const grpc::Status last =
      call("/runtime.v1.RuntimeService/DeafGoawayEcho", "sent before the close", &reply, ch);
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_EQ(reply, "sent before the close");
  expectTheNextCallOnANewConnection(raw, ch);
}

// The same runtime, but nothing follows its SETTINGS: no reply, no end of
// the connection. The call fails with the write's error once crihookd stops
// waiting (kLingerAfterFinish), well inside the caller's deadline, and the
// next call gets a new connection.
TEST_F(H2EdgeTest, ARuntimeThatStopsReadingAndNeverEndsFailsItsCallsWithTheWriteError) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  auto ch = proxyChannel();
  std::string reply;
  const grpc::Status lost = call("/runtime.v1.RuntimeService/DeafSilent", "x", &reply, ch);
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(lost.error_message(), "crihookd: backend connection lost: write: Broken pipe");
  expectTheNextCallOnANewConnection(raw, ch);
}

TEST_F(H2EdgeTest, InterceptedCallsWorkAgainstAPlainHttp2Peer) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  std::string reply;
  grpc::Status s = call("/runtime.v1.RuntimeService/StopContainer", req.SerializeAsString(), &reply,
                        proxyChannel());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, req.SerializeAsString()) << "the echo of the exact bytes sent";
}

// A 1xx reply (:status 100) before the runtime's answer is informational
// (RFC 9113 8.1): the answer after it is the call's reply, headers, message
// and trailers, and a trailers-only answer after it carries the status.
TEST_F(H2EdgeTest, AnInterceptedCallsReplyAfterAnInformationalOneIsTheReply) {
  RawH2Backend raw(dir_.file("backend.sock"));
  raw.informationalFirst(true);
  startProxy();
  auto ch = proxyChannel();
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  std::string reply;
  grpc::Status s =
      call("/runtime.v1.RuntimeService/StopContainer", req.SerializeAsString(), &reply, ch);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, req.SerializeAsString());

  raw.answerAs("TrailersOnly");
  s = call("/runtime.v1.RuntimeService/StopContainer", req.SerializeAsString(), &reply, ch);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "denied by raw backend");
}

}  // namespace
}  // namespace crihook::testing

namespace crihook::testing {
namespace {

std::string frame(const std::string& message) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + message;
}

TEST_F(H2EdgeTest, SeveralMessagesIntoAUnaryMethodAreRefusedAndNeverBufferedPastTheLimit) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  const std::string create = "/runtime.v1.RuntimeService/CreateContainer";
  runtime::v1::CreateContainerRequest req;
  req.set_pod_sandbox_id("sb");
  RawH2Reply two = rawH2Call(dir_.file("crihook.sock"), create,
                             frame(req.SerializeAsString()) + frame("second"));
  EXPECT_EQ(two.grpc_status, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(two.grpc_message, HasSubstr("expected exactly one gRPC message"));
  // Three 6 MiB messages: each under the 16 MiB limit, together over it.
  const std::string chunk = frame(std::string(6 << 20, 'x'));
  RawH2Reply big = rawH2Call(dir_.file("crihook.sock"), create, chunk + chunk + chunk);
  EXPECT_EQ(big.grpc_status, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_THAT(big.grpc_message, HasSubstr("for a unary method"));
  EXPECT_EQ(raw.streams(), 0) << "nothing reached the runtime";
}

// PING ACKs (grpc-go, kubelet's gRPC, PINGs with nearly every message it
// receives): an ACK waits for the reply and goes out in its write, not in a
// write of its own.
class PingTest : public H2EdgeTest {
 protected:
  void SetUp() override {
    H2EdgeTest::SetUp();
    raw_ = std::make_unique<RawH2Backend>(dir_.file("backend.sock"));
    startProxy();
    client_ = std::make_unique<RawH2Client>(dir_.file("crihook.sock"));
    // The connection to the runtime is open before the PINGs.
    ASSERT_EQ(client_->call(kEcho, grpcFrame("warm")).grpc_status, 0);
  }
  // Runs the client until `n` ACKs have come (or it is no longer usable),
  // 2 s at most.
  void awaitAcks(size_t n) {
    eventually(
        [&] {
          if (client_->pingAcks().size() >= n || !client_->usable()) return true;
          client_->run(5ms);
          return false;
        },
        2s);
  }

  const RawHeaders kEcho = RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo");
  std::unique_ptr<RawH2Backend> raw_;
  std::unique_ptr<RawH2Client> client_;
};

TEST_F(PingTest, AnAckRidesInTheWriteOfTheReply) {
  // The runtime answers 0.5 ms after the request: an ACK sent at once would
  // come a read before the reply. A machine busy enough to make a reply
  // later than the ACK's delay sends that ACK alone: most calls, not all,
  // must show it.
  const RawHeaders slow = RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/SlowEcho");
  int together = 0;
  for (uint64_t i = 1; i <= 20; ++i) {
    client_->ping(i);
    const RawH2Result r = client_->wait(client_->send(slow, grpcFrame("x")));
    ASSERT_EQ(r.grpc_status, 0);
    awaitAcks(i);
    ASSERT_EQ(client_->pingAcks().size(), i);
    EXPECT_EQ(client_->pingAcks().back().opaque, i);
    together += client_->pingAcks().back().read == r.headers_read;
  }
  EXPECT_GE(together, 10) << "of 20 ACKs, " << 20 - together
                          << " came in a read of their own, before the reply";
}

TEST_F(PingTest, WithNoCallWaitingAnAckGoesAtOnce) {
  // No reply is coming to carry it (grpc-go PINGs after each reply; a
  // kubelet whose calls are spaced sends that PING alone): waiting would
  // only add a wake-up. A busy machine may make one ACK late; one of five
  // quicker than the delay shows it was not held back.
  bool quick = false;
  for (uint64_t i = 1; i <= 5 && !quick; ++i) {
    const auto sent = client_->ping(i);
    awaitAcks(i);
    ASSERT_EQ(client_->pingAcks().size(), i);
    quick = client_->pingAcks().back().at - sent < relay::kPingAckDelay;
  }
  EXPECT_TRUE(quick) << "every ACK waited for the delay with no call to ride on";
}

TEST_F(PingTest, AnAckWaitingForASlowReplyGoesAloneAfterTheDelay) {
  // A call the runtime does not answer: the ACK waits the delay, no longer.
  const int streams = raw_->streams();
  const int32_t silent =
      client_->send(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Silent"), grpcFrame("x"));
  // The call has reached the runtime (a PING sent with it could arrive
  // first: nghttp2 sends PINGs ahead of other frames).
  ASSERT_TRUE(eventually([&] {
    client_->run(1ms);
    return raw_->streams() > streams;
  }));
  const auto sent = client_->ping(42);
  awaitAcks(1);
  ASSERT_EQ(client_->pingAcks().size(), 1u);
  EXPECT_EQ(client_->pingAcks()[0].opaque, 42u);
  const auto took = client_->pingAcks()[0].at - sent;
  EXPECT_GE(took, relay::kPingAckDelay);
  EXPECT_LT(took, 1s);
  EXPECT_FALSE(client_->result(silent).closed);
}

TEST_F(PingTest, ManyPingsAtOnceAreAllAnswered) {
  client_->pingFlood(100);
  awaitAcks(100);
  EXPECT_EQ(client_->pingAcks().size(), 100u);
  EXPECT_EQ(client_->call(kEcho, grpcFrame("after")).grpc_status, 0);
}

TEST_F(PingTest, APeerThatSendsPingsAndNeverReadsLosesOnlyItsConnection) {
  // 100 a millisecond, never read: crihookd's socket to it fills, and no
  // flush can send the ACKs. They must not pile up without bound: past the
  // owed ones kept, they go to nghttp2, whose bound on queued ACKs ends the
  // connection. (One read of 5000 at once would pass that bound without
  // the socket ever filling.)
  size_t sent = 0;
  for (int batch = 0; batch < 2000 && client_->usable(); ++batch) {
    client_->pingFlood(100);
    sent += 100;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(client_->usable()) << sent << " PINGs sent, the connection still open";
  RawH2Client other(dir_.file("crihook.sock"));
  EXPECT_EQ(other.call(kEcho, grpcFrame("other")).grpc_status, 0);
}

}  // namespace
}  // namespace crihook::testing
