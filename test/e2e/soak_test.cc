// Soak: many pod lifecycles from 4 client threads through the real crihookd
// against a private containerd, with the device hooks on, while crihookd is
// SIGKILLed and restarted several times and containerd restarted once.
// Clients retry a failed step as kubelet would. Passes when no cleanup is
// lost (every device init has its cleanup), no pod is stuck (containerd
// lists none at the end), and crihookd's RSS and open fds are flat between
// a quiescent point after warm-up and the end.
//
// Needs root, containerd, runc and busybox-static, as the containerd suite;
// skipped without them unless CRIHOOK_E2E_REQUIRED is truthy (1, true, yes,
// on), where it fails.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/child_process.h"
#include "test/support/cri_pods.h"
#include "test/support/e2e_env.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/process_stats.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The shape of the run. 4 clients (kubelet's pod workers, one GPU each) x 10
// lifecycles = 40 pods; crihookd is killed when the clients' completed steps
// (8 per lifecycle) reach each of kKillAtSteps, containerd restarted at
// kContainerdRestartAtStep: all of them before the warm-up checkpoint
// (kWarmLifecycles per client = 160 steps), so the final crihookd serves a
// while before the checkpoint and 160 steps after it. Sized to stay under 4
// minutes on a loaded 2-core machine.
constexpr int kClients = 4;
constexpr int kLifecycles = 10;
constexpr int kWarmLifecycles = 5;
constexpr int kKillAtSteps[] = {12, 40, 70, 100};
constexpr int kContainerdRestartAtStep = 55;
// A step is retried for this long before the run fails: longer than a
// crihookd restart plus a containerd restart with its image import.
constexpr auto kStepBudget = 90s;
// RemoveContainer attempts failing "cannot delete running task" before the
// task is deleted the operator's way (deleteStuckTask): about 10 s of
// kubelet-like retries with StopContainer between them.
constexpr int kStuckTaskAttempts = 12;

// Flat: between two quiescent points (no pod, no call in flight) the open
// fds of crihookd must not grow by more than kFdSlack (the reconciler's and
// the hook threads' transient descriptors: a gRPC channel's eventfd/epoll
// may be opened lazily), and its RSS by more than kRssSlackKiB (glibc arenas
// of the event-loop and hook threads touch new pages as they first serve
// larger messages). A leak per pod (a connection, a record, a pipe of an
// action) over 20 lifecycles would exceed either.
constexpr int kFdSlack = 3;
constexpr long kRssSlackKiB = 6 * 1024;
// A failure's report shows this much of crihookd's log.
constexpr int kReportLogLines = 150;

int openFds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(cat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

class Soak : public ::testing::Test {
 protected:
  void SetUp() override {
    CRIHOOK_E2E_SKIP_UNLESS_MACHINE_HAS_ALL();
    if (e2eContainerd2()) CRIHOOK_E2E_NRI_CONTAINERD_OR_SKIP(binary_);  // 2.x's
    char tmpl[] = "/tmp/crihook-soak-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    runShellOrThrow(
        cat(kScripts, "make-busybox-image.sh ", dir_, "/busybox.tar ", kE2eImage, " 2>&1"));
    startContainerd();
    // The device tree: GPUs as /dev/zero's numbers, the DGX fixture topology,
    // and an action that appends its arguments to actions.log.
    std::filesystem::create_directories(dir_ + "/dev");
    runShellOrThrow(
        cat("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh ", dir_, "/fixtures"));
    for (int i = 0; i < kClients; ++i)
      runShellOrThrow(cat("mknod -m 0666 ", dir_, "/dev/nvidia", i, " c 1 5"));
    for (const char* n : {"nvidiactl", "nvidia-uvm"})
      runShellOrThrow(cat("mknod -m 0666 ", dir_, "/dev/", n, " c 1 3"));
    std::ofstream(dir_ + "/act.sh") << "#!/bin/sh\necho \"$*\" >> " << dir_ << "/actions.log\n";
    std::filesystem::permissions(dir_ + "/act.sh", std::filesystem::perms::owner_all);
    const std::string root = cat("[hook.settings]\ndevice_root = \"", dir_, "/dev\"\n");
    std::string actions;
    for (const char* stage : {"init", "cleanup"}) {
      actions += cat("[[hook.settings.gpu.", stage, "]]\ncommand = [\"", dir_, "/act.sh\", \"",
                     stage, "\", \"{minor}\", \"{pod_name}\"]\n");
    }
    std::ofstream(dir_ + "/crihookd.toml")
        << "[hooks]\nstate_dir = \"" << dir_ << "/state\"\nhookserver_dir = \"\"\n"
        << "[topology]\nroot = \"" << dir_ << "/fixtures/dgx\"\n"
        << "[[hook]]\nname = \"gpu\"\nbuiltin = \"gpu\"\n"
        << root << "[[hook]]\nname = \"devices\"\nbuiltin = \"device-lifecycle\"\n"
        << "timeout = \"30s\"\n"
        << root << actions;
    startCrihookd();
    grpc::ChannelArguments args;
    // Reconnect as soon as crihookd is back (gRPC's default backoff reaches
    // minutes; kubelet's CRI client redials within a second or two). Not
    // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC C++ reads it as the time a
    // connection attempt is given to receive the server's SETTINGS, and at
    // 100 ms attempts timed out with crihookd's SETTINGS unread in the
    // socket (see call()).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channel_ = grpc::CreateCustomChannel("unix://" + dir_ + "/crihook.sock",
                                         grpc::InsecureChannelCredentials(), args);
  }

  void TearDown() override {
    if (dir_.empty()) return;
    // Leave nothing running: whatever a failed run left, removed directly.
    if (containerd_ > 0) {
      auto direct = v1::RuntimeService::NewStub(unixChannel(ctdSocket()));
      for (const auto& p : listPods(*direct)) {
        grpc::ClientContext c1, c2;
        v1::StopPodSandboxRequest stop;
        stop.set_pod_sandbox_id(p.id());
        v1::StopPodSandboxResponse r1;
        direct->StopPodSandbox(&c1, stop, &r1);
        v1::RemovePodSandboxRequest rm;
        rm.set_pod_sandbox_id(p.id());
        v1::RemovePodSandboxResponse r2;
        direct->RemovePodSandbox(&c2, rm, &r2);
      }
    }
    if (crihookd_) {
      crihookd_->signal(SIGTERM);
      crihookd_->wait(10s);
    }
    stopContainerd();
    containerd_guards_.clear();  // kills what the containerds left (shims)
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string ctdSocket() const { return dir_ + "/ctd/containerd.sock"; }

  void startContainerd() {
    // Under a guard of its own (child_process.h): the containerd and its
    // shims die with the test, even a killed one. A stopped containerd's
    // guard stays until the end: the shims it left serve the next one.
    containerd_guards_.emplace_back();
    std::vector<std::string> args = {dir_ + "/ctd", kE2eImage, dir_ + "/busybox.tar"};
    if (!binary_.empty()) args.push_back(binary_);
    containerd_ = startGuardedDaemon(
        containerd_guards_.back(), kScripts + "containerd-private.sh", args,
        cat(dir_, "/containerd-start-", containerd_guards_.size(), ".log"), 120s);
  }
  void stopContainerd() {
    if (containerd_ <= 0) return;
    terminateDaemon(containerd_, 10s);
    containerd_ = -1;
  }
  void startCrihookd() {
    std::filesystem::remove(dir_ + "/crihook.sock");  // a killed crihookd leaves it
    crihookd_ = std::make_unique<ChildProcess>(
        CRIHOOKD_BINARY,
        std::vector<std::string>{"--config", dir_ + "/crihookd.toml", "--listen",
                                 dir_ + "/crihook.sock", "--backend", "unix://" + ctdSocket()},
        dir_ + "/crihookd.log");
    ASSERT_TRUE(waitForFile(dir_ + "/crihook.sock", 20s)) << readFile(dir_ + "/crihookd.log");
  }

  static std::vector<v1::PodSandbox> listPods(v1::RuntimeService::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::ListPodSandboxRequest req;
    (*req.mutable_filter()->mutable_label_selector())["crihook.test/soak"] = "1";
    v1::ListPodSandboxResponse resp;
    if (!stub.ListPodSandbox(&ctx, req, &resp).ok()) return {};
    return {resp.items().begin(), resp.items().end()};
  }

  // Calls `attempt` until it returns OK or `done` says the state it wanted is
  // reached anyway, backing off 100 ms -> 1 s as kubelet's sync loop would.
  // Fails the test (returns false) after kStepBudget.
  bool step(const std::string& pod, const std::string& what,
            const std::function<grpc::Status()>& attempt,
            const std::function<bool(const grpc::Status&)>& done = nullptr) {
    auto backoff = 100ms;
    grpc::Status last;
    for (auto until = Clock::now() + kStepBudget; Clock::now() < until;) {
      last = attempt();
      if (last.ok() || (done && done(last))) {
        steps_.fetch_add(1);
        return true;
      }
      retries_.fetch_add(1);
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
    const std::string why = cat(pod, " ", what, ": still failing after ", kStepBudget.count(),
                                " s: ", last.error_message());
    ADD_FAILURE() << why;
    std::lock_guard lock(failures_mu_);
    failures_.emplace_back(pod, why);
    return false;
  }

  template <typename Req, typename Resp>
  grpc::Status call(grpc::Status (v1::RuntimeService::Stub::*method)(grpc::ClientContext*,
                                                                     const Req&, Resp*),
                    const Req& req, Resp* resp) {
    auto stub = v1::RuntimeService::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    // Waits for the connection rather than failing at once while the
    // channel reconnects. A synchronous gRPC C++ client reads a connecting
    // channel's socket only from a call waiting on it (or the backup poller,
    // every 5 s): with fail-fast calls, a lone client saw its reconnections
    // time out unread, one after another, for 90 s (CI, seen once). kubelet's
    // grpc-go client reads every connection from a goroutine of its own and
    // has no such gap. A call cut by crihookd's kill still fails, and its
    // step is retried.
    ctx.set_wait_for_ready(true);
    return (stub.get()->*method)(&ctx, req, resp);
  }

  // One pod's whole life, as kubelet drives it: each step retried until it
  // took effect, whatever crihookd or containerd did meanwhile.
  bool lifecycle(int client, int n) {
    using RS = v1::RuntimeService::Stub;
    const std::string name = cat("soak-", client, "-", n);
    v1::RunPodSandboxRequest run_req;
    v1::PodSandboxConfig& config = *run_req.mutable_config();
    config = e2ePodConfig(name, dir_ + "/logs");
    config.mutable_metadata()->set_namespace_("soak");
    (*config.mutable_labels())["crihook.test/soak"] = "1";
    (*config.mutable_labels())["crihook.test/pod"] = name;
    (*config.mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
        cat(R"({"gpu":[{"minor":)", client, "}]}");

    // RunPodSandbox: a lost answer leaves a sandbox kubelet finds by listing.
    std::string sandbox;
    uint32_t attempt = 0;
    std::set<std::string> dead;  // earlier attempts' sandboxes not yet removed
    if (!step(name, "RunPodSandbox", [&] {
          config.mutable_metadata()->set_attempt(attempt);
          v1::RunPodSandboxResponse resp;
          grpc::Status s = call(&RS::RunPodSandbox, run_req, &resp);
          if (s.ok()) {
            sandbox = resp.pod_sandbox_id();
            return s;
          }
          v1::ListPodSandboxRequest list;
          (*list.mutable_filter()->mutable_label_selector())["crihook.test/pod"] = name;
          v1::ListPodSandboxResponse pods;
          if (!call(&RS::ListPodSandbox, list, &pods).ok()) return s;
          for (const auto& p : pods.items()) {
            if (p.state() == v1::SANDBOX_READY) {
              sandbox = p.id();
              return grpc::Status::OK;
            }
          }
          // A sandbox that did not come up: kubelet kills it, tries the
          // next attempt, and its garbage collector removes the dead one
          // later (below) if the kill was cut short too.
          if (pods.items_size() > 0) {
            for (const auto& p : pods.items()) {
              if (!removeSandbox(p.id()).ok()) dead.insert(p.id());
            }
            ++attempt;
          }
          return s;
        }))
      return false;

    // CreateContainer: found by listing when its answer was lost.
    v1::CreateContainerRequest create;
    create.set_pod_sandbox_id(sandbox);
    *create.mutable_sandbox_config() = config;
    auto* c = create.mutable_config();
    c->mutable_metadata()->set_name("box");
    c->mutable_image()->set_image(kE2eImage);
    c->add_command("/bin/sleep");
    c->add_args("3600");
    c->set_log_path("box.log");
    std::string container;
    if (!step(name, "CreateContainer", [&] {
          v1::CreateContainerResponse resp;
          grpc::Status s = call(&RS::CreateContainer, create, &resp);
          if (s.ok()) {
            container = resp.container_id();
            return s;
          }
          v1::ListContainersRequest list;
          list.mutable_filter()->set_pod_sandbox_id(sandbox);
          v1::ListContainersResponse have;
          if (call(&RS::ListContainers, list, &have).ok() && have.containers_size() > 0) {
            container = have.containers(0).id();
            return grpc::Status::OK;
          }
          return s;
        }))
      return false;

    // StartContainer: done once the container runs, or ran: a start cut
    // short by containerd's restart leaves it EXITED, and kubelet goes on
    // (its restart policy would make a new container; this pod just ends).
    // So does a container whose create the restart cut short: containerd
    // keeps it, CONTAINER_UNKNOWN, and refuses to start it ("failed to set
    // starting state"); kubelet stops it (containerd cleans an unknown
    // container up on StopContainer) and makes a new one.
    v1::StartContainerRequest start;
    start.set_container_id(container);
    if (!step(name, "StartContainer", [&] {
          v1::StartContainerResponse resp;
          grpc::Status s = call(&RS::StartContainer, start, &resp);
          if (s.ok()) return s;
          v1::ContainerStatusRequest req;
          req.set_container_id(container);
          v1::ContainerStatusResponse st;
          if (call(&RS::ContainerStatus, req, &st).ok() &&
              (st.status().state() == v1::CONTAINER_RUNNING ||
               st.status().state() == v1::CONTAINER_EXITED ||
               st.status().state() == v1::CONTAINER_UNKNOWN))
            return grpc::Status::OK;
          return s;
        }))
      return false;

    // The rest is idempotent; NOT_FOUND means it is done already.
    auto gone = [](const grpc::Status& s) { return s.error_code() == grpc::StatusCode::NOT_FOUND; };
    v1::StopContainerRequest stop;
    stop.set_container_id(container);
    stop.set_timeout(0);
    v1::RemoveContainerRequest remove;
    remove.set_container_id(container);
    v1::StopPodSandboxRequest stop_pod;
    stop_pod.set_pod_sandbox_id(sandbox);
    v1::RemovePodSandboxRequest remove_pod;
    remove_pod.set_pod_sandbox_id(sandbox);
    int stuck = 0;  // RemoveContainer's "cannot delete running task" in a row
    return step(
               name, "StopContainer",
               [&] {
                 v1::StopContainerResponse r;
                 return call(&RS::StopContainer, stop, &r);
               },
               gone) &&
           step(
               name, "RemoveContainer",
               [&] {
                 v1::RemoveContainerResponse r;
                 grpc::Status s = call(&RS::RemoveContainer, remove, &r);
                 // A stop cut short by the runtime's restart leaves the task
                 // running ("cannot delete running task"): kubelet stops a
                 // container again before it removes it, and so does this.
                 if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
                   v1::StopContainerResponse sr;
                   call(&RS::StopContainer, stop, &sr);
                   if (s.error_message().find("cannot delete running task") != std::string::npos &&
                       ++stuck == kStuckTaskAttempts) {
                     deleteStuckTask(container);
                   }
                 }
                 return s;
               },
               gone) &&
           step(
               name, "StopPodSandbox",
               [&] {
                 v1::StopPodSandboxResponse r;
                 return call(&RS::StopPodSandbox, stop_pod, &r);
               },
               gone) &&
           step(
               name, "RemovePodSandbox",
               [&] {
                 v1::RemovePodSandboxResponse r;
                 return call(&RS::RemovePodSandbox, remove_pod, &r);
               },
               gone) &&
           collectSandboxesOf(name, dead);
  }

  // Stops and removes a sandbox, as kubelet kills a pod attempt that did
  // not come up; NOT_FOUND is done.
  grpc::Status removeSandbox(const std::string& id) {
    using RS = v1::RuntimeService::Stub;
    v1::StopPodSandboxRequest stop;
    stop.set_pod_sandbox_id(id);
    v1::StopPodSandboxResponse r1;
    grpc::Status s = call(&RS::StopPodSandbox, stop, &r1);
    if (!s.ok() && s.error_code() != grpc::StatusCode::NOT_FOUND) return s;
    v1::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(id);
    v1::RemovePodSandboxResponse r2;
    s = call(&RS::RemovePodSandbox, rm, &r2);
    return s.error_code() == grpc::StatusCode::NOT_FOUND ? grpc::Status::OK : s;
  }

  // kubelet's garbage collector, once the pod is deleted: removes every
  // sandbox of it that containerd still lists. First the earlier attempts
  // whose kill was cut short by crihookd's kill or containerd's restart,
  // then any the runtime lists that no answer and no listing during the
  // pod's life named: containerd 2 keeps a sandbox whose creation its
  // restart cut short, in an unknown state (listed NOT_READY, created at
  // Go's zero time), and one such sandbox was left at the end of a run
  // whose lifecycle never saw it (CI, containerd 2).
  bool collectSandboxesOf(const std::string& pod, const std::set<std::string>& dead) {
    for (const auto& id : dead) {
      if (!step(pod, "RemovePodSandbox (an earlier attempt's)", [&] { return removeSandbox(id); }))
        return false;
      dead_sandboxes_.fetch_add(1);
    }
    using RS = v1::RuntimeService::Stub;
    return step(pod, "RemovePodSandbox (one the runtime still lists)", [&] {
      v1::ListPodSandboxRequest list;
      (*list.mutable_filter()->mutable_label_selector())["crihook.test/pod"] = pod;
      v1::ListPodSandboxResponse pods;
      grpc::Status s = call(&RS::ListPodSandbox, list, &pods);
      if (!s.ok()) return s;
      for (const auto& p : pods.items()) {
        s = removeSandbox(p.id());
        if (!s.ok()) return s;
        unnamed_sandboxes_.fetch_add(1);
      }
      return grpc::Status::OK;
    });
  }

  // containerd (Debian 12's 1.6), restarted in the middle of a container's
  // start or stop, may keep a task under a container its CRI status says is
  // not running: StopContainer then returns OK at once and does nothing, and
  // every RemoveContainer fails "cannot delete running task" (kubelet would
  // loop on it as well). crihookd only relays both calls. An operator ends
  // it with ctr; so does this, once, and the run reports how often it had to.
  void deleteStuckTask(const std::string& container) {
    if (container.empty() || container.find_first_not_of("0123456789abcdef") != std::string::npos)
      return;  // an id containerd made: hex only, safe in a command line
    stuck_tasks_.fetch_add(1);
    const std::string cmd = cat("ctr --address ", ctdSocket(), " -n k8s.io task delete --force ",
                                container, " >/dev/null 2>&1");
    const int rc = std::system(cmd.c_str());
    std::printf(
        "soak: container %s: containerd kept its task after a stop; ctr task delete "
        "--force exited %d\n",
        container.c_str(), rc);
  }

  // What a failed run needs to be understood from the end of a long CI
  // output: the tail of crihookd's log (every instance's, appended), then
  // the steps that ran out of budget, last, where a truncated output keeps
  // them.
  std::string report() {
    const std::string log = readFile(dir_ + "/crihookd.log");
    std::string out =
        cat("crihookd.log, last ", kReportLogLines, " lines:\n", tail(log, kReportLogLines));
    // The running containerd's errors (a restart starts its log again).
    out += cat("\ncontainerd.log, its last ", kReportLogLines / 5, " errors:\n",
               tail(linesWith(readFile(dir_ + "/ctd/containerd.log"), "level=error"),
                    kReportLogLines / 5));
    std::lock_guard lock(failures_mu_);
    for (const auto& [pod, why] : failures_) {
      out += cat("\ncrihookd.log on pod ", pod, ", last ", kReportLogLines / 3, " lines:\n",
                 tail(linesWith(log, cat("soak/", pod)), kReportLogLines / 3));
    }
    out += cat("\nsteps that failed (", failures_.size(), "):\n");
    for (const auto& [pod, why] : failures_) out += cat("  ", why, "\n");
    return out;
  }

  // What is known of sandboxes containerd still lists at the end: which
  // attempt each was, and what crihookd and containerd logged of it.
  std::string leftReport(const std::vector<v1::PodSandbox>& left) {
    const std::string log = readFile(dir_ + "/crihookd.log");
    const std::string ctd = readFile(dir_ + "/ctd/containerd.log");
    std::string out;
    for (const auto& p : left) {
      out += cat("\n", p.metadata().name(), " attempt ", p.metadata().attempt(), " id ", p.id(),
                 " state ", v1::PodSandboxState_Name(p.state()), "\ncrihookd.log on it:\n",
                 tail(linesWith(log, cat("soak/", p.metadata().name())), kReportLogLines / 3),
                 "\ncontainerd.log on it:\n",
                 tail(linesWith(ctd, p.id().substr(0, 12)), kReportLogLines / 3));
    }
    return out;
  }

  // The lines of `text` naming `word` ("soak/soak-1-1", not "soak/soak-1-10").
  static std::string linesWith(const std::string& text, const std::string& word) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      for (size_t at = line.find(word); at != std::string::npos; at = line.find(word, at + 1)) {
        const size_t end = at + word.size();
        if (end == line.size() || !std::isalnum(static_cast<unsigned char>(line[end]))) {
          out += line + "\n";
          break;
        }
      }
    }
    return out;
  }
  static std::string tail(const std::string& text, int lines) {
    size_t from = text.size();
    for (int seen = 0; from > 0; --from) {
      if (text[from - 1] == '\n' && ++seen > lines) break;
    }
    return text.substr(from);
  }

  // init/cleanup lines per pod name, from the action log.
  std::map<std::string, std::pair<int, int>> actionsByPod() const {
    std::map<std::string, std::pair<int, int>> out;
    std::istringstream in(readFile(dir_ + "/actions.log"));
    for (std::string stage, minor, pod; in >> stage >> minor >> pod;) {
      (stage == "init" ? out[pod].first : out[pod].second)++;
    }
    return out;
  }
  // Pods with fewer cleanups than inits (each sandbox attempt of a pod
  // inits its GPU once and owes one cleanup).
  std::vector<std::string> owedCleanups() const {
    std::vector<std::string> out;
    for (const auto& [pod, counts] : actionsByPod()) {
      if (counts.second < counts.first) out.push_back(pod);
    }
    return out;
  }
  size_t filesIn(const std::string& sub) const {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/state/" + sub, ec))
      n += e.path().extension() == ".json";
    return n;
  }

  static inline const std::string kScripts = CRIHOOK_SOURCE_DIR "/test/e2e/";
  std::string dir_;
  std::string binary_;  // containerd 2.x's with CRIHOOK_TEST_CONTAINERD=2; else "": the one on PATH
  pid_t containerd_ = -1;
  std::vector<std::unique_ptr<ChildProcess>> containerd_guards_;
  std::unique_ptr<ChildProcess> crihookd_;
  std::shared_ptr<grpc::Channel> channel_;
  std::atomic<int> steps_{0}, retries_{0}, stuck_tasks_{0}, dead_sandboxes_{0}, unnamed_sandboxes_{0};
  std::mutex failures_mu_;
  // The steps that ran out of budget: pod name, why.
  std::vector<std::pair<std::string, std::string>> failures_;
};

TEST_F(Soak, PodChurnSurvivesCrihookdKillsAndAContainerdRestart) {
  const auto began = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  int at_checkpoint = 0;
  bool resume = false, stop_controller = false;
  int kills = 0, containerd_restarts = 0;

  // The chaos: crihookd killed mid-churn at fixed step counts, containerd
  // restarted once; crihookd is started again at once, as systemd would.
  std::thread controller([&] {
    size_t next_kill = 0;
    bool restarted_containerd = false;
    std::unique_lock lock(mu);
    while (!stop_controller && (next_kill < std::size(kKillAtSteps) || !restarted_containerd)) {
      lock.unlock();
      const int done = steps_.load();
      if (next_kill < std::size(kKillAtSteps) && done >= kKillAtSteps[next_kill]) {
        crihookd_->signal(SIGKILL);
        crihookd_->wait(10s);
        startCrihookd();
        ++next_kill;
        ++kills;
      } else if (!restarted_containerd && done >= kContainerdRestartAtStep) {
        stopContainerd();
        startContainerd();
        restarted_containerd = true;
        ++containerd_restarts;
      }
      lock.lock();
      cv.wait_for(lock, 5ms, [&] { return stop_controller; });
    }
  });

  long warm_rss = 0;
  int warm_fds = 0;
  std::vector<std::thread> clients;
  std::atomic<int> failed{0};
  for (int client = 0; client < kClients; ++client) {
    clients.emplace_back([&, client] {
      for (int n = 0; n < kLifecycles; ++n) {
        if (n == kWarmLifecycles) {  // quiescent: every client waits here
          std::unique_lock lock(mu);
          ++at_checkpoint;
          cv.notify_all();
          cv.wait(lock, [&] { return resume; });
        }
        if (!lifecycle(client, n)) {
          failed.fetch_add(1);
          std::lock_guard lock(mu);
          cv.notify_all();
          break;
        }
      }
    });
  }
  bool warm = false;
  {
    std::unique_lock lock(mu);
    warm = cv.wait_for(lock, 200s, [&] { return at_checkpoint == kClients || failed > 0; });
  }
  EXPECT_TRUE(warm) << "the clients did not reach the checkpoint within 200 s";
  if (warm && failed == 0) {
    controller.join();  // every kill and the containerd restart are behind us
    EXPECT_EQ(kills, static_cast<int>(std::size(kKillAtSteps)));
    EXPECT_EQ(containerd_restarts, 1);
    warm_rss = rssKiB(crihookd_->pid());
    warm_fds = openFds(crihookd_->pid());
  }
  {
    std::lock_guard lock(mu);
    resume = true;
    stop_controller = true;
    cv.notify_all();
  }
  for (auto& t : clients) t.join();
  if (controller.joinable()) controller.join();
  ASSERT_EQ(failed.load(), 0) << report();
  const long end_rss = rssKiB(crihookd_->pid());
  const int end_fds = openFds(crihookd_->pid());

  // Cleanups owed for sandboxes whose stop crihookd missed are found by the
  // reconciler when crihookd starts: restart it once more and wait for the
  // action log to settle.
  crihookd_->signal(SIGTERM);
  EXPECT_EQ(crihookd_->wait(20s), 0);
  startCrihookd();
  eventually([&] { return owedCleanups().empty(); }, 60s, 100ms);
  eventually([&] { return filesIn("devices") == 0; }, 30s, 100ms);

  const auto took = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - began);
  const auto actions = actionsByPod();
  int inits = 0, cleanups = 0;
  for (const auto& [pod, counts] : actions) inits += counts.first, cleanups += counts.second;
  std::printf(
      "soak: %d lifecycles from %d clients in %lld s; %d steps, %d retried attempts; %zu kills of "
      "crihookd, 1 containerd restart; %d inits, %d cleanups over %zu pods; crihookd RSS %ld -> "
      "%ld KiB, fds %d -> %d; records left: %zu device, %zu pod; tasks containerd kept, deleted "
      "with ctr: %d; earlier attempts' sandboxes removed late: %d, found only by listing: %d\n",
      kClients * kLifecycles, kClients, static_cast<long long>(took.count()), steps_.load(),
      retries_.load(), std::size(kKillAtSteps), inits, cleanups, actions.size(), warm_rss, end_rss,
      warm_fds, end_fds, filesIn("devices"), filesIn("pods"), stuck_tasks_.load(),
      dead_sandboxes_.load(), unnamed_sandboxes_.load());
  RecordProperty("seconds", static_cast<int>(took.count()));
  RecordProperty("rss_kib", cat(warm_rss, " -> ", end_rss));
  RecordProperty("fds", cat(warm_fds, " -> ", end_fds));

  // Zero lost cleanups: every pod's device init has its cleanup, and no
  // record owes one.
  EXPECT_EQ(actions.size(), static_cast<size_t>(kClients * kLifecycles));
  EXPECT_THAT(owedCleanups(), ::testing::IsEmpty()) << report();
  EXPECT_EQ(filesIn("devices"), 0u);
  // Zero stuck pods, asked of containerd itself.
  auto direct = v1::RuntimeService::NewStub(unixChannel(ctdSocket()));
  const auto left = listPods(*direct);
  EXPECT_THAT(left, ::testing::IsEmpty()) << leftReport(left);
  // Flat.
  EXPECT_LE(end_fds, warm_fds + kFdSlack);
  EXPECT_LE(end_rss, warm_rss + kRssSlackKiB);
}

}  // namespace
}  // namespace crihook::testing
