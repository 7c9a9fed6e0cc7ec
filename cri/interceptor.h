#pragma once

// The seam a front (the proxy) calls and the hook framework implements: what
// an intercepted CRI call looks like to the stages that run before and after
// it is forwarded. Only tools/crihookd knows both sides.

#include <google/protobuf/message.h>

#include <any>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cri/lifecycle.h"

namespace crihook {

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
  // What the request says of who the call is about (identityFromRequest).
  // The pre-stage may complete it (the pod's name for a call that carries
  // only a container id); the proxy's log line shows it as it is then. On
  // success the proxy adds the id of the object the call created.
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
