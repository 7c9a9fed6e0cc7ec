#pragma once

// The seam between the proxy and the hook framework: what an intercepted CRI
// call looks like to the stages that run before and after it is forwarded.

#include <google/protobuf/message.h>

#include <any>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace crihook {

// The pod and container lifecycle calls crihookd intercepts.
enum class LifecycleMethod {
  kRunPodSandbox,
  kStopPodSandbox,
  kRemovePodSandbox,
  kCreateContainer,
  kStartContainer,
  kStopContainer,
  kRemoveContainer,
  kUpdateContainerResources,
};
std::string_view methodName(LifecycleMethod method);

// Which CRI package the caller spoke. v1alpha2 messages of these calls are
// wire-identical to v1 for every field v1alpha2 has, so both decode into the
// runtime.v1 types (test/proxy/v1alpha2_compat_test.cc shows it).
enum class CriApi { kV1, kV1alpha2 };
std::string_view apiName(CriApi api);

// Who a call is about, for log lines and for the hooks.
struct CallIdentity {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string sandbox_id;
  std::string container_id;
  std::string container_name;
};

// One intercepted call. Created by the proxy, handed to the pre-stage, then
// (once the runtime answered) to the post-stage. Owned through shared_ptr so a
// stage may keep it while it works on another thread; the proxy never reads or
// writes it while a stage holds it.
struct InterceptedCall {
  LifecycleMethod method;
  CriApi api;
  // The caller's deadline (time_point::max() when it set none). A stage must
  // finish well before it: the runtime still needs its share.
  std::chrono::steady_clock::time_point deadline;
  CallIdentity identity;

  // The decoded runtime.v1 request. A pre-stage may edit it and must then set
  // request_changed, so the proxy re-encodes it; otherwise the caller's exact
  // bytes are forwarded.
  std::unique_ptr<google::protobuf::Message> request;
  bool request_changed = false;

  // Post-stage only: the runtime's answer. `response` is null unless
  // backend_status is OK and the reply decoded.
  absl::Status backend_status;
  std::unique_ptr<google::protobuf::Message> response;

  // The Interceptor's own, carried from pre to post (e.g. what the hooks
  // decided). The proxy never reads or writes it.
  std::any interceptor_data;
};

// The stages. Implementations must be thread-safe: every connection's event
// loop calls them. They are called on an event-loop thread and must not block
// it: a stage that waits (a remote hook, a device reset) does its work on
// another thread and calls `done` from there. `done` must be called exactly
// once, from any thread.
class Interceptor {
 public:
  virtual ~Interceptor() = default;

  // Before forwarding. A non-OK status rejects the call: the caller gets that
  // status and the runtime never sees the call.
  virtual void pre(std::shared_ptr<InterceptedCall> call,
                   std::function<void(absl::Status)> done) = 0;

  // After the runtime answered, before the caller gets the answer. Cannot
  // change the answer; failures are the stage's to log and count.
  virtual void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) = 0;
};

// Runs no hooks: what crihookd uses until hooks are configured.
class PassThroughInterceptor final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall>, std::function<void(absl::Status)> done) override {
    done(absl::OkStatus());
  }
  void post(std::shared_ptr<InterceptedCall>, std::function<void()> done) override { done(); }
};

}  // namespace crihook
