#pragma once

// What the device hooks' benchmarks run on: test/topology/make-fixtures.sh's
// machines in a new folder under /tmp (kept, for a look after the run), and
// beside them dev/, empty files standing for the device nodes the gpu and
// rdma hooks look up. Needs CRIHOOK_SOURCE_DIR (bench/meson.build).

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace crihook::bench {

struct DgxFixture {
  std::string root;  // holds dgx/, workstation/, ... and dev/
  std::string dgx;   // the DGX-shaped machine's root (sys/, proc/)
  std::string dev;   // the device root for the hooks' `device_root`
};

// None when make-fixtures.sh fails (it has said why on stderr).
inline std::optional<DgxFixture> makeDgxFixture() {
  char tmpl[] = "/tmp/crihook-bench-XXXXXX";
  const char* made = ::mkdtemp(tmpl);
  if (made == nullptr) return std::nullopt;
  DgxFixture f{made, std::string(made) + "/dgx", std::string(made) + "/dev"};
  const std::string cmd = "bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh " + f.root;
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  std::filesystem::create_directories(f.dev + "/infiniband");
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "infiniband/rdma_cm",
                        "infiniband/uverbs6"})
    std::ofstream(f.dev + "/" + n) << "";
  return f;
}

}  // namespace crihook::bench
