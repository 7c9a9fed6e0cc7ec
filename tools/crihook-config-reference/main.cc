// crihook-config-reference: prints the configuration reference from
// config/config_keys.cc's table, or writes or checks the committed copies
// (config/config_reference.h). Not installed; `ninja -C build
// config-reference` runs `write`, the unit test `check`.

#include <cstdio>
#include <string>
#include <vector>

#include "config/config_reference.h"

namespace {

constexpr const char* kUsage =
    "usage: crihook-config-reference markdown|man\n"
    "       crihook-config-reference check|write SOURCE-DIR\n"
    "  markdown  print docs/configuration.md\n"
    "  man       print crihook.toml(5)'s key reference\n"
    "  check     exit 1 naming each committed file that is not what the table prints,\n"
    "            and each problem of debian/examples/crihook.toml\n"
    "  write     rewrite docs/configuration.md and crihook.toml.5.in's key reference\n";

int check(const std::string& source_dir) {
  const std::vector<std::string> problems = crihook::checkCommittedReference(source_dir);
  for (const std::string& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
  return problems.empty() ? 0 : 1;
}

int write(const std::string& source_dir) {
  if (auto s = crihook::writeCommittedReference(source_dir); !s.ok()) {
    std::fprintf(stderr, "crihook-config-reference: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return check(source_dir);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc == 2 && mode == "markdown") {
    std::fputs(crihook::configReferenceMarkdown().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && mode == "man") {
    std::fputs(crihook::configReferenceMan().c_str(), stdout);
    return 0;
  }
  if (argc == 3 && mode == "check") return check(argv[2]);
  if (argc == 3 && mode == "write") return write(argv[2]);
  std::fputs(kUsage, argc == 2 && (mode == "--help" || mode == "-h") ? stdout : stderr);
  return argc == 2 && (mode == "--help" || mode == "-h") ? 0 : 2;
}
