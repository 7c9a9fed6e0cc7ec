#pragma once

// The vocabulary of the CRI lifecycle that the proxy and the hooks share:
// which calls crihook intercepts, on which API versions, what each carries
// (ids, configurations, resources) and what it does to the runtime's objects.
// One table row per method (lifecycle.cc); everything that treats methods
// alike reads the row, so a newer CRI call is one row, not an edit in every
// switch. Neither the proxy nor the hooks are included here.

#include <google/protobuf/message.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cri-api/runtime_v1.pb.h"

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
// How many there are; LifecycleMethod values are 0..kLifecycleMethods-1.
inline constexpr size_t kLifecycleMethods = 8;

// Which CRI package the caller spoke. v1alpha2 messages of these calls are
// wire-identical to v1 for every field v1alpha2 has, so both decode into the
// runtime.v1 types (test/proxy/v1alpha2_compat_test.cc shows it).
enum class CriApi { kV1, kV1alpha2 };
std::string_view apiName(CriApi api);

// Before or after the call is forwarded to the runtime.
enum class Phase { kPre, kPost };

// What a call does to the runtime's objects, once the runtime said OK.
enum class Effect {
  kNone,              // reads or changes an object that exists (Start, Stop, Update)
  kCreatesSandbox,    // the response names the new sandbox
  kCreatesContainer,  // the response names the new container
  kRemovesSandbox,    // the sandbox and its containers are gone
  kRemovesContainer,
};

// Who a call is about, for log lines and for the hooks.
struct CallIdentity {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string sandbox_id;
  std::string container_id;
  std::string container_name;
};

namespace lifecycle_detail {
inline std::string_view none(const google::protobuf::Message&) { return {}; }
}  // namespace lifecycle_detail

// One intercepted method: a row of the table in lifecycle.cc, written with
// designated initializers so a row names what it sets. Each accessor takes
// the runtime.v1 message of this method (request or response as named).
// Lock-free; safe from any thread.
struct LifecycleSpec {
  using Message = google::protobuf::Message;

  LifecycleMethod method;
  std::string_view name;  // "CreateContainer": the RPC's name in RuntimeService
  Effect effect = Effect::kNone;

  std::unique_ptr<Message> (*newRequest)() = nullptr;
  std::unique_ptr<Message> (*newResponse)() = nullptr;

  // Ids the request names; "" when it names none.
  std::string_view (*sandboxId)(const Message& request) = lifecycle_detail::none;
  std::string_view (*containerId)(const Message& request) = lifecycle_detail::none;
  // The runtime handler a new sandbox asks for (RunPodSandbox); "" otherwise.
  std::string_view (*runtimeHandler)(const Message& request) = lifecycle_detail::none;
  // The id of the object the call created (Effect kCreates*); "" otherwise.
  std::string_view (*createdId)(const Message& response) = lifecycle_detail::none;

  // The parts below are null when the method's request has no such part.
  // The pod's configuration the request carries (RunPodSandbox: the one
  // being created; CreateContainer: kubelet's copy of the sandbox's), and
  // the container's (CreateContainer).
  const runtime::v1::PodSandboxConfig* (*podConfig)(const Message& request) = nullptr;
  const runtime::v1::ContainerConfig* (*containerConfig)(const Message& request) = nullptr;
  // Where an adjustment lands in the request: the sandbox configuration
  // (RunPodSandbox's; CreateContainer's copy, whose cgroup parent places the
  // container), the container being created, or the resources being set.
  runtime::v1::PodSandboxConfig* (*mutableSandboxConfig)(Message& request) = nullptr;
  runtime::v1::ContainerConfig* (*mutableContainerConfig)(Message& request) = nullptr;
  runtime::v1::LinuxContainerResources* (*mutableResources)(Message& request) = nullptr;
};

// Every row, in LifecycleMethod order.
std::span<const LifecycleSpec> lifecycleSpecs();
const LifecycleSpec& specOf(LifecycleMethod method);
std::string_view methodName(LifecycleMethod method);

// "PreCreateContainer", "PostStopPodSandbox", …
std::string stageName(LifecycleMethod method, Phase phase);

// A `:path` such as "/runtime.v1.RuntimeService/CreateContainer" or its
// runtime.v1alpha2 twin, as an intercepted method.
struct InterceptedMethod {
  const LifecycleSpec* spec;
  CriApi api;
};
// The entry for `path`; nullopt for every path crihook relays undecoded.
std::optional<InterceptedMethod> findInterceptedMethod(std::string_view path);

// What the request itself says of who the call is about: ids, pod metadata,
// container name. (The proxy completes the rest from what it saw before.)
CallIdentity identityFromRequest(const LifecycleSpec& spec,
                                 const google::protobuf::Message& request);

// Who a call is about, as crihook's log lines tag it: "pod=<ns>/<name>
// sandbox=<id12> container=<id12>", "-" for what is not known. Names and
// ids come from the request: shown as they are when they are what
// Kubernetes and the runtimes make (DNS names, hex ids), else quoted, so a
// newline in a pod name cannot forge a log line.
std::string identityTags(const CallIdentity& id);

// After the runtime answered OK: the id of the object the call created
// (RunPodSandbox, CreateContainer) copied into `id`; other calls leave it.
void noteCreatedId(const LifecycleSpec& spec, const google::protobuf::Message& response,
                   CallIdentity& id);

}  // namespace crihook
