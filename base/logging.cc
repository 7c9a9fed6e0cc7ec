#include "base/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "base/mutex.h"

namespace crihook {

namespace {
// Makes looking up and registering a logger one step (spdlog's registry
// locks each call alone), and orders setLogLevel after it.
Mutex& mu() {
  static Mutex m;
  return m;
}
}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  MutexLock lock(mu());
  if (auto existing = spdlog::get(name)) return existing;
  static auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(name, sink);
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%f%z %L %n: %v");
  l->set_level(spdlog::get_level());
  spdlog::register_logger(l);
  return l;
}

void setLogLevel(const std::string& level) {
  MutexLock lock(mu());
  spdlog::set_level(spdlog::level::from_str(level));  // applies to registered loggers too
}

}  // namespace crihook
