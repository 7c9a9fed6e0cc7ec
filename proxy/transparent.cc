#include "proxy/transparent.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "base/grpc_wire.h"
#include "base/text.h"
#include "cri/lifecycle.h"
#include "proxy/call_budget.h"
#include "proxy/h2_session.h"

namespace crihook::relay {

namespace {

constexpr size_t kReadBytes = 64 << 10;
// What may wait to be written to one side before the connection is cut: a
// peer that does not read while the other floods control frames (DATA is
// bounded by the windows).
constexpr size_t kMaxPendingOut = 64 << 20;
// Past this many bytes waiting for one side, the other side is not read
// until they are written: a peer that does not read holds the other up in
// the kernel's socket buffers, where the other's own limits see it (a PING
// flood answered by a runtime that kubelet does not read), not in crihookd.
constexpr size_t kBackpressureBytes = 1 << 20;
// A header block (HEADERS and its CONTINUATIONs) as it came, before
// decoding; its decoded size is capped by checkRequestField.
constexpr size_t kMaxBlockBytes = kMaxHeaderListBytes + (16 << 10);

// SETTINGS other than HTTP/2's own (RFC 9113 6.5.2, RFC 9218) are not
// passed on: each end would take the other to speak an extension crihookd
// does not read (gRPC C++'s true binary metadata, 0xfe03, sends raw bytes in
// -bin headers that crihookd's checks refuse).
bool knownSetting(uint16_t id) { return (id >= 0x1 && id <= 0x6) || id == 0x9; }

// The frame of `entries` less the settings crihookd does not pass on, and
// with SETTINGS_MAX_FRAME_SIZE at most `max_frame`: every DATA frame of a
// relayed stream is then read whole, so the message limit cuts a stream at
// a frame's edge, with a status, never in the middle of a frame.
// With `header_list_cap`, SETTINGS_MAX_HEADER_LIST_SIZE is at most that, and
// sent when the frame has none: what kubelet is told is the smaller of the
// runtime's cap and crihookd's own (which refuses past it).
void appendKnownSettings(std::string& out,
                         const std::vector<std::pair<uint16_t, uint32_t>>& entries,
                         uint32_t max_frame, uint32_t header_list_cap = 0) {
  std::vector<std::pair<uint16_t, uint32_t>> known;
  known.reserve(entries.size() + 1);
  bool header_list = false;
  for (auto e : entries) {
    if (!knownSetting(e.first)) continue;
    if (e.first == h2::setting::kMaxFrameSize) e.second = std::min(e.second, max_frame);
    if (e.first == h2::setting::kMaxHeaderListSize && header_list_cap != 0) {
      e.second = std::min(e.second, header_list_cap);
      header_list = true;
    }
    known.push_back(e);
  }
  if (header_list_cap != 0 && !header_list)
    known.emplace_back(h2::setting::kMaxHeaderListSize, header_list_cap);
  h2::appendSettings(out, known);
}

}  // namespace

struct Transparent::Handler final : IoHandler {
  Handler(std::shared_ptr<Transparent> c, bool k) : conn(std::move(c)), kubelet(k) {}
  void onReadable(bool hangup) override { conn->onReadable(kubelet, hangup); }
  void onWritable() override { conn->onWritable(kubelet); }
  std::shared_ptr<Transparent> conn;
  bool kubelet;
};

Transparent::Transparent(EventLoop& loop, int kubelet_fd, int runtime_fd, RelayContext& ctx)
    : loop_(loop),
      ctx_(ctx),
      stand_in_(runtime_fd < 0),
      relayed_(ctx),
      own_(*this, loop, ctx, ledger_),
      linger_(loop),
      deaf_(loop) {
  kubelet_.fd = kubelet_fd;
  // kubelet's blocks go to the runtime as they came (blockToRuntime); the
  // runtime's are forwarded frame by frame as they arrive.
  kubelet_.keeps_frames = !stand_in_;
  runtime_.fd = runtime_fd;
  // Standing in, crihookd's own SETTINGS open the connection for kubelet.
  runtime_settings_seen_ = stand_in_;
  ctx_.open_connections.fetch_add(1);
  if (stand_in_) ctx_.stand_in_connections.fetch_add(1);
}

Transparent::~Transparent() {
  if (kubelet_.fd >= 0) ::close(kubelet_.fd);
  if (runtime_.fd >= 0) ::close(runtime_.fd);
  if (stand_in_) ctx_.stand_in_connections.fetch_sub(1);
  ctx_.open_connections.fetch_sub(1);
}

void Transparent::start() {
  assert(loop_.inLoop());
  auto self = shared_from_this();
  if (auto st = loop_.watch(kubelet_.fd, std::make_shared<Handler>(self, true)); !st.ok())
    return close(cat("watch: ", st.message()));
  if (stand_in_) {
    standInPreface();
    flush(true);
  } else if (auto st = loop_.watch(runtime_.fd, std::make_shared<Handler>(self, false)); !st.ok()) {
    return close(cat("watch: ", st.message()));
  }
  if (!closed_) armTick();
}

void Transparent::shutdown() {
  assert(loop_.inLoop());
  if (closed_) return;
  goawayToKubelet();
  flushAll();
  maybeFinish();
}

void Transparent::close(const std::string& why) {
  assert(loop_.inLoop());
  if (closed_) return;
  closed_ = true;
  ctx_.log->debug("client connection closed: {}", why);
  if (tick_ != 0) loop_.cancel(tick_);
  tick_ = 0;
  if (ping_ack_timer_ != 0) loop_.cancel(ping_ack_timer_);
  ping_ack_timer_ = 0;
  linger_.stop();
  deaf_.stop();
  if (kubelet_.fd >= 0) loop_.unwatch(kubelet_.fd);
  if (runtime_.fd >= 0 && !runtime_lost_) loop_.unwatch(runtime_.fd);
  own_.closeAll();
  relayed_.closeAll();
}

void Transparent::flushSoon() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  loop_.post([self = shared_from_this()] {
    self->flush_posted_ = false;
    self->flushAll();
  });
}

void Transparent::onRuntimeAnswered() {
  if (!stand_in_ || runtime_answered_) return;
  // The calls in flight finish here; kubelet opens its next connection for
  // what comes after, as on any GOAWAY, and that one is relayed.
  runtime_answered_ = true;
  ctx_.log->debug(
      "the runtime answers again: GOAWAY, so that the client's next connection is relayed "
      "frame by frame");
  goawayToKubelet();
  flushSoon();
}

void Transparent::onOwnStreamEnded() {
  if (idle()) idle_since_ = Clock::now();
  maybeFinish();
}

// --- I/O --------------------------------------------------------------------

void Transparent::onReadable(bool kubelet, bool hangup) {
  if (closed_) return;
  if (linger_.active()) return drainWhileLingering(kubelet);
  Side& s = kubelet ? kubelet_ : runtime_;
  if (!kubelet && (runtime_waits_ || runtime_lost_)) return;
  static thread_local std::vector<char> buf(kReadBytes);
  for (int i = 0; i < 16; ++i) {
    const Side& to = kubelet ? runtime_ : kubelet_;
    if (to.out.size() - to.out_sent > kBackpressureBytes) {
      s.paused = true;
      return;
    }
    const ssize_t n = ::recv(s.fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      // After a failed write to the runtime, the end of what it sent (or the
      // reset its close left) is that failure coming due.
      const std::string why = !kubelet && deaf_.active() ? deaf_.why()
                              : n == 0                   ? "peer closed the connection"
                                                         : std::strerror(errno);
      if (kubelet) return close(why);
      runtimeGone(why);
      flushAll();
      return;
    }
    const std::string_view in(buf.data(), static_cast<size_t>(n));
    if (kubelet) {
      fromKubelet(in);
      settlePingAcks();
    } else {
      fromRuntime(in);
    }
    flushAll();
    if (closed_ || (!kubelet && (runtime_waits_ || runtime_lost_))) return;
    if (static_cast<size_t>(n) < buf.size() && !hangup) return;
  }
  // A peer that keeps the socket full: let other connections run.
  loop_.post([self = shared_from_this(), kubelet, hangup] { self->onReadable(kubelet, hangup); });
}

void Transparent::onWritable(bool kubelet) {
  Side& s = kubelet ? kubelet_ : runtime_;
  if (closed_ || !s.writing) return;
  s.writing = false;
  loop_.wantWritable(s.fd, false);
  flush(kubelet);
}

void Transparent::settlePingAcks() {
  if (!acks_.owed()) return;
  // After a whole read, so that a request that came with the PING counts.
  if (acks_.dueNow(!idle())) return sendPingAcks();
  if (ping_ack_timer_ != 0) return;
  ping_ack_timer_ = loop_.runAfter(kPingAckDelay, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self || self->closed_) return;
    self->ping_ack_timer_ = 0;
    self->sendPingAcks();
    self->flush(true);
  });
}

void Transparent::sendPingAcks() {
  if (!acks_.owed()) return;
  if (ping_ack_timer_ != 0) loop_.cancel(ping_ack_timer_);
  ping_ack_timer_ = 0;
  auto frames = acks_.take();
  if (!frames.ok()) return close(std::string(frames.status().message()));
  inject(*frames);
}

void Transparent::flush(bool kubelet) {
  Side& s = kubelet ? kubelet_ : runtime_;
  if (closed_ || s.writing || (!kubelet && (runtime_lost_ || stand_in_))) return;
  if (!kubelet && deaf_.active()) {
    s.out.clear();  // the runtime reads no more (runtimeDeaf)
    s.out_sent = 0;
    return;
  }
  // Owed PING ACKs ride with whatever else goes to kubelet now.
  if (kubelet && acks_.owed() && s.out_sent < s.out.size()) sendPingAcks();
  while (s.out_sent < s.out.size()) {
    const ssize_t n = ::send(s.fd, s.out.data() + s.out_sent, s.out.size() - s.out_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      s.out_sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return writeFailed(kubelet, errno);
    if (s.out.size() - s.out_sent > kMaxPendingOut) {
      return close(kubelet ? "kubelet does not read" : "the runtime does not read");
    }
    s.writing = true;
    loop_.wantWritable(s.fd, true);
    return;
  }
  s.out.clear();
  s.out_sent = 0;
  // Not while ACKs wait for the runtime's frame to end (pending_inject_):
  // kubelet has not read them.
  if (kubelet && pending_inject_.empty()) acks_.onKubeletRead();
  Side& from = kubelet ? runtime_ : kubelet_;
  if (from.paused) {
    from.paused = false;
    loop_.post([self = shared_from_this(), k = !kubelet] { self->onReadable(k, false); });
  }
  if (kubelet && goaway_sent_ && idle()) linger();
}

void Transparent::writeFailed(bool kubelet, int e) {
  const std::string why = cat("write: ", std::strerror(e));
  if (kubelet) return close(why);
  if (e == EPIPE || e == ECONNRESET) return runtimeDeaf(why);
  runtimeGone(why);
}

void Transparent::linger() {
  if (linger_.active() || closed_) return;
  if (tick_ != 0) loop_.cancel(tick_);
  tick_ = 0;
  ::shutdown(kubelet_.fd, SHUT_WR);
  linger_.start(
      "finished after GOAWAY; kubelet did not close within 1s",
      // What came before the half-close is read now: the edge may be past.
      [self = shared_from_this()] { self->drainWhileLingering(true); },
      [weak = weak_from_this()](const std::string& why) {
        if (auto self = weak.lock()) self->close(why);
      });
}

void Transparent::drainWhileLingering(bool kubelet) {
  if (closed_) return;
  Side& s = kubelet ? kubelet_ : runtime_;
  if (!kubelet && runtime_lost_) return;
  static thread_local std::vector<char> buf(kReadBytes);
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::recv(s.fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) continue;  // dropped: nothing more is answered
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (kubelet) return close("finished after GOAWAY");
    runtime_lost_ = true;  // the runtime's end: nothing more to read from it
    loop_.unwatch(runtime_.fd);
    return;
  }
  loop_.post([self = shared_from_this(), kubelet] { self->drainWhileLingering(kubelet); });
}

void Transparent::flushAll() {
  if (pending_inject_.size() > kMaxPendingOut)
    return close(
        "the runtime stopped inside a frame while crihookd's own frames for kubelet pile up");
  flush(false);
  flush(true);
}

void Transparent::inject(std::string_view frames) {
  // Between two frames of the runtime only: a DATA frame of the runtime's may
  // be half written to kubelet, or a header block of its in part.
  // And after the runtime's SETTINGS: kubelet must see them first (the
  // server's connection preface).
  if ((runtime_settings_seen_ && betweenRuntimeFrames()) || runtime_lost_) {
    kubelet_.out.append(frames);
    return;
  }
  // A runtime that stops inside a frame or a header block, or before its
  // SETTINGS, holds these back; flushAll() bounds them (not here: callers
  // go on with the streams close() would free).
  pending_inject_.append(frames);
}

bool Transparent::betweenRuntimeFrames() const {
  // A block re-encoded for kubelet goes whole once the runtime's is complete;
  // a withheld one does not go at all.
  return runtime_.reader.atFrameBoundary() &&
         !(runtime_.in_block && !to_kubelet_.on() && !runtime_.block_withheld);
}

void Transparent::injectToRuntime(std::string_view frames) {
  if (kubelet_.reader.atFrameBoundary()) {
    runtime_.out.append(frames);
  } else {
    pending_to_runtime_.append(frames);
  }
}

void Transparent::creditRuntime(uint32_t bytes) {
  if (bytes == 0) return;
  std::string frames;
  h2::appendWindowUpdate(frames, 0, bytes);
  injectToRuntime(frames);
}

void Transparent::creditKubelet(uint32_t bytes) {
  if (bytes == 0) return;
  std::string frames;
  h2::appendWindowUpdate(frames, 0, bytes);
  inject(frames);
}

void Transparent::protocolError(const std::string& why) {
  uint64_t held_back = 0;
  if (ctx_.refusal_log.allow(held_back)) {
    ctx_.log->warn("closed a client connection: HTTP/2: {}; {} more refused since the last message",
                   why, held_back);
  }
  std::string frames;
  h2::appendGoaway(frames, last_kubelet_stream_, h2::error::kProtocolError);
  inject(frames);
  goaway_sent_ = true;
  flush(true);
  close(cat("HTTP/2: ", why));
}

absl::Status Transparent::Side::addBlockFrame(const h2::FrameHeader& h, std::string_view payload) {
  if (h.type == h2::FrameType::kHeaders) {
    auto fragment = h2::headerBlockFragment(h, payload);
    if (!fragment.ok()) return fragment.status();
    block.assign(*fragment);
    block_frames.clear();
    block_stream = h.stream_id;
    block_end_stream = h.has(h2::flags::kEndStream);
  } else {
    if (!in_block || h.stream_id != block_stream)
      return absl::InvalidArgumentError("CONTINUATION without its HEADERS");
    if (block.size() + payload.size() > kMaxBlockBytes)
      return absl::InvalidArgumentError(
          cat("a header block of more than ", kMaxBlockBytes, " bytes"));
    block.append(payload);
  }
  if (keeps_frames) h2::appendFrame(block_frames, h, payload);
  in_block = !h.has(h2::flags::kEndHeaders);
  return absl::OkStatus();
}

// --- kubelet -> runtime -----------------------------------------------------

bool Transparent::takePreface(std::string_view& in) {
  if (preface_left_ == 0) return true;
  const size_t n = std::min(in.size(), preface_left_);
  const size_t at = h2::kClientPreface.size() - preface_left_;
  if (in.substr(0, n) != h2::kClientPreface.substr(at, n)) return false;
  if (!stand_in_) runtime_.out.append(in.substr(0, n));
  preface_left_ -= n;
  in.remove_prefix(n);
  return true;
}

void Transparent::fromKubelet(std::string_view in) {
  if (!takePreface(in)) return close("not an HTTP/2 client preface");
  h2::FrameReader& reader = kubelet_.reader;
  while (!closed_) {
    if (!pending_to_runtime_.empty() && reader.atFrameBoundary()) {
      runtime_.out.append(pending_to_runtime_);
      pending_to_runtime_.clear();
    }
    auto ev = reader.next(in);
    if (ev.kind == h2::FrameReader::Event::kNeedMore) return;
    const h2::FrameHeader& h = ev.header;
    if (ev.kind == h2::FrameReader::Event::kHeader) {
      if (kubelet_.in_block && h.type != h2::FrameType::kContinuation)
        return protocolError("a frame inside a header block");
      if (h.type == h2::FrameType::kData) {
        if (!routeKubeletData(ev)) return;
      } else if (auto st = reader.wantWhole(); !st.ok()) {
        return protocolError(std::string(st.message()));
      }
      continue;
    }
    if (ev.kind != h2::FrameReader::Event::kChunk) {
      kubeletFrame(h, ev.bytes);
    } else if (kubelet_route_ == Route::kForward) {
      runtime_.out.append(ev.bytes);
    } else if (kubelet_route_ == Route::kOwnData) {
      own_.onData(h.stream_id, ev.bytes, ev.frame_end && h.has(h2::flags::kEndStream));
    }  // kDrop: taken, credited at the frame's header
  }
}

bool Transparent::routeKubeletData(const h2::FrameReader::Event& ev) {
  const h2::FrameHeader& h = ev.header;
  h2::FrameReader& reader = kubelet_.reader;
  if (h.length > kMaxWholeFrame) {
    protocolError(cat("DATA frame of ", h.length, " bytes, over the ", kMaxWholeFrame,
                      " of SETTINGS_MAX_FRAME_SIZE"));
    return false;
  }
  if (own_.contains(h.stream_id)) {
    own_.onDataHeader(h.stream_id, h.length, h.has(h2::flags::kEndStream));
    if (h.has(h2::flags::kPadded)) {
      // Read whole: the padding is stripped (kubeletData).
      if (auto st = reader.wantWhole(); !st.ok()) {
        protocolError(std::string(st.message()));
        return false;
      }
    }
    kubelet_route_ = Route::kOwnData;
    return true;
  }
  if (relayed_.find(h.stream_id)) {
    (void)reader.wantWhole();  // relayedRequestData: the limit at a frame's edge
    return true;
  }
  if (unknownToRuntime(h.stream_id)) {
    // A stream crihookd answered and no longer holds (reset at once, or
    // kZombieLinger past): the runtime never saw it, so crihookd takes the
    // bytes and credits kubelet's connection window for them.
    creditKubelet(h.length);
    kubelet_route_ = Route::kDrop;
    return true;
  }
  if (stand_in_) {
    protocolError(cat("DATA on stream ", h.stream_id, ", not open"));
    return false;
  }
  kubelet_route_ = Route::kForward;
  runtime_.out.append(ev.bytes);
  return true;
}

void Transparent::kubeletFrame(const h2::FrameHeader& h, std::string_view payload) {
  // Standing in for the runtime, nothing of kubelet's goes anywhere else.
  auto forward = [&] {
    if (!stand_in_) h2::appendFrame(runtime_.out, h, payload);
  };
  switch (h.type) {
    case h2::FrameType::kData:
      return kubeletData(h, payload);
    case h2::FrameType::kHeaders:
    case h2::FrameType::kContinuation:
      if (h.type == h2::FrameType::kHeaders && (h.stream_id == 0 || h.stream_id % 2 == 0))
        return protocolError(cat("HEADERS on stream ", h.stream_id));
      if (h.type == h2::FrameType::kHeaders) block_since_ = Clock::now();
      if (auto st = kubelet_.addBlockFrame(h, payload); !st.ok())
        return protocolError(std::string(st.message()));
      if (!kubelet_.in_block) kubeletBlock();
      return;
    case h2::FrameType::kSettings:
      return h.has(h2::flags::kAck) ? forward() : kubeletSettings(payload);
    case h2::FrameType::kWindowUpdate:
      return kubeletWindowUpdate(h, payload);
    case h2::FrameType::kRstStream:
      if (own_.contains(h.stream_id)) return own_.onReset(h.stream_id);
      if (unknownToRuntime(h.stream_id)) return;  // one crihookd answered and forgot
      forward();
      return endRelayed(h.stream_id, absl::CancelledError("reset by the client"));
    case h2::FrameType::kPriority:
      if (!own_.contains(h.stream_id)) forward();
      return;
    case h2::FrameType::kPing:
      if (h.has(h2::flags::kAck)) return forward();  // kubelet's answer to the runtime's PING
      if (payload.size() != 8) return protocolError("PING of other than 8 bytes");
      return acks_.owe(payload);
    default:  // GOAWAY, extension frames: the runtime's to read
      return forward();
  }
}

void Transparent::kubeletData(const h2::FrameHeader& h, std::string_view payload) {
  if (!own_.contains(h.stream_id)) return relayedRequestData(h, payload);
  auto data = h2::dataOf(h, payload);  // padded, of an own stream
  if (!data.ok()) return protocolError(std::string(data.status().message()));
  own_.onData(h.stream_id, *data, h.has(h2::flags::kEndStream),
              h.length - static_cast<uint32_t>(data->size()));
}

void Transparent::kubeletSettings(std::string_view payload) {
  auto settings = h2::settingsOf(payload);
  if (!settings.ok()) return protocolError(std::string(settings.status().message()));
  if (stand_in_) {
    std::string ack;
    h2::appendSettingsAck(ack);
    inject(ack);
  } else {
    appendKnownSettings(runtime_.out, *settings, kMaxWholeFrame);
  }
  for (auto [id, value] : *settings) {
    if (id == h2::setting::kInitialWindowSize && !ledger_.onKubeletInitialWindow(value))
      return protocolError("SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1");
    if (id == h2::setting::kMaxFrameSize) {
      if (value < h2::kDefaultMaxFrameSize || value > h2::kMaxFrameLength)
        return protocolError(cat("SETTINGS_MAX_FRAME_SIZE ", value));
      kubelet_max_frame_ = value;
      own_.setKubeletMaxFrame(value);
    }
    if (id == h2::setting::kHeaderTableSize) {
      runtime_blocks_.setMaxTableSize(value);
      to_kubelet_.setMaxTableSize(value);
    }
  }
  settings_seen_ = true;
  own_.pumpAll();
}

void Transparent::kubeletWindowUpdate(const h2::FrameHeader& h, std::string_view payload) {
  auto inc = h2::windowIncrementOf(payload);
  if (!inc.ok()) return protocolError(std::string(inc.status().message()));
  if (h.stream_id == 0) {
    if (const uint32_t fwd = ledger_.forwardedIncrement(*inc); fwd > 0 && !stand_in_)
      h2::appendWindowUpdate(runtime_.out, 0, fwd);
    own_.pumpAll();
    resumeRuntime();
  } else if (own_.contains(h.stream_id)) {
    own_.onWindowUpdate(h.stream_id, *inc);
  } else if (!unknownToRuntime(h.stream_id) && !stand_in_) {
    h2::appendFrame(runtime_.out, h, payload);
  }
}

void Transparent::kubeletBlock() {
  const uint32_t id = kubelet_.block_stream;
  RequestCheck check;
  Headers headers;
  const size_t room = own_.headerRoom();
  auto st = kubelet_blocks_.decode(kubelet_.block, [&](std::string_view n, std::string_view v) {
    if (checkRequestField(check, n, v, room)) headers.push_back({std::string(n), std::string(v)});
  });
  if (!st.ok()) return protocolError(std::string(st.message()));
  if (id <= last_kubelet_stream_) return kubeletTrailers(id);
  last_kubelet_stream_ = id;
  if (goaway_sent_ || runtime_lost_ || (stand_in_ && own_.size() >= kMaxConcurrentStreams)) {
    // After GOAWAY: refused, and safe for kubelet to send again elsewhere;
    // so is a stream past the SETTINGS_MAX_CONCURRENT_STREAMS crihookd
    // announced standing in.
    leaveBlockOut();
    std::string frames;
    h2::appendRstStream(frames, id, h2::error::kRefusedStream);
    inject(frames);
    return;
  }
  if (auto refusal = refusalOf(check, headers)) {
    leaveBlockOut();
    return own_.refuse(id, headers, *refusal, kubelet_.block_end_stream);
  }
  if (!isCanonical(headers)) {
    to_runtime_.start();  // the runtime gets another block than kubelet's
    canonicalise(headers);
  }
  kubeletRequest(id, std::move(headers), check);
}

void Transparent::kubeletTrailers(uint32_t id) {
  // Trailers on an open stream: grpc-go's server ends such a stream; on a
  // stream crihookd answers, it resets it as the current relay does.
  leaveBlockOut();
  if (own_.contains(id)) return own_.onTrailers(id);
  // Trailers on a relayed stream: grpc-go's server ends the connection;
  // crihookd resets this stream only.
  if (auto* r = relayed_.find(id); r && !r->cut) {
    warnRefused(ctx_, id, &r->path, "trailers in a request");
    cutRelayed(id, absl::InternalError("crihookd: trailers in a request"),
               h2::error::kProtocolError);
  }
}

void Transparent::kubeletRequest(uint32_t id, Headers headers, const RequestCheck& check) {
  const std::string* path = findHeader(headers, ":path");
  std::string p = path ? *path : std::string();
  if (auto intercepted = findInterceptedMethod(p)) {
    if (!stand_in_ && !to_runtime_.on() && hpack::changesDynamicTable(kubelet_.block)) {
      // The runtime's decoder must see the block, which changes its table;
      // the runtime must not see the call: without END_STREAM, and
      // cancelled at once (grpc-go's handler is then still waiting for the
      // message, and answers nothing; gRPC C++ answers, runtimeFrame). A
      // block that changes nothing (a client that sets no deadline, whose
      // fields are all in the table by now) is left out: the runtime pays
      // for a stream it is to drop, and gRPC C++'s answer costs both sides.
      kubelet_.block_frames[4] =
          static_cast<char>(kubelet_.block_frames[4] & ~h2::flags::kEndStream);
      runtime_.out.append(kubelet_.block_frames);
      h2::appendRstStream(runtime_.out, id, h2::error::kCancel);
      runtime_last_stream_ = id;
    }
    return own_.intercept(id, std::move(headers), check, *intercepted, kubelet_.block_end_stream);
  }
  if (stand_in_) return own_.forward(id, std::move(headers), check, kubelet_.block_end_stream);
  relayed_.open(id, std::move(p));
  blockToRuntime(id, headers, kubelet_.block_end_stream);
}

void Transparent::blockToRuntime(uint32_t id, const Headers& headers, bool end_stream) {
  runtime_last_stream_ = id;
  if (!to_runtime_.on()) {
    runtime_.out.append(kubelet_.block_frames);
    return;
  }
  encoded_.clear();
  if (auto e = to_runtime_.encode(headers, encoded_); !e.ok())
    return close(std::string(e.message()));
  h2::appendHeaderBlock(runtime_.out, id, encoded_, end_stream, runtime_max_frame_);
}

void Transparent::leaveBlockOut() {
  // A block that leaves the runtime's table as it was may be left out and
  // the next ones still go as they came.
  if (!to_runtime_.on() && hpack::changesDynamicTable(kubelet_.block)) to_runtime_.start();
}

void Transparent::relayedRequestData(const h2::FrameHeader& h, std::string_view payload) {
  RelayedStreams::Stream* r = relayed_.find(h.stream_id);
  if (r && r->cut) return creditKubelet(h.length);  // the runtime will never see them
  if (r && !h.has(h2::flags::kPadded)) {
    r->request.feed(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    if (r->request.tooLarge()) {
      creditKubelet(h.length);
      return cutRelayed(h.stream_id, messageTooLarge(ctx_, "request", r->request));
    }
  }
  h2::appendFrame(runtime_.out, h, payload);
}

void Transparent::standInPreface() {
  h2::appendSettings(kubelet_.out, {{h2::setting::kMaxConcurrentStreams, kMaxConcurrentStreams},
                                    {h2::setting::kInitialWindowSize, kStreamWindow},
                                    {h2::setting::kMaxHeaderListSize,
                                     static_cast<uint32_t>(kMaxHeaderListBytes)}});
  h2::appendWindowUpdate(kubelet_.out, 0,
                         static_cast<uint32_t>(kConnectionWindow - h2::kDefaultWindow));
}

// --- runtime -> kubelet -----------------------------------------------------

void Transparent::fromRuntime(std::string_view in) {
  h2::FrameReader& reader = runtime_.reader;
  while (!closed_ && !runtime_lost_) {
    auto ev = reader.next(in);
    if (ev.kind == h2::FrameReader::Event::kNeedMore) return;
    if (ev.kind == h2::FrameReader::Event::kHeader) {
      if (ev.header.type == h2::FrameType::kData) {
        if (!routeRuntimeData(ev, in)) return;
      } else if (auto st = reader.wantWhole(); !st.ok()) {
        return runtimeGone(std::string(st.message()));
      }
      continue;
    }
    if (ev.kind == h2::FrameReader::Event::kChunk) {
      // DATA of a stream neither relayed nor crihookd's (those are read
      // whole): passed on as it comes.
      kubelet_.out.append(ev.bytes);
    } else {
      runtimeFrame(ev.header, ev.bytes);
    }
    if (!pending_inject_.empty() && betweenRuntimeFrames()) {
      kubelet_.out.append(pending_inject_);
      pending_inject_.clear();
    }
  }
}

bool Transparent::routeRuntimeData(const h2::FrameReader::Event& ev, std::string_view in) {
  const h2::FrameHeader& h = ev.header;
  h2::FrameReader& reader = runtime_.reader;
  if (h.length > kMaxWholeFrame) {
    runtimeGone(cat("DATA frame of ", h.length, " bytes, over the ", kMaxWholeFrame,
                    " of SETTINGS_MAX_FRAME_SIZE"));
    return false;
  }
  if (!ledger_.mayForward(h.length)) {
    // kubelet's window is short of what the runtime believes (crihookd's
    // own replies used it): this frame and what follows wait for kubelet's
    // next WINDOW_UPDATE.
    (void)reader.rewindHeader();
    runtime_held_.assign(ev.bytes);
    runtime_held_.append(in);
    runtime_waits_ = true;
    return false;
  }
  // Counted now, so that crihookd's own replies cannot take the room.
  ledger_.onForwarded(h.length);
  if (relayed_.find(h.stream_id) || own_.contains(h.stream_id)) {
    // relayedReplyData: the limit at a frame's edge; a stream crihookd
    // answers: dropped (runtimeFrame).
    (void)reader.wantWhole();
    return true;
  }
  kubelet_.out.append(ev.bytes);
  return true;
}

void Transparent::resumeRuntime() {
  if (!runtime_waits_ || closed_) return;
  runtime_waits_ = false;
  std::string held;
  held.swap(runtime_held_);
  fromRuntime(held);
  if (!runtime_waits_ && !runtime_lost_) {
    // Reading stopped while the frame waited; no new edge will tell.
    loop_.post([self = shared_from_this()] { self->onReadable(false, false); });
  }
}

void Transparent::runtimeFrame(const h2::FrameHeader& h, std::string_view payload) {
  auto forward = [&] { h2::appendFrame(kubelet_.out, h, payload); };
  const bool own = h.stream_id != 0 && own_.contains(h.stream_id);
  // The runtime answers a stream crihookd answers (a call it saw cancelled
  // at once: gRPC C++ replies, grpc-go does not). Its header block cannot go
  // to kubelet (runtimeBlock decides what its absence costs).
  if (h.type == h2::FrameType::kHeaders) runtime_.block_withheld = own;
  if (own && h.type == h2::FrameType::kData) {
    // Not for kubelet: the runtime is credited for it, kubelet never was.
    ledger_.onNotForwarded(h.length);
    creditRuntime(h.length);
    return;
  }
  if (own && h.type != h2::FrameType::kHeaders && h.type != h2::FrameType::kContinuation) {
    return;  // its reset or window updates: the stream is crihookd's
  }
  switch (h.type) {
    case h2::FrameType::kData:
      return relayedReplyData(h, payload);
    case h2::FrameType::kHeaders:
    case h2::FrameType::kContinuation:
      // Forwarded whatever its stream while kubelet's decoder mirrors the
      // runtime's encoder; else re-encoded once decoded (runtimeBlock). A
      // frame out of place is not: kubelet gets the runtime's end instead.
      if (auto st = runtime_.addBlockFrame(h, payload); !st.ok())
        return runtimeGone(std::string(st.message()));
      if (!to_kubelet_.on() && !runtime_.block_withheld) forward();
      if (!runtime_.in_block) runtimeBlock();
      return;
    case h2::FrameType::kSettings:
      return h.has(h2::flags::kAck) ? forward() : runtimeSettings(payload);
    case h2::FrameType::kGoaway: {
      auto goaway = h2::goawayOf(payload);
      if (!goaway.ok()) return runtimeGone(std::string(goaway.status().message()));
      return runtimeGoaway(goaway->first);
    }
    case h2::FrameType::kRstStream:
      forward();
      return runtimeReset(h, payload);
    case h2::FrameType::kPushPromise:
      return runtimeGone("PUSH_PROMISE, which kubelet does not accept");
    default:  // PING, WINDOW_UPDATE, PRIORITY, extension frames
      return forward();
  }
}

void Transparent::runtimeSettings(std::string_view payload) {
  auto settings = h2::settingsOf(payload);
  if (!settings.ok()) return runtimeGone(std::string(settings.status().message()));
  // Only the first SETTINGS adds crihookd's cap: later ones change what
  // they name.
  appendKnownSettings(kubelet_.out, *settings, kMaxWholeFrame,
                      runtime_settings_seen_ ? 0 : static_cast<uint32_t>(kMaxHeaderListBytes));
  runtime_settings_seen_ = true;
  for (auto [id, value] : *settings) {
    if (id == h2::setting::kMaxFrameSize && value >= h2::kDefaultMaxFrameSize &&
        value <= h2::kMaxFrameLength)
      runtime_max_frame_ = value;
    if (id == h2::setting::kHeaderTableSize) {
      kubelet_blocks_.setMaxTableSize(value);
      to_runtime_.setMaxTableSize(value);
    }
  }
}

void Transparent::runtimeReset(const h2::FrameHeader& h, std::string_view payload) {
  RelayedStreams::Stream* r = relayed_.find(h.stream_id);
  auto code = h2::rstStreamCodeOf(payload);
  if (r && (r->cut || code.ok())) {
    endRelayed(h.stream_id, absl::Status(grpcwire::codeOfReset(code.value_or(0)),
                                         cat("crihookd: backend reset the stream, HTTP/2 error ",
                                             code.value_or(0))));
  }
}

void Transparent::runtimeBlock() {
  std::string status, message, http_status;
  bool has_status = false;
  Headers fields;  // only when re-encoding for kubelet
  auto st = runtime_blocks_.decode(runtime_.block, [&](std::string_view n, std::string_view v) {
    if (to_kubelet_.on()) fields.push_back({std::string(n), std::string(v)});
    if (n == "grpc-status") {
      status.assign(v);
      has_status = true;
    } else if (n == "grpc-message") {
      message.assign(v.substr(0, 4096));
    } else if (n == ":status") {
      http_status.assign(v);
    }
  });
  if (!st.ok()) return runtimeGone(std::string(st.message()));
  if (runtime_.block_withheld) {
    // kubelet's decoder no longer mirrors the runtime's encoder if the block
    // changed the table: from here on the runtime's blocks are re-encoded.
    if (!to_kubelet_.on() && hpack::changesDynamicTable(runtime_.block)) to_kubelet_.start();
    return;
  }
  if (to_kubelet_.on()) {
    std::string block;
    if (auto e = to_kubelet_.encode(fields, block); !e.ok()) return close(std::string(e.message()));
    h2::appendHeaderBlock(kubelet_.out, runtime_.block_stream, block, runtime_.block_end_stream,
                          kubelet_max_frame_);
  }
  RelayedStreams::Stream* r = relayed_.find(runtime_.block_stream);
  if (r == nullptr) return;
  if (r->cut) {
    if (runtime_.block_end_stream) endRelayed(runtime_.block_stream, absl::OkStatus());
    return;
  }
  if (!http_status.empty() && http_status[0] == '1') return;  // informational
  if (!runtime_.block_end_stream) {
    r->reply_headers = true;
    return;
  }
  endRelayed(runtime_.block_stream,
             has_status ? grpcwire::statusOfFields(&status, &message)
                        : absl::Status(grpcwire::codeOfHttpStatus(std::atoi(http_status.c_str())),
                                       "no grpc-status"));
}

void Transparent::endRelayed(uint32_t id, const absl::Status& status) {
  if (!relayed_.find(id)) return;
  relayed_.end(id, status);
  if (idle()) idle_since_ = Clock::now();
}

void Transparent::relayedReplyData(const h2::FrameHeader& h, std::string_view payload) {
  RelayedStreams::Stream* r = relayed_.find(h.stream_id);
  if (r && r->cut) {
    // kubelet will never see these bytes: crihookd credits the runtime.
    ledger_.onNotForwarded(h.length);
    creditRuntime(h.length);
    return;
  }
  size_t pass = payload.size();
  if (r && !h.has(h2::flags::kPadded)) {
    pass = r->reply.feed(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  }
  if (!r || !r->reply.tooLarge()) {
    h2::appendFrame(kubelet_.out, h, payload);
    if (r && h.has(h2::flags::kEndStream)) {
      endRelayed(h.stream_id, absl::InternalError("the runtime ended its reply without a status"));
    }
    return;
  }
  // The whole messages before the one over the limit still go.
  if (pass > 0) h2::appendData(kubelet_.out, h.stream_id, payload.substr(0, pass), false, h.length);
  const uint32_t dropped = h.length - static_cast<uint32_t>(pass);
  ledger_.onNotForwarded(dropped);
  creditRuntime(dropped);
  cutRelayed(h.stream_id, messageTooLarge(ctx_, "response", r->reply));
}

void Transparent::cutRelayed(uint32_t id, const absl::Status& status, uint32_t reset_code) {
  std::string frames;
  if (!relayed_.cut(id, status, reset_code, kubelet_max_frame_, frames)) return;
  std::string cancel;
  h2::appendRstStream(cancel, id, h2::error::kCancel);
  injectToRuntime(cancel);
  inject(frames);
}

void Transparent::runtimeDeaf(const std::string& why) {
  if (deaf_.active() || runtime_lost_ || closed_) return;
  runtime_.out.clear();
  runtime_.out_sent = 0;
  if (runtime_.writing) loop_.wantWritable(runtime_.fd, false);
  runtime_.writing = false;
  deaf_.start(
      why,
      // Posted: the write may have failed inside a read of this connection's.
      [self = shared_from_this()] {
        if (!self->closed_) self->onReadable(false, true);
      },
      [weak = weak_from_this()](const std::string& why) {
        auto self = weak.lock();
        if (!self || self->closed_) return;
        self->runtimeGone(why);
        self->flushAll();
      });
}

void Transparent::runtimeGone(const std::string& why) {
  if (runtime_lost_ || closed_) return;
  deaf_.stop();
  ctx_.log->debug("backend connection closed: {}", why);
  runtime_lost_ = true;
  runtime_waits_ = false;
  runtime_held_.clear();
  loop_.unwatch(runtime_.fd);
  if (!betweenRuntimeFrames()) {
    // Half a frame, or half a header block, of the runtime's went to
    // kubelet: nothing more can follow on this connection.
    return close(cat("backend connection lost mid-frame: ", why));
  }
  if (!runtime_settings_seen_) {
    // The runtime left before its SETTINGS: crihookd's own (none) open the
    // connection for kubelet, so that the answers below can follow.
    h2::appendSettings(kubelet_.out, {});
    runtime_settings_seen_ = true;
  }
  kubelet_.out.append(pending_inject_);
  pending_inject_.clear();
  const absl::Status lost = absl::UnavailableError(cat("crihookd: backend connection lost: ", why));
  for (uint32_t id : relayed_.idsAbove(0)) {
    if (RelayedStreams::Stream* r = relayed_.find(id); !r->cut) {
      std::string frames;
      RelayedStreams::appendEnd(frames, id, *r, lost, kubelet_max_frame_);
      inject(frames);
    }
    endRelayed(id, lost);
  }
  goawayToKubelet();
  maybeFinish();
}

void Transparent::runtimeGoaway(uint32_t last_stream_id) {
  // New calls go to a new connection: kubelet's, through a new runtime
  // connection. Streams the runtime did not take are refused, which
  // kubelet's gRPC retries.
  for (uint32_t id : relayed_.idsAbove(last_stream_id)) {
    std::string frames;
    h2::appendRstStream(frames, id, h2::error::kRefusedStream);
    inject(frames);
    endRelayed(id, absl::UnavailableError("crihookd: refused by the runtime going away"));
  }
  goawayToKubelet();
  maybeFinish();
}

void Transparent::goawayToKubelet() {
  if (goaway_sent_) return;
  goaway_sent_ = true;
  std::string frames;
  h2::appendGoaway(frames, last_kubelet_stream_, h2::error::kNoError);
  inject(frames);
}

void Transparent::maybeFinish() {
  if (goaway_sent_ && idle()) flush(true);
}

// --- the timeouts -----------------------------------------------------------

void Transparent::armTick() {
  tick_ = loop_.runAfter(tickInterval(ctx_.limits), [weak = weak_from_this()] {
    if (auto self = weak.lock(); self && !self->closed_) self->onTick();
  });
}

void Transparent::onTick() {
  const auto now = Clock::now();
  const RelayLimits& l = ctx_.limits;
  if (!settings_seen_ && now - accepted_ >= l.preface_timeout) {
    warnNoPreface(ctx_);
    return close("no HTTP/2 preface within server.preface_timeout");
  }
  if (idle_goaway_) return close("idle, and the GOAWAY not taken");
  if (idle() && settings_seen_ && now - idle_since_ >= l.idle_timeout) {
    ctx_.log->debug("closing a connection idle for server.idle_timeout ({}ms)",
                    l.idle_timeout.count());
    idle_goaway_ = true;
    goawayToKubelet();
    flushAll();
    if (!closed_) armTick();
    return;
  }
  if (kubelet_.in_block && now - block_since_ >= l.request_timeout) {
    warnHeaderBlockLate(ctx_, kubelet_.block_stream);
    return close("header block not complete within server.request_timeout");
  }
  own_.onTick(now);
  relayed_.dropCut(now);
  flushAll();
  if (!closed_) armTick();
}

}  // namespace crihook::relay
