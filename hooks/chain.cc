#include "hooks/chain.h"

#include <exception>
#include <stdexcept>

#include "base/quote.h"
#include "base/text.h"
#include "hooks/adjustment_schema.h"
#include "hooks/ownership.h"

namespace crihook {

using Clock = std::chrono::steady_clock;

HookChain::HookChain(std::shared_ptr<spdlog::logger> log, metrics::HookMetrics* metrics)
    : log_(std::move(log)), metrics_(metrics) {}

metrics::HookStageMetrics* HookChain::exported(const Entry& e, const HookInput& input) const {
  if (metrics_ == nullptr) return nullptr;
  const size_t i = static_cast<size_t>(input.method) * 2 + (input.phase == Phase::kPost ? 1 : 0);
  if (i >= e.counters->exported.size()) return nullptr;
  metrics::HookStageMetrics* m = e.counters->exported[i].load(std::memory_order_acquire);
  if (m == nullptr) {
    m = &metrics_->of(e.hook->name(), stageName(input.method, input.phase));
    e.counters->exported[i].store(m, std::memory_order_release);
  }
  return m;
}

std::shared_ptr<HookExecutor> HookChain::makeExecutor(const Hook& hook,
                                                      const HookSettings& settings,
                                                      std::shared_ptr<spdlog::logger> log,
                                                      metrics::HookMetrics* metrics) {
  if (hook.runsInline() || hook.honoursDeadline()) return nullptr;
  return std::make_shared<HookExecutor>(hook.name(), settings.workers, settings.queue,
                                        std::move(log),
                                        metrics ? &metrics->executor(hook.name()) : nullptr);
}

void HookChain::add(std::shared_ptr<Hook> hook, HookSettings settings,
                    std::shared_ptr<HookExecutor> executor) {
  if (!executor) executor = makeExecutor(*hook, settings, log_, metrics_);
  entries_.push_back(Entry{std::move(hook), std::move(settings), std::make_unique<HookCounters>(),
                           std::move(executor)});
}

const HookCounters& HookChain::counters(const std::string& hook) const {
  for (const Entry& e : entries_) {
    if (e.hook->name() == hook) return *e.counters;
  }
  throw std::out_of_range("no hook " + hook);
}

std::vector<std::string> HookChain::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.hook->name());
  return out;
}

size_t HookChain::subscribers(LifecycleMethod method, Phase phase) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.hook->subscribes(method, phase);
  return n;
}

bool HookChain::mayBlock(const HookInput& input) const {
  for (const Entry& e : entries_) {
    if (e.hook->subscribes(input.method, input.phase) && !e.hook->runsInline() &&
        e.hook->appliesTo(input))
      return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::chrono::milliseconds>> HookChain::blockingSubscribers(
    LifecycleMethod method, Phase phase) const {
  std::vector<std::pair<std::string, std::chrono::milliseconds>> out;
  for (const Entry& e : entries_) {
    if (e.hook->subscribes(method, phase) && !e.hook->runsInline())
      out.emplace_back(e.hook->name(), e.settings.timeout);
  }
  return out;
}

bool HookChain::wins(const std::string& winner, const std::string& loser) const {
  for (const Entry& e : entries_) {
    if (e.hook->name() != winner) continue;
    for (const std::string& l : e.settings.wins_over) {
      if (l == loser) return true;
    }
  }
  return false;
}

bool HookChain::isKoordinator(const std::string& hook) const {
  for (const Entry& e : entries_) {
    if (e.hook->name() == hook) return e.settings.koordinator;
  }
  return false;
}

MergedAdjustment::Resolution HookChain::resolve(const FieldKey& key, const std::string& holder,
                                                std::string_view held, const std::string& claimant,
                                                std::string_view claimed,
                                                const topology::Snapshot* topology) const {
  using How = MergedAdjustment::Resolution::How;
  const bool holder_koord = isKoordinator(holder), claimant_koord = isKoordinator(claimant);
  const OwnerClassSpec& cls = kOwnerClasses[static_cast<size_t>(ownerClassOf(key))];
  const OwnerSide side = owners_[static_cast<size_t>(cls.cls)];
  const auto sideOf = [](bool koord) {
    return koord ? OwnerSide::kKoordinator : OwnerSide::kCrihook;
  };
  if (sameDecision(key, held, claimed, topology)) {
    // One decision: the container gets the owner's spelling (crihook's GPU
    // UUIDs rather than koordlet's minors).
    if (holder_koord != claimant_koord && side == sideOf(claimant_koord))
      return {How::kClaimantTakes, ""};
    return {How::kSame, ""};
  }
  if (wins(claimant, holder)) return {How::kClaimantTakes, ""};
  if (wins(holder, claimant)) return {How::kHolderKeeps, ""};
  if (holder_koord == claimant_koord || side == OwnerSide::kRefuse) return {How::kConflict, ""};
  std::string why = cat("[hooks.owners] ", cls.key, " = \"", ownerSideName(side), "\"");
  return {side == sideOf(claimant_koord) ? How::kClaimantTakes : How::kHolderKeeps, std::move(why)};
}

void HookChain::logOverrides(const HookInput& input, const MergedAdjustment& merged) const {
  if (!log_ || merged.overrides().empty()) return;
  std::string what;
  for (const MergedAdjustment::Override& o : merged.overrides()) {
    const std::string_view name = fieldSpec(o.key.field).name;
    what += cat(what.empty() ? "" : "; ", "hook ", o.loser, "'s ", name,
                o.key.key.empty() ? "" : cat(" ", quote(o.key.key, 128)), " ",
                o.lost_value == kRemoved ? std::string(kRemoved) : quote(o.lost_value, 256),
                " overridden by hook ", o.winner, " (", o.why, ")");
  }
  std::string who = "a pod crihook does not know";
  if (input.identity != nullptr) {
    who =
        cat("pod ", quote(cat(input.identity->pod_namespace, "/", input.identity->pod_name), 320));
    if (!input.identity->container_name.empty())
      who += cat(" container ", quote(input.identity->container_name, 128));
  }
  log_->info("{}",
             boundedMessage(cat(stageName(input.method, input.phase), " of ", who, ": ", what)));
}

namespace {

HookDecision call(Hook& hook, const HookInput& input) {
  try {
    return hook.run(input);
  } catch (const std::exception& e) {
    return HookDecision::error(absl::InternalError(cat("threw: ", e.what())));
  } catch (...) {
    return HookDecision::error(absl::InternalError("threw a non-standard exception"));
  }
}

}  // namespace

HookDecision HookChain::runOne(const Entry& e, const HookInput& input,
                               std::chrono::milliseconds budget, bool& timed_out,
                               bool& refused) const {
  const auto start = Clock::now();
  if (!e.executor) {
    HookDecision d;
    if (e.hook->honoursDeadline()) {
      HookInput bounded = input;
      bounded.deadline = start + budget;
      d = call(*e.hook, bounded);
    } else {
      d = call(*e.hook, input);  // inline hooks do not wait: no deadline to pass
    }
    if (Clock::now() - start > budget) {
      e.counters->timeouts.fetch_add(1);
      timed_out = true;
      // A failure it reported itself (a remote call's DEADLINE_EXCEEDED) or a
      // rejection (a device init that failed at its deadline) says more.
      if (d.kind != HookDecision::Kind::kContinue) return d;
      return HookDecision::error(absl::DeadlineExceededError(
          cat("ran ",
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count(),
              "ms, over its ", budget.count(), "ms")));
    }
    return d;
  }
  // On the hook's executor (hooks/executor.h): a call that overruns is
  // answered at once and its worker left to finish. The task works on its
  // own copy of the input, so an abandoned hook never reads a request the
  // caller has freed.
  struct Copy {
    std::unique_ptr<google::protobuf::Message> request, response;
    CallIdentity identity;
    HookInput input;
  };
  auto copy = std::make_shared<Copy>();
  copy->input = input;
  copy->input.deadline = start + budget;
  if (input.request) {
    copy->request.reset(input.request->New());
    copy->request->CopyFrom(*input.request);
    copy->input.request = copy->request.get();
  }
  if (input.response) {
    copy->response.reset(input.response->New());
    copy->response->CopyFrom(*input.response);
    copy->input.response = copy->response.get();
  }
  if (input.identity) {
    copy->identity = *input.identity;
    copy->input.identity = &copy->identity;
  }
  HookExecutor::Result r =
      e.executor->run([copy, hook = e.hook] { return call(*hook, copy->input); }, budget);
  switch (r.how) {
    case HookExecutor::How::kAnswered:
      break;
    case HookExecutor::How::kTimedOut:
      e.counters->timeouts.fetch_add(1);
      timed_out = true;
      break;
    case HookExecutor::How::kUnhealthy:
      refused = true;
      break;
    case HookExecutor::How::kQueueFull:
    case HookExecutor::How::kStopped:
      break;
  }
  return std::move(r.decision);
}

ChainOutcome HookChain::run(const HookInput& input, Clock::time_point deadline) const {
  const topology::Snapshot* topology = input.topology.get();
  auto resolver = [this, topology](const FieldKey& key, const std::string& holder,
                                   std::string_view held, const std::string& claimant,
                                   std::string_view claimed) {
    return resolve(key, holder, held, claimant, claimed, topology);
  };
  ChainOutcome out{absl::OkStatus(), MergedAdjustment(resolver), {}, {}};
  // Only messages need the stage's name.
  auto stage = [&] { return stageName(input.method, input.phase); };
  for (const Entry& e : entries_) {
    if (!e.hook->subscribes(input.method, input.phase) || !e.hook->appliesTo(input)) continue;
    const std::string& name = e.hook->name();
    auto budget = e.settings.timeout;
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= std::chrono::milliseconds::zero()) {
        out.status = absl::DeadlineExceededError(
            cat(stage(), ": the caller's deadline passed before hook ", name));
        return out;
      }
      budget = std::min(budget, left);
    }
    e.counters->calls.fetch_add(1);
    out.ran.push_back(name);
    const auto started = Clock::now();
    bool timed_out = false, refused = false;
    HookDecision d = runOne(e, input, budget, timed_out, refused);
    metrics::HookStageMetrics* m = exported(e, input);
    if (m) {
      m->calls.inc();
      m->duration.observe(std::chrono::duration<double>(Clock::now() - started).count());
      if (timed_out) m->timeouts.inc();
    }

    if (d.kind == HookDecision::Kind::kReject && input.phase == Phase::kPre) {
      if (m) m->rejections.inc();
      out.status = absl::Status(
          d.status.code(),
          boundedMessage(cat("hook ", name, " rejected ", stage(), ": ", sv(d.status.message()))));
      return out;
    }
    if (d.kind != HookDecision::Kind::kContinue) {
      e.counters->failures.fetch_add(1);
      if (m) m->failures.inc();
      // What a hook answered is its own text: bounded before it reaches the
      // log and the caller.
      const std::string why =
          boundedMessage(cat("hook ", name, " failed in ", stage(), ": ", sv(d.status.message())));
      if (input.phase == Phase::kPost || e.settings.failure_policy == FailurePolicy::kIgnore) {
        // An unhealthy hook was logged once when it became so (executor.h).
        if (log_ && !refused) log_->warn("{} (ignored)", why);
        out.ignored.push_back(why);
        continue;
      }
      out.status = absl::Status(
          d.status.code() == absl::StatusCode::kOk ? absl::StatusCode::kInternal : d.status.code(),
          why);
      return out;
    }
    if (input.phase == Phase::kPost) continue;  // post-stage adjustments change nothing
    if (d.adjustment.empty()) continue;         // nothing to merge
    if (absl::Status s = mount_policy_.check(name, d.adjustment); !s.ok()) {
      e.counters->failures.fetch_add(1);
      out.status = absl::Status(s.code(), cat(stage(), ": ", sv(s.message())));
      if (log_) log_->error("{}", sv(out.status.message()));
      return out;
    }
    if (absl::Status s = out.merged.add(name, d.adjustment); !s.ok()) {
      out.status = absl::FailedPreconditionError(cat(stage(), ": ", sv(s.message())));
      return out;
    }
  }
  logOverrides(input, out.merged);
  return out;
}

}  // namespace crihook
