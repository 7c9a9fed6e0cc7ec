#include "config/config_keys.h"

#include <cstdio>

#include "base/text.h"

namespace crihook {
namespace {

std::string toml(const std::string& s) { return tomlString(s); }
std::string toml(int64_t n) { return cat(n); }
std::string toml(bool b) { return b ? "true" : "false"; }
std::string toml(std::chrono::milliseconds d) { return tomlString(tomlDuration(d)); }
std::string toml(const std::vector<std::string>& list) { return tomlStringList(list); }
std::string toml(OwnerSide side) { return tomlString(ownerSideName(side)); }

// [[hook]] rows show the first hook's values; Config{} has none, so the
// defaults are HookConfig{}'s.
const HookConfig& firstHook(const Config& c) {
  static const HookConfig kNone;
  return c.hooks.empty() ? kNone : c.hooks.front();
}

constexpr int64_t kMinute = 60 * 1000;

using K = KeyType;

// The table: data, each row's lambda only reads its field.
constexpr ConfigKey kKeys[] = {
    // [server]
    {.section = "server",
     .name = "mode",
     .values = "proxy|nri",
     .meaning = "`proxy`: kubelet talks to crihookd, which forwards every CRI call to the "
                "runtime; `nri`: crihookd is an NRI plugin of the runtime (see [nri])",
     .value = [](const Config& c) { return toml(c.mode); }},
    {.section = "server",
     .name = "listen",
     .type = K::kPath,
     .meaning = "the socket kubelet connects to (flag --listen); keep it equal to "
                "crihookd.socket's ListenStream=",
     .value = [](const Config& c) { return toml(c.listen_path); }},
    {.section = "server",
     .name = "socket_mode",
     .limits = "an octal mode up to \"0777\"",
     .meaning = "the socket's permission bits (under socket activation the unit's apply)",
     .value =
         [](const Config& c) {
           char mode[16];
           std::snprintf(mode, sizeof mode, "%04o", c.socket_mode);
           return toml(std::string(mode));
         }},
    {.section = "server",
     .name = "socket_group",
     .meaning = "the group owning the socket; empty: crihookd's own",
     .value = [](const Config& c) { return toml(c.socket_group); }},
    {.section = "server",
     .name = "workers",
     .type = K::kInteger,
     .lo = 1,
     .hi = 64,
     .meaning = "event-loop threads",
     .value = [](const Config& c) { return toml(int64_t{c.workers}); }},
    {.section = "server",
     .name = "relay",
     .values = "transparent|terminating",
     .meaning = "how connections are relayed: `transparent` (HTTP/2 frames pass through) is the "
                "one relay; `terminating`, earlier releases' second relay, is accepted with a "
                "warning and serves the same",
     .value = [](const Config& c) { return toml(c.relay); }},
    {.section = "server",
     .name = "shutdown_grace",
     .type = K::kDuration,
     .meaning = "how long in-flight calls get on SIGTERM before they are cut off",
     .value = [](const Config& c) { return toml(c.shutdown_grace); }},
    {.section = "server",
     .name = "max_message_bytes",
     .type = K::kInteger,
     .lo = 16 << 20,
     .hi = int64_t{1} << 31,
     .meaning = "gRPC's message limit, both directions; kubelet's own is 16 MiB",
     .value = [](const Config& c) { return toml(static_cast<int64_t>(c.max_message_bytes)); }},
    {.section = "server",
     .name = "max_connections",
     .type = K::kInteger,
     .lo = 1,
     .hi = 65536,
     .meaning = "client connections served at once; one more is accepted and closed at once",
     .value = [](const Config& c) { return toml(int64_t{c.max_connections}); }},
    {.section = "server",
     .name = "preface_timeout",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "from accept to the client's HTTP/2 preface and first SETTINGS; then closed",
     .value = [](const Config& c) { return toml(c.preface_timeout); }},
    {.section = "server",
     .name = "idle_timeout",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "a connection with no open stream this long gets GOAWAY and is closed",
     .value = [](const Config& c) { return toml(c.idle_timeout); }},
    {.section = "server",
     .name = "request_timeout",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "from a request stream's start until an intercepted call's request has arrived "
                "whole; then DEADLINE_EXCEEDED",
     .value = [](const Config& c) { return toml(c.request_timeout); }},
    {.section = "server",
     .name = "max_connection_buffered_bytes",
     .type = K::kInteger,
     .limits = "max_message_bytes to 2^40",
     .meaning = "bytes of intercepted calls' messages held per connection; a call past it is "
                "answered RESOURCE_EXHAUSTED",
     .value =
         [](const Config& c) {
           return toml(static_cast<int64_t>(c.max_connection_buffered_bytes));
         }},
    {.section = "server",
     .name = "max_buffered_bytes",
     .type = K::kInteger,
     .limits = "max_connection_buffered_bytes to 2^40",
     .meaning = "the same, for the whole process",
     .value = [](const Config& c) { return toml(static_cast<int64_t>(c.max_buffered_bytes)); }},

    // [nri]
    {.section = "nri",
     .name = "socket_path",
     .type = K::kPath,
     .limits = "at most 107 bytes (a Unix socket's path)",
     .meaning = "the runtime's NRI socket",
     .value = [](const Config& c) { return toml(c.nri.socket_path); }},
    {.section = "nri",
     .name = "plugin_name",
     .limits = "1 to 64 of A-Z a-z 0-9 _ . - (checked at start)",
     .meaning = "the plugin's name as the runtime lists it",
     .value = [](const Config& c) { return toml(c.nri.plugin_name); }},
    {.section = "nri",
     .name = "plugin_index",
     .limits = "two digits (checked at start)",
     .meaning = "NRI calls plugins in index order; koordlet's own plugin is \"00\"",
     .value = [](const Config& c) { return toml(c.nri.plugin_index); }},
    {.section = "nri",
     .name = "plugin_request_timeout",
     .type = K::kDuration,
     .lo = 200,
     .hi = 10 * kMinute,
     .meaning = "what the runtime's own plugin_request_timeout is: every hook stage of one NRI "
                "event must fit under it (a runtime that sends its own figure is checked "
                "against that one)",
     .value = [](const Config& c) { return toml(c.nri.plugin_request_timeout); }},
    {.section = "nri",
     .name = "koordlet_plugin",
     .type = K::kBool,
     .meaning = "koordlet runs its own NRI plugin: Koordinator's hook servers are not called; "
                "false: crihookd calls them, as in proxy mode",
     .value = [](const Config& c) { return toml(c.nri.koordlet_plugin); }},

    // [backend]
    {.section = "backend",
     .name = "endpoint",
     .limits = "unix:///PATH or /PATH",
     .meaning = "the real runtime (flag --backend); cri-dockerd: `unix:///run/cri-dockerd.sock`",
     .value = [](const Config& c) { return toml(c.backend_endpoint); }},
    {.section = "backend",
     .name = "connect_timeout",
     .type = K::kDuration,
     .meaning = "connecting to the runtime; then the call fails with UNAVAILABLE",
     .value = [](const Config& c) { return toml(c.backend_connect_timeout); }},

    // [log]
    {.section = "log",
     .name = "level",
     .values = "trace|debug|info|warn|error|critical|off",
     .meaning = "the least severe messages logged (flag --log-level)",
     .value = [](const Config& c) { return toml(c.log_level); }},

    // [hooks]
    {.section = "hooks",
     .name = "state_dir",
     .type = K::kPath,
     .limits = "or \"\"",
     .meaning = "where pod, container and device records are kept; \"\": in memory only "
                "(flag --state-dir)",
     .value = [](const Config& c) { return toml(c.state_dir); }},
    {.section = "hooks",
     .name = "module_dir",
     .type = K::kPath,
     .limits = "or \"\"",
     .meaning = "where a module named without a path is looked up (the package's: "
                "/usr/lib/crihook/modules)",
     .default_text = "\"<prefix>/lib/crihook/modules\""},
    {.section = "hooks",
     .name = "module_host",
     .type = K::kPath,
     .meaning = "the helper that runs modules with isolation = \"process\" (the package's: "
                "/usr/libexec/crihook/crihook-module-host)",
     .default_text = "\"<prefix>/<libexecdir>/crihook/crihook-module-host\""},
    {.section = "hooks",
     .name = "hookserver_dir",
     .type = K::kPath,
     .limits = "or \"\"",
     .meaning = "Koordinator's hook server registrations, as koordlet writes them; \"\": none "
                "read; files added, changed or removed there take effect without a restart",
     .value = [](const Config& c) { return toml(c.hookserver_dir); }},
    {.section = "hooks",
     .name = "hookserver_timeout",
     .type = K::kDuration,
     .meaning = "per call to a Koordinator hook server; NRI mode's default is \"1s\"",
     .value = [](const Config& c) { return toml(c.hookserver_timeout); }},
    {.section = "hooks",
     .name = "workers",
     .type = K::kInteger,
     .lo = 1,
     .hi = kMaxHookStages,
     .meaning = "calls whose hooks may block hooked at once, a thread each, started when needed",
     .value = [](const Config& c) { return toml(int64_t{c.hook_workers}); }},
    {.section = "hooks",
     .name = "owners",
     .type = K::kTable,
     .meaning = "who decides a field a crihook hook and a Koordinator hook server set "
                "differently (below)"},

    // [hooks.owners]: the classes of kOwnerClasses (config.h), in its order.
    {.section = "hooks.owners",
     .name = kOwnerClasses[0].key,
     .values = "crihook|koordinator|refuse",
     .meaning = kOwnerClasses[0].holds,
     .value = [](const Config& c) { return toml(c.owners[0]); }},
    {.section = "hooks.owners",
     .name = kOwnerClasses[1].key,
     .values = "crihook|koordinator|refuse",
     .meaning = kOwnerClasses[1].holds,
     .value = [](const Config& c) { return toml(c.owners[1]); }},
    {.section = "hooks.owners",
     .name = kOwnerClasses[2].key,
     .values = "crihook|koordinator|refuse",
     .meaning = kOwnerClasses[2].holds,
     .value = [](const Config& c) { return toml(c.owners[2]); }},
    {.section = "hooks.owners",
     .name = kOwnerClasses[3].key,
     .values = "crihook|koordinator|refuse",
     .meaning = kOwnerClasses[3].holds,
     .value = [](const Config& c) { return toml(c.owners[3]); }},

    // [[hook]]
    {.section = "hook",
     .name = "name",
     .limits = "1 to 63 of A-Z a-z 0-9 - _ ., unique",
     .meaning = "the hook's name in logs, conflicts and `crihookctl explain` (required)"},
    {.section = "hook",
     .name = "enabled",
     .type = K::kBool,
     .meaning = "false: kept in the file, left out of the chain",
     .value = [](const Config& c) { return toml(firstHook(c).enabled); }},
    {.section = "hook",
     .name = "builtin",
     .values = "cdi|cpuset|device-lifecycle|gpu|noop|rdma|static|topology-check",
     .meaning = "a built-in hook; exactly one of builtin, module and endpoint is given"},
    {.section = "hook",
     .name = "module",
     .meaning = "a shared object speaking the C ABI of crihook_module.h: absolute, or relative "
                "to [hooks] module_dir"},
    {.section = "hook",
     .name = "endpoint",
     .limits = "unix:///PATH or /PATH",
     .meaning = "a server speaking crihook's hook protocol (crihook.hook.v1) on a Unix socket"},
    {.section = "hook",
     .name = "stages",
     .type = K::kStringList,
     .limits = "stage names such as \"PreCreateContainer\"; endpoint only, and required there",
     .meaning = "the stages a hook server is called on"},
    {.section = "hook",
     .name = "timeout",
     .type = K::kDuration,
     .lo = 1,
     .hi = 5 * kMinute,
     .meaning = "per call; NRI mode's default is \"1s\"",
     .value = [](const Config& c) { return toml(firstHook(c).timeout); }},
    {.section = "hook",
     .name = "failure_policy",
     .values = "fail|ignore",
     .meaning = "`fail` refuses the CRI call naming the hook; `ignore` logs, counts and goes on "
                "without it",
     .value =
         [](const Config& c) {
           return toml(std::string(firstHook(c).ignore_failures ? "ignore" : "fail"));
         }},
    {.section = "hook",
     .name = "wins_over",
     .type = K::kStringList,
     .limits = "names of other [[hook]] entries",
     .meaning = "hooks whose conflicting values this one overrides",
     .value = [](const Config& c) { return toml(firstHook(c).wins_over); }},
    {.section = "hook",
     .name = "settings",
     .type = K::kTable,
     .meaning = "the hook's own settings: a built-in's below, a module's or server's its own"},
    {.section = "hook",
     .name = "workers",
     .type = K::kInteger,
     .lo = 1,
     .hi = kMaxHookWorkers,
     .meaning = "a module's threads; a hook server's calls in flight at once",
     .value = [](const Config& c) { return toml(int64_t{firstHook(c).workers}); }},
    {.section = "hook",
     .name = "queue",
     .type = K::kInteger,
     .lo = 0,
     .hi = kMaxHookQueue,
     .meaning = "calls that may wait for one of the workers (each no longer than its timeout)",
     .value = [](const Config& c) { return toml(int64_t{firstHook(c).queue}); }},
    {.section = "hook",
     .name = "isolation",
     .values = "none|process",
     .meaning = "a module only: `process` runs it in a helper process of its own",
     .value =
         [](const Config& c) {
           return toml(std::string(firstHook(c).isolated ? "process" : "none"));
         }},

    // [topology]
    {.section = "topology",
     .name = "root",
     .type = K::kPath,
     .meaning = "where sys/, proc/ and dev/ are read (a fixture tree in tests)",
     .value = [](const Config& c) { return toml(c.topology_root); }},

    // [metrics]
    {.section = "metrics",
     .name = "listen",
     .limits = "a socket path, \"HOST:PORT\" (HOST an IP address) or \"\"",
     .meaning = "Prometheus metrics and the /healthz and /readyz probes: a socket path "
                "(relative: beside server.listen), TCP, or \"\" for none",
     .value = [](const Config& c) { return toml(c.metrics_listen); }},
    {.section = "metrics",
     .name = "allow_remote",
     .type = K::kBool,
     .meaning = "TCP on an address other than loopback is refused unless true: the endpoint "
                "has no authentication",
     .value = [](const Config& c) { return toml(c.metrics_allow_remote); }},

    // [security]
    {.section = "security",
     .name = "seccomp",
     .values = "errno|kill|log|off",
     .meaning = "crihookd's seccomp filter: a call off its list fails with EPERM (`errno`), "
                "kills crihookd (`kill`) or is logged by the kernel (`log`); `off`: none",
     .value = [](const Config& c) { return toml(c.seccomp); }},
    {.section = "security",
     .name = "spawner_seccomp",
     .values = "errno|kill|log|off",
     .meaning = "the spawner's filter, which every device action inherits",
     .value = [](const Config& c) { return toml(c.spawner_seccomp); }},
    {.section = "security",
     .name = "capabilities",
     .type = K::kStringList,
     .limits = "names such as \"CAP_NET_ADMIN\" or \"net_admin\"",
     .meaning = "capabilities crihookd keeps once started (CAP_CHOWN is added while "
                "server.socket_group is set)",
     .value = [](const Config& c) { return toml(c.capabilities); }},
    {.section = "security",
     .name = "spawner_capabilities",
     .type = K::kStringList,
     .limits = "capability names, or only \"all\"",
     .meaning = "capabilities the spawner keeps for the commands it runs; [\"all\"]: every one "
                "crihookd started with",
     .value = [](const Config& c) { return toml(c.spawner_capabilities); }},
    {.section = "security",
     .name = "mounts",
     .type = K::kTable,
     .meaning = "the host paths hooks may not mount (below)"},

    // [security.mounts]
    {.section = "security.mounts",
     .name = "deny",
     .type = K::kPathList,
     .lo = 0,
     .hi = 256,
     .meaning = "host paths no hook may mount at all; a list replaces the default",
     .default_text = "[\"/run/containerd\", \"/var/run/containerd\", \"/run/crihook\", "
                     "\"/var/run/crihook\", \"/run/docker.sock\", \"/var/run/docker.sock\"]"},
    {.section = "security.mounts",
     .name = "deny_rw",
     .type = K::kPathList,
     .lo = 0,
     .hi = 256,
     .meaning = "host paths no hook may mount read-write; a list replaces the default",
     .default_text = "[\"/etc\", \"/proc\", \"/sys\", \"/var/lib/kubelet\", "
                     "\"/var/lib/containerd\", \"/var/lib/docker\", \"/var/lib/crihook\"]"},

    // [hook.settings] of the built-in hooks. gpu, rdma, cpuset and
    // topology-check share device_root and on_error (AllocationHook).
    {.section = "hook.settings",
     .builtin = "gpu",
     .name = "device_root",
     .type = K::kPath,
     .meaning = "where the host's device nodes are",
     .default_text = "\"/dev\""},
    {.section = "hook.settings",
     .builtin = "gpu",
     .name = "on_error",
     .values = "reject|skip",
     .meaning = "`skip`: log and create the container without its devices",
     .default_text = "\"reject\""},
    {.section = "hook.settings",
     .builtin = "gpu",
     .name = "visible_devices",
     .values = "uuid|index",
     .meaning = "how NVIDIA_VISIBLE_DEVICES names the allocated GPUs",
     .default_text = "\"uuid\""},
    {.section = "hook.settings",
     .builtin = "gpu",
     .name = "hami_core_library",
     .type = K::kPath,
     .meaning = "HAMi-core's library, LD_PRELOADed and mounted read-only for a shared GPU",
     .default_text = "\"/usr/local/vgpu/libvgpu.so\""},
    {.section = "hook.settings",
     .builtin = "gpu",
     .name = "hami_core_lock_dir",
     .type = K::kPath,
     .meaning = "HAMi-core's lock directory, mounted for a shared GPU",
     .default_text = "\"/tmp/vgpulock\""},
    {.section = "hook.settings",
     .builtin = "rdma",
     .name = "device_root",
     .type = K::kPath,
     .meaning = "where the host's device nodes are",
     .default_text = "\"/dev\""},
    {.section = "hook.settings",
     .builtin = "rdma",
     .name = "on_error",
     .values = "reject|skip",
     .meaning = "`skip`: log and create the container without its devices",
     .default_text = "\"reject\""},
    {.section = "hook.settings",
     .builtin = "rdma",
     .name = "nccl_ib_hca",
     .type = K::kBool,
     .meaning = "set NCCL_IB_HCA to the allocated RDMA devices",
     .default_text = "true"},
    {.section = "hook.settings",
     .builtin = "cpuset",
     .name = "device_root",
     .type = K::kPath,
     .meaning = "where the host's device nodes are",
     .default_text = "\"/dev\""},
    {.section = "hook.settings",
     .builtin = "cpuset",
     .name = "on_error",
     .values = "reject|skip",
     .meaning = "`skip`: log and create the container without its cpuset",
     .default_text = "\"reject\""},
    {.section = "hook.settings",
     .builtin = "cpuset",
     .name = "unset_cpu_quota",
     .type = K::kBool,
     .meaning = "a pinned container gets cpu_quota = -1 (not CFS-throttled below its CPUs)",
     .default_text = "true"},
    {.section = "hook.settings",
     .builtin = "cpuset",
     .name = "share_pool",
     .type = K::kBool,
     .meaning = "a NUMA-aware pod without a cpuset runs on its NUMA nodes' CPUs no pin holds",
     .default_text = "true"},
    {.section = "hook.settings",
     .builtin = "topology-check",
     .name = "device_root",
     .type = K::kPath,
     .meaning = "where the host's device nodes are",
     .default_text = "\"/dev\""},
    {.section = "hook.settings",
     .builtin = "topology-check",
     .name = "on_error",
     .values = "reject|skip",
     .meaning = "`skip`: log and create the container unchecked",
     .default_text = "\"reject\""},
    {.section = "hook.settings",
     .builtin = "topology-check",
     .name = "on_violation",
     .values = "annotate|reject",
     .meaning = "a violated joint allocation: annotate the container "
                "(crihook.io/topology-violation), or refuse the call",
     .default_text = "\"annotate\""},
    {.section = "hook.settings",
     .builtin = "topology-check",
     .name = "pcie_scope",
     .values = "root-complex|switch",
     .meaning = "what SamePCIe means; must match the node's Device report "
                "(`crihookctl topology --pcie-id`)",
     .default_text = "\"root-complex\""},
    {.section = "hook.settings",
     .builtin = "cdi",
     .name = "spec_dirs",
     .type = K::kStringList,
     .meaning = "where CDI spec files are read; a later directory wins",
     .default_text = "[\"/etc/cdi\", \"/var/run/cdi\"]"},
    {.section = "hook.settings",
     .builtin = "cdi",
     .name = "mode",
     .values = "apply|runtime",
     .meaning = "`apply`: crihook applies the CDI devices; `runtime`: left to a runtime that does",
     .default_text = "\"apply\""},
    {.section = "hook.settings",
     .builtin = "cdi",
     .name = "on_unsupported",
     .values = "annotate|reject",
     .meaning = "edits CRI cannot carry: listed in crihook.io/cdi-unsupported, or the container "
                "refused",
     .default_text = "\"annotate\""},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "gpu",
     .type = K::kTable,
     .limits = "init and cleanup: arrays of actions",
     .meaning = "actions for each allocated GPU: [[hook.settings.gpu.init]], "
                "[[hook.settings.gpu.cleanup]]"},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "rdma",
     .type = K::kTable,
     .limits = "init and cleanup: arrays of actions",
     .meaning = "the same, for each allocated RDMA function (a VF, not its PF)"},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "fpga",
     .type = K::kTable,
     .limits = "init and cleanup: arrays of actions",
     .meaning = "the same, for each allocated FPGA"},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "state_dir",
     .type = K::kPath,
     .meaning = "where the records of each sandbox's devices are kept",
     .default_text = "\"<[hooks] state_dir>/devices\""},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "device_root",
     .type = K::kPath,
     .meaning = "where the host's device nodes are",
     .default_text = "\"/dev\""},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "retry_initial",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "the first wait before a failed cleanup is retried, doubled per failure",
     .default_text = "\"1s\""},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "retry_max",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .limits = "at least retry_initial",
     .meaning = "the longest wait between cleanup retries",
     .default_text = "\"5m\""},
    {.section = "hook.settings",
     .builtin = "device-lifecycle",
     .name = "orphan_grace",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "an init whose sandbox never appears is cleaned up after this long",
     .default_text = "\"10m\""},
    // device-lifecycle's settings.gpu (rdma, fpga) and their actions
    // (hooks/builtin/lifecycle/lifecycle_settings.cc, actions.cc).
    {.section = "hook.settings.type",
     .builtin = "device-lifecycle",
     .name = "init",
     .type = K::kTableList,
     .meaning = "actions run for each device of the type, in order, before the pod's sandbox is "
                "created",
     .default_text = "[]"},
    {.section = "hook.settings.type",
     .builtin = "device-lifecycle",
     .name = "cleanup",
     .type = K::kTableList,
     .meaning = "actions run for each initialised device, in reverse order, once the sandbox "
                "stopped; retried until they succeed",
     .default_text = "[]"},
    {.section = "hook.settings.action",
     .builtin = "device-lifecycle",
     .name = "command",
     .type = K::kStringList,
     .limits = "not empty; either this or builtin",
     .meaning = "a program and its arguments, run directly (no shell); {type} {index} {minor} "
                "{id} {uuid} {pci} {name} {node} {pod_namespace} {pod_name} {pod_uid} are the "
                "device's and the pod's, {{ a brace"},
    {.section = "hook.settings.action",
     .builtin = "device-lifecycle",
     .name = "builtin",
     .values = "pci-reset|check-node",
     .limits = "either this or command",
     .meaning = "`pci-reset` writes 1 to the device's PCI reset file; `check-node`: its device "
                "node exists"},
    {.section = "hook.settings.action",
     .builtin = "device-lifecycle",
     .name = "timeout",
     .type = K::kDuration,
     .lo = 1,
     .hi = kNoUpperBound,
     .meaning = "how long the action may run; then it is killed and has failed",
     .default_text = "\"10s\""},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "stages",
     .type = K::kStringList,
     .limits = "PreRunPodSandbox, PreCreateContainer, PreUpdateContainerResources",
     .meaning = "the stages it applies its adjustment on",
     .default_text = "[\"PreCreateContainer\"]"},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "namespaces",
     .type = K::kStringList,
     .meaning = "the pods' namespaces it applies to; empty: every one",
     .default_text = "[]"},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "pod_labels",
     .type = K::kTable,
     .limits = "string values",
     .meaning = "labels a pod must have, each with its value",
     .default_text = "{}"},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "pod_annotations",
     .type = K::kTable,
     .limits = "string values",
     .meaning = "annotations a pod must have, each with its value",
     .default_text = "{}"},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "containers",
     .type = K::kStringList,
     .meaning = "the containers' names it applies to; empty: every one",
     .default_text = "[]"},
    {.section = "hook.settings",
     .builtin = "static",
     .name = "adjustment",
     .type = K::kTable,
     .limits = "a crihook.hook.v1.Adjustment",
     .meaning = "what it sets: env, mounts, devices, annotations, ... (required)"},
    {.section = "hook.settings",
     .builtin = "noop",
     .name = "stages",
     .type = K::kStringList,
     .limits = "stage names such as \"PostStopContainer\"",
     .meaning = "the stages it is called on (and decides nothing)",
     .default_text = "[\"PreCreateContainer\"]"},
};

// The sections, in the reference's order.
constexpr ConfigSection kSections[] = {
    {"server", "[server]", "",
     "The socket kubelet connects to, the event loops, and the limits against a client that "
     "misbehaves."},
    {"backend", "[backend]", "", "The runtime crihookd forwards to."},
    {"log", "[log]", "", "crihookd logs to stderr (the journal, under systemd)."},
    {"hooks", "[hooks]", "",
     "Where hooks keep their records and find their modules, and Koordinator's hook servers."},
    {"hooks.owners", "[hooks.owners]", "",
     "Who decides a field that a crihook hook ([[hook]]) and a Koordinator hook server "
     "(koordlet) set to values that differ; values that name the same GPUs or CPUs are one "
     "decision. Each key takes `crihook`, `koordinator` or `refuse` (the call is refused naming "
     "both hooks)."},
    {"hook", "[[hook]]", "",
     "Each entry is one hook; hooks run in the order of the file, then Koordinator's hook "
     "servers in file-name order. An unknown built-in or a bad setting stops start-up naming "
     "the entry and the setting."},
    {"metrics", "[metrics]", "", "The Prometheus metrics and health endpoint."},
    {"nri", "[nri]", "", "Read when [server] mode = \"nri\": crihookd as an NRI plugin."},
    {"topology", "[topology]", "", "Where the node's topology is read."},
    {"security", "[security]", "", "crihookd's own confinement, once started."},
    {"security.mounts", "[security.mounts]", "",
     "The host paths hooks may not mount. crihookd's own socket, the runtime's socket and the "
     "state directory are added whatever the lists say; an empty list allows all."},
    {"hook.settings", "[hook.settings] of builtin = \"gpu\"", "gpu",
     "The allocated GPUs' device nodes and NVIDIA_VISIBLE_DEVICES, from Koordinator's "
     "scheduling.koordinator.sh/device-allocated annotation."},
    {"hook.settings", "[hook.settings] of builtin = \"rdma\"", "rdma",
     "The allocated RDMA functions' uverbs nodes and NCCL_IB_HCA."},
    {"hook.settings", "[hook.settings] of builtin = \"cpuset\"", "cpuset",
     "cpuset_cpus and cpuset_mems as koordlet's CPUSetAllocator sets them."},
    {"hook.settings", "[hook.settings] of builtin = \"topology-check\"", "topology-check",
     "Checks that a joint allocation shares the scope the pod asked for."},
    {"hook.settings", "[hook.settings] of builtin = \"cdi\"", "cdi",
     "Resolves the CDI devices a container asks for against the spec files."},
    {"hook.settings", "[hook.settings] of builtin = \"device-lifecycle\"", "device-lifecycle",
     "Device init and cleanup actions around a pod's sandbox, per device type."},
    {"hook.settings.type", "[hook.settings.gpu], .rdma and .fpga of device-lifecycle",
     "device-lifecycle", "A device type's actions."},
    {"hook.settings.action",
     "[[hook.settings.gpu.init]] and [[hook.settings.gpu.cleanup]] (and rdma's, fpga's)",
     "device-lifecycle", "An action: a command or a built-in one."},
    {"hook.settings", "[hook.settings] of builtin = \"static\"", "static",
     "One declared adjustment for the pods and containers it selects."},
    {"hook.settings", "[hook.settings] of builtin = \"noop\"", "noop",
     "Decides nothing on its stages."},
};

}  // namespace

std::string_view keyTypeName(KeyType type) {
  switch (type) {
    case KeyType::kString:
      return "string";
    case KeyType::kPath:
      return "absolute path";
    case KeyType::kInteger:
      return "integer";
    case KeyType::kBool:
      return "boolean";
    case KeyType::kDuration:
      return "duration";
    case KeyType::kStringList:
      return "list of strings";
    case KeyType::kPathList:
      return "list of absolute paths";
    case KeyType::kTable:
      return "table";
    case KeyType::kTableList:
      return "list of tables";
  }
  return "string";
}

std::span<const ConfigKey> configKeys() { return kKeys; }
std::span<const ConfigSection> configSections() { return kSections; }

std::vector<std::string_view> configKeyNames(std::string_view section, std::string_view builtin) {
  std::vector<std::string_view> names;
  for (const ConfigKey& k : kKeys) {
    if (k.section == section && k.builtin == builtin) names.push_back(k.name);
  }
  return names;
}

std::string configKeyList(std::string_view section, std::string_view builtin) {
  std::string out;
  for (std::string_view name : configKeyNames(section, builtin))
    out += cat(out.empty() ? "" : ", ", name);
  return out;
}

std::vector<std::string_view> configTableNames() {
  std::vector<std::string_view> names;
  for (const ConfigSection& s : kSections) {
    if (s.name.find('.') == std::string_view::npos) names.push_back(s.name);
  }
  return names;
}

const ConfigKey* findConfigKey(std::string_view section, std::string_view name,
                               std::string_view builtin) {
  for (const ConfigKey& k : kKeys) {
    if (k.section == section && k.name == name && k.builtin == builtin) return &k;
  }
  return nullptr;
}

std::string defaultText(const ConfigKey& key) {
  if (!key.default_text.empty()) return std::string(key.default_text);
  // Named, not a temporary: GCC 12 at -O3 takes a temporary Config's strings
  // for uninitialised (-Wmaybe-uninitialized).
  static const Config kDefaults;
  if (key.value != nullptr) return key.value(kDefaults);
  return "";
}

std::string tomlString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string tomlDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms != 0 && ms % (60 * 1000) == 0) return cat(ms / (60 * 1000), "m");
  if (ms % 1000 == 0) return cat(ms / 1000, "s");
  return cat(ms, "ms");
}

std::string tomlStringList(const std::vector<std::string>& list) {
  std::string out = "[";
  for (const std::string& s : list) out += cat(out.size() > 1 ? ", " : "", tomlString(s));
  return out + "]";
}

}  // namespace crihook
