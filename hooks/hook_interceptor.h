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

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cri/interceptor.h"
#include "hooks/chain.h"
#include "hooks/state_store.h"
#include "topology/holder.h"

namespace crihook {

class HookInterceptor final : public Interceptor {
 public:
  // `chains`, `state` and `topology` (when given) must outlive this.
  // `workers` threads ("hook-stage") run hooks that may block; hooks see
  // `topology`'s snapshot as it was when their call began.
  HookInterceptor(const ChainHolder& chains, StateStore& state, std::shared_ptr<spdlog::logger> log,
                  size_t workers = 4, const topology::SnapshotHolder* topology = nullptr);
  ~HookInterceptor() override;  // waits for running hooks

  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override;
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override;

 private:
  struct CallState;
  void assembleContext(const InterceptedCall& call, CallState& cs) const;
  absl::Status runPre(InterceptedCall& call, CallState& cs);
  void record(const InterceptedCall& call, CallState& cs);
  void runPost(InterceptedCall& call, const CallState& cs);

  const ChainHolder& chains_;
  StateStore& state_;
  const topology::SnapshotHolder* topology_;
  std::shared_ptr<spdlog::logger> log_;
  // The worker pool: `workers` threads running pool_ until pool_work_ is
  // let go and every stage posted has run.
  boost::asio::io_context pool_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> pool_work_;
  std::vector<std::thread> workers_;
};

}  // namespace crihook
