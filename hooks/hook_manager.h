#pragma once

// Builds crihookd's hook chain from its configuration and keeps it current:
// the [[hook]] entries (built-in hooks, modules, crihook-protocol servers) in
// the order of the config file, then the Koordinator hook servers registered
// in [hooks] hookserver_dir, in file-name order. Files added, edited or
// removed there take effect within moments, without a restart: a new chain
// is built and swapped in (calls in flight finish with the one they began
// with).

#include <spdlog/logger.h>

#include <atomic>
#include <map>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "base/mutex.h"
#include "config/config.h"
#include "hooks/chain.h"
#include "hooks/process_env.h"
#include "hooks/registry.h"
#include "hooks/remote/hookserver_dir.h"

namespace crihook {

class HookManager {
 public:
  // Makes the configured hooks. An unknown built-in or bad settings is
  // INVALID_ARGUMENT naming the config entry (crihookd does not start); a
  // module that is refused (wrong ABI, missing symbol, failing init) is
  // logged naming the file and the reason, and left out: the daemon runs.
  // Reads hookserver_dir once.
  // With `metrics` (may be null; outlives the manager), every chain exports
  // per hook and stage numbers there, and built-in hooks get it too.
  // hookserver_dir is read and watched through `env` (outlives the
  // manager), which the built-in hooks get as well.
  static absl::StatusOr<std::unique_ptr<HookManager>> create(const Config& config,
                                                             const HookRegistry& registry,
                                                             std::shared_ptr<spdlog::logger> log,
                                                             metrics::Registry* metrics = nullptr,
                                                             Env& env = processEnv());
  ~HookManager();  // stops watching

  const ChainHolder& chains() const { return chains_; }

  // Re-reads hookserver_dir and swaps in a new chain if anything changed. A
  // file that became invalid keeps its last valid registration (logged); a
  // removed file removes its server. Thread-safe.
  void reload();

  // Starts a thread ("hook-dir-watch") that calls reload() whenever hookserver_dir changes
  // (Env::watchDirectory: inotify; until the directory exists, a look for it
  // every second). The destructor ends it at once.
  void watch();

  // Starts a thread ("hook-reconcile") that asks the runtime at `endpoint` for its sandboxes
  // (ListPodSandbox; retried with backoff until it answers) and hands them
  // to every configured hook that is a Reconciler (runtime_sandboxes.h), then
  // does so again every `every`. Returns at once; does nothing when no hook
  // is one.
  void reconcileWithRuntime(const std::string& endpoint,
                            std::chrono::milliseconds every = std::chrono::minutes(5));
  // Makes that thread's next pass start now (the runtime just said what it
  // has: NRI's Synchronize). Non-blocking; nothing without the thread.
  void reconcileNow();
  // The reconciler's wait before it lists the runtime's sandboxes again
  // after a listing that failed, `last` being the wait before (0 at the first
  // failure): 0.5 s, doubled each time, at most 30 s.
  static std::chrono::milliseconds listingRetryAfter(std::chrono::milliseconds last);

 private:
  HookManager(const Config& config, std::shared_ptr<spdlog::logger> log, Env& env);
  void publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  // The watcher thread ("hook-dir-watch"): reload() on every change.
  void watchLoop();
  // The reconciler thread ("hook-reconcile"): a pass, then the next one
  // after `every` (or reconcileNow()); retried with backoff while the runtime
  // does not answer.
  void reconcileLoop(const std::string& endpoint, std::chrono::milliseconds every,
                     const std::vector<std::shared_ptr<Hook>>& hooks);
  // Waits up to `wait` for reconcileNow(); false when stopping.
  bool waitForNextPass(std::chrono::milliseconds wait);
  bool stopping();

  const Config config_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<metrics::HookMetrics> hook_metrics_;  // null without a registry
  struct Entry {
    std::shared_ptr<Hook> hook;
    HookSettings settings;
    // Made once, handed to every chain: a reload neither doubles the pool
    // nor strands its stuck workers (hooks/executor.h).
    std::shared_ptr<HookExecutor> executor;
  };
  std::vector<Entry> configured_;  // made by create(), then read only
  Mutex reload_mu_;                // one reload at a time
  std::map<std::string, std::pair<HookServerRegistration, std::shared_ptr<Hook>>> servers_
      ABSL_GUARDED_BY(reload_mu_);  // by file
  bool published_ ABSL_GUARDED_BY(reload_mu_) = false;
  // What the directory's bounds last left unread (readHookServerDir's line).
  std::string skipped_ ABSL_GUARDED_BY(reload_mu_);
  ChainHolder chains_{std::make_shared<HookChain>(nullptr)};
  MountPolicy mount_policy_;  // [security.mounts], given to every chain published
  Env& env_;
  std::unique_ptr<DirectoryWatch> watch_;  // made by watch(), before watcher_ starts
  std::thread watcher_;
  Mutex stop_mu_;
  CondVar stop_cv_;  // stopping_ or reconcile_now_ set
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool reconcile_now_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread reconciler_;
};

}  // namespace crihook
