#pragma once

// Koordinator's hook server registrations: one JSON file per server in
// /etc/runtime/hookserver.d, e.g.
//   {"remote-endpoint": "/var/run/koordlet/koordlet.sock",
//    "failure-policy": "Ignore",
//    "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", ...]}
// crihookd reads every *.json file of the directory, in file-name order (the
// order their servers are called in).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wire.h"

namespace crihook {

struct HookServerRegistration {
  std::string file;  // file name within the directory
  std::string name;  // the hook's name: "hookserver/<file name without .json>"
  std::string socket_path;
  bool ignore_failures = true;  // "failure-policy": "Fail" or "Ignore" (the default)
  std::vector<StageId> stages;
  std::string text;  // the file's contents, to tell an edit
};

// INVALID_ARGUMENT naming the file, the key and the reason.
absl::StatusOr<HookServerRegistration> parseHookServerFile(const std::string& file,
                                                           const std::string& text);

// Every *.json file of `dir` (dot files excluded), sorted by name, each
// parsed or with its error. A missing directory has no files.
struct HookServerFile {
  std::string file;
  absl::StatusOr<HookServerRegistration> registration;
};
std::vector<HookServerFile> readHookServerDir(const std::string& dir);

}  // namespace crihook
