// crihook_bench: the same CRI calls, direct to a backend and through a real
// crihookd process, side by side in one run (the machine is shared and noisy:
// only ratios measured together mean anything).
//
//   crihook_bench --crihookd build/tools/crihookd [--containerd /path/containerd.sock]
//                 [--iterations N] [--clients N] [--rounds N]
//
// Backends: an in-process gRPC CRI server (always), and a real containerd when
// its socket is given (bench/run.sh starts a private one).

#include <fcntl.h>
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
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/process_stats.h"

namespace {

namespace v1 = ::runtime::v1;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using crihook::rssKiB;

// The fake runtime: answers from memory at gRPC's own speed.
class FakeRuntime final : public v1::RuntimeService::CallbackService {
 public:
  FakeRuntime() {
    for (int i = 0; i < 5000; ++i) {
      auto* c = containers_.add_containers();
      c->set_id(std::string(64, static_cast<char>('a' + i % 26)));
      c->set_pod_sandbox_id(std::string(64, static_cast<char>('A' + i % 26)));
      c->mutable_metadata()->set_name("container-" + std::to_string(i));
      c->mutable_image()->set_image("registry.example/team/image:v" + std::to_string(i % 7));
      c->set_image_ref("sha256:" + std::string(64, '0'));
      c->set_state(v1::CONTAINER_RUNNING);
      c->set_created_at(1700000000000000000 + i);
      (*c->mutable_labels())["io.kubernetes.pod.name"] = "pod-" + std::to_string(i / 2);
      (*c->mutable_labels())["io.kubernetes.pod.namespace"] = "default";
      (*c->mutable_annotations())["io.kubernetes.container.hash"] = std::to_string(i * 7919);
    }
  }
  grpc::ServerUnaryReactor* Version(grpc::CallbackServerContext* ctx, const v1::VersionRequest*,
                                    v1::VersionResponse* resp) override {
    resp->set_version("0.1.0");
    resp->set_runtime_name("fake");
    resp->set_runtime_version("1.0.0");
    resp->set_runtime_api_version("v1");
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* ListContainers(grpc::CallbackServerContext* ctx,
                                           const v1::ListContainersRequest*,
                                           v1::ListContainersResponse* resp) override {
    *resp = containers_;
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* CreateContainer(grpc::CallbackServerContext* ctx,
                                            const v1::CreateContainerRequest* req,
                                            v1::CreateContainerResponse* resp) override {
    resp->set_container_id("ctr-" + req->config().metadata().name());
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* RemoveContainer(grpc::CallbackServerContext* ctx,
                                            const v1::RemoveContainerRequest*,
                                            v1::RemoveContainerResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  size_t listBytes() const { return containers_.ByteSizeLong(); }

 private:
  v1::ListContainersResponse containers_;
};

std::shared_ptr<grpc::Channel> channel(const std::string& path, int id) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  args.SetInt("crihook.bench.client", id);  // a distinct connection per client
  return grpc::CreateCustomChannel("unix://" + path, grpc::InsecureChannelCredentials(), args);
}

struct Stats {
  double p50_us = 0, p99_us = 0, per_s = 0;
};

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

using Call = std::function<bool(v1::RuntimeService::Stub&, int /*client*/, int /*i*/)>;

// Latency with one client; throughput with `clients` clients, each on its
// own connection, or with `clients` concurrent streams on one connection
// (`shared`: kubelet multiplexes all its calls on one).
struct Runner {
  std::string path;
  int iterations;
  int clients;
  bool shared = false;

  std::vector<double> latency(const Call& call, int n) {
    auto stub = v1::RuntimeService::NewStub(channel(path, 0));
    for (int i = 0; i < std::min(50, n); ++i) call(*stub, 0, i);  // warm the connection
    std::vector<double> us;
    us.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      if (!call(*stub, 0, i)) {
        std::fprintf(stderr, "call failed on %s\n", path.c_str());
        std::exit(1);
      }
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return us;
  }

  double throughput(const Call& call, int per_client) {
    std::vector<std::unique_ptr<v1::RuntimeService::Stub>> stubs;
    auto one = channel(path, 1);
    for (int c = 0; c < clients; ++c) {
      stubs.push_back(v1::RuntimeService::NewStub(shared ? one : channel(path, c + 1)));
      call(*stubs.back(), c, 0);
    }
    std::atomic<int> failures{0};
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        for (int i = 0; i < per_client; ++i)
          failures += !call(*stubs[static_cast<size_t>(c)], c, i);
      });
    }
    for (auto& t : threads) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (failures > 0)
      std::fprintf(stderr, "%d calls failed on %s\n", failures.load(), path.c_str());
    return clients * per_client / secs;
  }
};

void report(const char* scenario, const char* backend, std::vector<double> d, std::vector<double> p,
            double thr_d, double thr_p) {
  double d50 = pct(d, 0.5), p50 = pct(p, 0.5), d99 = pct(d, 0.99), p99 = pct(p, 0.99);
  std::printf("%-38s %-10s %9.1f %9.1f %6.2f %+8.1f %9.1f %9.1f %9.0f %9.0f %6.2f\n", scenario,
              backend, d50, p50, p50 / d50, p50 - d50, d99, p99, thr_d, thr_p, thr_p / thr_d);
  std::fflush(stdout);
}

// Runs `call` direct and proxied in alternating rounds and reports both.
// Returns how many calls went through crihookd.
long compare(const char* scenario, const char* backend, const std::string& direct,
             const std::string& proxied, const Call& call, int iterations, int clients, int rounds,
             bool shared = false) {
  Runner rd{direct, iterations, clients, shared}, rp{proxied, iterations, clients, shared};
  std::vector<double> ld, lp;
  std::vector<double> td, tp;
  for (int r = 0; r < rounds; ++r) {
    auto a = rd.latency(call, iterations / rounds);
    auto b = rp.latency(call, iterations / rounds);
    ld.insert(ld.end(), a.begin(), a.end());
    lp.insert(lp.end(), b.begin(), b.end());
    td.push_back(rd.throughput(call, iterations / rounds / clients + 1));
    tp.push_back(rp.throughput(call, iterations / rounds / clients + 1));
  }
  report(scenario, backend, ld, lp, pct(td, 0.5), pct(tp, 0.5));
  const int per_round = iterations / rounds;
  return static_cast<long>(rounds) *
         (std::min(50, per_round) + per_round + clients * (per_round / clients + 2));
}

// CPU time (user + system) a process has used, in microseconds.
double cpuMicros(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(f);
  }
  return ticks * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Starts crihookd with no config file and a state directory of its own
// (`listen` + ".state", new), so that no record of an earlier run is read or
// grown.
// The system calls crihookd (all its threads) makes while `run` runs,
// counted by strace -c -f attached to it; -1 without strace. Per call:
// divide by what `run` returns. strace slows every system call down, so
// nothing is timed meanwhile.
double systemCallsPerCall(pid_t pid, const std::string& dir, const std::function<long()>& run) {
  if (::access("/usr/bin/strace", X_OK) != 0) return -1;
  const std::string out = dir + "/strace.txt";
  const std::string target = std::to_string(pid);
  const pid_t tracer = ::fork();
  if (tracer == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    ::execl("/usr/bin/strace", "strace", "-f", "-c", "-o", out.c_str(), "-p", target.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Attached to every thread well before this (strace tells no one).
  std::this_thread::sleep_for(500ms);
  const long calls = run();
  ::kill(tracer, SIGINT);
  ::waitpid(tracer, nullptr, 0);
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(f), {}};
    // "% time  seconds  usecs/call  calls  [errors]  total"
    if (w.size() >= 5 && w.back() == "total")
      return std::stod(w[3]) / static_cast<double>(std::max(1L, calls));
  }
  return -1;
}

pid_t spawnCrihookd(const std::string& binary, const std::string& listen,
                    const std::string& backend) {
  const std::string state = listen + ".state";
  std::filesystem::remove_all(state);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string b = "unix://" + backend;
    ::execl(binary.c_str(), binary.c_str(), "--listen", listen.c_str(), "--backend", b.c_str(),
            "--state-dir", state.c_str(), "--log-level", "warn", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !std::filesystem::exists(listen); ++i)
    std::this_thread::sleep_for(10ms);
  return pid;
}

void stop(pid_t pid) {
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

v1::CreateContainerRequest createRequest(const std::string& sandbox, int client, int i) {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(sandbox);
  auto* cfg = req.mutable_config();
  cfg->mutable_metadata()->set_name("bench-" + std::to_string(client) + "-" + std::to_string(i));
  cfg->mutable_image()->set_image("docker.io/library/busybox:crihook");
  cfg->add_command("/bin/sleep");
  cfg->add_args("3600");
  for (int e = 0; e < 20; ++e) {
    auto* env = cfg->add_envs();
    env->set_key("ENV_" + std::to_string(e));
    env->set_value("value-" + std::to_string(e));
  }
  cfg->set_log_path("bench.log");
  auto* sb = req.mutable_sandbox_config();
  sb->mutable_metadata()->set_name("bench-pod");
  sb->mutable_metadata()->set_namespace_("default");
  sb->mutable_metadata()->set_uid("bench-pod-uid");
  (*sb->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100"}}]})";
  return req;
}

}  // namespace

int main(int argc, char** argv) {
  std::string crihookd, containerd;
  int iterations = 4000, clients = 4, rounds = 4;
  std::string only;  // run one scenario: version, list or create
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--crihookd")
      crihookd = next();
    else if (a == "--containerd")
      containerd = next();
    else if (a == "--iterations")
      iterations = std::stoi(next());
    else if (a == "--clients")
      clients = std::stoi(next());
    else if (a == "--rounds")
      rounds = std::stoi(next());
    else if (a == "--only")
      only = next();
    else {
      std::fprintf(stderr,
                   "usage: crihook_bench --crihookd BIN [--containerd SOCK] [--iterations N] "
                   "[--clients N] [--rounds N]\n");
      return 2;
    }
  }
  if (crihookd.empty()) {
    std::fprintf(stderr, "crihook_bench: --crihookd is required\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/crihook-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);

  FakeRuntime fake;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + dir + "/fake.sock", grpc::InsecureServerCredentials());
  builder.RegisterService(&fake);
  builder.SetMaxSendMessageSize(64 << 20);
  auto server = builder.BuildAndStart();

  std::printf(
      "crihook_bench: %d iterations per measurement in %d alternating rounds, %d clients for "
      "throughput\n",
      iterations, rounds, clients);
  std::printf(
      "latency in microseconds (p50, p99); throughput in calls/s; ratio = through crihookd / "
      "direct\n\n");
  std::printf("%-38s %-10s %9s %9s %6s %8s %9s %9s %9s %9s %6s\n", "scenario", "backend", "dir p50",
              "via p50", "ratio", "added", "dir p99", "via p99", "dir thr", "via thr", "thr r");

  const pid_t proxy = spawnCrihookd(crihookd, dir + "/crihook-fake.sock", dir + "/fake.sock");
  std::this_thread::sleep_for(200ms);
  const long idle_rss = rssKiB(proxy);

  Call version = [](v1::RuntimeService::Stub& s, int, int) {
    grpc::ClientContext ctx;
    v1::VersionResponse r;
    return s.Version(&ctx, v1::VersionRequest(), &r).ok();
  };
  Call list = [](v1::RuntimeService::Stub& s, int, int) {
    grpc::ClientContext ctx;
    v1::ListContainersResponse r;
    return s.ListContainers(&ctx, v1::ListContainersRequest(), &r).ok();
  };
  // As kubelet does: a container created is removed again, so the pod's
  // record stays the size of a real pod's.
  Call create_rm_fake = [](v1::RuntimeService::Stub& s, int c, int i) {
    grpc::ClientContext ctx;
    v1::CreateContainerResponse r;
    if (!s.CreateContainer(&ctx, createRequest("sandbox", c, i), &r).ok()) return false;
    grpc::ClientContext ctx2;
    v1::RemoveContainerRequest rm;
    rm.set_container_id(r.container_id());
    v1::RemoveContainerResponse rr;
    return s.RemoveContainer(&ctx2, rm, &rr).ok();
  };

  auto want = [&](const char* name) { return only.empty() || only == name; };
  // crihookd's CPU per relayed call, per scenario (the direct runs cost it nothing).
  std::vector<std::pair<std::string, double>> cpu;
  auto measured = [&](const std::string& name, const std::function<long()>& run) {
    const double before = cpuMicros(proxy);
    const long calls = run();
    cpu.emplace_back(name, (cpuMicros(proxy) - before) / static_cast<double>(std::max(1L, calls)));
  };
  std::vector<std::pair<std::string, double>> syscalls;
  if (want("version")) {
    measured("Version", [&] {
      return compare("Version (tiny unary)", "fake", dir + "/fake.sock", dir + "/crihook-fake.sock",
                     version, iterations, clients, rounds);
    });
    measured("Version, 16 streams on one connection", [&] {
      return compare("Version, 16 streams, 1 connection", "fake", dir + "/fake.sock",
                     dir + "/crihook-fake.sock", version, iterations, 16, rounds, true);
    });
    // Counted apart from the timed runs, on warm connections.
    const int n = std::max(1000, iterations / 2);
    Runner one{dir + "/crihook-fake.sock", n, 1}, many{dir + "/crihook-fake.sock", n, 16, true};
    auto stub = v1::RuntimeService::NewStub(channel(one.path, 0));
    version(*stub, 0, 0);
    syscalls.emplace_back("1 client", systemCallsPerCall(proxy, dir, [&] {
                            for (int i = 0; i < n; ++i) version(*stub, 0, i);
                            return static_cast<long>(n);
                          }));
    syscalls.emplace_back("16 streams on one connection", systemCallsPerCall(proxy, dir, [&] {
                            many.throughput(version, n / 16);
                            return static_cast<long>(16 + 16 * (n / 16));
                          }));
  }
  char label[64];
  std::snprintf(label, sizeof(label), "ListContainers 5000 (%zu KiB)", fake.listBytes() / 1024);
  if (want("list")) {
    measured("ListContainers 5000", [&] {
      return compare(label, "fake", dir + "/fake.sock", dir + "/crihook-fake.sock", list,
                     std::max(rounds * 10, iterations / 20), clients, rounds);
    });
  }
  if (want("create")) {
    measured("Create+RemoveContainer", [&] {
      return 2 * compare("Create+RemoveContainer (intercepted)", "fake", dir + "/fake.sock",
                         dir + "/crihook-fake.sock", create_rm_fake, iterations / 2, clients,
                         rounds);
    });
  }
  const long loaded_rss = rssKiB(proxy);
  stop(proxy);

  if (!containerd.empty() && (want("version") || want("list"))) {
    const pid_t p2 = spawnCrihookd(crihookd, dir + "/crihook-ctd.sock", containerd);
    compare("Version (tiny unary)", "containerd", containerd, dir + "/crihook-ctd.sock", version,
            iterations, clients, rounds);
    compare("ListContainers", "containerd", containerd, dir + "/crihook-ctd.sock", list,
            iterations / 4, clients, rounds);
    // Intercepted calls against the real runtime: create and remove a
    // container in a host-network pod (both calls intercepted).
    auto direct = v1::RuntimeService::NewStub(channel(containerd, 0));
    v1::RunPodSandboxRequest run;
    auto* pod = run.mutable_config();
    pod->mutable_metadata()->set_name("crihook-bench");
    pod->mutable_metadata()->set_namespace_("default");
    pod->mutable_metadata()->set_uid("crihook-bench-uid");
    pod->set_log_directory(dir + "/logs");
    pod->mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
        v1::NODE);
    v1::RunPodSandboxResponse ran;
    grpc::ClientContext rctx;
    if (direct->RunPodSandbox(&rctx, run, &ran).ok()) {
      const std::string sandbox = ran.pod_sandbox_id();
      Call create_rm = [&](v1::RuntimeService::Stub& s, int c, int i) {
        static std::atomic<int> serial{0};
        v1::CreateContainerRequest req = createRequest(sandbox, c, serial++);
        *req.mutable_sandbox_config() = run.config();
        grpc::ClientContext ctx;
        v1::CreateContainerResponse r;
        if (!s.CreateContainer(&ctx, req, &r).ok()) return false;
        grpc::ClientContext ctx2;
        v1::RemoveContainerRequest rm;
        rm.set_container_id(r.container_id());
        v1::RemoveContainerResponse rr;
        return s.RemoveContainer(&ctx2, rm, &rr).ok();
      };
      const int n = std::max(rounds * 10, iterations / 40);
      compare("Create+RemoveContainer (intercepted)", "containerd", containerd,
              dir + "/crihook-ctd.sock", create_rm, n, std::min(clients, 2), rounds);
      grpc::ClientContext c1, c2;
      v1::StopPodSandboxRequest sp;
      sp.set_pod_sandbox_id(sandbox);
      v1::StopPodSandboxResponse spr;
      direct->StopPodSandbox(&c1, sp, &spr);
      v1::RemovePodSandboxRequest rp;
      rp.set_pod_sandbox_id(sandbox);
      v1::RemovePodSandboxResponse rpr;
      direct->RemovePodSandbox(&c2, rp, &rpr);
    } else {
      std::printf("(containerd could not run the benchmark pod: %s)\n",
                  rctx.debug_error_string().c_str());
    }
    stop(p2);
  }
  std::printf("\ncrihookd resident memory: %ld KiB idle, %ld KiB after the fake-backend runs\n",
              idle_rss, loaded_rss);
  for (const auto& [name, us] : cpu)
    std::printf("crihookd CPU time, %s: %.1f us per relayed call\n", name.c_str(), us);
  for (const auto& [name, per_call] : syscalls) {
    if (per_call < 0) {
      std::printf("crihookd system calls per relayed Version call, %s: not counted (no strace)\n",
                  name.c_str());
    } else {
      std::printf("crihookd system calls per relayed Version call, %s: %.2f (strace -c -f)\n",
                  name.c_str(), per_call);
    }
  }
  server->Shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}
