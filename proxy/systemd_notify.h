#pragma once

#include <string_view>

namespace crihook {

// Sends `state` (e.g. "READY=1", "STOPPING=1") to systemd's notification
// socket when crihookd runs as a Type=notify unit ($NOTIFY_SOCKET set).
// A no-op otherwise. Never throws; returns false when a send failed.
bool notifySystemd(std::string_view state);

}  // namespace crihook
