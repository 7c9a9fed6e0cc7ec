#pragma once

// Named loggers ("proxy", "crihookd", later "hook.<name>", "topology") that
// share one stderr sink, so systemd's journal gets every line once.

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace crihook {

// Returns the logger `name`, creating it on the shared sink. Thread-safe.
std::shared_ptr<spdlog::logger> logger(const std::string& name);

// Sets the level of every crihook logger, present and future. `level` is one
// of trace, debug, info, warn, error, critical, off (validated by config).
void setLogLevel(const std::string& level);

}  // namespace crihook
