#include "proxy/own_streams.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "base/grpc_wire.h"
#include "base/text.h"
#include "proxy/call_log.h"
#include "proxy/h2_frame.h"
#include "proxy/intercept_stage.h"
#include "proxy/reencoder.h"
#include "proxy/upstream.h"

namespace crihook::relay {

OwnStreams::OwnStreams(OwnStreamsHost& host, EventLoop& loop, RelayContext& ctx, FlowLedger& ledger)
    : host_(host),
      loop_(loop),
      ctx_(ctx),
      ledger_(ledger),
      side_(*this, loop, ctx),
      kubelet_max_frame_(h2::kDefaultMaxFrameSize) {}

std::shared_ptr<UpstreamOwner> OwnStreams::sharedOwner() {
  // Held by a connect in flight: it keeps the connection, which holds this.
  return std::shared_ptr<UpstreamOwner>(host_.keepAlive(), this);
}

Call* OwnStreams::find(int32_t id) {
  Own* o = own(static_cast<uint32_t>(id));
  return o ? o->call.get() : nullptr;
}

OwnStreams::Own* OwnStreams::own(uint32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : &it->second;
}

OwnStreams::Own& OwnStreams::open(uint32_t id, Headers headers, Own::Kind kind) {
  Own& own = streams_[id];
  own.kind = kind;
  own.call = std::make_unique<Call>(ctx_.max_message_bytes);
  Call& call = *own.call;
  call.down_id = static_cast<int32_t>(id);
  if (const std::string* path = findHeader(headers, ":path")) call.path = *path;
  call.req_headers = std::move(headers);
  ctx_.active_calls.add();
  ledger_.openOwn(id);
  return own;
}

// --- new streams ------------------------------------------------------------

void OwnStreams::refuse(uint32_t id, const Headers& headers, const RequestRefusal& refusal,
                        bool end_stream) {
  const std::string* path = findHeader(headers, ":path");
  warnRefused(ctx_, id, path, refusal.why);
  Own& own = open(id, {}, Own::Kind::kRefused);
  if (path) own.call->path = *path;
  own.kubelet_done = end_stream;
  if (refusal.reset_code != 0) {
    own.call->final_status = absl::InternalError(cat("crihookd: ", refusal.why));
    std::string frames;
    h2::appendRstStream(frames, id, refusal.reset_code);
    host_.toKubelet(frames);
    own.reply_done = true;
    own.kubelet_done = true;  // nothing more is taken from a reset stream
    markAnswered(own);
    finish(own);
    return;
  }
  own.call->final_status = refusal.status;
  own.call->resp_trailers = trailersOnly(refusal.status, refusal.http_status);
  own.call->resp_trailers_only = true;
  replyOwn(own);
}

void OwnStreams::intercept(uint32_t id, Headers headers, const RequestCheck& check,
                           const InterceptedMethod& method, bool end_stream) {
  budget_.chargeRequestHeaders(ctx_, check.list_bytes);
  Own& own = open(id, std::move(headers), Own::Kind::kIntercepted);
  Call& call = *own.call;
  call.check = check;
  call.intercepted = method;
  call.deadline = grpcDeadline(call.req_headers, call.start);
  if (end_stream) {
    own.kubelet_done = true;
    startPreStage(own);
  }
}

void OwnStreams::forward(uint32_t id, Headers headers, const RequestCheck& check, bool end_stream) {
  budget_.chargeRequestHeaders(ctx_, check.list_bytes);
  Own& own = open(id, std::move(headers), Own::Kind::kForwarded);
  Call& call = *own.call;
  call.check = check;
  call.deadline = grpcDeadline(call.req_headers, call.start);
  if (end_stream) {
    own.kubelet_done = true;
    call.req_end = true;
  }
  side_.forward(call);
}

// --- kubelet's frames ---------------------------------------------------------

void OwnStreams::creditKubelet(uint32_t id, uint32_t bytes, bool stream_open) {
  if (bytes == 0) return;
  auto credit = FlowLedger::creditForTaken(bytes, stream_open);
  std::string frames;
  h2::appendWindowUpdate(frames, 0, credit.connection);
  if (credit.stream != 0) h2::appendWindowUpdate(frames, id, credit.stream);
  host_.toKubelet(frames);
}

void OwnStreams::onDataHeader(uint32_t id, uint32_t length, bool end_stream) {
  // Bytes of a stream crihookd answers: the runtime never credits them. A
  // forwarded stream's are credited as the side connection sends them
  // (consumeRequestBytes), or once they are dropped (forwardedData).
  Own* o = own(id);
  if (o && o->kind != Own::Kind::kForwarded) creditKubelet(id, length, !end_stream);
}

void OwnStreams::onData(uint32_t id, std::string_view data, bool end, uint32_t padding) {
  Own* o = own(id);
  if (!o) return;
  if (o->kind == Own::Kind::kForwarded) {
    creditKubelet(id, padding, !end);  // the padding is taken here
    return forwardedData(*o, data, end);
  }
  if (o->reply_done || o->kind != Own::Kind::kIntercepted || o->kubelet_done) {
    if (end) o->kubelet_done = true;
    if (end && o->reply_done) finish(*o);
    return;
  }
  interceptedData(*o, data, end);
}

void OwnStreams::interceptedData(Own& own, std::string_view data, bool end) {
  Call& call = *own.call;
  const size_t ok =
      call.req_frames.feed(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (call.req_frames.tooLarge()) {
    return answerOwn(own, messageTooLarge(ctx_, "request", call.req_frames), false);
  }
  if (auto budget = budget_.chargeBuffer(ctx_, call, ok, "its request"); !budget.ok())
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

void OwnStreams::forwardedData(Own& own, std::string_view data, bool end) {
  Call& call = *own.call;
  const auto id = static_cast<uint32_t>(call.down_id);
  const auto n = static_cast<uint32_t>(data.size());
  if (own.reply_done || own.kubelet_done || call.answered) {
    // The runtime gets no more of it: the bytes are taken here.
    creditKubelet(id, n, false);
    if (end) own.kubelet_done = true;
    if (end && own.reply_done) finish(own);
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

void OwnStreams::consumeRequestBytes(Call& call, size_t n) {
  // The side connection sent `n` bytes of a forwarded request: kubelet may
  // send as many more.
  const auto id = static_cast<uint32_t>(call.down_id);
  Own* o = own(id);
  creditKubelet(id, static_cast<uint32_t>(n), o && !o->kubelet_done);
  host_.flushSoon();
}

void OwnStreams::onTrailers(uint32_t id) {
  if (Own* o = own(id)) {
    o->kubelet_done = true;
    answerOwn(*o, absl::InternalError("crihookd: trailers in a request"), true);
  }
}

void OwnStreams::onReset(uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Own& own = it->second;
  Call& call = *own.call;
  cancelUpstreamStream(call);
  if (!call.answered) {
    if (call.final_status.ok()) call.final_status = absl::CancelledError("reset by the client");
    markAnswered(own);
  }
  erase(it);
}

void OwnStreams::onWindowUpdate(uint32_t id, uint32_t increment) {
  ledger_.onKubeletStreamUpdate(id, increment);
  if (Own* o = own(id)) pump(*o);
}

void OwnStreams::pumpAll() {
  std::vector<uint32_t> waiting;
  for (const auto& [id, own] : streams_) {
    if (own.reply_started && !own.reply_done) waiting.push_back(id);
  }
  std::sort(waiting.begin(), waiting.end());
  for (uint32_t id : waiting) {
    if (Own* o = own(id)) pump(*o);
  }
}

// --- the Interceptor's stages -----------------------------------------------

void OwnStreams::startPreStage(Own& own) {
  Call& call = *own.call;
  call.req_end = true;
  own.in_stage = true;
  auto request = std::make_shared<RequestToDecode>(takeRequest(call));
  const bool off_loop = ctx_.offload && request->body.size() >= kDecodeOffLoopBytes;
  // The stage holds the connection (and with it this), never the call: a
  // reset may end the call while it runs.
  auto stage = [this, keep = host_.keepAlive(), id = call.down_id, request] {
    auto back = [this, keep, id](std::shared_ptr<InterceptedCall> ic,
                                 absl::StatusOr<std::string> body) {
      loop_.dispatch([this, keep, id, ic = std::move(ic), body = std::move(body)]() mutable {
        onPreStageDone(id, std::move(ic), std::move(body));
        host_.flushNow();
      });
    };
    auto ic = decodeInterceptedRequest(*request);
    if (!ic.ok()) return back(nullptr, ic.status());
    ctx_.interceptor->pre(*ic, [this, back, ic = *ic, request](absl::Status status) {
      if (!status.ok()) return back(ic, status);
      back(ic, forwardedBody(*ic, std::move(request->body), ctx_.max_message_bytes));
    });
  };
  if (off_loop) {
    ctx_.offload(std::move(stage));
  } else {
    stage();
  }
}

void OwnStreams::onPreStageDone(int32_t id, std::shared_ptr<InterceptedCall> ic,
                                absl::StatusOr<std::string> body) {
  assert(loop_.inLoop());
  Own* o = own(static_cast<uint32_t>(id));
  if (!o || host_.closed()) return;
  o->call->ic = std::move(ic);
  o->in_stage = false;
  if (o->reply_done) return;
  if (!body.ok()) return answerOwn(*o, body.status(), false);
  if (auto ready = prepareForward(*o->call, std::move(*body)); !ready.ok())
    return answerOwn(*o, ready, false);
  side_.forward(*o->call);
}

void OwnStreams::startPostStage(Own& own) {
  Call& call = *own.call;
  decodeInterceptedReply(call);
  own.in_stage = true;
  const int32_t id = call.down_id;
  ctx_.interceptor->post(call.ic, [this, keep = host_.keepAlive(), id] {
    loop_.dispatch([this, keep, id] {
      onPostStageDone(id);
      host_.flushNow();
    });
  });
}

void OwnStreams::onPostStageDone(int32_t id) {
  assert(loop_.inLoop());
  Own* o = own(static_cast<uint32_t>(id));
  if (!o || host_.closed()) return;
  o->in_stage = false;
  if (o->reply_done) return;
  o->call->final_status = o->call->ic->backend_status;
  replyOwn(*o);
}

// --- the side connection ----------------------------------------------------

void OwnStreams::onResponseHeaders(Call& call) {
  host_.onRuntimeAnswered();
  Own* o = own(static_cast<uint32_t>(call.down_id));
  if (!o || o->kind != Own::Kind::kForwarded || o->reply_done) return;
  std::string frames;
  h2::appendHeaderBlock(frames, static_cast<uint32_t>(call.down_id),
                        literalBlock(call.resp_headers), false, kubelet_max_frame_);
  host_.toKubelet(frames);
  o->reply_started = true;
}

void OwnStreams::onResponseData(Call& call, const uint8_t* data, size_t len) {
  Own* o = own(static_cast<uint32_t>(call.down_id));
  if (o && o->kind == Own::Kind::kForwarded) return forwardedReplyData(*o, data, len);
  // An intercepted call's reply is taken whole: the side connection is
  // credited at once.
  if (call.up) nghttp2_session_consume(call.up->session(), call.up_id, len);
  if (!o) return;
  const size_t ok = call.resp_frames.feed(data, len);
  if (call.resp_frames.tooLarge()) {
    return answerOwn(*o, messageTooLarge(ctx_, "response", call.resp_frames), false);
  }
  if (auto budget = budget_.chargeBuffer(ctx_, call, ok, "the runtime's reply"); !budget.ok())
    return answerOwn(*o, budget, false);
  call.resp_body.append(data, ok);
}

void OwnStreams::forwardedReplyData(Own& own, const uint8_t* data, size_t len) {
  Call& call = *own.call;
  const size_t ok = call.resp_frames.feed(data, len);
  if (!call.resp_frames.tooLarge()) {
    // Handed back to the side connection's windows as kubelet's take them
    // (pump).
    call.resp_body.append(data, ok);
    return pump(own);
  }
  // The whole messages before the one over the limit still go, then the
  // status; the bytes past the cut are dropped here.
  const bool clean = call.resp_frames.cleanCut();
  if (call.up) nghttp2_session_consume(call.up->session(), call.up_id, len - (clean ? ok : 0));
  if (clean) call.resp_body.append(data, ok);
  answerOwn(own, messageTooLarge(ctx_, "response", call.resp_frames), false);
}

void OwnStreams::onResponseEnd(Call& call) {
  call.resp_end = true;
  Own* o = own(static_cast<uint32_t>(call.down_id));
  if (!o || o->reply_done) return;
  if (o->kind == Own::Kind::kForwarded) return forwardedReplyEnd(*o);
  startPostStage(*o);
}

void OwnStreams::forwardedReplyEnd(Own& own) {
  // The runtime's own end: trailers-only, trailers, or none (END_STREAM on
  // its last DATA).
  Call& call = *own.call;
  if (call.resp_trailers_only || !own.reply_started) {
    call.final_status = statusFrom(call.resp_headers);
    call.resp_trailers_only = true;
    return replyOwn(own);
  }
  call.final_status = statusFrom(call.resp_trailers);
  own.trailers_block = literalBlock(call.resp_trailers);
  own.reply_ends = call.resp_trailers.empty();
  pump(own);
}

void OwnStreams::onUpstreamStreamClosed(Call& call, uint32_t error_code) {
  if (call.resp_end || call.answered) return;
  Own* o = own(static_cast<uint32_t>(call.down_id));
  const bool forwarded = o && o->kind == Own::Kind::kForwarded;
  if (error_code == NGHTTP2_REFUSED_STREAM && !call.retried && !forwarded) {
    // A runtime going away refused the stream before processing it; the
    // request is still whole here: send it on a fresh connection.
    call.retried = true;
    call.resp_headers.clear();
    call.resp_final = false;
    side_.forward(call);
    return;
  }
  const absl::Status status(grpcwire::codeOfReset(error_code),
                            cat("crihookd: backend reset the stream, HTTP/2 error ", error_code));
  if (forwarded) {
    // The reset passed on: kubelet maps its code to the status it would
    // have had from the runtime directly.
    call.final_status = status;
    return resetOwn(*o,
                    error_code == NGHTTP2_NO_ERROR ? uint32_t{NGHTTP2_INTERNAL_ERROR} : error_code);
  }
  replyWithStatus(call, status);
  onResponseEnd(call);
}

bool OwnStreams::chargeReplyHeader(Call& call, size_t bytes) {
  return budget_.chargeReplyHeader(ctx_, call, bytes);
}

void OwnStreams::answer(Call& call, const absl::Status& status) {
  if (Own* o = own(static_cast<uint32_t>(call.down_id))) answerOwn(*o, status, false);
}

void OwnStreams::returnReplyWindow(Call& call, size_t n) {
  if (n == 0 || !call.window_up || call.window_up->closed()) return;
  nghttp2_session_consume(call.window_up->session(), call.window_up_id, n);
  call.window_up->scheduleFlush();
}

// --- replies ----------------------------------------------------------------

void OwnStreams::answerOwn(Own& own, const absl::Status& status, bool reset) {
  if (own.reply_done) return;
  Call& call = *own.call;
  cancelUpstreamStream(call);
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
    return pump(own);
  }
  call.resp_headers.clear();
  call.resp_trailers = trailersOnly(status);
  call.resp_trailers_only = true;
  replyOwn(own);
}

void OwnStreams::resetOwn(Own& own, uint32_t code) {
  Call& call = *own.call;
  cancelUpstreamStream(call);
  std::string frames;
  h2::appendRstStream(frames, static_cast<uint32_t>(call.down_id), code);
  host_.toKubelet(frames);
  dropBytes(own);
  own.trailers_block.clear();
  own.reply_done = true;
  own.kubelet_done = true;
  markAnswered(own);
  finish(own);
}

void OwnStreams::dropBytes(Own& own) {
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

void OwnStreams::replyOwn(Own& own) {
  Call& call = *own.call;
  const auto id = static_cast<uint32_t>(call.down_id);
  std::string frames;
  if (call.resp_trailers_only) {
    const Headers& h = call.resp_headers.empty() ? call.resp_trailers : call.resp_headers;
    h2::appendHeaderBlock(frames, id, literalBlock(h), true, kubelet_max_frame_);
    host_.toKubelet(frames);
    dropBytes(own);
    own.reply_started = true;
    own.reply_done = true;
    markAnswered(own);
    finish(own);
    return;
  }
  h2::appendHeaderBlock(frames, id, literalBlock(call.resp_headers), false, kubelet_max_frame_);
  host_.toKubelet(frames);
  own.reply_started = true;
  own.trailers_block = literalBlock(call.resp_trailers);
  own.reply_ends = call.resp_trailers.empty();
  pump(own);
}

void OwnStreams::pump(Own& own) {
  if (!own.reply_started || own.reply_done) return;
  Call& call = *own.call;
  const auto id = static_cast<uint32_t>(call.down_id);
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
  host_.toKubelet(frames);
  if (own.kind == Own::Kind::kForwarded) returnReplyWindow(call, sent);
  if (own.reply_done) {
    markAnswered(own);
    finish(own);
  }
}

void OwnStreams::markAnswered(Own& own) {
  Call& call = *own.call;
  if (call.answered) return;
  call.answered = true;
  ctx_.active_calls.done();
  if (call.intercepted) logCall(*ctx_.log, call);
  recordCall(ctx_, call.path, call.final_status.code(), call.start);
  own.done_at = Clock::now();
}

void OwnStreams::finish(Own& own) {
  if (!own.reply_done || own.in_stage) return;
  const auto id = static_cast<uint32_t>(own.call->down_id);
  if (!own.kubelet_done && !own.reset_sent) {
    // As grpc-go's server ends a stream it answered while the client still
    // sends: RST_STREAM NO_ERROR. Its frames on the way are dropped
    // (kZombieLinger).
    std::string frames;
    h2::appendRstStream(frames, id, h2::error::kNoError);
    host_.toKubelet(frames);
    own.reset_sent = true;
    budget_.release(ctx_, *own.call);
    return;
  }
  if (own.kubelet_done) erase(streams_.find(id));
}

void OwnStreams::erase(Streams::iterator it) {
  const uint32_t id = it->first;
  dropBytes(it->second);
  budget_.release(ctx_, *it->second.call);
  ledger_.closeOwn(id);
  streams_.erase(it);
  host_.onOwnStreamEnded();
}

// --- the tick, the end ------------------------------------------------------

void OwnStreams::onTick(Clock::time_point now) {
  const auto timeout = ctx_.limits.request_timeout;
  std::vector<uint32_t> late, gone;
  for (const auto& [id, own] : streams_) {
    if (own.reply_done && own.reset_sent && now - own.done_at >= kZombieLinger) gone.push_back(id);
    // A forwarded request may stream for as long as the call lasts.
    if (!own.reply_done && !own.kubelet_done && own.kind != Own::Kind::kForwarded &&
        now - own.call->start >= timeout)
      late.push_back(id);
  }
  for (uint32_t id : late) {
    Own* o = own(id);
    if (!o) continue;
    answerOwn(*o,
              absl::DeadlineExceededError(
                  cat("crihookd: ", o->call->path,
                      ": request message not complete within server.request_timeout (",
                      timeout.count(), "ms)")),
              false);
  }
  for (uint32_t id : gone) {
    if (Own* o = own(id)) {
      o->kubelet_done = true;
      finish(*o);
    }
  }
}

void OwnStreams::closeAll() {
  side_.dropAll("client connection closed");
  for (auto& [id, own] : streams_) {
    Call& call = *own.call;
    if (!call.answered) {
      ctx_.active_calls.done();
      if (call.final_status.ok()) call.final_status = absl::CancelledError("connection closed");
      recordCall(ctx_, call.path, call.final_status.code(), call.start);
    }
    budget_.release(ctx_, call);
  }
  streams_.clear();
}

}  // namespace crihook::relay
