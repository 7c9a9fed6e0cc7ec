#pragma once

// The one place a merged adjustment changes a CRI request. Where each field
// lands is the schema's (adjustment_schema.h); these walk its rows.

#include "cri-api/runtime_v1.pb.h"
#include "hooks/adjustment.h"

namespace crihook {

// CreateContainer: env (names already present keep their place, new ones are
// appended in the adjustment's order, removed ones go), mounts and devices
// (replacing one at the same container path), CDI devices (once each),
// Linux resources, annotations and labels; into `sandbox` (the sandbox
// config the request carries; may be null) what lands there (the cgroup
// parent, which the runtime places the container under).
void applyToContainer(const Adjustment& a, runtime::v1::ContainerConfig& config,
                      runtime::v1::PodSandboxConfig* sandbox = nullptr);

// The resource fields only: what UpdateContainerResources carries, and what
// must survive kubelet's CPU-manager updates.
void applyToResources(const Adjustment& a, runtime::v1::LinuxContainerResources& resources);

// RunPodSandbox: annotations, labels, the cgroup parent and the pod's
// resources (LinuxPodSandboxConfig.resources, only made when a resource is set).
void applyToSandbox(const Adjustment& a, runtime::v1::PodSandboxConfig& config);

}  // namespace crihook
