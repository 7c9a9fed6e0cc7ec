#include "proxy/downstream.h"

#include <algorithm>

#include "base/text.h"
#include "cri/lifecycle.h"
#include "proxy/call_log.h"
#include "proxy/intercept_stage.h"

namespace crihook::relay {

void Downstream::setupSession() {
  createSession(true, SessionTrampolines<Downstream>::callbacks(),
                {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderListBytes}});
}

void Downstream::start() {
  setupSession();
  startReading();
  flush();
  armTick();
}

void Downstream::shutdown() {
  if (closed() || shutting_down_) return;
  shutting_down_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

void Downstream::closeAll(const std::string& why) { fail(why); }

void Downstream::onClosed(const std::string& why) {
  ctx_.log->debug("client connection closed: {}", why);
  if (tick_ != 0) loop().cancel(tick_);
  tick_ = 0;
  dropAllCalls();
}

bool Downstream::replyExpected() const {
  for (const auto& [id, call] : calls_) {
    if (!call->answered && !call->resp_submitted) return true;
  }
  return false;
}

void Downstream::dropAllCalls() {
  // The runtime cancels every stream of a connection that closes.
  upstreams_.dropAll("client connection closed");
  for (auto& [id, call] : calls_) {
    if (!call->answered) ctx_.active_calls.fetch_sub(1);
    if (call->final_status.ok() && !(call->resp_end && call->resp_submitted))
      call->final_status = absl::CancelledError("connection closed");
    recordCall(*call);
    releaseLimits(*call);
  }
  calls_.clear();
}

int Downstream::onBeginHeaders(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_HEADERS && frame.headers.cat == NGHTTP2_HCAT_REQUEST) {
    calls_.emplace(frame.hd.stream_id, std::make_unique<Call>(ctx_.max_message_bytes));
    calls_[frame.hd.stream_id]->down_id = frame.hd.stream_id;
    ctx_.active_calls.fetch_add(1);
  }
  return 0;
}

int Downstream::onHeader(const nghttp2_frame& frame, std::string_view n, std::string_view v) {
  if (frame.hd.type != NGHTTP2_HEADERS) return 0;
  Call* call = find(frame.hd.stream_id);
  if (call == nullptr) return 0;
  if (frame.headers.cat != NGHTTP2_HCAT_REQUEST) {
    // Trailers: grpc-go's server ends the whole connection on them; crihookd
    // refuses the stream once the block ends (onFrameRecv), and keeps
    // nothing of it.
    return 0;
  }
  const size_t before = call->check.list_bytes;
  if (checkRequestField(call->check, n, v, budget_.headerRoom())) {
    call->req_headers.push_back({std::string(n), std::string(v)});
    budget_.chargeRequestHeaders(ctx_, call->check.list_bytes - before);
  }
  return 0;
}

int Downstream::onFrameRecv(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_SETTINGS) settings_seen_ = true;
  Call* call = find(frame.hd.stream_id);
  if (call == nullptr) return 0;
  const bool end = frame.hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (end && (frame.hd.type == NGHTTP2_HEADERS || frame.hd.type == NGHTTP2_DATA))
    call->client_done = true;
  if (frame.hd.type == NGHTTP2_HEADERS) call->headers_done = true;
  if (frame.hd.type == NGHTTP2_HEADERS && frame.headers.cat != NGHTTP2_HCAT_REQUEST) {
    refuse(*call, RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, "trailers in a request"});
    return 0;
  }
  if (frame.hd.type == NGHTTP2_HEADERS) {
    if (auto refusal = refusalOf(call->check, call->req_headers)) {
      refuse(*call, *refusal);
      return 0;
    }
    onRequestHeaders(*call);
    // The call may have been answered (and erased) already.
    call = find(frame.hd.stream_id);
  }
  if (call != nullptr && end &&
      (frame.hd.type == NGHTTP2_HEADERS || frame.hd.type == NGHTTP2_DATA)) {
    onRequestEnd(*call);
  }
  return 0;
}

int Downstream::onDataChunk(int32_t stream_id, const uint8_t* data, size_t len) {
  Call* call = find(stream_id);
  if (call == nullptr || call->answered) {
    nghttp2_session_consume(session_, stream_id, len);
    return 0;
  }
  onRequestData(*call, data, len);
  return 0;
}

int Downstream::onStreamClose(int32_t stream_id, uint32_t error_code) {
  Call* call = find(stream_id);
  if (call == nullptr) return 0;
  if (!call->answered && !(call->resp_end && call->resp_submitted)) {
    // kubelet cancelled (RST_STREAM) or its deadline passed: cancel the
    // runtime's stream too, so the runtime stops working on it.
    if (call->final_status.ok()) {
      call->final_status = absl::CancelledError(
          error_code == NGHTTP2_NO_ERROR ? "closed by the client"
                                         : cat("reset by the client, HTTP/2 error ", error_code));
    }
  }
  cancelUpstream(*call);
  if (call->intercepted) logCall(*ctx_.log, *call);
  recordCall(*call);
  eraseCall(stream_id);
  return 0;
}

int Downstream::onFrameSend(const nghttp2_frame& frame) {
  if (!(frame.hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  Call* call = find(frame.hd.stream_id);
  if (call != nullptr && call->reset_when_answered && !call->client_done) {
    call->reset_when_answered = false;
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->down_id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

void Downstream::recordCall(Call& call) {
  if (ctx_.call_metrics)
    ctx_.call_metrics->record(call.path, call.final_status.code(), Clock::now() - call.start);
}

void Downstream::eraseCall(int32_t id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  Call& call = *it->second;
  if (!call.answered) ctx_.active_calls.fetch_sub(1);
  releaseLimits(call);
  // Bytes buffered but never relayed still count against both connections'
  // windows: hand them back, or a few abandoned calls stall the connection.
  if (call.passThrough()) {
    if (!call.resp_body.empty()) returnWindow(call, call.resp_body.size());
    if (!call.req_body.empty() && !closed())
      nghttp2_session_consume(session_, id, call.req_body.size());
  }
  calls_.erase(it);
  if (calls_.empty()) idle_since_ = Clock::now();
}

void Downstream::cancelUpstream(Call& call) { cancelUpstreamStream(call); }

void Downstream::refuse(Call& call, const RequestRefusal& refusal) {
  warnRefused(ctx_, static_cast<uint32_t>(call.down_id), findHeader(call.req_headers, ":path"),
              refusal.why);
  if (refusal.reset_code != 0) {
    call.final_status = absl::InternalError(cat("crihookd: ", refusal.why));
    resetBoth(call, refusal.reset_code);
    return;
  }
  if (call.answered) return;
  cancelUpstream(call);
  call.final_status = refusal.status;
  replyWithStatus(call, refusal.status, refusal.http_status);
  call.resp_end = true;
  submitResponse(call);
  // Nothing of a refused request is used any more.
  releaseLimits(call);
  call.req_headers = Headers();
  endRequestEarly(call);
}

void Downstream::endRequestEarly(Call& call) {
  if (call.client_done || closed()) return;
  // A RST_STREAM submitted now would make nghttp2 drop the answer still
  // queued for the stream: it goes once the answer is sent (onFrameSend).
  if (nghttp2_session_get_stream_local_close(session_, call.down_id) == 1) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call.down_id, NGHTTP2_NO_ERROR);
    scheduleFlush();
  } else {
    call.reset_when_answered = true;
  }
}

void Downstream::onRequestHeaders(Call& call) {
  canonicalise(call.req_headers);
  if (const std::string* path = findHeader(call.req_headers, ":path")) call.path = *path;
  call.deadline = grpcDeadline(call.req_headers, call.start);
  call.intercepted = findInterceptedMethod(call.path);
  if (call.passThrough()) upstreams_.forward(call);
}

void Downstream::onRequestData(Call& call, const uint8_t* data, size_t len) {
  size_t ok = call.req_frames.feed(data, len);
  if (call.req_frames.tooLarge()) {
    nghttp2_session_consume(session_, call.down_id, len);
    answer(call, messageTooLarge(ctx_, "request", call.req_frames));
    cancelUpstream(call);
    return;
  }
  if (!call.passThrough()) {
    // Intercepted calls are decoded whole: take the bytes now, but never
    // more than one message's worth (a client streaming many small
    // messages into a unary method must not grow the buffer forever), nor
    // past the budgets of buffered calls.
    nghttp2_session_consume(session_, call.down_id, len);
    if (auto budget = chargeBuffer(call, ok, "its request"); !budget.ok()) {
      answer(call, budget);
      endRequestEarly(call);
      return;
    }
    call.req_body.append(data, ok);
    if (call.req_body.size() > ctx_.max_message_bytes + grpcwire::kFrameHeaderBytes) {
      answer(call, absl::ResourceExhaustedError(
                       cat("crihookd: ", call.path, ": request of more than ",
                           ctx_.max_message_bytes, " bytes for a unary method")));
    }
    return;
  }
  call.req_body.append(data, ok);
  if (call.up && call.up_id != 0) {
    nghttp2_session_resume_data(call.up->session(), call.up_id);
    call.up->scheduleFlush();
  }
}

void Downstream::returnWindow(Call& call, size_t n) {
  if (call.window_up && !call.window_up->closed()) {
    nghttp2_session_consume(call.window_up->session(), call.window_up_id, n);
    call.window_up->scheduleFlush();
  }
}

void Downstream::consumeRequestBytes(Call& call, size_t n) {
  nghttp2_session_consume(session_, call.down_id, n);
  scheduleFlush();
}

void Downstream::onRequestEnd(Call& call) {
  call.req_end = true;
  if (!call.passThrough()) {
    startPreStage(call);
    return;
  }
  if (call.up && call.up_id != 0) {
    nghttp2_session_resume_data(call.up->session(), call.up_id);
    call.up->scheduleFlush();
  }
}

void Downstream::startPreStage(Call& call) {
  auto ic = decodeInterceptedRequest(call);
  if (!ic.ok()) {
    answer(call, ic.status());
    return;
  }
  call.ic = *ic;
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  const int32_t id = call.down_id;
  ctx_.interceptor->pre(call.ic, [self, id](absl::Status status) {
    self->loop().dispatch([self, id, status = std::move(status)]() mutable {
      self->onPreStageDone(id, std::move(status));
      self->scheduleFlush();
    });
  });
}

void Downstream::onPreStageDone(int32_t id, absl::Status status) {
  Call* call = find(id);
  if (call == nullptr || closed()) return;  // kubelet gave up meanwhile
  if (!status.ok()) {
    answer(*call, status);
    return;
  }
  if (auto ready = prepareForward(*call, ctx_.max_message_bytes); !ready.ok()) {
    answer(*call, ready);
    return;
  }
  upstreams_.forward(*call);
}

void Downstream::startPostStage(Call& call) {
  decodeInterceptedReply(call);
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  const int32_t id = call.down_id;
  ctx_.interceptor->post(call.ic, [self, id] {
    self->loop().dispatch([self, id] {
      self->onPostStageDone(id);
      self->scheduleFlush();
    });
  });
}

void Downstream::onPostStageDone(int32_t id) {
  Call* call = find(id);
  if (call == nullptr || closed()) return;
  call->final_status = call->ic->backend_status;
  submitResponse(*call);
}

}  // namespace crihook::relay
