#pragma once

// `crihookctl devices [--state-dir DIR] [--root DIR]`: the device-lifecycle
// hook's records (hooks/builtin/lifecycle/records.h) in DIR (default
// /var/lib/crihook/devices), read as crihookd wrote them and never moved: a
// table of each sandbox's devices, phase, failed cleanups and last error,
// then where each sandbox's devices sit on the node (sysfs under --root,
// default /); -o json: the records. A record that cannot be read is a
// warning line after them. An error naming DIR (exit 1) when it cannot be
// read at all.

#include "tools/crihookctl/command.h"

namespace crihook::ctl {

absl::StatusOr<int> cmdDevices(const Invocation& in);

}  // namespace crihook::ctl
