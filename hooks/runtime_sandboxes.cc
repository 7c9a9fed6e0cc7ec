#include "hooks/runtime_sandboxes.h"

#include "base/grpc_channel.h"
#include "base/quote.h"
#include "base/text.h"
#include "config/config.h"
#include "cri-api/runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

// A ListPodSandbox reply on a node with many pods: the relay's own message
// limit, not gRPC's 4 MiB default.
constexpr size_t kMaxRuntimeReplyBytes = 16 << 20;

// `name` ("ListPodSandbox") over runtime.v1, then over v1alpha2 when v1 is
// unimplemented. v1alpha2's ListPodSandbox and UpdateContainerResources
// messages have v1's fields under the same numbers, so v1's types serve both.
absl::Status callEitherApi(const std::string& endpoint_path, const std::string& name,
                           const google::protobuf::Message& request,
                           google::protobuf::Message& response, std::chrono::milliseconds timeout) {
  GrpcChannel channel(endpoint_path, {.max_reply_bytes = kMaxRuntimeReplyBytes});
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string bytes = request.SerializeAsString();
  auto reply = channel.call("/runtime.v1.RuntimeService/" + name, bytes, deadline);
  if (reply.status().code() == absl::StatusCode::kUnimplemented) {
    reply = channel.call("/runtime.v1alpha2.RuntimeService/" + name, bytes, deadline);
  }
  if (!reply.ok()) return reply.status();
  if (!response.ParseFromString(*reply)) {
    return absl::InternalError(cat("reply does not parse as ", response.GetDescriptor()->name()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RuntimeSandbox>> listRuntimeSandboxes(
    const std::string& endpoint, std::chrono::milliseconds timeout) {
  auto path = unixSocketPath(endpoint);
  if (!path.ok()) return path.status();
  v1::ListPodSandboxRequest request;
  v1::ListPodSandboxResponse response;
  absl::Status s = callEitherApi(*path, "ListPodSandbox", request, response, timeout);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        cat("ListPodSandbox on ", endpoint, ": ", boundedMessage(sv(s.message()))));
  }
  std::vector<RuntimeSandbox> out;
  for (const auto& item : response.items()) {
    RuntimeSandbox r;
    r.id = item.id();
    r.uid = item.metadata().uid();
    r.namespace_ = item.metadata().namespace_();
    r.name = item.metadata().name();
    r.attempt = item.metadata().attempt();
    r.ready = item.state() == v1::SANDBOX_READY;
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status updateRuntimeContainerCpuset(const std::string& endpoint,
                                          const std::string& container_id, const std::string& cpus,
                                          const std::string& mems,
                                          std::chrono::milliseconds timeout) {
  auto path = unixSocketPath(endpoint);
  if (!path.ok()) return path.status();
  v1::UpdateContainerResourcesRequest request;
  request.set_container_id(container_id);
  request.mutable_linux()->set_cpuset_cpus(cpus);
  request.mutable_linux()->set_cpuset_mems(mems);
  v1::UpdateContainerResourcesResponse response;
  absl::Status s = callEitherApi(*path, "UpdateContainerResources", request, response, timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), cat("UpdateContainerResources of container ", container_id,
                                      " on ", endpoint, ": ", boundedMessage(sv(s.message()))));
  }
  return absl::OkStatus();
}

}  // namespace crihook
