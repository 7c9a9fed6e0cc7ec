// topology_bench: discovery on the DGX-shaped fixture tree (8 GPUs, 4 PCIe
// switches, 5 NICs with VFs, 64 CPUs) and placement queries on it.
//
//   topology_bench [--iterations N]
//
// Medians and p99s. Goals: discovery under 10 ms, a placement query under
// 100 us.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "topology/placement.h"
#include "topology/topology.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace topo = crihook::topology;

template <typename F>
void measure(const char* label, int iterations, F&& once) {
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    once();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-52s p50 %9.1f us   p99 %9.1f us\n", label, us[us.size() / 2],
              us[us.size() * 99 / 100]);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 300;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") iterations = std::stoi(argv[++i]);
  }
  char tmpl[] = "/tmp/crihook-topology-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string cmd = "bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh " + dir;
  if (std::system(cmd.c_str()) != 0) return 1;
  const topo::SysRoot root(dir + "/dgx");
  topo::Snapshot snap;
  measure("discovery, DGX-shaped fixture (goal < 10 ms)", iterations,
          [&] { snap = topo::discover(root); });
  std::printf("  (%zu CPUs, %zu PCI devices, %zu GPUs, %zu RDMA devices)\n", snap.cpus.size(),
              snap.pci.size(), snap.gpus.size(), snap.rdma.size());
  topo::DeviceSet taken{{"0000:1a:00.0"}, {}, {0, 1, 2, 3}};
  measure("pick 2 GPUs + nearest NIC + 16 CPUs (goal < 100 us)", iterations * 20, [&] {
    auto c = topo::pick(snap, {2, true, 16}, taken, topo::PcieScope::kRootComplex);
    if (!c.ok()) std::abort();
  });
  measure("pick 4 GPUs + NIC + 32 CPUs (NUMA scope)", iterations * 20, [&] {
    auto c = topo::pick(snap, {4, true, 32}, {}, topo::PcieScope::kRootComplex);
    if (!c.ok()) std::abort();
  });
  measure("sharedScope of 2 GPUs, a NIC and 8 CPUs", iterations * 20, [&] {
    auto a = topo::sharedScope(
        snap, {{"0000:1a:00.0", "0000:1b:00.0"}, {"0000:1c:00.0"}, {0, 1, 2, 3, 32, 33, 34, 35}},
        topo::PcieScope::kRootComplex);
    if (!a.ok()) std::abort();
  });
  std::filesystem::remove_all(dir);
  return 0;
}
