// End to end beside koordlet: the real containerd (the one on PATH, Debian
// 12's 1.6, or with CRIHOOK_TEST_CONTAINERD=2 containerd 2.x's), the real
// crihookd with its built-in gpu, rdma, cpuset and device-lifecycle hooks at their default settings
// (only the device root, and HAMi-core's library and lock directory, point
// into this test's tree), and test/e2e/koordlet/: a Koordinator hook server
// written from koordlet's own code, registered in hookserver.d as koordlet
// registers itself. Pods as Koordinator's scheduler annotates them (LSR with
// two GPUs and an RDMA VF, NUMA-aware LS, plain LS, BE with batch resources,
// a HAMi-core shared GPU) run side by side; each container must show its
// device nodes, one value per device variable, and the CPUs, memory nodes
// and (BE) CPU shares, quota and memory limit that crihook's merge of both
// answers gives: equal values are one decision (GPU minors and UUIDs of the
// same GPUs, cpusets by their CPUs); where they differ, crihook owns the
// device env, devices and mounts, Koordinator's server the cpuset_cpus and
// the other resources, and the loser is logged ("overridden").
//
// The machine has CPUs 0-1 and NUMA node 0 only; the DGX fixture's node 0 is
// CPUs 0-15,32-47, so every cpuset a container is given must come from
// koordlet's share pools, which describe the machine: node 0's pool is CPU 0
// (CPU 1 is the LSR pod's). Needs root, containerd, runc and busybox-static
// (e2e_env.h).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/child_process.h"
#include "test/support/cri_pods.h"
#include "test/support/device_pod.h"
#include "test/support/e2e_env.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using RS = v1::RuntimeService::Stub;

constexpr const char* kHamiDefaultLibrary = "/usr/local/vgpu/libvgpu.so";  // koordlet's default

// The NodeResourceTopology annotations koordlet would read on this machine
// (apis/extension numa_aware.go): node 0's share pool without the LSR pod's
// CPU 1; kubelet's CPU manager policy none.
constexpr const char* kNodeTopology = R"({
  "node.koordinator.sh/cpu-shared-pools": "[{\"socket\":0,\"node\":0,\"cpuset\":\"0\"}]",
  "kubelet.koordinator.sh/cpu-manager-policy": "{\"policy\":\"none\"}"
})";

// What a process exec'd in the container sees (it gets the container's
// environment and cgroup; PID 1 there is the pod's sandbox process): the
// device nodes it can read, the environment variables the device stacks
// read (kubelet's, crihook's and koordlet's merged), sorted so that a
// variable given twice shows twice, and its CPUs and memory nodes.
constexpr const char* kProbe =
    "cd /dev; for n in nvidia* infiniband/*; do [ -e $n ] && head -c 1 $n >/dev/null && echo $n; "
    "done; tr '\\0' '\\n' < /proc/$$/environ | "
    "grep -E '^(NVIDIA_VISIBLE_DEVICES|NCCL_IB_HCA|CUDA_DEVICE_[A-Z0-9_]+|LD_PRELOAD)=' | sort; "
    "grep -E '^(Cpus|Mems)_allowed_list' /proc/$$/status | tr '\\t' ' '";

// The container's CPU shares (v2: weight), CFS quota and memory limit.
constexpr const char* kCgroupProbe =
    "cd /sys/fs/cgroup; if [ -f cpu.max ]; then cat cpu.weight cpu.max memory.max; "
    "else cat cpu/cpu.shares cpu/cpu.cfs_quota_us memory/memory.limit_in_bytes; fi";

struct Pod {
  std::string name, cgroup_kind;  // kind: "" (guaranteed), "burstable", "besteffort"
  std::map<std::string, std::string> labels, annotations;
  v1::LinuxContainerResources resources;  // kubelet's for the container
  v1::PodSandboxConfig config;
  std::string sandbox, container;
  grpc::Status status;  // of the first call that failed
};

struct Env {
  std::string dir;
  std::unique_ptr<ChildProcess> containerd_guard, koordlet, crihookd;
  pid_t containerd = -1;
  std::shared_ptr<grpc::Channel> proxied;
  std::map<std::string, Pod> pods;
  std::chrono::steady_clock::time_point start;
  bool made_kubepods = false;  // the pods' cgroup parents: runc made kubepods/
};
Env* env = nullptr;

template <typename Req, typename Resp>
grpc::Status call(grpc::Status (RS::*method)(grpc::ClientContext*, const Req&, Resp*),
                  const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  return (v1::RuntimeService::NewStub(env->proxied).get()->*method)(&ctx, req, resp);
}

// RunPodSandbox, CreateContainer ("box", sleeping) and StartContainer of
// `pod` through crihookd; the first failure is kept in pod.status.
void runPod(Pod& pod) {
  pod.config = e2ePodConfig(pod.name, env->dir + "/logs");
  for (const auto& [k, v] : pod.labels) (*pod.config.mutable_labels())[k] = v;
  for (const auto& [k, v] : pod.annotations) (*pod.config.mutable_annotations())[k] = v;
  const std::string uid = pod.config.metadata().uid();
  pod.config.mutable_linux()->set_cgroup_parent(
      pod.cgroup_kind.empty() ? "/kubepods/pod" + uid
                              : cat("/kubepods/", pod.cgroup_kind, "/pod", uid));
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = pod.config;
  v1::RunPodSandboxResponse ran;
  if (!(pod.status = call(&RS::RunPodSandbox, run, &ran)).ok()) return;
  pod.sandbox = ran.pod_sandbox_id();
  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id(pod.sandbox);
  *create.mutable_sandbox_config() = pod.config;
  auto* c = create.mutable_config();
  c->mutable_metadata()->set_name("box");
  c->mutable_image()->set_image(kE2eImage);
  c->add_command("/bin/sleep");
  c->add_args("3600");
  c->set_log_path("box.log");
  *c->mutable_linux()->mutable_resources() = pod.resources;
  v1::CreateContainerResponse created;
  if (!(pod.status = call(&RS::CreateContainer, create, &created)).ok()) return;
  pod.container = created.container_id();
  v1::StartContainerRequest start;
  start.set_container_id(pod.container);
  v1::StartContainerResponse started;
  pod.status = call(&RS::StartContainer, start, &started);
}

v1::LinuxContainerResources kubeletResources(int64_t shares, int64_t quota, int64_t memory) {
  v1::LinuxContainerResources r;
  r.set_cpu_period(100000);
  r.set_cpu_shares(shares);
  r.set_cpu_quota(quota);
  r.set_memory_limit_in_bytes(memory);
  return r;
}

std::string gpuAllocation(std::initializer_list<int> minors, const std::string& resources = "") {
  std::string out = R"({"gpu":[)";
  for (int m : minors) out += cat(out.back() == '[' ? "" : ",", R"({"minor":)", m, resources, "}");
  return out + "]}";
}

// The pods, as Koordinator's scheduler and kubelet would send them.
std::map<std::string, Pod> koordinatorPods() {
  std::map<std::string, Pod> pods;
  Pod lsr{.name = "kl-lsr", .labels = {{"koordinator.sh/qosClass", "LSR"}}};
  v1::PodSandboxConfig annotated;
  allocateDevicePod(annotated);  // GPUs 0 and 1, VF 0000:1c:00.3 (mlx5_6), CPU 1
  lsr.annotations = {annotated.annotations().begin(), annotated.annotations().end()};
  lsr.resources = kubeletResources(1024, 100000, 256 << 20);
  pods["lsr"] = lsr;
  pods["numa"] = {
      .name = "kl-numa",
      .cgroup_kind = "burstable",
      .labels = {{"koordinator.sh/qosClass", "LS"}},
      .annotations = {{"scheduling.koordinator.sh/resource-status",
                       R"({"numaNodeResources":[{"node":0,"resources":{"cpu":"1"}}]})"},
                      {"scheduling.koordinator.sh/device-allocated", gpuAllocation({2, 3})}},
      .resources = kubeletResources(1024, 0, 0)};
  pods["ls"] = {.name = "kl-ls",
                .cgroup_kind = "burstable",
                .labels = {{"koordinator.sh/qosClass", "LS"}},
                .resources = kubeletResources(512, 0, 0)};
  // kubelet gives a BestEffort container 2 shares and no limits; the batch
  // resources are in the annotation the webhook writes.
  pods["be"] = {
      .name = "kl-be",
      .cgroup_kind = "besteffort",
      .labels = {{"koordinator.sh/qosClass", "BE"}},
      .annotations =
          {{"node.koordinator.sh/extended-resource-spec",
            R"({"containers":{"box":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"256Mi"},)"
            R"("limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"512Mi"}}}})"}},
      .resources = kubeletResources(2, 0, 0)};
  pods["hami"] = {
      .name = "kl-hami",
      .cgroup_kind = "burstable",
      .labels = {{"koordinator.sh/gpu-isolation-provider", "HAMi-core"}},
      .annotations = {{"scheduling.koordinator.sh/device-allocated",
                       gpuAllocation({4}, R"(,"resources":{"koordinator.sh/gpu-core":"30",)"
                                          R"("koordinator.sh/gpu-memory":"8Gi",)"
                                          R"("koordinator.sh/gpu-memory-ratio":"20"})")}},
      .resources = kubeletResources(512, 0, 0)};
  return pods;
}

// crihookd's config: its device hooks at their defaults over the fixture.
std::string crihookdConfig(const std::string& dir) {
  const std::string root = cat("[hook.settings]\ndevice_root = \"", dir, "/dev\"\n");
  return cat("[hooks]\nstate_dir = \"", dir, "/state\"\nhookserver_dir = \"", dir,
             "/hookserver.d\"\n[topology]\nroot = \"", dir, "/fixtures/dgx\"\n",
             "[[hook]]\nname = \"gpu\"\nbuiltin = \"gpu\"\n", root, "hami_core_library = \"", dir,
             "/hami/libvgpu.so\"\nhami_core_lock_dir = \"", dir, "/hami/vgpulock\"\n",
             "[[hook]]\nname = \"rdma\"\nbuiltin = \"rdma\"\n", root,
             "[[hook]]\nname = \"cpuset\"\nbuiltin = \"cpuset\"\n", root,
             "[[hook]]\nname = \"devices\"\nbuiltin = \"device-lifecycle\"\n", root);
}

// containerd (with the image), the device tree, crihookd, then koordlet,
// until crihookd has taken its registration. Throws std::runtime_error saying what failed.
void startDaemons() {
  const std::string dir = env->dir, scripts = CRIHOOK_SOURCE_DIR "/test/e2e/";
  // The fixture trees take the longest: made while containerd starts.
  std::string fixture_error;
  std::thread fixtures([&] {
    try {
      makeFixtures(dir + "/fixtures", CRIHOOK_SOURCE_DIR);
    } catch (const std::exception& e) {
      fixture_error = e.what();
    }
  });
  std::exception_ptr failed;
  try {
    runShellOrThrow(
        cat(scripts, "make-busybox-image.sh ", dir, "/busybox.tar ", kE2eImage, " 2>&1"));
    std::vector<std::string> args = {dir + "/ctd", kE2eImage, dir + "/busybox.tar"};
    std::string why;
    const std::string binary = e2eProxyContainerd(CRIHOOK_SOURCE_DIR, &why);
    if (e2eContainerd2() && binary.empty()) throw std::runtime_error(why);
    if (!binary.empty()) args.push_back(binary);
    env->containerd = startGuardedDaemon(env->containerd_guard, scripts + "containerd-private.sh",
                                         args, dir + "/ctd-start.log", 120s);
    makeDeviceTree(dir);  // nvidia0, nvidia1, uverbs6, the control nodes, hookserver.d
    for (const char* n : {"nvidia2", "nvidia3", "nvidia4"})
      runShellOrThrow(cat("mknod -m 0666 ", dir, "/dev/", n, " c 1 5"));
  } catch (...) {
    failed = std::current_exception();
  }
  fixtures.join();
  if (failed) std::rethrow_exception(failed);
  if (!fixture_error.empty()) throw std::runtime_error(fixture_error);
  std::filesystem::create_directories(dir + "/hami/vgpulock");
  std::ofstream(dir + "/hami/libvgpu.so") << "not a library\n";
  std::ofstream(dir + "/node-topology.json") << kNodeTopology;
  // As on a node: crihookd (a system service) runs before koordlet (a pod).
  std::ofstream(dir + "/crihookd.toml") << crihookdConfig(dir);
  env->crihookd = std::make_unique<ChildProcess>(
      CRIHOOKD_BINARY,
      std::vector<std::string>{"--config", dir + "/crihookd.toml", "--listen",
                               dir + "/crihook.sock", "--backend",
                               "unix://" + dir + "/ctd/containerd.sock"},
      dir + "/crihookd.log");
  if (!waitForFile(dir + "/crihook.sock", 10s))
    throw std::runtime_error("crihookd did not start: " + readFile(dir + "/crihookd.log"));
  env->koordlet = std::make_unique<ChildProcess>(
      KOORDLET_BINARY,
      std::vector<std::string>{"-runtime-hooks-addr", dir + "/koordlet.sock",
                               "-runtime-hooks-host-endpoint", dir + "/koordlet.sock",
                               "-runtime-hooks-config-path", dir + "/hookserver.d",
                               "-feature-gates", "GPUEnvInject=true,RDMADeviceInject=true",
                               "-node-topology-annotations", dir + "/node-topology.json",
                               "-dev-root", dir + "/dev", "-sys-root", dir + "/fixtures/dgx/sys"},
      dir + "/koordlet.log");
  // koordlet registers once it serves; crihookd sees the file come and
  // publishes a chain with it (logged as it is published).
  if (!waitForFile(dir + "/hookserver.d/koordlet.json", 10s))
    throw std::runtime_error("koordlet did not register: " + readFile(dir + "/koordlet.log"));
  if (!eventually(
          [&] {
            return readFile(dir + "/crihookd.log")
                       .find("hook chain: gpu, rdma, cpuset, devices, hookserver/koordlet") !=
                   std::string::npos;
          },
          10s))
    throw std::runtime_error("crihookd did not take koordlet's registration: " +
                             readFile(dir + "/crihookd.log"));
  env->proxied = unixChannel(dir + "/crihook.sock");
}

class KoordletE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string missing = e2eMissing();
    if (!missing.empty()) {
      skip_ = "needs" + missing;
      if (e2eRequired()) fatal_ = "CRIHOOK_E2E_REQUIRED is set but this machine lacks:" + missing;
      return;
    }
    if (std::thread::hardware_concurrency() < 2) {
      skip_ = "needs CPUs 0 and 1";
      return;
    }
    env = new Env;
    env->start = std::chrono::steady_clock::now();
    env->made_kubepods = !std::filesystem::exists("/sys/fs/cgroup/cpu/kubepods") &&
                         !std::filesystem::exists("/sys/fs/cgroup/kubepods");
    char tmpl[] = "/tmp/crihook-koordlet-XXXXXX";
    env->dir = ::mkdtemp(tmpl);
    try {
      startDaemons();
    } catch (const std::exception& e) {
      fatal_ = e.what();
      return;
    }
    env->pods = koordinatorPods();
    // The pinned pod first: crihook's NUMA-aware pods make room for it when
    // it comes, and this test wants no move while the others start.
    runPod(env->pods["lsr"]);
    std::vector<std::thread> side_by_side;
    for (auto& [key, pod] : env->pods) {
      if (key != "lsr") side_by_side.emplace_back(runPod, std::ref(pod));
    }
    for (auto& t : side_by_side) t.join();
  }

  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (env->proxied) {
      // The others side by side, then the pinned pod: when it goes crihook
      // would widen a NUMA-aware pod it placed to its node's CPUs, which this
      // machine does not all have.
      auto remove = [](const Pod& pod) {
        if (!pod.sandbox.empty())
          (void)stopAndRemovePod(*v1::RuntimeService::NewStub(env->proxied), pod.sandbox);
      };
      std::vector<std::thread> side_by_side;
      for (const auto& [key, pod] : env->pods) {
        if (key != "lsr") side_by_side.emplace_back(remove, std::cref(pod));
      }
      for (auto& t : side_by_side) t.join();
      remove(env->pods["lsr"]);
    }
    for (auto* p : {&env->crihookd, &env->koordlet}) {
      if (*p) {
        (*p)->signal(SIGTERM);
        (*p)->wait(10s);
      }
    }
    if (env->containerd > 0) {
      ::kill(env->containerd, SIGTERM);
      eventually([] { return ::kill(env->containerd, 0) != 0; }, 5s);
    }
    env->containerd_guard.reset();
    // runc leaves the cgroup parents it made (kubelet's to remove): the pods'
    // (pod<uid>, this test's uids), and the QoS levels if it made them.
    (void)runShell(cat("for c in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do [ -d $c/kubepods ] && ",
                       "find $c/kubepods -depth -type d -name 'podkl-*-uid' -exec rmdir {} +; ",
                       env->made_kubepods ? "rmdir $c/kubepods/burstable $c/kubepods/besteffort "
                                            "$c/kubepods; "
                                          : "",
                       "done 2>/dev/null; true"));
    std::printf(
        "koordlet e2e: wall time %.1f s\n",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - env->start).count());
    // CRIHOOK_E2E_KEEP=1: the directory (the daemons' logs, crihookd's
    // state) stays, for a look.
    if (const char* keep = std::getenv("CRIHOOK_E2E_KEEP"); keep == nullptr || *keep != '1') {
      std::error_code ec;
      std::filesystem::remove_all(env->dir, ec);
    } else {
      std::printf("koordlet e2e: kept %s\n", env->dir.c_str());
    }
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    if (!fatal_.empty()) FAIL() << fatal_;
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // Why the pod `key` did not start, for ASSERT_TRUE(pod.status.ok()).
  static std::string whyNot(const Pod& pod) {
    return cat(pod.name, ": ", pod.status.error_message(), "\n", crihookdLog());
  }
  static std::string exec(const Pod& pod, const std::string& script) {
    v1::ExecSyncRequest req;
    req.set_container_id(pod.container);
    for (const char* a : {"sh", "-c"}) req.add_cmd(a);
    req.add_cmd(script);
    req.set_timeout(20);
    v1::ExecSyncResponse out;
    grpc::Status s = call(&RS::ExecSync, req, &out);
    return s.ok() ? out.stdout() + out.stderr() : "ExecSync failed: " + s.error_message();
  }
  // crihookd's lines saying a value `field` of `pod` lost to another hook's.
  static std::vector<std::string> overriddenLines(const Pod& pod, const std::string& field) {
    std::vector<std::string> out;
    std::istringstream lines(crihookdLog());
    for (std::string l; std::getline(lines, l);) {
      if (l.find(" overridden by ") != std::string::npos &&
          l.find(cat("pod \"default/", pod.name, "\"")) != std::string::npos &&
          l.find(field) != std::string::npos)
        out.push_back(l);
    }
    return out;
  }
  static std::string crihookdLog() { return readFile(env->dir + "/crihookd.log"); }
  static std::string koordletLog() { return readFile(env->dir + "/koordlet.log"); }

  static inline std::string skip_, fatal_;
};

// server.go Register: <dir>/koordlet.json, json.MarshalIndent with a tab,
// the stages that have hooks (GetStages, Go's map order), Ignore.
TEST_F(KoordletE2E, KoordletRegistersAsKoordletDoesAndCrihookdTakesIt) {
  const std::string text = readFile(env->dir + "/hookserver.d/koordlet.json");
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << text;
  std::set<std::string> stages(j["runtime-hooks"].begin(), j["runtime-hooks"].end());
  EXPECT_EQ(stages, (std::set<std::string>{"PreRunPodSandbox", "PreCreateContainer",
                                           "PreUpdateContainerResources"}));
  std::string expected = cat("{\n\t\"remote-endpoint\": \"", env->dir,
                             "/koordlet.sock\",\n\t\"failure-policy\": \"Ignore\",\n"
                             "\t\"runtime-hooks\": [\n");
  for (size_t i = 0; i < j["runtime-hooks"].size(); ++i)
    expected += cat("\t\t\"", j["runtime-hooks"][i].get<std::string>(), "\"",
                    i + 1 < j["runtime-hooks"].size() ? ",\n" : "\n");
  EXPECT_EQ(text, expected + "\t]\n}");
  // crihookd called it for each pod and container (koordlet logs each call).
  std::map<std::string, int> calls;  // "RPC POD"
  std::istringstream lines(koordletLog());
  for (std::string l; std::getline(lines, l);) {
    const auto call = nlohmann::json::parse(l, nullptr, false);
    if (call.is_object() && call.contains("rpc"))
      ++calls[cat(call["rpc"].get<std::string>(), " ", call["pod"].get<std::string>())];
  }
  for (const auto& [key, pod] : env->pods) {
    EXPECT_EQ(calls[cat("PreRunPodSandbox default/", pod.name)], 1) << koordletLog();
    EXPECT_EQ(calls[cat("PreCreateContainer default/", pod.name)], 1) << koordletLog();
  }
}

// LSR with two GPUs and a VF: both pin CPU 1 (crihook adds its node's
// memory), both give the GPUs (minors "0,1" = the UUIDs) and both drop the
// quota; the proxy protocol cannot carry koordlet's devices, crihook's rdma
// hook gives them.
TEST_F(KoordletE2E, LsrPodGetsItsGpusVfAndPinnedCpuOnce) {
  const Pod& pod = env->pods.at("lsr");
  ASSERT_TRUE(pod.status.ok()) << whyNot(pod);
  EXPECT_EQ(exec(pod, kProbe),
            cat("nvidia-uvm\nnvidia0\nnvidia1\nnvidiactl\ninfiniband/rdma_cm\ninfiniband/uverbs6\n",
                "NCCL_IB_HCA=mlx5_6\nNVIDIA_VISIBLE_DEVICES=", kFixtureGpu0, ",", kFixtureGpu1,
                "\nCpus_allowed_list: 1\nMems_allowed_list: 0\n"));
  const std::string quota = exec(pod, kCgroupProbe);
  EXPECT_THAT(quota, ::testing::AnyOf(HasSubstr("\n-1\n"), HasSubstr("\nmax 100000\n"))) << quota;
  // The same GPUs as minors and as UUIDs, the same CPU: nothing overridden.
  EXPECT_THAT(overriddenLines(pod, ""), ::testing::IsEmpty());
  // koordlet's rdma hook found the same VF, and said it cannot carry it.
  EXPECT_THAT(koordletLog(),
              HasSubstr(R"("devices_not_carried":[{"Path":"/dev/infiniband/rdma_cm")"));
}

// NUMA-aware LS on node 0: koordlet's share pool of node 0 ("0") wins over
// crihook's node 0 minus the pins; the memory node is crihook's.
TEST_F(KoordletE2E, NumaAwareLsPodRunsOnKoordletsSharePoolAndCrihooksNode) {
  const Pod& pod = env->pods.at("numa");
  ASSERT_TRUE(pod.status.ok()) << whyNot(pod);
  EXPECT_EQ(exec(pod, kProbe),
            cat("nvidia-uvm\nnvidia2\nnvidia3\nnvidiactl\nNVIDIA_VISIBLE_DEVICES=", kFixtureGpu2,
                ",GPU-00000003-aaaa-bbbb-cccc-dddddddddddd\n",
                "Cpus_allowed_list: 0\nMems_allowed_list: 0\n"));
  const std::vector<std::string> overridden = overriddenLines(pod, "cpuset_cpus");
  ASSERT_EQ(overridden.size(), 1u) << crihookdLog();
  EXPECT_THAT(overridden[0], HasSubstr(R"(hook cpuset's cpuset_cpus "0,2-15,32-47")"));
  EXPECT_THAT(overridden[0], HasSubstr("by hook hookserver/koordlet"));
}

// Plain LS: all of koordlet's share pools; crihook has no opinion.
TEST_F(KoordletE2E, PlainLsPodRunsOnAllOfKoordletsSharePools) {
  const Pod& pod = env->pods.at("ls");
  ASSERT_TRUE(pod.status.ok()) << whyNot(pod);
  EXPECT_EQ(exec(pod, kProbe), "Cpus_allowed_list: 0\nMems_allowed_list: 0\n");
}

// BE: koordlet's batch shares (500m: 512), quota (1 CPU: 100000) and memory
// limit (512Mi); its empty cpuset (kube BestEffort) is no opinion, so the
// container has every CPU. kubelet's later UpdateContainerResources with its
// own BestEffort values gets koordlet's again.
TEST_F(KoordletE2E, BePodGetsKoordletsBatchSharesQuotaAndMemoryAlsoAfterAnUpdate) {
  const Pod& pod = env->pods.at("be");
  ASSERT_TRUE(pod.status.ok()) << whyNot(pod);
  const std::string v1_limits = "512\n100000\n536870912\n",
                    v2_limits = "20\n100000 100000\n536870912\n";
  EXPECT_THAT(exec(pod, kCgroupProbe), ::testing::AnyOf(v1_limits, v2_limits));
  EXPECT_EQ(exec(pod, kProbe), "Cpus_allowed_list: 0-1\nMems_allowed_list: 0\n");
  v1::UpdateContainerResourcesRequest update;
  update.set_container_id(pod.container);
  *update.mutable_linux() = kubeletResources(2, 0, 0);
  v1::UpdateContainerResourcesResponse updated;
  grpc::Status s = call(&RS::UpdateContainerResources, update, &updated);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(exec(pod, kCgroupProbe), ::testing::AnyOf(v1_limits, v2_limits))
      << koordletLog() << crihookdLog();
}

// HAMi-core: the limits both set agree; koordlet's LD_PRELOAD (its default
// library path) loses to crihook's, logged once naming koordlet's value.
TEST_F(KoordletE2E, HamiCorePodSeesEachLimitOnceAndCrihooksPreload) {
  const Pod& pod = env->pods.at("hami");
  ASSERT_TRUE(pod.status.ok()) << whyNot(pod);
  EXPECT_EQ(exec(pod, kProbe),
            cat("nvidia-uvm\nnvidia4\nnvidiactl\nCUDA_DEVICE_MEMORY_LIMIT=8589934592\n",
                "CUDA_DEVICE_SM_LIMIT=30\nLD_PRELOAD=", env->dir, "/hami/libvgpu.so\n",
                "NVIDIA_VISIBLE_DEVICES=GPU-00000004-aaaa-bbbb-cccc-dddddddddddd\n",
                "Cpus_allowed_list: 0\nMems_allowed_list: 0\n"));
  const std::vector<std::string> overridden = overriddenLines(pod, "LD_PRELOAD");
  ASSERT_EQ(overridden.size(), 1u) << crihookdLog();
  EXPECT_THAT(overridden[0], HasSubstr("hookserver/koordlet's env"));
  EXPECT_THAT(overridden[0], HasSubstr(kHamiDefaultLibrary));
}

}  // namespace
}  // namespace crihook::testing
