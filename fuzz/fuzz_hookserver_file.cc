// Koordinator hook server registrations (hooks/remote/hookserver_dir.h):
// files in /etc/runtime/hookserver.d that koordlet or an operator writes.
// Each input is parsed as a file's text, then written as the one file of a
// directory and read back the way crihookd reads the directory.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "hooks/remote/hookserver_dir.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_hookserver_file: %s\n", what);
    std::abort();
  }
}

// What a message or a warning may hold: the quoted, cut input and the fixed
// wording around it.
constexpr size_t kMaxMessageBytes = 1024;

std::string dir() {
  static const std::string d = [] {
    std::string tmpl = std::filesystem::temp_directory_path() / "fuzz-hookserver.XXXXXX";
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    return tmpl;
  }();
  return d;
}

void checkParsed(const absl::StatusOr<crihook::HookServerRegistration>& r) {
  if (!r.ok()) {
    check(r.status().code() == absl::StatusCode::kInvalidArgument, "not INVALID_ARGUMENT");
    check(r.status().message().find("koordlet.json") != std::string_view::npos,
          "an error message not naming the file");
    check(r.status().message().size() <= kMaxMessageBytes, "an error message not cut short");
    return;
  }
  check(!r->socket_path.empty() && r->socket_path[0] == '/', "a socket path that is not absolute");
  for (const std::string& w : r->warnings)
    check(w.size() <= kMaxMessageBytes, "a warning not cut short");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = crihook::parseHookServerFile("koordlet.json", text);
  checkParsed(parsed);

  {
    std::ofstream out(dir() + "/koordlet.json", std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  auto files = crihook::readHookServerDir(dir()).files;
  check(files.size() == 1 && files[0].file == "koordlet.json", "the directory's one file not read");
  checkParsed(files[0].registration);
  check(files[0].registration.ok() == parsed.ok(), "the file read differs from its text parsed");
  return 0;
}
