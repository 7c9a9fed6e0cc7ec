#include "tools/crihookctl/status.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/version.h"

namespace crihook::ctl {

using Clock = std::chrono::steady_clock;

namespace {

// An fd closed on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string describe(const MetricsListen& w) {
  return w.kind == MetricsListen::Kind::kUnix ? w.path : cat(w.host, ":", w.port);
}

// Waits for `events` on `fd` until `until`; false on timeout.
bool waitFor(int fd, short events, Clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

absl::Status unavailable(const std::string& name, std::string_view why) {
  return absl::UnavailableError(cat("metrics endpoint ", name, ": ", why));
}

struct SocketAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

absl::StatusOr<SocketAddress> addressOf(const MetricsListen& where, const std::string& name) {
  SocketAddress a;
  if (where.kind == MetricsListen::Kind::kUnix) {
    auto* un = reinterpret_cast<sockaddr_un*>(&a.addr);
    un->sun_family = AF_UNIX;
    if (where.path.size() >= sizeof(un->sun_path)) return unavailable(name, "path too long");
    std::strncpy(un->sun_path, where.path.c_str(), sizeof(un->sun_path) - 1);
    a.len = sizeof(sockaddr_un);
  } else if (where.kind == MetricsListen::Kind::kTcp) {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&a.addr);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
    if (::inet_pton(AF_INET, where.host.c_str(), &in4->sin_addr) == 1) {
      in4->sin_family = AF_INET;
      in4->sin_port = htons(where.port);
      a.len = sizeof(sockaddr_in);
    } else if (::inet_pton(AF_INET6, where.host.c_str(), &in6->sin6_addr) == 1) {
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(where.port);
      a.len = sizeof(sockaddr_in6);
    } else {
      return absl::InvalidArgumentError(cat("metrics endpoint ", name, ": not an IP address"));
    }
  } else {
    return absl::FailedPreconditionError(
        "the metrics endpoint is disabled ([metrics] listen = \"\")");
  }
  return a;
}

// A non-blocking connect finished by `until`.
absl::Status connectBy(int fd, const SocketAddress& a, Clock::time_point until,
                       const std::string& name) {
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) == 0)
    return absl::OkStatus();
  if (errno != EINPROGRESS) return unavailable(name, std::strerror(errno));
  if (!waitFor(fd, POLLOUT, until)) return unavailable(name, "connect timed out");
  int error = 0;
  socklen_t elen = sizeof(error);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &elen);
  if (error != 0) return unavailable(name, std::strerror(error));
  return absl::OkStatus();
}

absl::Status sendAll(int fd, std::string_view request, Clock::time_point until,
                     const std::string& name) {
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd, POLLOUT, until)) return unavailable(name, "send timed out");
    } else if (n < 0 && errno != EINTR) {
      return unavailable(name, std::strerror(errno));
    }
  }
  return absl::OkStatus();
}

// Everything until the server closes, at most kMaxHttpResponseBytes.
absl::StatusOr<std::string> receiveAll(int fd, Clock::time_point until, const std::string& name) {
  std::string response;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
      if (response.size() > kMaxHttpResponseBytes)
        return absl::InvalidArgumentError(cat("metrics endpoint ", name, ": answer larger than ",
                                              kMaxHttpResponseBytes, " bytes"));
    } else if (n == 0) {
      return response;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd, POLLIN, until)) return unavailable(name, "no complete answer in time");
    } else if (errno != EINTR) {
      return unavailable(name, std::strerror(errno));
    }
  }
}

}  // namespace

absl::StatusOr<HttpResult> httpGet(const MetricsListen& where, const std::string& path,
                                   std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  const std::string name = describe(where);
  auto address = addressOf(where, name);
  if (!address.ok()) return address.status();
  Fd s;
  s.fd = ::socket(address->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s.fd < 0) return unavailable(name, std::strerror(errno));
  if (auto c = connectBy(s.fd, *address, until, name); !c.ok()) return c;
  const std::string request =
      cat("GET ", path, " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  if (auto sent = sendAll(s.fd, request, until, name); !sent.ok()) return sent;
  auto response = receiveAll(s.fd, until, name);
  if (!response.ok()) return response.status();
  const size_t head_end = response->find("\r\n\r\n");
  if (!response->starts_with("HTTP/1.") || head_end == std::string::npos || response->size() < 12)
    return absl::InvalidArgumentError(cat("metrics endpoint ", name, ": not an HTTP answer"));
  HttpResult r;
  r.status = std::atoi(response->c_str() + 9);
  r.body = response->substr(head_end + 4);
  return r;
}

absl::StatusOr<std::vector<Sample>> parseExposition(std::string_view text) {
  std::vector<Sample> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(cat("metrics line ", line_no, ": ", why));
    };
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (s.name.empty()) return bad("no metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
          return bad("expected label=\"value\"");
        const std::string key(line.substr(i, eq - i));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) return bad("unterminated label value");
        s.labels[key] = std::move(value);
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const std::string value(line.substr(i, line.find(' ', i) - i));
    if (value == "+Inf") {
      s.value = HUGE_VAL;
    } else if (value == "-Inf") {
      s.value = -HUGE_VAL;
    } else if (value == "NaN") {
      s.value = NAN;
    } else {
      char* end = nullptr;
      s.value = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0')
        return bad(cat("expected a number, got \"", value.substr(0, 32), "\""));
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

std::string duration(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60,
                s = seconds % 60;
  if (d > 0) return fmt::format("{}d{:02}h{:02}m", d, h, m);
  if (h > 0) return fmt::format("{}h{:02}m{:02}s", h, m, s);
  if (m > 0) return fmt::format("{}m{:02}s", m, s);
  return fmt::format("{}s", s);
}

std::string firstLine(const std::string& body) {
  std::string l = body.substr(0, body.find('\n'));
  return l.substr(0, 200);
}

// What crihookd's endpoint says of it.
struct DaemonStatus {
  std::string endpoint;
  std::string version, commit;  // crihookd's, from crihook_build_info
  int64_t uptime_s = 0;
  bool healthy = false, ready = false;
  std::string health_reason, ready_reason;  // the first line of a 503's body
  double connections = 0, in_flight = 0, buffered = 0, pending = 0;
  struct MethodRow {
    uint64_t calls = 0, errors = 0;
    std::map<std::string, uint64_t> by_code;
  };
  struct HookRow {
    uint64_t calls = 0, rejections = 0, failures = 0, timeouts = 0;
  };
  std::map<std::string, MethodRow> methods;  // service/method
  std::map<std::string, HookRow> hooks;
};

// Where `status` reads: --metrics as the operator names it, else the config
// file's [metrics] listen, else the default. inputError naming the file or key.
absl::StatusOr<MetricsListen> statusEndpoint(const std::string& metrics,
                                             const std::string& config_file) {
  Config config;
  std::string origin = "default";
  if (!config_file.empty()) {
    auto loaded = loadConfigFile(config_file);
    if (!loaded.ok()) return inputError(loaded.status());
    config = *loaded;
    origin = config_file;
  }
  if (!metrics.empty()) {
    config.metrics_listen = metrics;
    config.metrics_allow_remote = true;  // the operator names it: theirs to reach
    origin = "--metrics";
  }
  auto where = metricsListen(config, origin);
  if (!where.ok()) return inputError(where.status());
  return where;
}

// The samples status shows, added into `st`.
void tally(const std::vector<Sample>& samples, DaemonStatus& st) {
  double started = 0;
  for (const Sample& s : samples) {
    auto label = [&](const char* k) {
      auto it = s.labels.find(k);
      return it == s.labels.end() ? std::string() : it->second;
    };
    const auto n = static_cast<uint64_t>(std::max(0.0, s.value));
    if (s.name == "crihook_build_info") {
      st.version = label("version");
      st.commit = label("commit");
    } else if (s.name == "crihook_process_start_time_seconds") {
      started = s.value;
    } else if (s.name == "crihook_connections") {
      st.connections = s.value;
    } else if (s.name == "crihook_calls_in_flight") {
      st.in_flight = s.value;
    } else if (s.name == "crihook_intercepted_buffered_bytes") {
      st.buffered = s.value;
    } else if (s.name == "crihook_device_cleanups_pending") {
      st.pending += s.value;
    } else if (s.name == "crihook_cri_calls_total") {
      DaemonStatus::MethodRow& m = st.methods[cat(label("service"), "/", label("method"))];
      m.calls += n;
      if (label("code") != "OK") m.errors += n;
      m.by_code[label("code")] += n;
    } else if (s.name == "crihook_hook_calls_total") {
      st.hooks[label("hook")].calls += n;
    } else if (s.name == "crihook_hook_rejections_total") {
      st.hooks[label("hook")].rejections += n;
    } else if (s.name == "crihook_hook_failures_total") {
      st.hooks[label("hook")].failures += n;
    } else if (s.name == "crihook_hook_timeouts_total") {
      st.hooks[label("hook")].timeouts += n;
    }
  }
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  st.uptime_s = started > 0 ? now_s - static_cast<int64_t>(started) : 0;
}

// /healthz, /readyz and /metrics, all within `timeout`. UNAVAILABLE or
// INVALID_ARGUMENT as httpGet and parseExposition say.
absl::StatusOr<DaemonStatus> readStatus(const MetricsListen& where,
                                        std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
  };
  auto health = httpGet(where, "/healthz", left());
  if (!health.ok()) return health.status();
  auto ready = httpGet(where, "/readyz", left());
  auto scraped = httpGet(where, "/metrics", left());
  if (!ready.ok()) return ready.status();
  if (!scraped.ok()) return scraped.status();
  auto samples = parseExposition(scraped->body);
  if (!samples.ok()) return samples.status();
  DaemonStatus st;
  st.endpoint = describe(where);
  st.healthy = health->status == 200;
  st.ready = ready->status == 200;
  if (!st.healthy) st.health_reason = firstLine(health->body);
  if (!st.ready) st.ready_reason = firstLine(ready->body);
  tally(*samples, st);
  return st;
}

void printJson(const DaemonStatus& st, std::ostream& out) {
  nlohmann::json j;
  j["endpoint"] = st.endpoint;
  j["version"] = st.version;
  j["commit"] = st.commit;
  j["uptime_seconds"] = st.uptime_s;
  j["backend"] = {{"healthy", st.healthy}, {"reason", st.health_reason}};
  j["ready"] = {{"ready", st.ready}, {"reason", st.ready_reason}};
  j["connections"] = st.connections;
  j["calls_in_flight"] = st.in_flight;
  j["intercepted_buffered_bytes"] = st.buffered;
  j["pending_cleanups"] = st.pending;
  j["methods"] = nlohmann::json::array();
  for (const auto& [name, m] : st.methods)
    j["methods"].push_back(
        {{"method", name}, {"calls", m.calls}, {"errors", m.errors}, {"by_code", m.by_code}});
  j["hooks"] = nlohmann::json::array();
  for (const auto& [name, h] : st.hooks)
    j["hooks"].push_back({{"hook", name},
                          {"calls", h.calls},
                          {"rejections", h.rejections},
                          {"failures", h.failures},
                          {"timeouts", h.timeouts}});
  out << j.dump(2) << '\n';
}

void printText(const DaemonStatus& st, std::ostream& out) {
  out << versionLine("crihookd", st.version.empty() ? "?" : st.version, st.commit) << " at "
      << st.endpoint << ", up " << duration(st.uptime_s) << '\n';
  out << "backend:  " << (st.healthy ? "healthy" : "UNHEALTHY: " + st.health_reason) << '\n';
  out << "ready:    " << (st.ready ? "yes" : "NO: " + st.ready_reason) << '\n';
  out << fmt::format(
      "connections {}, calls in flight {}, intercepted bytes buffered {}, pending device "
      "cleanups {}\n",
      st.connections, st.in_flight, st.buffered, st.pending);
  if (!st.methods.empty()) {
    out << fmt::format("\n{:<56} {:>10} {:>8}\n", "METHOD", "CALLS", "ERRORS");
    for (const auto& [name, m] : st.methods) {
      std::string codes;
      for (const auto& [code, k] : m.by_code) {
        if (code != "OK") codes += cat(codes.empty() ? "" : ", ", code, " ", k);
      }
      out << fmt::format("{:<56} {:>10} {:>8}{}\n", name, m.calls, m.errors,
                         codes.empty() ? "" : "  (" + codes + ")");
    }
  }
  if (!st.hooks.empty()) {
    out << fmt::format("\n{:<32} {:>10} {:>10} {:>8} {:>8}\n", "HOOK", "CALLS", "REJECTED",
                       "FAILED", "TIMEOUTS");
    for (const auto& [name, h] : st.hooks)
      out << fmt::format("{:<32} {:>10} {:>10} {:>8} {:>8}\n", name, h.calls, h.rejections,
                         h.failures, h.timeouts);
  }
}

}  // namespace

absl::StatusOr<int> cmdStatus(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--metrics", true}, {"--config", true}});
  if (!p.ok()) return p.status();
  if (!p->positional.empty()) return usageError("status takes no arguments");
  auto where = statusEndpoint(p->get("--metrics"), p->get("--config"));
  if (!where.ok()) return where.status();
  auto st = readStatus(*where, std::chrono::seconds(in.options.timeout_s));
  if (!st.ok()) return st.status();
  if (in.options.json) {
    printJson(*st, in.out);
  } else {
    printText(*st, in.out);
  }
  return st->healthy && st->ready ? 0 : 1;
}

}  // namespace crihook::ctl
