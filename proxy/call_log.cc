#include "proxy/call_log.h"

#include <string>

#include "base/quote.h"
#include "base/text.h"
#include "cri/lifecycle.h"

namespace crihook::relay {

void logCall(spdlog::logger& log, const Call& call) {
  if (!call.intercepted) return;
  const absl::Status& s = call.final_status;
  const auto level = s.ok() ? spdlog::level::info : spdlog::level::warn;
  if (!log.should_log(level)) return;
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - call.start).count();
  static const CallIdentity kNobody;  // a call refused before it was decoded
  const CallIdentity& id = call.ic ? call.ic->identity : kNobody;
  // An id crihookd has not seen created (before a restart) has no pod name.
  log.log(level, "{} api={} {} duration={}.{:03}ms status={}{}{}", call.intercepted->spec->name,
          apiName(call.intercepted->api), identityTags(id), micros / 1000, micros % 1000,
          absl::StatusCodeToString(s.code()),
          s.ok() ? "" : " message=", s.ok() ? "" : boundedMessage(sv(s.message())));
}

}  // namespace crihook::relay
