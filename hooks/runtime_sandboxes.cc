#include "hooks/runtime_sandboxes.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <future>

#include "base/text.h"
#include "config/config.h"
#include "cri-api/runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

// v1alpha2's ListPodSandbox and UpdateContainerResources messages have v1's
// fields under the same numbers, so one generic call with v1's types serves both.
grpc::Status call(grpc::GenericStub& stub, const std::string& method,
                  const google::protobuf::Message& request, google::protobuf::Message& response,
                  std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer in(&slice, 1), out;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &in, &out,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  if (!out.Dump(&slices).ok()) return {grpc::StatusCode::INTERNAL, "unreadable reply"};
  std::string reply;
  for (const auto& s : slices) reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (!response.ParseFromString(reply)) {
    return {grpc::StatusCode::INTERNAL,
            cat("reply does not parse as ", response.GetDescriptor()->name())};
  }
  return grpc::Status::OK;
}

// `name` ("ListPodSandbox") over runtime.v1, then over v1alpha2 when v1 is unimplemented.
grpc::Status callEitherApi(const std::string& endpoint_path, const std::string& name,
                           const google::protobuf::Message& request,
                           google::protobuf::Message& response, std::chrono::milliseconds timeout) {
  grpc::GenericStub stub(
      grpc::CreateChannel("unix://" + endpoint_path, grpc::InsecureChannelCredentials()));
  grpc::Status s = call(stub, "/runtime.v1.RuntimeService/" + name, request, response, timeout);
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    s = call(stub, "/runtime.v1alpha2.RuntimeService/" + name, request, response, timeout);
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<RuntimeSandbox>> listRuntimeSandboxes(
    const std::string& endpoint, std::chrono::milliseconds timeout) {
  auto path = unixSocketPath(endpoint);
  if (!path.ok()) return path.status();
  v1::ListPodSandboxRequest request;
  v1::ListPodSandboxResponse response;
  grpc::Status s = callEitherApi(*path, "ListPodSandbox", request, response, timeout);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        cat("ListPodSandbox on ", endpoint, ": ", s.error_message()));
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
  grpc::Status s = callEitherApi(*path, "UpdateContainerResources", request, response, timeout);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        cat("UpdateContainerResources of container ", container_id, " on ",
                            endpoint, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace crihook
