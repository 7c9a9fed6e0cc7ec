#pragma once

// The pods the end-to-end tests make, and the CRI calls they make to leave a
// runtime as they found it.

#include <grpcpp/grpcpp.h>

#include <string>

#include "cri-api/runtime_v1.grpc.pb.h"

namespace crihook::testing {

// A pod named `name` in namespace default (uid `name`-uid), its logs under
// `log_root`/`name`, on the node's network (no CNI on these machines).
inline runtime::v1::PodSandboxConfig e2ePodConfig(const std::string& name,
                                                  const std::string& log_root) {
  runtime::v1::PodSandboxConfig c;
  c.mutable_metadata()->set_name(name);
  c.mutable_metadata()->set_namespace_("default");
  c.mutable_metadata()->set_uid(name + "-uid");
  c.set_log_directory(log_root + "/" + name);
  c.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
      runtime::v1::NODE);
  return c;
}

// StopPodSandbox, then RemovePodSandbox (also when the stop failed) of
// `pod` through `stub`; the status of the first call that failed, else OK.
inline grpc::Status stopAndRemovePod(runtime::v1::RuntimeService::Stub& stub,
                                     const std::string& pod) {
  grpc::ClientContext stop_ctx, remove_ctx;
  runtime::v1::StopPodSandboxRequest stop;
  stop.set_pod_sandbox_id(pod);
  runtime::v1::StopPodSandboxResponse stopped;
  const grpc::Status stop_status = stub.StopPodSandbox(&stop_ctx, stop, &stopped);
  runtime::v1::RemovePodSandboxRequest remove;
  remove.set_pod_sandbox_id(pod);
  runtime::v1::RemovePodSandboxResponse removed;
  const grpc::Status remove_status = stub.RemovePodSandbox(&remove_ctx, remove, &removed);
  return stop_status.ok() ? remove_status : stop_status;
}

}  // namespace crihook::testing
