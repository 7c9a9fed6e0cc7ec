#include "hooks/builtin/lifecycle/lifecycle_hook.h"

#include <optional>
#include <set>

#include "base/logging.h"
#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/builtin/lifecycle/device_holders.h"
#include "hooks/builtin/lifecycle/lifecycle_metrics.h"
#include "hooks/builtin/lifecycle/lifecycle_settings.h"
#include "hooks/builtin/lifecycle/pod_devices.h"
#include "hooks/builtin/lifecycle/record_keeper.h"
#include "hooks/builtin/lifecycle/records.h"
#include "hooks/builtin/lifecycle/retry_schedule.h"
#include "hooks/builtin/lifecycle/sandbox_slots.h"
#include "hooks/process_env.h"
#include "hooks/runtime_sandboxes.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;
using Clock = std::chrono::steady_clock;

// The hook put together from its parts, each with its own job and lock:
// the sandboxes' slots (sandbox_slots.h), the shared devices' holders
// (device_holders.h), the records (record_keeper.h), the counts
// (lifecycle_metrics.h) and the retries of failed cleanups with their thread
// (retry_schedule.h). Everything done for one sandbox runs under its slot's
// lock; the parts' locks are leaves taken under it, one at a time.
class LifecycleHook final : public Hook, public Reconciler {
 public:
  LifecycleHook(const std::string& name, LifecycleSettings settings, const BuiltinContext& context)
      : name_(name),
        log_(logger("hook." + name)),
        settings_(std::move(settings)),
        env_(context.env ? context.env : &processEnv()),
        metrics_(context.metrics, name),
        records_(settings_.state_dir, *env_, metrics_, log_),
        retry_(env_->clock(), settings_.retry_initial, settings_.retry_max,
               [this](const SandboxKey& key) { retryDue(key); }) {}
  // The retry thread goes first: it uses every other part.
  ~LifecycleHook() override { retry_.stop(); }

  // Reads the records a previous crihookd left, then starts the retry
  // thread. FAILED_PRECONDITION as RecordKeeper::open.
  absl::Status start();

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
  // A record read at start: its slot, its place in the index, its devices'
  // holders and its retry.
  void load(DeviceRecord rec);

  HookDecision initialise(const HookInput& in);
  // The cleanups earlier sandboxes of the pod owe, done first; the reason
  // (UNAVAILABLE) when one fails.
  absl::Status cleanupEarlierSandboxes(const SandboxKey& key, const std::string& pod,
                                       Clock::time_point deadline);
  // The cleanups other sandboxes still owe on `devices` (their last user's
  // failed, or waits for the retry thread), done first: the pod is never
  // given a device before it is cleaned up after the last. The reason
  // (UNAVAILABLE) when one fails.
  absl::Status cleanupOwedOn(const std::vector<DeviceFacts>& devices, const SandboxKey& key,
                             const std::string& pod, Clock::time_point deadline);
  HookDecision initialiseIn(Slot& s, const SandboxKey& key, const std::string& pod,
                            std::vector<DeviceFacts> devices, const HookInput& in)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Runs the init actions of s.record's devices; FAILED_PRECONDITION naming
  // the device and the action that failed, after cleaning up; UNAVAILABLE
  // when a device's record cannot be written before its init (the state
  // folder's disk full), after cleaning up what came before.
  absl::Status initDevices(Slot& s, Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void afterRun(const HookInput& in);
  void afterRunIn(Slot& s, const HookInput& in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void afterStop(const HookInput& in);

  // Runs every cleanup action `r` owes, persisting progress; OK when
  // nothing is left owing. Caller holds the lock of r's slot.
  // An init stopped (`why`, with `code`): the devices touched so far cleaned
  // up by `deadline`, or left to the retry thread; the status to answer.
  absl::Status refuseInit(Slot& s, std::string why, absl::StatusCode code,
                          Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  absl::Status cleanup(DeviceRecord& r, Clock::time_point deadline);
  // One device's cleanup actions; the reason of the first that fails.
  absl::Status cleanupDevice(const DeviceRecord& r, const DeviceFacts& d,
                             Clock::time_point deadline);
  // Runs the cleanup the sandbox owes, if any; forgets it once it is cleaned
  // up and gone, or retries the cleanup later.
  void cleanupOrRetry(Slot& s, Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // A failed cleanup, tried again after the backoff of its failure count.
  void retryLater(const DeviceRecord& r);
  // The retry thread's: a cleanup now due.
  void retryDue(const SandboxKey& key);
  // Forgets a sandbox that is cleaned up and gone.
  void forget(Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Squares one slot with the runtime's list; true when a cleanup of it is
  // newly owed.
  bool reconcileSlot(const SandboxKey& key, Slot& s, const std::vector<RuntimeSandbox>& sandboxes,
                     int64_t listed_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  const std::string name_;
  const std::shared_ptr<spdlog::logger> log_;
  const LifecycleSettings settings_;
  Env* const env_;
  LifecycleMetrics metrics_;
  RecordKeeper records_;
  SandboxSlots slots_;
  DeviceHolders holders_;
  RetrySchedule retry_;
};

absl::Status LifecycleHook::start() {
  std::vector<std::string> errors;
  auto loaded = records_.open(name_, errors);
  if (!loaded.ok()) return loaded.status();
  // Holders first, then what the others owe: a device a loaded pod still
  // shares is left to it, not owed.
  for (const DeviceRecord& rec : *loaded) {
    if (rec.phase == DevicePhase::kInitialising || rec.phase == DevicePhase::kReady)
      (void)holders_.claim(rec);  // nothing is owed yet: cannot be refused
  }
  for (const DeviceRecord& rec : *loaded) {
    if (rec.phase == DevicePhase::kCleanupPending) holders_.release(rec);
  }
  for (DeviceRecord& rec : *loaded) load(std::move(rec));
  for (const std::string& e : errors) log_->error("{}", e);
  retry_.start();
  return absl::OkStatus();
}

void LifecycleHook::load(DeviceRecord rec) {
  log_->info("pod {}/{} (attempt {}): {} device(s), {}", rec.pod.namespace_, rec.pod.name,
             rec.key.attempt, rec.devices.size(), phaseName(rec.phase));
  if (rec.phase == DevicePhase::kCleanupPending) retry_.schedule(rec.key, {});
  const SandboxKey key = rec.key;
  const std::string sandbox_id = rec.sandbox_id;
  auto s = std::make_shared<Slot>();
  {
    MutexLock lock(s->mu);
    s->from_disk = true;
    s->record = std::move(rec);
  }
  slots_.add(key, std::move(s), sandbox_id);
}

HookDecision LifecycleHook::initialise(const HookInput& in) {
  const auto& meta = in.pod->config().metadata();
  const std::string pod = cat(meta.namespace_(), "/", meta.name());
  const SandboxKey key{meta.uid(), meta.attempt()};

  // A cleanup still owed by an earlier sandbox of this pod comes first: its
  // devices are about to be initialised again.
  if (auto st = cleanupEarlierSandboxes(key, pod, in.deadline); !st.ok())
    return HookDecision::reject(st);

  const auto& annotations = in.pod->config().annotations();
  auto text = annotations.find(std::string(kDeviceAllocatedAnnotation));
  auto devices = podDevices(text == annotations.end() ? nullptr : &text->second, in.topology.get(),
                            pod, settings_, *log_);
  if (!devices.ok()) return HookDecision::reject(devices.status());
  if (devices->empty()) return HookDecision::proceed();
  if (auto st = cleanupOwedOn(*devices, key, pod, in.deadline); !st.ok())
    return HookDecision::reject(st);

  HookDecision decision;
  slots_.withSlot(key, /*create=*/true, [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    decision = initialiseIn(s, key, pod, std::move(*devices), in);
  });
  return decision;
}

absl::Status LifecycleHook::cleanupEarlierSandboxes(const SandboxKey& key, const std::string& pod,
                                                    Clock::time_point deadline) {
  for (auto& [k, s] : slots_.all()) {
    if (k.uid != key.uid || k.attempt == key.attempt) continue;
    MutexLock lock(s->mu);
    if (!s->record || s->record->phase == DevicePhase::kCleaned) continue;
    log_->info("pod {}: cleaning up after its earlier sandbox (attempt {}) first", pod, k.attempt);
    if (auto st = cleanup(*s->record, deadline); !st.ok()) {
      retryLater(*s->record);
      return absl::UnavailableError(cat("pod ", pod,
                                        ": the devices of its earlier sandbox (attempt ", k.attempt,
                                        ") are not cleaned up yet: ", st.message()));
    }
    if (s->record->removed) forget(*s);
  }
  return absl::OkStatus();
}

absl::Status LifecycleHook::cleanupOwedOn(const std::vector<DeviceFacts>& devices,
                                          const SandboxKey& key, const std::string& pod,
                                          Clock::time_point deadline) {
  for (const DeviceFacts& d : devices) {
    // Each sandbox owing d at most once: one that cleaned up no longer owes it.
    std::set<SandboxKey> tried;
    for (auto owner = holders_.owedBy(d, key); owner && tried.insert(*owner).second;
         owner = holders_.owedBy(d, key)) {
      absl::Status st = absl::OkStatus();
      const bool known = slots_.withSlot(*owner, /*create=*/false, [&](Slot& o)
                                             ABSL_EXCLUSIVE_LOCKS_REQUIRED(o.mu) {
        if (!o.record || o.record->phase != DevicePhase::kCleanupPending) return;
        DeviceRecord& r = *o.record;
        log_->info("pod {}: {} is owed its cleanup after pod {}/{}; cleaning up first", pod,
                   d.describe(), r.pod.namespace_, r.pod.name);
        if (st = cleanup(r, deadline); !st.ok()) {
          retryLater(r);
          st = absl::UnavailableError(cat("pod ", pod, ": ", d.describe(),
                                          " is not cleaned up yet after pod ", r.pod.namespace_,
                                          "/", r.pod.name, ", which used it last: ", st.message()));
          return;
        }
        if (r.removed) forget(o);
      });
      if (!known) holders_.cleaned(d, *owner);  // forgotten meanwhile: nothing left to clean
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

HookDecision LifecycleHook::initialiseIn(Slot& s, const SandboxKey& key, const std::string& pod,
                                         std::vector<DeviceFacts> devices, const HookInput& in) {
  if (s.record) {
    DeviceRecord& r = *s.record;
    if (r.phase == DevicePhase::kReady) {
      log_->info("pod {} (attempt {}): devices already initialised; nothing to do again", pod,
                 key.attempt);
      ++s.running_calls;
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
  const auto& meta = in.pod->config().metadata();
  DeviceRecord r;
  r.key = key;
  r.pod = {meta.namespace_(), meta.name(), meta.uid()};
  r.devices = std::move(devices);
  if (auto st = records_.create(r); !st.ok()) {
    return HookDecision::reject(absl::UnavailableError(
        cat("pod ", pod,
            ": devices not initialised, their cleanup could not be guaranteed: ", st.message())));
  }
  s.record = std::move(r);
  if (auto st = initDevices(s, in.deadline); !st.ok()) return HookDecision::reject(st);
  DeviceRecord& rec = *s.record;
  rec.touched = rec.devices.size();
  rec.phase = DevicePhase::kReady;
  records_.save(rec);
  ++s.running_calls;
  return HookDecision::proceed();
}

absl::Status LifecycleHook::initDevices(Slot& s, Clock::time_point deadline) {
  DeviceRecord& rec = *s.record;
  const std::string pod = cat(rec.pod.namespace_, "/", rec.pod.name);
  auto claimed = holders_.claim(rec);
  if (!claimed.ok()) {
    return refuseInit(
        s, cat("pod ", pod, ": devices not initialised: ", claimed.status().message()),
        absl::StatusCode::kUnavailable, deadline);
  }
  const std::vector<std::string>& shared_with = *claimed;
  for (size_t i = 0; i < rec.devices.size(); ++i) {
    const DeviceFacts& d = rec.devices[i];
    const auto& actions = settings_.actionsOf(d.type).init;
    if (actions.empty()) continue;
    rec.touched = i + 1;
    // On disk before the device is touched: a crash or a restart after the
    // init then owes its cleanup. A record that cannot be written stops
    // the init here, with what was touched so far cleaned up.
    if (absl::Status w = records_.write(rec); !w.ok()) {
      rec.touched = i;
      return refuseInit(s,
                        cat("pod ", pod, ": init of ", d.describe(),
                            " not started: its record cannot be written (", w.message(),
                            "), so its cleanup could not be guaranteed"),
                        absl::StatusCode::kUnavailable, deadline);
    }
    if (!shared_with[i].empty()) {
      log_->info("pod {}: {} is shared with pod {}, which initialised it", pod, d.describe(),
                 shared_with[i]);
      continue;
    }
    for (size_t k = 0; k < actions.size(); ++k) {
      absl::Status st = actions[k].run(d, rec.pod, settings_.roots, deadline, *env_);
      if (st.ok()) {
        log_->info("pod {}: init of {}: {}: done", pod, d.describe(), actions[k].describe());
        continue;
      }
      metrics_.initFailed(d.type);
      return refuseInit(s,
                        cat("pod ", pod, ": init of ", d.describe(), " failed: action ", k, " (",
                            actions[k].describe(), "): ", st.message()),
                        absl::StatusCode::kFailedPrecondition, deadline);
    }
    metrics_.initDone(d.type);
  }
  return absl::OkStatus();
}

absl::Status LifecycleHook::refuseInit(Slot& s, std::string why, absl::StatusCode code,
                                       Clock::time_point deadline) {
  DeviceRecord& rec = *s.record;
  log_->error("{}", why);
  rec.removed = true;  // no sandbox will be made for this init
  // Bounded by the call's deadline too: what is not cleaned up by then
  // (an init cut at the deadline leaves no time) is the retry thread's,
  // so kubelet's call never waits past its bound for a cleanup.
  if (auto c = cleanup(rec, deadline); c.ok()) {
    why += rec.touched > 0 ? "; the devices initialised so far were cleaned up" : "";
    forget(s);
  } else {
    why += cat("; their cleanup failed and is retried: ", c.message());
    retryLater(rec);
  }
  return absl::Status(code, why);
}

void LifecycleHook::afterRun(const HookInput& in) {
  const auto& meta = in.pod->config().metadata();
  slots_.withSlot({meta.uid(), meta.attempt()}, /*create=*/false,
                  [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { afterRunIn(s, in); });
}

void LifecycleHook::afterRunIn(Slot& s, const HookInput& in) {
  if (!s.record) return;
  DeviceRecord& r = *s.record;
  if (s.running_calls > 0) --s.running_calls;
  if (in.backend_status.ok() && in.response) {
    r.sandbox_id = static_cast<const v1::RunPodSandboxResponse&>(*in.response).pod_sandbox_id();
    records_.save(r);
    slots_.index(r.sandbox_id, r.key);
    return;
  }
  // After a timeout or a cancellation the runtime may yet have created the
  // sandbox, and a retry meanwhile is refused because it exists ("name is
  // reserved"): keep the devices for it. Reconciling cleans up if it never
  // appears.
  const auto code = in.backend_status.code();
  if (code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kCancelled ||
      code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAlreadyExists) {
    s.maybe_created = true;
    return;
  }
  if (s.maybe_created || s.running_calls > 0 || !r.sandbox_id.empty() ||
      r.phase != DevicePhase::kReady)
    return;
  log_->info("pod {}/{}: the runtime refused the sandbox ({}); cleaning up its devices",
             r.pod.namespace_, r.pod.name, sv(in.backend_status.message()));
  r.removed = true;
  cleanupOrRetry(s, in.deadline);  // the rest, if any, on the retry thread
}

void LifecycleHook::afterStop(const HookInput& in) {
  const auto code = in.backend_status.code();
  if (!in.backend_status.ok() && code != absl::StatusCode::kNotFound) return;
  const bool remove = in.method == LifecycleMethod::kRemovePodSandbox;
  const std::string id =
      remove ? static_cast<const v1::RemovePodSandboxRequest&>(*in.request).pod_sandbox_id()
             : static_cast<const v1::StopPodSandboxRequest&>(*in.request).pod_sandbox_id();
  std::optional<SandboxKey> key = slots_.keyOf(id);
  if (!key && in.pod)
    key = SandboxKey{in.pod->config().metadata().uid(), in.pod->config().metadata().attempt()};
  if (!key) return;
  slots_.withSlot(*key, /*create=*/false, [&](Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (!s.record) return;
    if (remove) s.record->removed = true;
    cleanupOrRetry(s, in.deadline);
  });
}

absl::Status LifecycleHook::cleanup(DeviceRecord& r, Clock::time_point deadline) {
  if (r.cleaned.size() != r.devices.size()) r.cleaned.assign(r.devices.size(), false);
  r.phase = DevicePhase::kCleanupPending;
  records_.save(r);
  holders_.release(r);
  const std::string pod = cat(r.pod.namespace_, "/", r.pod.name);
  std::string failed;
  for (size_t i = r.touched; i-- > 0;) {
    if (r.cleaned[i]) continue;
    const DeviceFacts& d = r.devices[i];
    if (const std::string other = holders_.heldBy(d, r.key); !other.empty()) {
      log_->info("pod {}: {} is still used by pod {}; its cleanup is left to the last user", pod,
                 d.describe(), other);
      r.cleaned[i] = true;
      holders_.cleaned(d, r.key);
      continue;
    }
    if (auto st = cleanupDevice(r, d, deadline); !st.ok()) {
      failed += cat(failed.empty() ? "" : "; ", st.message());
      continue;
    }
    r.cleaned[i] = true;
    holders_.cleaned(d, r.key);
    metrics_.cleanupDone(d.type);
    records_.save(r);
  }
  if (failed.empty()) {
    r.phase = DevicePhase::kCleaned;
    r.cleanup_failures = 0;
    r.last_error.clear();
  } else {
    ++r.cleanup_failures;
    r.last_error = failed;
  }
  records_.save(r);
  return failed.empty() ? absl::OkStatus() : absl::UnavailableError(failed);
}

absl::Status LifecycleHook::cleanupDevice(const DeviceRecord& r, const DeviceFacts& d,
                                          Clock::time_point deadline) {
  const auto& actions = settings_.actionsOf(d.type).cleanup;
  for (size_t k = 0; k < actions.size(); ++k) {
    absl::Status st = actions[k].run(d, r.pod, settings_.roots, deadline, *env_);
    if (st.ok()) {
      log_->info("pod {}/{}: cleanup of {}: {}: done", r.pod.namespace_, r.pod.name, d.describe(),
                 actions[k].describe());
      continue;
    }
    const std::string why = cat("cleanup of ", d.describe(), ": action ", k, " (",
                                actions[k].describe(), "): ", st.message());
    log_->error("pod {}/{}: {}", r.pod.namespace_, r.pod.name, why);
    metrics_.cleanupFailed(d.type);
    return absl::UnavailableError(why);
  }
  return absl::OkStatus();
}

void LifecycleHook::cleanupOrRetry(Slot& s, Clock::time_point deadline) {
  DeviceRecord& r = *s.record;
  if (r.phase != DevicePhase::kCleaned && !cleanup(r, deadline).ok()) {
    retryLater(r);
    return;
  }
  if (r.removed) forget(s);
}

void LifecycleHook::retryLater(const DeviceRecord& r) {
  const std::chrono::milliseconds delay = retry_.backoff(r.cleanup_failures);
  log_->warn("pod {}/{}: cleanup retried in {}ms (failure {}): {}", r.pod.namespace_, r.pod.name,
             delay.count(), r.cleanup_failures, r.last_error);
  retry_.schedule(r.key, delay);
}

void LifecycleHook::retryDue(const SandboxKey& key) {
  std::shared_ptr<Slot> s = slots_.find(key);
  if (!s) return;
  MutexLock lock(s->mu);
  if (s->record && s->record->phase == DevicePhase::kCleanupPending)
    cleanupOrRetry(*s, Clock::time_point::max());
}

void LifecycleHook::forget(Slot& s) {
  const DeviceRecord& r = *s.record;
  records_.remove(r);
  holders_.release(r);
  slots_.forget(r.key, r.sandbox_id);
  s.record.reset();
}

void LifecycleHook::reconcile(const std::vector<RuntimeSandbox>& sandboxes,
                              std::chrono::system_clock::time_point listed_at) {
  const int64_t listed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(listed_at.time_since_epoch()).count();
  size_t owed = 0;
  for (auto& [key, s] : slots_.all()) {
    MutexLock lock(s->mu);
    if (reconcileSlot(key, *s, sandboxes, listed_ms)) ++owed;
  }
  log_->info("reconciled with the runtime's {} sandbox(es): {} cleanup(s) owed", sandboxes.size(),
             owed);
}

bool LifecycleHook::reconcileSlot(const SandboxKey& key, Slot& s,
                                  const std::vector<RuntimeSandbox>& sandboxes, int64_t listed_ms) {
  if (!s.record) return false;
  DeviceRecord& r = *s.record;
  const bool from_disk = s.from_disk;
  s.from_disk = false;
  // Changed since the list was taken: the list cannot say.
  if (!from_disk && r.changed_ms >= listed_ms) return false;
  const RuntimeSandbox* live = nullptr;
  for (const RuntimeSandbox& x : sandboxes) {
    if ((!r.sandbox_id.empty() && x.id == r.sandbox_id) ||
        (r.sandbox_id.empty() && x.uid == key.uid && x.attempt == key.attempt))
      live = &x;
  }
  if (live && live->ready) {
    if (r.sandbox_id.empty()) {
      r.sandbox_id = live->id;
      slots_.index(r.sandbox_id, key);
      records_.save(r);
    }
    return false;
  }
  // No sandbox yet, while crihookd ran: it may still be on its way (kubelet
  // retries RunPodSandbox), until the grace runs out.
  if (!live && !from_disk && r.sandbox_id.empty() &&
      listed_ms - r.changed_ms < settings_.orphan_grace.count())
    return false;
  if (live) {
    if (r.sandbox_id.empty()) slots_.index(live->id, key);
    r.sandbox_id = live->id;
  } else {
    r.removed = true;
  }
  if (r.phase == DevicePhase::kCleaned) {
    if (r.removed) {
      forget(s);
    } else {
      records_.save(r);
    }
    return false;
  }
  const bool scheduled = r.phase == DevicePhase::kCleanupPending && !from_disk;
  if (!scheduled) {
    const char* what = live                    ? "was stopped"
                       : !r.sandbox_id.empty() ? "was removed"
                                               : "was never created";
    log_->info("pod {}/{} (attempt {}): its sandbox {}{}; cleaning up", r.pod.namespace_,
               r.pod.name, key.attempt, what,
               from_disk ? " while crihookd was down" : " without crihookd seeing it");
  }
  r.phase = DevicePhase::kCleanupPending;
  records_.save(r);
  holders_.release(r);  // its devices are free for the next pod's init from now on
  if (!scheduled) retry_.schedule(key, std::chrono::milliseconds(0));
  return !scheduled;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeDeviceLifecycleHook(const std::string& name,
                                                              const std::string& settings_json,
                                                              const BuiltinContext& context) {
  auto settings = LifecycleSettings::parse(name, settings_json, context);
  if (!settings.ok()) return settings.status();
  auto hook = std::make_shared<LifecycleHook>(name, std::move(*settings), context);
  if (auto s = hook->start(); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
