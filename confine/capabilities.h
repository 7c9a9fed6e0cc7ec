#pragma once

// Capability sets by name, and dropping them: what crihookd keeps after
// start-up (`[security] capabilities`) and what the spawner keeps for the
// commands it runs (`[security] spawner_capabilities`).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook::confine {

// A set of capabilities, bit N = capability N (CAP_CHOWN = 0 ...).
using CapSet = uint64_t;

// "CAP_NET_ADMIN" or "net_admin" (any case) -> its bit. `field` names the
// config entry in errors: INVALID_ARGUMENT "security.capabilities[1]: unknown
// capability \"cap_foo\"".
absl::StatusOr<CapSet> parseCapabilities(const std::vector<std::string>& names,
                                         std::string_view field);

// "CAP_CHOWN,CAP_KILL" (or "none").
std::string capabilityNames(CapSet set);

// The highest capability the running kernel knows (/proc/sys/kernel/cap_last_cap).
int lastCapability();

// Drops every capability not in `keep` from the bounding set, then sets
// permitted = effective = keep ∩ permitted, inheritable = ambient = none.
// Needs CAP_SETPCAP for the bounding set (a process without it can only
// lower the other sets: FAILED_PRECONDITION naming the capability it could
// not drop). Capabilities are per thread and a new thread inherits its
// creator's: call it while the process has one thread (crihookd does, right
// after forking the spawner), else the other threads keep theirs
// (FAILED_PRECONDITION then).
absl::Status keepOnlyCapabilities(CapSet keep);

// How many threads the process has (/proc/self/task), -1 if unknown.
int processThreadCount();

// The CapEff / CapPrm / CapBnd lines of /proc/<pid>/status ("self" by
// default), for logs and tests.
struct CapStatus {
  CapSet effective = 0, permitted = 0, bounding = 0;
};
absl::StatusOr<CapStatus> readCapStatus(const std::string& pid = "self");

}  // namespace crihook::confine
