#pragma once

// The runtime's own view of its pod sandboxes, for hooks that keep state
// across crihookd restarts and must square it with what happened while
// crihookd was down (a sandbox removed then still owes its cleanup); and the
// one call a hook makes to the runtime on its own, to move a running
// container to other CPUs.

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook {

struct RuntimeSandbox {
  std::string id;
  std::string uid, namespace_, name;
  uint32_t attempt = 0;
  bool ready = false;  // SANDBOX_READY; otherwise stopped (NOTREADY)
};

// A hook that squares its records with the runtime's sandboxes. HookManager
// calls reconcile() once crihookd serves and the runtime answers
// ListPodSandbox, then again every few minutes. `listed_at` is when the list
// was asked for: what changed since is not in it. Must not block for long
// (start long work on a thread of its own); thread-safe with run().
class Reconciler {
 public:
  virtual ~Reconciler() = default;
  virtual void reconcile(const std::vector<RuntimeSandbox>& sandboxes,
                         std::chrono::system_clock::time_point listed_at) = 0;
};

// ListPodSandbox on `endpoint` (unix://…), runtime.v1, falling back to
// runtime.v1alpha2 when v1 is UNIMPLEMENTED. Blocks up to `timeout`.
// UNAVAILABLE while the runtime is not up.
absl::StatusOr<std::vector<RuntimeSandbox>> listRuntimeSandboxes(const std::string& endpoint,
                                                                 std::chrono::milliseconds timeout);

// UpdateContainerResources on `endpoint` (unix://…) setting only the
// container's cpuset_cpus and cpuset_mems (the runtime keeps its other
// limits), runtime.v1, falling back to runtime.v1alpha2 when v1 is
// UNIMPLEMENTED. Blocks up to `timeout` (each API). The runtime's status
// otherwise (NOT_FOUND: no such container; UNAVAILABLE: not up), the message
// naming the container and the endpoint. Never call it on an event loop.
absl::Status updateRuntimeContainerCpuset(const std::string& endpoint,
                                          const std::string& container_id, const std::string& cpus,
                                          const std::string& mems,
                                          std::chrono::milliseconds timeout);

}  // namespace crihook
