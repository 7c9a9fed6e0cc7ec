#include "proxy/call_log.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "base/quote.h"
#include "base/text.h"
#include "cri/lifecycle.h"

namespace crihook::relay {

namespace {

std::string shortId(const std::string& id) { return id.substr(0, 12); }

}  // namespace

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
  // Names and ids come from the request: shown as they are when they are
  // what Kubernetes and the runtimes make (DNS names, hex ids), else quoted,
  // so a newline in a pod name cannot forge a log line.
  auto shown = [](std::string_view text) {
    const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '/' ||
             c == '_';
    });
    return plain ? std::string(text) : quote(text);
  };
  const std::string pod =
      id.pod_name.empty() ? "-" : shown(cat(id.pod_namespace, "/", id.pod_name));
  log.log(level, "{} api={} pod={} sandbox={} container={} duration={}.{:03}ms status={}{}{}",
          call.intercepted->spec->name, apiName(call.intercepted->api), pod,
          id.sandbox_id.empty() ? "-" : shown(shortId(id.sandbox_id)),
          id.container_id.empty() ? "-" : shown(shortId(id.container_id)), micros / 1000,
          micros % 1000, absl::StatusCodeToString(s.code()),
          s.ok() ? "" : " message=", s.ok() ? "" : boundedMessage(sv(s.message())));
}

}  // namespace crihook::relay
