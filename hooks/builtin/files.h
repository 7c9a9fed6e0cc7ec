#pragma once

// Files the built-in hooks keep their own records in (device-lifecycle's
// per-sandbox records, the cpuset hook's pools).

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "base/env.h"  // syncDirectory

namespace crihook {

// Replaces `path` with `text` so that a crash or a power cut leaves the old
// file or the new one, never a mix: written to `tmp` (beside `path`, mode
// 0600, a symlink there is not followed), fsynced, renamed over `path`, then
// the directory fsynced. Blocking: call off the event loops. UNAVAILABLE
// "cannot write <tmp>: <reason>" when `tmp` cannot be created, "cannot write
// <path>: <reason>" when writing or renaming fails; `tmp` is then removed.
absl::Status replaceFileDurably(const std::string& path, const std::string& tmp,
                                std::string_view text);

}  // namespace crihook
