#pragma once

// crihookd's configuration: embedded defaults, overridden by an optional TOML
// file, overridden by command-line flags. The README lists every key.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook {

// Where `meson install` puts hook modules (set by the build).
extern const char* const kDefaultModuleDir;

// One [[hook]] entry: a built-in hook, a hook module or a crihook-protocol
// hook server, in the chain in the order of the file.
struct HookConfig {
  std::string name;
  bool enabled = true;  // false: configured but left out of the chain
  // Exactly one of these three says what the hook is.
  std::string builtin;              // a built-in hook's type ("static", "noop", ...)
  std::string module;               // a module file: absolute, or relative to hooks.module_dir
  std::string endpoint;             // a crihook.hook.v1 HookService on a Unix socket
  std::vector<std::string> stages;  // endpoint only: the stages it is called on
  std::chrono::milliseconds timeout{2000};
  bool ignore_failures = false;  // failure_policy = "ignore"
  std::vector<std::string> wins_over;
  std::string settings_json = "{}";  // [hook.settings] as JSON, for the hook to read
  std::string origin;                // "config FILE: hook[NAME]", for messages
};

// [security.mounts]: the host paths hooks may not mount (hooks/mount_policy.h
// holds the defaults and the rules). Unset: the defaults; set: replaces them.
struct MountPolicyConfig {
  std::optional<std::vector<std::string>> deny;     // in any mode
  std::optional<std::vector<std::string>> deny_rw;  // read-write
};

struct Config {
  // [server]
  std::string listen_path = "/run/crihook/crihook.sock";
  uint32_t socket_mode = 0660;
  std::string socket_group;  // empty: the daemon's own group
  int workers = 2;           // event-loop threads
  std::chrono::milliseconds shutdown_grace{10000};
  // gRPC's message limit, applied to every message in both directions.
  // kubelet's own limit is 16 MiB; never configure less.
  uint64_t max_message_bytes = 16u << 20;

  // [backend]
  std::string backend_endpoint = "unix:///run/containerd/containerd.sock";
  std::chrono::milliseconds backend_connect_timeout{2000};

  // [log]
  std::string log_level = "info";

  // [hooks]
  std::string state_dir = "/var/lib/crihook";  // empty: records kept in memory only
  std::string module_dir = kDefaultModuleDir;  // <prefix>/lib/crihook/modules
  // Koordinator's hook server registrations; empty: none are read.
  std::string hookserver_dir = "/etc/runtime/hookserver.d";
  // Per call to a Koordinator hook server. koord-runtime-proxy has no timeout
  // of its own (only kubelet's 2 min runtime-request-timeout); 10 s is ~30x
  // the slowest answer measured on a saturated 2-core node
  // (bench/koord_hook_latency: max 307 ms, p99 200 ms), so a busy koordlet's
  // answer is not dropped, while a hung one holds a call 10 s, not 2 min.
  std::chrono::milliseconds hookserver_timeout{10000};
  int hook_workers = 4;

  // [[hook]]
  std::vector<HookConfig> hooks;

  // [topology]
  std::string topology_root = "/";  // where sys/, proc/ and dev/ are read (a fixture tree in tests)

  // [security.mounts]
  MountPolicyConfig mounts;
};

// Parses TOML text. `origin` names the file in messages. Errors are
// INVALID_ARGUMENT and name the origin, the key and the reason, e.g.
// "config /etc/crihook/config.toml: server.workers: expected an integer in 1..64, got 0".
// Unknown tables and keys are errors: a typo must not silently fall back to a default.
absl::StatusOr<Config> parseConfig(std::string_view text, std::string_view origin);

// Reads and parses a file. A missing or unreadable file is INVALID_ARGUMENT too:
// an operator who names a config file means it.
absl::StatusOr<Config> loadConfigFile(const std::string& path);

// Checks values that flags may also set (endpoint syntax, log level).
absl::Status validateConfig(const Config& config, std::string_view origin);

// "unix:///run/x.sock" or "/run/x.sock" -> "/run/x.sock". Anything else is
// INVALID_ARGUMENT: CRI endpoints on Linux are Unix sockets.
absl::StatusOr<std::string> unixSocketPath(std::string_view endpoint);

// "1500ms", "2s", "1m" -> milliseconds.
absl::StatusOr<std::chrono::milliseconds> parseDuration(std::string_view text);

}  // namespace crihook
