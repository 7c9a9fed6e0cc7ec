#pragma once

// CRI calls the end-to-end tests make to leave a runtime as they found it.

#include <grpcpp/grpcpp.h>

#include <string>

#include "cri-api/runtime_v1.grpc.pb.h"

namespace crihook::testing {

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
