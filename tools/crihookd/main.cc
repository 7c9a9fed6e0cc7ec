// crihookd: the CRI proxy kubelet talks to. Wiring only; the parts live in
// config/, proxy/ and hooks/.

#include <signal.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "config.h"
#include "holder.h"
#include "hook_interceptor.h"
#include "hook_manager.h"
#include "logging.h"
#include "registry.h"
#include "server.h"
#include "socket_activation.h"
#include "state_store.h"
#include "systemd_notify.h"
#include "text.h"

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

  // Signals are taken synchronously by this thread; the event loops never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  crihook::StateStore state(config.state_dir, crihook::logger("state"));
  if (auto s = state.load(); !s.ok()) {
    log->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }
  auto hooks =
      crihook::HookManager::create(config, crihook::builtinHooks(), crihook::logger("hook"));
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
  if (*activated) server.adoptListener(**activated);
  if (auto s = server.start(); !s.ok()) {
    log->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }
  // Hooks that keep records square them with the runtime (cleanups owed for
  // sandboxes that went away while crihookd was down).
  (*hooks)->reconcileWithRuntime(config.backend_endpoint);
  crihook::notifySystemd("READY=1\nSTATUS=serving " + config.listen_path);

  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) discover();
  log->info("{}: stopping; in-flight calls get up to {}ms", strsignal(sig),
            config.shutdown_grace.count());
  crihook::notifySystemd("STOPPING=1");
  int64_t cut = server.shutdown(config.shutdown_grace);
  if (cut > 0) log->warn("{} calls were still running when the grace period ended", cut);
  log->info("stopped");
  return 0;
}
