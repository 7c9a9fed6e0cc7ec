#pragma once

// The Interceptor crihookd runs: the proxy's seam (proxy/interceptor.h)
// driven by the hook chain and the state store.
//
// Pre-stage: the context is assembled (the pod and container records from
// the StateStore, or the configuration being created), the chain's
// subscribers run (on a worker pool, unless every one of them runs inline),
// their merged adjustment is applied to the request (CreateContainer,
// RunPodSandbox, UpdateContainerResources), a rejection or failure answers
// kubelet. Post-stage: once the runtime answered, the records are updated
// (a created sandbox or container is stored with what the hooks decided and
// what went to the runtime; a removed one is forgotten), then the chain runs
// with the runtime's answer; it never changes the reply.
//
// The hooks' resource decisions are stored with the container and applied
// again on every UpdateContainerResources, so kubelet's CPU manager cannot
// undo a hook's cpuset, across crihookd restarts too.

#include <memory>
#include <string>

#include "base/growing_pool.h"
#include "cri/interceptor.h"
#include "hooks/chain.h"
#include "hooks/state_store.h"
#include "topology/holder.h"

namespace crihook {

class HookInterceptor final : public Interceptor {
 public:
  // `chains`, `state` and `topology` (when given) must outlive this.
  // A stage that a hook that may block applies to runs on a "hook-stage"
  // thread, one per stage in flight up to `workers` (started when needed,
  // base/growing_pool.h): a stage held by a slow hook server holds its own
  // thread, not the next call's. Stages only inline hooks apply to run on
  // the caller's thread. Hooks see `topology`'s snapshot as it was when
  // their call began.
  HookInterceptor(const ChainHolder& chains, StateStore& state, std::shared_ptr<spdlog::logger> log,
                  size_t workers = kDefaultHookStages,
                  const topology::SnapshotHolder* topology = nullptr);
  ~HookInterceptor() override;  // waits for running hooks

  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override;
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override;

 private:
  struct CallState;
  void assembleContext(const InterceptedCall& call, CallState& cs) const;
  static HookInput inputOf(const InterceptedCall& call, const CallState& cs, Phase phase);
  absl::Status runPre(InterceptedCall& call, CallState& cs);
  void record(const InterceptedCall& call, CallState& cs);
  void runPost(InterceptedCall& call, const CallState& cs);

  const ChainHolder& chains_;
  StateStore& state_;
  const topology::SnapshotHolder* topology_;
  std::shared_ptr<spdlog::logger> log_;
  // Last: its destructor runs every stage posted before the members they use go.
  GrowingPool pool_;
};

}  // namespace crihook
