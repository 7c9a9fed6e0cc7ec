#pragma once

// `crihookctl status`: crihookd's health, readiness and main numbers, read
// from its metrics endpoint (/healthz, /readyz, /metrics).

#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "tools/crihookctl/command.h"

namespace crihook::ctl {

// What crihookctl reads of an answer at most: crihookd's whole exposition is
// tens of KiB; anything far larger is not crihookd.
constexpr size_t kMaxHttpResponseBytes = 16 << 20;

struct HttpResult {
  int status = 0;
  std::string body;
};

// One GET with Connection: close, bounded by `timeout` in all and by
// kMaxHttpResponseBytes. UNAVAILABLE naming the address when it cannot be
// reached or does not answer in time; INVALID_ARGUMENT for an answer that
// is not HTTP/1.x.
absl::StatusOr<HttpResult> httpGet(const MetricsListen& where, const std::string& path,
                                   std::chrono::milliseconds timeout);

// One sample of the Prometheus text format.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text exposition format 0.0.4 (comments skipped, label values
// unescaped). A malformed line is INVALID_ARGUMENT naming its number.
absl::StatusOr<std::vector<Sample>> parseExposition(std::string_view text);

// The command: `status [--metrics ENDPOINT] [--config FILE]`. ENDPOINT as
// [metrics] listen takes it (default: the config FILE's, else
// /run/crihook/metrics.sock); within the -t timeout in all it reads
// /healthz, /readyz and /metrics and prints crihookd's version, uptime,
// health, readiness, gauges, calls per method and runs per hook (-o json:
// the same as one object). Returns 0 when crihookd is healthy and ready, 1
// otherwise; an error that exits 1 when the endpoint cannot be reached or
// answers nonsense, 2 (inputError) when FILE or ENDPOINT is not usable.
absl::StatusOr<int> cmdStatus(const Invocation& in);

}  // namespace crihook::ctl
