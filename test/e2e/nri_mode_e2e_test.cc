// End to end, NRI mode: the real crihookd binary with [server] mode = "nri"
// as a plugin of the real containerd 1.7 (Debian 13's, fetched into a cache
// by containerd17.sh; NRI on), or with CRIHOOK_TEST_CONTAINERD=2 of
// containerd 2.x (Debian unstable's, containerd2.sh; NRI 0.8), the client
// making kubelet's CRI calls straight to containerd's CRI socket. The same
// tests on both (meson.build: containerd17_nri_mode, containerd2_nri_mode).
//
// The e2e suite's device pod (test/support/device_pod.h: two GPUs, an RDMA VF
// and a CPU on the DGX fixture, device-lifecycle's actions logged) runs
// through the same hooks once with crihookd in proxy mode in front of that
// containerd and once in NRI mode: the container must see exactly the same
// (device nodes, environment, cpuset), `crihookctl explain` must show the
// same decisions, and the device clean-ups must pair the inits. In NRI mode
// crihookd is also killed and restarted between a pod's RunPodSandbox and its
// container, while another pod is removed behind its back. And Koordinator's
// hook servers are called in NRI mode exactly when koordlet runs no NRI
// plugin of its own (nri.koordlet_plugin = false). The cpuset hook's share
// pools move a running container through containerd, which asks crihookd
// about that move over NRI: the move stands. A pod whose device init fails
// leaves no sandbox behind on either runtime (containerd 2.1 would leak it:
// crihookd refuses it at its containers there), and containerd restarts
// cleanly after it and its retry. The budget is checked against the
// timeout a 2.x containerd announces.
//
// Needs what containerd17_nri needs (the other e2e suites' root, containerd,
// runc, busybox; deb.debian.org on the first run, or the cache
// CRIHOOK_CONTAINERD17_CACHE, default /var/cache/crihook-test/containerd17;
// for 2.x CRIHOOK_CONTAINERD2_CACHE, default
// /var/cache/crihook-test/containerd2).
// Skipped without them unless CRIHOOK_E2E_REQUIRED is truthy, where it fails.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ranges>
#include <regex>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "config/config.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "nri/runtime_facts.h"
#include "test/support/child_process.h"
#include "test/support/cri_pods.h"
#include "test/support/device_pod.h"
#include "test/support/e2e_env.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/koord_server.h"
#include "tools/crihookctl/cli.h"
#include "tools/crihookctl/status.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using RS = v1::RuntimeService::Stub;
using namespace std::chrono_literals;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

// containerd's plugin_request_timeout here, and crihookd's [nri] one (they
// must be equal), and device-lifecycle's timeout, the same in both modes:
// crihookd refuses to start in NRI mode unless the hooks of one NRI event
// fit under the former, less its 100 ms margin, and device-lifecycle's is
// counted twice on RunPodSandbox (its pre and post stages; gpu, rdma and
// cpuset run inline and are not counted): 10 s of 11.9 s.
constexpr const char* kRequestTimeout = "12s";
constexpr const char* kLifecycleTimeout = "5s";

template <typename Req, typename Resp>
grpc::Status call(RS& stub, grpc::Status (RS::*method)(grpc::ClientContext*, const Req&, Resp*),
                  const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  return (stub.*method)(&ctx, req, resp);
}

// One sample of crihookd's metrics at `socket` (0 when not recorded yet, -1
// when the scrape failed).
double metricSample(const std::string& socket, const std::string& name) {
  MetricsListen where;
  where.kind = MetricsListen::Kind::kUnix;
  where.path = socket;
  auto r = ctl::httpGet(where, "/metrics", 10s);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1.0;
  auto samples = ctl::parseExposition(r->body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  if (!samples.ok()) return -1.0;
  for (const auto& s : *samples) {
    if (s.name == name) return s.value;
  }
  return 0.0;
}

// How many times `text` is in `haystack`.
size_t countOf(const std::string& haystack, const std::string& text) {
  size_t n = 0;
  for (size_t at = haystack.find(text); at != std::string::npos; at = haystack.find(text, at + 1))
    ++n;
  return n;
}

// crihookd run from DIR/crihookd.toml, its output appended to
// DIR/crihookd.log (every run's), its metrics on DIR/metrics.sock (beside
// the --listen path, which NRI mode does not serve). Killed (SIGKILL) with
// what is left below it when destroyed.
class Crihookd {
 public:
  Crihookd(std::string dir, std::string containerd_socket, bool nri)
      : dir_(std::move(dir)), containerd_(std::move(containerd_socket)), nri_(nri) {}

  // Starts it and returns once it serves: in proxy mode once its CRI socket
  // exists, in NRI mode once containerd has registered and synchronised it
  // (one more "NRI: the runtime has" line than before).
  ::testing::AssertionResult start() {
    const size_t synced = logCount(kSynchronized);
    launch();
    if (!nri_) {
      if (waitForFile(criSocket(), 10s)) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "no CRI socket after 10 s:\n" << log();
    }
    if (!waitForLogCount(kSynchronized, synced + 1, 15s))
      return ::testing::AssertionFailure() << "not synchronised after 15 s:\n" << log();
    // containerd adds a plugin to those it calls just after its Synchronize
    // answer: a pod run in between would not reach it.
    std::this_thread::sleep_for(200ms);
    return ::testing::AssertionSuccess();
  }
  // Starts it without waiting for anything.
  void launch() {
    std::filesystem::remove(criSocket());
    process_ = std::make_unique<ChildProcess>(
        CRIHOOKD_BINARY,
        std::vector<std::string>{"--config", dir_ + "/crihookd.toml", "--listen", criSocket(),
                                 "--backend", "unix://" + containerd_, "--log-level", "info"},
        dir_ + "/crihookd.log");
  }
  void kill() {
    if (!process_) return;
    process_->signal(SIGKILL);
    process_->wait(10s);
    process_.reset();
  }
  // SIGTERM; the exit code (-1 if still running after 10 s).
  int stop() {
    if (!process_) return -1;
    process_->signal(SIGTERM);
    const int code = process_->wait(10s);
    process_.reset();
    return code;
  }

  std::string log() const { return readFile(dir_ + "/crihookd.log"); }
  size_t logCount(const std::string& text) const { return countOf(log(), text); }
  bool waitForLogCount(const std::string& text, size_t n, std::chrono::milliseconds timeout) const {
    return eventually([&] { return logCount(text) >= n; }, timeout, 20ms);
  }
  std::string criSocket() const { return dir_ + "/crihook.sock"; }
  std::string metricsSocket() const { return dir_ + "/metrics.sock"; }

  static constexpr const char* kRegistered = "NRI: registered at ";
  static constexpr const char* kSynchronized = "NRI: the runtime has ";

 private:
  std::string dir_, containerd_;
  bool nri_;
  std::unique_ptr<ChildProcess> process_;
};

class NriModeE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    CRIHOOK_E2E_SKIP_UNLESS_MACHINE_HAS_ALL();
    CRIHOOK_E2E_NRI_CONTAINERD_OR_SKIP(containerd_binary_);
    // "containerd github.com/containerd/containerd/v2 2.1.9+unknown ": the
    // version as containerd also sends it at NRI's Configure.
    const std::string line = runShellOrThrow(containerd_binary_ + " --version");
    std::istringstream words(line);
    for (int i = 0; i < 3; ++i) words >> containerd_version_;
    char tmpl[] = "/tmp/crihook-nri-mode-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    runShellOrThrow(CRIHOOK_SOURCE_DIR "/test/e2e/make-busybox-image.sh " + dir_ + "/busybox.tar " +
                    kE2eImage + " 2>&1");
    startContainerd();
    ASSERT_TRUE(waitForFile(dir_ + "/ctd/nri.sock", 10s));
    direct_ = v1::RuntimeService::NewStub(unixChannel(dir_ + "/ctd/containerd.sock"));
  }

  // Guarded: containerd and its shims die with the test (child_process.h).
  // Its plugin_request_timeout is `request_timeout`. Each start logs to its
  // own file (ctd-start-N.log).
  void startContainerd(const std::string& request_timeout = kRequestTimeout) {
    containerd_ =
        startGuardedDaemon(guard_, "env",
                           {cat("CRIHOOK_NRI_REQUEST_TIMEOUT=", request_timeout),
                            CRIHOOK_SOURCE_DIR "/test/e2e/containerd-private.sh", dir_ + "/ctd",
                            kE2eImage, dir_ + "/busybox.tar", containerd_binary_},
                           cat(dir_, "/ctd-start-", ++containerd_starts_, ".log"), 120s);
  }
  // Whether this containerd leaves a sandbox NRI refused behind
  // (nri/runtime_facts.h; containerd 2.1.9 does).
  bool leaksRefusedSandbox() const {
    return nri::refusedSandboxOf("containerd", containerd_version_) == nri::RefusedSandbox::kLeaked;
  }
  // What containerd itself holds in the CRI's namespace: its containers
  // (sandboxes' pause containers included) and running tasks, sorted, one
  // id a line; what the CRI lists no call can see otherwise.
  std::string containerdHolds() const {
    const std::string ctr = cat(std::filesystem::path(containerd_binary_).parent_path().string(),
                                "/ctr --address ", containerdSocket(), " -n k8s.io ");
    return cat("containers:\n", runShellOrThrow(ctr + "containers ls -q | sort"), "tasks:\n",
               runShellOrThrow(ctr + "tasks ls -q | sort"));
  }
  // The same as the CRI lists them: its sandboxes and containers.
  std::string criHolds(RS& stub) const {
    v1::ListPodSandboxResponse pods;
    v1::ListContainersResponse ctrs;
    EXPECT_TRUE(call(stub, &RS::ListPodSandbox, v1::ListPodSandboxRequest(), &pods).ok());
    EXPECT_TRUE(call(stub, &RS::ListContainers, v1::ListContainersRequest(), &ctrs).ok());
    std::vector<std::string> all, running;
    for (const auto& p : pods.items()) {
      all.push_back(p.id());
      if (p.state() == v1::SANDBOX_READY) running.push_back(p.id());
    }
    for (const auto& c : ctrs.containers()) {
      all.push_back(c.id());
      if (c.state() == v1::CONTAINER_RUNNING) running.push_back(c.id());
    }
    std::sort(all.begin(), all.end());
    std::sort(running.begin(), running.end());
    std::string out = "containers:\n";
    for (const auto& id : all) out += id + "\n";
    out += "tasks:\n";
    for (const auto& id : running) out += id + "\n";
    return out;
  }
  void stopContainerd() {
    terminateDaemon(containerd_, 5s);
    containerd_ = -1;
  }

  void TearDown() override {
    crihookd_.reset();  // killed first: what is left is removed without hooks
    if (direct_) {
      grpc::ClientContext ctx;
      v1::ListPodSandboxResponse pods;
      if (direct_->ListPodSandbox(&ctx, v1::ListPodSandboxRequest(), &pods).ok()) {
        for (const auto& p : pods.items()) (void)stopAndRemovePod(*direct_, p.id());
      }
    }
    if (containerd_ > 0) stopContainerd();
    guard_.reset();  // kills what containerd left (shims)
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string containerdSocket() const { return dir_ + "/ctd/containerd.sock"; }

  // make-fixtures.sh's topology trees (device_pod.h), made on first use and
  // shared by the program's tests: the hooks only read them.
  static const std::string& fixtures() {
    if (fixtures_.empty()) {
      char tmpl[] = "/tmp/crihook-nri-mode-fixtures-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp /tmp failed");
      const std::string dir = tmpl;
      makeFixtures(dir + "/trees", CRIHOOK_SOURCE_DIR);
      fixtures_ = dir + "/trees";
    }
    return fixtures_;
  }
  static void TearDownTestSuite() {
    if (fixtures_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(fixtures_).parent_path(), ec);
    fixtures_.clear();
  }

  // Writes dir/crihookd.toml for `mode` ("proxy" or "nri"): the [server],
  // [nri] and [hooks] sections (state and hook servers under `dir`), then
  // `rest`.
  void writeConfig(const std::string& dir, const std::string& mode, const std::string& rest,
                   bool koordlet_plugin = true) const {
    std::string out = cat("[server]\nmode = \"", mode, "\"\n");
    if (mode == "nri") {
      out +=
          cat("[nri]\nsocket_path = \"", dir_, "/ctd/nri.sock\"\nplugin_request_timeout = \"",
              kRequestTimeout, "\"\nkoordlet_plugin = ", koordlet_plugin ? "true" : "false", "\n");
    }
    out += cat("[hooks]\nstate_dir = \"", dir, "/state\"\nhookserver_dir = \"", dir,
               "/hookserver.d\"\n", rest);
    std::ofstream(dir + "/crihookd.toml") << out;
  }

  // A pod named `name` (uid name-uid, the node's network, logs under the
  // test's directory).
  v1::PodSandboxConfig podConfig(const std::string& name) const {
    return e2ePodConfig(name, dir_ + "/logs");
  }

  // A busybox container named `name` in `pod`, asking for `resources`,
  // created and started through `stub`; its id ("" after a failure, which is
  // recorded).
  std::string startContainer(RS& stub, const std::string& pod, const v1::PodSandboxConfig& config,
                             const std::string& name,
                             const v1::LinuxContainerResources& resources = {}) {
    v1::CreateContainerRequest create;
    create.set_pod_sandbox_id(pod);
    *create.mutable_sandbox_config() = config;
    auto* cfg = create.mutable_config();
    cfg->mutable_metadata()->set_name(name);
    if (resources.ByteSizeLong() > 0) *cfg->mutable_linux()->mutable_resources() = resources;
    cfg->mutable_image()->set_image(kE2eImage);
    cfg->add_command("/bin/sleep");
    cfg->add_args("3600");
    cfg->set_log_path(name + ".log");
    v1::CreateContainerResponse created;
    grpc::Status s = call(stub, &RS::CreateContainer, create, &created);
    EXPECT_TRUE(s.ok()) << "CreateContainer " << name << ": " << s.error_message();
    if (!s.ok()) return "";
    v1::StartContainerRequest start;
    start.set_container_id(created.container_id());
    v1::StartContainerResponse started;
    s = call(stub, &RS::StartContainer, start, &started);
    EXPECT_TRUE(s.ok()) << "StartContainer " << name << ": " << s.error_message();
    return s.ok() ? created.container_id() : "";
  }

  // What `sh -c script` prints in `container` (stdout, then stderr).
  std::string exec(RS& stub, const std::string& container, const std::string& script) {
    v1::ExecSyncRequest req;
    req.set_container_id(container);
    for (const char* a : {"sh", "-c"}) req.add_cmd(a);
    req.add_cmd(script);
    req.set_timeout(20);
    v1::ExecSyncResponse out;
    grpc::Status s = call(stub, &RS::ExecSync, req, &out);
    return s.ok() ? out.stdout() + out.stderr() : "ExecSync failed: " + s.error_message();
  }

  // The phase of the device record of `pod` in `state_dir` ("ready",
  // "cleanup-pending", "cleaned"); "gone" without one.
  static std::string phaseOf(const std::string& state_dir, const v1::PodSandboxConfig& pod) {
    const std::string file =
        cat(state_dir, "/devices/", pod.metadata().uid(), "_", pod.metadata().attempt(), ".json");
    if (!std::filesystem::exists(file)) return "gone";
    return nlohmann::json::parse(readFile(file)).at("phase").get<std::string>();
  }

  static bool waitForActions(const std::string& dir, size_t n) {
    return eventually([&] { return deviceActions(dir).size() >= n; }, 10s, 20ms);
  }

  std::string dir_;
  std::string containerd_binary_;
  std::string containerd_version_;  // "1.7.24~ds1", "2.1.9+unknown"
  int containerd_starts_ = 0;
  pid_t containerd_ = -1;
  std::unique_ptr<ChildProcess> guard_;
  std::unique_ptr<RS> direct_;
  std::unique_ptr<Crihookd> crihookd_;
  static inline std::string fixtures_;
};

// What the device pod's container saw, in one mode, and what crihookd said
// of it.
struct DeviceView {
  std::string probe;    // device_pod.h's probe
  std::string env;      // the container's environment, sorted
  std::string nodes;    // its character devices: path, major:minor, mode
  std::string cgroup;   // its cgroup's cpuset and CPU quota
  std::string explain;  // crihookctl explain, ids and paths normalised
  std::vector<std::string> actions_after_run, actions_after_remove;
};

// Shell scripts run in the container: its environment as the runtime set it
// (an exec'd process's, not one it changed), sorted, without HOSTNAME (the
// pod's, not the hooks'); every character device under /dev with its numbers
// and mode; its cgroup's cpuset and CPU quota (cgroup v1 or v2).
constexpr const char* kEnvScript =
    "tr '\\0' '\\n' < /proc/$$/environ | grep -v '^HOSTNAME=' | sort";
constexpr const char* kNodesScript =
    "find /dev -type c | sort | while read f; do stat -c '%n %t:%T %a' $f; done";
constexpr const char* kCgroupScript =
    "for f in cpuset/cpuset.cpus cpuset/cpuset.mems cpu/cpu.cfs_quota_us cpuset.cpus cpuset.mems "
    "cpu.max; do test -f /sys/fs/cgroup/$f && echo \"$f $(cat /sys/fs/cgroup/$f)\"; done";

// `text` with `from` replaced by `to` everywhere.
std::string replaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// The device pod's actions once it has come and gone: its inits, then one
// cleanup for each, in reverse order.
std::vector<std::string> pairedActions(const std::string& pod_name) {
  std::vector<std::string> out = devicePodInits(pod_name);
  for (const std::string& init : devicePodInits(pod_name) | std::views::reverse)
    out.push_back(replaceAll(init, "init ", "cleanup "));
  return out;
}

// Section `title` ("kubelet sent:") of crihookctl explain's text: its
// lines up to the blank one after them, the title's included; "" without it.
std::string sectionOf(const std::string& explain, const std::string& title) {
  const size_t from = explain.find("\n" + title + "\n");
  if (from == std::string::npos) return "";
  const size_t to = explain.find("\n\n", from + 1);
  return explain.substr(from + 1, to == std::string::npos ? std::string::npos : to - from);
}

// crihookctl explain's text with what the request looked like before and
// after the hooks (its "kubelet sent:" and "sent to the runtime:" sections)
// left out: the container and pod, each stage's hooks and decisions with
// their owners, what UpdateContainerResources keeps.
std::string withoutRequests(std::string explain) {
  for (const char* title : {"kubelet sent:", "sent to the runtime:"})
    explain = replaceAll(explain, sectionOf(explain, title), cat(title, " (left out)\n"));
  return explain;
}

// What the hooks' decisions changed in the request as crihookctl explain
// shows it: the items of "sent to the runtime:" that "kubelet sent:" lacks,
// as "+ env NCCL_IB_HCA=mlx5_6", "+ device /dev/nvidia0 <- …", "+ resources
// cpuset_cpus=1", then those it had and the runtime did not get ("- …"),
// each part sorted. An item: one env var, annotation or label, one
// resources field, one mount or device.
std::vector<std::string> netChangeOf(const std::string& explain) {
  auto items = [&](const std::string& title) {
    std::vector<std::string> out;
    std::istringstream in(sectionOf(explain, title));
    std::string line;
    std::getline(in, line);  // the title
    while (std::getline(in, line)) {
      const size_t colon = line.find(':');
      const size_t key_at = line.find_first_not_of(' ');
      if (colon == std::string::npos || key_at == std::string::npos) {
        if (!line.empty()) out.push_back(line);
        continue;
      }
      const std::string key = line.substr(key_at, colon - key_at);
      const size_t value_at = line.find_first_not_of(' ', colon + 1);
      const std::string value = value_at == std::string::npos ? "" : line.substr(value_at);
      if (value == "-") continue;
      const std::string sep = key == "resources"                                        ? " "
                              : key == "env" || key == "annotations" || key == "labels" ? ", "
                                                                                        : "";
      if (sep.empty()) {
        out.push_back(key + " " + value);
        continue;
      }
      for (size_t at = 0; at <= value.size();) {
        const size_t end = std::min(value.find(sep, at), value.size());
        out.push_back(key + " " + value.substr(at, end - at));
        at = end + sep.size();
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> before = items("kubelet sent:");
  std::vector<std::string> after = items("sent to the runtime:");
  if (after.size() == 1 && after[0].find("unchanged") != std::string::npos) after = before;
  std::vector<std::string> added, removed, out;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::back_inserter(added));
  std::set_difference(before.begin(), before.end(), after.begin(), after.end(),
                      std::back_inserter(removed));
  for (const auto& a : added) out.push_back("+ " + a);
  for (const auto& r : removed) out.push_back("- " + r);
  return out;
}

TEST_F(NriModeE2E, TheDevicePodSeesTheSameThroughTheProxyAndThroughNri) {
  std::map<std::string, DeviceView> views;
  for (const std::string mode : {"proxy", "nri"}) {
    SCOPED_TRACE("mode " + mode);
    const std::string dir = dir_ + "/" + mode;
    makeDeviceTree(dir);
    writeConfig(dir, mode, deviceHooksConfig(dir, fixtures(), kLifecycleTimeout));
    crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), mode == "nri");
    ASSERT_TRUE(crihookd_->start());
    // kubelet's calls: to crihookd in proxy mode, to containerd in NRI mode.
    auto stub = mode == "nri" ? v1::RuntimeService::NewStub(unixChannel(containerdSocket()))
                              : v1::RuntimeService::NewStub(unixChannel(crihookd_->criSocket()));
    DeviceView& view = views[mode];

    v1::RunPodSandboxRequest run;
    *run.mutable_config() = podConfig("e2e-dev");
    allocateDevicePod(*run.mutable_config());
    v1::RunPodSandboxResponse ran;
    grpc::Status s = call(*stub, &RS::RunPodSandbox, run, &ran);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
    // The devices are initialised when RunPodSandbox returns.
    view.actions_after_run = deviceActions(dir);
    const std::string ctr = startContainer(*stub, ran.pod_sandbox_id(), run.config(), "box");
    ASSERT_FALSE(ctr.empty()) << crihookd_->log();

    view.probe = exec(*stub, ctr, kDevicePodProbe);
    view.env = exec(*stub, ctr, kEnvScript);
    view.nodes = exec(*stub, ctr, kNodesScript);
    view.cgroup = exec(*stub, ctr, kCgroupScript);
    std::ostringstream text, err;
    EXPECT_EQ(ctl::run({"explain", "--state-dir", dir + "/state", ctr}, text, err), 0) << err.str();
    // Ids, the mode's directory and the times are each run's own.
    std::string explain = replaceAll(text.str(), ctr, "CONTAINER");
    explain = replaceAll(explain, ran.pod_sandbox_id(), "SANDBOX");
    explain = replaceAll(explain, dir, "DIR");
    view.explain =
        std::regex_replace(explain, std::regex(R"( at \d{4}-\d\d-\d\dT[\d:]+Z)"), " at TIME");

    if (mode == "nri") {
      // Everything the hooks decided for this pod is carried by NRI.
      EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_not_applied"), 0)
          << crihookd_->log();
    }

    s = stopAndRemovePod(*stub, ran.pod_sandbox_id());
    EXPECT_TRUE(s.ok()) << s.error_message();
    // The devices are cleaned up when RemovePodSandbox returns.
    view.actions_after_remove = deviceActions(dir);
    EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
    crihookd_.reset();
  }
  const DeviceView& proxy = views["proxy"];
  const DeviceView& nri = views["nri"];

  // Each mode on its own: what the e2e suite's device test expects.
  for (const auto* v : {&proxy, &nri}) {
    SCOPED_TRACE(v == &proxy ? "proxy mode" : "NRI mode");
    EXPECT_EQ(v->probe, devicePodProbeExpected());
    EXPECT_THAT(v->actions_after_run, ElementsAreArray(devicePodInits("e2e-dev")));
    EXPECT_THAT(v->actions_after_remove, ElementsAreArray(pairedActions("e2e-dev")));
    EXPECT_THAT(v->env, HasSubstr("NVIDIA_VISIBLE_DEVICES="));
    EXPECT_THAT(v->nodes, HasSubstr("/dev/infiniband/uverbs6 1:5 666\n"));
    EXPECT_THAT(v->cgroup, HasSubstr("cpuset.cpus " + devicePodCpu() + "\n"));
    EXPECT_THAT(v->explain,
                HasSubstr("PreCreateContainer at TIME, hooks run: gpu, rdma, cpuset\n"));
  }
  // And the same in both: the container's environment, device nodes and
  // cgroup (the probe's Cpus_allowed_list and Mems_allowed_list were above).
  EXPECT_EQ(proxy.env, nri.env);
  EXPECT_EQ(proxy.nodes, nri.nodes);
  EXPECT_EQ(proxy.cgroup, nri.cgroup);
  // crihookctl explain: the same container and pod, hooks, decisions and
  // owners, and kept resources, word for word.
  EXPECT_EQ(withoutRequests(proxy.explain), withoutRequests(nri.explain))
      << "proxy mode:\n"
      << proxy.explain << "\nNRI mode:\n"
      << nri.explain;
  // What legitimately differs is the request the hooks were given, in both
  // "kubelet sent:" and "sent to the runtime:". In proxy mode it is
  // kubelet's CreateContainer request (here: no env, no mounts, no
  // annotations). In NRI mode there is no kubelet request to see: crihook
  // gets the container as containerd presents it at NRI's CreateContainer,
  // the OCI spec already filled in, so it also holds the image's env
  // (PATH=/bin), HOSTNAME, containerd's default mounts (/proc, /dev,
  // /dev/pts, /dev/mqueue, /sys, /sys/fs/cgroup, the sandbox's /etc/hostname,
  // /etc/hosts, /etc/resolv.conf and /dev/shm) and its own annotations
  // (io.kubernetes.cri.*) and label (io.cri-containerd.kind); "sent to the
  // runtime:" is that plus the hooks' changes. The container ends up the
  // same (above): containerd adds the same things in proxy mode, after
  // crihook. So the two sections are compared as what the hooks changed in
  // them, which must be the same, and non-empty.
  const std::vector<std::string> changed = netChangeOf(proxy.explain);
  EXPECT_EQ(changed, netChangeOf(nri.explain)) << "proxy mode:\n"
                                               << proxy.explain << "\nNRI mode:\n"
                                               << nri.explain;
  EXPECT_THAT(changed, ::testing::Contains("+ env NCCL_IB_HCA=mlx5_6"));
  EXPECT_THAT(changed, ::testing::Contains("+ resources cpuset_cpus=" + devicePodCpu()));
}

// crihookd in NRI mode is killed (SIGKILL) after pod a's RunPodSandbox
// initialised its devices and before its container is made; pod c, whose
// devices were initialised too, is removed at containerd meanwhile. Started
// again, crihookd registers anew, cleans up after pod c (the reconcile pass
// its Synchronize brings), and gives pod a's container its devices from the
// record it kept.
TEST_F(NriModeE2E, KilledAndRestartedItKeepsThePodsItSawAndCleansUpThoseGone) {
  const std::string dir = dir_ + "/nri";
  makeDeviceTree(dir);
  writeConfig(dir, "nri", deviceHooksConfig(dir, fixtures(), kLifecycleTimeout));
  crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
  ASSERT_TRUE(crihookd_->start());
  RS& kubelet = *direct_;

  v1::RunPodSandboxRequest run_a, run_c;
  *run_a.mutable_config() = podConfig("e2e-nri-a");
  allocateDevicePod(*run_a.mutable_config());
  *run_c.mutable_config() = podConfig("e2e-nri-c");
  (*run_c.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":2}]})";
  v1::RunPodSandboxResponse ra, rc;
  grpc::Status s = call(kubelet, &RS::RunPodSandbox, run_a, &ra);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
  s = call(kubelet, &RS::RunPodSandbox, run_c, &rc);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
  std::vector<std::string> expected = devicePodInits("e2e-nri-a");
  const std::string init_c = cat("init gpu 2 ", kFixtureGpu2, " e2e-nri-c");
  expected.push_back(init_c);
  EXPECT_THAT(deviceActions(dir), ElementsAreArray(expected));
  EXPECT_EQ(phaseOf(dir + "/state", run_a.config()), "ready");
  EXPECT_EQ(phaseOf(dir + "/state", run_c.config()), "ready");
  // The pod records are written by the state store's writer thread moments
  // after the answer (no fsync, docs/architecture.md); the device records
  // above before it. The kill comes once both pods' records are on disk:
  // what this test restarts from, not how fast that thread is on a loaded
  // machine (a kill before it loses pod c's record, and with it the
  // "went away" line below).
  for (const std::string& id : {ra.pod_sandbox_id(), rc.pod_sandbox_id()}) {
    const std::string record = cat(dir, "/state/pods/", id, ".json");
    ASSERT_TRUE(waitForFile(record, 10s)) << record << "\n" << crihookd_->log();
  }

  crihookd_->kill();
  ASSERT_TRUE(stopAndRemovePod(kubelet, rc.pod_sandbox_id()).ok());
  // Pod d is made meanwhile: containerd makes it without crihookd.
  v1::RunPodSandboxRequest run_d;
  *run_d.mutable_config() = podConfig("e2e-nri-d");
  v1::RunPodSandboxResponse rd;
  s = call(kubelet, &RS::RunPodSandbox, run_d, &rd);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const size_t registered = crihookd_->logCount(Crihookd::kRegistered);
  ASSERT_TRUE(crihookd_->start());
  EXPECT_EQ(crihookd_->logCount(Crihookd::kRegistered), registered + 1);
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registered"), 1);
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registrations"), 1);
  // Pod a was seen made (its record outlived the kill): not "unhooked";
  // pod d is, and named (counted at the end of the Synchronize the start
  // waited for the beginning of).
  EXPECT_TRUE(eventually(
      [&] { return metricSample(crihookd_->metricsSocket(), "crihook_nri_unhooked_pods") == 1; },
      10s, 20ms))
      << crihookd_->log();
  EXPECT_THAT(
      crihookd_->log(),
      HasSubstr(cat("NRI: pod=default/e2e-nri-d sandbox=", rd.pod_sandbox_id().substr(0, 12),
                    " container=-: the runtime has this pod, but crihookd has no record "
                    "of it")));
  EXPECT_EQ(crihookd_->logCount("the runtime has this pod"), 1u) << crihookd_->log();

  // Pod c's cleanup is owed and runs; pod a's record stays ready.
  eventually([&] { return phaseOf(dir + "/state", run_c.config()) == "gone"; }, 10s, 20ms);
  EXPECT_EQ(phaseOf(dir + "/state", run_c.config()), "gone") << crihookd_->log();
  EXPECT_EQ(phaseOf(dir + "/state", run_a.config()), "ready");
  expected.push_back(cat("cleanup gpu 2 ", kFixtureGpu2, " e2e-nri-c"));
  EXPECT_THAT(deviceActions(dir), ElementsAreArray(expected)) << crihookd_->log();
  EXPECT_THAT(
      crihookd_->log(),
      HasSubstr("NRI: 1 pods and 0 containers went away while crihookd was not registered"));
  EXPECT_THAT(crihookd_->log(), HasSubstr("its sandbox was removed while crihookd was down"));

  // Pod a's container, made after the restart, has what the pod was given.
  const std::string ctr = startContainer(kubelet, ra.pod_sandbox_id(), run_a.config(), "box");
  ASSERT_FALSE(ctr.empty()) << crihookd_->log();
  EXPECT_EQ(exec(kubelet, ctr, kDevicePodProbe), devicePodProbeExpected()) << crihookd_->log();

  // Removed: its devices are cleaned up once, in reverse order.
  EXPECT_TRUE(stopAndRemovePod(kubelet, ra.pod_sandbox_id()).ok());
  for (const std::string& init : devicePodInits("e2e-nri-a") | std::views::reverse)
    expected.push_back(replaceAll(init, "init ", "cleanup "));
  EXPECT_TRUE(waitForActions(dir, expected.size()));
  EXPECT_THAT(deviceActions(dir), ElementsAreArray(expected)) << crihookd_->log();
  EXPECT_EQ(phaseOf(dir + "/state", run_a.config()), "gone");
  EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
}

// Koordinator's hook servers in NRI mode: with nri.koordlet_plugin = false
// (koordlet runs no NRI plugin of its own) crihookd calls them as in proxy
// mode, and their env reaches the container; with true (koordlet acts
// through its own plugin) crihookd leaves them alone.
TEST_F(NriModeE2E, KoordinatorHookServersAreCalledOnlyWithoutKoordletsOwnPlugin) {
  const std::string dir = dir_ + "/koordlet";
  std::filesystem::create_directories(dir + "/hookserver.d");
  KoordServer koordlet(dir + "/koordlet.sock");
  koordlet.on_container = [](const ::runtime::v1alpha1::ContainerResourceHookRequest&,
                             ::runtime::v1alpha1::ContainerResourceHookResponse& resp) {
    (*resp.mutable_container_envs())["KOORD_NRI"] = "from-koordlet";
  };
  koordlet.start();
  std::ofstream(dir + "/hookserver.d/koordlet.json")
      << R"({"remote-endpoint": ")" << dir << R"(/koordlet.sock", "failure-policy": "Fail",
            "runtime-hooks": ["PreCreateContainer"]})";

  for (const bool koordlet_plugin : {false, true}) {
    SCOPED_TRACE(cat("nri.koordlet_plugin = ", koordlet_plugin));
    writeConfig(dir, "nri", "", koordlet_plugin);
    crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
    ASSERT_TRUE(crihookd_->start());
    const int calls = koordlet.calls.load();
    const std::string name = koordlet_plugin ? "e2e-koord-on" : "e2e-koord-off";
    v1::RunPodSandboxRequest run;
    *run.mutable_config() = podConfig(name);
    v1::RunPodSandboxResponse ran;
    grpc::Status s = call(*direct_, &RS::RunPodSandbox, run, &ran);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
    const std::string ctr = startContainer(*direct_, ran.pod_sandbox_id(), run.config(), "box");
    ASSERT_FALSE(ctr.empty()) << crihookd_->log();
    EXPECT_EQ(exec(*direct_, ctr, "echo ${KOORD_NRI-unset}"),
              koordlet_plugin ? "unset\n" : "from-koordlet\n")
        << crihookd_->log();
    EXPECT_EQ(koordlet.calls.load() - calls, koordlet_plugin ? 0 : 1);
    if (koordlet_plugin) {
      EXPECT_THAT(crihookd_->log(), HasSubstr("Koordinator's hook servers are not called"));
    }
    EXPECT_TRUE(stopAndRemovePod(*direct_, ran.pod_sandbox_id()).ok());
    EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
    crihookd_.reset();
  }
}

// containerd restarted under a running crihookd: the NRI connection ends,
// crihookd is not ready meanwhile, reconnects on its own (backoff from
// 0.5 s), is synchronised again, and the next pod gets its hooks.
TEST_F(NriModeE2E, ReconnectsWhenContainerdRestartsAndHooksTheNextPod) {
  const std::string dir = dir_ + "/restart";
  std::filesystem::create_directories(dir + "/hookserver.d");
  writeConfig(dir, "nri",
              "[[hook]]\nname = \"site\"\nbuiltin = \"static\"\n[hook.settings.adjustment]\n"
              "env = [{key = \"SITE_ENV\", value = \"from-crihook\"}]\n");
  crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
  ASSERT_TRUE(crihookd_->start());
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registrations"), 1);
  const size_t synced = crihookd_->logCount(Crihookd::kSynchronized);

  stopContainerd();
  eventually(
      [&] { return metricSample(crihookd_->metricsSocket(), "crihook_nri_registered") == 0; }, 5s,
      20ms);
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registered"), 0);
  EXPECT_THAT(crihookd_->log(), HasSubstr("NRI connection to " + dir_ + "/ctd/nri.sock ended"));
  startContainerd();
  // The backoff doubles from 0.5 s while containerd is down (a second or
  // two here): within 30 s it is back.
  ASSERT_TRUE(crihookd_->waitForLogCount(Crihookd::kSynchronized, synced + 1, 30s))
      << crihookd_->log();
  std::this_thread::sleep_for(200ms);  // containerd adds the plugin after its answer
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registered"), 1);
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registrations"), 2);

  direct_ = v1::RuntimeService::NewStub(unixChannel(containerdSocket()));
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-after-restart");
  v1::RunPodSandboxResponse ran;
  grpc::Status st = call(*direct_, &RS::RunPodSandbox, run, &ran);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string ctr = startContainer(*direct_, ran.pod_sandbox_id(), run.config(), "box");
  ASSERT_FALSE(ctr.empty()) << crihookd_->log();
  EXPECT_EQ(exec(*direct_, ctr, "echo $SITE_ENV"), "from-crihook\n") << crihookd_->log();
  EXPECT_TRUE(stopAndRemovePod(*direct_, ran.pod_sandbox_id()).ok());
  EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
}

// The cpuset hook's share pools in NRI mode (containerd_e2e_test's
// NumaOnlyPodMakesRoomForAPinnedPodAndWidensWhenItGoes, in proxy mode there),
// over a fixture topology whose NUMA node 0 is this machine's CPUs 0 and 1
// (node 1, CPUs 2-3, exists only in the fixture): a NUMA-only pod on node 0
// makes room for a pod pinned to CPU 1 while it runs, and gets it back once
// it is gone; the pinned one runs without a CFS quota although kubelet asked
// for one. The pools' thread moves the NUMA-only container with
// UpdateContainerResources at containerd, which sends crihookd an NRI
// UpdateContainer for it while crihookd's hooks run from NRI's events:
// crihookd's answer must keep the move, in time (a late one drops the plugin).
TEST_F(NriModeE2E, NumaOnlyPodMakesRoomForAPinnedPodAndWidensWhenItGoes) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs CPUs 0 and 1";
  const std::string dir = dir_ + "/cpuset";
  writeTwoNodeCpuFixture(dir + "/fixture");
  writeConfig(dir, "nri",
              cat("[topology]\nroot = \"", dir,
                  "/fixture\"\n[[hook]]\nname = \"cpuset\"\nbuiltin = \"cpuset\"\n"));
  crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
  ASSERT_TRUE(crihookd_->start());
  RS& kubelet = *direct_;

  // A pod with `resource_status` and a started container asking for half a
  // CPU; its sandbox's and its container's ids.
  auto startPod = [&](const std::string& name, const std::string& resource_status) {
    v1::RunPodSandboxRequest run;
    *run.mutable_config() = podConfig(name);
    (*run.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/resource-status"] =
        resource_status;
    v1::RunPodSandboxResponse pod;
    grpc::Status s = call(kubelet, &RS::RunPodSandbox, run, &pod);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
    v1::LinuxContainerResources half;
    half.set_cpu_period(100000);
    half.set_cpu_quota(50000);
    return std::pair{pod.pod_sandbox_id(),
                     startContainer(kubelet, pod.pod_sandbox_id(), run.config(), name, half)};
  };
  // What a process started in the container now is allowed, and its quota.
  auto inside = [&](const std::string& ctr) { return exec(kubelet, ctr, kCpusAndQuotaProbe); };
  auto cpusBecome = [&](const std::string& ctr, const std::string& cpus) {
    return eventually([&] { return inside(ctr).starts_with(cpus + "\n"); }, 10s, 100ms);
  };

  const auto [ls_pod, ls] =
      startPod("e2e-cpu-ls", R"({"numaNodeResources":[{"node":0,"resources":{"cpu":"1"}}]})");
  ASSERT_FALSE(ls.empty()) << crihookd_->log();
  EXPECT_EQ(inside(ls), "0-1\n50000\n") << crihookd_->log();

  const auto [lsr_pod, lsr] = startPod("e2e-cpu-lsr", R"({"cpuset":"1"})");
  ASSERT_FALSE(lsr.empty()) << crihookd_->log();
  const std::string pinned = inside(lsr);
  EXPECT_TRUE(pinned == "1\n-1\n" || pinned == "1\nmax\n") << pinned;
  EXPECT_TRUE(cpusBecome(ls, "0")) << inside(ls) << crihookd_->log();
  EXPECT_EQ(inside(ls), "0\n50000\n");  // moved, its quota as it was

  // The pinned pod goes: its container stops, then the pod is removed.
  v1::StopContainerRequest stop;
  stop.set_container_id(lsr);
  stop.set_timeout(1);
  v1::StopContainerResponse stopped;
  EXPECT_TRUE(call(kubelet, &RS::StopContainer, stop, &stopped).ok());
  EXPECT_TRUE(cpusBecome(ls, "0-1")) << inside(ls) << crihookd_->log();
  EXPECT_EQ(inside(ls), "0-1\n50000\n");
  // Moved once each way: no move of the pools' failed (a refused or late NRI
  // answer) and none was undone and made again.
  const std::string narrowed = "moved to CPUs 0 (mems 0)", widened = "moved to CPUs 0-1 (mems 0)";
  EXPECT_TRUE(crihookd_->waitForLogCount(widened, 1, 5s)) << crihookd_->log();
  EXPECT_EQ(crihookd_->logCount(narrowed), 1) << crihookd_->log();
  EXPECT_EQ(crihookd_->logCount(widened), 1) << crihookd_->log();
  EXPECT_EQ(crihookd_->logCount("cannot move to CPUs"), 0) << crihookd_->log();
  for (const std::string* pod : {&lsr_pod, &ls_pod})
    EXPECT_TRUE(stopAndRemovePod(kubelet, *pod).ok());

  // crihookd answered every NRI event in time (a late answer drops the
  // plugin, which registers again) and nothing it decided went unapplied.
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registrations"), 1)
      << crihookd_->log();
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_not_applied"), 0)
      << crihookd_->log();
  EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
}

// A pod whose device init fails is refused, and leaves nothing behind in
// containerd: on 1.7 (which removes a sandbox NRI refused) RunPodSandbox
// fails; on 2.1 (which would keep its pause task running unlisted, and then
// fail its own restart once the pod's retry reuses the name: containerd
// #13355) the sandbox is let through and its container refused with the
// init's failure, and kubelet removes it as any pod's. The retry (the init
// fixed) runs with its devices; containerd, restarted, comes back with
// exactly that pod, and crihookd registers again.
TEST_F(NriModeE2E, ARefusedPodLeavesNoSandboxBehindAndContainerdRestartsCleanly) {
  const std::string dir = dir_ + "/refused";
  makeDeviceTree(dir);
  // act.sh fails every init while dir/fail-init exists.
  std::ofstream(dir + "/act.sh") << "#!/bin/sh\necho \"$*\" >> " << dir << "/actions.log\n"
                                 << "case $1 in init) test -e " << dir
                                 << "/fail-init && exit 1;; esac\nexit 0\n";
  std::ofstream(dir + "/fail-init") << "";
  writeConfig(dir, "nri", deviceHooksConfig(dir, fixtures(), kLifecycleTimeout));
  crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
  ASSERT_TRUE(crihookd_->start());
  RS& kubelet = *direct_;
  const std::string before = containerdHolds();
  if (leaksRefusedSandbox()) {
    EXPECT_THAT(crihookd_->log(),
                HasSubstr(cat("containerd ", containerd_version_,
                              " leaves the sandbox of a pod an NRI plugin refuses")));
  } else {
    EXPECT_THAT(crihookd_->log(), Not(HasSubstr("leaves the sandbox of a pod")));
  }

  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-refused");
  allocateDevicePod(*run.mutable_config());
  v1::RunPodSandboxResponse ran;
  grpc::Status s = call(kubelet, &RS::RunPodSandbox, run, &ran);
  if (!leaksRefusedSandbox()) {
    ASSERT_FALSE(s.ok()) << crihookd_->log();
    EXPECT_THAT(s.error_message(), HasSubstr("devices")) << s.error_message();
  } else {
    // kubelet's sync: the sandbox, then its container, refused; the pod is
    // then stopped and removed (kubelet does so when the pod goes, or
    // makes a new sandbox once this one is not ready).
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
    v1::CreateContainerRequest create;
    create.set_pod_sandbox_id(ran.pod_sandbox_id());
    *create.mutable_sandbox_config() = run.config();
    create.mutable_config()->mutable_metadata()->set_name("box");
    create.mutable_config()->mutable_image()->set_image(kE2eImage);
    create.mutable_config()->add_command("/bin/sleep");
    v1::CreateContainerResponse created;
    s = call(kubelet, &RS::CreateContainer, create, &created);
    ASSERT_FALSE(s.ok()) << crihookd_->log();
    EXPECT_THAT(s.error_message(), HasSubstr("crihook refused this pod at RunPodSandbox"));
    EXPECT_THAT(s.error_message(), HasSubstr("devices"));
    EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_pods_refused_at_containers"),
              1);
    EXPECT_TRUE(stopAndRemovePod(kubelet, ran.pod_sandbox_id()).ok());
  }
  // Nothing of the refused pod is left: containerd holds what it held.
  EXPECT_EQ(containerdHolds(), before) << crihookd_->log();
  EXPECT_EQ(criHolds(kubelet), before);

  // The retry, the init fixed: it runs. kubelet lists no sandbox of the
  // pod now, so it retries with attempt 0 again: the same sandbox name.
  std::filesystem::remove(dir + "/fail-init");
  s = call(kubelet, &RS::RunPodSandbox, run, &ran);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << crihookd_->log();
  const std::string box = startContainer(kubelet, ran.pod_sandbox_id(), run.config(), "box");
  ASSERT_FALSE(box.empty()) << crihookd_->log();
  EXPECT_EQ(exec(kubelet, box, kDevicePodProbe), devicePodProbeExpected()) << crihookd_->log();
  const std::string holds = containerdHolds();
  EXPECT_EQ(criHolds(kubelet), holds);

  // containerd restarted: it starts (a leaked sandbox of the same name
  // would stop it: "failed to recover state"), with the pod's sandbox and
  // container as they were. (Its tasks do not outlive the restart here: the
  // test's guard of the first containerd takes its shims with it.)
  const auto containersOf = [](const std::string& holds) {
    return holds.substr(0, holds.find("tasks:"));
  };
  const size_t synced = crihookd_->logCount(Crihookd::kSynchronized);
  stopContainerd();
  ASSERT_NO_THROW(startContainerd()) << readFile(dir_ + "/ctd/containerd.log");
  direct_ = v1::RuntimeService::NewStub(unixChannel(containerdSocket()));
  EXPECT_EQ(containersOf(containerdHolds()), containersOf(holds));
  EXPECT_EQ(containersOf(criHolds(*direct_)), containersOf(holds));
  EXPECT_THAT(readFile(dir_ + "/ctd/containerd.log"), Not(HasSubstr("failed to recover state")));
  ASSERT_TRUE(crihookd_->waitForLogCount(Crihookd::kSynchronized, synced + 1, 30s))
      << crihookd_->log();
  EXPECT_TRUE(stopAndRemovePod(*direct_, ran.pod_sandbox_id()).ok());
  EXPECT_EQ(containerdHolds(), before);
  EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
}

// The issue's case: crihookd told 12 s, containerd at 2 s, a 3 s device
// init. The config's figure passes crihookd's start-up check; a containerd
// 2.x sends its own at NRI's Configure, and crihookd refuses to register
// under it, naming the event, the hook and the figure, and stays not
// ready. containerd 1.7 (NRI 0.6.1) sends none: there the config's stands,
// and crihookd says so as it registers.
TEST_F(NriModeE2E, TheBudgetIsCheckedAgainstTheTimeoutTheRuntimeAnnounces) {
  stopContainerd();
  startContainerd("2s");
  const std::string dir = dir_ + "/budget";
  std::filesystem::create_directories(dir + "/hookserver.d");
  makeDeviceTree(dir);
  writeConfig(dir, "nri", deviceHooksConfig(dir, fixtures(), "3s"));
  crihookd_ = std::make_unique<Crihookd>(dir, containerdSocket(), true);
  if (!e2eContainerd2()) {
    ASSERT_TRUE(crihookd_->start());
    EXPECT_THAT(crihookd_->log(), HasSubstr("its plugin_request_timeout not sent (NRI < 0.7): "
                                            "nri.plugin_request_timeout = 12s is taken"));
    EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registered"), 1);
    EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
    return;
  }
  const std::string refused =
      "crihookd refuses the registration: NRI event RunPodSandbox runs "
      "hooks for up to 6s";
  crihookd_->launch();
  ASSERT_TRUE(crihookd_->waitForLogCount(refused, 1, 10s)) << crihookd_->log();
  EXPECT_THAT(crihookd_->log(), HasSubstr("the runtime's own, sent at NRI Configure: 2s"));
  EXPECT_THAT(crihookd_->log(), HasSubstr("to at least 6100ms"));
  EXPECT_THAT(crihookd_->log(), HasSubstr("plugin_request_timeout is 2s, "
                                          "nri.plugin_request_timeout says 12s"));
  EXPECT_EQ(metricSample(crihookd_->metricsSocket(), "crihook_nri_registered"), 0);
  EXPECT_EQ(crihookd_->logCount(Crihookd::kSynchronized), 0u);
  // containerd, told why, dropped the plugin.
  EXPECT_THAT(readFile(dir_ + "/ctd/containerd.log"),
              HasSubstr("crihookd refuses the registration"));
  EXPECT_EQ(crihookd_->stop(), 0) << crihookd_->log();
}

}  // namespace
}  // namespace crihook::testing
