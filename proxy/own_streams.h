#pragma once

// The streams crihookd answers kubelet itself, on one kubelet connection
// (docs/transparent-relay.md, "Intercepted calls"): refused requests,
// intercepted calls (their request taken whole, the Interceptor's stages
// around the call on crihookd's own side connection to the runtime, the
// reply held whole), and, while crihookd stands in for a runtime that could
// not be reached when kubelet connected, every other call, forwarded on the
// side connection as it comes (request and reply messages stream through,
// held to both sides' windows). Their replies go to kubelet as literal
// header blocks (literalBlock) and DATA within kubelet's windows
// (FlowLedger), through the connection (OwnStreamsHost), between two of the
// runtime's frames.
//
// OwnStreams is the UpstreamOwner of the side connection (an UpstreamSet).
// It runs on its connection's EventLoop; not thread-safe. The Interceptor's
// completions are dispatched back onto that loop.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "cri/lifecycle.h"
#include "proxy/call.h"
#include "proxy/call_budget.h"
#include "proxy/event_loop.h"
#include "proxy/flow_ledger.h"
#include "proxy/relay.h"
#include "proxy/request_check.h"
#include "proxy/upstream_owner.h"
#include "proxy/upstream_set.h"

namespace crihook::relay {

// What OwnStreams needs of its connection (Transparent). Called on the
// connection's loop.
class OwnStreamsHost {
 public:
  // Appends crihookd's frames for kubelet (between two of the runtime's).
  virtual void toKubelet(std::string_view frames) = 0;
  // Writes what waits for kubelet now (after an Interceptor's completion).
  virtual void flushNow() = 0;
  // Writes what waits for kubelet soon (a posted flush).
  virtual void flushSoon() = 0;
  // Whether the connection has closed.
  virtual bool closed() const = 0;
  // The connection, held by what completes later (a stage, a connect).
  virtual std::shared_ptr<void> keepAlive() = 0;
  // The runtime answered a call on the side connection (its reply headers).
  virtual void onRuntimeAnswered() = 0;
  // An own stream ended and was forgotten (the connection may now be idle,
  // or done after its GOAWAY).
  virtual void onOwnStreamEnded() = 0;

 protected:
  ~OwnStreamsHost() = default;
};

class OwnStreams final : public UpstreamOwner {
 public:
  // `host`, `loop`, `ctx` and `ledger` (kubelet's windows, shared with the
  // frames the connection relays) outlive it.
  OwnStreams(OwnStreamsHost& host, EventLoop& loop, RelayContext& ctx, FlowLedger& ledger);
  OwnStreams(const OwnStreams&) = delete;
  OwnStreams& operator=(const OwnStreams&) = delete;

  bool contains(uint32_t id) const { return streams_.count(id) != 0; }
  bool empty() const { return streams_.empty(); }
  size_t size() const { return streams_.size(); }
  // What the connection may still hold of decoded request fields.
  size_t headerRoom() const { return budget_.headerRoom(); }
  // kubelet's SETTINGS_MAX_FRAME_SIZE: crihookd's frames to it are no larger.
  void setKubeletMaxFrame(uint32_t bytes) { kubelet_max_frame_ = bytes; }

  // New streams, from kubelet's request header block on stream `id`
  // (`end_stream`: its END_STREAM came with it).
  // Refused as grpc-go's server refuses it (a reset, or a trailers-only
  // answer); never forwarded.
  void refuse(uint32_t id, const Headers& headers, const RequestRefusal& refusal, bool end_stream);
  // An intercepted call: its message is taken whole, then the stages run.
  void intercept(uint32_t id, Headers headers, const RequestCheck& check,
                 const InterceptedMethod& method, bool end_stream);
  // Standing in for the runtime: forwarded on the side connection as it
  // comes.
  void forward(uint32_t id, Headers headers, const RequestCheck& check, bool end_stream);

  // kubelet's frames on own stream `id`.
  // A DATA frame's header (`length` with its padding): the bytes crihookd
  // takes are credited to kubelet now (a forwarded stream's as the side
  // connection sends them).
  void onDataHeader(uint32_t id, uint32_t length, bool end_stream);
  // The DATA frame's `data` (its padding stripped, `length` bytes in all,
  // `end`: END_STREAM and the frame's last piece).
  void onData(uint32_t id, std::string_view data, bool end, uint32_t padding = 0);
  // Trailers on a request: grpc-go's server ends such a stream; crihookd
  // resets it (PROTOCOL_ERROR).
  void onTrailers(uint32_t id);
  // kubelet reset the stream: it ends CANCELLED, the side connection's
  // stream with it.
  void onReset(uint32_t id);
  // kubelet's WINDOW_UPDATE on the stream, and its windows growing on the
  // connection (a connection WINDOW_UPDATE, SETTINGS): replies waiting for
  // them go on.
  void onWindowUpdate(uint32_t id, uint32_t increment);
  void pumpAll();

  // The timeouts' tick: a request not whole within server.request_timeout
  // is answered DEADLINE_EXCEEDED (not a forwarded one, which may stream as
  // long as its call lasts); a stream crihookd reset while kubelet still
  // sent is forgotten kZombieLinger after.
  void onTick(Clock::time_point now);
  // The connection closed: the side connection goes, every call still open
  // ends CANCELLED.
  void closeAll();

  // UpstreamOwner (the side connection).
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
  void scheduleFlush() override { host_.flushSoon(); }
  bool closed() const override { return host_.closed(); }
  std::shared_ptr<UpstreamOwner> sharedOwner() override;

 private:
  struct Own {
    enum class Kind : uint8_t { kRefused, kIntercepted, kForwarded };
    Kind kind = Kind::kRefused;
    std::unique_ptr<Call> call;
    // The reply waits for kubelet's windows in call->resp_body, then
    // trailers.
    std::string trailers_block;  // literal block; empty: none yet
    bool reply_ends = false;     // a forwarded reply without trailers: END_STREAM on DATA
    bool reply_started = false;
    bool reply_done = false;    // END_STREAM (or RST_STREAM) written
    bool kubelet_done = false;  // kubelet sends nothing more on it
    bool reset_sent = false;    // RST_STREAM NO_ERROR after the reply
    bool in_stage = false;
    Clock::time_point done_at{};
  };
  using Streams = std::unordered_map<uint32_t, Own>;

  Own& open(uint32_t id, Headers headers, Own::Kind kind);
  Own* own(uint32_t id);
  // WINDOW_UPDATE to kubelet for `bytes` of stream `id` crihookd took: the
  // connection's, and the stream's while kubelet still sends on it.
  void creditKubelet(uint32_t id, uint32_t bytes, bool stream_open);
  // `n` reply bytes of forwarded `call` went to kubelet: the side
  // connection may send as many more.
  void returnReplyWindow(Call& call, size_t n);

  void interceptedData(Own& own, std::string_view data, bool end);
  void forwardedData(Own& own, std::string_view data, bool end);
  void forwardedReplyData(Own& own, const uint8_t* data, size_t len);
  void forwardedReplyEnd(Own& own);
  // The pre stage: the request decoded, the Interceptor's pre, the body to
  // forward encoded; on this loop, or off it (RelayContext::offload) for a
  // request of kDecodeOffLoopBytes or more. `ic` is null when the request
  // did not decode; `body` is the status to answer with, or what to forward.
  void startPreStage(Own& own);
  void onPreStageDone(int32_t id, std::shared_ptr<InterceptedCall> ic,
                      absl::StatusOr<std::string> body);
  void startPostStage(Own& own);
  void onPostStageDone(int32_t id);

  // Ends the reply with `status`: trailers-only, or trailers after the
  // messages written, or (`reset`, or mid-message) RST_STREAM.
  void answerOwn(Own& own, const absl::Status& status, bool reset);
  // Ends the stream with RST_STREAM `code`.
  void resetOwn(Own& own, uint32_t code);
  // The reply (call->resp_headers, resp_body, resp_trailers) to kubelet.
  void replyOwn(Own& own);
  void pump(Own& own);
  // What the stream still holds of both directions' bytes, dropped; a
  // forwarded stream's handed back to the windows that counted them.
  void dropBytes(Own& own);
  void markAnswered(Own& own);
  void finish(Own& own);
  void erase(Streams::iterator it);

  OwnStreamsHost& host_;
  EventLoop& loop_;
  RelayContext& ctx_;
  FlowLedger& ledger_;
  UpstreamSet side_;
  CallBudget budget_;  // what the streams hold against the limits
  Streams streams_;
  uint32_t kubelet_max_frame_;
};

}  // namespace crihook::relay
