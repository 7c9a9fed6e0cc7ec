#pragma once

// The log line of an intercepted call, written when its kubelet stream
// closes: method, api, pod, sandbox and container (as the stages saw them),
// duration and final status. Names and ids come from the request: shown as
// they are when they look like what Kubernetes and the runtimes make, quoted
// otherwise, so a crafted name cannot forge a log line.

#include <spdlog/logger.h>

#include "proxy/call.h"

namespace crihook::relay {

// Logs `call` on `log` at info (OK) or warn; nothing for a pass-through call.
// Thread-safe as spdlog's logger is; reads only `call`.
void logCall(spdlog::logger& log, const Call& call);

}  // namespace crihook::relay
