#include "proxy/intercept_stage.h"

#include <string>

#include "base/text.h"
#include "cri/lifecycle.h"
#include "base/grpc_wire.h"

namespace crihook::relay {

absl::StatusOr<std::shared_ptr<InterceptedCall>> decodeInterceptedRequest(const Call& call) {
  auto message = grpcwire::singleMessage(call.req_body.view());
  if (!message.ok()) {
    return absl::Status(message.status().code(),
                        cat("crihookd: ", call.path, ": ", sv(message.status().message())));
  }
  auto ic = std::make_shared<InterceptedCall>();
  ic->method = call.intercepted->spec->method;
  ic->api = call.intercepted->api;
  ic->deadline = call.deadline;
  ic->request = call.intercepted->spec->newRequest();
  if (!ic->request->ParseFromArray(message->data(), static_cast<int>(message->size()))) {
    return absl::InvalidArgumentError(
        cat("crihookd: ", call.path, ": cannot decode ", ic->request->GetTypeName()));
  }
  ic->identity = identityFromRequest(*call.intercepted->spec, *ic->request);
  return ic;
}

absl::Status prepareForward(Call& call, uint64_t max_message_bytes) {
  InterceptedCall& ic = *call.ic;
  if (ic.request_changed) {
    std::string bytes;
    ic.request->SerializeToString(&bytes);
    if (bytes.size() > max_message_bytes) {
      return absl::ResourceExhaustedError(cat("crihookd: adjusted request of ", bytes.size(),
                                              " bytes is larger than the message limit"));
    }
    call.forward_body = grpcwire::frame(bytes);
  } else {
    call.forward_body = call.req_body.take();
  }
  if (call.deadline != Clock::time_point::max()) {
    auto left = call.deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      return absl::DeadlineExceededError("crihookd: deadline exceeded in the pre-stage hooks");
    }
    // The runtime gets what is left of the caller's deadline.
    for (Header& h : call.req_headers) {
      if (h.name == "grpc-timeout") h.value = grpcwire::formatTimeout(left);
    }
  }
  return absl::OkStatus();
}

void decodeInterceptedReply(Call& call) {
  InterceptedCall& ic = *call.ic;
  ic.backend_status = statusFrom(
      call.resp_trailers_only ? call.resp_headers.empty() ? call.resp_trailers : call.resp_headers
                              : call.resp_trailers);
  if (ic.backend_status.ok()) {
    auto message = grpcwire::singleMessage(call.resp_body.view());
    if (message.ok()) {
      ic.response = call.intercepted->spec->newResponse();
      if (!ic.response->ParseFromArray(message->data(), static_cast<int>(message->size())))
        ic.response.reset();
    }
    if (ic.response) noteCreatedId(*call.intercepted->spec, *ic.response, ic.identity);
  }
}

}  // namespace crihook::relay
