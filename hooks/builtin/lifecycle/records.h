#pragma once

// What the device-lifecycle hook did for each pod sandbox, one JSON file per
// sandbox (<pod uid>_<attempt>.json) in its state directory, written
// atomically (temporary file, fsync, rename, fsync of the directory) before
// and after every step, so a crash at any point leaves a record that says
// which devices may need a cleanup.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/process_env.h"

namespace crihook {

struct SandboxKey {
  std::string uid;
  uint32_t attempt = 0;
  bool operator<(const SandboxKey& o) const {
    return uid != o.uid ? uid < o.uid : attempt < o.attempt;
  }
  bool operator==(const SandboxKey&) const = default;
};

enum class DevicePhase {
  kInitialising,    // init actions running (or crihookd died while they ran)
  kReady,           // every device initialised; the sandbox may run
  kCleanupPending,  // a cleanup is owed and has not yet succeeded everywhere
  kCleaned,         // every touched device cleaned; kept until the sandbox is removed
};
std::string_view phaseName(DevicePhase p);

struct DeviceRecord {
  SandboxKey key;
  PodFacts pod;
  std::string sandbox_id;  // once the runtime created it
  DevicePhase phase = DevicePhase::kInitialising;
  std::vector<DeviceFacts> devices;
  size_t touched = 0;         // devices whose init began (in order)
  std::vector<bool> cleaned;  // per device, during a cleanup
  bool removed = false;       // the sandbox is gone from the runtime
  uint32_t cleanup_failures = 0;
  std::string last_error;
  int64_t changed_ms = 0;  // when it last changed (Unix time, ms): reconciling skips newer ones

  nlohmann::json toJson() const;
  static absl::StatusOr<DeviceRecord> fromJson(const nlohmann::json& j);
};

class DeviceRecordDir {
 public:
  // Empty `dir`: records are kept in memory only (they die with crihookd).
  // Every file operation goes through `env`, which outlives this.
  explicit DeviceRecordDir(std::string dir, Env& env = processEnv())
      : dir_(std::move(dir)), env_(&env) {}

  // Creates the directory (0700) if needed.
  absl::Status open() const;
  // Every record; a file that does not parse is reported in `errors` and,
  // with `quarantine`, moved aside to <file>.bad (nothing is lost, nothing
  // half-read). Readers other than the hook (crihookctl) leave it in place.
  // Records carry a format version (state_version.h; none = 1): a file of a
  // newer version is never moved nor changed; it is reported in `errors` and
  // in `newer` ("device record FILE: format version 2; this crihookd reads
  // versions 1 to 1 ...; left as it is").
  std::vector<DeviceRecord> loadAll(std::vector<std::string>& errors, bool quarantine = true,
                                    std::vector<std::string>* newer = nullptr) const;
  // Blocking (fsync); call off the event loops. UNAVAILABLE "cannot write
  // <file>: <reason>"; the file is then as it was before.
  absl::Status save(const DeviceRecord& r) const;
  absl::Status remove(const SandboxKey& key) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string fileOf(const SandboxKey& key) const;
  std::string dir_;
  Env* env_;
};

}  // namespace crihook
