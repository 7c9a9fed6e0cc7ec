#include "proxy/call_budget.h"

#include <algorithm>

#include "base/quote.h"
#include "base/text.h"
#include "proxy/request_check.h"

namespace crihook::relay {

size_t CallBudget::headerRoom() const {
  return kMaxConnectionHeaderBytes - std::min(header_bytes, kMaxConnectionHeaderBytes);
}

void CallBudget::chargeRequestHeaders(RelayContext& ctx, size_t bytes) {
  header_bytes += bytes;
  ctx.header_bytes.fetch_add(static_cast<int64_t>(bytes));
}

bool CallBudget::chargeReplyHeader(RelayContext& ctx, Call& call, size_t bytes) {
  if (bytes > kMaxHeaderListBytes - call.resp_header_bytes ||
      header_bytes + bytes > kMaxConnectionHeaderBytes)
    return false;
  call.resp_header_bytes += bytes;
  header_bytes += bytes;
  ctx.header_bytes.fetch_add(static_cast<int64_t>(bytes));
  return true;
}

absl::Status CallBudget::chargeBuffer(RelayContext& ctx, Call& call, size_t bytes,
                                      std::string_view what) {
  const RelayLimits& l = ctx.limits;
  if (buffered_bytes + bytes > l.max_connection_buffered_bytes) {
    return absl::ResourceExhaustedError(
        cat("crihookd: ", call.path, ": ", what, " would take the calls buffered on this ",
            "connection past server.max_connection_buffered_bytes (",
            l.max_connection_buffered_bytes, " bytes)"));
  }
  const auto n = static_cast<int64_t>(bytes);
  if (static_cast<uint64_t>(ctx.buffered_bytes.fetch_add(n) + n) > l.max_buffered_bytes) {
    ctx.buffered_bytes.fetch_sub(n);
    return absl::ResourceExhaustedError(
        cat("crihookd: ", call.path, ": ", what,
            " would take the calls buffered by crihookd past server.max_buffered_bytes (",
            l.max_buffered_bytes, " bytes)"));
  }
  buffered_bytes += bytes;
  call.buffered += bytes;
  return absl::OkStatus();
}

void CallBudget::release(RelayContext& ctx, Call& call) {
  const size_t headers = call.check.list_bytes + call.resp_header_bytes;
  header_bytes -= headers;
  ctx.header_bytes.fetch_sub(static_cast<int64_t>(headers));
  call.check.list_bytes = 0;
  call.resp_header_bytes = 0;
  buffered_bytes -= call.buffered;
  ctx.buffered_bytes.fetch_sub(static_cast<int64_t>(call.buffered));
  call.buffered = 0;
}

std::chrono::milliseconds tickInterval(const RelayLimits& l) {
  const auto shortest = std::min({l.preface_timeout, l.idle_timeout, l.request_timeout});
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                               std::chrono::milliseconds(1000));
}

void recordCall(RelayContext& ctx, std::string_view path, absl::StatusCode code,
                Clock::time_point start) {
  if (ctx.call_metrics) ctx.call_metrics->record(path, code, Clock::now() - start);
}

void warnNoPreface(RelayContext& ctx) {
  uint64_t held_back = 0;
  if (!ctx.timeout_log.allow(held_back)) return;
  ctx.log->warn(
      "closed a connection that sent no HTTP/2 preface within server.preface_timeout ({}ms); "
      "{} more connections cut by a timeout since the last message",
      ctx.limits.preface_timeout.count(), held_back);
}

void warnHeaderBlockLate(RelayContext& ctx, uint32_t stream) {
  uint64_t held_back = 0;
  if (!ctx.timeout_log.allow(held_back)) return;
  ctx.log->warn(
      "closed a connection whose header block of stream {} was not complete within "
      "server.request_timeout ({}ms); {} more connections cut by a timeout since the last "
      "message",
      stream, ctx.limits.request_timeout.count(), held_back);
}

absl::Status messageTooLarge(const RelayContext& ctx, std::string_view direction,
                             const grpcwire::FrameTracker& frames) {
  return absl::ResourceExhaustedError(
      cat("crihookd: ", direction, " message of ", frames.announcedBytes(),
          " bytes is larger than the limit of ", ctx.max_message_bytes, " bytes"));
}

void warnRefused(RelayContext& ctx, uint32_t stream, const std::string* path,
                 std::string_view why) {
  uint64_t held_back = 0;
  if (!ctx.refusal_log.allow(held_back)) return;
  ctx.log->warn("refused request stream {} path={}: {}; {} more refused since the last message",
                stream, path ? quote(*path) : std::string("-"), why, held_back);
}

}  // namespace crihook::relay
