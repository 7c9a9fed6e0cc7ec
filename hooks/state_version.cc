#include "hooks/state_version.h"

#include "base/text.h"

namespace crihook {

absl::StatusOr<uint32_t> stateVersionOf(const nlohmann::json& j, uint32_t newest,
                                        std::string_view what) {
  const std::string prefix = what.empty() ? "" : cat(what, ": ");
  if (!j.is_object()) return absl::InvalidArgumentError(cat(prefix, "not a JSON object"));
  auto it = j.find("version");
  if (it == j.end()) return 1u;  // written before state files carried a version
  constexpr int64_t kMaxVersion = int64_t{1} << 31;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxVersion) {
    std::string shown = it->dump();
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    return absl::InvalidArgumentError(
        cat(prefix, "version: expected a positive integer, got ", shown));
  }
  const auto version = static_cast<uint32_t>(it->get<int64_t>());
  if (version > newest) {
    return absl::FailedPreconditionError(cat(prefix, "format version ", version,
                                             "; this crihookd reads versions 1 to ", newest,
                                             " (the file was written by a newer crihookd)"));
  }
  return version;
}

}  // namespace crihook
