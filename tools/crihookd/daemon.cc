#include "tools/crihookd/daemon.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <set>

#include "base/logging.h"
#include "base/quote.h"
#include "base/text.h"
#include "base/version.h"
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
#include "nri/budget.h"
#include "nri/front.h"
#include "proxy/server.h"
#include "proxy/socket_activation.h"
#include "proxy/systemd_notify.h"
#include "topology/holder.h"

namespace crihook {
namespace {

// [security], resolved (docs/security.md "Confinement").
struct Confinement {
  confine::SeccompMode seccomp = confine::SeccompMode::kErrno;
  confine::CapSet keep = 0;  // crihookd's capabilities once the spawner is forked
  confine::SpawnerOptions spawner;
};

absl::StatusOr<Confinement> resolveConfinement(const Config& config, std::string_view origin) {
  auto bad = [&](std::string_view key, const absl::Status& s) {
    return absl::InvalidArgumentError(cat("config ", origin, ": ", key, ": ", sv(s.message())));
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

// What crihookd keeps of the runtime's deadline for an NRI event: the stages
// must be done this long before it, since an answer that arrives late drops
// the plugin.
constexpr std::chrono::milliseconds kNriAnswerMargin{100};
// Pods the runtime has that crihookd has no record of are logged one by one
// up to this many per Synchronize, then counted (a node switched to NRI mode
// may have hundreds).
constexpr size_t kMaxUnhookedPodLines = 20;

// [nri] checked against what a runtime takes (the name and index NRI
// orders plugins by) and against koordlet's own plugin.
absl::Status checkNriConfig(const Config& config, std::string_view origin) {
  if (config.mode != "nri") return absl::OkStatus();
  const NriConfig& n = config.nri;
  if (auto s = nri::validateIdentity({n.plugin_name, n.plugin_index}); !s.ok())
    return absl::InvalidArgumentError(cat("config ", origin, ": nri: ", sv(s.message())));
  if (n.koordlet_plugin && std::string_view(n.plugin_index) <= kKoordletPluginIndex) {
    return absl::InvalidArgumentError(cat(
        "config ", origin, ": nri.plugin_index: expected an index after koordlet's own plugin (",
        kKoordletPluginIndex, ", nri.koordlet_plugin = true), got ", quote(n.plugin_index)));
  }
  return absl::OkStatus();
}

// Whether Koordinator's hook servers in hookserver_dir are called: not in
// NRI mode while koordlet's own NRI plugin acts (it already acts through NRI).
bool callsHookServers(const Config& config) {
  return !config.hookserver_dir.empty() && !(config.mode == "nri" && config.nri.koordlet_plugin);
}

// The hooks of the chain in force, as NRI mode's budget counts them.
nri::StageHooks stageHooks(const ChainHolder& chains) {
  return [chain = chains.get()](LifecycleMethod method, Phase phase) {
    std::vector<nri::TimedHook> out;
    for (auto& [name, timeout] : chain->blockingSubscribers(method, phase))
      out.push_back({name, timeout});
    return out;
  };
}

// crihook_build_info and crihook_process_start_time_seconds (5).
void registerProcessMetrics(metrics::Registry& registry) {
  registry
      .gauge("crihook_build_info", "crihookd's version and the commit it was built from; always 1.",
             {"version", "commit"})
      .with({std::string(version()), std::string(commit())})
      .set(1);
  registry
      .gauge("crihook_process_start_time_seconds",
             "When crihookd started, in seconds since the Unix epoch.")
      .with({})
      .set(std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count());
}

// The server's gauges, read at each scrape (proxy mode).
void registerServerMetrics(metrics::Registry& registry, Server& server) {
  Server* const s = &server;
  registry.gaugeFunction("crihook_connections", "kubelet-side connections open.",
                         [s] { return static_cast<double>(s->connections()); });
  registry.gaugeFunction(
      "crihook_connections_terminating",
      "Of them, those crihookd stands in for the runtime on: opened while the runtime could "
      "not be reached, until it answers and they reconnect (the name is earlier releases').",
      [s] { return static_cast<double>(s->standInConnections()); });
  registry.gaugeFunction("crihook_calls_in_flight", "CRI calls accepted and not yet answered.",
                         [s] { return static_cast<double>(s->activeCalls()); });
  registry.gaugeFunction(
      "crihook_intercepted_buffered_bytes",
      "Bytes intercepted calls hold buffered (request, forwarded copy, reply) until they end.",
      [s] { return static_cast<double>(s->bufferedBytes()); });
}

}  // namespace

// Declared in the order they are made: destroyed in reverse, as main's
// locals were.
struct Daemon::Parts {
  Config config;
  std::string origin;  // the config file, or "flags"
  Confinement confinement;
  MetricsListen metrics_listen;
  std::shared_ptr<spdlog::logger> log = logger("crihookd");
  std::optional<ActivatedSocket> activated;  // systemd's (crihookd.socket), if it passed one
  sigset_t signals{};
  pid_t spawner_pid = -1;
  std::optional<metrics::Registry> registry;
  std::optional<metrics::CallMetrics> call_metrics;
  std::optional<StateStore> state;
  std::unique_ptr<HookManager> hooks;
  topology::SnapshotHolder topology;
  std::shared_ptr<spdlog::logger> topo_log = logger("topology");
  std::optional<HookInterceptor> interceptor;
  std::optional<Server> server;          // [server] mode = "proxy"
  std::optional<nri::Front> front;       // [server] mode = "nri"
  std::atomic<size_t> unhooked_pods{0};  // at the last Synchronize
  metrics::Readiness readiness;
  std::optional<metrics::BackendHealth> health;
  std::optional<metrics::HttpEndpoint> endpoint;
};

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::create(const Config& config,
                                                       const std::string& origin) {
  auto confinement = resolveConfinement(config, origin);
  if (!confinement.ok()) return confinement.status();
  auto metrics_listen = metricsListen(config, "flags");
  if (!metrics_listen.ok()) return metrics_listen.status();
  if (auto s = checkNriConfig(config, origin); !s.ok()) return s;
  setLogLevel(config.log_level);
  std::unique_ptr<Daemon> d(new Daemon);
  d->parts_ = std::make_unique<Parts>();
  d->parts_->config = config;
  d->parts_->origin = origin;
  d->parts_->confinement = *confinement;
  d->parts_->metrics_listen = *metrics_listen;
  return d;
}

Daemon::~Daemon() = default;

absl::Status Daemon::start() {
  Parts& p = *parts_;
  // 1-3, while crihookd has one thread.
  if (auto s = takeSocketAndConfine(); !s.ok()) return s;
  // 4. Signals are taken synchronously by wait()'s thread; the event loops
  // never see them.
  sigemptyset(&p.signals);
  sigaddset(&p.signals, SIGTERM);
  sigaddset(&p.signals, SIGINT);
  sigaddset(&p.signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &p.signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // 5. Metrics: made first, so every part can register its numbers.
  registerProcessMetrics(p.registry.emplace());
  p.call_metrics.emplace(*p.registry);
  // 6, 7.
  if (auto s = loadStateAndHooks(); !s.ok()) return s;
  // 8.
  reload();
  // 9.
  p.interceptor.emplace(p.hooks->chains(), *p.state, logger("hook"),
                        static_cast<size_t>(p.config.hook_workers), &p.topology);
  // 10.
  if (auto s = p.config.mode == "nri" ? prepareNriFront() : listenForKubelet(); !s.ok()) return s;
  // 11. After the CRI socket is ours: a second crihookd on the same paths is
  // refused by the server's single-instance check, naming the CRI socket.
  if (auto s = startMetricsEndpoint(); !s.ok()) {
    if (p.server) p.server->shutdown(std::chrono::milliseconds(0));
    return s;
  }
  // 12. Hooks that keep records square them with the runtime (cleanups owed
  // for sandboxes that went away while crihookd was down).
  p.hooks->reconcileWithRuntime(p.config.backend_endpoint);
  // 13.
  if (auto s = confineEveryThread(); !s.ok()) return s;
  // 14-16.
  serve();
  return absl::OkStatus();
}

absl::Status Daemon::takeSocketAndConfine() {
  Parts& p = *parts_;
  const Config& config = p.config;
  // 1. systemd's socket (crihookd.socket), taken before any thread or child
  // exists: the LISTEN_* variables are unset and the fd made close-on-exec.
  auto activated = takeActivatedSocket(config.listen_path);
  if (!activated.ok()) return activated.status();
  if (*activated && config.mode == "nri") {
    return absl::FailedPreconditionError(
        cat("systemd passed crihookd a socket (crihookd.socket), but [server] mode = \"nri\" "
            "serves no CRI socket: kubelet talks to the runtime; disable crihookd.socket"));
  }
  if (*activated && (*activated)->path != config.listen_path) {
    p.log->warn("serving the activated socket {}; the configured listen path {} is not used",
                (*activated)->path, config.listen_path);
  }
  p.activated = *activated;
  // 2. The spawner next, while crihookd has one thread: it runs the device
  // actions' commands outside the filter and the capability drop below.
  auto spawner = confine::SpawnerClient::start(p.confinement.spawner);
  if (!spawner.ok()) return spawner.status();
  p.spawner_pid = (*spawner)->pid();
  confine::setProcessLauncher(std::move(*spawner));
  // 3.
  return confine::keepOnlyCapabilities(p.confinement.keep);
}

absl::Status Daemon::loadStateAndHooks() {
  Parts& p = *parts_;
  const Config& config = p.config;
  // 6.
  StateStore& state = p.state.emplace(config.state_dir, logger("state"));
  if (auto s = state.load(); !s.ok()) return s;
  // A record that cannot be written is a cleanup a restart could lose:
  // said by /readyz and the metric until it is written.
  p.readiness.addCheck([&state] {
    const std::string why = state.writeError();
    return why.empty() ? why : cat("pod records cannot be written: ", why);
  });
  p.registry->gaugeFunction("crihook_state_unwritten_records",
                            "Pods whose record's last write to the state folder failed (retried).",
                            [&state] { return static_cast<double>(state.unwritten()); });
  // 7.
  Config hook_config = config;
  if (!callsHookServers(config)) hook_config.hookserver_dir.clear();
  auto hooks = HookManager::create(hook_config, builtinHooks(), logger("hook"), &*p.registry);
  if (!hooks.ok()) return hooks.status();
  p.hooks = std::move(*hooks);
  p.hooks->watch();
  return absl::OkStatus();
}

absl::Status Daemon::prepareNriFront() {
  Parts& p = *parts_;
  // 10 (NRI mode). Every event's hooks must fit under the runtime's plugin
  // timeout, or the runtime drops crihook and pods go on without it.
  if (auto s = nri::checkBudget(stageHooks(p.hooks->chains()), p.config.nri.plugin_request_timeout,
                                kNriAnswerMargin);
      !s.ok()) {
    return absl::InvalidArgumentError(cat("config ", p.origin, ": ", sv(s.message())));
  }
  startNriFront();
  return absl::OkStatus();
}

absl::Status Daemon::listenForKubelet() {
  Parts& p = *parts_;
  Server& server = p.server.emplace(p.config, *p.interceptor, logger("proxy"));
  server.setCallMetrics(&*p.call_metrics);
  registerServerMetrics(*p.registry, server);
  if (p.activated) server.adoptListener(*p.activated);
  // 10. Listening, not yet accepting: connections wait in the backlog
  // until the seccomp filter is on (13).
  return server.listen();
}

absl::Status Daemon::startMetricsEndpoint() {
  Parts& p = *parts_;
  const Config& config = p.config;
  p.health.emplace(metrics::runtimeVersionProbe(config.backend_endpoint));
  if (p.metrics_listen.kind == MetricsListen::Kind::kNone) return absl::OkStatus();
  metrics::HttpEndpointOptions o;
  o.unix_path = p.metrics_listen.path;
  o.unix_mode = config.socket_mode;
  o.unix_group = config.socket_group;
  o.tcp_host = p.metrics_listen.host;
  o.tcp_port = p.metrics_listen.port;
  // kubelet's and systemd's probes are answered whatever scrapers hold.
  o.priority_paths = {"/healthz", "/readyz"};
  p.endpoint.emplace(o,
                     metrics::routes(*p.registry, *p.health, p.readiness,
                                     versionLine("crihookd", version(), commit())),
                     logger("metrics"));
  if (auto s = p.endpoint->start(); !s.ok()) return s;
  p.log->info("metrics on {}", p.metrics_listen.path.empty()
                                   ? cat(o.tcp_host, ":", p.endpoint->port())
                                   : p.metrics_listen.path);
  return absl::OkStatus();
}

absl::Status Daemon::confineEveryThread() {
  Parts& p = *parts_;
  // 13. Started: from here on crihookd makes only the calls on the
  // allow-list (every thread; those that exist and those to come).
  auto filtered = confine::installFilter(p.confinement.seccomp, confine::FilterFor::kDaemon);
  if (!filtered.ok()) {
    return absl::Status(
        filtered.status().code(),
        cat(filtered.status().message(), " (security.seccomp = \"off\" runs without a filter)"));
  }
  p.log->info(
      "confined: seccomp {} ({} system calls allowed), capabilities kept: {}; spawner pid {} "
      "(seccomp {}, capabilities: {})",
      confine::seccompModeName(p.confinement.seccomp), *filtered,
      confine::capabilityNames(p.confinement.keep), p.spawner_pid,
      confine::seccompModeName(p.confinement.spawner.seccomp),
      p.confinement.spawner.keep_all_capabilities
          ? std::string("all")
          : confine::capabilityNames(p.confinement.spawner.capabilities));
  return absl::OkStatus();
}

void Daemon::serve() {
  Parts& p = *parts_;
  // 14-16.
  if (p.server) {
    p.server->serve();
    p.readiness.set(true, "serving");
    notifySystemd("READY=1\nSTATUS=serving " + p.config.listen_path);
  } else {
    // Ready once the runtime took the registration (on_registration).
    p.front->start();
    notifySystemd("READY=1\nSTATUS=NRI plugin: connecting to " + p.config.nri.socket_path);
  }
}

void Daemon::startNriFront() {
  Parts& p = *parts_;
  const Config& config = p.config;
  nri::Front::Options o;
  o.socket_path = config.nri.socket_path;
  o.identity = {config.nri.plugin_name, config.nri.plugin_index};
  o.answer_margin = kNriAnswerMargin;
  o.request_timeout = config.nri.plugin_request_timeout;
  // A runtime that sends its own plugin_request_timeout (NRI >= 0.7) is
  // checked against it at each registration, as the config's figure was at
  // start-up (step 10).
  o.check_budget = [&chains = p.hooks->chains()](std::chrono::milliseconds runtime_timeout) {
    return nri::checkBudget(stageHooks(chains), runtime_timeout, kNriAnswerMargin,
                            nri::TimeoutSource::kRuntime);
  };
  o.on_refused = [&p](const absl::Status& why) {
    p.readiness.set(false, cat("NRI registration refused: ", sv(why.message())));
    notifySystemd(
        "STATUS=NRI plugin: registration refused (the hooks do not fit the runtime's "
        "plugin_request_timeout; see the log)");
  };
  o.on_registration = [&p, path = config.nri.socket_path](bool registered) {
    p.readiness.set(registered, registered ? "registered with the runtime's NRI"
                                           : "NRI connection lost; reconnecting");
    notifySystemd(registered ? "STATUS=NRI plugin: registered at " + path
                             : "STATUS=NRI plugin: reconnecting to " + path);
  };
  o.on_synchronize = [this](const nri::Synchronized& sync) { synchronize(sync); };
  // Koordinator's hook servers may register later on any stage: every
  // event then. Otherwise the chain's hooks (fixed until a restart) say.
  if (!callsHookServers(config)) {
    o.has_hooks = [&chains = p.hooks->chains()](LifecycleMethod method, Phase phase) {
      return chains.get()->subscribers(method, phase) > 0;
    };
  }
  nri::Front& front = p.front.emplace(*p.interceptor, std::move(o), logger("nri"));
  metrics::Registry& registry = *p.registry;
  registry.gaugeFunction("crihook_nri_registered",
                         "1 while the runtime's NRI has crihookd registered as a plugin.",
                         [&front] { return front.registered() ? 1.0 : 0.0; });
  registry.gaugeFunction("crihook_nri_registrations",
                         "Connections to the runtime's NRI registered since start (a reconnect "
                         "adds one).",
                         [&front] { return static_cast<double>(front.registrations()); });
  registry.gaugeFunction("crihook_nri_not_applied",
                         "Changes the hooks made that NRI cannot carry (logged, naming the pod).",
                         [&front] { return static_cast<double>(front.notApplied()); });
  registry.gaugeFunction(
      "crihook_nri_pods_refused_at_containers",
      "Pods refused at RunPodSandbox whose sandbox was let through, each of their containers "
      "refused instead: the runtime (containerd 2.0-2.2.5, 2.3.0-2.3.2) would leak a refused "
      "sandbox.",
      [&front] { return static_cast<double>(front.refusedAtContainers()); });
  registry.gaugeFunction(
      "crihook_nri_unhooked_pods",
      "Pods the runtime had at the last Synchronize of which crihookd has no record: made while "
      "crihookd was down or not registered, their hooks did not run (a crihookd killed in the "
      "moments between a pod's answer and its record's write counts that pod too).",
      [&p] { return static_cast<double>(p.unhooked_pods.load()); });
  p.log->info("NRI mode: plugin {}-{} at {}, plugin_request_timeout {}ms{}",
              config.nri.plugin_index, config.nri.plugin_name, config.nri.socket_path,
              config.nri.plugin_request_timeout.count(),
              config.nri.koordlet_plugin
                  ? "; Koordinator's hook servers are not called (koordlet's own NRI plugin acts)"
                  : "");
}

void Daemon::synchronize(const nri::Synchronized& sync) {
  Parts& p = *parts_;
  std::set<std::string> pods, containers;
  for (const CallIdentity& id : sync.pods) pods.insert(id.sandbox_id);
  for (const CallIdentity& id : sync.containers) containers.insert(id.container_id);
  const StateStore::Forgotten gone = p.state->retainOnly(pods, containers);
  if (!gone.pods.empty() || !gone.containers.empty()) {
    p.log->info(
        "NRI: {} pods and {} containers went away while crihookd was not registered; their "
        "records are dropped (owed device clean-ups run on the reconcile pass now due)",
        gone.pods.size(), gone.containers.size());
  }
  size_t unhooked = 0;
  for (const CallIdentity& id : sync.pods) {
    if (p.state->pod(id.sandbox_id) != nullptr) continue;
    if (++unhooked <= kMaxUnhookedPodLines) {
      p.log->warn(
          "NRI: {}: the runtime has this pod, but crihookd has no record of it: made while "
          "crihookd was down or not registered, its hooks did not run (or crihookd was killed in "
          "the moments between answering for it and writing its record)",
          identityTags(id));
    }
  }
  if (unhooked > kMaxUnhookedPodLines) {
    p.log->warn("NRI: {} more pods crihookd has no record of", unhooked - kMaxUnhookedPodLines);
  }
  p.unhooked_pods = unhooked;
  p.hooks->reconcileNow();
}

void Daemon::reload() {
  Parts& p = *parts_;
  auto snap = std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(p.config.topology_root)));
  p.topo_log->info("{} (root {})", topology::summary(*snap), p.config.topology_root);
  for (const std::string& w : snap->warnings) p.topo_log->warn("{}", w);
  p.topology.set(std::move(snap));
}

int Daemon::wait() {
  int sig = 0;
  while (sigwait(&parts_->signals, &sig) == 0 && sig == SIGHUP) reload();
  parts_->log->info("{}: stopping; in-flight calls get up to {}ms", strsignal(sig),
                    parts_->config.shutdown_grace.count());
  return sig;
}

int64_t Daemon::stop() {
  Parts& p = *parts_;
  notifySystemd("STOPPING=1");
  p.readiness.set(false, "stopping");
  if (p.front) p.front->stop();
  const int64_t cut = p.server ? p.server->shutdown(p.config.shutdown_grace) : 0;
  if (p.endpoint) p.endpoint->stop();
  if (cut > 0) p.log->warn("{} calls were still running when the grace period ended", cut);
  p.log->info("stopped");
  return cut;
}

}  // namespace crihook
