#include "hooks/builtin/lifecycle/records.h"

#include <filesystem>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/text.h"
#include "hooks/state_version.h"

namespace crihook {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A record is {"pod": {...}, "devices": [{...}]}: 3 levels; facts of a device
// a level or two more.
constexpr int kMaxRecordNesting = 16;

constexpr std::pair<DevicePhase, std::string_view> kPhases[] = {
    {DevicePhase::kInitialising, "initialising"},
    {DevicePhase::kReady, "ready"},
    {DevicePhase::kCleanupPending, "cleanup-pending"},
    {DevicePhase::kCleaned, "cleaned"},
};

// A pod UID is a UUID; anything else is escaped so a file name can never
// leave the directory.
std::string safeName(std::string_view uid) {
  std::string out;
  for (unsigned char c : uid) {
    if (std::isalnum(c) || c == '-') {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string_view phaseName(DevicePhase p) {
  for (const auto& [phase, name] : kPhases) {
    if (phase == p) return name;
  }
  return "?";
}

json DeviceRecord::toJson() const {
  json devices = json::array();
  for (const auto& d : this->devices) devices.push_back(d.toJson());
  json cleaned_list = json::array();
  for (bool c : cleaned) cleaned_list.push_back(c);
  return {{"version", kDeviceRecordVersion},
          {"pod",
           {{"namespace", pod.namespace_},
            {"name", pod.name},
            {"uid", key.uid},
            {"attempt", key.attempt}}},
          {"sandbox_id", sandbox_id},
          {"phase", std::string(phaseName(phase))},
          {"devices", devices},
          {"touched", touched},
          {"cleaned", cleaned_list},
          {"removed", removed},
          {"cleanup_failures", cleanup_failures},
          {"last_error", last_error},
          {"changed_ms", changed_ms}};
}

absl::StatusOr<DeviceRecord> DeviceRecord::fromJson(const json& j) {
  DeviceRecord r;
  try {
    // FAILED_PRECONDITION for a newer format: loadAll leaves such a file alone.
    if (auto v = stateVersionOf(j, kDeviceRecordVersion, ""); !v.ok()) return v.status();
    const json& pod = j.at("pod");
    r.pod.namespace_ = pod.at("namespace").get<std::string>();
    r.pod.name = pod.at("name").get<std::string>();
    r.key.uid = r.pod.uid = pod.at("uid").get<std::string>();
    r.key.attempt = pod.at("attempt").get<uint32_t>();
    r.sandbox_id = j.at("sandbox_id").get<std::string>();
    const std::string phase = j.at("phase").get<std::string>();
    bool known = false;
    for (const auto& [p, name] : kPhases) {
      if (name == phase) r.phase = p, known = true;
    }
    if (!known) return absl::InvalidArgumentError(cat("phase: unknown ", quote(phase)));
    for (const json& d : j.at("devices")) {
      auto facts = DeviceFacts::fromJson(d);
      if (!facts.ok()) return facts.status();
      r.devices.push_back(std::move(*facts));
    }
    r.touched = j.at("touched").get<size_t>();
    if (r.touched > r.devices.size())
      return absl::InvalidArgumentError("touched: more than the devices");
    for (const json& c : j.at("cleaned")) r.cleaned.push_back(c.get<bool>());
    r.removed = j.at("removed").get<bool>();
    r.cleanup_failures = j.at("cleanup_failures").get<uint32_t>();
    r.last_error = j.at("last_error").get<std::string>();
    r.changed_ms = j.value("changed_ms", int64_t{0});
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return r;
}

absl::Status DeviceRecordDir::open() const {
  if (dir_.empty()) return absl::OkStatus();
  return env_->makeDirectories(dir_, 0700);
}

std::string DeviceRecordDir::fileOf(const SandboxKey& key) const {
  return cat(dir_, "/", safeName(key.uid), "_", key.attempt, ".json");
}

std::vector<DeviceRecord> DeviceRecordDir::loadAll(std::vector<std::string>& errors,
                                                   bool quarantine,
                                                   std::vector<std::string>* newer) const {
  std::vector<DeviceRecord> out;
  if (dir_.empty()) return out;
  auto entries = env_->listDirectory(dir_);
  if (!entries.ok()) {
    const bool missing = entries.status().code() == absl::StatusCode::kNotFound;
    errors.push_back(missing ? cat("cannot read ", dir_, ": it does not exist")
                             : std::string(entries.status().message()));
    return out;
  }
  for (const DirEntry& entry : *entries) {
    const std::string path = cat(dir_, "/", entry.name);
    if (fs::path(entry.name).extension() != ".json" || entry.name[0] == '.') continue;
    // Written by this hook: a link, a FIFO or a huge file there is not ours.
    absl::StatusOr<DeviceRecord> r = absl::InvalidArgumentError("unread");
    auto text = env_->readFile(path, kMaxStateFileBytes, FileLinks::kRefuse);
    if (!text.ok()) {
      // Not a record (a FIFO, a link, too large): moved aside as a broken
      // one; FAILED_PRECONDITION below means a newer format only.
      r = absl::InvalidArgumentError(text.status().message());
    } else if (auto j = parseJsonBounded(*text, kMaxStateFileBytes, kMaxRecordNesting); !j.ok()) {
      r = j.status();
    } else {
      r = DeviceRecord::fromJson(*j);
    }
    if (r.ok() && fileOf(r->key) != path) r = absl::InvalidArgumentError("names another pod");
    if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
      // A newer crihookd's record, maybe of a cleanup it owes: kept as it is.
      std::string why = cat("device record ", path, ": ", r.status().message(), "; left as it is");
      if (newer) newer->push_back(why);
      errors.push_back(std::move(why));
      continue;
    }
    if (!r.ok()) {
      if (quarantine) (void)env_->renameFile(path, path + ".bad");
      errors.push_back(cat("device record ", path, ": ", r.status().message(),
                           quarantine ? cat("; moved aside to ", path, ".bad") : ""));
      continue;
    }
    out.push_back(std::move(*r));
  }
  return out;
}

absl::Status DeviceRecordDir::save(const DeviceRecord& r) const {
  if (dir_.empty()) return absl::OkStatus();
  const std::string final_path = fileOf(r.key);
  // Beside it as .<name>.json.tmp: a dot file, skipped by loadAll.
  return env_->writeFileAtomic(final_path, r.toJson().dump(2) + "\n", Sync::kDurable);
}

absl::Status DeviceRecordDir::remove(const SandboxKey& key) const {
  if (dir_.empty()) return absl::OkStatus();
  return env_->removeFile(fileOf(key), Sync::kDurable);
}

}  // namespace crihook
