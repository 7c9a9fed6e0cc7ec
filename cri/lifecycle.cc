#include "cri/lifecycle.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "base/quote.h"
#include "base/text.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;
using google::protobuf::Message;

template <typename T>
std::unique_ptr<Message> make() {
  return std::make_unique<T>();
}

// Accessors made from a message type and its generated getter, so a row
// names fields instead of repeating casts.
template <typename Msg, auto Field>
std::string_view text(const Message& m) {
  return (static_cast<const Msg&>(m).*Field)();
}
template <typename Msg, auto Field>
auto part(const Message& m) {
  return &(static_cast<const Msg&>(m).*Field)();
}
template <typename Msg, auto Field>
auto mutablePart(Message& m) {
  return (static_cast<Msg&>(m).*Field)();
}

using M = LifecycleMethod;
using Run = v1::RunPodSandboxRequest;
using Create = v1::CreateContainerRequest;
using Update = v1::UpdateContainerResourcesRequest;

// One row per method, in LifecycleMethod order (lifecycle_test checks it).
const std::array<LifecycleSpec, kLifecycleMethods> kSpecs = {{
    {.method = M::kRunPodSandbox,
     .name = "RunPodSandbox",
     .effect = Effect::kCreatesSandbox,
     .newRequest = make<Run>,
     .newResponse = make<v1::RunPodSandboxResponse>,
     .runtimeHandler = text<Run, &Run::runtime_handler>,
     .createdId = text<v1::RunPodSandboxResponse, &v1::RunPodSandboxResponse::pod_sandbox_id>,
     .podConfig = part<Run, &Run::config>,
     .mutableSandboxConfig = mutablePart<Run, &Run::mutable_config>},
    {.method = M::kStopPodSandbox,
     .name = "StopPodSandbox",
     .newRequest = make<v1::StopPodSandboxRequest>,
     .newResponse = make<v1::StopPodSandboxResponse>,
     .sandboxId = text<v1::StopPodSandboxRequest, &v1::StopPodSandboxRequest::pod_sandbox_id>},
    {.method = M::kRemovePodSandbox,
     .name = "RemovePodSandbox",
     .effect = Effect::kRemovesSandbox,
     .newRequest = make<v1::RemovePodSandboxRequest>,
     .newResponse = make<v1::RemovePodSandboxResponse>,
     .sandboxId = text<v1::RemovePodSandboxRequest, &v1::RemovePodSandboxRequest::pod_sandbox_id>},
    {.method = M::kCreateContainer,
     .name = "CreateContainer",
     .effect = Effect::kCreatesContainer,
     .newRequest = make<Create>,
     .newResponse = make<v1::CreateContainerResponse>,
     .sandboxId = text<Create, &Create::pod_sandbox_id>,
     .createdId = text<v1::CreateContainerResponse, &v1::CreateContainerResponse::container_id>,
     .podConfig = part<Create, &Create::sandbox_config>,
     .containerConfig = part<Create, &Create::config>,
     .mutableSandboxConfig = mutablePart<Create, &Create::mutable_sandbox_config>,
     .mutableContainerConfig = mutablePart<Create, &Create::mutable_config>},
    {.method = M::kStartContainer,
     .name = "StartContainer",
     .newRequest = make<v1::StartContainerRequest>,
     .newResponse = make<v1::StartContainerResponse>,
     .containerId = text<v1::StartContainerRequest, &v1::StartContainerRequest::container_id>},
    {.method = M::kStopContainer,
     .name = "StopContainer",
     .newRequest = make<v1::StopContainerRequest>,
     .newResponse = make<v1::StopContainerResponse>,
     .containerId = text<v1::StopContainerRequest, &v1::StopContainerRequest::container_id>},
    {.method = M::kRemoveContainer,
     .name = "RemoveContainer",
     .effect = Effect::kRemovesContainer,
     .newRequest = make<v1::RemoveContainerRequest>,
     .newResponse = make<v1::RemoveContainerResponse>,
     .containerId = text<v1::RemoveContainerRequest, &v1::RemoveContainerRequest::container_id>},
    {.method = M::kUpdateContainerResources,
     .name = "UpdateContainerResources",
     .newRequest = make<Update>,
     .newResponse = make<v1::UpdateContainerResourcesResponse>,
     .containerId = text<Update, &Update::container_id>,
     .mutableResources = mutablePart<Update, &Update::mutable_linux>},
}};

constexpr std::string_view kV1Prefix = "/runtime.v1.RuntimeService/";
constexpr std::string_view kV1alpha2Prefix = "/runtime.v1alpha2.RuntimeService/";

}  // namespace

std::span<const LifecycleSpec> lifecycleSpecs() { return kSpecs; }

// lifecycle_test checks that every row sits at its method's index.
const LifecycleSpec& specOf(LifecycleMethod method) { return kSpecs[static_cast<size_t>(method)]; }

std::string_view methodName(LifecycleMethod method) { return specOf(method).name; }

std::string_view apiName(CriApi api) { return api == CriApi::kV1 ? "v1" : "v1alpha2"; }

std::string stageName(LifecycleMethod method, Phase phase) {
  return cat(phase == Phase::kPre ? "Pre" : "Post", methodName(method));
}

std::optional<InterceptedMethod> findInterceptedMethod(std::string_view path) {
  CriApi api;
  if (path.starts_with(kV1Prefix)) {
    path.remove_prefix(kV1Prefix.size());
    api = CriApi::kV1;
  } else if (path.starts_with(kV1alpha2Prefix)) {
    path.remove_prefix(kV1alpha2Prefix.size());
    api = CriApi::kV1alpha2;
  } else {
    return std::nullopt;
  }
  for (const LifecycleSpec& spec : kSpecs) {
    if (spec.name == path) return InterceptedMethod{&spec, api};
  }
  return std::nullopt;
}

CallIdentity identityFromRequest(const LifecycleSpec& spec, const Message& request) {
  CallIdentity id;
  id.sandbox_id = spec.sandboxId(request);
  id.container_id = spec.containerId(request);
  if (const v1::PodSandboxConfig* pod = spec.podConfig ? spec.podConfig(request) : nullptr) {
    id.pod_namespace = pod->metadata().namespace_();
    id.pod_name = pod->metadata().name();
    id.pod_uid = pod->metadata().uid();
  }
  if (const v1::ContainerConfig* c =
          spec.containerConfig ? spec.containerConfig(request) : nullptr) {
    id.container_name = c->metadata().name();
  }
  return id;
}

std::string identityTags(const CallIdentity& id) {
  auto shown = [](std::string_view text) {
    const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '/' ||
             c == '_';
    });
    return plain ? std::string(text) : quote(text);
  };
  auto shortId = [&](const std::string& v) { return v.empty() ? "-" : shown(v.substr(0, 12)); };
  return cat("pod=", id.pod_name.empty() ? "-" : shown(cat(id.pod_namespace, "/", id.pod_name)),
             " sandbox=", shortId(id.sandbox_id), " container=", shortId(id.container_id));
}

void noteCreatedId(const LifecycleSpec& spec, const Message& response, CallIdentity& id) {
  if (spec.effect == Effect::kCreatesSandbox) id.sandbox_id = spec.createdId(response);
  if (spec.effect == Effect::kCreatesContainer) id.container_id = spec.createdId(response);
}

}  // namespace crihook
