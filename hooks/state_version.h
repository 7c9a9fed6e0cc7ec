#pragma once

// The format version every state file crihookd writes carries
// ("version": N at the top of its JSON object), and the one check every
// reader makes before trusting the rest: a file without a version is
// version 1 (what crihookd wrote before versions existed); a version this
// build does not read is refused, naming the file, the version found and the
// versions this build reads, and the caller leaves the file untouched.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/status/statusor.h"

namespace crihook {

// The state formats of this build. Bump one when a reader of the previous
// version would misread what the new code writes (a field changing meaning or
// type, not a field added: readers ignore unknown fields), and teach its
// reader the old versions it must still read.
inline constexpr uint32_t kPodStateVersion = 1;      // <state_dir>/pods/*.json
inline constexpr uint32_t kDeviceRecordVersion = 1;  // <state_dir>/devices/*.json
inline constexpr uint32_t kCpuPoolsVersion = 1;      // <state_dir>/cpuset/*.json

// The version `j` declares: 1 without a "version" member.
// INVALID_ARGUMENT when it is not an integer in 1..2^31 ("version: expected
// a positive integer, got ..."), FAILED_PRECONDITION when it is above
// `newest` ("<what>: format version 2; this crihookd reads versions 1 to 1
// ..."). `what` names the file in both.
absl::StatusOr<uint32_t> stateVersionOf(const nlohmann::json& j, uint32_t newest,
                                        std::string_view what);

}  // namespace crihook
