#include "hooks/builtin/devices/host_paths.h"

#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"

namespace crihook {

HostPaths::HostPaths(Spec spec, std::shared_ptr<spdlog::logger> log, Env& env,
                     std::chrono::milliseconds poll)
    : spec_(std::move(spec)), log_(std::move(log)), env_(env), poll_(poll) {
  // Read once here, so that the first calls are answered from what is there.
  listDirectory();
  checkPaths();
  watch_ = env_.watchDirectory(spec_.dir, poll_);
  thread_ = namedThread("host-paths", [this] { loop(); });
}

HostPaths::~HostPaths() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  watch_->stop();
  thread_.join();
}

bool HostPaths::hasEntry(std::string_view name) const {
  MutexLock lock(mu_);
  return entries_.count(name) != 0;
}

bool HostPaths::exists(std::string_view path) const {
  MutexLock lock(mu_);
  return existing_.count(path) != 0;
}

void HostPaths::listDirectory() {
  Names names;
  auto listed = env_.listDirectory(spec_.dir);
  // Not there (yet): no entries, quietly; the watch looks for it.
  if (!listed.ok() && listed.status().code() != absl::StatusCode::kNotFound) {
    const std::string why(listed.status().message());
    if (why != last_error_) log_->warn("device nodes {}: {}; none found there", spec_.dir, why);
    last_error_ = why;
  } else {
    last_error_.clear();
  }
  size_t left_out = 0;
  for (const DirEntry& e : listed.ok() ? *listed : std::vector<DirEntry>{}) {
    if (!e.name.starts_with(spec_.prefix)) continue;
    if (names.size() < kMaxEntries) {
      names.insert(e.name);
    } else {
      ++left_out;
    }
  }
  if (left_out > 0) {
    log_->error("device nodes {}: {} entries named {}* beyond the first {} left out", spec_.dir,
                left_out, quote(spec_.prefix, 64), kMaxEntries);
  }
  MutexLock lock(mu_);
  entries_ = std::move(names);
}

void HostPaths::checkPaths() {
  std::set<std::string, std::less<>> existing;
  for (const std::string& p : spec_.paths) {
    if (env_.exists(p)) existing.insert(p);
  }
  MutexLock lock(mu_);
  existing_ = std::move(existing);
}

void HostPaths::loop() {
  for (;;) {
    // True: the directory changed (or appeared, or went); false: `poll`
    // passed, or stop().
    const bool changed = watch_->wait(poll_);
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    if (changed) listDirectory();
    checkPaths();
  }
}

}  // namespace crihook
