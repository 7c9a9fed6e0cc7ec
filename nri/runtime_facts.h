#pragma once

// What crihookd knows of the runtime that configured it (NRI's
// ConfigureRequest names it and its version): the behaviours that differ
// between runtime versions and that NRI mode works around. Pure functions.

#include <optional>
#include <string>
#include <string_view>

namespace crihook::nri {

// A runtime's version as major.minor.patch, read from what it sends:
// containerd's "1.7.24~ds1", "2.1.9+unknown", "v2.2.6"; nullopt when it
// does not start with three dot-separated numbers.
struct RuntimeVersion {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const RuntimeVersion&) const = default;
};
std::optional<RuntimeVersion> parseRuntimeVersion(std::string_view text);

// What the runtime does with a pod sandbox whose RunPodSandbox an NRI plugin
// refused.
enum class RefusedSandbox {
  // It stops and removes the sandbox: containerd 1.7 (its default CRI
  // server: the pause task is killed and deleted), 2.2.6 and later 2.2,
  // 2.3.3 and later.
  kRemoved,
  // It leaves the sandbox's pause task running, listed by no CRI call, and
  // a later pod of the same name makes containerd fail its next start
  // ("failed to recover state: failed to reserve sandbox name"): containerd
  // 2.0.x, 2.1.x (end of life), 2.2.0-2.2.5, 2.3.0-2.3.2 (containerd
  // #13355, fixed by #13399 in 2.2.6 and 2.3.3).
  kLeaked,
  // A runtime or version crihook has no word on (CRI-O, an unparsable
  // version): taken as kRemoved.
  kUnknown,
};
RefusedSandbox refusedSandboxOf(std::string_view runtime_name, std::string_view runtime_version);

}  // namespace crihook::nri
