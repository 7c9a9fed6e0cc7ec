#pragma once

// The relay (docs/transparent-relay.md): one kubelet connection relayed to
// the runtime as an HTTP/2 intermediary, not as two endpoints. Every frame
// is read and every header block decoded; frames and the runtime's header
// blocks go through as they came (SETTINGS, PING and flow control are
// kubelet's and the runtime's own), kubelet's header blocks too unless a
// Reencoder (reencoder.h) has taken the direction over. This class is the
// connection and its two sides: their sockets, the frames routed both ways,
// SETTINGS, GOAWAY and the runtime going away, the timeouts' tick. Its
// parts, one job each:
// - RelayedStreams (relayed_streams.h): the streams relayed frame by frame,
//   their message limit, metrics and the end crihookd writes for them;
// - OwnStreams (own_streams.h): the streams crihookd answers itself —
//   refused requests, intercepted calls, and every call while it stands in
//   for the runtime — on its side connection;
// - Reencoder (reencoder.h): header blocks crihookd re-encodes;
// - PingAcks (ping_acks.h) and Linger (linger.h): when kubelet's PINGs are
//   answered, and the bounded wait for a peer's end.
//
// A connection accepted while the runtime cannot be reached has no runtime
// connection to relay: crihookd stands in for the runtime. It sends kubelet
// SETTINGS of its own, answers kubelet's SETTINGS and PINGs, and makes every
// stream one of its own, forwarded on the side connection (which connects
// per call, and answers UNAVAILABLE naming the backend when it cannot) as it
// comes. Once the runtime answers a call, kubelet gets GOAWAY, so that its
// next connection is relayed frame by frame.
//
// Runs on its EventLoop; not thread-safe (Connection, relay.h, posts to it;
// the entry points assert they run on the loop in debug builds).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "proxy/event_loop.h"
#include "proxy/flow_ledger.h"
#include "proxy/h2_frame.h"
#include "proxy/h2_headers.h"
#include "proxy/hpack.h"
#include "proxy/linger.h"
#include "proxy/own_streams.h"
#include "proxy/ping_acks.h"
#include "proxy/reencoder.h"
#include "proxy/relay.h"
#include "proxy/relayed_streams.h"
#include "proxy/request_check.h"

namespace crihook::relay {

class Transparent final : public OwnStreamsHost, public std::enable_shared_from_this<Transparent> {
 public:
  // `kubelet_fd`: the accepted socket; `runtime_fd`: a connected socket to
  // the runtime, or -1 when the runtime could not be reached (crihookd
  // stands in for it); both non-blocking, now the connection's. `loop` and
  // `ctx` outlive it.
  Transparent(EventLoop& loop, int kubelet_fd, int runtime_fd, RelayContext& ctx);
  ~Transparent();
  Transparent(const Transparent&) = delete;
  Transparent& operator=(const Transparent&) = delete;

  // Starts reading both sockets and the timeout tick.
  void start();
  // GOAWAY to kubelet (no new streams); open streams finish, then it
  // closes (linger()).
  void shutdown();
  // Closes both sides now; every call still open ends CANCELLED.
  void close(const std::string& why);
  EventLoop& loop() { return loop_; }

  // OwnStreamsHost.
  void toKubelet(std::string_view frames) override { inject(frames); }
  void flushNow() override { flushAll(); }
  void flushSoon() override;
  bool closed() const override { return closed_; }
  std::shared_ptr<void> keepAlive() override { return shared_from_this(); }
  void onRuntimeAnswered() override;
  void onOwnStreamEnded() override;

 private:
  struct Handler;
  // One socket: what is read from it is parsed by its `reader`; `out` is
  // written to it.
  struct Side {
    int fd = -1;
    h2::FrameReader reader{kMaxWholeFrame};
    std::string out;
    size_t out_sent = 0;
    bool writing = false;
    bool paused = false;  // not read while the other side's `out` is full
    // The header block being assembled from this side, and its frames as
    // they came.
    std::string block;
    std::string block_frames;  // only where keeps_frames
    bool keeps_frames = false;
    uint32_t block_stream = 0;
    bool block_end_stream = false;
    bool in_block = false;
    // The block is not for the other peer (the runtime's, on a stream
    // crihookd answers): decided at its HEADERS, for its CONTINUATIONs too.
    bool block_withheld = false;
    // A HEADERS or CONTINUATION frame's whole payload into the block;
    // INVALID_ARGUMENT naming what is wrong (bad padding, a CONTINUATION
    // out of place, a block over kMaxBlockBytes).
    absl::Status addBlockFrame(const h2::FrameHeader& h, std::string_view payload);
  };
  // What the current frame's payload pieces are for.
  enum class Route { kForward, kOwnData, kDrop };

  // The biggest frame read whole, and the SETTINGS_MAX_FRAME_SIZE each side
  // is told of the other (at most): header blocks are capped at 64 KiB
  // anyway, control frames are small, gRPC peers send DATA of 16 KiB.
  static constexpr size_t kMaxWholeFrame = 64 << 10;

  // --- the sockets ---
  void onReadable(bool kubelet, bool hangup);
  // After GOAWAY, with every stream done and written: crihookd half-closes
  // kubelet's socket and waits, reading and dropping what comes, for
  // kubelet to close (Linger), so that kubelet's writes in the meantime (a
  // WINDOW_UPDATE, a PING) do not fail before it has read the last answers.
  void linger();
  void drainWhileLingering(bool kubelet);
  void onWritable(bool kubelet);
  void flush(bool kubelet);
  // A write to `kubelet`'s side or the runtime's failed with `e`.
  void writeFailed(bool kubelet, int e);
  void flushAll();
  // Appends crihookd's own frames for kubelet, between two of the runtime's.
  void inject(std::string_view frames);
  // Whether kubelet has read the runtime's frames up to a place where another
  // frame may come: none half forwarded, and no header block of the runtime's
  // forwarded in part (RFC 9113 6.10: nothing comes between a HEADERS and
  // its CONTINUATIONs).
  bool betweenRuntimeFrames() const;
  // Appends crihookd's own frames for the runtime, between two of kubelet's:
  // the runtime's side writes some (credit for DATA dropped, a cut stream's
  // reset), which may come while a DATA frame of kubelet's is half forwarded.
  void injectToRuntime(std::string_view frames);
  // `bytes` of the runtime's DATA that kubelet never gets: crihookd credits
  // the runtime's connection window for them (WINDOW_UPDATE).
  void creditRuntime(uint32_t bytes);
  // `bytes` of kubelet's DATA that the runtime never gets: crihookd credits
  // kubelet's connection window for them.
  void creditKubelet(uint32_t bytes);
  // kubelet's PINGs: the ACKs ride with the next bytes to kubelet
  // (PingAcks, ping_acks.h).
  void settlePingAcks();
  void sendPingAcks();
  // GOAWAY PROTOCOL_ERROR to kubelet, then closed.
  void protocolError(const std::string& why);

  // --- kubelet -> runtime ---
  void fromKubelet(std::string_view in);
  // The preface's bytes at the head of `in`, taken; false when they are not.
  bool takePreface(std::string_view& in);
  // A DATA frame's header: where its payload goes (kubelet_route_); false
  // when the connection ended.
  bool routeKubeletData(const h2::FrameReader::Event& ev);
  void kubeletFrame(const h2::FrameHeader& h, std::string_view payload);
  void kubeletData(const h2::FrameHeader& h, std::string_view payload);
  void kubeletSettings(std::string_view payload);
  void kubeletWindowUpdate(const h2::FrameHeader& h, std::string_view payload);
  void kubeletBlock();
  // The block on a stream already open: trailers.
  void kubeletTrailers(uint32_t id);
  // A new stream's request, checked: intercepted, relayed, or (standing
  // in) forwarded on the side connection.
  void kubeletRequest(uint32_t id, Headers headers, const RequestCheck& check);
  // The current block to the runtime for `id`: as it came, or re-encoded.
  void blockToRuntime(uint32_t id, const Headers& headers, bool end_stream);
  // The current block is not to reach the runtime: when it changes the
  // dynamic table, switch to re-encoding.
  void leaveBlockOut();
  void relayedRequestData(const h2::FrameHeader& h, std::string_view payload);
  // Standing in for the runtime: crihookd's own SETTINGS (those nghttp2's
  // server sent as the terminating relay did) and connection window.
  void standInPreface();

  // --- runtime -> kubelet ---
  void fromRuntime(std::string_view in);
  // A DATA frame's header: false when it and what follows wait for
  // kubelet's window (runtime_held_).
  bool routeRuntimeData(const h2::FrameReader::Event& ev, std::string_view in);
  void resumeRuntime();
  void runtimeFrame(const h2::FrameHeader& h, std::string_view payload);
  void runtimeSettings(std::string_view payload);
  void runtimeReset(const h2::FrameHeader& h, std::string_view payload);
  void runtimeBlock();
  void relayedReplyData(const h2::FrameHeader& h, std::string_view payload);
  // A message over the limit, or trailers, on a relayed stream: crihookd
  // answers kubelet `status` (trailers; a reset mid-message or with
  // `reset_code`), cancels the runtime's stream, and drops what still comes
  // for it.
  void cutRelayed(uint32_t id, const absl::Status& status, uint32_t reset_code = 0);
  void endRelayed(uint32_t id, const absl::Status& status);
  void runtimeGone(const std::string& why);
  // A write to the runtime failed, EPIPE or ECONNRESET: it closed, maybe
  // right behind its last replies (a GOAWAY, the replies, close), which a
  // frame relayed before they were read then finds. Nothing more is written
  // to it (kubelet's frames for it are dropped); what its socket holds is
  // read and relayed, so each reply complete in it still reaches kubelet,
  // and runtimeGone(`why`) follows at its end, or after kLingerAfterFinish
  // if it never ends (Linger).
  void runtimeDeaf(const std::string& why);
  void runtimeGoaway(uint32_t last_stream_id);
  void goawayToKubelet();
  void maybeFinish();
  bool idle() const { return relayed_.empty() && own_.empty(); }

  // Whether kubelet's stream `id` is idle to the runtime: one crihookd
  // answered with its block left out, above every stream the runtime saw.
  // kubelet's frames on it once crihookd no longer holds it (a WINDOW_UPDATE
  // or RST_STREAM that crossed crihookd's END_STREAM, DATA that crossed its
  // RST_STREAM) are dropped: the runtime must end the whole connection on
  // any frame but HEADERS or PRIORITY there (RFC 9113 5.1). A stream the
  // runtime never saw below one it saw was closed by that one (5.1.1):
  // frames on it it drops itself.
  bool unknownToRuntime(uint32_t id) const {
    return id > runtime_last_stream_ && id <= last_kubelet_stream_;
  }

  // --- the timeouts ---
  void armTick();
  void onTick();

  EventLoop& loop_;
  RelayContext& ctx_;
  // No runtime connection: crihookd stands in for the runtime.
  const bool stand_in_;
  bool runtime_answered_ = false;  // standing in: GOAWAY sent once the runtime answered
  Side kubelet_;
  Side runtime_;
  FlowLedger ledger_;
  RelayedStreams relayed_;
  OwnStreams own_;
  hpack::Decoder kubelet_blocks_;
  hpack::Decoder runtime_blocks_;
  // kubelet's blocks to the runtime: re-encoded from a refusal, trailers or
  // a request to canonicalise on.
  Reencoder to_runtime_;
  // The runtime's blocks to kubelet: re-encoded once the runtime answers a
  // stream crihookd answers (runtimeFrame).
  Reencoder to_kubelet_;
  std::string encoded_;
  size_t preface_left_ = h2::kClientPreface.size();
  Route kubelet_route_ = Route::kForward;
  uint32_t kubelet_max_frame_ = h2::kDefaultMaxFrameSize;
  uint32_t runtime_max_frame_ = h2::kDefaultMaxFrameSize;
  // The runtime's bytes not yet parsed because a DATA frame at their head
  // does not fit kubelet's window (FlowLedger::mayForward).
  std::string runtime_held_;
  bool runtime_waits_ = false;
  // crihookd's frames for kubelet waiting for the runtime's SETTINGS or the
  // end of a runtime frame (or header block).
  std::string pending_inject_;
  bool runtime_settings_seen_ = false;
  // crihookd's frames for the runtime waiting for the end of a kubelet frame.
  std::string pending_to_runtime_;

  uint32_t last_kubelet_stream_ = 0;
  // The highest stream whose HEADERS went to the runtime (unknownToRuntime).
  uint32_t runtime_last_stream_ = 0;
  bool settings_seen_ = false;
  bool goaway_sent_ = false;   // to kubelet: no new streams
  bool runtime_lost_ = false;  // the runtime's connection is gone
  bool closed_ = false;
  Clock::time_point accepted_ = Clock::now();
  Clock::time_point idle_since_ = accepted_;
  Clock::time_point block_since_{};
  bool idle_goaway_ = false;
  uint64_t tick_ = 0;
  bool flush_posted_ = false;
  PingAcks acks_;
  uint64_t ping_ack_timer_ = 0;  // the ACKs' delay (kPingAckDelay); 0: none armed
  Linger linger_;                // kubelet's end, once done (linger())
  Linger deaf_;                  // the runtime's end, after a write to it failed (runtimeDeaf)
};

}  // namespace crihook::relay
