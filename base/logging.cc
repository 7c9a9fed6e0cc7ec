#include "base/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace crihook {

namespace {
std::mutex& mu() {
  static std::mutex m;
  return m;
}
}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  std::lock_guard lock(mu());
  if (auto existing = spdlog::get(name)) return existing;
  static auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(name, sink);
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%f%z %L %n: %v");
  l->set_level(spdlog::get_level());
  spdlog::register_logger(l);
  return l;
}

void setLogLevel(const std::string& level) {
  std::lock_guard lock(mu());
  spdlog::set_level(spdlog::level::from_str(level));  // applies to registered loggers too
}

}  // namespace crihook
