#include "hooks/builtin/lifecycle/record_keeper.h"

#include <chrono>

#include "base/text.h"

namespace crihook {

int64_t RecordKeeper::nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::vector<DeviceRecord>> RecordKeeper::open(const std::string& hook_name,
                                                             std::vector<std::string>& errors) {
  if (dir().empty()) {
    log_->warn("no state directory: a cleanup owed when crihookd stops is forgotten");
  } else if (auto s = dir_.open(); !s.ok()) {
    return absl::FailedPreconditionError(cat("hook ", hook_name, ": ", s.message()));
  }
  std::vector<std::string> newer;
  std::vector<DeviceRecord> loaded = dir_.loadAll(errors, /*quarantine=*/true, &newer);
  if (!newer.empty()) {
    return absl::FailedPreconditionError(
        cat("hook ", hook_name, ": ", newer.front(),
            newer.size() > 1 ? cat(" (and ", newer.size() - 1, " more)") : "",
            ". Run the crihookd that wrote it, or clean its devices by hand and move the file "
            "out of ",
            dir()));
  }
  for (const DeviceRecord& r : loaded)
    metrics_.setPending(r.key, r.phase == DevicePhase::kCleanupPending);
  return loaded;
}

absl::Status RecordKeeper::create(DeviceRecord& r) {
  r.changed_ms = nowMs();
  return dir_.save(r);
}

void RecordKeeper::save(DeviceRecord& r) {
  if (auto s = write(r); !s.ok()) log_->error("{}", sv(s.message()));
}

absl::Status RecordKeeper::write(DeviceRecord& r) {
  r.changed_ms = nowMs();
  absl::Status s = dir_.save(r);
  metrics_.setPending(r.key, r.phase == DevicePhase::kCleanupPending);
  return s;
}

void RecordKeeper::remove(const DeviceRecord& r) {
  if (auto s = dir_.remove(r.key); !s.ok()) log_->error("{}", sv(s.message()));
  metrics_.setPending(r.key, false);
}

}  // namespace crihook
