#include "proxy/transparent.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/grpc_wire.h"
#include "base/text.h"
#include "cri/lifecycle.h"
#include "proxy/call_log.h"
#include "proxy/h2_session.h"
#include "proxy/intercept_stage.h"
#include "proxy/upstream.h"

namespace crihook::relay {

namespace {

using Clock = std::chrono::steady_clock;

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
// PING ACKs written while kubelet has not read what was sent before them.
constexpr size_t kMaxUnreadPingAcks = 1000;
// A header block (HEADERS and its CONTINUATIONs) as it came, before
// decoding; its decoded size is capped by checkRequestField.
constexpr size_t kMaxBlockBytes = kMaxHeaderListBytes + (16 << 10);
// A stream crihookd answered while kubelet was still sending is kept this
// long after its RST_STREAM, so that kubelet's frames already on their way
// are dropped rather than forwarded to a runtime that never saw the stream.
constexpr auto kZombieLinger = std::chrono::seconds(2);

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

std::string literalBlock(const Headers& headers) {
  std::string block;
  for (const Header& h : headers) hpack::appendLiteral(block, h.name, h.value);
  return block;
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
      side_(*this, loop, ctx),
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

void Transparent::standInPreface() {
  h2::appendSettings(kubelet_.out, {{h2::setting::kMaxConcurrentStreams, kMaxConcurrentStreams},
                                    {h2::setting::kInitialWindowSize, kStreamWindow},
                                    {h2::setting::kMaxHeaderListSize,
                                     static_cast<uint32_t>(kMaxHeaderListBytes)}});
  h2::appendWindowUpdate(kubelet_.out, 0,
                         static_cast<uint32_t>(kConnectionWindow - h2::kDefaultWindow));
}

void Transparent::shutdown() {
  if (closed_) return;
  goawayToKubelet();
  flushAll();
  maybeFinish();
}

void Transparent::close(const std::string& why) {
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
  side_.dropAll("client connection closed");
  for (auto& [id, r] : relayed_) {
    if (r.cut) continue;
    ctx_.active_calls.fetch_sub(1);
    recordCall(r.path, absl::StatusCode::kCancelled, r.start);
  }
  relayed_.clear();
  for (auto& [id, own] : own_) {
    Call& call = *own.call;
    if (!call.answered) {
      ctx_.active_calls.fetch_sub(1);
      if (call.final_status.ok()) call.final_status = absl::CancelledError("connection closed");
      recordCall(call.path, call.final_status.code(), call.start);
    }
    releaseLimits(call);
  }
  own_.clear();
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

void Transparent::owePingAck(std::string_view opaque) { owed_ping_acks_.append(opaque); }

void Transparent::settlePingAcks() {
  if (owed_ping_acks_.empty()) return;
  // After a whole read, so that a request that came with the PING counts:
  // with no reply on its way, or past 16 owed (a peer that pings and does
  // not read), at once; else with the next bytes to kubelet, at most
  // kPingAckDelay later.
  const bool reply_expected = !relayed_.empty() || !own_.empty();
  if (!reply_expected || owed_ping_acks_.size() >= 16 * 8) return sendPingAcks();
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
  if (owed_ping_acks_.empty()) return;
  // PINGs from a peer that does not read what crihookd sends it: as nghttp2
  // (1,000 queued ACKs) and grpc-go do, the connection ends rather than the
  // ACKs piling up. grpc-go has one PING of its own out at a time.
  acks_since_drain_ += owed_ping_acks_.size() / 8;
  if (acks_since_drain_ > kMaxUnreadPingAcks)
    return close(
        "kubelet sends PINGs faster than their ACKs reach it (it does not read, or the runtime "
        "stopped inside a frame)");
  if (ping_ack_timer_ != 0) loop_.cancel(ping_ack_timer_);
  ping_ack_timer_ = 0;
  std::string frames;
  for (size_t i = 0; i + 8 <= owed_ping_acks_.size(); i += 8)
    h2::appendPingAck(frames, std::string_view(owed_ping_acks_).substr(i, 8));
  owed_ping_acks_.clear();
  inject(frames);
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
  if (kubelet && !owed_ping_acks_.empty() && s.out_sent < s.out.size()) sendPingAcks();
  while (s.out_sent < s.out.size()) {
    const ssize_t n = ::send(s.fd, s.out.data() + s.out_sent, s.out.size() - s.out_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      s.out_sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (s.out.size() - s.out_sent > kMaxPendingOut) {
        return close(kubelet ? "kubelet does not read" : "the runtime does not read");
      }
      s.writing = true;
      loop_.wantWritable(s.fd, true);
      return;
    }
    const int e = errno;
    const std::string why = cat("write: ", std::strerror(e));
    if (kubelet) return close(why);
    if (e == EPIPE || e == ECONNRESET) return runtimeDeaf(why);
    return runtimeGone(why);
  }
  s.out.clear();
  s.out_sent = 0;
  // Not while ACKs wait for the runtime's frame to end (pending_inject_):
  // kubelet has not read them.
  if (kubelet && pending_inject_.empty()) acks_since_drain_ = 0;
  Side& from = kubelet ? runtime_ : kubelet_;
  if (from.paused) {
    from.paused = false;
    loop_.post([self = shared_from_this(), k = !kubelet] { self->onReadable(k, false); });
  }
  if (kubelet && goaway_sent_ && relayed_.empty() && own_.empty()) linger();
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

void Transparent::scheduleFlush() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  loop_.post([self = shared_from_this()] {
    self->flush_posted_ = false;
    self->flushAll();
  });
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
         !(runtime_.in_block && !to_kubelet_.on && !runtime_.block_withheld);
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

void Transparent::fromKubelet(std::string_view in) {
  if (preface_left_ > 0) {
    const size_t n = std::min(in.size(), preface_left_);
    const size_t at = h2::kClientPreface.size() - preface_left_;
    if (in.substr(0, n) != h2::kClientPreface.substr(at, n))
      return close("not an HTTP/2 client preface");
    if (!stand_in_) runtime_.out.append(in.substr(0, n));
    preface_left_ -= n;
    in.remove_prefix(n);
  }
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
      if (h.type != h2::FrameType::kData) {
        if (auto st = reader.wantWhole(); !st.ok()) return protocolError(std::string(st.message()));
        continue;
      }
      if (h.length > kMaxWholeFrame) {
        return protocolError(cat("DATA frame of ", h.length, " bytes, over the ", kMaxWholeFrame,
                                 " of SETTINGS_MAX_FRAME_SIZE"));
      }
      auto it = own_.find(h.stream_id);
      if (it == own_.end()) {
        if (relayed_.count(h.stream_id)) {
          (void)reader.wantWhole();  // relayedRequestData: the limit at a frame's edge
          continue;
        }
        if (unknownToRuntime(h.stream_id)) {
          // A stream crihookd answered and no longer holds (reset at once,
          // or kZombieLinger past): the runtime never saw it, so crihookd
          // takes the bytes and credits kubelet's connection window for them.
          creditKubelet(h.stream_id, h.length, false);
          kubelet_route_ = Route::kDrop;
          continue;
        }
        if (stand_in_) return protocolError(cat("DATA on stream ", h.stream_id, ", not open"));
        kubelet_route_ = Route::kForward;
        runtime_.out.append(ev.bytes);
        continue;
      }
      // Bytes of a stream crihookd answers: the runtime never credits them.
      // A forwarded stream's are credited as the side connection sends them
      // (consumeRequestBytes), or once they are dropped (ownData).
      if (it->second.kind != Own::Kind::kForwarded)
        creditKubelet(h.stream_id, h.length, !h.has(h2::flags::kEndStream));
      if (h.has(h2::flags::kPadded)) {
        if (auto st = reader.wantWhole(); !st.ok()) return protocolError(std::string(st.message()));
      }
      kubelet_route_ = Route::kOwnData;
      continue;
    }
    if (ev.kind == h2::FrameReader::Event::kChunk) {
      if (kubelet_route_ == Route::kForward) {
        runtime_.out.append(ev.bytes);
      } else if (kubelet_route_ == Route::kOwnData) {
        if (auto it = own_.find(h.stream_id); it != own_.end())
          ownData(it->second, h, ev.bytes, ev.frame_end);
      }  // kDrop: taken, credited at the frame's header
      continue;
    }
    kubeletFrame(h, ev.bytes);
  }
}

void Transparent::kubeletFrame(const h2::FrameHeader& h, std::string_view payload) {
  // Standing in for the runtime, nothing of kubelet's goes anywhere else.
  auto forward = [&] {
    if (!stand_in_) h2::appendFrame(runtime_.out, h, payload);
  };
  switch (h.type) {
    case h2::FrameType::kData: {
      auto it = own_.find(h.stream_id);
      if (it == own_.end()) return relayedRequestData(h, payload);
      auto data = h2::dataOf(h, payload);  // padded, of an own stream
      if (!data.ok()) return protocolError(std::string(data.status().message()));
      if (it->second.kind == Own::Kind::kForwarded) {  // the padding is taken here
        creditKubelet(h.stream_id, h.length - static_cast<uint32_t>(data->size()),
                      !h.has(h2::flags::kEndStream));
      }
      ownData(it->second, h, *data, true);
      return;
    }
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
      if (h.has(h2::flags::kAck)) {
        forward();
      } else {
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
          }
          if (id == h2::setting::kHeaderTableSize) {
            runtime_blocks_.setMaxTableSize(value);
            to_kubelet_.setMaxTableSize(value);
          }
        }
        settings_seen_ = true;
        pumpAllOwn();
      }
      return;
    case h2::FrameType::kWindowUpdate: {
      auto inc = h2::windowIncrementOf(payload);
      if (!inc.ok()) return protocolError(std::string(inc.status().message()));
      if (h.stream_id == 0) {
        if (const uint32_t fwd = ledger_.forwardedIncrement(*inc); fwd > 0 && !stand_in_)
          h2::appendWindowUpdate(runtime_.out, 0, fwd);
        pumpAllOwn();
        resumeRuntime();
      } else if (auto it = own_.find(h.stream_id); it != own_.end()) {
        ledger_.onKubeletStreamUpdate(h.stream_id, *inc);
        pumpOwn(h.stream_id);
      } else if (!unknownToRuntime(h.stream_id)) {
        forward();
      }
      return;
    }
    case h2::FrameType::kRstStream:
      if (own_.count(h.stream_id)) return endOwn(h.stream_id, "reset by the client");
      if (unknownToRuntime(h.stream_id)) return;  // one crihookd answered and forgot
      forward();
      if (relayed_.count(h.stream_id))
        endRelayed(h.stream_id, absl::CancelledError("reset by the client"));
      return;
    case h2::FrameType::kPriority:
      if (!own_.count(h.stream_id)) forward();
      return;
    case h2::FrameType::kPing:
      if (h.has(h2::flags::kAck)) return forward();  // kubelet's answer to the runtime's PING
      if (payload.size() != 8) return protocolError("PING of other than 8 bytes");
      return owePingAck(payload);
    default:  // GOAWAY, extension frames: the runtime's to read
      forward();
      return;
  }
}

void Transparent::kubeletBlock() {
  const uint32_t id = kubelet_.block_stream;
  RequestCheck check;
  Headers headers;
  const size_t room = budget_.headerRoom();
  auto st = kubelet_blocks_.decode(kubelet_.block, [&](std::string_view n, std::string_view v) {
    if (checkRequestField(check, n, v, room)) headers.push_back({std::string(n), std::string(v)});
  });
  if (!st.ok()) return protocolError(std::string(st.message()));
  if (own_.count(id) || relayed_.count(id) || id <= last_kubelet_stream_) {
    // Trailers on an open stream: grpc-go's server ends such a stream; on a
    // stream crihookd answers, it resets it as the current relay does.
    leaveBlockOut();
    if (auto it = own_.find(id); it != own_.end()) {
      it->second.kubelet_done = true;
      answerOwn(it->second, absl::InternalError("crihookd: trailers in a request"), true);
      return;
    }
    // Trailers on a relayed stream: grpc-go's server ends the connection;
    // crihookd resets this stream only, as the terminating relay does.
    if (auto it = relayed_.find(id); it != relayed_.end() && !it->second.cut) {
      warnRefused(ctx_, id, &it->second.path, "trailers in a request");
      cutRelayed(id, absl::InternalError("crihookd: trailers in a request"),
                 h2::error::kProtocolError);
    }
    return;
  }
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
    return refuse(id, std::move(headers), *refusal);
  }
  if (!isCanonical(headers)) {
    to_runtime_.start();  // the runtime gets another block than kubelet's
    canonicalise(headers);
  }
  const std::string* path = findHeader(headers, ":path");
  auto intercepted = findInterceptedMethod(path ? *path : std::string());
  if (intercepted) {
    if (!stand_in_ && !to_runtime_.on && hpack::changesDynamicTable(kubelet_.block)) {
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
    budget_.chargeRequestHeaders(ctx_, check.list_bytes);
    Own& own = openOwn(id, std::move(headers));
    own.call->check = check;
    own.kind = Own::Kind::kIntercepted;
    own.call->intercepted = intercepted;
    own.call->deadline = grpcDeadline(own.call->req_headers, own.call->start);
    if (kubelet_.block_end_stream) {
      own.kubelet_done = true;
      startPreStage(own);
    }
    return;
  }
  if (stand_in_) return forwardOwn(id, std::move(headers), check);
  Relayed& r = relayed_.try_emplace(id, ctx_.max_message_bytes).first->second;
  r.path = path ? *path : std::string();
  r.start = Clock::now();
  ctx_.active_calls.fetch_add(1);
  blockToRuntime(id, headers, kubelet_.block_end_stream);
}

void Transparent::blockToRuntime(uint32_t id, const Headers& headers, bool end_stream) {
  runtime_last_stream_ = id;
  if (!to_runtime_.on) {
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
  if (!to_runtime_.on && hpack::changesDynamicTable(kubelet_.block)) to_runtime_.start();
}

void Transparent::Reencoder::start() {
  if (on) return;
  on = true;
  reset_owed = true;
}

void Transparent::Reencoder::setMaxTableSize(uint32_t value) {
  encoder.setMaxTableSize(value);
  table_size = std::min<uint32_t>(value, hpack::kDefaultTableSize);
}

absl::Status Transparent::Reencoder::encode(const Headers& fields, std::string& block) {
  if (reset_owed) {
    // RFC 7541 4.2, 6.3: size 0 empties the receiver's table (what the
    // sender's encoder put there), then back to what the receiver allows;
    // crihookd's encoder starts empty.
    reset_owed = false;
    block.push_back(0x20);
    hpack::appendTableSizeUpdate(block, table_size);
  }
  return encoder.encode(toNv(fields), block);
}

// --- runtime -> kubelet -----------------------------------------------------

void Transparent::fromRuntime(std::string_view in) {
  h2::FrameReader& reader = runtime_.reader;
  while (!closed_ && !runtime_lost_) {
    auto ev = reader.next(in);
    if (ev.kind == h2::FrameReader::Event::kNeedMore) return;
    const h2::FrameHeader& h = ev.header;
    if (ev.kind == h2::FrameReader::Event::kHeader) {
      if (h.type != h2::FrameType::kData) {
        if (auto st = reader.wantWhole(); !st.ok()) return runtimeGone(std::string(st.message()));
        continue;
      }
      if (h.length > kMaxWholeFrame) {
        return runtimeGone(cat("DATA frame of ", h.length, " bytes, over the ", kMaxWholeFrame,
                               " of SETTINGS_MAX_FRAME_SIZE"));
      }
      if (!ledger_.mayForward(h.length)) {
        // kubelet's window is short of what the runtime believes (crihookd's
        // own replies used it): this frame and what follows wait for
        // kubelet's next WINDOW_UPDATE.
        (void)reader.rewindHeader();
        runtime_held_.assign(ev.bytes);
        runtime_held_.append(in);
        runtime_waits_ = true;
        return;
      }
      // Counted now, so that crihookd's own replies cannot take the room.
      ledger_.onForwarded(h.length);
      if (relayed_.count(h.stream_id) || own_.count(h.stream_id)) {
        // relayedReplyData: the limit at a frame's edge; a stream crihookd
        // answers: dropped (runtimeFrame).
        (void)reader.wantWhole();
        continue;
      }
      kubelet_.out.append(ev.bytes);
      continue;
    }
    if (ev.kind == h2::FrameReader::Event::kChunk) {
      // DATA of a stream neither relayed nor crihookd's (those are read
      // whole): passed on as it comes.
      kubelet_.out.append(ev.bytes);
    } else {
      runtimeFrame(h, ev.bytes);
    }
    if (!pending_inject_.empty() && betweenRuntimeFrames()) {
      kubelet_.out.append(pending_inject_);
      pending_inject_.clear();
    }
  }
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
  const bool own = h.stream_id != 0 && own_.count(h.stream_id);
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
      if (!to_kubelet_.on && !runtime_.block_withheld) forward();
      if (!runtime_.in_block) runtimeBlock();
      return;
    case h2::FrameType::kSettings:
      if (h.has(h2::flags::kAck)) {
        forward();
      } else {
        auto settings = h2::settingsOf(payload);
        if (!settings.ok()) return runtimeGone(std::string(settings.status().message()));
        // Only the first SETTINGS adds crihookd's cap: later ones change
        // what they name.
        appendKnownSettings(
            kubelet_.out, *settings, kMaxWholeFrame,
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
      return;
    case h2::FrameType::kGoaway: {
      auto goaway = h2::goawayOf(payload);
      if (!goaway.ok()) return runtimeGone(std::string(goaway.status().message()));
      return runtimeGoaway(goaway->first);
    }
    case h2::FrameType::kRstStream: {
      forward();
      auto code = h2::rstStreamCodeOf(payload);
      if (auto it = relayed_.find(h.stream_id); it != relayed_.end() && it->second.cut) {
        relayed_.erase(it);
      } else if (code.ok() && it != relayed_.end()) {
        endRelayed(h.stream_id,
                   absl::Status(grpcwire::codeOfReset(*code),
                                cat("crihookd: backend reset the stream, HTTP/2 error ", *code)));
      }
      return;
    }
    case h2::FrameType::kPushPromise:
      return runtimeGone("PUSH_PROMISE, which kubelet does not accept");
    default:  // PING, WINDOW_UPDATE, PRIORITY, extension frames
      forward();
      return;
  }
}

void Transparent::runtimeBlock() {
  std::string status, message, http_status;
  bool has_status = false;
  Headers fields;  // only when re-encoding for kubelet
  auto st = runtime_blocks_.decode(runtime_.block, [&](std::string_view n, std::string_view v) {
    if (to_kubelet_.on) fields.push_back({std::string(n), std::string(v)});
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
    if (!to_kubelet_.on && hpack::changesDynamicTable(runtime_.block)) to_kubelet_.start();
    return;
  }
  if (to_kubelet_.on) {
    std::string block;
    if (auto e = to_kubelet_.encode(fields, block); !e.ok()) return close(std::string(e.message()));
    std::string frames;
    h2::appendHeaderBlock(frames, runtime_.block_stream, block, runtime_.block_end_stream,
                          kubelet_max_frame_);
    kubelet_.out.append(frames);
  }
  auto it = relayed_.find(runtime_.block_stream);
  if (it == relayed_.end()) return;
  if (it->second.cut) {
    if (runtime_.block_end_stream) relayed_.erase(it);
    return;
  }
  if (!http_status.empty() && http_status[0] == '1') return;  // informational
  if (!runtime_.block_end_stream) {
    it->second.reply_headers = true;
    return;
  }
  absl::Status result =
      has_status ? grpcwire::statusOfFields(&status, &message)
                 : absl::Status(grpcwire::codeOfHttpStatus(std::atoi(http_status.c_str())),
                                "no grpc-status");
  endRelayed(runtime_.block_stream, result);
}

void Transparent::endRelayed(uint32_t id, const absl::Status& status) {
  auto it = relayed_.find(id);
  if (it == relayed_.end()) return;
  if (it->second.cut) {
    relayed_.erase(it);
    return;
  }
  recordCall(it->second.path, status.code(), it->second.start);
  ctx_.active_calls.fetch_sub(1);
  relayed_.erase(it);
  if (relayed_.empty() && own_.empty()) idle_since_ = Clock::now();
}

void Transparent::relayedRequestData(const h2::FrameHeader& h, std::string_view payload) {
  auto it = relayed_.find(h.stream_id);
  const bool track = it != relayed_.end() && !h.has(h2::flags::kPadded);
  if (it != relayed_.end() && it->second.cut) {
    // The runtime will never see these bytes: crihookd credits kubelet.
    if (h.length > 0) {
      std::string frames;
      h2::appendWindowUpdate(frames, 0, h.length);
      inject(frames);
    }
    return;
  }
  if (track) {
    Relayed& r = it->second;
    r.request.feed(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    if (r.request.tooLarge()) {
      if (h.length > 0) {
        std::string frames;
        h2::appendWindowUpdate(frames, 0, h.length);
        inject(frames);
      }
      return cutRelayed(h.stream_id, messageTooLarge(ctx_, "request", r.request));
    }
  }
  h2::appendFrame(runtime_.out, h, payload);
}

void Transparent::relayedReplyData(const h2::FrameHeader& h, std::string_view payload) {
  auto it = relayed_.find(h.stream_id);
  if (it != relayed_.end() && it->second.cut) {
    // kubelet will never see these bytes: crihookd credits the runtime.
    ledger_.onNotForwarded(h.length);
    creditRuntime(h.length);
    return;
  }
  size_t pass = payload.size();
  if (it != relayed_.end() && !h.has(h2::flags::kPadded)) {
    pass = it->second.reply.feed(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  }
  if (it == relayed_.end() || !it->second.reply.tooLarge()) {
    h2::appendFrame(kubelet_.out, h, payload);
    if (it != relayed_.end() && h.has(h2::flags::kEndStream)) {
      endRelayed(h.stream_id, absl::InternalError("the runtime ended its reply without a status"));
    }
    return;
  }
  // The whole messages before the one over the limit still go.
  if (pass > 0) h2::appendData(kubelet_.out, h.stream_id, payload.substr(0, pass), false, h.length);
  const uint32_t dropped = h.length - static_cast<uint32_t>(pass);
  ledger_.onNotForwarded(dropped);
  creditRuntime(dropped);
  cutRelayed(h.stream_id, messageTooLarge(ctx_, "response", it->second.reply));
}

void Transparent::cutRelayed(uint32_t id, const absl::Status& status, uint32_t reset_code) {
  auto it = relayed_.find(id);
  if (it == relayed_.end() || it->second.cut) return;
  Relayed& r = it->second;
  std::string cancel;
  h2::appendRstStream(cancel, id, h2::error::kCancel);
  injectToRuntime(cancel);
  std::string frames;
  if (reset_code != 0) {
    h2::appendRstStream(frames, id, reset_code);
  } else {
    appendRelayedEnd(frames, id, r, status);
  }
  inject(frames);
  recordCall(r.path, status.code(), r.start);
  ctx_.active_calls.fetch_sub(1);
  r.cut = true;
  r.cut_at = Clock::now();
}

void Transparent::appendRelayedEnd(std::string& frames, uint32_t id, const Relayed& r,
                                   const absl::Status& status) {
  if (!r.reply_headers) {
    h2::appendHeaderBlock(frames, id, literalBlock(trailersOnly(status)), true, kubelet_max_frame_);
  } else if (r.reply.atBoundary() || r.reply.cleanCut()) {  // cleanCut: a reply over the limit
    h2::appendHeaderBlock(frames, id, literalBlock(statusTrailers(status)), true,
                          kubelet_max_frame_);
  } else {
    h2::appendRstStream(frames, id, h2::error::kInternalError);
  }
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
  std::vector<uint32_t> ids;
  for (const auto& [id, r] : relayed_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids) {
    Relayed& r = relayed_.at(id);
    if (r.cut) {
      relayed_.erase(id);
      continue;
    }
    std::string frames;
    appendRelayedEnd(frames, id, r, lost);
    inject(frames);
    endRelayed(id, lost);
  }
  goawayToKubelet();
  maybeFinish();
}

void Transparent::runtimeGoaway(uint32_t last_stream_id) {
  // New calls go to a new connection: kubelet's, through a new runtime
  // connection. Streams the runtime did not take are refused, which
  // kubelet's gRPC retries.
  std::vector<uint32_t> refused;
  for (const auto& [id, r] : relayed_) {
    if (id > last_stream_id) refused.push_back(id);
  }
  std::sort(refused.begin(), refused.end());
  for (uint32_t id : refused) {
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
  if (goaway_sent_ && relayed_.empty() && own_.empty()) flush(true);
}

// --- streams crihookd answers -----------------------------------------------

Call* Transparent::find(int32_t id) {
  auto it = own_.find(static_cast<uint32_t>(id));
  return it == own_.end() ? nullptr : it->second.call.get();
}

Transparent::Own& Transparent::openOwn(uint32_t id, Headers headers) {
  Own& own = own_[id];
  own.call = std::make_unique<Call>(ctx_.max_message_bytes);
  Call& call = *own.call;
  call.down_id = static_cast<int32_t>(id);
  if (const std::string* path = findHeader(headers, ":path")) call.path = *path;
  call.req_headers = std::move(headers);
  ctx_.active_calls.fetch_add(1);
  ledger_.openOwn(id);
  return own;
}

void Transparent::forwardOwn(uint32_t id, Headers headers, const RequestCheck& check) {
  budget_.chargeRequestHeaders(ctx_, check.list_bytes);
  Own& own = openOwn(id, std::move(headers));
  own.kind = Own::Kind::kForwarded;
  Call& call = *own.call;
  call.check = check;
  call.deadline = grpcDeadline(call.req_headers, call.start);
  if (kubelet_.block_end_stream) {
    own.kubelet_done = true;
    call.req_end = true;
  }
  side_.forward(call);
}

void Transparent::creditKubelet(uint32_t id, uint32_t bytes, bool stream_open) {
  if (bytes == 0) return;
  auto credit = FlowLedger::creditForTaken(bytes, stream_open);
  std::string frames;
  h2::appendWindowUpdate(frames, 0, credit.connection);
  if (credit.stream != 0) h2::appendWindowUpdate(frames, id, credit.stream);
  inject(frames);
}

void Transparent::consumeRequestBytes(Call& call, size_t n) {
  // The side connection sent `n` bytes of a forwarded request: kubelet may
  // send as many more.
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  creditKubelet(static_cast<uint32_t>(call.down_id), static_cast<uint32_t>(n),
                it != own_.end() && !it->second.kubelet_done);
  scheduleFlush();
}

void Transparent::returnReplyWindow(Call& call, size_t n) {
  if (n == 0 || !call.window_up || call.window_up->closed()) return;
  nghttp2_session_consume(call.window_up->session(), call.window_up_id, n);
  call.window_up->scheduleFlush();
}

void Transparent::refuse(uint32_t id, Headers headers, const RequestRefusal& refusal) {
  const std::string* path = findHeader(headers, ":path");
  warnRefused(ctx_, id, path, refusal.why);
  Own& own = openOwn(id, {});
  if (path) own.call->path = *path;
  own.kubelet_done = kubelet_.block_end_stream;
  if (refusal.reset_code != 0) {
    own.call->final_status = absl::InternalError(cat("crihookd: ", refusal.why));
    std::string frames;
    h2::appendRstStream(frames, id, refusal.reset_code);
    inject(frames);
    own.reply_done = true;
    own.kubelet_done = true;  // nothing more is taken from a reset stream
    markAnswered(own);
    finishOwn(id);
    return;
  }
  own.call->final_status = refusal.status;
  own.call->resp_trailers = trailersOnly(refusal.status, refusal.http_status);
  own.call->resp_trailers_only = true;
  replyOwn(own);
}

void Transparent::ownData(Own& own, const h2::FrameHeader& h, std::string_view data,
                          bool frame_end) {
  Call& call = *own.call;
  const bool end = frame_end && h.has(h2::flags::kEndStream);
  if (own.kind == Own::Kind::kForwarded) return forwardedData(own, data, end);
  if (own.reply_done || own.kind != Own::Kind::kIntercepted || own.kubelet_done) {
    if (end) own.kubelet_done = true;
    if (end && own.reply_done) finishOwn(h.stream_id);
    return;
  }
  const size_t ok =
      call.req_frames.feed(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (call.req_frames.tooLarge()) {
    return answerOwn(own, messageTooLarge(ctx_, "request", call.req_frames), false);
  }
  if (auto budget = chargeBuffer(call, ok, "its request"); !budget.ok())
    return answerOwn(own, budget, false);
  call.req_body.append(reinterpret_cast<const uint8_t*>(data.data()), ok);
  if (call.req_body.size() > ctx_.max_message_bytes + grpcwire::kFrameHeaderBytes) {
    return answerOwn(
        own,
        absl::ResourceExhaustedError(cat("crihookd: ", call.path, ": request of more than ",
                                         ctx_.max_message_bytes, " bytes for a unary method")),
        false);
  }
  if (end) {
    own.kubelet_done = true;
    startPreStage(own);
  }
}

void Transparent::forwardedData(Own& own, std::string_view data, bool end) {
  Call& call = *own.call;
  const auto id = static_cast<uint32_t>(call.down_id);
  const auto n = static_cast<uint32_t>(data.size());
  if (own.reply_done || own.kubelet_done || call.answered) {
    // The runtime gets no more of it: the bytes are taken here.
    creditKubelet(id, n, false);
    if (end) own.kubelet_done = true;
    if (end && own.reply_done) finishOwn(id);
    return;
  }
  call.req_frames.feed(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (call.req_frames.tooLarge()) {
    creditKubelet(id, n, false);
    if (end) own.kubelet_done = true;
    return answerOwn(own, messageTooLarge(ctx_, "request", call.req_frames), false);
  }
  call.req_body.append(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (end) {
    own.kubelet_done = true;
    call.req_end = true;
  }
  if (call.up && call.up_id != 0) {
    nghttp2_session_resume_data(call.up->session(), call.up_id);
    call.up->scheduleFlush();
  }
}

void Transparent::startPreStage(Own& own) {
  Call& call = *own.call;
  call.req_end = true;
  auto ic = decodeInterceptedRequest(call);
  if (!ic.ok()) return answerOwn(own, ic.status(), false);
  call.ic = *ic;
  own.in_stage = true;
  auto self = shared_from_this();
  const int32_t id = call.down_id;
  ctx_.interceptor->pre(call.ic, [self, id](absl::Status status) {
    self->loop_.dispatch([self, id, status = std::move(status)]() mutable {
      self->onPreStageDone(id, std::move(status));
      self->flushAll();
    });
  });
}

void Transparent::onPreStageDone(int32_t id, absl::Status status) {
  auto it = own_.find(static_cast<uint32_t>(id));
  if (it == own_.end() || closed_) return;
  Own& own = it->second;
  own.in_stage = false;
  if (own.reply_done) return;
  if (!status.ok()) return answerOwn(own, status, false);
  if (auto ready = prepareForward(*own.call, ctx_.max_message_bytes); !ready.ok())
    return answerOwn(own, ready, false);
  side_.forward(*own.call);
}

void Transparent::onResponseHeaders(Call& call) {
  if (stand_in_ && !runtime_answered_) {
    // The calls in flight finish here; kubelet opens its next connection
    // for what comes after, as on any GOAWAY, and that one is relayed.
    runtime_answered_ = true;
    ctx_.log->debug(
        "the runtime answers again: GOAWAY, so that the client's next connection is relayed "
        "frame by frame");
    goawayToKubelet();
    scheduleFlush();
  }
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  if (it == own_.end() || it->second.kind != Own::Kind::kForwarded || it->second.reply_done) return;
  std::string frames;
  h2::appendHeaderBlock(frames, static_cast<uint32_t>(call.down_id),
                        literalBlock(call.resp_headers), false, kubelet_max_frame_);
  inject(frames);
  it->second.reply_started = true;
}

void Transparent::onResponseData(Call& call, const uint8_t* data, size_t len) {
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  if (it != own_.end() && it->second.kind == Own::Kind::kForwarded)
    return forwardedReplyData(it->second, data, len);
  if (call.up) nghttp2_session_consume(call.up->session(), call.up_id, len);
  if (it == own_.end()) return;
  const size_t ok = call.resp_frames.feed(data, len);
  if (call.resp_frames.tooLarge()) {
    return answer(call, messageTooLarge(ctx_, "response", call.resp_frames));
  }
  if (auto budget = chargeBuffer(call, ok, "the runtime's reply"); !budget.ok())
    return answer(call, budget);
  call.resp_body.append(data, ok);
}

void Transparent::forwardedReplyData(Own& own, const uint8_t* data, size_t len) {
  Call& call = *own.call;
  const size_t ok = call.resp_frames.feed(data, len);
  if (!call.resp_frames.tooLarge()) {
    // Handed back to the side connection's windows as kubelet's take them
    // (pumpOwn).
    call.resp_body.append(data, ok);
    return pumpOwn(static_cast<uint32_t>(call.down_id));
  }
  // The whole messages before the one over the limit still go, then the
  // status; the bytes past the cut are dropped here.
  const bool clean = call.resp_frames.cleanCut();
  if (call.up) nghttp2_session_consume(call.up->session(), call.up_id, len - (clean ? ok : 0));
  if (clean) call.resp_body.append(data, ok);
  answerOwn(own, messageTooLarge(ctx_, "response", call.resp_frames), false);
}

void Transparent::onResponseEnd(Call& call) {
  call.resp_end = true;
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  if (it == own_.end() || it->second.reply_done) return;
  Own& own = it->second;
  if (own.kind == Own::Kind::kForwarded) {
    // The runtime's own end: trailers-only, trailers, or none (END_STREAM
    // on its last DATA).
    if (call.resp_trailers_only || !own.reply_started) {
      call.final_status = statusFrom(call.resp_headers);
      call.resp_trailers_only = true;
      return replyOwn(own);
    }
    call.final_status = statusFrom(call.resp_trailers);
    own.trailers_block = literalBlock(call.resp_trailers);
    own.reply_ends = call.resp_trailers.empty();
    return pumpOwn(static_cast<uint32_t>(call.down_id));
  }
  decodeInterceptedReply(call);
  own.in_stage = true;
  auto self = shared_from_this();
  const int32_t id = call.down_id;
  ctx_.interceptor->post(call.ic, [self, id] {
    self->loop_.dispatch([self, id] {
      self->onPostStageDone(id);
      self->flushAll();
    });
  });
}

void Transparent::onPostStageDone(int32_t id) {
  auto it = own_.find(static_cast<uint32_t>(id));
  if (it == own_.end() || closed_) return;
  Own& own = it->second;
  own.in_stage = false;
  if (own.reply_done) return;
  own.call->final_status = own.call->ic->backend_status;
  replyOwn(own);
}

void Transparent::onUpstreamStreamClosed(Call& call, uint32_t error_code) {
  if (call.resp_end || call.answered) return;
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  const bool forwarded = it != own_.end() && it->second.kind == Own::Kind::kForwarded;
  if (error_code == NGHTTP2_REFUSED_STREAM && !call.retried && !forwarded) {
    // A runtime going away refused the stream before processing it; the
    // request is still whole here: send it on a fresh connection.
    call.retried = true;
    call.resp_headers.clear();
    side_.forward(call);
    return;
  }
  const absl::Status status(grpcwire::codeOfReset(error_code),
                            cat("crihookd: backend reset the stream, HTTP/2 error ", error_code));
  if (forwarded) {
    // The reset passed on: kubelet maps its code to the status it would
    // have had from the runtime directly.
    call.final_status = status;
    return resetOwn(it->second,
                    error_code == NGHTTP2_NO_ERROR ? uint32_t{NGHTTP2_INTERNAL_ERROR} : error_code);
  }
  replyWithStatus(call, status);
  onResponseEnd(call);
}

bool Transparent::chargeReplyHeader(Call& call, size_t bytes) {
  return budget_.chargeReplyHeader(ctx_, call, bytes);
}

void Transparent::answer(Call& call, const absl::Status& status) {
  auto it = own_.find(static_cast<uint32_t>(call.down_id));
  if (it != own_.end()) answerOwn(it->second, status, false);
}

void Transparent::cancelSide(Call& call) { cancelUpstreamStream(call); }

void Transparent::answerOwn(Own& own, const absl::Status& status, bool reset) {
  if (own.reply_done) return;
  Call& call = *own.call;
  const uint32_t id = static_cast<uint32_t>(call.down_id);
  cancelSide(call);
  call.final_status = status;
  // A reply begun ends with the status after its whole messages; one cut
  // inside a message cannot.
  if (reset ||
      (own.reply_started && !call.resp_frames.atBoundary() && !call.resp_frames.cleanCut())) {
    return resetOwn(own, reset ? h2::error::kProtocolError : h2::error::kInternalError);
  }
  if (own.reply_started) {
    own.trailers_block = literalBlock(statusTrailers(status));
    own.reply_ends = false;
    pumpOwn(id);
    return;
  }
  call.resp_headers.clear();
  call.resp_trailers = trailersOnly(status);
  call.resp_trailers_only = true;
  replyOwn(own);
}

void Transparent::resetOwn(Own& own, uint32_t code) {
  Call& call = *own.call;
  const uint32_t id = static_cast<uint32_t>(call.down_id);
  cancelSide(call);
  std::string frames;
  h2::appendRstStream(frames, id, code);
  inject(frames);
  dropOwnBytes(own);
  own.trailers_block.clear();
  own.reply_done = true;
  own.kubelet_done = true;
  markAnswered(own);
  finishOwn(id);
}

void Transparent::dropOwnBytes(Own& own) {
  Call& call = *own.call;
  if (own.kind == Own::Kind::kForwarded) {
    // Counted against both connections' windows, and never to be sent:
    // handed back, or a few abandoned calls stall the connection.
    returnReplyWindow(call, call.resp_body.size());
    creditKubelet(static_cast<uint32_t>(call.down_id), static_cast<uint32_t>(call.req_body.size()),
                  false);
    call.req_body.drop(call.req_body.size());
  }
  call.resp_body.drop(call.resp_body.size());
}

void Transparent::replyOwn(Own& own) {
  Call& call = *own.call;
  const uint32_t id = static_cast<uint32_t>(call.down_id);
  std::string frames;
  if (call.resp_trailers_only) {
    const Headers& h = call.resp_headers.empty() ? call.resp_trailers : call.resp_headers;
    h2::appendHeaderBlock(frames, id, literalBlock(h), true, kubelet_max_frame_);
    inject(frames);
    dropOwnBytes(own);
    own.reply_started = true;
    own.reply_done = true;
    markAnswered(own);
    finishOwn(id);
    return;
  }
  h2::appendHeaderBlock(frames, id, literalBlock(call.resp_headers), false, kubelet_max_frame_);
  inject(frames);
  own.reply_started = true;
  own.trailers_block = literalBlock(call.resp_trailers);
  own.reply_ends = call.resp_trailers.empty();
  pumpOwn(id);
}

void Transparent::pumpOwn(uint32_t id) {
  auto it = own_.find(id);
  if (it == own_.end()) return;
  Own& own = it->second;
  if (!own.reply_started || own.reply_done) return;
  Call& call = *own.call;
  std::string frames;
  size_t sent = 0;
  while (!call.resp_body.empty()) {
    const int64_t room = ledger_.ownRoom(id);
    if (room <= 0) break;
    const size_t n = std::min<size_t>({call.resp_body.size(), static_cast<size_t>(room),
                                       static_cast<size_t>(kubelet_max_frame_)});
    h2::appendData(frames, id, call.resp_body.view().substr(0, n), false, kubelet_max_frame_);
    ledger_.onOwnSent(id, static_cast<uint32_t>(n));
    call.resp_body.drop(n);
    sent += n;
  }
  if (call.resp_body.empty() && !own.trailers_block.empty()) {
    h2::appendHeaderBlock(frames, id, own.trailers_block, true, kubelet_max_frame_);
    own.trailers_block.clear();
    own.reply_done = true;
  } else if (call.resp_body.empty() && own.reply_ends) {
    h2::appendData(frames, id, {}, true, kubelet_max_frame_);
    own.reply_done = true;
  }
  inject(frames);
  if (own.kind == Own::Kind::kForwarded) returnReplyWindow(call, sent);
  if (own.reply_done) {
    markAnswered(own);
    finishOwn(id);
  }
}

void Transparent::pumpAllOwn() {
  std::vector<uint32_t> waiting;
  for (const auto& [id, own] : own_) {
    if (own.reply_started && !own.reply_done) waiting.push_back(id);
  }
  std::sort(waiting.begin(), waiting.end());
  for (uint32_t id : waiting) pumpOwn(id);
}

void Transparent::markAnswered(Own& own) {
  Call& call = *own.call;
  if (call.answered) return;
  call.answered = true;
  ctx_.active_calls.fetch_sub(1);
  if (call.intercepted) logCall(*ctx_.log, call);
  recordCall(call.path, call.final_status.code(), call.start);
  own.done_at = Clock::now();
}

void Transparent::finishOwn(uint32_t id) {
  auto it = own_.find(id);
  if (it == own_.end() || !it->second.reply_done || it->second.in_stage) return;
  Own& own = it->second;
  if (!own.kubelet_done && !own.reset_sent) {
    // As grpc-go's server ends a stream it answered while the client still
    // sends: RST_STREAM NO_ERROR. Its frames on the way are dropped
    // (kZombieLinger).
    std::string frames;
    h2::appendRstStream(frames, id, h2::error::kNoError);
    inject(frames);
    own.reset_sent = true;
    releaseLimits(*own.call);
    return;
  }
  if (!own.kubelet_done) return;
  eraseOwn(it);
}

void Transparent::endOwn(uint32_t id, const char* why) {
  auto it = own_.find(id);
  if (it == own_.end()) return;
  Own& own = it->second;
  Call& call = *own.call;
  cancelSide(call);
  if (!call.answered) {
    if (call.final_status.ok()) call.final_status = absl::CancelledError(why);
    markAnswered(own);
  }
  eraseOwn(it);
}

void Transparent::eraseOwn(std::unordered_map<uint32_t, Own>::iterator it) {
  const uint32_t id = it->first;
  dropOwnBytes(it->second);
  releaseLimits(*it->second.call);
  ledger_.closeOwn(id);
  own_.erase(it);
  if (relayed_.empty() && own_.empty()) idle_since_ = Clock::now();
  maybeFinish();
}

// --- limits -----------------------------------------------------------------

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
  if (relayed_.empty() && own_.empty() && settings_seen_ && now - idle_since_ >= l.idle_timeout) {
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
  std::vector<uint32_t> late, gone;
  for (const auto& [id, own] : own_) {
    if (own.reply_done && own.reset_sent && now - own.done_at >= kZombieLinger) gone.push_back(id);
    // A forwarded request may stream for as long as the call lasts.
    if (!own.reply_done && !own.kubelet_done && own.kind != Own::Kind::kForwarded &&
        now - own.call->start >= l.request_timeout)
      late.push_back(id);
  }
  for (uint32_t id : late) {
    auto it = own_.find(id);
    if (it == own_.end()) continue;
    answerOwn(it->second,
              absl::DeadlineExceededError(
                  cat("crihookd: ", it->second.call->path,
                      ": request message not complete within server.request_timeout (",
                      l.request_timeout.count(), "ms)")),
              false);
  }
  for (uint32_t id : gone) {
    if (auto it = own_.find(id); it != own_.end()) {
      it->second.kubelet_done = true;
      finishOwn(id);
    }
  }
  std::erase_if(relayed_, [&](const auto& e) {
    return e.second.cut && now - e.second.cut_at >= kZombieLinger;
  });
  flushAll();
  if (!closed_) armTick();
}

absl::Status Transparent::chargeBuffer(Call& call, size_t bytes, std::string_view what) {
  return budget_.chargeBuffer(ctx_, call, bytes, what);
}

void Transparent::releaseLimits(Call& call) { budget_.release(ctx_, call); }

void Transparent::recordCall(std::string_view path, absl::StatusCode code,
                             Clock::time_point start) {
  if (ctx_.call_metrics) ctx_.call_metrics->record(path, code, Clock::now() - start);
}

}  // namespace crihook::relay
