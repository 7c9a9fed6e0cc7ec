// crihookd's TOML config (config/config.h parseConfig): an operator's file,
// but the daemon must refuse a bad one with a message naming the key, never
// crash or hang on it.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/text.h"
#include "config/config.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_config: %s\n", what);
    std::abort();
  }
}

constexpr std::string_view kOrigin = "/etc/crihook/fuzz.toml";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = crihook::parseConfig(text, kOrigin);
  if (!config.ok()) {
    check(config.status().code() == absl::StatusCode::kInvalidArgument, "not INVALID_ARGUMENT");
    check(crihook::sv(config.status().message()).find(kOrigin) != std::string_view::npos,
          "an error message not naming the file");
    return 0;
  }
  absl::Status valid = crihook::validateConfig(*config, kOrigin);
  if (!valid.ok()) {
    check(crihook::sv(valid.message()).find(kOrigin) != std::string_view::npos,
          "a validation message not naming the file");
  }
  check(config->hook_workers >= 1, "no hook workers");
  return 0;
}
