#include "config.h"

#include <toml++/toml.h>

#include <fstream>
#include <sstream>

#include "text.h"

namespace crihook {
namespace {

constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

// The checks both the file and the flags go through. Each returns why the
// value is wrong, or an empty string.
std::string listenProblem(const std::string& path) {
  if (!path.empty() && path[0] == '/') return "";
  return cat("expected an absolute path, got \"", path, "\"");
}

std::string logLevelProblem(const std::string& level) {
  for (auto l : kLogLevels) {
    if (l == level) return "";
  }
  return cat("expected one of trace, debug, info, warn, error, critical, off; got \"", level, "\"");
}

std::string describe(const toml::node& node) {
  std::ostringstream out;
  if (node.is_string()) {
    out << '"' << node.as_string()->get() << '"';
  } else if (node.is_table()) {
    out << "a table";
  } else if (node.is_array()) {
    out << "an array";
  } else if (node.is_integer()) {
    out << node.as_integer()->get();
  } else if (node.is_floating_point()) {
    out << node.as_floating_point()->get();
  } else if (node.is_boolean()) {
    out << (node.as_boolean()->get() ? "true" : "false");
  } else {
    out << "a date or time";
  }
  return out.str();
}

// Walks one table, giving each known key to its handler and refusing the rest.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string prefix, std::string_view origin)
      : table_(table), prefix_(std::move(prefix)), origin_(origin) {}

  absl::Status error(std::string_view key, std::string_view reason) const {
    return absl::InvalidArgumentError(cat("config ", origin_, ": ", prefix_, key, ": ", reason));
  }

  absl::Status checkKnown(std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : table_) {
      bool ok = false;
      for (auto k : known) ok = ok || k == key.str();
      if (!ok) return error(key.str(), "unknown key");
    }
    return absl::OkStatus();
  }

  const toml::node* get(std::string_view key) const { return table_.get(key); }

  absl::Status readString(std::string_view key, std::string& out) const {
    const toml::node* node = get(key);
    if (!node) return absl::OkStatus();
    if (!node->is_string()) return error(key, cat("expected a string, got ", describe(*node)));
    out = node->as_string()->get();
    return absl::OkStatus();
  }

  absl::Status readInt(std::string_view key, int64_t lo, int64_t hi, int64_t& out) const {
    const toml::node* node = get(key);
    if (!node) return absl::OkStatus();
    if (!node->is_integer() || node->as_integer()->get() < lo || node->as_integer()->get() > hi) {
      return error(key, cat("expected an integer in ", lo, "..", hi, ", got ", describe(*node)));
    }
    out = node->as_integer()->get();
    return absl::OkStatus();
  }

  absl::Status readDuration(std::string_view key, std::chrono::milliseconds& out) const {
    std::string text;
    if (auto s = readString(key, text); !s.ok() || text.empty()) return s;
    auto d = parseDuration(text);
    if (!d.ok()) return error(key, sv(d.status().message()));
    out = *d;
    return absl::OkStatus();
  }

  absl::StatusOr<const toml::table*> subtable(std::string_view key) const {
    const toml::node* node = get(key);
    if (!node) return nullptr;
    if (!node->is_table()) return error(key, cat("expected a table, got ", describe(*node)));
    return node->as_table();
  }

 private:
  const toml::table& table_;
  std::string prefix_;
  std::string_view origin_;
};

#define CRIHOOK_RETURN_IF_ERROR(expr) \
  do {                                \
    absl::Status _s = (expr);         \
    if (!_s.ok()) return _s;          \
  } while (0)

absl::Status readServer(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "server.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(
      {"listen", "socket_mode", "socket_group", "workers", "shutdown_grace", "max_message_bytes"}));
  CRIHOOK_RETURN_IF_ERROR(r.readString("listen", c.listen_path));
  if (auto why = listenProblem(c.listen_path); !why.empty()) return r.error("listen", why);
  std::string mode;
  CRIHOOK_RETURN_IF_ERROR(r.readString("socket_mode", mode));
  if (!mode.empty()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(mode.c_str(), &end, 8);
    if (*end != '\0' || v > 0777) {
      return r.error("socket_mode",
                     cat("expected an octal mode such as \"0660\", got \"", mode, "\""));
    }
    c.socket_mode = static_cast<uint32_t>(v);
  }
  CRIHOOK_RETURN_IF_ERROR(r.readString("socket_group", c.socket_group));
  int64_t workers = c.workers;
  CRIHOOK_RETURN_IF_ERROR(r.readInt("workers", 1, 64, workers));
  c.workers = static_cast<int>(workers);
  CRIHOOK_RETURN_IF_ERROR(r.readDuration("shutdown_grace", c.shutdown_grace));
  int64_t max_bytes = static_cast<int64_t>(c.max_message_bytes);
  CRIHOOK_RETURN_IF_ERROR(r.readInt("max_message_bytes", 16 << 20, int64_t{1} << 31, max_bytes));
  c.max_message_bytes = static_cast<uint64_t>(max_bytes);
  return absl::OkStatus();
}

absl::Status readBackend(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "backend.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown({"endpoint", "connect_timeout"}));
  CRIHOOK_RETURN_IF_ERROR(r.readString("endpoint", c.backend_endpoint));
  if (auto p = unixSocketPath(c.backend_endpoint); !p.ok())
    return r.error("endpoint", sv(p.status().message()));
  return r.readDuration("connect_timeout", c.backend_connect_timeout);
}

absl::Status readLog(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "log.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown({"level"}));
  CRIHOOK_RETURN_IF_ERROR(r.readString("level", c.log_level));
  if (auto why = logLevelProblem(c.log_level); !why.empty()) return r.error("level", why);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::chrono::milliseconds> parseDuration(std::string_view text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && value < (uint64_t{1} << 40)) {
    value = value * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  std::string_view unit = text.substr(i);
  if (i == 0)
    return absl::InvalidArgumentError(
        cat("expected a duration such as \"2s\" or \"500ms\", got \"", text, "\""));
  if (unit == "ms") return std::chrono::milliseconds(value);
  if (unit == "s") return std::chrono::milliseconds(value * 1000);
  if (unit == "m") return std::chrono::milliseconds(value * 60000);
  return absl::InvalidArgumentError(cat("expected a duration unit ms, s or m in \"", text, "\""));
}

absl::StatusOr<std::string> unixSocketPath(std::string_view endpoint) {
  constexpr std::string_view kScheme = "unix://";
  std::string_view path = endpoint;
  if (path.substr(0, kScheme.size()) == kScheme) path.remove_prefix(kScheme.size());
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(cat(
        "expected a Unix socket endpoint such as unix:///run/containerd/containerd.sock, got \"",
        endpoint, "\""));
  }
  return std::string(path);
}

absl::Status validateConfig(const Config& c, std::string_view origin) {
  if (auto p = unixSocketPath(c.backend_endpoint); !p.ok()) {
    return absl::InvalidArgumentError(cat(origin, ": backend endpoint: ", p.status().message()));
  }
  if (auto why = listenProblem(c.listen_path); !why.empty()) {
    return absl::InvalidArgumentError(cat(origin, ": listen: ", why));
  }
  if (auto why = logLevelProblem(c.log_level); !why.empty()) {
    return absl::InvalidArgumentError(cat(origin, ": log level: ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> parseConfig(std::string_view text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return absl::InvalidArgumentError(cat("config ", origin, ": line ", where.line, ", column ",
                                          where.column, ": ", e.description()));
  }
  Config config;
  TableReader top(root, "", origin);
  CRIHOOK_RETURN_IF_ERROR(top.checkKnown({"server", "backend", "log"}));
  struct Section {
    std::string_view name;
    absl::Status (*read)(const toml::table&, std::string_view, Config&);
  };
  for (const Section& s :
       {Section{"server", readServer}, Section{"backend", readBackend}, Section{"log", readLog}}) {
    auto table = top.subtable(s.name);
    if (!table.ok()) return table.status();
    if (*table) CRIHOOK_RETURN_IF_ERROR(s.read(**table, origin, config));
  }
  return config;
}

absl::StatusOr<Config> loadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        cat("config ", path, ": cannot be read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parseConfig(text.str(), path);
}

}  // namespace crihook
