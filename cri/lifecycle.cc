#include "cri/lifecycle.h"

#include <array>

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
template <typename Req, auto Field>
std::string_view id(const Message& m) {
  return (static_cast<const Req&>(m).*Field)();
}
std::string_view noId(const Message&) { return {}; }

template <typename Req, auto Field>
const v1::PodSandboxConfig* podConfig(const Message& m) {
  return &(static_cast<const Req&>(m).*Field)();
}
const v1::PodSandboxConfig* noPodConfig(const Message&) { return nullptr; }

template <typename Req, auto Field>
const v1::ContainerConfig* containerConfig(const Message& m) {
  return &(static_cast<const Req&>(m).*Field)();
}
const v1::ContainerConfig* noContainerConfig(const Message&) { return nullptr; }

template <typename Req, auto Field>
v1::PodSandboxConfig* mutableSandbox(Message& m) {
  return (static_cast<Req&>(m).*Field)();
}
v1::PodSandboxConfig* noMutableSandbox(Message&) { return nullptr; }

template <typename Req, auto Field>
v1::ContainerConfig* mutableContainer(Message& m) {
  return (static_cast<Req&>(m).*Field)();
}
v1::ContainerConfig* noMutableContainer(Message&) { return nullptr; }

template <typename Req, auto Field>
v1::LinuxContainerResources* mutableResources(Message& m) {
  return (static_cast<Req&>(m).*Field)();
}
v1::LinuxContainerResources* noMutableResources(Message&) { return nullptr; }

using M = LifecycleMethod;

// One row per method, in LifecycleMethod order (checked below).
const std::array<LifecycleSpec, kLifecycleMethods> kSpecs = {{
    {M::kRunPodSandbox, "RunPodSandbox", Effect::kCreatesSandbox, make<v1::RunPodSandboxRequest>,
     make<v1::RunPodSandboxResponse>, noId, noId,
     podConfig<v1::RunPodSandboxRequest, &v1::RunPodSandboxRequest::config>, noContainerConfig,
     id<v1::RunPodSandboxResponse, &v1::RunPodSandboxResponse::pod_sandbox_id>,
     mutableSandbox<v1::RunPodSandboxRequest, &v1::RunPodSandboxRequest::mutable_config>,
     noMutableContainer, noMutableResources},
    {M::kStopPodSandbox, "StopPodSandbox", Effect::kNone, make<v1::StopPodSandboxRequest>,
     make<v1::StopPodSandboxResponse>,
     id<v1::StopPodSandboxRequest, &v1::StopPodSandboxRequest::pod_sandbox_id>, noId, noPodConfig,
     noContainerConfig, noId, noMutableSandbox, noMutableContainer, noMutableResources},
    {M::kRemovePodSandbox, "RemovePodSandbox", Effect::kRemovesSandbox,
     make<v1::RemovePodSandboxRequest>, make<v1::RemovePodSandboxResponse>,
     id<v1::RemovePodSandboxRequest, &v1::RemovePodSandboxRequest::pod_sandbox_id>, noId,
     noPodConfig, noContainerConfig, noId, noMutableSandbox, noMutableContainer,
     noMutableResources},
    {M::kCreateContainer, "CreateContainer", Effect::kCreatesContainer,
     make<v1::CreateContainerRequest>, make<v1::CreateContainerResponse>,
     id<v1::CreateContainerRequest, &v1::CreateContainerRequest::pod_sandbox_id>, noId,
     podConfig<v1::CreateContainerRequest, &v1::CreateContainerRequest::sandbox_config>,
     containerConfig<v1::CreateContainerRequest, &v1::CreateContainerRequest::config>,
     id<v1::CreateContainerResponse, &v1::CreateContainerResponse::container_id>,
     // The runtime places the container under the cgroup parent this
     // request's sandbox config names.
     mutableSandbox<v1::CreateContainerRequest,
                    &v1::CreateContainerRequest::mutable_sandbox_config>,
     mutableContainer<v1::CreateContainerRequest, &v1::CreateContainerRequest::mutable_config>,
     noMutableResources},
    {M::kStartContainer, "StartContainer", Effect::kNone, make<v1::StartContainerRequest>,
     make<v1::StartContainerResponse>, noId,
     id<v1::StartContainerRequest, &v1::StartContainerRequest::container_id>, noPodConfig,
     noContainerConfig, noId, noMutableSandbox, noMutableContainer, noMutableResources},
    {M::kStopContainer, "StopContainer", Effect::kNone, make<v1::StopContainerRequest>,
     make<v1::StopContainerResponse>, noId,
     id<v1::StopContainerRequest, &v1::StopContainerRequest::container_id>, noPodConfig,
     noContainerConfig, noId, noMutableSandbox, noMutableContainer, noMutableResources},
    {M::kRemoveContainer, "RemoveContainer", Effect::kRemovesContainer,
     make<v1::RemoveContainerRequest>, make<v1::RemoveContainerResponse>, noId,
     id<v1::RemoveContainerRequest, &v1::RemoveContainerRequest::container_id>, noPodConfig,
     noContainerConfig, noId, noMutableSandbox, noMutableContainer, noMutableResources},
    {M::kUpdateContainerResources, "UpdateContainerResources", Effect::kNone,
     make<v1::UpdateContainerResourcesRequest>, make<v1::UpdateContainerResourcesResponse>, noId,
     id<v1::UpdateContainerResourcesRequest, &v1::UpdateContainerResourcesRequest::container_id>,
     noPodConfig, noContainerConfig, noId, noMutableSandbox, noMutableContainer,
     mutableResources<v1::UpdateContainerResourcesRequest,
                      &v1::UpdateContainerResourcesRequest::mutable_linux>},
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
  if (const v1::PodSandboxConfig* pod = spec.podConfig(request)) {
    id.pod_namespace = pod->metadata().namespace_();
    id.pod_name = pod->metadata().name();
    id.pod_uid = pod->metadata().uid();
  }
  if (const v1::ContainerConfig* c = spec.containerConfig(request)) {
    id.container_name = c->metadata().name();
  }
  return id;
}

}  // namespace crihook
