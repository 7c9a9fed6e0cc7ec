// What only the transparent relay ([server] relay = "transparent",
// proxy/transparent.h) does, against a raw HTTP/2 client and runtime
// (nghttp2, not crihookd's code): the SETTINGS kubelet sees are the
// runtime's, filtered and capped; a reply crihookd writes itself is held to
// kubelet's flow-control windows; the runtime going away ends kubelet's
// connection with GOAWAY and a status for the call in flight; a connection
// that opened while the runtime was down is served by the terminating relay
// and told to reconnect once the runtime answers. The relay's shared
// behaviour is the other suites' runs (the transparent relay is the
// default; their *_terminating runs are the other relay's).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;

std::string grpcFrame(const std::string& message) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + message;
}

class TransparentTest : public ProxyFixture {
 protected:
  void startTransparent() {
    Config c = proxyConfig();
    c.relay = "transparent";
    startProxy(nullptr, c);
  }
};

TEST_F(TransparentTest, KubeletSeesTheRuntimesSettingsCappedByCrihookds) {
  RawH2Backend runtime(dir_.file("backend.sock"));  // nghttp2: no header list cap of its own
  startTransparent();
  RawH2Client kubelet(dir_.file("crihook.sock"));
  RawH2Result r =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("hello"));
  ASSERT_TRUE(r.closed);
  EXPECT_EQ(r.grpc_status, 0);
  // The runtime advertised none; crihookd's own cap is added, as it
  // refuses past it.
  EXPECT_EQ(kubelet.peerMaxHeaderListSize(), 64u << 10);
  // The runtime took the call on kubelet's own connection, not on a side one.
  EXPECT_EQ(runtime.connections(), 1);
}

TEST_F(TransparentTest, AnInterceptedReplyLargerThanKubeletsWindowIsHeldToIt) {
  // StopContainer is intercepted: crihookd answers kubelet itself, with the
  // reply it got on its side connection. 200 KB is three times kubelet's
  // 64 KiB connection and stream windows (nghttp2's defaults): the reply
  // must come in pieces, each after kubelet's WINDOW_UPDATE (the client
  // counts what it granted and what came).
  RawH2Backend runtime(dir_.file("backend.sock"));  // echoes the request
  startTransparent();
  RawH2Client kubelet(dir_.file("crihook.sock"));
  runtime::v1::StopContainerRequest req;
  req.set_container_id(std::string(200000, 'c'));
  const std::string body = grpcFrame(req.SerializeAsString());
  for (int i = 0; i < 2; ++i) {  // twice: the windows must come back whole
    RawH2Result r =
        kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/StopContainer"), body);
    ASSERT_TRUE(r.closed) << "round " << i;
    EXPECT_FALSE(r.reset) << "round " << i << ": reset " << r.reset_code;
    EXPECT_EQ(r.grpc_status, 0) << r.grpc_message;
    EXPECT_EQ(r.body, body) << "round " << i << ": the echo, whole";
    EXPECT_FALSE(kubelet.windowOverrun()) << "round " << i << ": sent past kubelet's window";
  }
  // A relayed call on the same connection still works.
  RawH2Result r =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("after"));
  EXPECT_EQ(r.grpc_status, 0);
  EXPECT_EQ(r.body, grpcFrame("after"));
  EXPECT_EQ(runtime.connections(), 2) << "kubelet's, and crihookd's side connection";
}

TEST_F(TransparentTest, TheRuntimeGoingAwayEndsKubeletsConnectionWithAStatus) {
  RawH2Backend runtime(dir_.file("backend.sock"));
  startTransparent();
  RawH2Client kubelet(dir_.file("crihook.sock"));
  // The runtime hangs up on this call: it is answered UNAVAILABLE, and
  // kubelet is told to go elsewhere (GOAWAY).
  RawH2Result r =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Hangup"), grpcFrame("x"));
  ASSERT_TRUE(r.closed);
  EXPECT_EQ(r.grpc_status, 14) << r.grpc_message;
  EXPECT_THAT(r.grpc_message, ::testing::HasSubstr("backend connection lost"));
  EXPECT_TRUE(kubelet.goawayReceived() || !kubelet.usable());
  // A new kubelet connection gets a new runtime connection.
  RawH2Client again(dir_.file("crihook.sock"));
  RawH2Result r2 =
      again.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("again"));
  EXPECT_EQ(r2.grpc_status, 0);
  EXPECT_EQ(r2.body, grpcFrame("again"));
}

TEST_F(TransparentTest, AConnectionOpenedWhileTheRuntimeWasDownReconnectsOnceItAnswers) {
  startTransparent();  // the runtime is not there yet
  RawH2Client kubelet(dir_.file("crihook.sock"));
  RawH2Result down =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("down"));
  EXPECT_EQ(down.grpc_status, 14) << down.grpc_message;
  EXPECT_EQ(proxy_->terminatingConnections(), 1) << "the terminating relay stands in";
  EXPECT_FALSE(kubelet.goawayReceived());

  RawH2Backend runtime(dir_.file("backend.sock"));
  RawH2Result up =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("up"));
  EXPECT_EQ(up.grpc_status, 0) << up.grpc_message;
  EXPECT_EQ(up.body, grpcFrame("up")) << "the call that found the runtime back is answered";
  EXPECT_TRUE(kubelet.goawayReceived()) << "and kubelet is told to reconnect";

  RawH2Client next(dir_.file("crihook.sock"));
  RawH2Result r =
      next.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("next"));
  EXPECT_EQ(r.grpc_status, 0) << r.grpc_message;
  // The old connection ends once its calls have (crihookd closes it after
  // its GOAWAY); the new one is the transparent relay's.
  for (int i = 0; i < 500 && proxy_->terminatingConnections() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(proxy_->terminatingConnections(), 0);
  EXPECT_GE(proxy_->connections(), 1);
  RawH2Result again =
      next.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("again"));
  EXPECT_EQ(again.grpc_status, 0) << again.grpc_message;
  EXPECT_FALSE(next.goawayReceived());
}

}  // namespace
}  // namespace crihook::testing
