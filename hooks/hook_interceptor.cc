#include "hook_interceptor.h"

#include <boost/asio/post.hpp>

#include "apply.h"
#include "runtime_v1.pb.h"
#include "text.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

// Only the resource fields of an adjustment: what must survive updates.
Adjustment resourcesOnly(const Adjustment& a) {
  Adjustment r;
  r.cpuset_cpus = a.cpuset_cpus;
  r.cpuset_mems = a.cpuset_mems;
  r.cpu_shares = a.cpu_shares;
  r.cpu_quota = a.cpu_quota;
  r.cpu_period = a.cpu_period;
  r.memory_limit_bytes = a.memory_limit_bytes;
  r.hugepage_limits = a.hugepage_limits;
  r.unified = a.unified;
  return r;
}

HookInput inputOf(const InterceptedCall& call, Phase phase) {
  HookInput in;
  in.method = call.method;
  in.phase = phase;
  in.api = call.api;
  in.request = call.request.get();
  in.identity = &call.identity;
  in.response = call.response.get();
  in.backend_status = call.backend_status;
  return in;
}

}  // namespace

HookInterceptor::HookInterceptor(const HookChain& chain, std::shared_ptr<spdlog::logger> log,
                                 size_t workers)
    : chain_(chain), log_(std::move(log)), pool_(workers) {}

HookInterceptor::~HookInterceptor() { pool_.join(); }

void HookInterceptor::pre(std::shared_ptr<InterceptedCall> call,
                          std::function<void(absl::Status)> done) {
  const bool stored_resources = call->method == LifecycleMethod::kUpdateContainerResources;
  if (!stored_resources && chain_.subscribers(call->method, Phase::kPre) == 0) {
    done(absl::OkStatus());
    return;
  }
  if (chain_.allInline(call->method, Phase::kPre)) {
    // Pure computation: cheaper here than a hop to the pool and back.
    done(runPre(*call));
    return;
  }
  boost::asio::post(pool_, [this, call, done = std::move(done)] { done(runPre(*call)); });
}

void HookInterceptor::post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) {
  // Bookkeeping first: it must happen even when no hook is subscribed.
  if (call->backend_status.ok() && call->response) {
    if (call->method == LifecycleMethod::kCreateContainer) {
      const auto& resp = static_cast<const v1::CreateContainerResponse&>(*call->response);
      if (const auto* decided = std::any_cast<Adjustment>(&call->interceptor_data)) {
        Adjustment r = resourcesOnly(*decided);
        if (!r.empty()) {
          std::lock_guard lock(mu_);
          container_resources_[resp.container_id()] = std::move(r);
        }
      }
    } else if (call->method == LifecycleMethod::kRemoveContainer) {
      std::lock_guard lock(mu_);
      container_resources_.erase(call->identity.container_id);
    }
  }
  if (chain_.subscribers(call->method, Phase::kPost) == 0) {
    done();
    return;
  }
  if (chain_.allInline(call->method, Phase::kPost)) {
    runPost(*call);
    done();
    return;
  }
  boost::asio::post(pool_, [this, call, done = std::move(done)] {
    runPost(*call);
    done();
  });
}

absl::Status HookInterceptor::runPre(InterceptedCall& call) {
  ChainOutcome out = chain_.run(inputOf(call, Phase::kPre), call.deadline);
  if (!out.status.ok()) {
    return absl::Status(out.status.code(),
                        cat(sv(out.status.message()), " (pod ", call.identity.pod_namespace, "/",
                            call.identity.pod_name, ")"));
  }
  const Adjustment& a = out.merged.result();
  switch (call.method) {
    case LifecycleMethod::kCreateContainer:
      if (!a.empty()) {
        applyToContainer(a,
                         *static_cast<v1::CreateContainerRequest&>(*call.request).mutable_config());
        call.request_changed = true;
      }
      call.interceptor_data = a;
      break;
    case LifecycleMethod::kRunPodSandbox:
      if (!a.empty()) {
        applyToSandbox(a, *static_cast<v1::RunPodSandboxRequest&>(*call.request).mutable_config());
        call.request_changed = true;
      }
      break;
    case LifecycleMethod::kUpdateContainerResources: {
      auto& req = static_cast<v1::UpdateContainerResourcesRequest&>(*call.request);
      Adjustment stored = resourcesOf(req.container_id());
      if (!stored.empty()) applyToResources(stored, *req.mutable_linux());
      if (!a.empty()) applyToResources(a, *req.mutable_linux());
      call.request_changed = !stored.empty() || !a.empty();
      break;
    }
    default:
      if (!a.empty() && log_) {
        log_->debug("{}: adjustments have nothing to change on this call; ignored",
                    methodName(call.method));
      }
      break;
  }
  return absl::OkStatus();
}

void HookInterceptor::runPost(InterceptedCall& call) {
  // The outcome is not needed: post-stage failures were logged and counted by the chain.
  chain_.run(inputOf(call, Phase::kPost), std::chrono::steady_clock::time_point::max());
}

Adjustment HookInterceptor::resourcesOf(const std::string& container_id) const {
  std::lock_guard lock(mu_);
  auto it = container_resources_.find(container_id);
  return it == container_resources_.end() ? Adjustment{} : it->second;
}

}  // namespace crihook
