#pragma once

// Two GPUs as the node knows them (minors 2 and 3, their UUIDs and PCI
// addresses): what koordlet's minors, crihook's UUIDs and an address name,
// for the tests of values that are one decision in two spellings
// (ownership_test, chain_test's BesideKoordletTest).

#include <memory>

#include "base/text.h"
#include "topology/topology.h"

namespace crihook::testing {

inline std::shared_ptr<const topology::Snapshot> twoGpus() {
  auto t = std::make_shared<topology::Snapshot>();
  for (int minor : {2, 3}) {
    topology::Gpu g;
    g.address = cat("0000:1", minor, ":00.0");
    g.vendor = "nvidia";
    g.nvidia_driver = true;
    g.minor = minor;
    g.uuid = cat("GPU-0000000", minor, "-aaaa-bbbb-cccc-dddddddddddd");
    t->gpus.push_back(g);
  }
  return t;
}

// The two GPUs' UUIDs, as crihook's gpu hook sets NVIDIA_VISIBLE_DEVICES.
inline constexpr const char* kUuids =
    "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd,GPU-00000003-aaaa-bbbb-cccc-dddddddddddd";

}  // namespace crihook::testing
