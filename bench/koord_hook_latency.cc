// koord_hook_latency: how long a Koordinator hook server's answer takes on a
// busy node, to size [hooks] hookserver_timeout (the default for
// Koordinator's servers).
//
// A Koordinator-protocol server (runtime.v1alpha1, in this process, on a
// Unix socket) answers PreCreateContainerHook as koordlet does: it echoes
// the request and, per call, reads and parses cgroup and /proc files
// (koordlet's hooks read the pod's cgroups and the node's state) and looks
// the pod up in a table of known pods. crihook's Koordinator hook calls it,
// from several threads at once (kubelet creates the containers of several
// pods in parallel), while CPU hogs (child processes, ended by this program
// after the run) keep every core busy.
//
//   koord_hook_latency [--calls N] [--threads T] [--hogs H] [--files F]
//
// Defaults: 2000 calls over 4 threads, 2 hogs per core, 30 files per call.
// Prints p50, p90, p99, p99.9 and the maximum of the answers' latency.

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cri-api/koordinator_runtime_v1alpha1.grpc.pb.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/hook.h"
#include "hooks/remote/remote_hooks.h"

namespace {

using namespace crihook;
using Clock = std::chrono::steady_clock;
namespace v1 = ::runtime::v1;
namespace koord = ::runtime::v1alpha1;
namespace hv1 = ::crihook::hook::v1;

// The files a koordlet-like hook reads per call: the cgroup v2 (or v1) files
// of the node's top cgroups and /proc, whatever exists here.
std::vector<std::string> workFiles(size_t want) {
  std::vector<std::string> out;
  for (const char* f : {"/proc/stat", "/proc/meminfo", "/proc/loadavg", "/proc/self/status"})
    out.push_back(f);
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           "/sys/fs/cgroup", std::filesystem::directory_options::skip_permission_denied, ec);
       it != std::filesystem::recursive_directory_iterator() && out.size() < want;
       it.increment(ec)) {
    if (ec) break;
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) &&
        (name == "cpu.max" || name == "cpu.weight" || name == "memory.max" ||
         name == "memory.high" || name == "cpuset.cpus.effective" || name == "cpu.stat" ||
         name == "memory.current" || name == "pids.current" || name == "cpu.shares" ||
         name == "cpu.cfs_quota_us" || name == "memory.limit_in_bytes"))
      out.push_back(it->path().string());
  }
  if (out.size() > want) out.resize(want);
  return out;
}

class KoordletLike final : public koord::RuntimeHookService::Service {
 public:
  explicit KoordletLike(std::vector<std::string> files) : files_(std::move(files)) {
    for (int i = 0; i < 500; ++i) {
      pods_["uid-" + std::to_string(i)] = {
          {"koordinator.sh/qosClass", i % 3 ? "LS" : "BE"},
          {"app", "app-" + std::to_string(i)},
      };
    }
  }
  grpc::Status PreCreateContainerHook(grpc::ServerContext*,
                                      const koord::ContainerResourceHookRequest* req,
                                      koord::ContainerResourceHookResponse* resp) override {
    *resp->mutable_container_annotations() = req->container_annotations();
    *resp->mutable_container_resources() = req->container_resources();
    resp->set_pod_cgroup_parent(req->pod_cgroup_parent());
    *resp->mutable_container_envs() = req->container_envs();
    int64_t sum = 0;
    for (const auto& f : files_) {
      std::ifstream in(f);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string w;
        while (words >> w) sum += static_cast<int64_t>(w.size());
      }
    }
    auto pod = pods_.find(req->pod_meta().uid());
    const bool be = pod != pods_.end() && pod->second.at("koordinator.sh/qosClass") == "BE";
    resp->mutable_container_resources()->set_cpuset_cpus(be ? "0" : "0-1");
    (*resp->mutable_container_envs())["KOORD_WORK"] = std::to_string(sum % 7);
    return grpc::Status::OK;
  }

 private:
  std::vector<std::string> files_;
  std::map<std::string, std::map<std::string, std::string>> pods_;
};

double at(const std::vector<double>& sorted, double q) {
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 2000, threads = 4, files = 30;
  int hogs = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::stoi(argv[i + 1]);
    if (flag == "--calls")
      calls = value;
    else if (flag == "--threads")
      threads = value;
    else if (flag == "--hogs")
      hogs = value;
    else if (flag == "--files")
      files = value;
  }
  char tmpl[] = "/tmp/koord-latency-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string socket = dir + "/koordlet.sock";
  KoordletLike service(workFiles(static_cast<size_t>(files)));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto hook = makeKoordinatorHook("hookserver/koordlet", socket,
                                  {{LifecycleMethod::kCreateContainer, Phase::kPre}});

  auto pod = std::make_shared<hv1::PodRecord>();
  pod->mutable_config()->mutable_metadata()->set_name("web-0");
  pod->mutable_config()->mutable_metadata()->set_namespace_("default");
  pod->mutable_config()->mutable_metadata()->set_uid("uid-3");
  pod->mutable_config()->mutable_linux()->set_cgroup_parent("/kubepods/burstable/pod-uid-3");
  auto container = std::make_shared<hv1::ContainerRecord>();
  auto* config = container->mutable_requested();
  config->mutable_metadata()->set_name("web");
  for (int i = 0; i < 20; ++i) {
    auto* e = config->add_envs();
    e->set_key("ENV_" + std::to_string(i));
    e->set_value("value-" + std::to_string(i));
  }
  (*config->mutable_annotations())["io.kubernetes.container.hash"] = "1234abcd";
  config->mutable_linux()->mutable_resources()->set_cpu_shares(1024);
  config->mutable_linux()->mutable_resources()->set_memory_limit_in_bytes(1 << 30);

  auto once = [&] {
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.pod = pod;
    in.container = container;
    in.deadline = Clock::now() + std::chrono::minutes(2);  // kubelet's runtime-request-timeout
    const auto start = Clock::now();
    HookDecision d = hook->run(in);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (d.kind != HookDecision::Kind::kContinue) {
      std::fprintf(stderr, "call failed: %s\n", std::string(d.status.message()).c_str());
      std::exit(1);
    }
    return ms;
  };
  for (int i = 0; i < 50; ++i) (void)once();  // connect and warm up

  std::vector<pid_t> hog_pids;
  for (int i = 0; i < hogs; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      volatile uint64_t x = 0;
      // Ends on its own after 10 minutes should this program die first.
      const auto end = Clock::now() + std::chrono::minutes(10);
      while (Clock::now() < end) {
        for (int k = 0; k < 1000000; ++k) x = x + k;
      }
      ::_exit(0);
    }
    if (pid > 0) hog_pids.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  const auto begin = Clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::vector<double> mine;
      while (next++ < calls) mine.push_back(once());
      std::lock_guard lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  for (pid_t pid : hog_pids) ::kill(pid, SIGKILL);
  for (pid_t pid : hog_pids) ::waitpid(pid, nullptr, 0);
  server->Shutdown();
  std::filesystem::remove_all(dir);

  std::sort(latencies.begin(), latencies.end());
  std::printf(
      "%zu PreCreateContainer answers, %d threads, %d CPU hogs on %u cores, %d files "
      "read per answer, %.1f s\n",
      latencies.size(), threads, hogs, std::thread::hardware_concurrency(), files, seconds);
  std::printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n",
              at(latencies, 0.5), at(latencies, 0.9), at(latencies, 0.99), at(latencies, 0.999),
              latencies.back());
  return 0;
}
