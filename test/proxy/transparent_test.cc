// The relay (proxy/transparent.h) against a raw HTTP/2 client and runtime
// (nghttp2, not crihookd's code), for what the suites through gRPC clients
// cannot show: the SETTINGS kubelet sees are the runtime's, filtered and
// capped; a reply crihookd writes itself is held to kubelet's flow-control
// windows; the runtime going away ends kubelet's connection with GOAWAY and a
// status for the call in flight; on a connection that opened while the
// runtime was down crihookd stands in for the runtime and tells kubelet to
// reconnect once the runtime answers (what crihookd answers on it is
// own_streams_test's StandInTest).
//
// TransparentWireTest drives the relay over socketpairs, with the bytes of
// both peers and the edges of crihookd's reads the test's own: crihookd's
// frames never land inside a frame or a header block of the peer it relays
// (found by fuzz/fuzz_transparent.cc), and what crihookd takes from the
// runtime for a kubelet that does not read is bounded;
// TransparentStandInWireTest the same without a runtime connection.

#include "proxy/transparent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "cri-api/runtime_v1.pb.h"
#include "cri/interceptor.h"
#include "metrics/call_metrics.h"
#include "metrics/metric_registry.h"
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

std::string grpcFrame(const std::string& message) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + message;
}

using TransparentTest = ProxyFixture;

TEST_F(TransparentTest, KubeletSeesTheRuntimesSettingsCappedByCrihookds) {
  RawH2Backend runtime(dir_.file("backend.sock"));  // nghttp2: no header list cap of its own
  startProxy();
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
  startProxy();
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
  startProxy();
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
  startProxy();  // the runtime is not there yet
  RawH2Client kubelet(dir_.file("crihook.sock"));
  RawH2Result down =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("down"));
  EXPECT_EQ(down.grpc_status, 14) << down.grpc_message;
  EXPECT_EQ(proxy_->standInConnections(), 1) << "crihookd stands in for the runtime";
  EXPECT_EQ(kubelet.peerMaxHeaderListSize(), 64u << 10) << "in crihookd's own SETTINGS";
  EXPECT_FALSE(kubelet.goawayReceived());

  RawH2Backend runtime(dir_.file("backend.sock"));
  RawH2Result up =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("up"));
  EXPECT_EQ(up.grpc_status, 0) << up.grpc_message;
  EXPECT_EQ(up.body, grpcFrame("up")) << "the call that found the runtime back is answered";
  EXPECT_TRUE(kubelet.goawayReceived()) << "and kubelet is told to reconnect";
  // The connection, done, waits for kubelet to close: what kubelet still
  // writes is taken (a write that failed could make a gRPC client drop
  // answers it had not read yet).
  EXPECT_TRUE(kubelet.pingFlood(1));
  EXPECT_EQ(proxy_->standInConnections(), 1);

  RawH2Client next(dir_.file("crihook.sock"));
  RawH2Result r =
      next.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("next"));
  EXPECT_EQ(r.grpc_status, 0) << r.grpc_message;
  // The old connection ends once its calls have (crihookd closes it after
  // its GOAWAY); the new one is relayed frame by frame.
  EXPECT_TRUE(eventually([&] { return proxy_->standInConnections() == 0; }));
  EXPECT_GE(proxy_->connections(), 1);
  RawH2Result again =
      next.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("again"));
  EXPECT_EQ(again.grpc_status, 0) << again.grpc_message;
  EXPECT_FALSE(next.goawayReceived());
}

// The transparent relay between two socketpairs, its loop run by hand: what
// a test sends as one peer is read by crihookd in one piece.
class TransparentWireTest : public ::testing::Test {
 protected:
  struct Frame {
    relay::h2::FrameHeader header;
    std::string payload;
  };

  void SetUp() override { open(false); }

  // `stand_in`: no runtime connection (crihookd stands in for the runtime).
  // `runtime_on_fd0`: crihookd's end of the runtime connection is descriptor
  // 0 (standard input, put back at TearDown).
  void open(bool stand_in, bool runtime_on_fd0 = false) {
    ctx_.backend_path = dir_.file("no-backend.sock");  // intercepted calls: UNAVAILABLE
    ctx_.backend_endpoint = "unix://" + ctx_.backend_path;
    ctx_.interceptor = &pass_;
    ctx_.call_metrics = &call_metrics_;
    ctx_.log = std::make_shared<spdlog::logger>("proxy", log_);
    auto loop = relay::EventLoop::create();
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    int k[2], r[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, k), 0);
    if (!stand_in) {
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, r), 0);
    }
    if (runtime_on_fd0) {
      saved_stdin_ = ::dup(0);
      ASSERT_EQ(::dup2(r[0], 0), 0);
      ::close(r[0]);
      r[0] = 0;
    }
    kubelet_ = k[1];
    runtime_ = r[1];
    crihookd_runtime_end_ = r[0];
    // Held by its loop's handlers only, as crihookd's Connection does: it
    // ends (and closes its sockets) when it closes.
    auto conn = std::make_shared<relay::Transparent>(*loop_, k[0], r[0], ctx_);
    conn_ = conn;
    loop_->post([conn] { conn->start(); });
    send(kubelet_, relay::h2::kClientPreface);
    if (stand_in) return;
    std::string settings;
    relay::h2::appendSettings(settings, {});
    send(runtime_, settings);
  }

  void TearDown() override {
    if (!loop_) return;
    if (auto conn = conn_.lock()) loop_->post([conn] { conn->close("test done"); });
    settle();
    EXPECT_TRUE(conn_.expired()) << "the connection released everything";
    if (kubelet_ >= 0) ::close(kubelet_);
    if (runtime_ >= 0) ::close(runtime_);
    EXPECT_EQ(ctx_.active_calls.load(), 0);
    if (saved_stdin_ >= 0) {
      ::dup2(saved_stdin_, 0);
      ::close(saved_stdin_);
    }
  }

  // Sends `bytes` as the peer at `fd` and runs the loop until it is idle.
  void send(int fd, std::string_view bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    settle();
  }

  void settle() {
    for (int i = 0; i < 100 && loop_->poll() > 0; ++i) {
    }
    readAll(kubelet_, kubelet_got_, kubelet_eof_);
    readAll(runtime_, runtime_got_, runtime_eof_);
  }

  static void readAll(int fd, std::string& got, bool& eof) {
    if (fd < 0) return;
    char buf[16384];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) got.append(buf, n);
    if (n == 0) eof = true;
  }

  // The whole frames of what a peer read (the runtime's after the preface).
  static std::vector<Frame> framesOf(std::string_view bytes) {
    std::vector<Frame> frames;
    while (bytes.size() >= relay::h2::kFrameHeaderBytes) {
      auto h = relay::h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
      if (bytes.size() - relay::h2::kFrameHeaderBytes < h.length) break;
      frames.push_back({h, std::string(bytes.substr(relay::h2::kFrameHeaderBytes, h.length))});
      bytes.remove_prefix(relay::h2::kFrameHeaderBytes + h.length);
    }
    return frames;
  }
  std::vector<Frame> runtimeFrames() const {
    const size_t preface = std::min(runtime_got_.size(), relay::h2::kClientPreface.size());
    return framesOf(std::string_view(runtime_got_).substr(preface));
  }
  // After kubelet's late frames on stream 1 (one crihookd answered) and a
  // new call on stream 3: no frame of stream 1 reached the runtime, and the
  // new call did.
  void expectRuntimeSawStream3NotStream1() const {
    const std::vector<Frame> frames = runtimeFrames();
    for (const Frame& f : frames)
      EXPECT_NE(f.header.stream_id, 1u) << "type " << static_cast<int>(f.header.type);
    EXPECT_TRUE(std::any_of(frames.begin(), frames.end(), [](const Frame& f) {
      return f.header.type == relay::h2::FrameType::kHeaders && f.header.stream_id == 3;
    })) << "kubelet's next call still goes";
  }

  // A request block for `path` (literals, no table change) with `extra`
  // appended as it is (a representation of the test's own).
  static std::string requestBlock(const std::string& path, std::string_view extra = {}) {
    std::string block;
    for (auto [n, v] : {std::pair<std::string, std::string>{":method", "POST"},
                        {":scheme", "http"},
                        {":path", path},
                        {":authority", "localhost"},
                        {"content-type", "application/grpc"},
                        {"te", "trailers"}}) {
      relay::hpack::appendLiteral(block, n, v);
    }
    return block + std::string(extra);
  }
  static std::string headersFrames(uint32_t stream, std::string_view block, bool end_stream) {
    std::string frames;
    relay::h2::appendHeaderBlock(frames, stream, block, end_stream, 16384);
    return frames;
  }
  // A field that enters the receiver's dynamic table (incremental
  // indexing, new name), and the one-byte reference to it while it is the
  // newest entry.
  static std::string indexedLiteral(std::string_view name, std::string_view value) {
    return std::string(1, '\x40') + static_cast<char>(name.size()) + std::string(name) +
           static_cast<char>(value.size()) + std::string(value);
  }
  static constexpr std::string_view kNewestEntry = "\xbe";  // index 62

  // The header blocks in `frames`, decoded in order by one decoder (as the
  // peer that read them does), by stream.
  static std::vector<std::pair<uint32_t, std::vector<std::pair<std::string, std::string>>>>
  decodedBlocks(const std::vector<Frame>& frames) {
    std::vector<std::pair<uint32_t, std::vector<std::pair<std::string, std::string>>>> out;
    relay::hpack::Decoder decoder;
    std::string block;
    for (const Frame& f : frames) {
      if (f.header.type != relay::h2::FrameType::kHeaders &&
          f.header.type != relay::h2::FrameType::kContinuation)
        continue;
      block += f.payload;
      if (!f.header.has(relay::h2::flags::kEndHeaders)) continue;
      std::vector<std::pair<std::string, std::string>> fields;
      auto st = decoder.decode(block, [&](std::string_view n, std::string_view v) {
        fields.emplace_back(std::string(n), std::string(v));
      });
      EXPECT_TRUE(st.ok()) << "stream " << f.header.stream_id << ": " << st;
      out.emplace_back(f.header.stream_id, std::move(fields));
      block.clear();
    }
    return out;
  }
  static bool hasField(const std::vector<std::pair<std::string, std::string>>& fields,
                       const std::string& name, const std::string& value) {
    return std::find(fields.begin(), fields.end(), std::pair{name, value}) != fields.end();
  }

  static std::string requestHeaders(uint32_t stream, const std::string& path, bool end_stream) {
    return headersFrames(stream, requestBlock(path), end_stream);
  }

  // kubelet's SETTINGS and a whole Version call on stream 1.
  void sendVersionCall() {
    std::string settings, body;
    relay::h2::appendSettings(settings, {});
    relay::h2::appendData(body, 1, grpcFrame("v"), true, 16384);
    send(kubelet_,
         settings + requestHeaders(1, "/runtime.v1.RuntimeService/Version", false) + body);
  }

  // The runtime's reply header block (literals, as hpack.h writes them).
  static std::string replyHeaders() {
    std::string block;
    relay::hpack::appendLiteral(block, ":status", "200");
    relay::hpack::appendLiteral(block, "content-type", "application/grpc");
    return block;
  }

  static std::string frame(relay::h2::FrameType type, uint8_t flags, uint32_t stream,
                           std::string_view payload) {
    auto h =
        relay::h2::encodeFrameHeader({static_cast<uint32_t>(payload.size()), type, flags, stream});
    return std::string(reinterpret_cast<const char*>(h.data()), h.size()) + std::string(payload);
  }

  TempDir dir_;
  PassThroughInterceptor pass_;
  metrics::Registry registry_;
  metrics::CallMetrics call_metrics_{registry_};
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  RelayContext ctx_;
  std::unique_ptr<relay::EventLoop> loop_;
  std::weak_ptr<relay::Transparent> conn_;
  int kubelet_ = -1;
  int runtime_ = -1;
  int saved_stdin_ = -1;
  // crihookd's end of the runtime connection (the connection's own): only
  // for what waits in it unread (FIONREAD).
  int crihookd_runtime_end_ = -1;
  std::string kubelet_got_, runtime_got_;
  bool kubelet_eof_ = false, runtime_eof_ = false;
};

// Bytes waiting to be read in the socket `fd`.
size_t unread(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 ? static_cast<size_t>(n) : 0;
}

// kubelet stops reading a reply: crihookd takes the runtime's DATA until
// more than 1 MiB of it waits for kubelet, then takes no more, and the rest
// waits in the runtime's socket, where the runtime's own bounds meet it
// (docs/operations.md, "a peer that does not read"). The windows are far
// larger: HTTP/2 flow control holds nothing back.
TEST_F(TransparentWireTest, AKubeletThatDoesNotReadStopsCrihookdReadingTheRuntimePast1MiB) {
  std::string settings, update, body, reply, data;
  relay::h2::appendSettings(settings, {{relay::h2::setting::kInitialWindowSize, 1u << 30}});
  relay::h2::appendWindowUpdate(update, 0, 1u << 30);
  relay::h2::appendData(body, 1, grpcFrame("v"), true, 16384);
  send(kubelet_,
       settings + update + requestHeaders(1, "/runtime.v1.RuntimeService/Version", false) + body);
  relay::h2::appendHeaderBlock(reply, 1, replyHeaders(), false, 16384);
  send(runtime_, reply);  // read by kubelet, which from here on reads nothing
  relay::h2::appendData(data, 1, grpcFrame(std::string(16384 - 5, 'r')), false, 16384);

  // What crihookd took from the runtime and holds for kubelet.
  size_t sent = 0;
  auto held = [&] {
    const size_t elsewhere = unread(crihookd_runtime_end_) + unread(kubelet_);
    return sent > elsewhere ? sent - elsewhere : 0;
  };
  // The runtime's reply, frame after frame, as fast as crihookd takes it,
  // until `enough` or until crihookd takes no more.
  size_t at = 0;  // in the frame being sent
  auto flood = [&](auto enough) {
    while (!enough()) {
      const ssize_t n =
          ::send(runtime_, data.data() + at, data.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        at = (at + static_cast<size_t>(n)) % data.size();
      }
      size_t ran = 0;
      for (int i = 0; i < 100; ++i) {
        const size_t r = loop_->poll();
        if (r == 0) break;
        ran += r;
      }
      if (n <= 0 && ran == 0) return;
    }
  };
  flood([&] { return held() >= (768u << 10); });
  ASSERT_GE(held(), 768u << 10) << "crihookd stopped taking the runtime's reply early";
  EXPECT_EQ(unread(crihookd_runtime_end_), 0u);

  flood([&] { return sent >= (4u << 20); });
  EXPECT_LT(sent, 4u << 20) << "crihookd never stopped taking the runtime's reply";
  EXPECT_GT(unread(crihookd_runtime_end_), 0u) << "the rest waits in the runtime's socket";
  EXPECT_GT(held(), 1u << 20);
  EXPECT_LE(held(), (1u << 20) + (64u << 10) + data.size())
      << "crihookd reads at most 64 KiB past the mark (and holds one frame in part)";
}

// A relayed call the runtime ends without grpc-status (an HTTP error from
// something that is not a gRPC server) is counted under the code gRPC gives
// that HTTP status, as kubelet's client reads it: 503, UNAVAILABLE.
TEST_F(TransparentWireTest, AReplyWithoutGrpcStatusIsCountedByItsHttpStatus) {
  sendVersionCall();
  std::string block;
  relay::hpack::appendLiteral(block, ":status", "503");
  relay::hpack::appendLiteral(block, "content-type", "application/grpc");
  send(runtime_, headersFrames(1, block, true));
  const auto blocks = decodedBlocks(framesOf(kubelet_got_));
  ASSERT_FALSE(blocks.empty());
  EXPECT_TRUE(hasField(blocks.back().second, ":status", "503")) << "relayed as it came";
  EXPECT_THAT(registry_.expose(),
              ::testing::HasSubstr("crihook_cri_calls_total{service=\"runtime.v1.RuntimeService\","
                                   "method=\"Version\",code=\"UNAVAILABLE\"} 1\n"));
  EXPECT_EQ(ctx_.active_calls.load(), 0);
}

TEST_F(TransparentWireTest, ACreditForTheRuntimeWaitsForTheEndOfKubeletsDataFrame) {
  using relay::h2::FrameType;
  namespace flags = relay::h2::flags;
  std::string settings;
  relay::h2::appendSettings(settings, {});
  // Stream 1 is intercepted (crihookd answers it; the runtime never sees
  // it, its block being all literals); stream 3 is relayed, and the runtime ends it before its
  // request message came (as a server does for a method it lacks).
  send(kubelet_, settings + requestHeaders(1, "/runtime.v1.RuntimeService/StopContainer", false) +
                     requestHeaders(3, "/runtime.v1.RuntimeService/Version", false));
  std::string trailers_only, block;
  relay::hpack::appendLiteral(block, ":status", "200");
  relay::hpack::appendLiteral(block, "content-type", "application/grpc");
  relay::hpack::appendLiteral(block, "grpc-status", "12");
  relay::h2::appendHeaderBlock(trailers_only, 3, block, true, 16384);
  send(runtime_, trailers_only);
  // kubelet's message on stream 3 comes in two reads; between them, the
  // runtime answers stream 1 (gRPC C++ does), whose DATA crihookd drops and
  // credits the runtime for.
  const std::string message(100, 'm');
  std::string data;
  relay::h2::appendData(data, 3, message, true, 16384);
  send(kubelet_, data.substr(0, 30));
  send(runtime_, frame(FrameType::kData, 0, 1, "hello"));
  send(kubelet_, data.substr(30));

  const std::vector<Frame> frames = runtimeFrames();
  auto data3 = std::find_if(frames.begin(), frames.end(), [](const Frame& f) {
    return f.header.type == FrameType::kData && f.header.stream_id == 3;
  });
  ASSERT_TRUE(data3 != frames.end()) << "kubelet's DATA reached the runtime";
  EXPECT_EQ(data3->payload, message) << "as kubelet sent it, nothing inside";
  EXPECT_TRUE(data3->header.has(flags::kEndStream));
  auto credit = std::find_if(data3, frames.end(), [](const Frame& f) {
    return f.header.type == FrameType::kWindowUpdate && f.header.stream_id == 0;
  });
  ASSERT_TRUE(credit != frames.end()) << "the runtime is credited, after kubelet's frame";
  EXPECT_EQ(relay::h2::windowIncrementOf(credit->payload).value_or(0), 5u);
}

TEST_F(TransparentWireTest, AnInterceptedRequestThatChangesNoTableNeverReachesTheRuntime) {
  using relay::h2::FrameType;
  std::string settings;
  relay::h2::appendSettings(settings, {});
  // StopContainer (intercepted) on stream 1, all literals: the runtime's
  // table is the same without it. Then Version (relayed) on stream 3.
  const std::string version =
      headersFrames(3, requestBlock("/runtime.v1.RuntimeService/Version"), false);
  send(kubelet_,
       settings +
           headersFrames(1, requestBlock("/runtime.v1.RuntimeService/StopContainer"), false) +
           version);
  for (const Frame& f : runtimeFrames())
    EXPECT_NE(f.header.stream_id, 1u) << "nothing of stream 1 reaches the runtime";
  EXPECT_NE(runtime_got_.find(version), std::string::npos)
      << "kubelet's next block goes as it came: nothing to re-encode";
}

TEST_F(TransparentWireTest, AnInterceptedRequestThatIndexesReachesTheRuntimeCancelled) {
  using relay::h2::FrameType;
  namespace flags = relay::h2::flags;
  std::string settings;
  relay::h2::appendSettings(settings, {});
  // StopContainer's block enters x-trace into the table; Version's refers to
  // it: the runtime can only read Version's if it read StopContainer's.
  const std::string version =
      headersFrames(3, requestBlock("/runtime.v1.RuntimeService/Version", kNewestEntry), false);
  send(kubelet_, settings +
                     headersFrames(1,
                                   requestBlock("/runtime.v1.RuntimeService/StopContainer",
                                                indexedLiteral("x-trace", "t1")),
                                   false) +
                     version);
  const std::vector<Frame> frames = runtimeFrames();
  auto headers1 = std::find_if(frames.begin(), frames.end(), [](const Frame& f) {
    return f.header.type == FrameType::kHeaders && f.header.stream_id == 1;
  });
  ASSERT_TRUE(headers1 != frames.end()) << "the runtime's decoder reads stream 1's block";
  EXPECT_FALSE(headers1->header.has(flags::kEndStream)) << "the call is not made";
  auto reset1 = std::find_if(headers1, frames.end(), [](const Frame& f) {
    return f.header.type == FrameType::kRstStream && f.header.stream_id == 1;
  });
  ASSERT_TRUE(reset1 != frames.end()) << "and cancelled at once";
  EXPECT_EQ(relay::h2::rstStreamCodeOf(reset1->payload).value_or(0), relay::h2::error::kCancel);
  EXPECT_NE(runtime_got_.find(version), std::string::npos) << "the next block goes as it came";
  auto blocks = decodedBlocks(frames);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_TRUE(hasField(blocks[1].second, "x-trace", "t1")) << "and decodes as kubelet sent it";
}

// kubelet's frames that cross crihookd's end of a stream it answered (a
// WINDOW_UPDATE for the reply's DATA, a cancel; the rest of a request it
// reset) come after crihookd has forgotten the stream. The runtime never saw
// it (its block was left out): any such frame there but HEADERS or PRIORITY
// is a connection error (RFC 9113 5.1), and a strict runtime (nghttp2's)
// ends kubelet's whole connection with GOAWAY PROTOCOL_ERROR.
TEST_F(TransparentWireTest, KubeletsLateFramesOnAnAnsweredCallNeverReachTheRuntime) {
  using relay::h2::FrameType;
  namespace flags = relay::h2::flags;
  std::string settings, body;
  relay::h2::appendSettings(settings, {});
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  relay::h2::appendData(body, 1, grpcFrame(req.SerializeAsString()), true, 16384);
  send(kubelet_,
       settings + requestHeaders(1, "/runtime.v1.RuntimeService/StopContainer", false) + body);
  // Intercepted; the side connection finds no runtime: answered UNAVAILABLE.
  auto blocks = decodedBlocks(framesOf(kubelet_got_));
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].first, 1u);
  EXPECT_TRUE(hasField(blocks[0].second, "grpc-status", "14"));

  std::string late;
  relay::h2::appendWindowUpdate(late, 1, 100);
  relay::h2::appendRstStream(late, 1, relay::h2::error::kCancel);
  send(kubelet_, late + requestHeaders(3, "/runtime.v1.RuntimeService/Version", false));
  expectRuntimeSawStream3NotStream1();
  EXPECT_FALSE(kubelet_eof_);
}

TEST_F(TransparentWireTest, KubeletsDataAfterCrihookdsResetNeverReachesTheRuntime) {
  using relay::h2::FrameType;
  std::string settings;
  relay::h2::appendSettings(settings, {});
  // A connection header: crihookd resets the stream at once, while
  // kubelet's message is on its way.
  std::string connection;
  relay::hpack::appendLiteral(connection, "connection", "close");
  const std::string refused = requestBlock("/runtime.v1.RuntimeService/Version", connection);
  send(kubelet_, settings + headersFrames(1, refused, false));
  std::vector<Frame> to_kubelet = framesOf(kubelet_got_);
  ASSERT_TRUE(std::any_of(to_kubelet.begin(), to_kubelet.end(), [](const Frame& f) {
    return f.header.type == FrameType::kRstStream && f.header.stream_id == 1;
  }));
  // Said once, with the stream and its path (later ones within the interval
  // are counted into the next message).
  const std::vector<std::string> said = log_->last_formatted();
  ASSERT_EQ(std::count_if(said.begin(), said.end(),
                          [](const std::string& l) {
                            return l.find(
                                       "refused request stream 1 "
                                       "path=\"/runtime.v1.RuntimeService/Version\"") !=
                                   std::string::npos;
                          }),
            1)
      << ::testing::PrintToString(said);
  kubelet_got_.clear();

  std::string data;
  const std::string message = grpcFrame("v");
  relay::h2::appendData(data, 1, message, true, 16384);
  send(kubelet_, data + requestHeaders(3, "/runtime.v1.RuntimeService/Version", false));
  expectRuntimeSawStream3NotStream1();
  // The bytes are taken by crihookd, which credits kubelet for them.
  uint32_t credited = 0;
  for (const Frame& f : framesOf(kubelet_got_)) {
    if (f.header.type == FrameType::kWindowUpdate && f.header.stream_id == 0)
      credited += relay::h2::windowIncrementOf(f.payload).value_or(0);
  }
  EXPECT_EQ(credited, message.size());
}

// A relayed request over max_message_bytes: crihookd ends kubelet's call
// (RESOURCE_EXHAUSTED) and cancels the runtime's. A reply the runtime sent
// before it read the cancel never reaches kubelet as DATA of a call it was
// told is over; crihookd takes those bytes and credits the runtime for them.
class TransparentSmallMessagesTest : public TransparentWireTest {
 protected:
  void SetUp() override {
    ctx_.max_message_bytes = 100;
    open(false);
  }
};

TEST_F(TransparentSmallMessagesTest, TheRuntimesReplyToACutCallIsTakenAndCreditedNotRelayed) {
  using relay::h2::FrameType;
  std::string settings, body;
  relay::h2::appendSettings(settings, {});
  relay::h2::appendData(body, 1, grpcFrame(std::string(200, 'x')), true, 16384);
  send(kubelet_, settings + requestHeaders(1, "/runtime.v1.RuntimeService/Version", false) + body);
  auto blocks = decodedBlocks(framesOf(kubelet_got_));
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_TRUE(hasField(blocks[0].second, "grpc-status", "8"));
  const std::vector<Frame> to_runtime = runtimeFrames();
  ASSERT_TRUE(std::any_of(to_runtime.begin(), to_runtime.end(), [](const Frame& f) {
    return f.header.type == FrameType::kRstStream && f.header.stream_id == 1;
  })) << "the runtime's call is cancelled";
  kubelet_got_.clear();
  runtime_got_.clear();

  std::string data, trailers;
  relay::h2::appendData(data, 1, grpcFrame("version"), false, 16384);
  relay::hpack::appendLiteral(trailers, "grpc-status", "0");
  send(runtime_, headersFrames(1, replyHeaders(), false) + data + headersFrames(1, trailers, true));
  for (const Frame& f : framesOf(kubelet_got_))
    EXPECT_NE(f.header.type, FrameType::kData) << "stream " << f.header.stream_id;
  uint32_t credited = 0;
  for (const Frame& f : framesOf(runtime_got_)) {
    if (f.header.type == FrameType::kWindowUpdate && f.header.stream_id == 0)
      credited += relay::h2::windowIncrementOf(f.payload).value_or(0);
  }
  EXPECT_EQ(credited, data.size() - relay::h2::kFrameHeaderBytes);
  EXPECT_THAT(registry_.expose(),
              ::testing::HasSubstr("crihook_cri_calls_total{service=\"runtime.v1.RuntimeService\","
                                   "method=\"Version\",code=\"RESOURCE_EXHAUSTED\"} 1\n"));
}

// The runtime answers stream 1, which crihookd answers (gRPC C++ answers a
// call cancelled at once); kubelet must not get that block, and must still
// read the runtime's next one, which refers to the table entry the withheld
// block made when it made one.
class TransparentWithheldReplyTest : public TransparentWireTest,
                                     public ::testing::WithParamInterface<bool> {};

TEST_P(TransparentWithheldReplyTest, KubeletReadsTheRuntimesNextBlock) {
  using relay::h2::FrameType;
  const bool indexes = GetParam();
  std::string settings;
  relay::h2::appendSettings(settings, {});
  // Kubelet is still sending stream 1 (no END_STREAM): crihookd keeps it.
  send(kubelet_,
       settings +
           headersFrames(1, requestBlock("/runtime.v1.RuntimeService/StopContainer"), false) +
           headersFrames(3, requestBlock("/runtime.v1.RuntimeService/Version"), false));
  std::string answer1;
  relay::hpack::appendLiteral(answer1, ":status", "200");
  relay::hpack::appendLiteral(answer1, "grpc-status", "1");
  if (indexes) answer1 += indexedLiteral("x-served-by", "fake");
  std::string reply3;
  relay::hpack::appendLiteral(reply3, ":status", "200");
  relay::hpack::appendLiteral(reply3, "content-type", "application/grpc");
  if (indexes) reply3 += kNewestEntry;
  const std::string reply3_frames = headersFrames(3, reply3, false);
  send(runtime_, headersFrames(1, answer1, true) + reply3_frames);

  const std::vector<Frame> frames = framesOf(kubelet_got_);
  for (const Frame& f : frames) {
    EXPECT_FALSE(f.header.type == FrameType::kHeaders && f.header.stream_id == 1)
        << "the runtime's answer to stream 1 is not kubelet's";
  }
  auto blocks = decodedBlocks(frames);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].first, 3u);
  EXPECT_TRUE(hasField(blocks[0].second, "content-type", "application/grpc"));
  if (indexes) {
    EXPECT_TRUE(hasField(blocks[0].second, "x-served-by", "fake")) << "re-encoded for kubelet";
  } else {
    EXPECT_NE(kubelet_got_.find(reply3_frames), std::string::npos)
        << "nothing changed in the table: the block goes as it came";
  }
}

INSTANTIATE_TEST_SUITE_P(WithheldBlock, TransparentWithheldReplyTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? std::string("Indexes") : std::string("Literals");
                         });

TEST_F(TransparentWireTest, CrihookdsFramesWaitForTheEndOfTheRuntimesHeaderBlock) {
  using relay::h2::FrameType;
  namespace flags = relay::h2::flags;
  sendVersionCall();
  // The runtime's reply headers in two frames, read apart; between them
  // crihookd owes kubelet a PING ACK.
  const std::string block = replyHeaders();
  send(runtime_, frame(FrameType::kHeaders, 0, 1, std::string_view(block).substr(0, 8)));
  send(kubelet_, frame(FrameType::kPing, 0, 0, "12345678"));
  loop_->expireTimers();  // the ACK's delay
  settle();
  send(runtime_,
       frame(FrameType::kContinuation, flags::kEndHeaders, 1, std::string_view(block).substr(8)));

  // kubelet's frames by type, in order: the HEADERS and its CONTINUATION
  // side by side, the PING ACK after them.
  std::vector<int> types;
  for (const Frame& f : framesOf(kubelet_got_)) {
    if (f.header.type == FrameType::kPing && !f.header.has(flags::kAck)) continue;
    types.push_back(static_cast<int>(f.header.type));
  }
  const int kHeaders = static_cast<int>(FrameType::kHeaders);
  const int kContinuation = static_cast<int>(FrameType::kContinuation);
  const int kPing = static_cast<int>(FrameType::kPing);
  auto headers = std::find(types.begin(), types.end(), kHeaders);
  ASSERT_NE(headers, types.end());
  EXPECT_THAT(std::vector<int>(headers, types.end()),
              ::testing::ElementsAre(kHeaders, kContinuation, kPing))
      << "nothing inside the runtime's header block; the PING is answered after it";
}

TEST_F(TransparentWireTest, TheRuntimeGoneInsideAHeaderBlockClosesKubeletsConnection) {
  using relay::h2::FrameType;
  sendVersionCall();
  const std::string block = replyHeaders();
  send(runtime_, frame(FrameType::kHeaders, 0, 1, std::string_view(block).substr(0, 8)));
  ::shutdown(runtime_, SHUT_WR);
  settle();

  // kubelet's decoder waits for the block's CONTINUATION: no status or
  // GOAWAY can follow it, only the end of the connection.
  const std::vector<Frame> frames = framesOf(kubelet_got_);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().header.type, FrameType::kHeaders);
  EXPECT_TRUE(kubelet_eof_) << "crihookd closed kubelet's connection";
}

TEST_F(TransparentWireTest, PingsWhileTheRuntimeStopsInsideAFrameAreBounded) {
  using relay::h2::FrameType;
  sendVersionCall();
  // The runtime's reply DATA, half sent: crihookd's own frames for kubelet
  // (the PINGs' ACKs) wait for its end, which never comes, while kubelet
  // sends PING after PING and reads what it gets.
  const std::string block = replyHeaders();
  std::string reply;
  relay::h2::appendHeaderBlock(reply, 1, block, false, 16384);
  std::string data;
  relay::h2::appendData(data, 1, std::string(1000, 'r'), false, 16384);
  send(runtime_, reply + data.substr(0, 500));
  std::string pings;
  for (int i = 0; i < 100; ++i) pings += frame(FrameType::kPing, 0, 0, "12345678");
  for (int i = 0; i < 20 && !kubelet_eof_; ++i) {
    send(kubelet_, pings);
    loop_->expireTimers();
    settle();
  }
  EXPECT_TRUE(kubelet_eof_) << "crihookd ends the connection rather than holding ACKs without end";
  for (const Frame& f : framesOf(kubelet_got_)) {
    EXPECT_FALSE(f.header.type == FrameType::kPing && f.header.has(relay::h2::flags::kAck))
        << "no ACK inside the runtime's DATA frame";
  }
}

TEST_F(TransparentWireTest, ADoneConnectionWaitsForKubeletToCloseIt) {
  using relay::h2::FrameType;
  std::string settings;
  relay::h2::appendSettings(settings, {});
  send(kubelet_, settings);
  if (auto conn = conn_.lock()) loop_->post([conn] { conn->shutdown(); });
  settle();
  // No stream open: GOAWAY, then the end of what crihookd writes; the
  // connection waits for kubelet's end.
  const std::vector<Frame> frames = framesOf(kubelet_got_);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().header.type, FrameType::kGoaway);
  EXPECT_TRUE(kubelet_eof_);
  EXPECT_FALSE(conn_.expired());
  // What kubelet still writes is taken (its write does not fail before it
  // has read the answers), and dropped.
  send(kubelet_, frame(FrameType::kPing, 0, 0, "12345678"));
  EXPECT_FALSE(conn_.expired());
  ::shutdown(kubelet_, SHUT_WR);
  settle();
  EXPECT_TRUE(conn_.expired()) << "kubelet closed; so does crihookd";
}

// kubelet gone with bytes it never read: its end resets the connection, and
// crihookd's read fails with ECONNRESET instead of finding the end of the
// stream. The connection ends all the same, and the runtime's with it.
TEST_F(TransparentWireTest, AKubeletThatResetsItsConnectionEndsTheRuntimesToo) {
  sendVersionCall();
  std::string reply;
  relay::h2::appendHeaderBlock(reply, 1, replyHeaders(), false, 16384);
  ASSERT_EQ(::send(runtime_, reply.data(), reply.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(reply.size()));
  for (int i = 0; i < 100 && loop_->poll() > 0; ++i) {
  }
  ASSERT_GT(unread(kubelet_), 0u) << "the reply waits in kubelet's socket";
  ::close(kubelet_);
  kubelet_ = -1;
  settle();
  EXPECT_TRUE(conn_.expired()) << "crihookd still holds the connection kubelet reset";
  EXPECT_TRUE(runtime_eof_) << "the runtime's connection is closed too";
}

TEST_F(TransparentWireTest, AKubeletThatDoesNotCloseADoneConnectionIsClosedAfterALinger) {
  std::string settings;
  relay::h2::appendSettings(settings, {});
  send(kubelet_, settings);
  if (auto conn = conn_.lock()) loop_->post([conn] { conn->shutdown(); });
  settle();
  EXPECT_FALSE(conn_.expired());
  loop_->expireTimers();  // the linger's second
  settle();
  EXPECT_TRUE(conn_.expired());
}

}  // namespace
}  // namespace crihook::testing

namespace crihook::testing {
namespace {

// crihookd started with its standard input closed (a supervisor may start
// it so) is given descriptor 0 for a socket it opens: a runtime connection
// there is a runtime connection like any other, not "no runtime".
class TransparentRuntimeOnFd0Test : public TransparentWireTest {
 protected:
  void SetUp() override { open(false, true); }
};

// The same for the connection an intercepted call opens to the runtime: the
// socket it gets may be descriptor 0, and the call goes out on it.
TEST_F(TransparentWireTest, AnInterceptedCallsRuntimeConnectionOnDescriptor0IsMade) {
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(ctx_.backend_path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, ctx_.backend_path.data(), ctx_.backend_path.size());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  saved_stdin_ = ::dup(0);  // put back as descriptor 0 at TearDown
  ASSERT_GE(saved_stdin_, 0);
  ::close(0);
  std::string settings, body;
  relay::h2::appendSettings(settings, {});
  relay::h2::appendData(body, 1, grpcFrame(""), true, 16384);
  send(kubelet_,
       settings + requestHeaders(1, "/runtime.v1.RuntimeService/StopContainer", false) + body);
  const int runtime = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_GE(runtime, 0) << "no connection reached the runtime: " << std::strerror(errno);
  if (runtime >= 0) ::close(runtime);
  ::close(listener);
}

// The runtime's DATA relayed to kubelet uses kubelet's connection window as
// crihookd's own replies do: what crihookd sends of its own is bounded by
// what the runtime's relayed reply left of it. Streams' windows here are far
// larger than the connection's, so the connection's is what binds.
TEST_F(TransparentWireTest, CrihookdsOwnReplyHasOnlyWhatTheRuntimesDataLeftOfKubeletsWindow) {
  using relay::h2::FrameType;
  RawH2Backend side(ctx_.backend_path);  // crihookd's side connection: echoes the request
  std::string settings, version, reply;
  relay::h2::appendSettings(settings, {{relay::h2::setting::kInitialWindowSize, 1u << 20}});
  relay::h2::appendData(version, 1, grpcFrame("v"), true, 16384);
  send(kubelet_,
       settings + requestHeaders(1, "/runtime.v1.RuntimeService/Version", false) + version);
  // 48 KiB of the runtime's reply, which kubelet reads and grants nothing
  // back for: 16,383 bytes of its 65,535-byte connection window are left.
  constexpr size_t kRelayed = 3 * 16384;
  relay::h2::appendHeaderBlock(reply, 1, replyHeaders(), false, 16384);
  relay::h2::appendData(reply, 1, grpcFrame(std::string(kRelayed - 5, 'r')), false, 16384);
  send(runtime_, reply);
  auto dataOn = [&](uint32_t stream) {
    size_t n = 0;
    for (const Frame& f : framesOf(kubelet_got_))
      if (f.header.type == FrameType::kData && f.header.stream_id == stream) n += f.header.length;
    return n;
  };
  ASSERT_EQ(dataOn(1), kRelayed);

  // An intercepted call whose reply (the echo, 30 KB) crihookd sends itself.
  runtime::v1::StopContainerRequest req;
  req.set_container_id(std::string(30000, 'c'));
  const std::string message = grpcFrame(req.SerializeAsString());
  std::string stop;
  relay::h2::appendData(stop, 3, message, true, 16384);
  send(kubelet_, requestHeaders(3, "/runtime.v1.RuntimeService/StopContainer", false) + stop);
  ASSERT_TRUE(eventually([&] {
    settle();
    return dataOn(3) > 0;
  })) << "crihookd's reply never began";
  settle();
  EXPECT_EQ(dataOn(3), 65535 - kRelayed) << "kubelet's connection window, less the runtime's DATA";

  // kubelet grants the connection what it read: the rest comes, then the status.
  std::string update;
  relay::h2::appendWindowUpdate(update, 0, static_cast<uint32_t>(kRelayed + dataOn(3)));
  send(kubelet_, update);
  ASSERT_TRUE(eventually([&] {
    settle();
    return dataOn(3) == message.size();
  })) << dataOn(3);
  auto blocks = decodedBlocks(framesOf(kubelet_got_));
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(blocks.back().first, 3u);
  EXPECT_TRUE(hasField(blocks.back().second, "grpc-status", "0"));
}

TEST_F(TransparentRuntimeOnFd0Test, KubeletsCallsAreRelayedToTheRuntime) {
  using relay::h2::FrameType;
  sendVersionCall();
  std::vector<Frame> frames = runtimeFrames();
  EXPECT_TRUE(std::any_of(frames.begin(), frames.end(), [](const Frame& f) {
    return f.header.type == FrameType::kHeaders && f.header.stream_id == 1;
  })) << "the runtime got kubelet's call";
  // kubelet sees the runtime's SETTINGS (none), not crihookd's own.
  frames = framesOf(kubelet_got_);
  ASSERT_FALSE(frames.empty());
  ASSERT_EQ(frames[0].header.type, FrameType::kSettings);
  auto settings = relay::h2::settingsOf(frames[0].payload);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings, ::testing::Not(::testing::Contains(::testing::Key(3))))
      << "no SETTINGS_MAX_CONCURRENT_STREAMS of crihookd's";
  EXPECT_EQ(ctx_.stand_in_connections.load(), 0);
}

// No runtime connection: crihookd stands in for the runtime, as for a
// connection accepted while the runtime cannot be reached.
class TransparentStandInWireTest : public TransparentWireTest {
 protected:
  void SetUp() override { open(true); }
};

TEST_F(TransparentStandInWireTest, CrihookdsOwnSettingsOpenTheConnectionAndItAnswersKubelet) {
  using relay::h2::FrameType;
  namespace flags = relay::h2::flags;
  // Sent at once, before kubelet's SETTINGS: those nghttp2's server sent for
  // the terminating relay, and a connection window of 16 MiB.
  std::vector<Frame> frames = framesOf(kubelet_got_);
  ASSERT_GE(frames.size(), 2u);
  ASSERT_EQ(frames[0].header.type, FrameType::kSettings);
  auto settings = relay::h2::settingsOf(frames[0].payload);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings, ::testing::UnorderedElementsAre(std::pair<uint16_t, uint32_t>{3, 1024},
                                                         std::pair<uint16_t, uint32_t>{4, 1 << 20},
                                                         std::pair<uint16_t, uint32_t>{6, 65536}));
  ASSERT_EQ(frames[1].header.type, FrameType::kWindowUpdate);
  EXPECT_EQ(frames[1].header.stream_id, 0u);
  EXPECT_EQ(relay::h2::windowIncrementOf(frames[1].payload).value_or(0), (16u << 20) - 65535u);
  kubelet_got_.clear();

  std::string mine;
  relay::h2::appendSettings(mine, {{relay::h2::setting::kInitialWindowSize, 100000}});
  send(kubelet_, mine + frame(FrameType::kPing, 0, 0, "12345678"));
  loop_->expireTimers();
  settle();
  frames = framesOf(kubelet_got_);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].header.type, FrameType::kSettings);
  EXPECT_TRUE(frames[0].header.has(flags::kAck)) << "kubelet's SETTINGS acknowledged";
  EXPECT_EQ(frames[1].header.type, FrameType::kPing);
  EXPECT_TRUE(frames[1].header.has(flags::kAck));
  EXPECT_EQ(frames[1].payload, "12345678");
  EXPECT_FALSE(kubelet_eof_);
}

TEST_F(TransparentStandInWireTest, ACallIsAnsweredUnavailableNamingTheBackend) {
  sendVersionCall();
  auto blocks = decodedBlocks(framesOf(kubelet_got_));
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].first, 1u);
  EXPECT_TRUE(hasField(blocks[0].second, "grpc-status", "14"));
  const auto message = std::find_if(blocks[0].second.begin(), blocks[0].second.end(),
                                    [](const auto& f) { return f.first == "grpc-message"; });
  ASSERT_NE(message, blocks[0].second.end());
  EXPECT_THAT(message->second, ::testing::HasSubstr("crihookd: backend unix://"));
  EXPECT_THAT(message->second, ::testing::HasSubstr("no-backend.sock unavailable"));
  EXPECT_EQ(ctx_.active_calls.load(), 0);
  EXPECT_FALSE(kubelet_eof_);
}

TEST_F(TransparentStandInWireTest, DataOnAStreamNeverOpenedEndsTheConnection) {
  using relay::h2::FrameType;
  std::string settings, data;
  relay::h2::appendSettings(settings, {});
  relay::h2::appendData(data, 5, "x", false, 16384);
  send(kubelet_, settings + data);
  const std::vector<Frame> frames = framesOf(kubelet_got_);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().header.type, FrameType::kGoaway);
  auto goaway = relay::h2::goawayOf(frames.back().payload);
  ASSERT_TRUE(goaway.ok());
  EXPECT_EQ(goaway->second, relay::h2::error::kProtocolError);
  EXPECT_TRUE(kubelet_eof_);
}

}  // namespace
}  // namespace crihook::testing
