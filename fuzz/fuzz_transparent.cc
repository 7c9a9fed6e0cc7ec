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
//
// And HPACK (RFC 7541): each peer's decoder must stay in step with the other
// peer's encoder, though crihookd keeps some blocks from it (kubelet's of a
// call crihookd answers, the runtime's on such a stream), re-encodes some
// and writes its own to kubelet. The harness decodes the blocks each peer
// sent, in order, with a decoder of its own that mirrors the peer's encoder,
// up to the first that does not decode (crihookd's decoder fails there too,
// and crihookd reads no more of that peer); and what each peer read with
// another, the peer's own decoder. Then:
// - every header block either peer reads decodes, but for the sender's
//   undecodable one passed on as it came (the runtime's blocks go to kubelet
//   frame by frame, before crihookd decodes them); nothing after that one
//   is checked;
// - every block the runtime reads is one of kubelet's on its stream, later
//   than the one the stream's previous block was, and decodes to its fields,
//   canonicalised as crihookd relays requests (crihook::relay::canonicalise):
//   as it came, as a ghost (an intercepted call's block without END_STREAM,
//   then RST_STREAM) or re-encoded. So is every block kubelet reads of the
//   runtime's, with the fields as the runtime sent them. A block that holds
//   only literals without indexing, with literal names, is what crihookd
//   writes kubelet itself (hpack::appendLiteral) and reads the same whatever
//   the table holds: kubelet's are not matched.
// Not checked: the blocks a peer reads after it sent its first
// SETTINGS_HEADER_TABLE_SIZE. crihookd applies it to its decoder of the other
// peer's blocks (and its encoder for this one) as it reads it, the peer's
// own decoder once the other acknowledges it; in which order crihookd read
// the setting and the other peer's blocks is not the harness's to know, and
// decides what decodes. What the peer had read before it sent it is checked
// (crihookd had not read the setting then, and the peer's table was still
// the 4,096 bytes it started with). Nor anything after a frame that ends a
// receiver's connection: one inside a header block, a PUSH_PROMISE.

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
#include <unordered_map>
#include <vector>

#include "cri/interceptor.h"
#include "fuzz/refusing_interceptor.h"
#include "proxy/event_loop.h"
#include "proxy/h2_frame.h"
#include "proxy/h2_headers.h"
#include "proxy/hpack.h"
#include "proxy/relay.h"
#include "proxy/transparent.h"

namespace {

namespace h2 = crihook::relay::h2;
namespace hpack = crihook::relay::hpack;
using crihook::relay::Headers;

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
  // (sent.size(), got.size()) before each send: crihookd reads what was sent
  // from there on only after the peer has read `got` up to there.
  std::vector<std::pair<size_t, size_t>> marks;

  // Sends what crihookd's socket takes now; false once it cannot take more
  // (full, or crihookd hung up, which drops the rest).
  bool send() {
    if (pending.empty()) return false;
    marks.emplace_back(sent.size(), got.size());
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
  size_t end = 0;  // where it ends in the peer's bytes
};

// The whole frames of `bytes`, which start at `base` of a peer's bytes (a
// frame cut short at the end is left out).
std::vector<Frame> framesOf(std::string_view bytes, size_t base = 0) {
  std::vector<Frame> frames;
  size_t at = 0;
  while (bytes.size() - at >= h2::kFrameHeaderBytes) {
    const h2::FrameHeader h =
        h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data() + at));
    if (bytes.size() - at - h2::kFrameHeaderBytes < h.length) break;
    at += h2::kFrameHeaderBytes + h.length;
    frames.push_back({h, bytes.substr(at - h.length, h.length), base + at});
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

// --- HPACK: what each peer's decoder reads --------------------------------

// One header block: the fragments of a HEADERS frame and its CONTINUATIONs.
struct Block {
  uint32_t stream = 0;
  std::string bytes;
  size_t end = 0;  // where its last frame ends in the peer's bytes
};

// The header blocks of `frames`, in order. As crihookd assembles a peer's
// (Transparent::Side::addBlockFrame) when not `strict`: a HEADERS frame
// starts a block, other frames in between are passed over; the first
// CONTINUATION out of place or HEADERS with bad padding ends the list, as it
// ends crihookd's reading of that peer. As an HTTP/2 receiver reads them
// when `strict`: any other frame inside a block, or a PUSH_PROMISE (no
// client may send one), ends the list too, as it ends the receiver's
// connection.
std::vector<Block> blocksOf(const std::vector<Frame>& frames, bool strict) {
  std::vector<Block> blocks;
  Block block;
  bool in_block = false;
  for (const Frame& f : frames) {
    const h2::FrameType type = f.header.type;
    if (type == h2::FrameType::kHeaders) {
      if (in_block && strict) break;
      auto fragment = h2::headerBlockFragment(f.header, f.payload);
      if (!fragment.ok()) break;
      block.stream = f.header.stream_id;
      block.bytes.assign(*fragment);
      in_block = true;
    } else if (type == h2::FrameType::kContinuation) {
      if (!in_block || f.header.stream_id != block.stream) break;
      block.bytes.append(f.payload);
    } else {
      if (strict && (in_block || type == h2::FrameType::kPushPromise)) break;
      continue;
    }
    if (f.header.has(h2::flags::kEndHeaders)) {
      block.end = f.end;
      blocks.push_back(std::move(block));
      block = Block{};
      in_block = false;
    }
  }
  return blocks;
}

// What one peer sent: its blocks decoded in order by the harness's own
// decoder, which mirrors the peer's encoder, up to the first block that does
// not decode (`bad`). crihookd decodes the same blocks in the same order,
// and its decoder fails there too: it stops reading that peer, whose later
// blocks reach no one.
struct Sent {
  std::vector<Block> blocks;
  // What the other peer is to decode from each: its fields, canonicalised
  // as crihookd sends requests (crihook::relay::canonicalise) when
  // `requests`.
  std::vector<Headers> fields;
  bool has_bad = false;
  Block bad;
};

Sent decodeSent(std::vector<Block> blocks, bool requests) {
  Sent sent;
  hpack::Decoder mirror;
  for (Block& b : blocks) {
    Headers fields;
    auto st = mirror.decode(b.bytes, [&](std::string_view n, std::string_view v) {
      fields.push_back({std::string(n), std::string(v)});
    });
    if (!st.ok()) {
      sent.has_bad = true;
      sent.bad = std::move(b);
      break;
    }
    // kubeletBlock: a relayed request that is not canonical goes
    // canonicalised (re-encoded); an intercepted one goes to the runtime
    // (a ghost) only as it came, which it does only when canonical. A
    // refused one does not go: all of a relayed request's fields passed
    // checkRequestField.
    if (requests && !crihook::relay::isCanonical(fields)) crihook::relay::canonicalise(fields);
    sent.blocks.push_back(std::move(b));
    sent.fields.push_back(std::move(fields));
  }
  return sent;
}

bool sameFields(const Headers& a, const Headers& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.name == y.name && x.value == y.value;
  });
}

// Whether `block` holds only what crihookd writes in blocks of its own
// (hpack::appendLiteral): literals without indexing, with literal names, not
// Huffman-coded. Such a block reads the same whatever the table holds.
bool literalOnly(std::string_view block) {
  size_t at = 0;
  auto literal = [&] {  // a string literal (RFC 7541 5.2), its H bit clear
    if (at >= block.size() || (static_cast<uint8_t>(block[at]) & 0x80)) return false;
    uint64_t length = static_cast<uint8_t>(block[at++]);
    if (length == 0x7f) {  // the prefix full: 7 bits a byte follow (5.1)
      for (int shift = 0;; shift += 7) {
        if (at >= block.size() || shift > 28) return false;
        const uint8_t b = static_cast<uint8_t>(block[at++]);
        length += uint64_t{b & 0x7fu} << shift;
        if ((b & 0x80) == 0) break;
      }
    }
    if (length > block.size() - at) return false;
    at += length;
    return true;
  };
  while (at < block.size()) {
    if (block[at++] != 0) return false;
    if (!literal() || !literal()) return false;
  }
  return true;
}

// Where the check of the blocks `receiver` reads ends: at what it had read
// when it sent its first SETTINGS_HEADER_TABLE_SIZE (from `skip` on, its
// frames). Up to there crihookd had read none (crihookd sets its own decoder
// of the other peer's blocks, and its encoder for `receiver`, as it reads
// it), and `receiver`'s decoder, which applies it only once the other peer
// acknowledges it, still had the table size of 4,096 it started with.
// After it the harness cannot tell in which order crihookd read the setting
// and the other peer's blocks, which decides what decodes.
size_t tableSizeCutoff(const Peer& receiver, size_t skip) {
  if (receiver.sent.size() < skip) return SIZE_MAX;
  for (const Frame& f : framesOf(std::string_view(receiver.sent).substr(skip), skip)) {
    if (f.header.type != h2::FrameType::kSettings || f.header.has(h2::flags::kAck)) continue;
    bool sets = false;
    for (size_t i = 0; i + 6 <= f.payload.size(); i += 6)
      sets |= f.payload[i] == 0 && f.payload[i + 1] == h2::setting::kHeaderTableSize;
    if (!sets) continue;
    const size_t at = f.end - f.payload.size() - h2::kFrameHeaderBytes;
    size_t got = 0;
    for (auto [sent_at, got_at] : receiver.marks) {
      if (sent_at > at) break;
      got = got_at;
    }
    return got;
  }
  return SIZE_MAX;
}

// The header blocks one peer read (`got`, its frames), up to `cutoff`,
// against what the other sent (`sent`). Each decodes, with a decoder of the
// peer's own that has seen every block before it: crihookd keeps the peer's
// decoder in step with the other peer's encoder. Each block that crihookd
// may not have written itself (to kubelet: any but a literal-only one) is one
// of the other peer's blocks on that stream, in the order sent (crihookd
// keeps some from the peer, and reorders none of a stream's), and decodes to
// that block's fields (canonicalised, to the runtime) whether it went as it
// came or re-encoded. The first block that does not decode may be the
// sender's own `bad` one, as it came; nothing is checked after it.
void checkBlocks(const std::vector<Frame>& got, size_t cutoff, const Sent& sent, bool to_runtime) {
  std::unordered_map<uint32_t, std::vector<size_t>> by_stream;
  for (size_t i = 0; i < sent.blocks.size(); ++i) by_stream[sent.blocks[i].stream].push_back(i);
  std::unordered_map<uint32_t, size_t> next;  // of by_stream's, the first not matched yet
  hpack::Decoder decoder;
  for (const Block& b : blocksOf(got, true)) {
    if (b.end > cutoff) return;
    Headers fields;
    auto st = decoder.decode(b.bytes, [&](std::string_view n, std::string_view v) {
      fields.push_back({std::string(n), std::string(v)});
    });
    if (!st.ok()) {
      check(sent.has_bad && sent.bad.stream == b.stream && sent.bad.bytes == b.bytes,
            to_runtime ? "the runtime read a header block it cannot decode (HPACK out of step)"
                       : "kubelet read a header block it cannot decode (HPACK out of step)");
      return;
    }
    if (!to_runtime && literalOnly(b.bytes)) continue;
    const std::vector<size_t>& candidates = by_stream[b.stream];
    size_t& i = next[b.stream];
    while (i < candidates.size() && !sameFields(sent.fields[candidates[i]], fields)) ++i;
    check(i < candidates.size(),
          to_runtime ? "the runtime read a header block kubelet did not send on its stream "
                       "(HPACK out of step, or fields changed)"
                     : "kubelet read a header block the runtime did not send on its stream "
                       "(HPACK out of step, or fields changed)");
    ++i;
  }
}

void checkHpack(const Peer& kubelet, const Peer& runtime) {
  const size_t preface = h2::kClientPreface.size();
  if (kubelet.sent.size() >= preface) {
    const Sent requests = decodeSent(
        blocksOf(framesOf(std::string_view(kubelet.sent).substr(preface), preface), false), true);
    if (runtime.got.size() >= preface) {
      checkBlocks(framesOf(std::string_view(runtime.got).substr(preface), preface),
                  tableSizeCutoff(runtime, 0), requests, true);
    }
  }
  const Sent replies = decodeSent(blocksOf(framesOf(runtime.sent), false), false);
  checkBlocks(framesOf(kubelet.got), tableSizeCutoff(kubelet, preface), replies, false);
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
  checkHpack(kubelet, runtime);
  check(ctx.active_calls.load() == 0, "calls left counted as active");
  check(ctx.open_connections.load() == 0, "a connection left counted as open");
  check(ctx.buffered_bytes.load() == 0, "message bytes left counted as buffered");
  check(ctx.header_bytes.load() == 0, "header bytes left counted as held");
  return 0;
}
