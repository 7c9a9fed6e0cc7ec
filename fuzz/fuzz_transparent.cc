// The transparent relay (proxy/transparent.h, [server] relay = "transparent")
// between a hostile kubelet and a hostile runtime: both peers' bytes come from
// the input. Each input is one connection: a real relay::Transparent over two
// socketpairs (kubelet's end, the runtime's end) on an EventLoop this harness
// runs by hand (poll until nothing is left to do, bounded), with what crihookd
// writes to either peer read as it comes. Then the connection is closed and
// must have released everything.
//
// Input: 1 byte of flags, then records, each played in turn and followed by
// turns of the loop until it is idle, so that the records' edges are the
// reads' edges on both sockets:
//   flags bit 0  the interceptor refuses every intercepted call (else it
//                passes them on, to a side connection whose backend socket
//                does not exist: they end UNAVAILABLE at once)
//         bit 1  the runtime's records open its side of the connection (else
//                the harness sends the runtime's SETTINGS first)
//         bit 2  tight limits: timeouts of 0 (everything is late at the next
//                tick) and small buffers and messages
//   record       1 byte kind (% 6), then for kKubelet and kRuntime a 2-byte
//                big-endian length and that many bytes (what is left, when
//                fewer):
//     0 kubelet's bytes, after the client preface the harness sends itself
//     1 the runtime's bytes
//     2 every pending timer runs now (the tick, an owed PING ACK)
//     3 kubelet hangs up (shuts down its writing side)
//     4 the runtime hangs up
//     5 graceful shutdown (GOAWAY to kubelet), as crihookd's SIGTERM does
//
// What crihookd writes is checked only where the design guarantees it:
// - to the runtime: the client preface, then frames; every DATA frame is
//   one of kubelet's, as it came and in order (crihookd drops some, changes
//   none, and writes none of its own: its own streams go to the side
//   connection); every SETTINGS frame holds only HTTP/2's own settings and a
//   SETTINGS_MAX_FRAME_SIZE of at most 64 KiB; no PING but ACKs (kubelet's
//   PINGs are crihookd's to answer); header blocks come whole (no other
//   frame between a HEADERS and its CONTINUATIONs);
// - to kubelet: a SETTINGS frame first (the server's preface, when the
//   harness sent the runtime's); the same holds of every SETTINGS frame; no
//   PUSH_PROMISE (the runtime sending one ends its connection); header
//   blocks come whole when the runtime's did.

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cri/interceptor.h"
#include "fuzz/refusing_interceptor.h"
#include "proxy/event_loop.h"
#include "proxy/h2_frame.h"
#include "proxy/relay.h"
#include "proxy/transparent.h"

namespace {

namespace h2 = crihook::relay::h2;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_transparent: %s\n", what);
    std::abort();
  }
}

// Turns of the loop after one record: a record whose consequences never
// settle (the two peers' frames ping-ponging through crihookd) is cut there.
constexpr int kMaxRoundsPerRecord = 32;
// Records played from one input; the rest is ignored (an input of 1-byte
// records would otherwise cost thousands of turns).
constexpr int kMaxRecords = 512;
// What is kept of each peer's reads for the checks; the rest is read and
// dropped (the checks hold of any prefix).
constexpr size_t kMaxCapture = 4 << 20;
// The biggest SETTINGS_MAX_FRAME_SIZE crihookd tells either peer
// (Transparent::kMaxWholeFrame).
constexpr uint32_t kMaxAdvertisedFrame = 64 << 10;

enum Kind { kKubelet, kRuntime, kTimers, kKubeletHangup, kRuntimeHangup, kShutdown, kKinds };

crihook::RelayContext& context(uint8_t flags) {
  static crihook::PassThroughInterceptor pass;
  static crihook::fuzz::RefusingInterceptor refusing("fuzz_transparent");
  static crihook::RelayContext ctx;  // holds atomics: set up in place, once
  static const bool ready = [] {
    ctx.backend_path =
        (std::filesystem::temp_directory_path() / "fuzz-transparent-no-backend.sock").string();
    ctx.backend_endpoint = "unix://" + ctx.backend_path;
    auto sink = std::make_shared<spdlog::sinks::null_sink_mt>();
    ctx.log = std::make_shared<spdlog::logger>("proxy", sink);
    ctx.log->set_level(spdlog::level::debug);  // the log lines' formatting runs too
    return true;
  }();
  (void)ready;
  ctx.interceptor = (flags & 1) ? static_cast<crihook::Interceptor*>(&refusing) : &pass;
  ctx.limits = crihook::RelayLimits{};
  ctx.max_message_bytes = 64u << 10;  // within reach of the input
  if (flags & 4) {
    ctx.limits.preface_timeout = ctx.limits.idle_timeout = ctx.limits.request_timeout =
        std::chrono::milliseconds(0);
    ctx.limits.max_connection_buffered_bytes = 1024;
    ctx.limits.max_buffered_bytes = 4096;
    ctx.max_message_bytes = 256;
  }
  return ctx;
}

// One peer: its end of a socketpair, what it still has to send, and what it
// has sent and read.
struct Peer {
  int fd = -1;
  std::string pending;
  bool hung_up = false;  // its writing side is shut
  std::string sent;
  std::string got;

  // Sends what crihookd's socket takes now; false once it cannot take more
  // (full, or crihookd hung up, which drops the rest).
  bool send() {
    if (pending.empty()) return false;
    const ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) pending.clear();
    if (n <= 0) return false;
    sent.append(pending, 0, static_cast<size_t>(n));
    pending.erase(0, static_cast<size_t>(n));
    return true;
  }

  void drain() {
    char buf[16384];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      if (got.size() < kMaxCapture) got.append(buf, std::min<size_t>(n, kMaxCapture - got.size()));
    }
  }

  void hangUp() {
    pending.clear();
    hung_up = true;
    ::shutdown(fd, SHUT_WR);
  }
};

struct Frame {
  h2::FrameHeader header;
  std::string_view payload;
};

// The whole frames of `bytes` (a frame cut short at the end is left out).
std::vector<Frame> framesOf(std::string_view bytes) {
  std::vector<Frame> frames;
  while (bytes.size() >= h2::kFrameHeaderBytes) {
    const h2::FrameHeader h = h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
    if (bytes.size() - h2::kFrameHeaderBytes < h.length) break;
    frames.push_back({h, bytes.substr(h2::kFrameHeaderBytes, h.length)});
    bytes.remove_prefix(h2::kFrameHeaderBytes + h.length);
  }
  return frames;
}

bool sameFrame(const Frame& a, const Frame& b) {
  return a.header.type == b.header.type && a.header.flags == b.header.flags &&
         a.header.stream_id == b.header.stream_id && a.payload == b.payload;
}

// Whether every header block of `frames` comes whole, as HTTP/2 requires
// (RFC 9113 6.10): a HEADERS (or, with `push_opens`, PUSH_PROMISE) without
// END_HEADERS is followed only by CONTINUATION frames of its stream, up to
// one with END_HEADERS, and there is no CONTINUATION elsewhere. A block cut
// short at the end is whole so far.
bool blocksWhole(const std::vector<Frame>& frames, bool push_opens) {
  bool in_block = false;
  uint32_t stream = 0;
  for (const Frame& f : frames) {
    const h2::FrameType type = f.header.type;
    const bool continuation = type == h2::FrameType::kContinuation;
    if (in_block != continuation || (in_block && f.header.stream_id != stream)) return false;
    const bool opens =
        type == h2::FrameType::kHeaders || (push_opens && type == h2::FrameType::kPushPromise);
    in_block = (opens || continuation) && !f.header.has(h2::flags::kEndHeaders);
    stream = f.header.stream_id;
  }
  return true;
}

// A SETTINGS frame as crihookd writes it to either peer (appendKnownSettings):
// whole entries, only HTTP/2's own settings, frames of at most 64 KiB.
void checkSettings(const Frame& f, const char* what) {
  if (f.header.has(h2::flags::kAck)) return;  // an ACK passes as it came
  check(f.header.stream_id == 0 && f.payload.size() % 6 == 0, what);
  for (size_t i = 0; i < f.payload.size(); i += 6) {
    const auto* p = reinterpret_cast<const uint8_t*>(f.payload.data() + i);
    const uint16_t id = static_cast<uint16_t>(p[0] << 8 | p[1]);
    const uint32_t value = uint32_t{p[2]} << 24 | uint32_t{p[3]} << 16 | uint32_t{p[4]} << 8 | p[5];
    check((id >= 0x1 && id <= 0x6) || id == 0x9, what);
    check(id != h2::setting::kMaxFrameSize || value <= kMaxAdvertisedFrame, what);
  }
}

void checkToRuntime(std::string_view got, std::string_view kubelet_sent) {
  const std::string_view preface = h2::kClientPreface;
  check(got.substr(0, preface.size()) == preface.substr(0, got.size()),
        "the runtime did not read the client preface first");
  if (got.size() < preface.size()) return;
  got.remove_prefix(preface.size());
  kubelet_sent.remove_prefix(preface.size());  // the harness sent it whole, first
  std::vector<Frame> sent;
  for (const Frame& f : framesOf(kubelet_sent)) {
    if (f.header.type == h2::FrameType::kData) sent.push_back(f);
  }
  const std::vector<Frame> frames = framesOf(got);
  // kubelet's blocks go as they came, or re-encoded, each in one piece;
  // kubelet's frames out of place end its connection. A PUSH_PROMISE of
  // kubelet's (which a client may not send, RFC 9113 8.4) passes as it came,
  // for the runtime to refuse: here it opens no block.
  check(blocksWhole(frames, false), "the runtime read a frame inside a header block");
  size_t next = 0;
  for (const Frame& f : frames) {
    switch (f.header.type) {
      case h2::FrameType::kData:
        while (next < sent.size() && !sameFrame(sent[next], f)) ++next;
        check(next < sent.size(), "the runtime read a DATA frame kubelet did not send");
        ++next;
        break;
      case h2::FrameType::kSettings:
        checkSettings(f, "the runtime read SETTINGS crihookd does not pass on");
        break;
      case h2::FrameType::kPing:
        check(f.header.has(h2::flags::kAck), "the runtime read kubelet's PING");
        break;
      default:
        break;
    }
  }
}

void checkToKubelet(std::string_view got, std::string_view runtime_sent, bool settings_first) {
  const std::vector<Frame> frames = framesOf(got);
  // The runtime's blocks pass frame by frame; crihookd's own frames must
  // not land inside one (the runtime's own misplaced frames pass on).
  if (blocksWhole(framesOf(runtime_sent), true)) {
    check(blocksWhole(frames, true), "kubelet read a frame inside a header block");
  }
  if (settings_first && !frames.empty()) {
    check(
        frames[0].header.type == h2::FrameType::kSettings && !frames[0].header.has(h2::flags::kAck),
        "kubelet's first frame is not the server's SETTINGS");
  }
  for (const Frame& f : frames) {
    if (f.header.type == h2::FrameType::kSettings)
      checkSettings(f, "kubelet read SETTINGS crihookd does not pass on");
    check(f.header.type != h2::FrameType::kPushPromise, "kubelet read a PUSH_PROMISE");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  crihook::RelayContext& ctx = context(flags);
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  auto made = crihook::relay::EventLoop::create();
  check(made.ok(), "no event loop");
  crihook::relay::EventLoop& loop = **made;
  int kpair[2], rpair[2];
  check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, kpair) == 0,
        "no socketpair");
  check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, rpair) == 0,
        "no socketpair");
  Peer kubelet, runtime;
  kubelet.fd = kpair[1];
  runtime.fd = rpair[1];

  // Held by its loop's handlers only, as crihookd's Connection does: once
  // closed it ends, and its sockets with it.
  std::weak_ptr<crihook::relay::Transparent> weak;
  {
    auto conn = std::make_shared<crihook::relay::Transparent>(loop, kpair[0], rpair[0], ctx);
    weak = conn;
    loop.post([conn] { conn->start(); });
  }

  // Sends what is pending and runs the loop until it is idle.
  auto settle = [&] {
    for (int round = 0; round < kMaxRoundsPerRecord; ++round) {
      bool sent = kubelet.send();
      sent = runtime.send() || sent;
      const size_t ran = loop.poll();
      kubelet.drain();
      runtime.drain();
      if (!sent && ran == 0) break;
    }
    // What crihookd's socket did not take by now is dropped: crihookd does
    // not read that side (it waits for the other to read, or hung up).
    kubelet.pending.clear();
    runtime.pending.clear();
  };

  kubelet.pending.assign(h2::kClientPreface);
  const bool settings_first = !(flags & 2);
  if (settings_first) h2::appendSettings(runtime.pending, {});
  settle();
  for (int records = 0; !in.empty() && records < kMaxRecords; ++records) {
    const int kind = static_cast<uint8_t>(in[0]) % kKinds;
    in.remove_prefix(1);
    switch (kind) {
      case kKubelet:
      case kRuntime: {
        size_t n = 0;
        if (in.size() >= 2) n = static_cast<uint8_t>(in[0]) << 8 | static_cast<uint8_t>(in[1]);
        in.remove_prefix(std::min<size_t>(in.size(), 2));
        n = std::min(n, in.size());
        Peer& p = kind == kKubelet ? kubelet : runtime;
        if (!p.hung_up) p.pending.append(in.substr(0, n));
        in.remove_prefix(n);
        break;
      }
      case kTimers:
        loop.expireTimers();
        break;
      case kKubeletHangup:
        kubelet.hangUp();
        break;
      case kRuntimeHangup:
        runtime.hangUp();
        break;
      case kShutdown:
        if (auto conn = weak.lock()) loop.post([conn] { conn->shutdown(); });
        break;
    }
    settle();
  }
  // Nothing left but timers (an owed PING ACK's, the tick): run them now
  // rather than sleep for them, once.
  loop.expireTimers();
  settle();

  if (auto conn = weak.lock()) loop.post([conn] { conn->close("closed by fuzz_transparent"); });
  for (int round = 0; round < kMaxRoundsPerRecord && loop.poll() > 0; ++round) {
    kubelet.drain();
    runtime.drain();
  }
  check(weak.expired(), "the connection still holds its state after close()");
  ::close(kubelet.fd);
  ::close(runtime.fd);

  checkToRuntime(runtime.got, kubelet.sent);
  checkToKubelet(kubelet.got, runtime.sent, settings_first);
  check(ctx.active_calls.load() == 0, "calls left counted as active");
  check(ctx.open_connections.load() == 0, "a connection left counted as open");
  check(ctx.buffered_bytes.load() == 0, "message bytes left counted as buffered");
  check(ctx.header_bytes.load() == 0, "header bytes left counted as held");
  return 0;
}
