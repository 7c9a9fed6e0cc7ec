#include "proxy/intercept_stage.h"

#include <string>

#include "base/grpc_wire.h"
#include "base/text.h"
#include "cri/lifecycle.h"

namespace crihook::relay {

RequestToDecode takeRequest(Call& call) {
  return {call.path, *call.intercepted, call.deadline, call.req_body.take()};
}

absl::StatusOr<std::shared_ptr<InterceptedCall>> decodeInterceptedRequest(
    const RequestToDecode& request) {
  auto message = grpcwire::singleMessage(request.body);
  if (!message.ok()) {
    return absl::Status(message.status().code(),
                        cat("crihookd: ", request.path, ": ", sv(message.status().message())));
  }
  auto ic = std::make_shared<InterceptedCall>();
  ic->method = request.intercepted.spec->method;
  ic->api = request.intercepted.api;
  ic->deadline = request.deadline;
  ic->request = request.intercepted.spec->newRequest();
  if (!ic->request->ParseFromArray(message->data(), static_cast<int>(message->size()))) {
    return absl::InvalidArgumentError(
        cat("crihookd: ", request.path, ": cannot decode ", ic->request->GetTypeName()));
  }
  ic->identity = identityFromRequest(*request.intercepted.spec, *ic->request);
  return ic;
}

absl::StatusOr<std::string> forwardedBody(const InterceptedCall& ic, std::string original,
                                          uint64_t max_message_bytes) {
  if (!ic.request_changed) return original;
  std::string bytes;
  ic.request->SerializeToString(&bytes);
  if (bytes.size() > max_message_bytes) {
    return absl::ResourceExhaustedError(cat("crihookd: adjusted request of ", bytes.size(),
                                            " bytes is larger than the message limit"));
  }
  return grpcwire::frame(bytes);
}

absl::Status prepareForward(Call& call, std::string body) {
  call.forward_body = std::move(body);
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
