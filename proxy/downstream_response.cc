// Downstream: the response path, from the runtime's reply (or crihookd's own
// answer) to kubelet's stream.

#include "base/grpc_wire.h"
#include "base/text.h"
#include "proxy/downstream.h"

namespace crihook::relay {

void Downstream::onResponseHeaders(Call& call) {
  if (reconnect_when_answered_) {
    // The calls in flight finish here; the client opens its next
    // connection for what comes after, as it does on any GOAWAY.
    reconnect_when_answered_ = false;
    ctx_.log->debug(
        "the runtime answers again: GOAWAY, so that the client reconnects to the "
        "transparent relay");
    shutdown();
  }
  if (call.passThrough()) submitResponse(call);
}

void Downstream::onResponseData(Call& call, const uint8_t* data, size_t len) {
  size_t ok = call.resp_frames.feed(data, len);
  if (call.resp_frames.tooLarge()) {
    // The bytes past the cut are dropped here; those before it are handed
    // back as kubelet reads them.
    if (call.up)
      nghttp2_session_consume(call.up->session(), call.up_id,
                              len - (call.resp_frames.cleanCut() ? ok : 0));
    cancelUpstream(call);
    auto status = messageTooLarge(ctx_, "response", call.resp_frames);
    if (call.resp_frames.cleanCut()) {
      call.resp_body.append(data, ok);
      answer(call, status);
    } else {
      call.final_status = status;
      resetBoth(call, NGHTTP2_INTERNAL_ERROR);
    }
    return;
  }
  if (!call.passThrough()) {
    nghttp2_session_consume(call.up->session(), call.up_id, len);
    if (auto budget = chargeBuffer(call, ok, "the runtime's reply"); !budget.ok()) {
      answer(call, budget);
      return;
    }
    call.resp_body.append(data, ok);
    if (call.resp_body.size() > ctx_.max_message_bytes + grpcwire::kFrameHeaderBytes) {
      answer(call, absl::ResourceExhaustedError(cat("crihookd: ", call.path,
                                                    ": reply of more than ", ctx_.max_message_bytes,
                                                    " bytes for a unary method")));
    }
    return;
  }
  call.resp_body.append(data, ok);
  if (call.resp_submitted) {
    nghttp2_session_resume_data(session_, call.down_id);
    scheduleFlush();
  }
}

void Downstream::onResponseEnd(Call& call) {
  call.resp_end = true;
  if (!call.passThrough()) {
    startPostStage(call);
    return;
  }
  if (call.resp_trailers_only || !call.resp_submitted) {
    call.final_status = statusFrom(call.resp_headers);
    submitResponse(call);
  } else {
    call.final_status = statusFrom(call.resp_trailers);
    nghttp2_session_resume_data(session_, call.down_id);
    scheduleFlush();
  }
}

void Downstream::onUpstreamStreamClosed(Call& call, uint32_t error_code) {
  if (call.resp_end || call.answered) return;
  if (error_code == NGHTTP2_REFUSED_STREAM && !call.retried && !call.passThrough()) {
    // A backend that is going away refused the stream before processing it;
    // the whole request is still buffered, so send it to a fresh connection.
    call.retried = true;
    call.resp_headers.clear();
    upstreams_.forward(call);
    return;
  }
  auto status = absl::Status(grpcwire::codeOfReset(error_code),
                             cat("crihookd: backend reset the stream, HTTP/2 error ", error_code));
  if (!call.passThrough()) {
    replyWithStatus(call, status);
    onResponseEnd(call);
    return;
  }
  // Pass the reset on: the client maps its code to a status exactly as it
  // would had it talked to the runtime directly.
  call.final_status = status;
  resetBoth(call, error_code == NGHTTP2_NO_ERROR ? uint32_t{NGHTTP2_INTERNAL_ERROR} : error_code);
}

void Downstream::submitResponse(Call& call) {
  if (call.resp_submitted || closed()) return;
  call.resp_submitted = true;
  if (call.resp_trailers_only) {
    // Headers with END_STREAM carry the status; the runtime may have put it
    // in resp_trailers when crihookd synthesised it.
    const Headers& h = call.resp_headers.empty() ? call.resp_trailers : call.resp_headers;
    std::vector<nghttp2_nv> nv = toNv(h);
    nghttp2_submit_response(session_, call.down_id, nv.data(), nv.size(), nullptr);
  } else {
    std::vector<nghttp2_nv> nv = toNv(call.resp_headers);
    nghttp2_data_provider body = SessionTrampolines<Downstream>::body();
    nghttp2_submit_response(session_, call.down_id, nv.data(), nv.size(), &body);
  }
  if (!call.answered && call.resp_end) {
    call.answered = true;
    ctx_.active_calls.fetch_sub(1);
  }
  scheduleFlush();
}

ssize_t Downstream::readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags) {
  Call* call = find(stream_id);
  if (call == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  size_t n = call->resp_body.read(buf, length);
  if (n > 0 && call->passThrough()) returnWindow(*call, n);
  if (!call->resp_body.empty() || !call->resp_end) {
    return n > 0 ? static_cast<ssize_t>(n) : static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED);
  }
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (!call->resp_trailers.empty()) {
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    std::vector<nghttp2_nv> nv = toNv(call->resp_trailers);
    nghttp2_submit_trailer(session_, stream_id, nv.data(), nv.size());
  }
  if (!call->answered) {
    call->answered = true;
    ctx_.active_calls.fetch_sub(1);
  }
  return static_cast<ssize_t>(n);
}

void Downstream::answer(Call& call, const absl::Status& status) {
  if (call.answered) return;
  call.final_status = status;
  cancelUpstream(call);
  if (!call.resp_submitted) {
    replyWithStatus(call, status);
    call.resp_end = true;
    submitResponse(call);
  } else if (call.resp_frames.atBoundary() || call.resp_frames.cleanCut()) {
    call.resp_trailers = statusTrailers(status);
    call.resp_end = true;
    nghttp2_session_resume_data(session_, call.down_id);
  } else {
    resetBoth(call, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  scheduleFlush();
}

void Downstream::resetBoth(Call& call, uint32_t down_error) {
  cancelUpstream(call);
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call.down_id, down_error);
  if (!call.answered) {
    call.answered = true;
    ctx_.active_calls.fetch_sub(1);
  }
  scheduleFlush();
}

}  // namespace crihook::relay
