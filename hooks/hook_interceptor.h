#pragma once

// The Interceptor crihookd runs when hooks are configured: the proxy's seam
// (proxy/interceptor.h) driven by a HookChain.
//
// Pre-stage: the chain's subscribers run (on a worker pool, unless every one
// of them runs inline), their merged adjustment is applied to the request
// (CreateContainer, RunPodSandbox, UpdateContainerResources), a rejection or
// failure answers kubelet. What the hooks decided for a container's resources
// is remembered from CreateContainer and applied again on every
// UpdateContainerResources, so kubelet's CPU manager cannot undo a hook's
// cpuset. Post-stage: the chain runs with the runtime's answer; it never
// changes the reply.

#include <boost/asio/thread_pool.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "chain.h"
#include "interceptor.h"

namespace crihook {

class HookInterceptor final : public Interceptor {
 public:
  // `chain` must outlive this. `workers` threads run hooks that may block.
  HookInterceptor(const HookChain& chain, std::shared_ptr<spdlog::logger> log, size_t workers = 4);
  ~HookInterceptor() override;  // waits for running hooks

  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override;
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override;

  // What the hooks decided for `container_id`'s resources (empty if nothing).
  Adjustment resourcesOf(const std::string& container_id) const;

 private:
  absl::Status runPre(InterceptedCall& call);
  void runPost(InterceptedCall& call);

  const HookChain& chain_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::thread_pool pool_;
  mutable std::mutex mu_;
  std::map<std::string, Adjustment> container_resources_;  // container id -> resource decisions
};

}  // namespace crihook
