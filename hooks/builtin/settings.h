#pragma once

// Reading a built-in hook's [hook.settings] (given as JSON): the checks every
// built-in hook shares, each error naming the setting.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/wire.h"

namespace crihook {

// A duration setting ("500ms", "2s", "5m") above zero; the reason otherwise,
// for the caller to prefix with where it stands.
absl::StatusOr<std::chrono::milliseconds> positiveDuration(const nlohmann::json& v);

class HookSettingsReader {
 public:
  // INVALID_ARGUMENT unless `json` is an object.
  static absl::StatusOr<HookSettingsReader> parse(const std::string& name, const std::string& json);

  // Unknown keys are errors: a typo must not silently do nothing.
  absl::Status checkKnown(const std::vector<std::string_view>& known) const;

  // Stage names ("PreCreateContainer"), each one of `allowed` when given;
  // `fallback` when the key is absent.
  absl::StatusOr<std::vector<StageId>> stages(std::string_view key, std::vector<StageId> fallback,
                                              const std::vector<StageId>& allowed = {}) const;

  // One of `allowed` (a string); allowed.front() when the key is absent.
  absl::StatusOr<std::string> oneOf(std::string_view key,
                                    const std::vector<std::string_view>& allowed) const;

  absl::StatusOr<std::map<std::string, std::string>> stringMap(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> stringList(std::string_view key) const;
  const nlohmann::json* get(std::string_view key) const;
  // Sets `out` when the key is present: an absolute path, or a duration
  // ("500ms", "2s", "5m") above zero. Unchanged when absent.
  absl::Status absolutePath(std::string_view key, std::string& out) const;
  absl::Status duration(std::string_view key, std::chrono::milliseconds& out) const;

  absl::Status error(std::string_view key, std::string_view why) const;

 private:
  std::string name_;
  nlohmann::json json_;
};

}  // namespace crihook
