// crihookd: the CRI proxy kubelet talks to. Wiring only; the parts live in
// config/, proxy/ and hooks/.

#include <signal.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "base/logging.h"
#include "base/text.h"
#include "config/config.h"
#include "confine/capabilities.h"
#include "confine/seccomp_filter.h"
#include "confine/spawner.h"
#include "hooks/hook_interceptor.h"
#include "hooks/hook_manager.h"
#include "hooks/registry.h"
#include "hooks/state_store.h"
#include "metrics/call_metrics.h"
#include "metrics/health.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"
#include "proxy/server.h"
#include "proxy/socket_activation.h"
#include "proxy/systemd_notify.h"
#include "topology/holder.h"

namespace {

constexpr const char* kUsage = R"(usage: crihookd [flags]

A CRI proxy: kubelet's --container-runtime-endpoint points here, every call is
forwarded to the real runtime, lifecycle calls run through crihook's hooks.

  --config FILE        TOML configuration (default: none, embedded defaults)
  --listen PATH        socket to serve (default /run/crihook/crihook.sock)
  --backend ENDPOINT   runtime to forward to (default unix:///run/containerd/containerd.sock)
  --log-level LEVEL    trace, debug, info, warn, error, critical, off (default info)
  --state-dir DIR      where pod and container records are kept (default /var/lib/crihook)

SIGHUP rediscovers the node's topology.
  --version            print the version and exit
  --help               print this and exit

Flags override the config file.
)";

struct Flags {
  std::string config_file;
  std::string listen, backend, log_level;
  std::optional<std::string> state_dir;
};

int usageError(const std::string& message) {
  std::fprintf(stderr, "crihookd: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// [security], resolved (README "Confinement").
struct Confinement {
  crihook::confine::SeccompMode seccomp = crihook::confine::SeccompMode::kErrno;
  crihook::confine::CapSet keep = 0;  // crihookd's capabilities once the spawner is forked
  crihook::confine::SpawnerOptions spawner;
};

absl::StatusOr<Confinement> resolveConfinement(const crihook::Config& config,
                                               std::string_view origin) {
  namespace confine = crihook::confine;
  auto bad = [&](std::string_view key, const absl::Status& s) {
    return absl::InvalidArgumentError(
        crihook::cat("config ", origin, ": ", key, ": ", crihook::sv(s.message())));
  };
  Confinement c;
  auto mode = confine::parseSeccompMode(config.seccomp);
  if (!mode.ok()) return bad("security.seccomp", mode.status());
  c.seccomp = *mode;
  mode = confine::parseSeccompMode(config.spawner_seccomp);
  if (!mode.ok()) return bad("security.spawner_seccomp", mode.status());
  c.spawner.seccomp = *mode;
  auto keep = confine::parseCapabilities(config.capabilities, "security.capabilities");
  if (!keep.ok()) return bad("security.capabilities", keep.status());
  c.keep = *keep;
  // The socket's group is set by chown once it is bound, after the drop
  // (capabilities are per thread and only dropped while there is one).
  if (!config.socket_group.empty()) c.keep |= confine::CapSet{1} << 0;  // CAP_CHOWN
  c.spawner.keep_all_capabilities =
      config.spawner_capabilities.size() == 1 && config.spawner_capabilities[0] == "all";
  if (!c.spawner.keep_all_capabilities) {
    auto spawner_keep =
        confine::parseCapabilities(config.spawner_capabilities, "security.spawner_capabilities");
    if (!spawner_keep.ok()) return bad("security.spawner_capabilities", spawner_keep.status());
    c.spawner.capabilities = *spawner_keep;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto need = [&](std::string& out) -> bool {
      if (eq != std::string::npos) {
        out = value;
        return true;
      }
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--version") {
      std::puts("crihookd " CRIHOOK_VERSION);
      return 0;
    } else if (arg == "--config") {
      ok = need(flags.config_file);
    } else if (arg == "--listen") {
      ok = need(flags.listen);
    } else if (arg == "--backend") {
      ok = need(flags.backend);
    } else if (arg == "--log-level") {
      ok = need(flags.log_level);
    } else if (arg == "--state-dir") {
      ok = need(flags.state_dir.emplace());
    } else {
      return usageError("unknown flag " + arg);
    }
    if (!ok) return usageError("flag " + arg + " needs a value");
  }

  crihook::Config config;
  if (!flags.config_file.empty()) {
    auto loaded = crihook::loadConfigFile(flags.config_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "crihookd: %s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    config = *loaded;
  }
  if (!flags.listen.empty()) config.listen_path = flags.listen;
  if (!flags.backend.empty()) config.backend_endpoint = flags.backend;
  if (!flags.log_level.empty()) config.log_level = flags.log_level;
  if (flags.state_dir) config.state_dir = *flags.state_dir;
  if (auto s = crihook::validateConfig(config, "flags"); !s.ok()) {
    std::fprintf(stderr, "crihookd: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto confinement =
      resolveConfinement(config, flags.config_file.empty() ? "flags" : flags.config_file);
  if (!confinement.ok()) {
    std::fprintf(stderr, "crihookd: %s\n", std::string(confinement.status().message()).c_str());
    return 1;
  }
  crihook::setLogLevel(config.log_level);
  auto log = crihook::logger("crihookd");

  // systemd's socket (crihookd.socket), taken before any thread or child
  // exists: the LISTEN_* variables are unset and the fd made close-on-exec.
  auto activated = crihook::takeActivatedSocket(config.listen_path);
  if (!activated.ok()) {
    log->critical("cannot start: {}", crihook::sv(activated.status().message()));
    return 1;
  }
  if (*activated && (*activated)->path != config.listen_path) {
    log->warn("serving the activated socket {}; the configured listen path {} is not used",
              (*activated)->path, config.listen_path);
  }
  // The spawner next, while crihookd has one thread: it runs the device
  // actions' commands outside the filter and the capability drop below.
  auto spawner = crihook::confine::SpawnerClient::start(confinement->spawner);
  if (!spawner.ok()) {
    log->critical("cannot start: {}", crihook::sv(spawner.status().message()));
    return 1;
  }
  const pid_t spawner_pid = (*spawner)->pid();
  crihook::confine::setProcessLauncher(std::move(*spawner));
  if (auto s = crihook::confine::keepOnlyCapabilities(confinement->keep); !s.ok()) {
    log->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }

  // Signals are taken synchronously by this thread; the event loops never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Metrics: made first, so every part can register its numbers.
  auto metrics_listen = crihook::metricsListen(config, "flags");
  if (!metrics_listen.ok()) {
    std::fprintf(stderr, "crihookd: %s\n", std::string(metrics_listen.status().message()).c_str());
    return 1;
  }
  crihook::metrics::Registry registry;
  registry.gauge("crihook_build_info", "crihookd's version; always 1.", {"version"})
      .with({CRIHOOK_VERSION})
      .set(1);
  registry
      .gauge("crihook_process_start_time_seconds",
             "When crihookd started, in seconds since the Unix epoch.")
      .with({})
      .set(std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count());
  crihook::metrics::CallMetrics call_metrics(registry);

  crihook::StateStore state(config.state_dir, crihook::logger("state"));
  if (auto s = state.load(); !s.ok()) {
    log->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }
  auto hooks = crihook::HookManager::create(config, crihook::builtinHooks(),
                                            crihook::logger("hook"), &registry);
  if (!hooks.ok()) {
    log->critical("cannot start: {}", crihook::sv(hooks.status().message()));
    return 1;
  }
  (*hooks)->watch();
  auto topo_log = crihook::logger("topology");
  crihook::topology::SnapshotHolder topology;
  auto discover = [&] {
    auto snap = std::make_shared<const crihook::topology::Snapshot>(
        crihook::topology::discover(crihook::topology::SysRoot(config.topology_root)));
    topo_log->info("{} (root {})", crihook::topology::summary(*snap), config.topology_root);
    for (const std::string& w : snap->warnings) topo_log->warn("{}", w);
    topology.set(std::move(snap));
  };
  discover();
  crihook::HookInterceptor interceptor((*hooks)->chains(), state, crihook::logger("hook"),
                                       static_cast<size_t>(config.hook_workers), &topology);
  crihook::Server server(config, interceptor, crihook::logger("proxy"));
  server.setCallMetrics(&call_metrics);
  registry.gaugeFunction("crihook_connections", "kubelet-side connections open.",
                         [&server] { return static_cast<double>(server.connections()); });
  registry.gaugeFunction("crihook_calls_in_flight", "CRI calls accepted and not yet answered.",
                         [&server] { return static_cast<double>(server.activeCalls()); });
  registry.gaugeFunction(
      "crihook_intercepted_buffered_bytes",
      "Bytes intercepted calls hold buffered (request, forwarded copy, reply) until they end.",
      [&server] { return static_cast<double>(server.bufferedBytes()); });
  if (*activated) server.adoptListener(**activated);
  // Listening, not yet accepting: connections wait in the backlog until the
  // seccomp filter is on (below).
  if (auto s = server.listen(); !s.ok()) {
    log->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }
  // After the CRI socket is ours: a second crihookd on the same paths is
  // refused by the server's single-instance check, naming the CRI socket.
  crihook::metrics::Readiness readiness;
  crihook::metrics::BackendHealth health(
      crihook::metrics::runtimeVersionProbe(config.backend_endpoint));
  std::optional<crihook::metrics::HttpEndpoint> endpoint;
  if (metrics_listen->kind != crihook::MetricsListen::Kind::kNone) {
    crihook::metrics::HttpEndpointOptions o;
    o.unix_path = metrics_listen->path;
    o.unix_mode = config.socket_mode;
    o.unix_group = config.socket_group;
    o.tcp_host = metrics_listen->host;
    o.tcp_port = metrics_listen->port;
    endpoint.emplace(o, crihook::metrics::routes(registry, health, readiness),
                     crihook::logger("metrics"));
    if (auto s = endpoint->start(); !s.ok()) {
      log->critical("cannot start: {}", crihook::sv(s.message()));
      server.shutdown(std::chrono::milliseconds(0));
      return 1;
    }
    log->info("metrics on {}", metrics_listen->path.empty()
                                   ? crihook::cat(o.tcp_host, ":", endpoint->port())
                                   : metrics_listen->path);
  }
  // Hooks that keep records square them with the runtime (cleanups owed for
  // sandboxes that went away while crihookd was down).
  (*hooks)->reconcileWithRuntime(config.backend_endpoint);
  // Started: from here on crihookd makes only the calls on the allow-list
  // (every thread; those that exist and those to come).
  auto filtered =
      crihook::confine::installFilter(confinement->seccomp, crihook::confine::FilterFor::kDaemon);
  if (!filtered.ok()) {
    log->critical("cannot start: {} (security.seccomp = \"off\" runs without a filter)",
                  crihook::sv(filtered.status().message()));
    return 1;
  }
  log->info(
      "confined: seccomp {} ({} system calls allowed), capabilities kept: {}; spawner pid {} "
      "(seccomp {}, capabilities: {})",
      crihook::confine::seccompModeName(confinement->seccomp), *filtered,
      crihook::confine::capabilityNames(confinement->keep), spawner_pid,
      crihook::confine::seccompModeName(confinement->spawner.seccomp),
      confinement->spawner.keep_all_capabilities
          ? std::string("all")
          : crihook::confine::capabilityNames(confinement->spawner.capabilities));
  server.serve();
  readiness.set(true, "serving");
  crihook::notifySystemd("READY=1\nSTATUS=serving " + config.listen_path);

  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) discover();
  log->info("{}: stopping; in-flight calls get up to {}ms", strsignal(sig),
            config.shutdown_grace.count());
  crihook::notifySystemd("STOPPING=1");
  readiness.set(false, "stopping");
  int64_t cut = server.shutdown(config.shutdown_grace);
  if (endpoint) endpoint->stop();
  if (cut > 0) log->warn("{} calls were still running when the grace period ended", cut);
  log->info("stopped");
  return 0;
}
