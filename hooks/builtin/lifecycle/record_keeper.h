#pragma once

// The device-lifecycle hook's records (records.h) as the hook keeps them:
// each change stamped with its time and written before the hook goes on,
// and the sandboxes that owe a cleanup counted (lifecycle_metrics.h). Every
// change of a record's phase goes through save() or remove().
//
// Holds no lock of its own: a record is saved or removed by whoever holds
// its sandbox slot's lock (sandbox_slots.h), and files of different
// sandboxes are different files. Blocking (fsync): never on an event loop.

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "hooks/builtin/lifecycle/lifecycle_metrics.h"
#include "hooks/builtin/lifecycle/records.h"

namespace crihook {

class RecordKeeper {
 public:
  // Records in `dir` (empty: in memory only) through `env`; `metrics` and
  // `env` outlive this; errors of later writes are logged on `log`.
  RecordKeeper(std::string dir, Env& env, LifecycleMetrics& metrics,
               std::shared_ptr<spdlog::logger> log)
      : dir_(std::move(dir), env), metrics_(metrics), log_(std::move(log)) {}

  // The directory, made if needed; then every record in it
  // (DeviceRecordDir::loadAll, quarantining what does not parse), each
  // cleanup-pending one counted. FAILED_PRECONDITION "hook NAME: ..." when
  // the directory cannot be made, or a record is of a newer format (it may
  // owe a cleanup this build cannot read: serving without it could hand
  // uncleaned devices to the next pod); the unreadable ones in `errors`.
  absl::StatusOr<std::vector<DeviceRecord>> open(const std::string& hook_name,
                                                 std::vector<std::string>& errors);

  // A new record's first write, stamped: the error when it could not be
  // written (then no cleanup of its devices could be guaranteed).
  absl::Status create(DeviceRecord& r);
  // Stamps `r` and writes it; a failed write is logged (the record in
  // memory goes on). Counts it as owing a cleanup while its phase is
  // cleanup-pending.
  void save(DeviceRecord& r);
  // save(), but the error is the caller's: for a write that must be on disk
  // before what it records is done (a device's init: the record that says
  // it is touched, so that a restart owes its cleanup).
  absl::Status write(DeviceRecord& r);
  // Removes `r`'s file (a failure logged); it owes nothing any more.
  void remove(const DeviceRecord& r);

  const std::string& dir() const { return dir_.dir(); }

 private:
  static int64_t nowMs();

  DeviceRecordDir dir_;
  LifecycleMetrics& metrics_;
  const std::shared_ptr<spdlog::logger> log_;
};

}  // namespace crihook
