// crihookd: the CRI proxy kubelet talks to. Flag parsing only; start-up,
// reload and shutdown are Daemon's (daemon.h), the parts live in config/,
// proxy/ and hooks/.

#include <cstdio>
#include <optional>
#include <string>

#include "base/logging.h"
#include "base/text.h"
#include "base/version.h"
#include "config/config.h"
#include "tools/crihookd/daemon.h"

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
  -h, --help           print this and exit

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
      std::puts(crihook::versionLine("crihookd", crihook::version(), crihook::commit()).c_str());
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
  auto daemon =
      crihook::Daemon::create(config, flags.config_file.empty() ? "flags" : flags.config_file);
  if (!daemon.ok()) {
    std::fprintf(stderr, "crihookd: %s\n", std::string(daemon.status().message()).c_str());
    return 1;
  }
  if (auto s = (*daemon)->start(); !s.ok()) {
    crihook::logger("crihookd")->critical("cannot start: {}", crihook::sv(s.message()));
    return 1;
  }
  (*daemon)->wait();
  (*daemon)->stop();
  return 0;
}
