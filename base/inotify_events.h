#pragma once

// What PosixEnv's directory watch reads from its inotify descriptor.

#include <string_view>

namespace crihook {

// Whether `events`, whole inotify events as read(2) returns them, say that
// the watched directory itself is gone (removed, moved away, its watch
// dropped). Reads no byte past `events`; an event cut short is left out.
bool inotifyWatchGone(std::string_view events);

}  // namespace crihook
