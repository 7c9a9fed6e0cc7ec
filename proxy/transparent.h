#pragma once

// The transparent relay (docs/transparent-relay.md): one kubelet connection
// relayed to the runtime as an HTTP/2 intermediary, not as two endpoints.
// Every frame is read and every header block decoded; frames and the
// runtime's header blocks go through as they came (SETTINGS, PING and flow
// control are kubelet's and the runtime's own), kubelet's header blocks are
// re-encoded for the runtime. Streams crihookd answers itself — refused
// requests and intercepted calls — never reach this runtime connection:
// intercepted calls go over a side connection (an UpstreamSet) through the
// Interceptor's stages, and their answers are written to kubelet as literal
// header fields (hpack.h) and DATA within kubelet's windows (FlowLedger).
//
// A connection accepted while the runtime cannot be reached has no runtime
// connection to relay: crihookd stands in for the runtime. It sends kubelet
// SETTINGS of its own, answers kubelet's SETTINGS and PINGs, and makes every
// stream one of its own, forwarded on the side connection (which connects
// per call, and answers UNAVAILABLE naming the backend when it cannot) as it
// comes: request and reply messages stream through, held to both sides'
// windows. Once the runtime answers a call, kubelet gets GOAWAY, so that its
// next connection is relayed frame by frame.
//
// Runs on its EventLoop; not thread-safe (Connection, relay.h, posts to it).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "proxy/call.h"
#include "proxy/call_budget.h"
#include "proxy/event_loop.h"
#include "proxy/flow_ledger.h"
#include "proxy/h2_frame.h"
#include "proxy/hpack.h"
#include "proxy/linger.h"
#include "proxy/relay.h"
#include "proxy/upstream_owner.h"
#include "proxy/upstream_set.h"

namespace crihook::relay {

// kubelet's PINGs are crihookd's to answer (Transparent::owePingAck): an ACK
// waits at most this long for other bytes to kubelet to go out with, and
// only while such bytes are expected (a call on the connection not yet
// answered); otherwise it goes out at once. grpc-go, kubelet's gRPC, sends a
// PING with nearly every message it receives (its bandwidth estimator):
// acked at once, each costs a write here and a wake-up of its sender. A call
// answered within the delay carries the ACK in its reply's write; a slower
// one lets it go alone when the delay ends.
inline constexpr std::chrono::milliseconds kPingAckDelay{2};

class Transparent final : public UpstreamOwner, public std::enable_shared_from_this<Transparent> {
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

  // UpstreamOwner (the side connection of intercepted calls).
  Call* find(int32_t id) override;
  void onResponseHeaders(Call& call) override;
  void onResponseData(Call& call, const uint8_t* data, size_t len) override;
  void onResponseEnd(Call& call) override;
  void onUpstreamStreamClosed(Call& call, uint32_t error_code) override;
  void onUpstreamLost(Upstream& up, const std::string& why) override { side_.onLost(up, why); }
  void onUpstreamGoaway(Upstream& up) override { side_.onGoaway(up); }
  void consumeRequestBytes(Call& call, size_t n) override;
  bool chargeReplyHeader(Call& call, size_t bytes) override;
  void answer(Call& call, const absl::Status& status) override;
  void scheduleFlush() override;
  bool closed() const override { return closed_; }
  std::shared_ptr<UpstreamOwner> sharedOwner() override { return shared_from_this(); }

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
  // A stream crihookd answers: a refused request, an intercepted call, or
  // (standing in for the runtime) a call forwarded as it comes on the side
  // connection.
  struct Own {
    enum class Kind : uint8_t { kRefused, kIntercepted, kForwarded };
    Kind kind = Kind::kRefused;
    std::unique_ptr<Call> call;
    // The reply waits for kubelet's windows in call->resp_body, then
    // trailers.
    std::string trailers_block;  // literal block; empty: none yet
    bool reply_ends = false;     // a forwarded reply without trailers: END_STREAM on its DATA
    bool reply_started = false;
    bool reply_done = false;    // END_STREAM (or RST_STREAM) written
    bool kubelet_done = false;  // kubelet sends nothing more on it
    bool reset_sent = false;    // RST_STREAM NO_ERROR after the reply
    bool in_stage = false;
    std::chrono::steady_clock::time_point done_at{};
  };
  struct Relayed {
    explicit Relayed(uint64_t max_message_bytes)
        : request(max_message_bytes), reply(max_message_bytes) {}
    std::string path;
    std::chrono::steady_clock::time_point start;
    // The gRPC messages of both directions, against the message limit.
    grpcwire::FrameTracker request;
    grpcwire::FrameTracker reply;
    bool reply_headers = false;
    // crihookd ended the stream (a message over the limit): what still comes
    // for it is dropped (DATA) or passed for HPACK's sake (header blocks).
    bool cut = false;
    std::chrono::steady_clock::time_point cut_at{};
  };

  // The biggest frame read whole, and the SETTINGS_MAX_FRAME_SIZE each side
  // is told of the other (at most): header blocks are capped at 64 KiB
  // anyway, control frames are small, gRPC peers send DATA of 16 KiB.
  static constexpr size_t kMaxWholeFrame = 64 << 10;

  void onReadable(bool kubelet, bool hangup);
  // After GOAWAY, with every stream done and written: crihookd half-closes
  // kubelet's socket and waits, reading and dropping what comes, for
  // kubelet to close (at most kLingerAfterFinish, linger.h), so that
  // kubelet's writes in the meantime (a WINDOW_UPDATE, a PING) do not fail
  // before it has read the last answers: a gRPC client whose write fails
  // drops what it had not read, and reports "Broken pipe" for a call that
  // was answered.
  void linger();
  void drainWhileLingering(bool kubelet);
  void onWritable(bool kubelet);
  void flush(bool kubelet);
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
  // kubelet's PINGs are crihookd's to answer, not the runtime's: grpc-go
  // sends one after most replies it reads, and a grpc-go runtime that saw
  // PINGs after replies it did not send itself (crihookd's own) would end
  // the connection (its "too_many_pings" strikes). The ACK rides with the
  // next bytes to kubelet (kPingAckDelay).
  void owePingAck(std::string_view opaque);
  void settlePingAcks();
  void sendPingAcks();
  // GOAWAY PROTOCOL_ERROR to kubelet, then closed.
  void protocolError(const std::string& why);

  // kubelet -> runtime.
  void fromKubelet(std::string_view in);
  void kubeletFrame(const h2::FrameHeader& h, std::string_view payload);
  void kubeletBlock();
  // The current block to the runtime for `id`: as it came, or re-encoded.
  void blockToRuntime(uint32_t id, const Headers& headers, bool end_stream);
  // The current block is not to reach the runtime: when it changes the
  // dynamic table, switch to re-encoding.
  void leaveBlockOut();

  // runtime -> kubelet.
  void fromRuntime(std::string_view in);
  void resumeRuntime();
  void runtimeFrame(const h2::FrameHeader& h, std::string_view payload);
  void runtimeBlock();
  void endRelayed(uint32_t id, const absl::Status& status);
  void relayedRequestData(const h2::FrameHeader& h, std::string_view payload);
  void relayedReplyData(const h2::FrameHeader& h, std::string_view payload);
  // A message over the limit, or trailers, on a relayed stream: crihookd
  // answers kubelet `status` (trailers; a reset mid-message or with
  // `reset_code`), cancels the runtime's stream, and drops what still comes
  // for it.
  void cutRelayed(uint32_t id, const absl::Status& status, uint32_t reset_code = 0);
  // The end crihookd writes kubelet for relayed stream `id` with `status`:
  // trailers-only when no reply headers went, trailers when the reply went
  // up to a message's edge, else RST_STREAM INTERNAL_ERROR (a message half
  // sent cannot be ended with a status).
  void appendRelayedEnd(std::string& frames, uint32_t id, const Relayed& r,
                        const absl::Status& status);
  void runtimeGone(const std::string& why);
  // A write to the runtime failed, EPIPE or ECONNRESET: it closed, maybe
  // right behind its last replies (a GOAWAY, the replies, close), which a
  // frame relayed before they were read then finds. Nothing more is written
  // to it (kubelet's frames for it are dropped); what its socket holds is
  // read and relayed, so each reply complete in it still reaches kubelet,
  // and runtimeGone(`why`) follows at its end, or after kLingerAfterFinish
  // if it never ends.
  void runtimeDeaf(const std::string& why);
  void runtimeGoaway(uint32_t last_stream_id);
  void goawayToKubelet();
  void maybeFinish();

  // Streams crihookd answers.
  // Whether kubelet's stream `id` is idle to the runtime: one crihookd
  // answered with its block left out, above every stream the runtime saw.
  // kubelet's frames on it once crihookd no longer holds it (a WINDOW_UPDATE
  // or RST_STREAM that crossed crihookd's END_STREAM, DATA that crossed its
  // RST_STREAM) are dropped: the runtime must end the whole connection on
  // any frame but HEADERS or PRIORITY there (RFC 9113 5.1). A stream the runtime never saw below
  // one it saw was closed by that one (5.1.1): frames on it it drops itself.
  bool unknownToRuntime(uint32_t id) const {
    return id > runtime_last_stream_ && id <= last_kubelet_stream_;
  }
  // Standing in for the runtime: crihookd's own SETTINGS (those nghttp2's
  // server sent as the terminating relay) and the connection window.
  void standInPreface();
  // Standing in: a stream crihookd forwards as it comes on the side
  // connection (the current block is its request's).
  void forwardOwn(uint32_t id, Headers headers, const RequestCheck& check);
  // WINDOW_UPDATE to kubelet for `bytes` of a stream crihookd takes: the
  // connection, and the stream while kubelet still sends on it.
  void creditKubelet(uint32_t id, uint32_t bytes, bool stream_open);
  // `n` reply bytes of forwarded `call` went to kubelet: the side
  // connection may send as many more.
  void returnReplyWindow(Call& call, size_t n);
  Own& openOwn(uint32_t id, Headers headers);
  void refuse(uint32_t id, Headers headers, const RequestRefusal& refusal);
  void ownData(Own& own, const h2::FrameHeader& h, std::string_view data, bool frame_end);
  // kubelet's request bytes of a forwarded stream, to the side connection.
  void forwardedData(Own& own, std::string_view data, bool end);
  // The runtime's reply bytes of a forwarded stream, to kubelet within its
  // windows.
  void forwardedReplyData(Own& own, const uint8_t* data, size_t len);
  void startPreStage(Own& own);
  void onPreStageDone(int32_t id, absl::Status status);
  void onPostStageDone(int32_t id);
  void cancelSide(Call& call);
  // Ends the reply with `status`: trailers-only, or trailers after the
  // messages written, or (`reset`, or mid-message) RST_STREAM.
  void answerOwn(Own& own, const absl::Status& status, bool reset);
  // Ends the stream with RST_STREAM `code`.
  void resetOwn(Own& own, uint32_t code);
  // What the stream still holds of both directions' bytes, dropped; a
  // forwarded stream's handed back to the windows that counted them.
  void dropOwnBytes(Own& own);
  void replyOwn(Own& own);
  void pumpOwn(uint32_t id);
  void pumpAllOwn();
  void markAnswered(Own& own);
  void finishOwn(uint32_t id);
  void endOwn(uint32_t id, const char* why);
  void eraseOwn(std::unordered_map<uint32_t, Own>::iterator it);

  void armTick();
  void onTick();
  absl::Status chargeBuffer(Call& call, size_t bytes, std::string_view what);
  void releaseLimits(Call& call);
  void recordCall(std::string_view path, absl::StatusCode code,
                  std::chrono::steady_clock::time_point start);

  EventLoop& loop_;
  RelayContext& ctx_;
  // No runtime connection: crihookd stands in for the runtime.
  const bool stand_in_;
  bool runtime_answered_ = false;  // standing in: GOAWAY sent once the runtime answered
  Side kubelet_;
  Side runtime_;
  UpstreamSet side_;
  FlowLedger ledger_;
  hpack::Decoder kubelet_blocks_;
  hpack::Decoder runtime_blocks_;
  // One direction's header blocks: they go as they came while `on` is
  // false (the receiver's decoder then mirrors the sender's encoder). A block
  // crihookd must leave out or change switches the direction to re-encoding
  // for good (start()), the first block opening with a dynamic table size
  // update to 0 that empties the receiver's table.
  struct Reencoder {
    bool on = false;
    bool reset_owed = false;
    uint32_t table_size = hpack::kDefaultTableSize;  // the receiver's, capped at ours
    hpack::Encoder encoder;
    void start();
    // The receiver's SETTINGS_HEADER_TABLE_SIZE.
    void setMaxTableSize(uint32_t value);
    // Appends `fields` as a block (the table reset first when owed); the
    // encoder's error (out of memory) when it fails.
    absl::Status encode(const Headers& fields, std::string& block);
  };
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

  std::unordered_map<uint32_t, Relayed> relayed_;
  std::unordered_map<uint32_t, Own> own_;
  uint32_t last_kubelet_stream_ = 0;
  // The highest stream whose HEADERS went to the runtime (unknownToRuntime).
  uint32_t runtime_last_stream_ = 0;
  bool settings_seen_ = false;
  bool goaway_sent_ = false;   // to kubelet: no new streams
  bool runtime_lost_ = false;  // the runtime's connection is gone
  bool closed_ = false;
  CallBudget budget_;  // what own_ holds against the limits
  std::chrono::steady_clock::time_point accepted_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point idle_since_ = accepted_;
  std::chrono::steady_clock::time_point block_since_{};
  bool idle_goaway_ = false;
  uint64_t tick_ = 0;
  bool flush_posted_ = false;
  std::string owed_ping_acks_;   // 8 bytes of opaque data each
  size_t acks_since_drain_ = 0;  // ACKs written since kubelet last read all
  uint64_t ping_ack_timer_ = 0;
  Linger linger_;  // kubelet's end, once done (linger())
  Linger deaf_;    // the runtime's end, after a write to it failed (runtimeDeaf)
};

}  // namespace crihook::relay
