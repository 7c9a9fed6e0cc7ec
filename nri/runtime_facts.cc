#include "nri/runtime_facts.h"

#include <charconv>

namespace crihook::nri {

std::optional<RuntimeVersion> parseRuntimeVersion(std::string_view text) {
  if (!text.empty() && text.front() == 'v') text.remove_prefix(1);
  int parts[3];
  const char* at = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      if (at == end || *at != '.') return std::nullopt;
      ++at;
    }
    // A version part is a few digits: more than 6 is not a version.
    const char* start = at;
    auto [next, ec] = std::from_chars(at, end, parts[i]);
    if (ec != std::errc() || next == start || next - start > 6) return std::nullopt;
    at = next;
  }
  return RuntimeVersion{parts[0], parts[1], parts[2]};
}

RefusedSandbox refusedSandboxOf(std::string_view runtime_name, std::string_view runtime_version) {
  if (runtime_name != "containerd") return RefusedSandbox::kUnknown;
  const auto v = parseRuntimeVersion(runtime_version);
  if (!v) return RefusedSandbox::kUnknown;
  // Facts from containerd's internal/cri/server/sandbox_run.go: 1.7's
  // pkg/cri/server deletes the task of a sandbox refused by NRI; 2.0 starts
  // the sandbox through its sandbox controller before NRI's RunPodSandbox
  // and shuts it down on a later failure only from v2.2.6 and v2.3.3 on
  // (the rollbackSandbox defer).
  if (v->major < 2) return RefusedSandbox::kRemoved;
  if (v->major > 2) return RefusedSandbox::kRemoved;
  if (v->minor <= 1) return RefusedSandbox::kLeaked;
  if (v->minor == 2) return v->patch >= 6 ? RefusedSandbox::kRemoved : RefusedSandbox::kLeaked;
  if (v->minor == 3) return v->patch >= 3 ? RefusedSandbox::kRemoved : RefusedSandbox::kLeaked;
  return RefusedSandbox::kRemoved;
}

}  // namespace crihook::nri
