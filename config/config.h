#pragma once

// crihookd's configuration: embedded defaults, overridden by an optional TOML
// file, overridden by command-line flags. config_keys.h's table lists every
// key (docs/configuration.md is printed from it).

#include <array>
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
extern const char* const kDefaultModuleHost;  // <prefix>/<libexecdir>/crihook/crihook-module-host

// One [[hook]] entry: a built-in hook, a hook module or a crihook-protocol
// hook server, in the chain in the order of the file.
// [[hook]] workers / queue (hooks/executor.h): the pool a hook that may
// block runs on. Two workers: one slow call does not hold up the next, and
// a hook that hangs costs at most two threads. Sixteen waiting calls: kubelet
// starts a pod's containers one by one, so a queue that long is a burst of
// pods starting at once; a longer one only makes calls wait out their
// deadline behind a hung hook. The maxima bound a typo.
inline constexpr int kDefaultHookWorkers = 2;
inline constexpr int kMaxHookWorkers = 64;
inline constexpr int kDefaultHookQueue = 16;
inline constexpr int kMaxHookQueue = 1024;

// [hooks] workers: the most lifecycle calls whose hooks may block that are
// hooked at once, a "hook-stage" thread each, started when needed
// (hooks/hook_interceptor.h). A stage holds its thread while a hook server
// takes its time, so this is how many pods and containers a hung server can
// hold before others wait for a thread: above the 16 to 32 pods a node
// starts in a burst, with room; an idle thread ends after 30 s.
inline constexpr int kDefaultHookStages = 64;
inline constexpr int kMaxHookStages = 256;

struct HookConfig {
  std::string name;
  bool enabled = true;  // false: configured but left out of the chain
  // Exactly one of these three says what the hook is.
  std::string builtin;              // a built-in hook's type ("static", "noop", ...)
  std::string module;               // a module file: absolute, or relative to hooks.module_dir
  std::string endpoint;             // a crihook.hook.v1 HookService on a Unix socket
  std::vector<std::string> stages;  // endpoint only: the stages it is called on
  std::chrono::milliseconds timeout{2000};
  bool timeout_set = false;      // given in the file; else the front's default (kNriHookTimeout)
  bool ignore_failures = false;  // failure_policy = "ignore"
  std::vector<std::string> wins_over;
  std::string settings_json = "{}";  // [hook.settings] as JSON, for the hook to read
  std::string origin;                // "config FILE: hook[NAME]", for messages
  // Hook execution (docs/hooks.md "Hook execution"): the worker threads of a hook
  // that may block and how many calls may wait for one; and, for a module,
  // isolation = "process" to run it in a helper process of its own.
  int workers = kDefaultHookWorkers;
  int queue = kDefaultHookQueue;
  bool isolated = false;

  bool operator==(const HookConfig&) const = default;
};

// [security.mounts]: the host paths hooks may not mount (hooks/mount_policy.h
// holds the defaults and the rules). Unset: the defaults; set: replaces them.
struct MountPolicyConfig {
  std::optional<std::vector<std::string>> deny;     // in any mode
  std::optional<std::vector<std::string>> deny_rw;  // read-write

  bool operator==(const MountPolicyConfig&) const = default;
};

// [hooks.owners]: who decides a field that a crihook hook ([[hook]]) and a
// Koordinator hook server (koordlet) set to values that differ — not merely
// spelt differently (hooks/ownership.h). Each class of fields has a key
// there; its value is "crihook", "koordinator" or "refuse" (a conflict, as
// between two crihook hooks). This table is the one source of the classes,
// their defaults and their words in docs/koordinator.md and the man page.
enum class OwnerSide : uint8_t { kCrihook, kKoordinator, kRefuse };
enum class OwnerClass : uint8_t { kDeviceEnv, kCpuset, kResources, kOther };
struct OwnerClassSpec {
  OwnerClass cls;
  std::string_view key;    // under [hooks.owners]
  std::string_view holds;  // for people
  OwnerSide side;          // the default
  std::string_view why;    // of the default
};
inline constexpr std::array<OwnerClassSpec, 4> kOwnerClasses = {{
    {OwnerClass::kDeviceEnv, "device_env",
     "device nodes, mounts, CDI devices; env NVIDIA_VISIBLE_DEVICES, "
     "CUDA_DEVICE_MEMORY_LIMIT(_N), CUDA_DEVICE_SM_LIMIT, LD_PRELOAD, NCCL_IB_HCA",
     OwnerSide::kCrihook, "crihook sees the node's devices and sets their nodes and mounts"},
    {OwnerClass::kCpuset, "cpuset", "cpuset_cpus, cpuset_mems", OwnerSide::kKoordinator,
     "koordlet sees the API: the share pools, the system-QoS and BE cpusets"},
    {OwnerClass::kResources, "resources",
     "cpu_shares, cpu_quota, cpu_period, memory and swap limits, oom_score_adj, hugepages, "
     "unified",
     OwnerSide::kKoordinator, "koordlet's batch and QoS resources come from the API"},
    {OwnerClass::kOther, "other", "every other env, annotations, labels, the cgroup parent",
     OwnerSide::kRefuse, "no Koordinator hook sets them: a difference is a real conflict"},
}};
std::string_view ownerSideName(OwnerSide side);
using FieldOwners = std::array<OwnerSide, kOwnerClasses.size()>;
inline constexpr FieldOwners kDefaultFieldOwners = {kOwnerClasses[0].side, kOwnerClasses[1].side,
                                                    kOwnerClasses[2].side, kOwnerClasses[3].side};

// NRI mode's defaults (docs/nri.md). containerd drops a plugin that
// answers an event later than its plugin_request_timeout (2 s by default) and
// creates the pod without it: a hook or a Koordinator hook server whose
// timeout is not given gets 1 s there, not proxy mode's 2 s and 10 s, so one
// of each fits under containerd's default; more, or longer ones, need the
// runtime's timeout raised (checked at start-up, nri/budget.h).
inline constexpr std::chrono::milliseconds kNriHookTimeout{1000};
inline constexpr std::chrono::milliseconds kNriHookServerTimeout{1000};

// koordlet's own NRI plugin's index (koordlet_nri, "00"): crihookd in NRI
// mode orders itself after it while it runs.
inline constexpr std::string_view kKoordletPluginIndex = "00";

// [nri]: crihookd as an NRI plugin ([server] mode = "nri").
struct NriConfig {
  std::string socket_path = "/var/run/nri/nri.sock";  // the runtime's NRI socket
  std::string plugin_name = "crihook";
  // Two digits: NRI calls plugins in index order (then name). koordlet's
  // own plugin is "00"; crihook's default comes after it.
  std::string plugin_index = "10";
  // What the runtime's plugin_request_timeout is set to (containerd:
  // [plugins."io.containerd.nri.v1.nri"] plugin_request_timeout, default
  // 2s): every hook stage of one NRI event must fit under it.
  std::chrono::milliseconds plugin_request_timeout{2000};
  // koordlet runs its own NRI plugin (koordlet_nri, index 00; koordlet's
  // default): Koordinator's hook servers are not called, koordlet already
  // acts through NRI. false: crihook calls them, as in proxy mode.
  bool koordlet_plugin = true;

  bool operator==(const NriConfig&) const = default;
};

// [server]'s defaults and [backend] connect_timeout's, defined once: Config's
// members below start from them (their comments say why each is what it
// is), and so does what the relay's connections share (RelayContext,
// proxy/relay.h), so that a relay made without a Config (a test, a fuzz
// harness) runs with the product's.
inline constexpr int kDefaultWorkers = 2;
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{10000};
inline constexpr uint64_t kDefaultMaxMessageBytes = 16u << 20;
inline constexpr int kDefaultMaxConnections = 1024;
inline constexpr std::chrono::milliseconds kDefaultPrefaceTimeout{10000};
inline constexpr std::chrono::milliseconds kDefaultIdleTimeout{300000};
inline constexpr std::chrono::milliseconds kDefaultRequestTimeout{30000};
inline constexpr uint64_t kDefaultMaxConnectionBufferedBytes = 64u << 20;
inline constexpr uint64_t kDefaultMaxBufferedBytes = 256u << 20;
inline constexpr std::chrono::milliseconds kDefaultBackendConnectTimeout{2000};

struct Config {
  // [server]
  // "proxy": crihookd is kubelet's runtime endpoint and forwards every CRI
  // call; "nri": crihookd is an NRI plugin of the runtime ([nri]) and kubelet
  // talks to the runtime directly.
  std::string mode = "proxy";
  std::string listen_path = "/run/crihook/crihook.sock";
  uint32_t socket_mode = 0660;
  std::string socket_group;       // empty: the daemon's own group
  int workers = kDefaultWorkers;  // event-loop threads
  // How connections are relayed: "transparent" (frames passed through;
  // docs/transparent-relay.md), the one relay. "terminating" (HTTP/2 ended
  // on both sides), a relay of its own before, is still accepted so that an
  // existing configuration starts: crihookd logs a warning naming the key,
  // and the transparent relay serves.
  std::string relay = "transparent";
  std::chrono::milliseconds shutdown_grace = kDefaultShutdownGrace;
  // gRPC's message limit, applied to every message in both directions.
  // kubelet's own limit is 16 MiB; never configure less.
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  // [server] limits against a hostile client (docs/operations.md "Limits and timeouts").
  // Connections served at once; one more is accepted and closed at once.
  // kubelet holds one or two, crictl one per command.
  int max_connections = kDefaultMaxConnections;
  // From accept to the client's preface and first SETTINGS; then closed.
  std::chrono::milliseconds preface_timeout = kDefaultPrefaceTimeout;
  // A connection with no open stream for this long gets GOAWAY and is
  // closed (grpc-go's MaxConnectionIdle). kubelet's GetContainerEvents stream
  // is an open stream: its connection is never idle.
  std::chrono::milliseconds idle_timeout = kDefaultIdleTimeout;
  // From a request stream's start until its header block and, for an
  // intercepted call, its whole message have arrived; then answered
  // DEADLINE_EXCEEDED and reset. kubelet sends a request in one go.
  std::chrono::milliseconds request_timeout = kDefaultRequestTimeout;
  // Bytes of intercepted calls' request and reply messages held while they
  // are buffered whole, per connection and for the whole process; a call
  // that would pass either is answered RESOURCE_EXHAUSTED naming the limit.
  // Each at least max_message_bytes (one largest call always fits), and the
  // process's at least the connection's.
  uint64_t max_connection_buffered_bytes = kDefaultMaxConnectionBufferedBytes;
  uint64_t max_buffered_bytes = kDefaultMaxBufferedBytes;

  // [nri]
  NriConfig nri;

  // [backend]
  std::string backend_endpoint = "unix:///run/containerd/containerd.sock";
  std::chrono::milliseconds backend_connect_timeout = kDefaultBackendConnectTimeout;

  // [log]
  std::string log_level = "info";

  // [hooks]
  std::string state_dir = "/var/lib/crihook";  // empty: records kept in memory only
  std::string module_dir = kDefaultModuleDir;  // <prefix>/lib/crihook/modules
  // The helper of modules run with isolation = "process" (hooks/module/module_host.h).
  std::string module_host = kDefaultModuleHost;
  // Koordinator's hook server registrations; empty: none are read.
  std::string hookserver_dir = "/etc/runtime/hookserver.d";
  // Per call to a Koordinator hook server. koord-runtime-proxy has no timeout
  // of its own (only kubelet's 2 min runtime-request-timeout); 10 s is ~30x
  // the slowest answer measured on a saturated 2-core node
  // (bench/koord_hook_latency: max 307 ms, p99 200 ms), so a busy koordlet's
  // answer is not dropped, while a hung one holds a call 10 s, not 2 min.
  std::chrono::milliseconds hookserver_timeout{10000};
  bool hookserver_timeout_set = false;  // given in the file; else the front's default
  int hook_workers = kDefaultHookStages;
  // [hooks.owners], by OwnerClass.
  FieldOwners owners = kDefaultFieldOwners;

  // [[hook]]
  std::vector<HookConfig> hooks;

  // [topology]
  std::string topology_root = "/";  // where sys/, proc/ and dev/ are read (a fixture tree in tests)

  // [metrics]
  // The Prometheus / health endpoint: a Unix socket path (absolute, or
  // relative to the directory of server.listen: the default is
  // /run/crihook/metrics.sock beside the CRI socket), "HOST:PORT" for TCP
  // (HOST an IP address, IPv6 in brackets), or "" for none.
  std::string metrics_listen = "metrics.sock";
  // TCP on an address other than loopback: the endpoint has no
  // authentication, so exposing it beyond the node is opt-in.
  bool metrics_allow_remote = false;
  // [security] (docs/security.md "Confinement")
  // crihookd's seccomp filter, installed once started: "errno" (calls off
  // the allow-list fail with EPERM), "kill", "log" (allowed and logged by
  // the kernel: how an operator finds a missing call) or "off".
  std::string seccomp = "errno";
  // The spawner's own filter (inherited by every action command): same
  // values; "off" by default, actions are arbitrary programs.
  std::string spawner_seccomp = "off";
  // Capabilities crihookd keeps once the spawner is forked ("CAP_NET_ADMIN"
  // or "net_admin"); none by default. CAP_CHOWN is added while
  // server.socket_group is set (the socket's chown at start-up).
  std::vector<std::string> capabilities;
  // Capabilities the spawner keeps for the commands it runs; ["all"]: every
  // one crihookd started with.
  std::vector<std::string> spawner_capabilities = {"all"};
  // [security.mounts]
  MountPolicyConfig mounts;

  // Every member equal (config_keys_test: a key set to its default changes nothing).
  bool operator==(const Config&) const = default;
};

// Where the metrics endpoint listens, as [metrics] listen says.
struct MetricsListen {
  enum class Kind { kNone, kUnix, kTcp } kind = Kind::kNone;
  std::string path;  // kUnix: absolute
  std::string host;  // kTcp: an IP address, without brackets
  uint16_t port = 0;
};

// Resolves [metrics] listen against server.listen. INVALID_ARGUMENT naming
// `origin` and the key for a malformed value, and for a TCP address that is
// not loopback unless allow_remote.
absl::StatusOr<MetricsListen> metricsListen(const Config& config, std::string_view origin);

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
