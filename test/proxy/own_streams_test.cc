// OwnStreams (proxy/own_streams.h): the streams crihookd answers itself.
//
// OwnStreamsTest drives one on a loop this test runs by hand, its connection
// a fake host that keeps what would go to kubelet, its side connection to a
// runtime that is not there or to RawH2Backend (nghttp2): refusals, the
// intercepted path and its limits, kubelet's resets, a reply held to
// kubelet's windows, a call forwarded as it comes.
//
// StandInTest goes through crihookd's Server: a connection accepted while
// the runtime is down, on which crihookd stands in for the runtime, once the
// runtime is back (every call goes on the side connection as it comes, both
// ways: what the terminating relay, which served such connections before,
// did for every call).

#include "proxy/own_streams.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "cri-api/runtime_v1.pb.h"
#include "cri/interceptor.h"
#include "proxy/event_loop.h"
#include "proxy/h2_frame.h"
#include "proxy/hpack.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;
using relay::h2::FrameType;
using ::testing::HasSubstr;
namespace h2 = relay::h2;

constexpr const char* kStopContainer = "/runtime.v1.RuntimeService/StopContainer";

// An Interceptor whose pre-stage refuses every call.
class Refusing final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall>, std::function<void(absl::Status)> done) override {
    done(absl::PermissionDeniedError("refused by the test"));
  }
  void post(std::shared_ptr<InterceptedCall>, std::function<void()> done) override { done(); }
};

class OwnStreamsTest : public ::testing::Test, public relay::OwnStreamsHost {
 protected:
  struct Frame {
    h2::FrameHeader header;
    std::string payload;
  };

  OwnStreamsTest() {
    ctx_.backend_path = dir_.file("backend.sock");
    ctx_.backend_endpoint = "unix://" + ctx_.backend_path;
    ctx_.interceptor = &pass_;
    ctx_.log =
        std::make_shared<spdlog::logger>("proxy", std::make_shared<spdlog::sinks::null_sink_mt>());
    auto loop = relay::EventLoop::create();
    EXPECT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    loop_->poll();  // this thread is the loop's from here on (EventLoop::inLoop)
    streams_ = std::make_unique<relay::OwnStreams>(*this, *loop_, ctx_, ledger_);
  }
  ~OwnStreamsTest() override {
    streams_->closeAll();
    settle();
    EXPECT_EQ(ctx_.active_calls.load(), 0);
    EXPECT_EQ(ctx_.buffered_bytes.load(), 0);
    EXPECT_EQ(ctx_.header_bytes.load(), 0);
  }

  // OwnStreamsHost: the connection.
  void toKubelet(std::string_view frames) override { kubelet_.append(frames); }
  void flushNow() override {}
  void flushSoon() override {}
  bool closed() const override { return false; }
  std::shared_ptr<void> keepAlive() override { return alive_; }
  void onRuntimeAnswered() override { ++runtime_answered_; }
  void onOwnStreamEnded() override { ++ended_; }

  void settle() {
    for (int i = 0; i < 100 && loop_->poll() > 0; ++i) {
    }
  }
  // Runs the loop until `cond`, the side connection's runtime on its own
  // thread.
  template <typename Cond>
  bool runUntil(Cond cond) {
    return eventually([&] {
      loop_->poll();
      return cond();
    });
  }

  static relay::Headers request(const std::string& path) {
    return {{":method", "POST"},
            {":scheme", "http"},
            {":path", path},
            {":authority", "localhost"},
            {"content-type", "application/grpc"},
            {"te", "trailers"}};
  }
  static std::string message(const std::string& bytes) {
    const auto n = static_cast<uint32_t>(bytes.size());
    return std::string{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)} +
           bytes;
  }
  // kubelet's whole request on own stream `id`, one DATA frame.
  void send(uint32_t id, const std::string& body) {
    streams_->onDataHeader(id, static_cast<uint32_t>(body.size()), true);
    streams_->onData(id, body, true);
  }

  std::vector<Frame> frames() const {
    std::vector<Frame> out;
    std::string_view bytes = kubelet_;
    while (bytes.size() >= h2::kFrameHeaderBytes) {
      auto h = h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
      out.push_back({h, std::string(bytes.substr(h2::kFrameHeaderBytes, h.length))});
      bytes.remove_prefix(h2::kFrameHeaderBytes + h.length);
    }
    return out;
  }
  // The fields of every header block kubelet got, in order (crihookd's are
  // literals: one decoder reads them all).
  std::vector<std::vector<std::pair<std::string, std::string>>> blocks() const {
    std::vector<std::vector<std::pair<std::string, std::string>>> out;
    relay::hpack::Decoder decoder;
    for (const Frame& f : frames()) {
      if (f.header.type != FrameType::kHeaders) continue;
      auto& fields = out.emplace_back();
      auto st = decoder.decode(f.payload, [&](std::string_view n, std::string_view v) {
        fields.emplace_back(std::string(n), std::string(v));
      });
      EXPECT_TRUE(st.ok()) << st;
    }
    return out;
  }
  static std::string field(const std::vector<std::pair<std::string, std::string>>& fields,
                           const std::string& name) {
    for (const auto& [n, v] : fields)
      if (n == name) return v;
    return "(none)";
  }
  std::string dataOf(uint32_t id) const {
    std::string out;
    for (const Frame& f : frames())
      if (f.header.type == FrameType::kData && f.header.stream_id == id) out += f.payload;
    return out;
  }
  // The WINDOW_UPDATE increments kubelet got for `stream` (0: the connection).
  uint64_t credited(uint32_t stream) const {
    uint64_t n = 0;
    for (const Frame& f : frames())
      if (f.header.type == FrameType::kWindowUpdate && f.header.stream_id == stream)
        n += h2::windowIncrementOf(f.payload).value_or(0);
    return n;
  }
  bool endedOn(uint32_t id) const {
    for (const Frame& f : frames())
      if (f.header.stream_id == id &&
          (f.header.has(h2::flags::kEndStream) || f.header.type == FrameType::kRstStream) &&
          f.header.type != FrameType::kWindowUpdate)
        return true;
    return false;
  }

  TempDir dir_;
  PassThroughInterceptor pass_;
  RelayContext ctx_;
  std::unique_ptr<relay::EventLoop> loop_;
  relay::FlowLedger ledger_;
  std::unique_ptr<relay::OwnStreams> streams_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::string kubelet_;
  int runtime_answered_ = 0;
  int ended_ = 0;
};

TEST_F(OwnStreamsTest, ARefusedRequestIsAnsweredTrailersOnlyAndForgotten) {
  relay::RequestRefusal refusal{0, 415, absl::InvalidArgumentError("not gRPC"), "no content-type"};
  streams_->refuse(1, request("/runtime.v1.RuntimeService/Version"), refusal, true);
  auto b = blocks();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(field(b[0], ":status"), "415");
  EXPECT_EQ(field(b[0], "grpc-status"), "3");
  EXPECT_TRUE(endedOn(1));
  EXPECT_TRUE(streams_->empty());
  EXPECT_EQ(ended_, 1);
  EXPECT_EQ(ctx_.active_calls.load(), 0);
}

TEST_F(OwnStreamsTest, ARefusalWhileKubeletStillSendsResetsTheStreamAndKeepsItAWhile) {
  relay::RequestRefusal refusal{0, 200, absl::UnimplementedError("bad method"), "bad method"};
  streams_->refuse(1, request("/x"), refusal, false);
  const auto f = frames();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].header.type, FrameType::kHeaders);
  EXPECT_EQ(f[1].header.type, FrameType::kRstStream);
  EXPECT_EQ(h2::rstStreamCodeOf(f[1].payload).value_or(99), h2::error::kNoError)
      << "as grpc-go's server ends a stream it answered while the client sends";
  EXPECT_TRUE(streams_->contains(1)) << "kept: kubelet's frames on their way are dropped";
  streams_->onTick(relay::Clock::now());
  EXPECT_TRUE(streams_->contains(1));
  streams_->onTick(relay::Clock::now() + relay::kZombieLinger);
  EXPECT_FALSE(streams_->contains(1));
}

TEST_F(OwnStreamsTest, AResetRefusalResetsTheStreamWithItsCode) {
  relay::RequestRefusal refusal{h2::error::kProtocolError, 200, {}, "malformed"};
  streams_->refuse(1, request("/x"), refusal, true);
  const auto f = frames();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].header.type, FrameType::kRstStream);
  EXPECT_EQ(h2::rstStreamCodeOf(f[0].payload).value_or(0), h2::error::kProtocolError);
  EXPECT_TRUE(streams_->empty());
}

TEST_F(OwnStreamsTest, AnInterceptedCallIsCreditedAndAnsweredUnavailableWithoutARuntime) {
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  const std::string body = message(req.SerializeAsString());
  streams_->intercept(1, request(kStopContainer), {}, *findInterceptedMethod(kStopContainer),
                      false);
  send(1, body);
  EXPECT_EQ(credited(0), body.size()) << "crihookd took the bytes: kubelet is credited";
  settle();  // the side connection's connect fails
  auto b = blocks();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(field(b[0], "grpc-status"), "14");
  EXPECT_THAT(field(b[0], "grpc-message"), HasSubstr("backend unix://"));
  EXPECT_THAT(field(b[0], "grpc-message"), HasSubstr("unavailable"));
  EXPECT_TRUE(streams_->empty());
}

TEST_F(OwnStreamsTest, APreStageRefusalIsTheAnswer) {
  Refusing refusing;
  ctx_.interceptor = &refusing;
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  streams_->intercept(1, request(kStopContainer), {}, *findInterceptedMethod(kStopContainer),
                      false);
  send(1, message(req.SerializeAsString()));
  settle();  // the stage's completion comes back on the loop
  auto b = blocks();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(field(b[0], "grpc-status"), "7");
  EXPECT_EQ(field(b[0], "grpc-message"), "refused by the test");
}

TEST_F(OwnStreamsTest, ARequestNotWholeWithinTheRequestTimeoutIsAnsweredDeadlineExceeded) {
  ctx_.limits.request_timeout = 1000ms;
  streams_->intercept(1, request(kStopContainer), {}, *findInterceptedMethod(kStopContainer),
                      false);
  streams_->onTick(relay::Clock::now());
  EXPECT_TRUE(blocks().empty());
  streams_->onTick(relay::Clock::now() + 1000ms);
  auto b = blocks();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(field(b[0], "grpc-status"), "4");
  EXPECT_THAT(field(b[0], "grpc-message"), HasSubstr("server.request_timeout"));
}

TEST_F(OwnStreamsTest, KubeletsResetEndsTheCallCancelled) {
  streams_->intercept(1, request(kStopContainer), {}, *findInterceptedMethod(kStopContainer),
                      false);
  EXPECT_EQ(ctx_.active_calls.load(), 1);
  streams_->onReset(1);
  EXPECT_TRUE(streams_->empty());
  EXPECT_EQ(ctx_.active_calls.load(), 0);
  EXPECT_EQ(ended_, 1);
  EXPECT_TRUE(kubelet_.empty()) << "nothing is written on a stream kubelet reset";
}

TEST_F(OwnStreamsTest, AnInterceptedReplyIsHeldToKubeletsWindows) {
  RawH2Backend runtime(ctx_.backend_path);  // echoes the request
  runtime::v1::StopContainerRequest req;
  req.set_container_id(std::string(150000, 'c'));
  const std::string body = message(req.SerializeAsString());
  streams_->intercept(1, request(kStopContainer), {}, *findInterceptedMethod(kStopContainer),
                      false);
  send(1, body);
  // kubelet's windows are HTTP/2's 65,535 bytes until it grants more.
  ASSERT_TRUE(runUntil([&] { return dataOf(1).size() == 65535; })) << dataOf(1).size();
  EXPECT_EQ(runtime_answered_, 1);
  settle();
  EXPECT_EQ(dataOf(1).size(), 65535u) << "no byte past kubelet's windows";
  EXPECT_FALSE(endedOn(1));
  for (int i = 0; i < 3; ++i) {
    (void)ledger_.forwardedIncrement(65535);
    streams_->onWindowUpdate(1, 65535);
  }
  EXPECT_EQ(dataOf(1), body) << "the echo, whole, once kubelet's windows allow it";
  EXPECT_TRUE(endedOn(1));
  auto b = blocks();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(field(b[1], "grpc-status"), "0");
}

TEST_F(OwnStreamsTest, AForwardedCallGoesAsItComesAndKubeletIsCreditedAsTheRuntimeTakesIt) {
  RawH2Backend runtime(ctx_.backend_path);  // echoes the request
  const std::string body = message(std::string(1000, 'x'));
  streams_->forward(1, request("/runtime.v1.RuntimeService/Echo"), {}, false);
  streams_->onDataHeader(1, 300, false);
  streams_->onData(1, body.substr(0, 300), false);
  EXPECT_EQ(credited(0), 0u) << "not until the side connection sends them";
  ASSERT_TRUE(runUntil([&] { return credited(0) == 300; }));
  EXPECT_EQ(credited(1), 300u) << "kubelet still sends on the stream";
  streams_->onDataHeader(1, static_cast<uint32_t>(body.size() - 300), true);
  streams_->onData(1, body.substr(300), true);
  ASSERT_TRUE(runUntil([&] { return endedOn(1); }));
  EXPECT_EQ(credited(0), body.size());
  EXPECT_EQ(dataOf(1), body);
  auto b = blocks();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(field(b[0], ":status"), "200");
  EXPECT_EQ(field(b[1], "grpc-status"), "0");
  EXPECT_TRUE(streams_->empty());
}

// A 1xx reply before the runtime's answer is informational (RFC 9113
// 8.1): kubelet gets the answer after it, headers, message and trailers.
TEST_F(OwnStreamsTest, AForwardedCallsReplyAfterAnInformationalOneIsTheReply) {
  RawH2Backend runtime(ctx_.backend_path);  // echoes the request
  runtime.informationalFirst(true);
  const std::string body = message("after a 100");
  streams_->forward(1, request("/runtime.v1.RuntimeService/Echo"), {}, false);
  send(1, body);
  ASSERT_TRUE(runUntil([&] { return endedOn(1); }));
  EXPECT_EQ(dataOf(1), body);
  auto b = blocks();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(field(b[0], ":status"), "200");
  EXPECT_EQ(field(b[0], "grpc-status"), "(none)");
  EXPECT_EQ(field(b[1], "grpc-status"), "0");
}

// The runtime closes the side connection inside a forwarded reply's
// message: kubelet's stream is reset (INTERNAL_ERROR), never ended with a
// status after half a message.
TEST_F(OwnStreamsTest, AReplyCutInsideAMessageIsResetNotEndedWithAStatus) {
  RawH2Backend runtime(ctx_.backend_path);
  streams_->forward(1, request("/runtime.v1.RuntimeService/HalfMessageThenClose"), {}, false);
  send(1, message("x"));
  ASSERT_TRUE(runUntil([&] { return endedOn(1); }));
  const std::vector<Frame> got = frames();
  auto reset = std::find_if(got.begin(), got.end(), [](const Frame& f) {
    return f.header.type == FrameType::kRstStream && f.header.stream_id == 1;
  });
  ASSERT_NE(reset, got.end()) << "kubelet's stream is reset";
  EXPECT_EQ(h2::rstStreamCodeOf(reset->payload).value_or(0), h2::error::kInternalError);
  for (const auto& block : blocks()) EXPECT_EQ(field(block, "grpc-status"), "(none)");
}

// The runtime closes the side connection right after a reply, and crihookd
// reads the reply and the close at once (one wake-up): the connection is
// known gone, and the next call goes on a new one, not into the closed one.
TEST_F(OwnStreamsTest, ASideConnectionClosedWithAReplyIsNotUsedForTheNextCall) {
  RawH2Backend runtime(ctx_.backend_path);
  const std::string body = message("x");
  streams_->forward(1, request("/runtime.v1.RuntimeService/Echo"), {}, false);
  send(1, body);
  ASSERT_TRUE(runUntil([&] { return endedOn(1); }));
  // The next reply waits at the gate until the runtime has the call, then
  // comes with the close while crihookd reads nothing.
  runtime.closeGate();
  streams_->forward(3, request("/runtime.v1.RuntimeService/GatedEchoThenClose"), {}, false);
  send(3, body);
  ASSERT_TRUE(runUntil([&] { return runtime.streams() == 2; }));
  runtime.openGate();
  ASSERT_TRUE(eventually([&] { return runtime.closedConnections() == 1; }));
  ASSERT_TRUE(runUntil([&] { return endedOn(3); }));
  EXPECT_EQ(dataOf(3), body);

  streams_->forward(5, request("/runtime.v1.RuntimeService/Echo"), {}, false);
  send(5, body);
  ASSERT_TRUE(runUntil([&] { return endedOn(5); }));
  EXPECT_EQ(dataOf(5), body) << "answered by the runtime, on a new connection";
  EXPECT_EQ(runtime.connections(), 2);
}

// --- through crihookd -------------------------------------------------------

class StandInTest : public ProxyFixture {
 protected:
  // The proxy started with no runtime, and `channel_` connected to it: its
  // first call is answered UNAVAILABLE by the connection that stands in.
  void openWhileTheRuntimeIsDown() {
    startProxy();
    channel_ = proxyChannel();
    std::string reply;
    const grpc::Status down = call("/runtime.v1.RuntimeService/Version", "", &reply);
    ASSERT_EQ(down.error_code(), grpc::StatusCode::UNAVAILABLE) << down.error_message();
    ASSERT_EQ(proxy_->standInConnections(), 1);
  }
  grpc::Status call(const std::string& method, const std::string& request, std::string* reply,
                    std::chrono::milliseconds timeout = 10s) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    return genericUnary(channel_, &ctx, method, request, reply);
  }

  std::shared_ptr<grpc::Channel> channel_;
};
TEST_F(StandInTest, AStreamOpenedOnceTheRuntimeIsBackDeliversEveryEventAsItHappens) {
  const std::string events = "/runtime.v1.RuntimeService/GetContainerEvents";
  // The runtime writes its next event only once the test has read the one
  // before: a reply held back until the call ends would never end.
  std::promise<void> read[2];
  backend_.onStream(events, [&](FakeCall&, const std::function<bool(const std::string&)>& write) {
    for (int i = 0; i < 3; ++i) {
      runtime::v1::ContainerEventResponse ev;
      ev.set_container_id(cat("c", i));  // not "c" + to_string: GCC 12 warns (bug 105329)
      if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
      if (i < 2 && read[i].get_future().wait_for(10s) != std::future_status::ready)
        return grpc::Status(grpc::StatusCode::INTERNAL, "fake: the event was never read");
    }
    return grpc::Status::OK;
  });
  openWhileTheRuntimeIsDown();
  backend_.start();
  auto stub = runtime::v1::RuntimeService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto reader = stub->GetContainerEvents(&ctx, runtime::v1::GetEventsRequest());
  runtime::v1::ContainerEventResponse ev;
  std::vector<std::string> ids;
  while (reader->Read(&ev)) {
    ids.push_back(ev.container_id());
    if (ids.size() <= 2) read[ids.size() - 1].set_value();
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(ids, ::testing::ElementsAre("c0", "c1", "c2"));
}

TEST_F(StandInTest, SixteenMebibyteMessagesCrossBothWays) {
  // Far past the side connection's 1 MiB stream window and kubelet's: both
  // directions are held to the windows and keep them moving.
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    *out = call.request;
    return grpc::Status::OK;
  });
  openWhileTheRuntimeIsDown();
  backend_.start();
  std::string request((16 << 20) - 64, '\0');
  for (size_t i = 0; i < request.size(); ++i) request[i] = static_cast<char>(i * 131);
  std::string reply;
  const grpc::Status s = call(echo, request, &reply, 30s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(reply == request);
  EXPECT_EQ(proxy_->activeCalls(), 0);
}

TEST_F(StandInTest, ARequestOverTheLimitIsRefusedAndTheConnectionServesOn) {
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    *out = call.request;
    return grpc::Status::OK;
  });
  openWhileTheRuntimeIsDown();  // a client that would send 64 MiB: the refusal is crihookd's
  backend_.start();
  std::string reply;
  const grpc::Status s = call(echo, std::string((16u << 20) + 1, 'x'), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("request message of 16777217 bytes is "
                                                      "larger than the limit of 16777216 bytes"));
  EXPECT_EQ(backend_.callCount(echo), 0u) << "the runtime got the message whole";
  const std::string small(1000, 'y');
  const grpc::Status next = call(echo, small, &reply);
  ASSERT_TRUE(next.ok()) << next.error_message();
  EXPECT_EQ(reply, small);
}

TEST_F(StandInTest, TheRuntimesResetsAndTrailersOnlyRepliesReachTheCallerAsTheyCame) {
  openWhileTheRuntimeIsDown();
  RawH2Backend raw(dir_.file("backend.sock"));
  std::string reply;
  EXPECT_EQ(call("/runtime.v1.RuntimeService/ResetCancel", "x", &reply).error_code(),
            grpc::StatusCode::CANCELLED);
  EXPECT_EQ(call("/runtime.v1.RuntimeService/ResetInternal", "x", &reply).error_code(),
            grpc::StatusCode::INTERNAL);
  const grpc::Status denied = call("/runtime.v1.RuntimeService/TrailersOnly", "x", &reply);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied.error_message(), "denied by raw backend");
  EXPECT_EQ(proxy_->standInConnections(), 1) << "all on the connection that stands in";
  EXPECT_EQ(raw.connections(), 1) << "all on one side connection";
  const grpc::Status echo = call("/runtime.v1.RuntimeService/Echo", "still here", &reply);
  ASSERT_TRUE(echo.ok()) << echo.error_message();
  EXPECT_EQ(reply, "still here");
}

// The runtime shuts its reading side right behind its last reply: a frame
// the side connection writes meanwhile (the ACK of the runtime's SETTINGS)
// fails, EPIPE. The reply, sent before the runtime closed, still reaches the
// caller (H2Endpoint::readToEnd).
TEST_F(StandInTest, AReplySentBeforeTheRuntimeClosedArrivesThoughAWriteFailed) {
  openWhileTheRuntimeIsDown();
  RawH2Backend raw(dir_.file("backend.sock"));
  std::string reply;
  const grpc::Status last =
      call("/runtime.v1.RuntimeService/DeafGoawayEcho", "sent before the close", &reply);
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_EQ(reply, "sent before the close");
  const grpc::Status lost = call("/runtime.v1.RuntimeService/DeafSilent", "x", &reply);
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(lost.error_message(), "crihookd: backend connection lost: write: Broken pipe");
}

TEST_F(StandInTest, ClientCancellationReachesTheRuntime) {
  const std::string events = "/runtime.v1.RuntimeService/GetContainerEvents";
  std::promise<void> started, cancelled;
  backend_.onStream(events,
                    [&](FakeCall& call, const std::function<bool(const std::string&)>& write) {
                      write(runtime::v1::ContainerEventResponse().SerializeAsString());
                      started.set_value();
                      if (eventually([&] { return call.cancelled(); })) cancelled.set_value();
                      return grpc::Status::OK;
                    });
  openWhileTheRuntimeIsDown();
  backend_.start();
  auto stub = runtime::v1::RuntimeService::NewStub(channel_);
  grpc::ClientContext ctx;
  auto reader = stub->GetContainerEvents(&ctx, runtime::v1::GetEventsRequest());
  runtime::v1::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  started.get_future().wait();
  ctx.TryCancel();
  EXPECT_EQ(cancelled.get_future().wait_for(3s), std::future_status::ready);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(eventually([&] { return proxy_->activeCalls() == 0; }));
}

}  // namespace
}  // namespace crihook::testing
