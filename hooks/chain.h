#pragma once

// The ordered hook chain: every hook subscribed to a stage runs, in the
// configured order, each bounded by its timeout and the caller's deadline,
// its failure handled by its policy, and the adjustments merged with
// ownership recorded.

#include <spdlog/logger.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/current.h"
#include "config/config.h"
#include "hooks/executor.h"
#include "hooks/hook.h"
#include "hooks/mount_policy.h"
#include "metrics/hook_metrics.h"

namespace crihook {

enum class FailurePolicy {
  kFail,    // a failing hook fails the CRI call, naming the hook
  kIgnore,  // a failing hook is logged and counted; the call goes on without its adjustment
};

struct HookSettings {
  std::chrono::milliseconds timeout{2000};
  FailurePolicy failure_policy = FailurePolicy::kFail;
  std::vector<std::string> wins_over;  // hooks whose conflicting values this one overrides
  // A Koordinator hook server (hookserver_dir): its differing values are
  // decided by the chain's field owners (setOwners), not refused.
  bool koordinator = false;
  // The executor a hook that may block gets when add() is given none
  // (hooks/executor.h; config/config.h has the reasons of the defaults).
  size_t workers = kDefaultHookWorkers;
  size_t queue = kDefaultHookQueue;
};

struct ChainOutcome {
  absl::Status status;  // OK, a rejection, a Fail-policy failure, or a conflict
  MergedAdjustment merged;
  std::vector<std::string> ran;      // hook names, in order
  std::vector<std::string> ignored;  // "hook NAME: reason" for failures that were ignored
};

struct HookCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> timeouts{0};
  // The exported series of this hook per stage (method x phase), looked up
  // on its first run there.
  std::array<std::atomic<metrics::HookStageMetrics*>, 16> exported{};
};

class HookChain {
 public:
  // `metrics` (may be null) outlives the chain; the exported numbers, unlike
  // counters(), carry on across chains.
  explicit HookChain(std::shared_ptr<spdlog::logger> log, metrics::HookMetrics* metrics = nullptr);

  // Appends a hook. Set up the chain before the first run(); not to be
  // called concurrently with run(). A hook that may block (neither
  // runsInline() nor honoursDeadline()) runs on `executor`, which may be
  // shared with other chains (HookManager keeps one per hook across
  // reloads); null: the chain makes one from `settings`.
  void add(std::shared_ptr<Hook> hook, HookSettings settings,
           std::shared_ptr<HookExecutor> executor = nullptr);

  // Makes the executor for `hook` as add() would (null for a hook that needs
  // none), exporting to `metrics` (may be null).
  static std::shared_ptr<HookExecutor> makeExecutor(const Hook& hook, const HookSettings& settings,
                                                    std::shared_ptr<spdlog::logger> log,
                                                    metrics::HookMetrics* metrics);

  // The mounts hooks may add (mount_policy.h); the defaults until set. A
  // pre-stage adjustment with a refused mount fails the call with
  // PERMISSION_DENIED naming the hook, whatever the hook's failure policy
  // (an Ignore hook's refused mount is not quietly dropped: the pod would
  // run without what it asked for, and nobody would look). Set up before
  // the first run().
  void setMountPolicy(MountPolicy policy) { mount_policy_ = std::move(policy); }

  // Who decides a field that a crihook hook and a Koordinator hook server
  // set to values that differ ([hooks.owners]); the defaults until set.
  // Values that name the same thing (hooks/ownership.h) are never a
  // conflict; the owner's spelling is kept. Each value that lost is
  // logged, one line per call naming the pod, the loser, its value and the
  // rule. Set up before the first run().
  void setOwners(FieldOwners owners) { owners_ = owners; }

  // Runs the stage. Blocking (up to the sum of the subscribers' timeouts,
  // never past `deadline`); call it on a worker thread. Thread-safe.
  // Post-phase outcomes are always OK: post-stage failures are logged and
  // counted, they never change the reply.
  ChainOutcome run(const HookInput& input, std::chrono::steady_clock::time_point deadline) const;

  const HookCounters& counters(const std::string& hook) const;
  std::vector<std::string> names() const;

  // How many hooks subscribe to the stage.
  size_t subscribers(LifecycleMethod method, Phase phase) const;
  // Whether a hook that applies to this call (Hook::appliesTo) and may
  // block subscribes to its stage: the call then needs a worker thread; one
  // that only inline hooks concern (a pod that opts out of Koordinator's
  // hook servers, say) runs where it is and waits for no other call.
  bool mayBlock(const HookInput& input) const;
  // The stage's subscribers that do not run inline, with their timeouts:
  // what may hold the stage up to their sum (NRI mode's budget,
  // nri/budget.h).
  std::vector<std::pair<std::string, std::chrono::milliseconds>> blockingSubscribers(
      LifecycleMethod method, Phase phase) const;

 private:
  struct Entry {
    std::shared_ptr<Hook> hook;
    HookSettings settings;
    std::unique_ptr<HookCounters> counters;
    std::shared_ptr<HookExecutor> executor;  // null for inline and deadline-honouring hooks
  };
  HookDecision runOne(const Entry& e, const HookInput& input, std::chrono::milliseconds budget,
                      bool& timed_out, bool& refused) const;
  metrics::HookStageMetrics* exported(const Entry& e, const HookInput& input) const;
  // The configured precedence (`wins_over`): whether `winner` overrides `loser`.
  bool wins(const std::string& winner, const std::string& loser) const;
  // How a claim on a key another hook holds with a different value ends.
  MergedAdjustment::Resolution resolve(const FieldKey& key, const std::string& holder,
                                       std::string_view held, const std::string& claimant,
                                       std::string_view claimed,
                                       const topology::Snapshot* topology) const;
  bool isKoordinator(const std::string& hook) const;
  void logOverrides(const HookInput& input, const MergedAdjustment& merged) const;

  std::shared_ptr<spdlog::logger> log_;
  metrics::HookMetrics* metrics_;
  std::vector<Entry> entries_;
  MountPolicy mount_policy_;
  FieldOwners owners_ = kDefaultFieldOwners;
};

// The chain in force. Reloading (a hook server registered or removed)
// builds a new chain and swaps it in whole; a call keeps the chain it started
// with for its pre and post stages.
using ChainHolder = Current<HookChain>;

}  // namespace crihook
