#pragma once

// Between NRI's view of a pod or container (NRI v0.6.1 messages) and the
// CRI requests crihook's hooks read and adjust (cri/interceptor.h): the
// request a front hands the pre-stage is made from what the runtime
// presents, and what the pre-stage changed in it becomes NRI's answer.
// Pure functions; no I/O but the device lookup the caller passes.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/runtime_v1.pb.h"

namespace crihook::nri {

namespace api = ::nri::pkg::api::v1alpha1;

// The RunPodSandbox request that stands for `pod`: metadata (name, uid,
// namespace), labels, annotations, runtime handler, cgroup parent and
// the pod's overhead and resources.
runtime::v1::RunPodSandboxRequest runPodSandboxRequestOf(const api::PodSandbox& pod);

// The CreateContainer request that stands for `container` of `pod`: the
// sandbox's id and config, the container's name, labels, annotations, its
// process args (as `command`), env in order, mounts, devices and Linux
// resources, as the runtime presented them before any plugin adjusted them.
runtime::v1::CreateContainerRequest createContainerRequestOf(const api::PodSandbox& pod,
                                                             const api::Container& container);

// The Linux resources of an NRI container or update, as CRI carries them.
runtime::v1::LinuxContainerResources resourcesOf(const api::LinuxResources& r);

// CRI's Linux resources as NRI carries them (every field CRI sets; an
// update's resources replace the container's).
api::LinuxResources nriResourcesOf(const runtime::v1::LinuxContainerResources& r);

// A device node as NRI creates one in a container.
struct DeviceNode {
  char type = 'c';  // 'c' or 'b'
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t file_mode = 0666;
};
// Finds the node at a host path: NOT_FOUND or INVALID_ARGUMENT (not a
// device) naming it.
using DeviceLookup = std::function<absl::StatusOr<DeviceNode>(const std::string& host_path)>;
// stat(2) of `host_path`, which must be an absolute path and a character or
// block device (a FIFO or a regular file is refused, never opened).
absl::StatusOr<DeviceNode> statDevice(const std::string& host_path);

// What an adjusted CreateContainer request is to NRI.
struct ContainerAnswer {
  api::ContainerAdjustment adjust;
  // What the hooks changed that NRI 0.6.1 cannot carry, one line each
  // ("labels: NRI cannot change a container's labels"); the front logs and
  // counts them. The adjustment holds everything else.
  std::vector<std::string> not_applied;
};

// The difference between `before` (createContainerRequestOf) and `after`
// (the pre-stage's request) as NRI's adjustment: env set in place or
// appended in order and removed ("-NAME"), annotations set and removed,
// mounts added or replaced (bind mounts with ro/rw and propagation) and
// removed ("-/path"), devices added or replaced (type and numbers from
// `lookup`) and removed, and the Linux resources NRI applies at creation
// (cpuset cpus and mems, CPU shares, quota, period, memory limit, hugepage
// limits, unified). A device `lookup` cannot resolve is an error naming it
// (the container must not start without it).
absl::StatusOr<ContainerAnswer> adjustmentOf(const runtime::v1::CreateContainerRequest& before,
                                             const runtime::v1::CreateContainerRequest& after,
                                             const DeviceLookup& lookup);

}  // namespace crihook::nri
