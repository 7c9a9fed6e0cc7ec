#include "hooks/hook_manager.h"

#include <filesystem>

#include "base/text.h"
#include "base/thread_name.h"
#include "hooks/module/module_hook.h"
#include "hooks/module/module_host.h"
#include "hooks/remote/remote_hooks.h"
#include "hooks/runtime_sandboxes.h"

namespace crihook {

namespace {

// How a module with isolation = "process" is run: crihookd's own filter and
// capabilities ([security]) for its helper.
ModuleIsolation moduleIsolation(const Config& config) {
  ModuleIsolation m;
  m.host = config.module_host;
  m.seccomp = config.seccomp;
  m.capabilities = "none";
  for (size_t i = 0; i < config.capabilities.size(); ++i)
    m.capabilities = cat(i == 0 ? "" : m.capabilities + ",", config.capabilities[i]);
  return m;
}

// How often a missing hookserver_dir is looked for.
constexpr std::chrono::seconds kHookServerDirPoll(1);
// A burst of changes is read once it has been quiet this long, or after
// kSettleRounds of them (a directory that never stops changing is still read).
constexpr std::chrono::milliseconds kSettle(20);
constexpr int kSettleRounds = 10;

}  // namespace

HookManager::HookManager(const Config& config, std::shared_ptr<spdlog::logger> log, Env& env)
    : config_(config), log_(std::move(log)), env_(env) {}

absl::StatusOr<std::unique_ptr<HookManager>> HookManager::create(
    const Config& config, const HookRegistry& registry, std::shared_ptr<spdlog::logger> log,
    metrics::Registry* metrics, Env& env) {
  std::unique_ptr<HookManager> m(new HookManager(config, std::move(log), env));
  if (metrics) m->hook_metrics_ = std::make_unique<metrics::HookMetrics>(*metrics);
  auto policy = MountPolicy::fromConfig(config);
  if (!policy.ok()) return policy.status();
  m->mount_policy_ = std::move(*policy);
  for (const HookConfig& h : config.hooks) {
    if (!h.enabled) {
      m->log_->info("{}: disabled (enabled = false)", h.origin);
      continue;
    }
    HookSettings settings;
    settings.timeout = h.timeout;
    settings.failure_policy = h.ignore_failures ? FailurePolicy::kIgnore : FailurePolicy::kFail;
    settings.wins_over = h.wins_over;
    settings.workers = static_cast<size_t>(h.workers);
    settings.queue = static_cast<size_t>(h.queue);
    std::shared_ptr<Hook> hook;
    if (!h.builtin.empty()) {
      auto made = registry.create(h.builtin, h.name, h.settings_json,
                                  BuiltinContext{config.state_dir, config.topology_root,
                                                 config.backend_endpoint, metrics, &env});
      if (!made.ok())
        return absl::InvalidArgumentError(cat(h.origin, ": ", made.status().message()));
      hook = *made;
    } else if (!h.module.empty()) {
      const std::string path = h.module[0] == '/'
                                   ? h.module
                                   : (std::filesystem::path(config.module_dir) / h.module).string();
      auto made = h.isolated ? loadIsolatedModuleHook(h.name, path, h.settings_json,
                                                      moduleIsolation(config), m->log_)
                             : loadModuleHook(h.name, path, h.settings_json);
      if (!made.ok()) {
        m->log_->error("{}: module refused, hook left out: {}", h.origin,
                       sv(made.status().message()));
        continue;
      }
      hook = *made;
      m->log_->info("{}: module {} loaded{}", h.origin, path,
                    h.isolated ? " in a helper process" : "");
    } else {
      std::vector<StageId> stages;
      for (size_t i = 0; i < h.stages.size(); ++i) {
        auto stage = parseStage(h.stages[i]);
        if (!stage.ok()) {
          return absl::InvalidArgumentError(
              cat(h.origin, ".stages[", i, "]: ", stage.status().message()));
        }
        stages.push_back(*stage);
      }
      hook = makeCrihookRemoteHook(h.name, *unixSocketPath(h.endpoint), std::move(stages),
                                   {static_cast<size_t>(h.workers), static_cast<size_t>(h.queue)});
    }
    auto executor = HookChain::makeExecutor(*hook, settings, m->log_, m->hook_metrics_.get());
    m->configured_.push_back({std::move(hook), std::move(settings), std::move(executor)});
  }
  m->reload();
  return m;
}

HookManager::~HookManager() {
  {
    MutexLock lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notifyAll();
  if (reconciler_.joinable()) reconciler_.join();
  if (watcher_.joinable()) {
    watch_->stop();
    watcher_.join();
  }
}

void HookManager::reconcileWithRuntime(const std::string& endpoint,
                                       std::chrono::milliseconds every) {
  std::vector<std::shared_ptr<Hook>> hooks;
  for (const Entry& e : configured_) {
    if (dynamic_cast<Reconciler*>(e.hook.get())) hooks.push_back(e.hook);
  }
  if (hooks.empty() || reconciler_.joinable()) return;
  reconciler_ = namedThread("hook-reconcile", [this, endpoint, every, hooks = std::move(hooks)] {
    reconcileLoop(endpoint, every, hooks);
  });
}

void HookManager::reconcileLoop(const std::string& endpoint, std::chrono::milliseconds every,
                                const std::vector<std::shared_ptr<Hook>>& hooks) {
  std::chrono::milliseconds retry(0);
  for (;;) {
    const auto listed_at = std::chrono::system_clock::now();
    auto sandboxes = listRuntimeSandboxes(endpoint, std::chrono::seconds(10));
    std::chrono::milliseconds wait = every;
    if (sandboxes.ok()) {
      for (const auto& h : hooks) dynamic_cast<Reconciler&>(*h).reconcile(*sandboxes, listed_at);
      retry = std::chrono::milliseconds(0);
    } else {
      log_->warn("cannot reconcile hook records with the runtime yet: {}",
                 sv(sandboxes.status().message()));
      retry = listingRetryAfter(retry);
      wait = retry;
    }
    if (!waitForNextPass(wait)) return;
  }
}

std::chrono::milliseconds HookManager::listingRetryAfter(std::chrono::milliseconds last) {
  const std::chrono::milliseconds first(500), most(30000);
  return last < first ? first : std::min(last * 2, most);
}

bool HookManager::waitForNextPass(std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  MutexLock lock(stop_mu_);
  while (!stopping_ && !reconcile_now_) {
    if (stop_cv_.waitUntil(lock, until) == std::cv_status::timeout) break;
  }
  if (stopping_) return false;
  reconcile_now_ = false;
  return true;
}

void HookManager::reconcileNow() {
  {
    MutexLock lock(stop_mu_);
    reconcile_now_ = true;
  }
  stop_cv_.notifyAll();
}

void HookManager::reload() {
  MutexLock lock(reload_mu_);
  if (config_.hookserver_dir.empty()) {
    if (!published_) publish();
    return;
  }
  bool changed = false;
  std::map<std::string, std::pair<HookServerRegistration, std::shared_ptr<Hook>>> next;
  HookServerDir dir = readHookServerDir(config_.hookserver_dir, env_);
  // Said again when it changes, not on every re-read.
  if (dir.skipped != skipped_ && !dir.skipped.empty()) log_->warn("{}", dir.skipped);
  skipped_ = dir.skipped;
  for (HookServerFile& f : dir.files) {
    auto old = servers_.find(f.file);
    if (!f.registration.ok()) {
      if (old != servers_.end()) {
        log_->error("{}; its previous registration stays in force",
                    sv(f.registration.status().message()));
        next.insert(*old);
      } else {
        log_->error("{}; not registered", sv(f.registration.status().message()));
      }
      continue;
    }
    HookServerRegistration& r = *f.registration;
    if (old != servers_.end() && old->second.first.text == r.text) {
      next.insert(*old);
      continue;
    }
    std::string stages;
    for (const StageId& s : r.stages)
      stages += cat(stages.empty() ? "" : ",", stageName(s.method, s.phase));
    log_->info("hook server {} {}: {} on {}, failure policy {}", r.file,
               old == servers_.end() ? "registered" : "changed", r.socket_path, stages,
               r.ignore_failures ? "Ignore" : "Fail");
    // Once per version of the file: an unchanged file is not read again above.
    for (const std::string& w : r.warnings) log_->warn("hook server {}: {}", r.file, w);
    auto hook = makeKoordinatorHook(r.name, r.socket_path, r.stages);
    const std::string file = r.file;
    next[file] = {std::move(r), std::move(hook)};
    changed = true;
  }
  for (const auto& [file, entry] : servers_) {
    if (!next.count(file)) {
      log_->info("hook server {} removed", file);
      changed = true;
    }
  }
  servers_ = std::move(next);
  if (changed || !published_) publish();
}

void HookManager::publish() {
  auto chain = std::make_shared<HookChain>(log_, hook_metrics_.get());
  chain->setMountPolicy(mount_policy_);
  chain->setOwners(config_.owners);
  for (const Entry& e : configured_) chain->add(e.hook, e.settings, e.executor);
  for (const auto& [file, entry] : servers_) {
    HookSettings s;
    s.timeout = config_.hookserver_timeout;
    s.failure_policy = entry.first.ignore_failures ? FailurePolicy::kIgnore : FailurePolicy::kFail;
    s.koordinator = true;
    chain->add(entry.second, s);
  }
  std::string names;
  for (const auto& n : chain->names()) names += cat(names.empty() ? "" : ", ", n);
  chains_.set(std::move(chain));
  // After the swap: a call that follows this line runs with this chain.
  log_->info("hook chain: {}", names.empty() ? "no hooks" : names);
  published_ = true;
}

void HookManager::watch() {
  if (config_.hookserver_dir.empty() || watcher_.joinable()) return;
  watch_ = env_.watchDirectory(config_.hookserver_dir, kHookServerDirPoll);
  watcher_ = namedThread("hook-dir-watch", [this] { watchLoop(); });
}

void HookManager::watchLoop() {
  for (;;) {
    if (!watch_->wait(std::chrono::minutes(1))) {
      if (stopping()) return;
      continue;
    }
    // Let a burst of events (an editor's write and rename) settle, then
    // read the directory once.
    for (int i = 0; i < kSettleRounds && watch_->wait(kSettle); ++i) {
    }
    if (stopping()) return;
    reload();
  }
}

bool HookManager::stopping() {
  MutexLock lock(stop_mu_);
  return stopping_;
}

}  // namespace crihook
