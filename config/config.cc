#include "config/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "config/config_keys.h"

namespace crihook {

const char* const kDefaultModuleDir = CRIHOOK_MODULE_DIR;
const char* const kDefaultModuleHost = CRIHOOK_MODULE_HOST;

std::string_view ownerSideName(OwnerSide side) {
  switch (side) {
    case OwnerSide::kCrihook:
      return "crihook";
    case OwnerSide::kKoordinator:
      return "koordinator";
    case OwnerSide::kRefuse:
      return "refuse";
  }
  return "refuse";
}

namespace {

constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

// What a path key takes: an absolute path, and for some "" too (the
// feature off); a Unix socket's path fits sockaddr_un.
struct PathRule {
  bool or_empty = false;
  bool socket = false;
};

// The longest path a Unix socket binds to (sockaddr_un's sun_path less its NUL).
constexpr size_t kMaxSocketPathBytes = 107;
// How much of a refused path a message shows.
constexpr size_t kMaxPathShownBytes = 200;

// Why `path` is not what `rule` takes, or "": every path key's one check
// and message (the file's keys through TableReader::readAbsolutePath, the
// flags' --listen through validateConfig).
std::string pathProblem(const std::string& path, PathRule rule) {
  if (path.empty() && rule.or_empty) return "";
  if (path.empty() || path[0] != '/') {
    return cat("expected an absolute path", rule.or_empty ? " or \"\"" : "", ", got ",
               quote(path, kMaxPathShownBytes));
  }
  if (rule.socket && path.size() > kMaxSocketPathBytes) {
    return cat("expected a Unix socket path of at most ", kMaxSocketPathBytes, " bytes, got ",
               path.size(), " bytes: ", quote(path, kMaxPathShownBytes));
  }
  return "";
}

// The checks both the file and the flags go through. Each returns why the
// value is wrong, or an empty string.
std::string listenProblem(const std::string& path) { return pathProblem(path, {}); }

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

  // Every key in the table must be one of `known` (configKeyNames(): the
  // keys of config_keys.cc's table).
  absl::Status checkKnown(const std::vector<std::string_view>& known) const {
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

  absl::Status readBool(std::string_view key, bool& out) const {
    const toml::node* node = get(key);
    if (!node) return absl::OkStatus();
    if (!node->is_boolean())
      return error(key, cat("expected true or false, got ", describe(*node)));
    out = node->as_boolean()->get();
    return absl::OkStatus();
  }

  // A string key holding a path (pathProblem). The value in `out` (the
  // default when the key is absent) is checked either way.
  absl::Status readAbsolutePath(std::string_view key, std::string& out, PathRule rule = {}) const {
    if (auto s = readString(key, out); !s.ok()) return s;
    if (auto why = pathProblem(out, rule); !why.empty()) return error(key, why);
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

// [server] limits against a hostile client. Read after max_message_bytes,
// which the buffer budgets must hold at least once.
absl::Status readServerLimits(const TableReader& r, Config& c) {
  int64_t connections = c.max_connections;
  CRIHOOK_RETURN_IF_ERROR(r.readInt("max_connections", 1, 65536, connections));
  c.max_connections = static_cast<int>(connections);
  for (auto [key, value] : {std::pair{"preface_timeout", &c.preface_timeout},
                            std::pair{"idle_timeout", &c.idle_timeout},
                            std::pair{"request_timeout", &c.request_timeout}}) {
    CRIHOOK_RETURN_IF_ERROR(r.readDuration(key, *value));
    if (value->count() <= 0) return r.error(key, "expected a duration above 0");
  }
  constexpr int64_t kMaxBudget = int64_t{1} << 40;
  int64_t per_connection = static_cast<int64_t>(c.max_connection_buffered_bytes);
  CRIHOOK_RETURN_IF_ERROR(r.readInt("max_connection_buffered_bytes",
                                    static_cast<int64_t>(c.max_message_bytes), kMaxBudget,
                                    per_connection));
  c.max_connection_buffered_bytes = static_cast<uint64_t>(per_connection);
  int64_t total = static_cast<int64_t>(c.max_buffered_bytes);
  CRIHOOK_RETURN_IF_ERROR(r.readInt("max_buffered_bytes", per_connection, kMaxBudget, total));
  c.max_buffered_bytes = static_cast<uint64_t>(total);
  if (c.max_connection_buffered_bytes < c.max_message_bytes)
    return r.error("max_connection_buffered_bytes",
                   cat("expected at least max_message_bytes (", c.max_message_bytes, ")"));
  if (c.max_buffered_bytes < c.max_connection_buffered_bytes)
    return r.error("max_buffered_bytes", cat("expected at least max_connection_buffered_bytes (",
                                             c.max_connection_buffered_bytes, ")"));
  return absl::OkStatus();
}

absl::Status readServer(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "server.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("server")));
  CRIHOOK_RETURN_IF_ERROR(r.readString("mode", c.mode));
  if (c.mode != "proxy" && c.mode != "nri")
    return r.error("mode", cat("expected \"proxy\" or \"nri\", got ", quote(c.mode)));
  CRIHOOK_RETURN_IF_ERROR(r.readString("listen", c.listen_path));
  CRIHOOK_RETURN_IF_ERROR(r.readString("relay", c.relay));
  if (c.relay != "terminating" && c.relay != "transparent")
    return r.error("relay",
                   cat("expected \"terminating\" or \"transparent\", got ", quote(c.relay)));
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
  return readServerLimits(r, c);
}

absl::Status readNri(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "nri.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("nri")));
  NriConfig& n = c.nri;
  CRIHOOK_RETURN_IF_ERROR(r.readAbsolutePath("socket_path", n.socket_path, {.socket = true}));
  CRIHOOK_RETURN_IF_ERROR(r.readString("plugin_name", n.plugin_name));
  CRIHOOK_RETURN_IF_ERROR(r.readString("plugin_index", n.plugin_index));
  CRIHOOK_RETURN_IF_ERROR(r.readDuration("plugin_request_timeout", n.plugin_request_timeout));
  if (n.plugin_request_timeout < std::chrono::milliseconds(200) ||
      n.plugin_request_timeout > std::chrono::minutes(10))
    return r.error("plugin_request_timeout", "expected a duration from 200ms to 10m");
  return r.readBool("koordlet_plugin", n.koordlet_plugin);
}

absl::Status readBackend(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "backend.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("backend")));
  CRIHOOK_RETURN_IF_ERROR(r.readString("endpoint", c.backend_endpoint));
  if (auto p = unixSocketPath(c.backend_endpoint); !p.ok())
    return r.error("endpoint", sv(p.status().message()));
  return r.readDuration("connect_timeout", c.backend_connect_timeout);
}

absl::Status readLog(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "log.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("log")));
  CRIHOOK_RETURN_IF_ERROR(r.readString("level", c.log_level));
  if (auto why = logLevelProblem(c.log_level); !why.empty()) return r.error("level", why);
  return absl::OkStatus();
}

absl::Status readHooks(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "hooks.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("hooks")));
  CRIHOOK_RETURN_IF_ERROR(r.readAbsolutePath("state_dir", c.state_dir, {.or_empty = true}));
  CRIHOOK_RETURN_IF_ERROR(r.readAbsolutePath("module_dir", c.module_dir, {.or_empty = true}));
  CRIHOOK_RETURN_IF_ERROR(r.readAbsolutePath("module_host", c.module_host));
  CRIHOOK_RETURN_IF_ERROR(
      r.readAbsolutePath("hookserver_dir", c.hookserver_dir, {.or_empty = true}));
  CRIHOOK_RETURN_IF_ERROR(r.readDuration("hookserver_timeout", c.hookserver_timeout));
  c.hookserver_timeout_set = r.get("hookserver_timeout") != nullptr;
  int64_t workers = c.hook_workers;
  CRIHOOK_RETURN_IF_ERROR(r.readInt("workers", 1, kMaxHookStages, workers));
  c.hook_workers = static_cast<int>(workers);
  auto owners = r.subtable("owners");
  if (!owners.ok()) return owners.status();
  if (*owners == nullptr) return absl::OkStatus();
  TableReader o(**owners, "hooks.owners.", origin);
  for (const auto& [key, value] : **owners) {
    const std::string name(key.str());  // clang 14 cannot capture a structured binding
    const auto* spec = std::find_if(kOwnerClasses.begin(), kOwnerClasses.end(),
                                    [&](const OwnerClassSpec& x) { return x.key == name; });
    if (spec == kOwnerClasses.end()) {
      std::string known;
      for (const OwnerClassSpec& x : kOwnerClasses) known += cat(known.empty() ? "" : ", ", x.key);
      return o.error(key.str(), cat("unknown class of fields (known: ", known, ")"));
    }
    std::string side;
    CRIHOOK_RETURN_IF_ERROR(o.readString(key.str(), side));
    OwnerSide& into = c.owners[static_cast<size_t>(spec->cls)];
    if (side == "crihook") {
      into = OwnerSide::kCrihook;
    } else if (side == "koordinator") {
      into = OwnerSide::kKoordinator;
    } else if (side == "refuse") {
      into = OwnerSide::kRefuse;
    } else {
      return o.error(key.str(),
                     cat("expected \"crihook\", \"koordinator\" or \"refuse\", got ", quote(side)));
    }
  }
  return absl::OkStatus();
}

absl::Status readTopology(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "topology.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("topology")));
  return r.readAbsolutePath("root", c.topology_root);
}

absl::Status readMetrics(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "metrics.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("metrics")));
  CRIHOOK_RETURN_IF_ERROR(r.readString("listen", c.metrics_listen));
  CRIHOOK_RETURN_IF_ERROR(r.readBool("allow_remote", c.metrics_allow_remote));
  if (auto m = metricsListen(c, origin); !m.ok()) return m.status();
  return absl::OkStatus();
}

bool validHookName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
      return false;
  }
  return true;
}

absl::Status readStringList(const TableReader& r, std::string_view key,
                            std::vector<std::string>& out) {
  const toml::node* node = r.get(key);
  if (!node) return absl::OkStatus();
  const toml::array* list = node->as_array();
  if (list == nullptr)
    return r.error(key, cat("expected an array of strings, got ", describe(*node)));
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::node& item = *list->get(i);
    if (!item.is_string())
      return r.error(cat(key, "[", i, "]"), cat("expected a string, got ", describe(item)));
    out.push_back(item.as_string()->get());
  }
  return absl::OkStatus();
}

// [security.mounts]: lists of absolute host paths. At most kMaxMountRules
// each: a policy is a handful of directories, not a file system listing.
constexpr size_t kMaxMountRules = 256;

absl::Status readSecurity(const toml::table& t, std::string_view origin, Config& c) {
  TableReader r(t, "security.", origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("security")));
  for (auto [key, value] :
       {std::pair{"seccomp", &c.seccomp}, std::pair{"spawner_seccomp", &c.spawner_seccomp}}) {
    CRIHOOK_RETURN_IF_ERROR(r.readString(key, *value));
    if (*value != "errno" && *value != "kill" && *value != "log" && *value != "off")
      return r.error(key, cat("expected \"errno\", \"kill\", \"log\" or \"off\", got \"",
                              value->substr(0, 32), "\""));
  }
  for (auto [key, list] : {std::pair{"capabilities", &c.capabilities},
                           std::pair{"spawner_capabilities", &c.spawner_capabilities}}) {
    if (!r.get(key)) continue;
    list->clear();
    CRIHOOK_RETURN_IF_ERROR(readStringList(r, key, *list));
    // Names are resolved against the kernel's at start-up (confine/capabilities.h);
    // here only their shape, so a typo is caught with the file and key.
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string& name = (*list)[i];
      bool ok = !name.empty() && name.size() <= 32;
      for (char ch : name) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
      if (!ok ||
          (name == "all" && (key != std::string_view("spawner_capabilities") || list->size() != 1)))
        return r.error(
            cat(key, "[", i, "]"),
            cat("expected a capability name such as \"CAP_NET_ADMIN\"",
                key == std::string_view("spawner_capabilities") ? " or only \"all\"" : "",
                ", got \"", name.substr(0, 32), "\""));
    }
  }
  auto mounts = r.subtable("mounts");
  if (!mounts.ok()) return mounts.status();
  if (!*mounts) return absl::OkStatus();
  TableReader m(**mounts, "security.mounts.", origin);
  CRIHOOK_RETURN_IF_ERROR(m.checkKnown(configKeyNames("security.mounts")));
  for (auto [key, out] :
       {std::pair{"deny", &c.mounts.deny}, std::pair{"deny_rw", &c.mounts.deny_rw}}) {
    if (!m.get(key)) continue;
    std::vector<std::string> list;
    CRIHOOK_RETURN_IF_ERROR(readStringList(m, key, list));
    if (list.size() > kMaxMountRules)
      return m.error(key, cat("expected at most ", kMaxMountRules, " paths, got ", list.size()));
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto why = pathProblem(list[i], {}); !why.empty())
        return m.error(cat(key, "[", i, "]"), why);
    }
    *out = std::move(list);
  }
  return absl::OkStatus();
}

absl::Status readHook(const toml::table& t, size_t index, std::string_view origin,
                      std::vector<HookConfig>& hooks) {
  HookConfig h;
  {
    TableReader first(t, cat("hook[", index, "]."), origin);
    CRIHOOK_RETURN_IF_ERROR(first.readString("name", h.name));
    if (!validHookName(h.name)) {
      return first.error(
          "name", cat("expected 1-63 letters, digits, '-', '_' or '.', got \"", h.name, "\""));
    }
  }
  for (const HookConfig& other : hooks) {
    if (other.name == h.name)
      return absl::InvalidArgumentError(
          cat("config ", origin, ": hook[", h.name, "]: the name is used twice"));
  }
  h.origin = cat("config ", origin, ": hook[", h.name, "]");
  TableReader r(t, cat("hook[", h.name, "]."), origin);
  CRIHOOK_RETURN_IF_ERROR(r.checkKnown(configKeyNames("hook")));
  CRIHOOK_RETURN_IF_ERROR(r.readBool("enabled", h.enabled));
  CRIHOOK_RETURN_IF_ERROR(r.readString("builtin", h.builtin));
  CRIHOOK_RETURN_IF_ERROR(r.readString("module", h.module));
  CRIHOOK_RETURN_IF_ERROR(r.readString("endpoint", h.endpoint));
  const int kinds = !h.builtin.empty() + !h.module.empty() + !h.endpoint.empty();
  if (kinds != 1) {
    return r.error("builtin", "expected exactly one of builtin, module and endpoint");
  }
  if (!h.endpoint.empty()) {
    if (auto p = unixSocketPath(h.endpoint); !p.ok())
      return r.error("endpoint", sv(p.status().message()));
  }
  CRIHOOK_RETURN_IF_ERROR(readStringList(r, "stages", h.stages));
  if (!h.endpoint.empty() && h.stages.empty())
    return r.error("stages", "a hook server needs the stages it is called on");
  if (h.endpoint.empty() && !h.stages.empty())
    return r.error("stages",
                   "only a hook server (endpoint) takes stages; built-in hooks and "
                   "modules declare their own");
  CRIHOOK_RETURN_IF_ERROR(r.readDuration("timeout", h.timeout));
  h.timeout_set = r.get("timeout") != nullptr;
  if (h.timeout.count() <= 0 || h.timeout > std::chrono::minutes(5))
    return r.error("timeout", "expected a duration above 0 and at most 5m");
  std::string policy;
  CRIHOOK_RETURN_IF_ERROR(r.readString("failure_policy", policy));
  if (policy == "ignore" || policy == "Ignore") {
    h.ignore_failures = true;
  } else if (!policy.empty() && policy != "fail" && policy != "Fail") {
    return r.error("failure_policy", cat("expected \"fail\" or \"ignore\", got \"", policy, "\""));
  }
  CRIHOOK_RETURN_IF_ERROR(readStringList(r, "wins_over", h.wins_over));
  // Hook execution.
  int64_t workers = h.workers, queue = h.queue;
  CRIHOOK_RETURN_IF_ERROR(r.readInt("workers", 1, kMaxHookWorkers, workers));
  CRIHOOK_RETURN_IF_ERROR(r.readInt("queue", 0, kMaxHookQueue, queue));
  h.workers = static_cast<int>(workers);
  h.queue = static_cast<int>(queue);
  std::string isolation;
  CRIHOOK_RETURN_IF_ERROR(r.readString("isolation", isolation));
  if (isolation == "process") {
    if (h.module.empty()) return r.error("isolation", "only a module can run in a helper process");
    h.isolated = true;
  } else if (!isolation.empty() && isolation != "none") {
    return r.error("isolation", cat("expected \"none\" or \"process\", got \"", isolation, "\""));
  }
  auto settings = r.subtable("settings");
  if (!settings.ok()) return settings.status();
  if (*settings) {
    std::ostringstream json;
    json << toml::json_formatter{**settings};
    h.settings_json = json.str();
  }
  hooks.push_back(std::move(h));
  return absl::OkStatus();
}

absl::Status readHookList(const toml::node& node, std::string_view origin, Config& c) {
  const toml::array* list = node.as_array();
  if (list == nullptr || !list->is_array_of_tables()) {
    return absl::InvalidArgumentError(
        cat("config ", origin, ": hook: expected [[hook]] tables, got ", describe(node)));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    CRIHOOK_RETURN_IF_ERROR(readHook(*list->get(i)->as_table(), i, origin, c.hooks));
  }
  for (const HookConfig& h : c.hooks) {
    for (const std::string& loser : h.wins_over) {
      bool known = false;
      for (const HookConfig& other : c.hooks)
        known = known || (other.name == loser && &other != &h);
      if (!known) {
        return absl::InvalidArgumentError(
            cat(h.origin, ".wins_over: no other hook is named \"", loser, "\""));
      }
    }
  }
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

absl::StatusOr<MetricsListen> metricsListen(const Config& c, std::string_view origin) {
  const std::string& v = c.metrics_listen;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        cat("config ", origin, ": metrics.listen: ", why, ", got \"", v.substr(0, 128), "\""));
  };
  MetricsListen m;
  if (v.empty()) return m;
  // A path has a '/' or no ':' ("metrics.sock"); an address ends in :PORT.
  const size_t colon = v.rfind(':');
  const bool unix_scheme = v.starts_with("unix://");
  if (unix_scheme || v.find('/') != std::string::npos || colon == std::string::npos) {
    std::string path = unix_scheme ? v.substr(7) : v;
    if (path.empty()) return bad("expected a socket path");
    if (path[0] != '/') {
      const size_t slash = c.listen_path.rfind('/');
      path = cat(slash == std::string::npos ? std::string(".") : c.listen_path.substr(0, slash),
                 "/", path);
    }
    if (path.size() >= 108) return bad("longer than a Unix socket path may be");
    m.kind = MetricsListen::Kind::kUnix;
    m.path = std::move(path);
    return m;
  }
  std::string host = v.substr(0, colon);
  const std::string port = v.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p > 65535)
    return bad("expected HOST:PORT with a port in 0..65535");
  in6_addr a6{};
  in_addr a4{};
  bool loopback;
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    loopback = (ntohl(a4.s_addr) >> 24) == 127;
  } else if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
    loopback = IN6_IS_ADDR_LOOPBACK(&a6);
  } else {
    return bad("expected an IP address as HOST (127.0.0.1, [::1]), not a name");
  }
  if (!loopback && !c.metrics_allow_remote)
    return bad(
        "not a loopback address; the endpoint has no authentication, set "
        "metrics.allow_remote = true to serve it beyond this node");
  m.kind = MetricsListen::Kind::kTcp;
  m.host = std::move(host);
  m.port = static_cast<uint16_t>(p);
  return m;
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
  CRIHOOK_RETURN_IF_ERROR(top.checkKnown(configTableNames()));
  struct Section {
    std::string_view name;
    absl::Status (*read)(const toml::table&, std::string_view, Config&);
  };
  for (const Section& s :
       {Section{"server", readServer}, Section{"nri", readNri}, Section{"backend", readBackend},
        Section{"log", readLog}, Section{"hooks", readHooks}, Section{"topology", readTopology},
        Section{"metrics", readMetrics}, Section{"security", readSecurity}}) {
    auto table = top.subtable(s.name);
    if (!table.ok()) return table.status();
    if (*table) CRIHOOK_RETURN_IF_ERROR(s.read(**table, origin, config));
  }
  if (const toml::node* hooks = top.get("hook")) {
    CRIHOOK_RETURN_IF_ERROR(readHookList(*hooks, origin, config));
  }
  if (config.mode == "nri") {
    // The front's defaults: what NRI's plugin timeout leaves room for.
    for (HookConfig& h : config.hooks) {
      if (!h.timeout_set) h.timeout = kNriHookTimeout;
    }
    if (!config.hookserver_timeout_set) config.hookserver_timeout = kNriHookServerTimeout;
  }
  return config;
}

absl::StatusOr<Config> loadConfigFile(const std::string& path) {
  // A link is followed (a config may be managed elsewhere, a ConfigMap
  // mount); a FIFO or a device is refused rather than waited on.
  auto text = readRegularFile(path, kMaxConfigBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        cat("config ", path, ": cannot be read: ", sv(text.status().message())));
  }
  return parseConfig(*text, path);
}

}  // namespace crihook
