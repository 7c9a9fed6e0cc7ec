// HTTP/2 edge cases a gRPC server library will not produce on demand, from a
// runtime that speaks raw HTTP/2: resets, trailers-only replies, GOAWAY.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "proxy_fixture.h"
#include "raw_h2_backend.h"
#include "runtime_v1.pb.h"

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
  EXPECT_EQ(call("/runtime.v1.RuntimeService/ResetCancel", "x", &reply, ch).error_code(), grpc::StatusCode::CANCELLED);
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
  ASSERT_TRUE(call("/runtime.v1.RuntimeService/GoawayEcho", "last on this connection", &reply, ch).ok());
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
  grpc::Status s = call("/runtime.v1.RuntimeService/StopContainer", req.SerializeAsString(), &reply, proxyChannel());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, req.SerializeAsString()) << "the echo of the exact bytes sent";
}

}  // namespace
}  // namespace crihook::testing

namespace crihook::testing {
namespace {

// Streams `messages` into one call of `method` and returns the final status.
grpc::Status streamInto(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                        const std::vector<std::string>& messages) {
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
  };
  // Owns itself: gRPC may touch a reactor until OnDone returns.
  class Writer : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    Writer(std::vector<std::string> m, std::shared_ptr<Outcome> o) : messages_(std::move(m)), outcome_(std::move(o)) {
      ctx.set_deadline(std::chrono::system_clock::now() + 20s);
    }
    void start() {
      StartCall();
      StartRead(&in_);
      next();
    }
    void OnWriteDone(bool ok) override {
      if (ok) next();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&in_);
    }
    void OnDone(const grpc::Status& s) override {
      {
        std::lock_guard lock(outcome_->mu);
        outcome_->status = s;
        outcome_->done = true;
      }
      outcome_->cv.notify_all();
      delete this;
    }
    grpc::ClientContext ctx;

   private:
    void next() {
      if (i_ == messages_.size()) {
        StartWritesDone();
        return;
      }
      grpc::Slice slice(messages_[i_++]);
      out_ = grpc::ByteBuffer(&slice, 1);
      StartWrite(&out_);
    }
    std::vector<std::string> messages_;
    size_t i_ = 0;
    grpc::ByteBuffer out_, in_;
    std::shared_ptr<Outcome> outcome_;
  };
  auto outcome = std::make_shared<Outcome>();
  grpc::GenericStub stub(ch);
  auto* w = new Writer(messages, outcome);
  stub.PrepareBidiStreamingCall(&w->ctx, method, grpc::StubOptions(), w);
  w->start();
  std::unique_lock lock(outcome->mu);
  outcome->cv.wait(lock, [&] { return outcome->done; });
  return outcome->status;
}

TEST_F(H2EdgeTest, SeveralMessagesIntoAUnaryMethodAreRefusedAndNeverBufferedPastTheLimit) {
  RawH2Backend raw(dir_.file("backend.sock"));
  startProxy();
  const std::string kCreate = "/runtime.v1.RuntimeService/CreateContainer";
  runtime::v1::CreateContainerRequest req;
  req.set_pod_sandbox_id("sb");
  grpc::Status two = streamInto(proxyChannel(), kCreate, {req.SerializeAsString(), "second"});
  EXPECT_EQ(two.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(two.error_message(), HasSubstr("expected exactly one gRPC message"));
  // Three 6 MiB messages: each under the 16 MiB limit, together over it.
  std::string chunk(6 << 20, 'x');
  grpc::Status big = streamInto(proxyChannel(), kCreate, {chunk, chunk, chunk});
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(big.error_message(), HasSubstr("for a unary method"));
  EXPECT_EQ(raw.streams(), 0) << "nothing reached the runtime";
}

}  // namespace
}  // namespace crihook::testing
