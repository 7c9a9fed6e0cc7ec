#pragma once

// The one place a merged adjustment changes a CRI request.

#include "hooks/adjustment.h"
#include "cri-api/runtime_v1.pb.h"

namespace crihook {

// CreateContainer: env (names already present keep their place, new ones are
// appended in the adjustment's order, removed ones go), mounts and devices
// (replacing one at the same container path), CDI devices (once each),
// Linux resources, annotations and labels.
void applyToContainer(const Adjustment& a, runtime::v1::ContainerConfig& config);

// The resource fields only: what UpdateContainerResources carries, and what
// must survive kubelet's CPU-manager updates.
void applyToResources(const Adjustment& a, runtime::v1::LinuxContainerResources& resources);

// RunPodSandbox: annotations, labels, the cgroup parent and the pod's
// resources (LinuxPodSandboxConfig.resources).
void applyToSandbox(const Adjustment& a, runtime::v1::PodSandboxConfig& config);

}  // namespace crihook
