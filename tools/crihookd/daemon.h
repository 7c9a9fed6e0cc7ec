#pragma once

// crihookd's life: start-up, reload and shutdown, for main (flag parsing
// only) and for anything else that runs the daemon in a process of its own.
//
// Start-up order (docs/security.md "Confinement", docs/architecture.md "Start-up
// order"); it is security-relevant and start() keeps it exactly:
//   1. the systemd-activated socket is taken (before any thread or child),
//   2. the spawner is forked while the process has one thread, and installed
//      as the process launcher,
//   3. capabilities are dropped to [security] capabilities,
//   4. SIGTERM/SIGINT/SIGHUP are blocked (taken by wait()), SIGPIPE ignored,
//   5. metrics registry, 6. state store loaded, 7. hooks made and watched,
//   8. topology discovered, 9. interceptor, 10. server listening (not yet
//   accepting), 11. metrics endpoint, 12. reconcile with the runtime,
//   13. seccomp filter installed (every thread), 14. serve, 15. readiness
//   true, 16. READY=1 to systemd.
// In NRI mode ([server] mode = "nri") there is no CRI socket: an activated
// one stops start-up (1); hookserver_dir is not read while koordlet's own
// NRI plugin acts (7); 10 is the check that every NRI event's hooks fit
// under the runtime's plugin timeout (nri/budget.h; start-up stops naming
// the event and hooks otherwise) and the NRI front is made; 14 starts it
// connecting, and readiness follows its registration (15).
// Process-wide effects (the launcher, the capability drop, the filter, the
// signal mask) cannot be undone: one Daemon per process, for its lifetime.

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace crihook {

namespace nri {
struct Synchronized;
}

class Daemon {
 public:
  // Checks what start() needs from the validated `config` ([security],
  // [metrics]); `origin` names the config file (or "flags") in messages.
  // INVALID_ARGUMENT naming the key. Sets the log level; nothing else is
  // touched.
  static absl::StatusOr<std::unique_ptr<Daemon>> create(const Config& config,
                                                        const std::string& origin);
  ~Daemon();

  // Steps 1-16 above, on the calling thread (main's: the signals are taken
  // by it). The first failure is returned naming what could not start; the
  // process should exit then (what was set up is not rolled back, except
  // that a started server is shut down at once).
  absl::Status start();

  // Blocks until SIGTERM or SIGINT; each SIGHUP meanwhile calls reload().
  // Returns the signal that ended it. Call after a successful start().
  int wait();

  // SIGHUP: rediscovers the node's topology (hooks see the new snapshot from
  // their next call). Thread-safe with the calls in flight.
  void reload();

  // STOPPING=1, readiness false, then the server's graceful shutdown:
  // in-flight calls get up to [daemon] shutdown_grace. Returns how many were
  // cut at its end (logged).
  int64_t stop();

 private:
  struct Parts;
  Daemon() = default;
  // start()'s steps, each returning the first failure (the numbers above).
  absl::Status takeSocketAndConfine();  // 1-3: one thread only
  absl::Status loadStateAndHooks();     // 6, 7
  absl::Status listenForKubelet();      // 10, proxy mode: the server and its gauges
  absl::Status prepareNriFront();       // 10, NRI mode: the budget checked, the front made
  absl::Status startMetricsEndpoint();  // 11
  absl::Status confineEveryThread();    // 13
  void serve();                         // 14-16
  // NRI mode: makes the front and its metrics (not started).
  void startNriFront();
  // NRI's Synchronize: the state store squared with what the runtime has,
  // pods it has no record of logged and counted, a reconcile pass now.
  void synchronize(const nri::Synchronized& sync);
  std::unique_ptr<Parts> parts_;
};

}  // namespace crihook
