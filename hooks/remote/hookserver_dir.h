#pragma once

// Koordinator's hook server registrations: one JSON file per server in
// /etc/runtime/hookserver.d, e.g.
//   {"remote-endpoint": "/var/run/koordlet/koordlet.sock",
//    "failure-policy": "Ignore",
//    "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", ...]}
// crihookd reads every *.json file of the directory, in file-name order (the
// order their servers are called in). It accepts what koord-runtime-proxy
// accepts (Go's json.Unmarshal into its RuntimeHookConfig): unknown keys and
// hook names, keys in another case, an empty or missing "runtime-hooks", any
// "failure-policy" string (only "Fail" fails); what it ignores is listed in
// the registration's warnings. Files are bounded: regular files only, 64 KiB.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "hooks/process_env.h"
#include "hooks/wire.h"

namespace crihook {

struct HookServerRegistration {
  std::string file;  // file name within the directory
  std::string name;  // the hook's name: "hookserver/<file name without .json>"
  std::string socket_path;
  bool ignore_failures = true;  // "failure-policy": only exactly "Fail" fails
  std::vector<StageId> stages;
  // Hook names Koordinator knows but its RuntimeHookService has no call for
  // (PreRemoveRunPodSandbox): registered, never called.
  std::vector<std::string> uncallable;
  // What was ignored, one "key: reason" each (unknown keys and hook names, a
  // failure policy other than Fail/Ignore, no callable hook), for the log.
  std::vector<std::string> warnings;
  std::string text;  // the file's contents, to tell an edit
};

// INVALID_ARGUMENT naming the file, the key and the reason, for what Go's
// json.Unmarshal refuses too (not JSON, a value of the wrong type) and for a
// missing or non-Unix remote-endpoint (koord-runtime-proxy would keep the
// file and fail every call to it).
absl::StatusOr<HookServerRegistration> parseHookServerFile(const std::string& file,
                                                           const std::string& text);

// The directory's bounds: whatever is dropped in it, crihookd lists, reads
// and registers at most this much (a node has one or a few servers).
inline constexpr size_t kMaxHookServerDirEntries = 1024;  // listed, of any kind
inline constexpr size_t kMaxHookServerFiles = 64;         // registrations read
inline constexpr size_t kMaxHookServerDirBytes = 1 << 20;  // their bytes together

struct HookServerFile {
  std::string file;
  absl::StatusOr<HookServerRegistration> registration;
};
struct HookServerDir {
  std::vector<HookServerFile> files;
  // What was left unread past the bounds, one line for the log; "" when
  // nothing was.
  std::string skipped;
};

// The *.json files of `dir` (dot files excluded), sorted by name, each
// parsed or with its error, within the bounds above: the first
// kMaxHookServerDirEntries entries by name are listed, of those the first
// kMaxHookServerFiles registrations read while their bytes stay within
// kMaxHookServerDirBytes. A missing directory has no files. Listed and read
// through `env`.
HookServerDir readHookServerDir(const std::string& dir, Env& env = processEnv());

}  // namespace crihook
