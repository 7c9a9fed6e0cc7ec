#pragma once

// The device pod of the end-to-end suites (test/e2e/): a fake device tree
// (character devices made with mknod, the majors and minors of /dev/zero and
// /dev/null standing in for GPUs and RDMA functions, described by the
// DGX-shaped fixture topology of test/topology/make-fixtures.sh), crihookd's
// device hooks over it (gpu, rdma, cpuset, device-lifecycle, whose actions
// a script logs one line each), and the pod Koordinator's scheduler would
// allocate two GPUs, an RDMA VF and a CPU, with what its container must see.
// Shared by the proxy-mode suite (containerd_e2e_test.cc) and the NRI-mode
// one (nri_mode_e2e_test.cc), so both run the same pod through the same
// hooks.
//
// Needs root (mknod). Helpers throw std::runtime_error (runShellOrThrow)
// when the tree cannot be made.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/child_process.h"

namespace crihook::testing {

// The fixture's GPUs 0, 1 and 2 as NVML names them.
inline constexpr const char* kFixtureGpu0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
inline constexpr const char* kFixtureGpu1 = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd";
inline constexpr const char* kFixtureGpu2 = "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd";

// Makes test/topology/make-fixtures.sh's topology trees under `out` (the
// device hooks read out/dgx); `source_dir` is the repository's root. Takes
// tens of seconds: a test program makes them once and shares them (the hooks
// only read them).
inline void makeFixtures(const std::string& out, const std::string& source_dir) {
  runShellOrThrow("bash " + source_dir + "/test/topology/make-fixtures.sh " + out);
}

// Makes under `dir`: dev/ (nvidia0, nvidia1 and infiniband/uverbs6 as
// /dev/zero; nvidiactl, nvidia-uvm and infiniband/rdma_cm as /dev/null, all
// 0666), hookserver.d/ (empty), and act.sh, which appends its arguments as
// one line to dir/actions.log.
inline void makeDeviceTree(const std::string& dir) {
  std::filesystem::create_directories(dir + "/dev/infiniband");
  std::filesystem::create_directories(dir + "/hookserver.d");
  for (const char* n : {"nvidia0", "nvidia1", "infiniband/uverbs6"})
    runShellOrThrow("mknod -m 0666 " + dir + "/dev/" + n + " c 1 5");  // as /dev/zero
  for (const char* n : {"nvidiactl", "nvidia-uvm", "infiniband/rdma_cm"})
    runShellOrThrow("mknod -m 0666 " + dir + "/dev/" + n + " c 1 3");  // as /dev/null
  std::ofstream(dir + "/act.sh") << "#!/bin/sh\necho \"$*\" >> " << dir << "/actions.log\n";
  std::filesystem::permissions(dir + "/act.sh", std::filesystem::perms::owner_all);
}

// crihookd's [topology] section (`fixtures`/dgx, made by makeFixtures) and
// its device hooks over the tree makeDeviceTree made in `dir`: gpu, rdma,
// cpuset, and device-lifecycle ("devices", its timeout `lifecycle_timeout`,
// e.g. "30s") whose init and cleanup actions run act.sh as
// "init|cleanup TYPE MINOR ID POD-NAME" (ID: a GPU's UUID, an RDMA
// function's name). The rest of the config ([server], [hooks], …) is the
// caller's; this text goes after it.
inline std::string deviceHooksConfig(const std::string& dir, const std::string& fixtures,
                                     const std::string& lifecycle_timeout) {
  auto actions = [&](const char* type, const char* id) {
    std::string out;
    for (const char* stage : {"init", "cleanup"}) {
      out += std::string("[[hook.settings.") + type + "." + stage + "]]\ncommand = [\"" + dir +
             "/act.sh\", \"" + stage + "\", \"{type}\", \"{minor}\", \"" + id +
             "\", \"{pod_name}\"]\n";
    }
    return out;
  };
  const std::string root = "[hook.settings]\ndevice_root = \"" + dir + "/dev\"\n";
  return "[topology]\nroot = \"" + fixtures + "/dgx\"\n" +
         "[[hook]]\nname = \"gpu\"\nbuiltin = \"gpu\"\n" + root +
         "[[hook]]\nname = \"rdma\"\nbuiltin = \"rdma\"\n" + root +
         "[[hook]]\nname = \"cpuset\"\nbuiltin = \"cpuset\"\n" + root +
         "[[hook]]\nname = \"devices\"\nbuiltin = \"device-lifecycle\"\ntimeout = \"" +
         lifecycle_timeout + "\"\n" + root + actions("gpu", "{uuid}") + actions("rdma", "{name}");
}

// The lines act.sh logged under `dir`, in order.
inline std::vector<std::string> deviceActions(const std::string& dir) {
  std::vector<std::string> out;
  std::istringstream in(readFile(dir + "/actions.log"));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The CPU the device pod is given (koordlet's resource-status cpuset): 1
// where the machine has it, else 0; both are on the fixture's NUMA node 0.
inline std::string devicePodCpu() { return std::thread::hardware_concurrency() >= 2 ? "1" : "0"; }

// Annotates `pod` as Koordinator's scheduler and koordlet would a pod given
// GPUs 0 and 1, the VF 0000:1c:00.3 of mlx5_0 (mlx5_6, uverbs6) and the CPU
// devicePodCpu().
inline void allocateDevicePod(runtime::v1::PodSandboxConfig& pod) {
  auto& ann = *pod.mutable_annotations();
  ann["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":0},{"minor":1}],"rdma":[{"minor":0,"id":"0000:1c:00.0",)"
      R"("extension":{"vfs":[{"minor":1,"busID":"0000:1c:00.3"}]}}]})";
  ann["scheduling.koordinator.sh/resource-status"] = R"({"cpuset":")" + devicePodCpu() + R"("})";
}

// device-lifecycle's init actions for the device pod named `pod_name`, in
// order; its cleanups are these in reverse, "cleanup" for "init".
inline std::vector<std::string> devicePodInits(const std::string& pod_name) {
  return {"init gpu 0 " + std::string(kFixtureGpu0) + " " + pod_name,
          "init gpu 1 " + std::string(kFixtureGpu1) + " " + pod_name,
          "init rdma 1 mlx5_6 " + pod_name};
}

// A shell script run in the device pod's container (ExecSync), and what it
// must print there: each device node readable, the GPUs and the RDMA device
// named in the environment, the CPU and NUMA node allowed.
inline constexpr const char* kDevicePodProbe =
    "for n in nvidia0 nvidia1 nvidiactl nvidia-uvm infiniband/rdma_cm infiniband/uverbs6; do "
    "head -c 1 /dev/$n >/dev/null && echo $n; done; "
    "echo $NVIDIA_VISIBLE_DEVICES; echo $NCCL_IB_HCA; "
    "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status";
inline std::string devicePodProbeExpected() {
  return std::string(
             "nvidia0\nnvidia1\nnvidiactl\nnvidia-uvm\ninfiniband/rdma_cm\n"
             "infiniband/uverbs6\n") +
         kFixtureGpu0 + "," + kFixtureGpu1 + "\nmlx5_6\nCpus_allowed_list:\t" + devicePodCpu() +
         "\nMems_allowed_list:\t0\n";
}

// A shell script printing, in a container, what a process started there now
// is allowed (Cpus_allowed_list) and its CFS quota (cgroup v1 or v2; -1 or
// "max" for none), one a line.
inline constexpr const char* kCpusAndQuotaProbe =
    "grep Cpus_allowed_list /proc/self/status | cut -f2; "
    "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || "
    "cut -d' ' -f1 /sys/fs/cgroup/cpu.max";

// A two-socket, two-NUMA-node fixture under `root` (root/sys/devices/
// system): CPUs 0-1 on node 0 (this machine's, so every cpuset a hook sets
// there exists), CPUs 2-3 on node 1 (only in the fixture). For the cpuset
// hook's share pools.
inline void writeTwoNodeCpuFixture(const std::string& root) {
  const std::string sys = root + "/sys/devices/system/";
  auto put = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text << "\n";
  };
  put(sys + "cpu/online", "0-3");
  put(sys + "node/online", "0-1");
  for (int c = 0; c < 4; ++c) {
    const std::string cpu = sys + "cpu/cpu" + std::to_string(c) + "/topology/";
    put(cpu + "physical_package_id", std::to_string(c / 2));
    put(cpu + "core_id", std::to_string(c % 2));
    put(cpu + "thread_siblings_list", std::to_string(c));
  }
  put(sys + "node/node0/cpulist", "0-1");
  put(sys + "node/node1/cpulist", "2-3");
}

}  // namespace crihook::testing
