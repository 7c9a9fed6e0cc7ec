#pragma once

// Container Device Interface: spec files (JSON or YAML) in /etc/cdi and
// /var/run/cdi that say what a named device (vendor.com/class=name) needs in
// a container — env vars, device nodes, mounts, OCI hooks. crihook resolves
// the CDI devices a container asks for (the CRI CDI_devices field and
// cdi.k8s.io/* annotations) for runtimes that do not do it themselves, such
// as containerd 1.6.
//
// builtin = "cdi", on PreCreateContainer. Settings:
//   spec_dirs = ["/etc/cdi", "/var/run/cdi"]   a later directory wins
//   mode = "apply"            or "runtime": leave CDI to a runtime that does it
//   on_unsupported = "annotate"   OCI hooks (and other edits CRI cannot carry)
//                             are logged and listed in the container
//                             annotation crihook.io/cdi-unsupported; or
//                             "reject" the container
// An unknown CDI device is FAILED_PRECONDITION naming the container and the
// device; a spec file that cannot be read or parsed is logged naming the file
// and the field, and the other specs still serve.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "base/mutex.h"
#include "hooks/adjustment.h"
#include "hooks/hook.h"
#include "hooks/process_env.h"

namespace crihook {

inline constexpr std::string_view kCdiUnsupportedAnnotation = "crihook.io/cdi-unsupported";

// What the spec directories may hold, read at each call that needs them:
// entries looked at per directory (the first by name), spec files read per
// directory, and the bytes of every spec read together (each at most
// kMaxCdiSpecBytes). A node's vendors write a few specs of kilobytes; what
// lies past a bound is named among the call's errors, not read.
inline constexpr size_t kMaxCdiDirEntries = 1024;
inline constexpr size_t kMaxCdiSpecFiles = 64;
inline constexpr size_t kMaxCdiSpecsBytes = 16u << 20;

// What one CDI device (with its spec's global edits) adds to a container.
struct CdiEdits {
  Adjustment adjustment;
  std::vector<std::string> unsupported;  // "hook createContainer /usr/bin/nvidia-ctk"
};

// The specs of some directories. Thread-safe; a spec file is parsed again
// only when its modification time changes.
class CdiRegistry {
 public:
  // Spec files are listed and read through `env`, which outlives this.
  explicit CdiRegistry(std::vector<std::string> dirs, Env& env = processEnv());

  // Edits for each fully qualified device name, in order (the spec files
  // checked once for all of them); NOT_FOUND for a name no spec defines.
  // `errors` gets a line per spec file that could not be used, and one per
  // bound that left files unread.
  std::vector<absl::StatusOr<CdiEdits>> resolve(const std::vector<std::string>& names,
                                                std::vector<std::string>* errors);

 private:
  struct Spec {
    int64_t mtime_ns = 0;
    size_t bytes = 0;  // of its text
    std::string kind;  // vendor.com/class
    std::map<std::string, CdiEdits> devices;
    CdiEdits global;
    std::string error;  // why the file could not be used
  };
  void refreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::string> dirs_;
  Env* env_;
  Mutex mu_;
  std::map<std::string, Spec> specs_ ABSL_GUARDED_BY(mu_);  // by path
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);     // paths, lowest priority first
  std::vector<std::string> unread_ ABSL_GUARDED_BY(mu_);    // what a bound left unread
};

// Parses one spec's text (JSON, or YAML when `yaml`). Errors name the file
// and the field ("/etc/cdi/x.yaml: devices[0].containerEdits.env[1]: ...").
absl::Status parseCdiSpec(const std::string& file, const std::string& text, bool yaml,
                          std::string* kind, std::map<std::string, CdiEdits>* devices,
                          CdiEdits* global);

absl::StatusOr<std::shared_ptr<Hook>> makeCdiHook(const std::string& name,
                                                  const std::string& settings_json);

}  // namespace crihook
