#pragma once

// The topology snapshot in force. crihookd discovers at start-up and again on
// SIGHUP; hooks get the snapshot current when their call began. Thread-safe.

#include <memory>
#include <mutex>

#include "topology.h"

namespace crihook::topology {

class SnapshotHolder {
 public:
  std::shared_ptr<const Snapshot> get() const {
    std::lock_guard lock(mu_);
    return snap_;
  }
  void set(std::shared_ptr<const Snapshot> snap) {
    std::lock_guard lock(mu_);
    snap_.swap(snap);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> snap_ = std::make_shared<const Snapshot>();
};

// "64 CPUs, 2 NUMA nodes, 8 GPUs, 7 RDMA devices, 0 warnings" for log lines.
std::string summary(const Snapshot& snap);

}  // namespace crihook::topology
