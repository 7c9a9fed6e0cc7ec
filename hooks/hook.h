#pragma once

// The contract every hook implements, wherever it runs: compiled in, a
// dlopen'd module, or a remote server all reach the chain as a Hook.

#include <google/protobuf/message.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cri-api/crihook_hook_v1.pb.h"
#include "cri/lifecycle.h"
#include "hooks/adjustment.h"
#include "topology/topology.h"

namespace crihook {

// What a hook sees. Read-only; valid for the duration of Hook::run.
struct HookInput {
  LifecycleMethod method;
  Phase phase;
  CriApi api = CriApi::kV1;
  const google::protobuf::Message* request = nullptr;  // the runtime.v1 request kubelet sent
  const CallIdentity* identity = nullptr;
  // Post phase only: the runtime's answer (null unless it succeeded).
  const google::protobuf::Message* response = nullptr;
  absl::Status backend_status;

  // What crihook knows of the pod and the container, including what hooks
  // decided at earlier stages (hooks/state_store.h). RunPodSandbox and
  // CreateContainer see the configuration being created (no id yet); later
  // stages see the stored record; null when crihook never saw the object
  // (created before crihook ran, or state lost). Immutable snapshots.
  std::shared_ptr<const hook::v1::PodRecord> pod;
  std::shared_ptr<const hook::v1::ContainerRecord> container;

  // The node's hardware layout (topology/topology.h) as last discovered;
  // never null under crihookd (an empty snapshot when discovery found nothing).
  std::shared_ptr<const topology::Snapshot> topology;

  // When the chain stops waiting for this hook (its timeout, or the caller's
  // deadline if sooner). A hook that calls out passes it on.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// What a hook returns: go on (with an adjustment), reject the call (a
// decision: never ignored), or report that the hook itself failed (its
// failure policy decides).
struct HookDecision {
  enum class Kind { kContinue, kReject, kError };
  Kind kind = Kind::kContinue;
  absl::Status status;
  Adjustment adjustment;

  static HookDecision proceed(Adjustment a = {}) {
    return {Kind::kContinue, absl::OkStatus(), std::move(a)};
  }
  static HookDecision reject(absl::Status s) { return {Kind::kReject, std::move(s), {}}; }
  static HookDecision error(absl::Status s) { return {Kind::kError, std::move(s), {}}; }
};

class Hook {
 public:
  virtual ~Hook() = default;

  // Unique within the chain; used in logs, conflicts and `explain`.
  virtual const std::string& name() const = 0;

  virtual bool subscribes(LifecycleMethod method, Phase phase) const = 0;

  // Whether this call concerns the hook at all (e.g. Koordinator's hook
  // servers skip pods labelled runtimeproxy.koordinator.sh/skip-hookserver).
  // A hook that does not apply is not called and not listed as having run.
  // Cheap and non-blocking.
  virtual bool appliesTo(const HookInput&) const { return true; }

  // Decides. May block (a device reset, a remote call) unless runsInline();
  // called on a hook worker thread, never on an event loop; must be
  // thread-safe. An exception counts as kError.
  virtual HookDecision run(const HookInput& input) = 0;

  // True for hooks that only compute (microseconds, no I/O): the chain calls
  // them directly instead of on their executor (hooks/executor.h), and
  // checks their time afterwards.
  virtual bool runsInline() const { return false; }

  // True for hooks that return by HookInput::deadline on their own (a remote
  // call carrying it as its gRPC deadline): the chain calls them directly on
  // its worker thread instead of on an executor of their own. If
  // it returns late anyway, going on counts as a timeout; its own rejection
  // or error stands.
  virtual bool honoursDeadline() const { return false; }
};

}  // namespace crihook
