#pragma once

// builtin = "gpu" (PreCreateContainer): each allocated NVIDIA GPU's
// /dev/nvidia<minor> plus the NVIDIA control nodes present on the host
// (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset), as CRI devices
// with cgroup permissions "rw"; NVIDIA_VISIBLE_DEVICES set to the allocated
// GPUs' UUIDs (visible_devices = "uuid", default) or minors ("index"),
// replacing an image's "all".
//
// A shared GPU (koordinator.sh/gpu-memory-ratio below 100) in a pod labelled
// koordinator.sh/gpu-isolation-provider=HAMi-core (any case) also gets
// HAMi-core's limits as Koordinator sets them: CUDA_DEVICE_MEMORY_LIMIT
// (bytes of koordinator.sh/gpu-memory; per device _<i> when the GPUs differ;
// a 0 is refused, never set), CUDA_DEVICE_SM_LIMIT (gpu-core), LD_PRELOAD of
// `hami_core_library` (default /usr/local/vgpu/libvgpu.so, mounted
// read-only) and `hami_core_lock_dir` (default /tmp/vgpulock) mounted; both
// must exist on the host.
//
// Another vendor's GPU (allocation.h isNvidiaGpu) is passed through
// untouched for its own device plugin: logged once per pod and named in the
// container's crihook.io/gpu-passthrough annotation.
//
// Refusals (AllocationHook's error policy): a minor or id this node does not
// have, a GPU's VFs, a missing device node or HAMi-core path:
// FAILED_PRECONDITION naming the pod, the annotation's field or the setting.
//
// Inline: the device nodes and HAMi-core's paths come from a HostPaths
// (host_paths.h; its thread "host-paths" reads the filesystem), so run()
// reads memory only and never blocks a relay event loop. Kept inline rather
// than on an executor because the hop costs far more than the hook: measured
// with bench/device_hooks_bench (a 2-core VM under load), run() takes 0.8 us
// for two GPUs (3.4 us when it stat()ed /dev itself), and CreateContainer's
// pre+post stage with gpu + rdma + cpuset 25 us inline against 81 us with
// gpu and rdma each on an executor.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

// Set on a container whose pod was allocated another vendor's GPUs: their
// ids (or "minor N"), a JSON array.
inline constexpr std::string_view kGpuPassthroughAnnotation = "crihook.io/gpu-passthrough";
inline constexpr std::string_view kGpuIsolationProviderLabel =
    "koordinator.sh/gpu-isolation-provider";

// INVALID_ARGUMENT naming the setting when `settings_json` is wrong.
absl::StatusOr<std::shared_ptr<Hook>> makeGpuHook(const std::string& name,
                                                  const std::string& settings_json);

}  // namespace crihook
