#pragma once

// Remembers which pod each sandbox and container belongs to, learnt from the
// RunPodSandbox and CreateContainer calls crihookd relays, so that a later
// StopContainer (which carries only a container id) can be logged and hooked
// with its pod named. Thread-safe; in memory only (forgotten on restart: ids
// seen before then are logged without a pod name).

#include <mutex>
#include <string>
#include <unordered_map>

#include "interceptor.h"

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

}  // namespace crihook
