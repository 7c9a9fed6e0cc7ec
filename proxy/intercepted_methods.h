#pragma once

// Which gRPC paths crihookd intercepts, and how to read who each call is about.
// Everything else is relayed without being decoded.

#include <google/protobuf/message.h>

#include <memory>
#include <string_view>

#include "interceptor.h"
#include "pod_directory.h"

namespace crihook {

struct InterceptedMethod {
  LifecycleMethod method;
  CriApi api;
  std::unique_ptr<google::protobuf::Message> (*newRequest)();
  std::unique_ptr<google::protobuf::Message> (*newResponse)();
};

// The entry for a `:path` such as "/runtime.v1.RuntimeService/CreateContainer"
// or its runtime.v1alpha2 twin; nullptr for every other path. Lock-free; safe
// from any thread.
const InterceptedMethod* findInterceptedMethod(std::string_view path);

// Fills what the request itself says (ids, pod metadata), then what `pods`
// knows about those ids.
CallIdentity identityOf(LifecycleMethod method, const google::protobuf::Message& request,
                        const PodDirectory& pods);

// After a successful call: copies a new sandbox/container id from `response`
// into `id`, records it in `pods`, and forgets removed ones.
void recordOutcome(LifecycleMethod method, CallIdentity& id,
                   const google::protobuf::Message& response, PodDirectory& pods);

}  // namespace crihook
