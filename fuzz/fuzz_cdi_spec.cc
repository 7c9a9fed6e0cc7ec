// CDI spec files (hooks/builtin/cdi): whatever a vendor's tool or anyone
// with write access to /etc/cdi or /var/run/cdi puts there. Every input is
// parsed as JSON and as YAML, as a .json and a .yaml file would be.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "hooks/builtin/cdi/cdi.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_cdi_spec: %s\n", what);
    std::abort();
  }
}

void parse(const std::string& text, bool yaml) {
  const std::string file = yaml ? "/etc/cdi/fuzz.yaml" : "/etc/cdi/fuzz.json";
  std::string kind;
  std::map<std::string, crihook::CdiEdits> devices;
  crihook::CdiEdits global;
  absl::Status s = crihook::parseCdiSpec(file, text, yaml, &kind, &devices, &global);
  if (!s.ok()) {
    check(s.code() == absl::StatusCode::kInvalidArgument, "not INVALID_ARGUMENT");
    check(s.message().rfind(file, 0) == 0, "an error message not naming the file");
    return;
  }
  const auto slash = kind.find('/');
  check(slash != std::string::npos && slash > 0 && slash + 1 < kind.size(),
        "a kind that is not vendor/class");
  for (const auto& [name, edits] : devices) {
    for (const auto& d : edits.adjustment.devices) {
      check(!d.container_path.empty() && d.container_path[0] == '/', "a relative device path");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse(text, /*yaml=*/false);
  parse(text, /*yaml=*/true);
  return 0;
}
