#pragma once

// Remembers which pod each sandbox and container belongs to, learnt from the
// RunPodSandbox and CreateContainer calls crihookd relays, so that a later
// StopContainer (which carries only a container id) can be logged and hooked
// with its pod named. Thread-safe; in memory only (forgotten on restart: ids
// seen before then are logged without a pod name).

#include <google/protobuf/message.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "cri/lifecycle.h"

namespace crihook {

class PodDirectory {
 public:
  void addSandbox(const std::string& sandbox_id, const CallIdentity& pod);
  void addContainer(const std::string& container_id, const std::string& sandbox_id,
                    const std::string& container_name);
  void removeSandbox(const std::string& sandbox_id);
  void removeContainer(const std::string& container_id);

  // Fills the pod fields (and sandbox id, container name) of `id` from what is
  // known about id.sandbox_id or id.container_id. Unknown ids leave it as is.
  void complete(CallIdentity& id) const;

  size_t size() const;

 private:
  struct Container {
    std::string sandbox_id;
    std::string name;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, CallIdentity> sandboxes_;
  std::unordered_map<std::string, Container> containers_;
};

// Who a call is about: what its request says (ids, pod metadata), completed
// with what `pods` knows about those ids.
CallIdentity identityOf(const LifecycleSpec& spec, const google::protobuf::Message& request,
                        const PodDirectory& pods);

// After a successful call: copies a new sandbox/container id from `response`
// into `id`, records it in `pods`, and forgets removed ones.
void recordOutcome(const LifecycleSpec& spec, CallIdentity& id,
                   const google::protobuf::Message& response, PodDirectory& pods);

}  // namespace crihook
