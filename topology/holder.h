#pragma once

// The topology snapshot in force. crihookd discovers at start-up and again on
// SIGHUP; hooks get the snapshot current when their call began. Thread-safe.

#include <string>

#include "base/current.h"
#include "topology/topology.h"

namespace crihook::topology {

using SnapshotHolder = Current<Snapshot>;

// "64 CPUs, 2 NUMA nodes, 8 GPUs, 7 RDMA devices, 0 warnings" for log lines.
std::string summary(const Snapshot& snap);

}  // namespace crihook::topology
