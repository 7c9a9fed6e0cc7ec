#include "intercepted_methods.h"

#include <array>
#include <string>

#include "runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

template <typename T>
std::unique_ptr<google::protobuf::Message> make() {
  return std::make_unique<T>();
}

struct Entry {
  std::string_view name;
  LifecycleMethod method;
  std::unique_ptr<google::protobuf::Message> (*newRequest)();
  std::unique_ptr<google::protobuf::Message> (*newResponse)();
};

constexpr std::array<Entry, 8> kEntries = {{
    {"RunPodSandbox", LifecycleMethod::kRunPodSandbox, make<v1::RunPodSandboxRequest>,
     make<v1::RunPodSandboxResponse>},
    {"StopPodSandbox", LifecycleMethod::kStopPodSandbox, make<v1::StopPodSandboxRequest>,
     make<v1::StopPodSandboxResponse>},
    {"RemovePodSandbox", LifecycleMethod::kRemovePodSandbox, make<v1::RemovePodSandboxRequest>,
     make<v1::RemovePodSandboxResponse>},
    {"CreateContainer", LifecycleMethod::kCreateContainer, make<v1::CreateContainerRequest>,
     make<v1::CreateContainerResponse>},
    {"StartContainer", LifecycleMethod::kStartContainer, make<v1::StartContainerRequest>,
     make<v1::StartContainerResponse>},
    {"StopContainer", LifecycleMethod::kStopContainer, make<v1::StopContainerRequest>,
     make<v1::StopContainerResponse>},
    {"RemoveContainer", LifecycleMethod::kRemoveContainer, make<v1::RemoveContainerRequest>,
     make<v1::RemoveContainerResponse>},
    {"UpdateContainerResources", LifecycleMethod::kUpdateContainerResources,
     make<v1::UpdateContainerResourcesRequest>, make<v1::UpdateContainerResourcesResponse>},
}};

constexpr std::string_view kV1Prefix = "/runtime.v1.RuntimeService/";
constexpr std::string_view kV1alpha2Prefix = "/runtime.v1alpha2.RuntimeService/";

struct Table {
  std::array<InterceptedMethod, 8> v1;
  std::array<InterceptedMethod, 8> v1alpha2;
};

const Table& table() {
  static const Table t = [] {
    Table t;
    for (size_t i = 0; i < kEntries.size(); ++i) {
      t.v1[i] = {kEntries[i].method, CriApi::kV1, kEntries[i].newRequest, kEntries[i].newResponse};
      t.v1alpha2[i] = {kEntries[i].method, CriApi::kV1alpha2, kEntries[i].newRequest,
                       kEntries[i].newResponse};
    }
    return t;
  }();
  return t;
}

void fromPodConfig(const v1::PodSandboxConfig& config, CallIdentity& id) {
  id.pod_namespace = config.metadata().namespace_();
  id.pod_name = config.metadata().name();
  id.pod_uid = config.metadata().uid();
}

}  // namespace

std::string_view methodName(LifecycleMethod method) {
  for (const Entry& e : kEntries) {
    if (e.method == method) return e.name;
  }
  return "?";
}

std::string_view apiName(CriApi api) { return api == CriApi::kV1 ? "v1" : "v1alpha2"; }

const InterceptedMethod* findInterceptedMethod(std::string_view path) {
  const std::array<InterceptedMethod, 8>* methods = nullptr;
  if (path.starts_with(kV1Prefix)) {
    path.remove_prefix(kV1Prefix.size());
    methods = &table().v1;
  } else if (path.starts_with(kV1alpha2Prefix)) {
    path.remove_prefix(kV1alpha2Prefix.size());
    methods = &table().v1alpha2;
  } else {
    return nullptr;
  }
  for (size_t i = 0; i < kEntries.size(); ++i) {
    if (kEntries[i].name == path) return &(*methods)[i];
  }
  return nullptr;
}

CallIdentity identityOf(LifecycleMethod method, const google::protobuf::Message& request,
                        const PodDirectory& pods) {
  CallIdentity id;
  switch (method) {
    case LifecycleMethod::kRunPodSandbox:
      fromPodConfig(static_cast<const v1::RunPodSandboxRequest&>(request).config(), id);
      break;
    case LifecycleMethod::kStopPodSandbox:
      id.sandbox_id = static_cast<const v1::StopPodSandboxRequest&>(request).pod_sandbox_id();
      break;
    case LifecycleMethod::kRemovePodSandbox:
      id.sandbox_id = static_cast<const v1::RemovePodSandboxRequest&>(request).pod_sandbox_id();
      break;
    case LifecycleMethod::kCreateContainer: {
      const auto& r = static_cast<const v1::CreateContainerRequest&>(request);
      id.sandbox_id = r.pod_sandbox_id();
      fromPodConfig(r.sandbox_config(), id);
      id.container_name = r.config().metadata().name();
      break;
    }
    case LifecycleMethod::kStartContainer:
      id.container_id = static_cast<const v1::StartContainerRequest&>(request).container_id();
      break;
    case LifecycleMethod::kStopContainer:
      id.container_id = static_cast<const v1::StopContainerRequest&>(request).container_id();
      break;
    case LifecycleMethod::kRemoveContainer:
      id.container_id = static_cast<const v1::RemoveContainerRequest&>(request).container_id();
      break;
    case LifecycleMethod::kUpdateContainerResources:
      id.container_id =
          static_cast<const v1::UpdateContainerResourcesRequest&>(request).container_id();
      break;
  }
  pods.complete(id);
  return id;
}

void recordOutcome(LifecycleMethod method, CallIdentity& id,
                   const google::protobuf::Message& response, PodDirectory& pods) {
  switch (method) {
    case LifecycleMethod::kRunPodSandbox: {
      const auto& r = static_cast<const v1::RunPodSandboxResponse&>(response);
      id.sandbox_id = r.pod_sandbox_id();
      if (!id.sandbox_id.empty()) pods.addSandbox(id.sandbox_id, id);
      break;
    }
    case LifecycleMethod::kCreateContainer: {
      const auto& r = static_cast<const v1::CreateContainerResponse&>(response);
      id.container_id = r.container_id();
      if (!id.container_id.empty())
        pods.addContainer(id.container_id, id.sandbox_id, id.container_name);
      break;
    }
    case LifecycleMethod::kRemovePodSandbox:
      pods.removeSandbox(id.sandbox_id);
      break;
    case LifecycleMethod::kRemoveContainer:
      pods.removeContainer(id.container_id);
      break;
    default:
      break;
  }
}

}  // namespace crihook
