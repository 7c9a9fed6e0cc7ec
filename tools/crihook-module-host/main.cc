// crihook-module-host: runs one hook module out of crihookd's process
// ([[hook]] isolation = "process"). Started by crihookd (through its
// spawner) with the channel on fd 3; not meant to be run by hand.
//
//   crihook-module-host --module PATH --seccomp MODE --capabilities all|none|CAP_X,...
//
// hooks/module/module_host.h has the protocol.

#include <cstdio>
#include <string>

#include "hooks/module/module_host.h"

int main(int argc, char** argv) {
  std::string module, seccomp = "off", capabilities = "all";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--module") {
      module = argv[i + 1];
    } else if (flag == "--seccomp") {
      seccomp = argv[i + 1];
    } else if (flag == "--capabilities") {
      capabilities = argv[i + 1];
    } else {
      std::fprintf(stderr, "crihook-module-host: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (module.empty() || argc % 2 != 1) {
    std::fprintf(stderr,
                 "usage: crihook-module-host --module PATH [--seccomp MODE] "
                 "[--capabilities SET]; started by crihookd with its channel on fd 3\n");
    return 2;
  }
  return crihook::moduleHostMain(3, module, seccomp, capabilities);
}
