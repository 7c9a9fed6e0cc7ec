// HTTP/2 edge cases a gRPC server library will not produce on demand, from a
// runtime that speaks raw HTTP/2: resets, trailers-only replies, GOAWAY.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"

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
  ASSERT_TRUE(
      call("/runtime.v1.RuntimeService/GoawayEcho", "last on this connection", &reply, ch).ok());
  EXPECT_EQ(reply, "last on this connection");
  // The raw backend serves one connection at a time: the next call only
  // succeeds if crihookd let the old connection go and opened another.
  ASSERT_TRUE(call("/runtime.v1.RuntimeService/Echo", "on a new one", &reply, ch).ok());
  EXPECT_EQ(reply, "on a new one");
  EXPECT_EQ(raw.connections(), 2);
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

}  // namespace
}  // namespace crihook::testing
