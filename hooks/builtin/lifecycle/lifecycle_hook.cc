#include "hooks/builtin/lifecycle/lifecycle_hook.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/logging.h"
#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/builtin/lifecycle/lifecycle_settings.h"
#include "hooks/builtin/lifecycle/pod_devices.h"
#include "hooks/builtin/lifecycle/records.h"
#include "hooks/process_env.h"
#include "hooks/runtime_sandboxes.h"
#include "metrics/hook_metrics.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;
using Clock = std::chrono::steady_clock;

class LifecycleHook final : public Hook, public Reconciler {
 public:
  ~LifecycleHook() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  absl::Status init(const std::string& name, const std::string& settings_json,
                    const BuiltinContext& context);

  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return (m == LifecycleMethod::kRunPodSandbox) ||
           (p == Phase::kPost &&
            (m == LifecycleMethod::kStopPodSandbox || m == LifecycleMethod::kRemovePodSandbox));
  }
  // Each action is bounded by HookInput::deadline (actions.h).
  bool honoursDeadline() const override { return true; }

  HookDecision run(const HookInput& in) override {
    switch (in.method) {
      case LifecycleMethod::kRunPodSandbox:
        if (in.phase == Phase::kPre) return initialise(in);
        afterRun(in);
        return HookDecision::proceed();
      case LifecycleMethod::kStopPodSandbox:
      case LifecycleMethod::kRemovePodSandbox:
        afterStop(in);
        return HookDecision::proceed();
      default:
        return HookDecision::proceed();
    }
  }

  void reconcile(const std::vector<RuntimeSandbox>& sandboxes,
                 std::chrono::system_clock::time_point listed_at) override;

 private:
  // One sandbox's record, and the lock that serialises everything done for it.
  struct Slot {
    std::mutex mu;
    std::optional<DeviceRecord> record;
    bool from_disk = false;  // read at start: reconcile() squares it with the runtime
    // RunPodSandbox calls for this sandbox between their pre and post stage,
    // and whether one ended so that the runtime may have made the sandbox
    // anyway: then a failed call does not clean up (the sandbox may exist).
    int running_calls = 0;
    bool maybe_created = false;
  };

  // The sandbox's slot, locked; null when there is none and !create. A slot
  // forgotten while we waited for its lock is not returned: a record put in
  // it would be lost.
  std::pair<std::shared_ptr<Slot>, std::unique_lock<std::mutex>> lockSlot(const SandboxKey& key,
                                                                          bool create) {
    for (;;) {
      std::shared_ptr<Slot> s;
      {
        std::lock_guard lock(mu_);
        auto it = slots_.find(key);
        if (it != slots_.end()) {
          s = it->second;
        } else if (create) {
          s = slots_[key] = std::make_shared<Slot>();
        } else {
          return {};
        }
      }
      std::unique_lock slot_lock(s->mu);
      std::lock_guard lock(mu_);
      auto it = slots_.find(key);
      if (it != slots_.end() && it->second == s) return {std::move(s), std::move(slot_lock)};
    }
  }
  std::vector<std::pair<SandboxKey, std::shared_ptr<Slot>>> allSlots() {
    std::lock_guard lock(mu_);
    return {slots_.begin(), slots_.end()};
  }
  void indexSandbox(const std::string& id, const SandboxKey& key) {
    std::lock_guard lock(mu_);
    by_sandbox_[id] = key;
  }

  HookDecision initialise(const HookInput& in);
  void afterRun(const HookInput& in);
  void afterStop(const HookInput& in);

  // Caller holds the slot's lock. Each runs every action it owes, persisting
  // progress; OK when nothing is left owing.
  absl::Status cleanup(DeviceRecord& r, Clock::time_point deadline);
  static int64_t nowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void save(DeviceRecord& r) {
    r.changed_ms = nowMs();
    if (auto s = records_.save(r); !s.ok()) log_->error("{}", sv(s.message()));
    notePending(r.key, r.phase == DevicePhase::kCleanupPending);
  }
  // Keeps crihook_device_cleanups_pending: every phase change goes through
  // save() or forget().
  void notePending(const SandboxKey& key, bool pending) {
    if (!metrics_) return;
    std::lock_guard lock(mu_);
    if (pending) {
      pending_.insert(key);
    } else {
      pending_.erase(key);
    }
    metrics_->pending.set(static_cast<int64_t>(pending_.size()));
  }
  // Forgets a sandbox that is cleaned up and gone. Caller holds the slot's lock.
  void forget(Slot& s) {
    const DeviceRecord& r = *s.record;
    if (auto st = records_.remove(r.key); !st.ok()) log_->error("{}", sv(st.message()));
    release(r);
    std::lock_guard lock(mu_);
    if (!r.sandbox_id.empty()) by_sandbox_.erase(r.sandbox_id);
    if (metrics_ && pending_.erase(r.key))
      metrics_->pending.set(static_cast<int64_t>(pending_.size()));
    slots_.erase(r.key);
    s.record.reset();
  }

  // A device shared by several pods (a GPU split by HAMi-core) is
  // initialised by the first of them and cleaned up after the last: a reset
  // must not pull it from under the others. Holders are the sandboxes whose
  // devices are initialising or ready.
  static std::string deviceId(const DeviceFacts& d) {
    return cat(d.type, ":", d.pci.empty() ? std::to_string(d.minor) : d.pci);
  }
  // Adds `r` as a holder of its devices; per device, the pod that held it
  // already (empty when `r` is the first).
  std::vector<std::string> claim(const DeviceRecord& r) {
    std::lock_guard lock(mu_);
    std::vector<std::string> others;
    for (const DeviceFacts& d : r.devices) {
      auto& holders = holders_[deviceId(d)];
      std::string other;
      for (const auto& [k, pod] : holders) {
        if (!(k == r.key)) other = pod;
      }
      holders[r.key] = cat(r.pod.namespace_, "/", r.pod.name);
      others.push_back(other);
    }
    return others;
  }
  void release(const DeviceRecord& r) {
    std::lock_guard lock(mu_);
    for (const DeviceFacts& d : r.devices) {
      auto it = holders_.find(deviceId(d));
      if (it == holders_.end()) continue;
      it->second.erase(r.key);
      if (it->second.empty()) holders_.erase(it);
    }
  }
  // A pod other than `key`'s that holds `d`; empty when none does.
  std::string heldBy(const DeviceFacts& d, const SandboxKey& key) {
    std::lock_guard lock(mu_);
    auto it = holders_.find(deviceId(d));
    if (it == holders_.end()) return "";
    for (const auto& [k, pod] : it->second) {
      if (!(k == key)) return pod;
    }
    return "";
  }
  // Runs the cleanup the sandbox owes, if any; forgets it once it is cleaned
  // up and gone, or retries the cleanup later. Caller holds the slot's lock.
  void cleanupOrRetry(Slot& s, Clock::time_point deadline) {
    DeviceRecord& r = *s.record;
    if (r.phase != DevicePhase::kCleaned && !cleanup(r, deadline).ok()) {
      retryLater(r);
      return;
    }
    if (r.removed) forget(s);
  }
  // A failed cleanup, tried again after the backoff of its failure count.
  void retryLater(const DeviceRecord& r) {
    auto delay = settings_.retry_initial;
    for (uint32_t i = 1; i < r.cleanup_failures && delay < settings_.retry_max; ++i) delay *= 2;
    if (delay > settings_.retry_max) delay = settings_.retry_max;
    log_->warn("pod {}/{}: cleanup retried in {}ms (failure {}): {}", r.pod.namespace_, r.pod.name,
               delay.count(), r.cleanup_failures, r.last_error);
    schedule(r.key, delay);
  }
  void schedule(const SandboxKey& key, std::chrono::milliseconds delay) {
    {
      std::lock_guard lock(mu_);
      due_[key] = env_->clock().now() + delay;
    }
    cv_.notify_all();
  }
  void retryLoop();

  std::string name_;
  std::shared_ptr<spdlog::logger> log_;
  LifecycleSettings settings_;  // set by init(), before the retry thread starts
  Env* env_ = &processEnv();
  DeviceRecordDir records_{""};
  std::mutex mu_;  // guards the maps below; never held while waiting for a slot's lock
  std::map<SandboxKey, std::shared_ptr<Slot>> slots_;
  std::map<std::string, SandboxKey> by_sandbox_;
  std::map<std::string, std::map<SandboxKey, std::string>> holders_;  // device id -> holders
  std::map<SandboxKey, Clock::time_point> due_;
  std::unique_ptr<metrics::DeviceMetrics> metrics_;  // null without a registry
  std::set<SandboxKey> pending_;                     // cleanup owed (phase cleanup-pending)
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread worker_;
};

absl::Status LifecycleHook::init(const std::string& name, const std::string& settings_json,
                                 const BuiltinContext& context) {
  name_ = name;
  log_ = logger("hook." + name);
  if (context.metrics) metrics_ = std::make_unique<metrics::DeviceMetrics>(*context.metrics, name);
  auto parsed = LifecycleSettings::parse(name, settings_json, context);
  if (!parsed.ok()) return parsed.status();
  settings_ = std::move(*parsed);

  if (context.env) env_ = context.env;
  records_ = DeviceRecordDir(settings_.state_dir, *env_);
  if (settings_.state_dir.empty()) {
    log_->warn("no state directory: a cleanup owed when crihookd stops is forgotten");
  } else if (auto s = records_.open(); !s.ok()) {
    return absl::FailedPreconditionError(cat("hook ", name, ": ", s.message()));
  }
  std::vector<std::string> errors, newer;
  std::vector<DeviceRecord> loaded = records_.loadAll(errors, /*quarantine=*/true, &newer);
  if (!newer.empty()) {
    // Such a record may owe a cleanup this build cannot read: serving without
    // it could hand uncleaned devices to the next pod. Stop start-up loudly.
    return absl::FailedPreconditionError(
        cat("hook ", name, ": ", newer.front(),
            newer.size() > 1 ? cat(" (and ", newer.size() - 1, " more)") : "",
            ". Run the crihookd that wrote it, or clean its devices by hand and move the file "
            "out of ",
            records_.dir()));
  }
  for (DeviceRecord& rec : loaded) {
    auto s = std::make_shared<Slot>();
    s->from_disk = true;
    if (!rec.sandbox_id.empty()) by_sandbox_[rec.sandbox_id] = rec.key;
    if (rec.phase == DevicePhase::kCleanupPending) {
      due_[rec.key] = env_->clock().now();
      pending_.insert(rec.key);
    }
    log_->info("pod {}/{} (attempt {}): {} device(s), {}", rec.pod.namespace_, rec.pod.name,
               rec.key.attempt, rec.devices.size(), phaseName(rec.phase));
    if (rec.phase == DevicePhase::kInitialising || rec.phase == DevicePhase::kReady) {
      for (const DeviceFacts& d : rec.devices)
        holders_[deviceId(d)][rec.key] = cat(rec.pod.namespace_, "/", rec.pod.name);
    }
    const SandboxKey key = rec.key;
    s->record = std::move(rec);
    slots_[key] = std::move(s);
  }
  for (const std::string& e : errors) log_->error("{}", e);
  if (metrics_) metrics_->pending.set(static_cast<int64_t>(pending_.size()));
  worker_ = std::thread([this] { retryLoop(); });
  return absl::OkStatus();
}

HookDecision LifecycleHook::initialise(const HookInput& in) {
  const auto& meta = in.pod->config().metadata();
  const std::string pod = cat(meta.namespace_(), "/", meta.name());
  const SandboxKey key{meta.uid(), meta.attempt()};

  // A cleanup still owed by an earlier sandbox of this pod comes first: its
  // devices are about to be initialised again.
  for (auto& [k, s] : allSlots()) {
    if (k.uid != key.uid || k.attempt == key.attempt) continue;
    std::lock_guard lock(s->mu);
    if (!s->record || s->record->phase == DevicePhase::kCleaned) continue;
    log_->info("pod {}: cleaning up after its earlier sandbox (attempt {}) first", pod, k.attempt);
    if (auto st = cleanup(*s->record, in.deadline); !st.ok()) {
      retryLater(*s->record);
      return HookDecision::reject(
          absl::UnavailableError(cat("pod ", pod, ": the devices of its earlier sandbox (attempt ",
                                     k.attempt, ") are not cleaned up yet: ", st.message())));
    }
    if (s->record->removed) forget(*s);
  }

  const auto& annotations = in.pod->config().annotations();
  auto text = annotations.find(std::string(kDeviceAllocatedAnnotation));
  auto devices = podDevices(text == annotations.end() ? nullptr : &text->second, in.topology.get(),
                            pod, settings_, *log_);
  if (!devices.ok()) return HookDecision::reject(devices.status());
  if (devices->empty()) return HookDecision::proceed();

  auto [s, lock] = lockSlot(key, /*create=*/true);
  if (s->record) {
    DeviceRecord& r = *s->record;
    if (r.phase == DevicePhase::kReady) {
      log_->info("pod {} (attempt {}): devices already initialised; nothing to do again", pod,
                 key.attempt);
      ++s->running_calls;
      return HookDecision::proceed();
    }
    if (r.phase != DevicePhase::kCleaned) {
      log_->info("pod {} (attempt {}): an earlier init did not finish ({}); cleaning up first", pod,
                 key.attempt, phaseName(r.phase));
      if (auto st = cleanup(r, in.deadline); !st.ok()) {
        retryLater(r);
        return HookDecision::reject(absl::UnavailableError(
            cat("pod ", pod,
                ": devices of an unfinished init are not cleaned up yet: ", st.message())));
      }
    }
  }
  DeviceRecord r;
  r.key = key;
  r.pod = {meta.namespace_(), meta.name(), meta.uid()};
  r.devices = std::move(*devices);
  r.changed_ms = nowMs();
  if (auto st = records_.save(r); !st.ok()) {
    if (!s->record) {
      std::lock_guard map_lock(mu_);
      slots_.erase(key);  // nothing was done for it
    }
    return HookDecision::reject(absl::UnavailableError(
        cat("pod ", pod,
            ": devices not initialised, their cleanup could not be guaranteed: ", st.message())));
  }
  s->record = r;
  DeviceRecord& rec = *s->record;
  const std::vector<std::string> shared_with = claim(rec);
  for (size_t i = 0; i < rec.devices.size(); ++i) {
    const DeviceFacts& d = rec.devices[i];
    const auto& actions = settings_.actionsOf(d.type).init;
    if (actions.empty()) continue;
    rec.touched = i + 1;
    save(rec);
    if (!shared_with[i].empty()) {
      log_->info("pod {}: {} is shared with pod {}, which initialised it", pod, d.describe(),
                 shared_with[i]);
      continue;
    }
    for (size_t k = 0; k < actions.size(); ++k) {
      absl::Status st = actions[k].run(d, rec.pod, settings_.roots, in.deadline, *env_);
      if (st.ok()) {
        log_->info("pod {}: init of {}: {}: done", pod, d.describe(), actions[k].describe());
        continue;
      }
      if (metrics_) metrics_->initFailures(d.type).inc();
      std::string why = cat("pod ", pod, ": init of ", d.describe(), " failed: action ", k, " (",
                            actions[k].describe(), "): ", st.message());
      log_->error("{}", why);
      rec.removed = true;  // no sandbox will be made for this init
      // Bounded by the call's deadline too: what is not cleaned up by then
      // (an init cut at the deadline leaves no time) is the retry thread's,
      // so kubelet's call never waits past its bound for a cleanup.
      if (auto c = cleanup(rec, in.deadline); c.ok()) {
        why += "; the devices initialised so far were cleaned up";
        forget(*s);
      } else {
        why += cat("; their cleanup failed and is retried: ", c.message());
        retryLater(rec);
      }
      return HookDecision::reject(absl::FailedPreconditionError(why));
    }
    if (metrics_) metrics_->inits(d.type).inc();
  }
  rec.touched = rec.devices.size();
  rec.phase = DevicePhase::kReady;
  save(rec);
  ++s->running_calls;
  return HookDecision::proceed();
}

void LifecycleHook::afterRun(const HookInput& in) {
  const auto& meta = in.pod->config().metadata();
  auto [s, lock] = lockSlot({meta.uid(), meta.attempt()}, /*create=*/false);
  if (!s || !s->record) return;
  DeviceRecord& r = *s->record;
  if (s->running_calls > 0) --s->running_calls;
  if (in.backend_status.ok() && in.response) {
    r.sandbox_id = static_cast<const v1::RunPodSandboxResponse&>(*in.response).pod_sandbox_id();
    save(r);
    indexSandbox(r.sandbox_id, r.key);
    return;
  }
  // After a timeout or a cancellation the runtime may yet have created the
  // sandbox, and a retry meanwhile is refused because it exists ("name is
  // reserved"): keep the devices for it. Reconciling cleans up if it never
  // appears.
  const auto code = in.backend_status.code();
  if (code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kCancelled ||
      code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAlreadyExists) {
    s->maybe_created = true;
    return;
  }
  if (s->maybe_created || s->running_calls > 0 || !r.sandbox_id.empty() ||
      r.phase != DevicePhase::kReady)
    return;
  log_->info("pod {}/{}: the runtime refused the sandbox ({}); cleaning up its devices",
             r.pod.namespace_, r.pod.name, sv(in.backend_status.message()));
  r.removed = true;
  cleanupOrRetry(*s, in.deadline);  // the rest, if any, on the retry thread
}

void LifecycleHook::afterStop(const HookInput& in) {
  const auto code = in.backend_status.code();
  if (!in.backend_status.ok() && code != absl::StatusCode::kNotFound) return;
  const bool remove = in.method == LifecycleMethod::kRemovePodSandbox;
  const std::string id =
      remove ? static_cast<const v1::RemovePodSandboxRequest&>(*in.request).pod_sandbox_id()
             : static_cast<const v1::StopPodSandboxRequest&>(*in.request).pod_sandbox_id();
  std::optional<SandboxKey> key;
  {
    std::lock_guard lock(mu_);
    if (auto it = by_sandbox_.find(id); it != by_sandbox_.end()) key = it->second;
  }
  if (!key && in.pod)
    key = SandboxKey{in.pod->config().metadata().uid(), in.pod->config().metadata().attempt()};
  if (!key) return;
  auto [s, lock] = lockSlot(*key, /*create=*/false);
  if (!s || !s->record) return;
  DeviceRecord& r = *s->record;
  if (remove) r.removed = true;
  cleanupOrRetry(*s, in.deadline);
}

absl::Status LifecycleHook::cleanup(DeviceRecord& r, Clock::time_point deadline) {
  if (r.cleaned.size() != r.devices.size()) r.cleaned.assign(r.devices.size(), false);
  r.phase = DevicePhase::kCleanupPending;
  save(r);
  release(r);
  const std::string pod = cat(r.pod.namespace_, "/", r.pod.name);
  std::string failed;
  for (size_t i = r.touched; i-- > 0;) {
    if (r.cleaned[i]) continue;
    const DeviceFacts& d = r.devices[i];
    if (const std::string other = heldBy(d, r.key); !other.empty()) {
      log_->info("pod {}: {} is still used by pod {}; its cleanup is left to the last user", pod,
                 d.describe(), other);
      r.cleaned[i] = true;
      continue;
    }
    bool ok = true;
    const auto& actions = settings_.actionsOf(d.type).cleanup;
    for (size_t k = 0; k < actions.size(); ++k) {
      absl::Status st = actions[k].run(d, r.pod, settings_.roots, deadline, *env_);
      if (st.ok()) {
        log_->info("pod {}: cleanup of {}: {}: done", pod, d.describe(), actions[k].describe());
        continue;
      }
      const std::string why = cat("cleanup of ", d.describe(), ": action ", k, " (",
                                  actions[k].describe(), "): ", st.message());
      log_->error("pod {}: {}", pod, why);
      if (metrics_) metrics_->cleanupFailures(d.type).inc();
      failed += cat(failed.empty() ? "" : "; ", why);
      ok = false;
      break;
    }
    if (ok) {
      r.cleaned[i] = true;
      if (metrics_) metrics_->cleanups(d.type).inc();
      save(r);
    }
  }
  if (failed.empty()) {
    r.phase = DevicePhase::kCleaned;
    r.cleanup_failures = 0;
    r.last_error.clear();
  } else {
    ++r.cleanup_failures;
    r.last_error = failed;
  }
  save(r);
  return failed.empty() ? absl::OkStatus() : absl::UnavailableError(failed);
}

void LifecycleHook::retryLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto next = due_.begin();
    for (auto it = due_.begin(); it != due_.end(); ++it) {
      if (it->second < next->second) next = it;
    }
    if (next->second > env_->clock().now()) {
      // By the env's clock: a test jumps it (lifecycle_fault_test.cc).
      env_->clock().waitUntil(cv_, lock, next->second);
      continue;
    }
    const SandboxKey key = next->first;
    due_.erase(next);
    auto found = slots_.find(key);
    if (found == slots_.end()) continue;
    std::shared_ptr<Slot> s = found->second;
    lock.unlock();
    {
      std::lock_guard slot_lock(s->mu);
      if (s->record && s->record->phase == DevicePhase::kCleanupPending) {
        cleanupOrRetry(*s, Clock::time_point::max());
      }
    }
    lock.lock();
  }
}

void LifecycleHook::reconcile(const std::vector<RuntimeSandbox>& sandboxes,
                              std::chrono::system_clock::time_point listed_at) {
  const int64_t listed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(listed_at.time_since_epoch()).count();
  size_t owed = 0;
  for (auto& [key, s] : allSlots()) {
    std::lock_guard lock(s->mu);
    if (!s->record) continue;
    DeviceRecord& r = *s->record;
    const bool from_disk = s->from_disk;
    s->from_disk = false;
    // Changed since the list was taken: the list cannot say.
    if (!from_disk && r.changed_ms >= listed_ms) continue;
    const RuntimeSandbox* live = nullptr;
    for (const RuntimeSandbox& x : sandboxes) {
      if ((!r.sandbox_id.empty() && x.id == r.sandbox_id) ||
          (r.sandbox_id.empty() && x.uid == key.uid && x.attempt == key.attempt))
        live = &x;
    }
    if (live && live->ready) {
      if (r.sandbox_id.empty()) {
        r.sandbox_id = live->id;
        indexSandbox(r.sandbox_id, key);
        save(r);
      }
      continue;
    }
    // No sandbox yet, while crihookd ran: it may still be on its way (kubelet
    // retries RunPodSandbox), until the grace runs out.
    if (!live && !from_disk && r.sandbox_id.empty() &&
        listed_ms - r.changed_ms < settings_.orphan_grace.count())
      continue;
    if (live) {
      if (r.sandbox_id.empty()) indexSandbox(live->id, key);
      r.sandbox_id = live->id;
    } else {
      r.removed = true;
    }
    if (r.phase == DevicePhase::kCleaned) {
      if (r.removed) {
        forget(*s);
      } else {
        save(r);
      }
      continue;
    }
    const bool scheduled = r.phase == DevicePhase::kCleanupPending && !from_disk;
    if (!scheduled) {
      const char* what = live                    ? "was stopped"
                         : !r.sandbox_id.empty() ? "was removed"
                                                 : "was never created";
      log_->info("pod {}/{} (attempt {}): its sandbox {}{}; cleaning up", r.pod.namespace_,
                 r.pod.name, key.attempt, what,
                 from_disk ? " while crihookd was down" : " without crihookd seeing it");
      ++owed;
    }
    r.phase = DevicePhase::kCleanupPending;
    save(r);
    release(r);  // its devices are free for the next pod's init from now on
    if (!scheduled) schedule(key, std::chrono::milliseconds(0));
  }
  log_->info("reconciled with the runtime's {} sandbox(es): {} cleanup(s) owed", sandboxes.size(),
             owed);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeDeviceLifecycleHook(const std::string& name,
                                                              const std::string& settings_json,
                                                              const BuiltinContext& context) {
  auto hook = std::make_shared<LifecycleHook>();
  if (auto s = hook->init(name, settings_json, context); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
