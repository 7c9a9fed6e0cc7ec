#pragma once

// builtin = "device-lifecycle": initialises a pod's allocated devices before
// its sandbox is created and cleans them up after it stops, at least once,
// even across crihookd crashes.
//
//   [[hook]]
//   name = "devices"
//   builtin = "device-lifecycle"
//   timeout = "60s"                       # bounds init (RunPodSandbox) and cleanup (Stop/Remove)
//   [[hook.settings.gpu.init]]
//   command = ["/usr/bin/nvidia-smi", "-i", "{uuid}", "-pm", "1"]
//   timeout = "10s"
//   [[hook.settings.gpu.cleanup]]
//   builtin = "pci-reset"
//
// Files, commands and the clock go through BuiltinContext::env (base/env.h).
// Settings: gpu / rdma / fpga = {init = [actions], cleanup = [actions]}
// (actions.h: commands templated by the device and the pod, or built-ins);
// state_dir (default <[hooks] state_dir>/devices); device_root (default
// /dev); retry_initial (default "1s") and retry_max (default "5m"), the
// backoff of failed cleanups; orphan_grace (below).
//
// The devices are the pod's scheduling.koordinator.sh/device-allocated
// entries of the configured types, each RDMA function on its own (an
// allocated VF, not its PF), described with what the topology knows of them
// (UUID, PCI address, RDMA name, device node). RDMA functions are found as
// the rdma hook finds them (allocation.h resolveRdma: PF by id, or by
// koordlet's minor without one; VFs by busID); one that is not this node's
// refuses the sandbox (FAILED_PRECONDITION), so no action reaches a device
// the pod was not given. A VF's {minor} is its virtfn number under its PF.
// Another vendor's GPU (allocation.h isNvidiaGpu) is skipped, with a log
// line: it has no NVIDIA minor, UUID or node, and its device plugin sets it
// up.
//
// RunPodSandbox (pre): the devices' init actions run in allocation order,
// each device's in configured order. If one fails the call is rejected
// (FAILED_PRECONDITION naming the device, the action and why) and every
// device whose init began is cleaned up again, within the call's deadline;
// what is left then (an init cut at the deadline leaves no time) is cleaned
// up by the retry thread below. Every action, init or cleanup, ends by the
// call's deadline (actions.h), so the hook returns by it. A kubelet retry of the same
// sandbox (same pod UID and attempt) after a successful init initialises
// nothing twice; after an init crihookd did not live to finish, the touched
// devices are cleaned up before the init runs again. A cleanup still owed for
// an earlier sandbox of the same pod runs first (UNAVAILABLE if it fails:
// kubelet retries).
// StopPodSandbox (post) and RemovePodSandbox (post): the cleanup actions run
// for every initialised device (in reverse order of init), once: Stop cleans,
// a later Remove finds nothing to do; a Remove without a successful Stop
// cleans. A cleanup that fails is retried on a thread of the hook's own
// ("lifecycle-retry"), with backoff, until it succeeds; it never fails
// kubelet's call. The backoff is measured on the Env's monotonic clock
// (base/env.h; setting the date never moves it): a clock that jumps ahead
// runs the retry now due once, and the next is its delay after that.
// A device held by several sandboxes at once (a GPU split by HAMi-core) is
// initialised by the first and cleaned up after the last.
// Records (records.h) are written before and after each step. At start the
// hook reads them; with the runtime's sandboxes (Reconciler) it cleans up
// after sandboxes that were stopped or removed while crihookd was down, and
// every few minutes after sandboxes stopped or removed behind its back and
// inits whose sandbox did not appear within `orphan_grace` (default "10m").
//
// The hook is put together from parts of one job and one lock each (their
// headers say what each lock guards and the lock order): the sandboxes'
// slots (sandbox_slots.h), the shared devices' holders (device_holders.h),
// the retries (retry_schedule.h), the records (record_keeper.h), the counts
// (lifecycle_metrics.h); the settings (lifecycle_settings.h) and the pod's
// devices (pod_devices.h) need none.
//
// A RunPodSandbox the runtime refused outright is cleaned up at once (within
// the post stage's deadline, the rest on the retry thread); not
// after a timeout, a cancellation or "already exists" (the sandbox may exist:
// a kubelet retry is refused while the first call's sandbox is being made),
// nor while another RunPodSandbox for the same sandbox is under way.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hooks/hook.h"
#include "hooks/registry.h"

namespace crihook {

absl::StatusOr<std::shared_ptr<Hook>> makeDeviceLifecycleHook(const std::string& name,
                                                              const std::string& settings_json,
                                                              const BuiltinContext& context);

}  // namespace crihook
