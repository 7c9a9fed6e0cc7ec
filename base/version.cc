#include "base/version.h"

#include "base/text.h"

namespace crihook {

std::string versionLine(std::string_view program, std::string_view version,
                        std::string_view commit) {
  if (commit.empty()) return cat(program, " ", version);
  return cat(program, " ", version, " (git ", commit, ")");
}

}  // namespace crihook
