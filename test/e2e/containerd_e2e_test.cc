// End to end: the real containerd and runc from Debian behind the real
// crihookd binary. A whole pod lifecycle goes through crihookd and every
// answer is compared with what containerd gives directly.
//
// Needs root, containerd, runc and busybox-static (scripts/install-deps.sh
// installs them). Without them the suite is skipped, unless
// CRIHOOK_E2E_REQUIRED is truthy (set by scripts/test.sh when the machine
// has them), where it fails.

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "cri-api/koordinator_runtime_v1alpha1.grpc.pb.h"
#include "cri-api/runtime_v1.grpc.pb.h"
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
using google::protobuf::util::MessageDifferencer;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A Koordinator-protocol hook server, as koordlet is one: it refuses
// containers of pods annotated crihook.test/reject.
class RefusingHookServer final : public ::runtime::v1alpha1::RuntimeHookService::Service {
 public:
  grpc::Status PreCreateContainerHook(
      grpc::ServerContext*, const ::runtime::v1alpha1::ContainerResourceHookRequest* req,
      ::runtime::v1alpha1::ContainerResourceHookResponse*) override {
    if (req->pod_annotations().count("crihook.test/reject"))
      return grpc::Status(grpc::StatusCode::INTERNAL, "the e2e hook server refuses this pod");
    return grpc::Status::OK;
  }
};

// crihookd's hooks in the e2e run: a built-in hook adding an env var, a bind
// mount and a device node to pods annotated crihook.test/hooks=on, and the
// refusing Koordinator server registered with failure policy Fail.
std::string writeHookConfig(const std::string& dir) {
  std::filesystem::create_directories(dir + "/hostdata");
  std::filesystem::create_directories(dir + "/hookserver.d");
  std::filesystem::create_directories(dir + "/dev");
  std::ofstream(dir + "/hostdata/hello") << "hello from the host\n";
  runShellOrThrow("mknod -m 0666 " + dir + "/dev/zero0 c 1 5");  // the major and minor of /dev/zero
  std::ofstream(dir + "/hookserver.d/refuser.json")
      << R"({"remote-endpoint": ")" << dir << R"(/refuser.sock", "failure-policy": "Fail",
            "runtime-hooks": ["PreCreateContainer"]})";
  std::ofstream(dir + "/crihookd.toml") << R"(
[hooks]
state_dir = ")" << dir << R"(/state"
hookserver_dir = ")" << dir << R"(/hookserver.d"

[[hook]]
name = "e2e-static"
builtin = "static"
[hook.settings]
pod_annotations = { "crihook.test/hooks" = "on" }
[hook.settings.adjustment]
env = [{ key = "CRIHOOK_E2E", value = "from-a-hook" }]
mounts = [{ container_path = "/crihook-data", host_path = ")"
                                        << dir << R"(/hostdata", readonly = true }]
devices = [{ container_path = "/dev/crihook-zero", host_path = ")"
                                        << dir << R"(/dev/zero0", permissions = "rw" }]
)";
  return dir + "/crihookd.toml";
}

struct Env {
  std::string dir;
  std::unique_ptr<RefusingHookServer> refuser_service;
  std::unique_ptr<grpc::Server> refuser;
  pid_t containerd = -1;
  std::unique_ptr<ChildProcess> containerd_guard;  // containerd-private.sh's
  std::unique_ptr<ChildProcess> crihookd;
  std::shared_ptr<grpc::Channel> direct, proxied;
};
Env* env = nullptr;

class ContainerdE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string missing = e2eMissing();  // e2e_env.h
    if (!missing.empty()) {
      skip_reason_ = "needs" + missing;
      if (e2eRequired()) fatal_ = "CRIHOOK_E2E_REQUIRED is set but this machine lacks:" + missing;
      return;
    }
    env = new Env;
    char tmpl[] = "/tmp/crihook-e2e-XXXXXX";
    env->dir = ::mkdtemp(tmpl);
    const std::string scripts = CRIHOOK_SOURCE_DIR "/test/e2e/";
    std::string why;
    const std::string binary = e2eProxyContainerd(CRIHOOK_SOURCE_DIR, &why);
    if (e2eContainerd2() && binary.empty()) {
      skip_reason_ = "containerd 2.x could not be fetched (deb.debian.org unreachable?)";
      if (e2eRequired()) fatal_ = why;
      return;
    }
    try {
      runShellOrThrow(scripts + "make-busybox-image.sh " + env->dir + "/busybox.tar " + kE2eImage +
                      " 2>&1");
      // Guarded: containerd and its shims die with the test (child_process.h).
      std::vector<std::string> args = {env->dir + "/ctd", kE2eImage, env->dir + "/busybox.tar"};
      if (!binary.empty()) args.push_back(binary);
      env->containerd = startGuardedDaemon(env->containerd_guard, scripts + "containerd-private.sh",
                                           args, env->dir + "/ctd-start.log", 120s);
    } catch (const std::exception& e) {
      fatal_ = e.what();
      return;
    }
    std::string config;
    try {
      config = writeHookConfig(env->dir);
    } catch (const std::exception& e) {
      fatal_ = e.what();
      return;
    }
    env->refuser_service = std::make_unique<RefusingHookServer>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + env->dir + "/refuser.sock",
                             grpc::InsecureServerCredentials());
    builder.RegisterService(env->refuser_service.get());
    env->refuser = builder.BuildAndStart();
    env->crihookd = std::make_unique<ChildProcess>(
        CRIHOOKD_BINARY,
        std::vector<std::string>{"--config", config, "--listen", env->dir + "/crihook.sock",
                                 "--backend", "unix://" + env->dir + "/ctd/containerd.sock",
                                 "--log-level", "info"},
        env->dir + "/crihookd.log");
    if (!waitForFile(env->dir + "/crihook.sock", 10s))
      fatal_ = "crihookd did not start: " + readFile(env->dir + "/crihookd.log");
    env->direct = unixChannel(env->dir + "/ctd/containerd.sock");
    env->proxied = unixChannel(env->dir + "/crihook.sock");
  }

  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (env->direct) {
      // Leave nothing running: remove whatever pods a failed test left.
      auto stub = v1::RuntimeService::NewStub(env->direct);
      grpc::ClientContext ctx;
      v1::ListPodSandboxResponse pods;
      if (stub->ListPodSandbox(&ctx, v1::ListPodSandboxRequest(), &pods).ok()) {
        for (const auto& p : pods.items()) (void)stopAndRemovePod(*stub, p.id());
      }
    }
    if (env->crihookd) {
      env->crihookd->signal(SIGTERM);
      env->crihookd->wait(10s);
    }
    if (env->refuser) env->refuser->Shutdown(std::chrono::system_clock::now());
    if (env->containerd > 0) terminateDaemon(env->containerd, 5s);
    env->containerd_guard.reset();  // kills what containerd left (shims)
    std::error_code ec;
    std::filesystem::remove_all(env->dir, ec);
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    if (!fatal_.empty()) FAIL() << fatal_;
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static std::unique_ptr<v1::RuntimeService::Stub> runtime(
      const std::shared_ptr<grpc::Channel>& ch) {
    return v1::RuntimeService::NewStub(ch);
  }
  static std::unique_ptr<v1::ImageService::Stub> images(const std::shared_ptr<grpc::Channel>& ch) {
    return v1::ImageService::NewStub(ch);
  }

  // Calls `method` on both endpoints and expects equal answers.
  template <typename Stub, typename Req, typename Resp>
  static Resp same(std::unique_ptr<Stub> (*make)(const std::shared_ptr<grpc::Channel>&),
                   grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                   const Req& req) {
    Resp direct, proxied;
    grpc::ClientContext c1, c2;
    c1.set_deadline(std::chrono::system_clock::now() + 30s);
    c2.set_deadline(std::chrono::system_clock::now() + 30s);
    grpc::Status s1 = (make(env->direct).get()->*method)(&c1, req, &direct);
    grpc::Status s2 = (make(env->proxied).get()->*method)(&c2, req, &proxied);
    EXPECT_EQ(s1.error_code(), s2.error_code())
        << s1.error_message() << " vs " << s2.error_message();
    EXPECT_EQ(s1.error_message(), s2.error_message());
    std::string diff;
    MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(direct, proxied)) << req.GetTypeName() << ": " << diff;
    return proxied;
  }

  template <typename Req, typename Resp>
  static Resp viaProxy(grpc::Status (v1::RuntimeService::Stub::*method)(grpc::ClientContext*,
                                                                        const Req&, Resp*),
                       const Req& req) {
    Resp resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    grpc::Status s = (runtime(env->proxied).get()->*method)(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << req.GetTypeName() << ": " << s.error_message();
    return resp;
  }

  static inline std::string skip_reason_;
  static inline std::string fatal_;
};

v1::PodSandboxConfig podConfig(const std::string& name) {
  v1::PodSandboxConfig c = e2ePodConfig(name, env->dir + "/logs");
  (*c.mutable_annotations())["crihook.test/e2e"] = "true";
  return c;
}

// ExecSync of `sh -c script` in `container`.
v1::ExecSyncRequest shell(const std::string& container, const std::string& script) {
  v1::ExecSyncRequest exec;
  exec.set_container_id(container);
  exec.add_cmd("sh");
  exec.add_cmd("-c");
  exec.add_cmd(script);
  exec.set_timeout(20);
  return exec;
}

v1::CreateContainerRequest boxRequest(const std::string& pod, const v1::PodSandboxConfig& config,
                                      const std::string& name) {
  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id(pod);
  *create.mutable_sandbox_config() = config;
  auto* cfg = create.mutable_config();
  cfg->mutable_metadata()->set_name(name);
  cfg->mutable_image()->set_image(kE2eImage);
  cfg->add_command("/bin/sleep");
  cfg->add_args("3600");
  cfg->set_log_path(name + ".log");
  return create;
}

TEST_F(ContainerdE2E, WholePodLifecycleThroughCrihookdMatchesContainerd) {
  using RS = v1::RuntimeService::Stub;
  using IS = v1::ImageService::Stub;
  v1::VersionRequest vreq;
  vreq.set_version("v1");
  v1::VersionResponse version = same(&runtime, &RS::Version, vreq);
  EXPECT_EQ(version.runtime_name(), "containerd");

  // RunPodSandbox
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-pod");
  const std::string pod = viaProxy(&RS::RunPodSandbox, run).pod_sandbox_id();
  ASSERT_FALSE(pod.empty());
  v1::PodSandboxStatusRequest pstat;
  pstat.set_pod_sandbox_id(pod);
  v1::PodSandboxStatusResponse ps = same(&runtime, &RS::PodSandboxStatus, pstat);
  EXPECT_EQ(ps.status().state(), v1::SANDBOX_READY);
  EXPECT_EQ(ps.status().metadata().name(), "e2e-pod");

  // CreateContainer + StartContainer
  v1::CreateContainerRequest create = boxRequest(pod, run.config(), "box");
  auto* e = create.mutable_config()->add_envs();
  e->set_key("GREETING");
  e->set_value("through-crihook");
  const std::string ctr = viaProxy(&RS::CreateContainer, create).container_id();
  ASSERT_FALSE(ctr.empty());
  v1::StartContainerRequest start;
  start.set_container_id(ctr);
  viaProxy(&RS::StartContainer, start);

  // ExecSync: the same command through crihookd and directly.
  v1::ExecSyncRequest exec =
      shell(ctr, "echo $GREETING; ps -o args | grep -c '^/bin/sleep 3600$'; exit 7");
  v1::ExecSyncResponse out = same(&runtime, &RS::ExecSync, exec);
  EXPECT_EQ(out.stdout(), "through-crihook\n1\n");
  EXPECT_EQ(out.exit_code(), 7);

  // ContainerStatus, ListContainers
  v1::ContainerStatusRequest cstat;
  cstat.set_container_id(ctr);
  v1::ContainerStatusResponse cs = same(&runtime, &RS::ContainerStatus, cstat);
  EXPECT_EQ(cs.status().state(), v1::CONTAINER_RUNNING);
  v1::ListContainersRequest list;
  list.mutable_filter()->set_pod_sandbox_id(pod);
  v1::ListContainersResponse lc = same(&runtime, &RS::ListContainers, list);
  ASSERT_EQ(lc.containers_size(), 1);
  EXPECT_EQ(lc.containers(0).id(), ctr);

  // StopContainer, RemoveContainer
  v1::StopContainerRequest stop;
  stop.set_container_id(ctr);
  stop.set_timeout(2);
  viaProxy(&RS::StopContainer, stop);
  cs = same(&runtime, &RS::ContainerStatus, cstat);
  EXPECT_EQ(cs.status().state(), v1::CONTAINER_EXITED);
  v1::RemoveContainerRequest rm;
  rm.set_container_id(ctr);
  viaProxy(&RS::RemoveContainer, rm);
  lc = same(&runtime, &RS::ListContainers, list);
  EXPECT_EQ(lc.containers_size(), 0);
  same(&runtime, &RS::ContainerStatus, cstat);  // NotFound, the same way

  // StopPodSandbox, RemovePodSandbox
  v1::StopPodSandboxRequest stopp;
  stopp.set_pod_sandbox_id(pod);
  viaProxy(&RS::StopPodSandbox, stopp);
  ps = same(&runtime, &RS::PodSandboxStatus, pstat);
  EXPECT_EQ(ps.status().state(), v1::SANDBOX_NOTREADY);
  v1::RemovePodSandboxRequest rmp;
  rmp.set_pod_sandbox_id(pod);
  viaProxy(&RS::RemovePodSandbox, rmp);
  v1::ListPodSandboxResponse pods =
      same(&runtime, &RS::ListPodSandbox, v1::ListPodSandboxRequest());
  for (const auto& p : pods.items()) EXPECT_NE(p.id(), pod);

  // Images
  v1::ListImagesResponse imgs = same(&images, &IS::ListImages, v1::ListImagesRequest());
  bool found = false;
  for (const auto& i : imgs.images()) {
    for (const auto& t : i.repo_tags()) found = found || t == kE2eImage;
  }
  EXPECT_TRUE(found);
  v1::ImageStatusRequest istat;
  istat.mutable_image()->set_image(kE2eImage);
  v1::ImageStatusResponse is = same(&images, &IS::ImageStatus, istat);
  EXPECT_FALSE(is.image().id().empty());

  // One log line per intercepted call, naming the pod; the last one is
  // written as its answer goes out.
  const std::string last =
      "RemovePodSandbox api=v1 pod=default/e2e-pod sandbox=" + pod.substr(0, 12);
  EXPECT_TRUE(eventually(
      [&] { return readFile(env->dir + "/crihookd.log").find(last) != std::string::npos; }, 5s,
      10ms));
  const std::string log = readFile(env->dir + "/crihookd.log");
  for (const char* m : {"RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
                        "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"}) {
    EXPECT_THAT(log, HasSubstr(std::string(m) +
                               " api=v1 pod=default/e2e-pod sandbox=" + pod.substr(0, 12)));
  }
}

// kubelet <= 1.29 dials its runtime with the socket path as :authority,
// kubelet >= 1.30 with "localhost": gocri, a grpc-go client dialing as kubelet
// does, runs a whole pod lifecycle through crihookd both ways.
TEST_F(ContainerdE2E, GrpcGoClientRunsAPodLifecycleThroughCrihookdWithEitherAuthority) {
  for (const std::string mode : {"path", "localhost"}) {
    SCOPED_TRACE("authority mode " + mode);
    const std::string name = "gocri-" + mode;
    std::string out;
    try {
      out = runShellOrThrow(std::string(GOCRI_BINARY) + " -endpoint " + env->dir + "/crihook.sock" +
                            " -authority-mode " + mode + " lifecycle -image " + kE2eImage +
                            " -pod " + name + " -log-dir " + env->dir + "/logs/" + name + " 2>&1");
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    std::map<std::string, nlohmann::json> step;  // the last line of each step
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object()) << "not a JSON line: " << line;
      EXPECT_EQ(j.value("ok", false), true) << line;
      step[j.value("step", "")] = j;
    }
    bool complete = true;
    for (const char* s : {"Version", "RunPodSandbox", "CreateContainer", "StartContainer",
                          "ContainerStatus", "ExecSync", "ListContainers", "StopContainer",
                          "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"}) {
      if (step.count(s) == 0) {
        ADD_FAILURE() << s << " missing from:\n" << out;
        complete = false;
      }
    }
    if (!complete) continue;
    EXPECT_EQ(step["Version"]["runtime_name"], "containerd");
    const std::string pod = step["RunPodSandbox"]["pod_sandbox_id"];
    const std::string ctr = step["CreateContainer"]["container_id"];
    EXPECT_FALSE(pod.empty());
    EXPECT_FALSE(ctr.empty());
    EXPECT_EQ(step["ContainerStatus"]["state"], "CONTAINER_RUNNING");
    EXPECT_EQ(step["ContainerStatus"]["name"], "box");
    EXPECT_EQ(step["ExecSync"]["stdout"], "hi\n");
    EXPECT_EQ(step["ExecSync"]["exit_code"], 0);
    EXPECT_EQ(step["ListContainers"]["container_ids"], nlohmann::json::array({ctr}));
    EXPECT_EQ(step["StopContainer"]["state"], "CONTAINER_EXITED");
    EXPECT_EQ(step["StopPodSandbox"]["state"], "SANDBOX_NOTREADY");
    // containerd, asked directly, has no trace of the pod left.
    grpc::ClientContext ctx;
    v1::ListPodSandboxResponse pods;
    ASSERT_TRUE(runtime(env->direct)->ListPodSandbox(&ctx, {}, &pods).ok());
    for (const auto& p : pods.items()) EXPECT_NE(p.id(), pod);
    // The intercepted calls went through crihookd's hooks, naming the pod.
    const std::string log = readFile(env->dir + "/crihookd.log");
    EXPECT_THAT(log, HasSubstr("RunPodSandbox api=v1 pod=default/" + name +
                               " sandbox=" + pod.substr(0, 12)));
    EXPECT_THAT(log, HasSubstr("CreateContainer api=v1 pod=default/" + name));
  }
}

TEST_F(ContainerdE2E, V1alpha2CallsReachContainerdUnchanged) {
  // containerd 1.6 still serves runtime.v1alpha2 for old kubelets; 2.x
  // answers UNIMPLEMENTED, through crihookd as directly.
  v1::VersionRequest req;
  req.set_version("0.1.0");
  std::string direct, proxied;
  grpc::ClientContext c1, c2;
  grpc::Status s1 = genericUnary(env->direct, &c1, "/runtime.v1alpha2.RuntimeService/Version",
                                 req.SerializeAsString(), &direct);
  grpc::Status s2 = genericUnary(env->proxied, &c2, "/runtime.v1alpha2.RuntimeService/Version",
                                 req.SerializeAsString(), &proxied);
  EXPECT_EQ(s1.error_code(), s2.error_code()) << s2.error_message();
  EXPECT_EQ(direct, proxied);
  // And an intercepted v1alpha2 call: a StopContainer of an unknown id is
  // answered by containerd exactly as directly (NotFound).
  v1::StopContainerRequest stop;
  stop.set_container_id("does-not-exist");
  grpc::ClientContext c3, c4;
  s1 = genericUnary(env->direct, &c3, "/runtime.v1alpha2.RuntimeService/StopContainer",
                    stop.SerializeAsString(), &direct);
  s2 = genericUnary(env->proxied, &c4, "/runtime.v1alpha2.RuntimeService/StopContainer",
                    stop.SerializeAsString(), &proxied);
  EXPECT_EQ(s1.error_code(), s2.error_code());
  EXPECT_EQ(s1.error_message(), s2.error_message());
}

void removePod(const std::string& pod) {
  auto stub = v1::RuntimeService::NewStub(env->proxied);
  const grpc::Status st = stopAndRemovePod(*stub, pod);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(ContainerdE2E, EnvMountAndDeviceFromAHookAreThereInsideTheContainer) {
  using RS = v1::RuntimeService::Stub;
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-hooked");
  (*run.mutable_config()->mutable_annotations())["crihook.test/hooks"] = "on";
  const std::string pod = viaProxy(&RS::RunPodSandbox, run).pod_sandbox_id();
  ASSERT_FALSE(pod.empty());
  const std::string ctr =
      viaProxy(&RS::CreateContainer, boxRequest(pod, run.config(), "hooked")).container_id();
  ASSERT_FALSE(ctr.empty());
  v1::StartContainerRequest start;
  start.set_container_id(ctr);
  viaProxy(&RS::StartContainer, start);

  v1::ExecSyncRequest exec =
      shell(ctr,
            "echo $CRIHOOK_E2E; cat /crihook-data/hello; "
            "touch /crihook-data/x 2>/dev/null && echo writable || echo read-only; "
            "ls -l /dev/crihook-zero | cut -c1; head -c 4 /dev/crihook-zero | od -An -tx1");
  v1::ExecSyncResponse out = viaProxy(&RS::ExecSync, exec);
  EXPECT_EQ(out.stdout(), "from-a-hook\nhello from the host\nread-only\nc\n 00 00 00 00\n")
      << out.stderr();
  EXPECT_EQ(out.exit_code(), 0);

  // And crihookctl explains it from crihookd's state.
  std::ostringstream text, err;
  ASSERT_EQ(ctl::run({"explain", "--state-dir", env->dir + "/state", ctr.substr(0, 12)}, text, err),
            0)
      << err.str();
  EXPECT_THAT(text.str(), HasSubstr("pod       default/e2e-hooked"));
  EXPECT_THAT(text.str(),
              ::testing::ContainsRegex("set env CRIHOOK_E2E=from-a-hook +by e2e-static"));
  EXPECT_THAT(text.str(),
              ::testing::ContainsRegex("device /dev/crihook-zero <- .* +by e2e-static"));
  removePod(pod);
}

TEST_F(ContainerdE2E, ACreateContainerRejectedByAHookLeavesNoContainer) {
  using RS = v1::RuntimeService::Stub;
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-refused");
  (*run.mutable_config()->mutable_annotations())["crihook.test/reject"] = "yes";
  const std::string pod = viaProxy(&RS::RunPodSandbox, run).pod_sandbox_id();
  ASSERT_FALSE(pod.empty());

  auto stub = runtime(env->proxied);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  v1::CreateContainerResponse resp;
  grpc::Status s = stub->CreateContainer(&ctx, boxRequest(pod, run.config(), "refused"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(s.error_message(), HasSubstr("hook hookserver/refuser failed in PreCreateContainer"));
  EXPECT_THAT(s.error_message(), HasSubstr("the e2e hook server refuses this pod"));

  // containerd itself (not through crihookd) has no container for the pod.
  v1::ListContainersRequest list;
  list.mutable_filter()->set_pod_sandbox_id(pod);
  v1::ListContainersResponse lc;
  grpc::ClientContext c2;
  ASSERT_TRUE(runtime(env->direct)->ListContainers(&c2, list, &lc).ok());
  EXPECT_EQ(lc.containers_size(), 0);
  removePod(pod);
}

// crihookd's metrics endpoint (beside its CRI socket by default), scraped
// as Prometheus would: a pod lifecycle shows up in the RunPodSandbox count
// and in the hooks' numbers, and crihookctl status reads it.
// One sample of crihookd's metrics at `socket` (0 when not recorded yet, -1
// when the scrape failed).
double metricSample(const std::string& socket, const std::string& name,
                    const std::map<std::string, std::string>& labels) {
  MetricsListen where;
  where.kind = MetricsListen::Kind::kUnix;
  where.path = socket;
  auto r = ctl::httpGet(where, "/metrics", 10s);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1.0;
  EXPECT_EQ(r->status, 200);
  auto samples = ctl::parseExposition(r->body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  if (!samples.ok()) return -1.0;
  for (const auto& s : *samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match = match && s.labels.count(k) && s.labels.at(k) == v;
    if (match) return s.value;
  }
  return 0.0;
}

TEST_F(ContainerdE2E, MetricsCountAPodLifecycleAndItsHooks) {
  using RS = v1::RuntimeService::Stub;
  const std::string socket = env->dir + "/metrics.sock";
  // The endpoint opens just after the CRI socket: this may be the suite's
  // first test.
  MetricsListen where;
  where.kind = MetricsListen::Kind::kUnix;
  where.path = socket;
  EXPECT_TRUE(eventually([&] { return ctl::httpGet(where, "/readyz", 1s).ok(); }, 5s, 10ms));
  auto sample = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    return metricSample(socket, name, labels);
  };
  const std::map<std::string, std::string> run_ok = {
      {"service", "runtime.v1.RuntimeService"}, {"method", "RunPodSandbox"}, {"code", "OK"}};
  const std::map<std::string, std::string> static_pre = {{"hook", "e2e-static"},
                                                         {"stage", "PreCreateContainer"}};
  const std::map<std::string, std::string> refuser_pre = {{"hook", "hookserver/refuser"},
                                                          {"stage", "PreCreateContainer"}};
  const double runs = sample("crihook_cri_calls_total", run_ok);
  const double static_calls = sample("crihook_hook_calls_total", static_pre);
  const double refuser_calls = sample("crihook_hook_calls_total", refuser_pre);

  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-metrics");
  (*run.mutable_config()->mutable_annotations())["crihook.test/hooks"] = "on";
  const std::string pod = viaProxy(&RS::RunPodSandbox, run).pod_sandbox_id();
  ASSERT_FALSE(pod.empty());
  const std::string ctr =
      viaProxy(&RS::CreateContainer, boxRequest(pod, run.config(), "counted")).container_id();
  ASSERT_FALSE(ctr.empty());
  v1::StartContainerRequest start;
  start.set_container_id(ctr);
  viaProxy(&RS::StartContainer, start);
  removePod(pod);

  // A call is counted as its stream closes, just after the client has its answer.
  double now = 0;
  eventually([&] { return (now = sample("crihook_cri_calls_total", run_ok)) >= runs + 1; }, 2s,
             10ms);
  EXPECT_EQ(now, runs + 1);
  EXPECT_EQ(sample("crihook_hook_calls_total", static_pre), static_calls + 1);
  EXPECT_EQ(sample("crihook_hook_calls_total", refuser_pre), refuser_calls + 1);
  EXPECT_EQ(sample("crihook_hook_failures_total", static_pre), 0);
  EXPECT_GE(sample("crihook_hook_duration_seconds_count", static_pre), static_calls + 1);

  std::ostringstream out, err;
  EXPECT_EQ(ctl::run({"status", "--metrics", socket}, out, err), 0) << out.str() << err.str();
  EXPECT_THAT(out.str(), HasSubstr("backend:  healthy"));
  EXPECT_THAT(out.str(), HasSubstr("ready:    yes"));
  EXPECT_THAT(out.str(), HasSubstr("runtime.v1.RuntimeService/RunPodSandbox"));
}

// The device hooks on a fake device tree: character devices made with mknod
// (the majors and minors of /dev/zero and /dev/null stand in for GPUs and
// RDMA functions) described by the DGX-shaped fixture topology. A crihookd of
// its own runs them in front of the suite's containerd, so it can be killed.
class DeviceE2E {
 public:
  DeviceE2E() : dir_(env->dir + "/devices") {
    makeFixtures(dir_ + "/fixtures", CRIHOOK_SOURCE_DIR);  // device_pod.h
    makeDeviceTree(dir_);
    std::ofstream(dir_ + "/crihookd.toml")
        << "[hooks]\nstate_dir = \"" << dir_ << "/state\"\nhookserver_dir = \"" << dir_
        << "/hookserver.d\"\n"
        << deviceHooksConfig(dir_, dir_ + "/fixtures", "30s");
    start();
  }
  ~DeviceE2E() {
    if (crihookd_) crihookd_->signal(SIGTERM);
  }

  void start() {
    std::filesystem::remove(dir_ + "/crihook.sock");
    crihookd_ = std::make_unique<ChildProcess>(
        CRIHOOKD_BINARY,
        std::vector<std::string>{"--config", dir_ + "/crihookd.toml", "--listen",
                                 dir_ + "/crihook.sock", "--backend",
                                 "unix://" + env->dir + "/ctd/containerd.sock"},
        dir_ + "/crihookd.log");
    ASSERT_TRUE(waitForFile(dir_ + "/crihook.sock", 10s)) << readFile(dir_ + "/crihookd.log");
    channel_ = unixChannel(dir_ + "/crihook.sock");
  }
  void kill() {
    crihookd_->signal(SIGKILL);
    crihookd_->wait(10s);
    crihookd_.reset();
  }

  std::unique_ptr<v1::RuntimeService::Stub> stub() { return v1::RuntimeService::NewStub(channel_); }
  std::vector<std::string> actions() const { return deviceActions(dir_); }
  bool waitForActions(size_t n) const {
    return eventually([&] { return actions().size() >= n; }, 10s, 20ms);
  }
  std::string log() const { return readFile(dir_ + "/crihookd.log"); }
  std::string metricsSocket() const { return dir_ + "/metrics.sock"; }
  // How many times `text` is in the log (of every crihookd started here).
  size_t logCount(const std::string& text) const {
    const std::string l = log();
    size_t n = 0;
    for (size_t at = l.find(text); at != std::string::npos; at = l.find(text, at + 1)) ++n;
    return n;
  }
  bool waitForLogCount(const std::string& text, size_t n) const {
    return eventually([&] { return logCount(text) >= n; }, 10s, 20ms);
  }
  // The phase of the pod's device record ("ready", "cleanup-pending",
  // "cleaned"); "gone" without one. device-lifecycle cleans up only what a
  // cleanup-pending record owes.
  std::string phaseOf(const v1::PodSandboxConfig& pod) const {
    const std::string file =
        cat(dir_, "/state/devices/", pod.metadata().uid(), "_", pod.metadata().attempt(), ".json");
    if (!std::filesystem::exists(file)) return "gone";
    return nlohmann::json::parse(readFile(file)).at("phase").get<std::string>();
  }

 private:
  std::string dir_;
  std::unique_ptr<ChildProcess> crihookd_;
  std::shared_ptr<grpc::Channel> channel_;
};

template <typename Req, typename Resp>
grpc::Status call(v1::RuntimeService::Stub& stub,
                  grpc::Status (v1::RuntimeService::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                   Resp*),
                  const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  return (stub.*method)(&ctx, req, resp);
}

TEST_F(ContainerdE2E, AllocatedGpusAndRdmaVfAreInTheContainerInitialisedAndCleanedUpOnce) {
  using RS = v1::RuntimeService::Stub;
  DeviceE2E devices;
  auto stub = devices.stub();
  const std::string gpu0 = kFixtureGpu0, gpu1 = kFixtureGpu1;  // device_pod.h

  // A pod with two GPUs and one VF of mlx5_0 (mlx5_6), and a CPU on node 0.
  v1::RunPodSandboxRequest run_a;
  *run_a.mutable_config() = podConfig("e2e-dev-a");
  allocateDevicePod(*run_a.mutable_config());
  v1::RunPodSandboxResponse ra;
  ASSERT_TRUE(call(*stub, &RS::RunPodSandbox, run_a, &ra).ok()) << devices.log();
  const std::vector<std::string> init_a = devicePodInits("e2e-dev-a");
  EXPECT_THAT(devices.actions(), ::testing::ElementsAreArray(init_a));
  v1::CreateContainerResponse ca;
  ASSERT_TRUE(
      call(*stub, &RS::CreateContainer, boxRequest(ra.pod_sandbox_id(), run_a.config(), "a"), &ca)
          .ok())
      << devices.log();
  v1::StartContainerRequest start;
  start.set_container_id(ca.container_id());
  v1::StartContainerResponse started;
  ASSERT_TRUE(call(*stub, &RS::StartContainer, start, &started).ok());
  v1::ExecSyncResponse out;
  ASSERT_TRUE(call(*stub, &RS::ExecSync, shell(ca.container_id(), kDevicePodProbe), &out).ok());
  EXPECT_EQ(out.stdout(), devicePodProbeExpected()) << out.stderr();

  // A pod without an allocation sees none of it.
  v1::RunPodSandboxRequest run_b;
  *run_b.mutable_config() = podConfig("e2e-dev-b");
  v1::RunPodSandboxResponse rb;
  ASSERT_TRUE(call(*stub, &RS::RunPodSandbox, run_b, &rb).ok());
  v1::CreateContainerResponse cb;
  ASSERT_TRUE(
      call(*stub, &RS::CreateContainer, boxRequest(rb.pod_sandbox_id(), run_b.config(), "b"), &cb)
          .ok());
  start.set_container_id(cb.container_id());
  ASSERT_TRUE(call(*stub, &RS::StartContainer, start, &started).ok());
  ASSERT_TRUE(call(*stub, &RS::ExecSync,
                   shell(cb.container_id(),
                         "ls /dev | grep -c -E '^(nvidia|infiniband)'; "
                         "echo ${NVIDIA_VISIBLE_DEVICES-unset} ${NCCL_IB_HCA-unset}"),
                   &out)
                  .ok());
  EXPECT_EQ(out.stdout(), "0\nunset unset\n") << out.stderr();
  EXPECT_EQ(devices.actions().size(), 3u);  // nothing to initialise for it
  // And the metrics count each device initialised, none owing a cleanup.
  EXPECT_EQ(metricSample(devices.metricsSocket(), "crihook_device_inits_total",
                         {{"hook", "devices"}, {"type", "gpu"}}),
            2);
  EXPECT_EQ(metricSample(devices.metricsSocket(), "crihook_device_inits_total",
                         {{"hook", "devices"}, {"type", "rdma"}}),
            1);
  EXPECT_EQ(metricSample(devices.metricsSocket(), "crihook_device_cleanups_pending",
                         {{"hook", "devices"}}),
            0);

  // crihookd is killed (SIGKILL) after a third pod's init; that pod is
  // removed behind its back, directly at containerd. Started again, crihookd
  // cleans up after it, and only after it.
  v1::RunPodSandboxRequest run_c;
  *run_c.mutable_config() = podConfig("e2e-dev-c");
  (*run_c.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":2}]})";
  v1::RunPodSandboxResponse rc;
  ASSERT_TRUE(call(*stub, &RS::RunPodSandbox, run_c, &rc).ok());
  EXPECT_EQ(devices.phaseOf(run_a.config()), "ready");
  EXPECT_EQ(devices.phaseOf(run_c.config()), "ready");
  const std::string reconciled = "reconciled with the runtime's";
  const size_t reconciled_before = devices.logCount(reconciled);
  devices.kill();
  {
    auto direct = runtime(env->direct);
    v1::StopPodSandboxRequest stop;
    stop.set_pod_sandbox_id(rc.pod_sandbox_id());
    v1::StopPodSandboxResponse r1;
    ASSERT_TRUE(call(*direct, &RS::StopPodSandbox, stop, &r1).ok());
    v1::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(rc.pod_sandbox_id());
    v1::RemovePodSandboxResponse r2;
    ASSERT_TRUE(call(*direct, &RS::RemovePodSandbox, rm, &r2).ok());
  }
  devices.start();
  stub = devices.stub();
  // The restarted crihookd reconciles its records with containerd's
  // sandboxes (decided in one pass, logged at its end): pod c's cleanup is
  // owed; pod a still runs, so its record stays ready, and a ready record is
  // never cleaned up. (Cleanup runs the configured actions; it removes no
  // device node, so the nodes being there would prove nothing.)
  ASSERT_TRUE(devices.waitForLogCount(reconciled, reconciled_before + 1)) << devices.log();
  EXPECT_EQ(devices.phaseOf(run_a.config()), "ready");
  eventually([&] { return devices.phaseOf(run_c.config()) == "gone"; }, 10s, 20ms);
  EXPECT_EQ(devices.phaseOf(run_c.config()), "gone") << devices.log();
  EXPECT_THAT(
      devices.actions(),
      ::testing::ElementsAre(init_a[0], init_a[1], init_a[2],
                             "init gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd e2e-dev-c",
                             "cleanup gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd e2e-dev-c"))
      << devices.log();
  // The restarted crihookd counted the cleanup it owed (its numbers start
  // at 0; the counter moves before the record goes).
  EXPECT_EQ(metricSample(devices.metricsSocket(), "crihook_device_cleanups_total",
                         {{"hook", "devices"}, {"type", "gpu"}}),
            1);

  // Then pod a stops and is removed through the restarted crihookd: its
  // cleanup runs once, devices in reverse order.
  for (const auto* pod : {&ra, &rb}) {
    v1::StopPodSandboxRequest stop;
    stop.set_pod_sandbox_id(pod->pod_sandbox_id());
    v1::StopPodSandboxResponse r1;
    EXPECT_TRUE(call(*stub, &RS::StopPodSandbox, stop, &r1).ok());
    v1::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(pod->pod_sandbox_id());
    v1::RemovePodSandboxResponse r2;
    EXPECT_TRUE(call(*stub, &RS::RemovePodSandbox, rm, &r2).ok());
  }
  EXPECT_THAT(devices.actions(),
              ::testing::ElementsAre(
                  init_a[0], init_a[1], init_a[2],
                  "init gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd e2e-dev-c",
                  "cleanup gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd e2e-dev-c",
                  "cleanup rdma 1 mlx5_6 e2e-dev-a", cat("cleanup gpu 1 ", gpu1, " e2e-dev-a"),
                  cat("cleanup gpu 0 ", gpu0, " e2e-dev-a")))
      << devices.log();
  EXPECT_THAT(devices.log(), HasSubstr("its sandbox was removed while crihookd was down"));
}

// The cpuset hook on a real containerd, with a crihookd of its own over a
// fixture topology whose NUMA node 0 is this machine's CPUs 0 and 1 (node 1,
// CPUs 2-3, exists only in the fixture): every cpuset and mems the hook sets
// is one the machine has. A NUMA-only pod on node 0 makes room for a pod
// pinned to CPU 1 while it runs, and gets it back once it is gone; the pinned
// one runs without a CFS quota although kubelet asked for one.
TEST_F(ContainerdE2E, NumaOnlyPodMakesRoomForAPinnedPodAndWidensWhenItGoes) {
  using RS = v1::RuntimeService::Stub;
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs CPUs 0 and 1";
  const std::string dir = env->dir + "/cpuset";
  writeTwoNodeCpuFixture(dir + "/fixture");
  std::ofstream(dir + "/crihookd.toml")
      << cat("[hooks]\nstate_dir = \"", dir, "/state\"\nhookserver_dir = \"", dir,
             "/hookserver.d\"\n[topology]\nroot = \"", dir,
             "/fixture\"\n[[hook]]\nname = \"cpuset\"\nbuiltin = \"cpuset\"\n");
  ChildProcess crihookd(CRIHOOKD_BINARY,
                        {"--config", dir + "/crihookd.toml", "--listen", dir + "/crihook.sock",
                         "--backend", "unix://" + env->dir + "/ctd/containerd.sock"},
                        dir + "/crihookd.log");
  ASSERT_TRUE(waitForFile(dir + "/crihook.sock", 10s)) << readFile(dir + "/crihookd.log");
  auto stub = v1::RuntimeService::NewStub(unixChannel(dir + "/crihook.sock"));

  // A pod with `resource_status`, and a started container asking for half a CPU.
  auto startPod = [&](const std::string& name, const std::string& resource_status) {
    v1::RunPodSandboxRequest run;
    *run.mutable_config() = podConfig(name);
    (*run.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/resource-status"] =
        resource_status;
    v1::RunPodSandboxResponse pod;
    EXPECT_TRUE(call(*stub, &RS::RunPodSandbox, run, &pod).ok());
    v1::CreateContainerRequest create = boxRequest(pod.pod_sandbox_id(), run.config(), name);
    create.mutable_config()->mutable_linux()->mutable_resources()->set_cpu_period(100000);
    create.mutable_config()->mutable_linux()->mutable_resources()->set_cpu_quota(50000);
    v1::CreateContainerResponse ctr;
    grpc::Status s = call(*stub, &RS::CreateContainer, create, &ctr);
    EXPECT_TRUE(s.ok()) << s.error_message() << readFile(dir + "/crihookd.log");
    v1::StartContainerRequest start;
    start.set_container_id(ctr.container_id());
    v1::StartContainerResponse started;
    EXPECT_TRUE(call(*stub, &RS::StartContainer, start, &started).ok());
    return std::pair{pod.pod_sandbox_id(), ctr.container_id()};
  };
  // What a process started in the container now is allowed, and its quota.
  auto inside = [&](const std::string& ctr) {
    v1::ExecSyncResponse out;
    EXPECT_TRUE(call(*stub, &RS::ExecSync, shell(ctr, kCpusAndQuotaProbe), &out).ok());
    return out.stdout();
  };
  auto cpusBecome = [&](const std::string& ctr, const std::string& cpus) {
    return eventually([&] { return inside(ctr).starts_with(cpus + "\n"); }, 10s, 100ms);
  };

  const auto [ls_pod, ls] =
      startPod("e2e-cpu-ls", R"({"numaNodeResources":[{"node":0,"resources":{"cpu":"1"}}]})");
  EXPECT_EQ(inside(ls), "0-1\n50000\n");

  const auto [lsr_pod, lsr] = startPod("e2e-cpu-lsr", R"({"cpuset":"1"})");
  const std::string pinned = inside(lsr);
  EXPECT_TRUE(pinned == "1\n-1\n" || pinned == "1\nmax\n") << pinned;
  EXPECT_TRUE(cpusBecome(ls, "0")) << inside(ls) << readFile(dir + "/crihookd.log");
  EXPECT_EQ(inside(ls), "0\n50000\n");  // moved, its quota as it was

  // The pinned pod goes: its container stops and is removed, then the pod.
  v1::StopContainerRequest stop;
  stop.set_container_id(lsr);
  stop.set_timeout(1);
  v1::StopContainerResponse stopped;
  EXPECT_TRUE(call(*stub, &RS::StopContainer, stop, &stopped).ok());
  EXPECT_TRUE(cpusBecome(ls, "0-1")) << inside(ls) << readFile(dir + "/crihookd.log");
  for (const std::string* pod : {&lsr_pod, &ls_pod}) {
    v1::StopPodSandboxRequest stop_pod;
    stop_pod.set_pod_sandbox_id(*pod);
    v1::StopPodSandboxResponse r1;
    EXPECT_TRUE(call(*stub, &RS::StopPodSandbox, stop_pod, &r1).ok());
    v1::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(*pod);
    v1::RemovePodSandboxResponse r2;
    EXPECT_TRUE(call(*stub, &RS::RemovePodSandbox, rm, &r2).ok());
  }
  crihookd.signal(SIGTERM);
  EXPECT_EQ(crihookd.wait(10s), 0) << readFile(dir + "/crihookd.log");
}

// The allocation exactly as Koordinator's scheduler writes it, on a crihookd
// of its own (the gpu, rdma and device-lifecycle hooks; the DGX fixture
// topology; mknod'd stand-ins as in DeviceE2E, plus mlx5_5's uverbs5; an
// empty HAMi-core library and lock directory under the test's directory).
class AllocationE2E {
 public:
  explicit AllocationE2E(const std::string& name) : dir_(env->dir + "/" + name) {
    std::filesystem::create_directories(dir_ + "/dev/infiniband");
    std::filesystem::create_directories(dir_ + "/hookserver.d");
    std::filesystem::create_directories(dir_ + "/hami/vgpulock");
    std::ofstream(dir_ + "/hami/libvgpu.so") << "";
    runShellOrThrow("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh " + dir_ +
                    "/fixtures");
    for (const char* n : {"nvidia0", "nvidia1", "infiniband/uverbs5", "infiniband/uverbs6"})
      runShellOrThrow(cat("mknod -m 0666 ", dir_, "/dev/", n, " c 1 5"));  // as /dev/zero
    for (const char* n : {"nvidiactl", "nvidia-uvm", "infiniband/rdma_cm"})
      runShellOrThrow(cat("mknod -m 0666 ", dir_, "/dev/", n, " c 1 3"));  // as /dev/null
    std::ofstream(dir_ + "/act.sh") << "#!/bin/sh\necho \"$*\" >> " << dir_ << "/actions.log\n";
    std::filesystem::permissions(dir_ + "/act.sh", std::filesystem::perms::owner_all);
    std::string actions;
    for (const char* type : {"gpu", "rdma"}) {
      for (const char* stage : {"init", "cleanup"}) {
        actions +=
            cat("[[hook.settings.", type, ".", stage, "]]\ncommand = [\"", dir_, "/act.sh\", \"",
                stage, "\", \"{type}\", \"{minor}\", \"{pci}\", \"", "{pod_name}\"]\n");
      }
    }
    const std::string root = cat("[hook.settings]\ndevice_root = \"", dir_, "/dev\"\n");
    std::ofstream(dir_ + "/crihookd.toml")
        << "[hooks]\nstate_dir = \"" << dir_ << "/state\"\nhookserver_dir = \"" << dir_
        << "/hookserver.d\"\n[topology]\nroot = \"" << dir_ << "/fixtures/dgx\"\n"
        << "[[hook]]\nname = \"gpu\"\nbuiltin = \"gpu\"\n"
        << root << "hami_core_library = \"" << dir_ << "/hami/libvgpu.so\"\n"
        << "hami_core_lock_dir = \"" << dir_ << "/hami/vgpulock\"\n"
        << "[[hook]]\nname = \"rdma\"\nbuiltin = \"rdma\"\n"
        << root
        << "[[hook]]\nname = \"devices\"\nbuiltin = \"device-lifecycle\"\ntimeout = \"30s\"\n"
        << root << actions;
    crihookd_ = std::make_unique<ChildProcess>(
        CRIHOOKD_BINARY,
        std::vector<std::string>{"--config", dir_ + "/crihookd.toml", "--listen",
                                 dir_ + "/crihook.sock", "--backend",
                                 "unix://" + env->dir + "/ctd/containerd.sock"},
        dir_ + "/crihookd.log");
    started_ = waitForFile(dir_ + "/crihook.sock", 10s);
    channel_ = unixChannel(dir_ + "/crihook.sock");
  }
  ~AllocationE2E() {
    for (const std::string& pod : pods_) {
      v1::StopPodSandboxRequest stop;
      stop.set_pod_sandbox_id(pod);
      v1::StopPodSandboxResponse r1;
      call(*stub(), &v1::RuntimeService::Stub::StopPodSandbox, stop, &r1);
      v1::RemovePodSandboxRequest rm;
      rm.set_pod_sandbox_id(pod);
      v1::RemovePodSandboxResponse r2;
      call(*stub(), &v1::RuntimeService::Stub::RemovePodSandbox, rm, &r2);
    }
    crihookd_->signal(SIGTERM);
    crihookd_->wait(10s);
  }

  bool started() const { return started_; }
  std::unique_ptr<v1::RuntimeService::Stub> stub() { return v1::RuntimeService::NewStub(channel_); }
  std::string log() const { return readFile(dir_ + "/crihookd.log"); }
  std::vector<std::string> actions() const {
    std::vector<std::string> out;
    std::istringstream in(readFile(dir_ + "/actions.log"));
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  const std::string& dir() const { return dir_; }

  // A pod allocated `allocation` (and labelled `labels`) with one started
  // busybox container; its id, or the status that stopped it.
  struct Started {
    grpc::Status status;
    std::string container;
  };
  Started podWithContainer(const std::string& name, const std::string& allocation,
                           const std::map<std::string, std::string>& labels = {}) {
    v1::RunPodSandboxRequest run;
    *run.mutable_config() = podConfig(name);
    (*run.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
        allocation;
    for (const auto& [k, v] : labels) (*run.mutable_config()->mutable_labels())[k] = v;
    v1::RunPodSandboxResponse rp;
    Started out;
    out.status = call(*stub(), &v1::RuntimeService::Stub::RunPodSandbox, run, &rp);
    if (!out.status.ok()) return out;
    pods_.push_back(rp.pod_sandbox_id());
    v1::CreateContainerResponse cc;
    out.status = call(*stub(), &v1::RuntimeService::Stub::CreateContainer,
                      boxRequest(rp.pod_sandbox_id(), run.config(), "box"), &cc);
    if (!out.status.ok()) return out;
    out.container = cc.container_id();
    v1::StartContainerRequest start;
    start.set_container_id(out.container);
    v1::StartContainerResponse started;
    out.status = call(*stub(), &v1::RuntimeService::Stub::StartContainer, start, &started);
    return out;
  }
  // stdout of `sh -c script` in `container`.
  std::string exec(const std::string& container, const std::string& script) {
    v1::ExecSyncResponse out;
    grpc::Status s =
        call(*stub(), &v1::RuntimeService::Stub::ExecSync, shell(container, script), &out);
    return s.ok() ? out.stdout() + out.stderr() : "ExecSync failed: " + s.error_message();
  }

 private:
  std::string dir_;
  std::unique_ptr<ChildProcess> crihookd_;
  std::shared_ptr<grpc::Channel> channel_;
  bool started_ = false;
  std::vector<std::string> pods_;
};

// koordlet reports every VF with minor -1 and the scheduler copies it; Go's
// omitempty drops a 0. Both are found by busID: mlx5_0 (0000:1c:00.0) has
// VFs 0000:1c:00.2 (mlx5_5, uverbs5) and 0000:1c:00.3 (mlx5_6, uverbs6).
TEST_F(ContainerdE2E, KoordinatorsRdmaVfsWithMinorMinusOneOrNoneAreInTheContainer) {
  AllocationE2E e("alloc-vf");
  ASSERT_TRUE(e.started()) << e.log();
  // As Koordinator v1.6+ marshals it (minor, resources, id, extension).
  auto a = e.podWithContainer(
      "e2e-vf-a",
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"}],)"
      R"("rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}]})");
  ASSERT_TRUE(a.status.ok()) << a.status.error_message() << "\n" << e.log();
  EXPECT_EQ(e.exec(a.container,
                   "ls /dev/infiniband; head -c 1 /dev/infiniband/uverbs6 | wc -c; "
                   "echo $NCCL_IB_HCA $NVIDIA_VISIBLE_DEVICES"),
            "rdma_cm\nuverbs6\n1\nmlx5_6 GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\n");
  // Before v1.6 (no id: the PF is mlx5_<minor>), the VF's minor left out.
  auto b = e.podWithContainer(
      "e2e-vf-b",
      R"({"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:1c:00.2"}]}}]})");
  ASSERT_TRUE(b.status.ok()) << b.status.error_message() << "\n" << e.log();
  EXPECT_EQ(e.exec(b.container, "ls /dev/infiniband; echo $NCCL_IB_HCA"),
            "rdma_cm\nuverbs5\nmlx5_5\n");
  // device-lifecycle found the same functions ({minor} of a VF: its virtfn).
  EXPECT_THAT(e.actions(), ::testing::ElementsAre("init gpu 0 0000:1a:00.0 e2e-vf-a",
                                                  "init rdma 1 0000:1c:00.3 e2e-vf-a",
                                                  "init rdma 0 0000:1c:00.2 e2e-vf-b"));
  // A VF that is not the PF's: the pod is refused, naming the field.
  auto c = e.podWithContainer(
      "e2e-vf-c",
      R"({"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:3c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.2"}]}}]})");
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(c.status.error_message(),
              HasSubstr("pod default/e2e-vf-c: rdma[0].extension.vfs[0].busID: 0000:1c:00.2 is "
                        "not a VF of mlx5_1 (0000:3c:00.0)"));
}

TEST_F(ContainerdE2E, AHamiCoreSharedGpuSeesItsLimitsInsideTheContainer) {
  AllocationE2E e("alloc-hami");
  ASSERT_TRUE(e.started()) << e.log();
  auto a = e.podWithContainer(
      "e2e-hami",
      R"({"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"30","koordinator.sh/gpu-memory":"8Gi","koordinator.sh/gpu-memory-ratio":"20"},"id":"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}]})",
      {{"koordinator.sh/gpu-isolation-provider", "HAMi-core"}});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message() << "\n" << e.log();
  // busybox is static: the preload is named, not loaded.
  EXPECT_EQ(e.exec(a.container,
                   "echo $CUDA_DEVICE_MEMORY_LIMIT $CUDA_DEVICE_SM_LIMIT $NVIDIA_VISIBLE_DEVICES; "
                   "echo $LD_PRELOAD; test -f \"$LD_PRELOAD\" && echo library; "
                   "test -d " +
                       e.dir() + "/hami/vgpulock && echo lock-dir; ls /dev | grep nvidia"),
            cat("8589934592 30 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\n", e.dir(),
                "/hami/libvgpu.so\nlibrary\nlock-dir\nnvidia-uvm\nnvidia1\nnvidiactl\n"));
}

// Koordinator's gpu type also carries other vendors' accelerators: their own
// device plugin sets the container up; crihook passes them through.
TEST_F(ContainerdE2E, AnotherVendorsGpuIsPassedThroughAndNamedOnTheContainer) {
  AllocationE2E e("alloc-npu");
  ASSERT_TRUE(e.started()) << e.log();
  auto a = e.podWithContainer(
      "e2e-npu",
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"},"id":"Ascend910-0"}]})");
  ASSERT_TRUE(a.status.ok()) << a.status.error_message() << "\n" << e.log();
  v1::ContainerStatusRequest req;
  req.set_container_id(a.container);
  v1::ContainerStatusResponse status;
  ASSERT_TRUE(call(*e.stub(), &v1::RuntimeService::Stub::ContainerStatus, req, &status).ok());
  EXPECT_EQ(status.status().annotations().at("crihook.io/gpu-passthrough"), R"(["Ascend910-0"])");
  EXPECT_EQ(e.exec(a.container, "ls /dev | grep -c nvidia; echo ${NVIDIA_VISIBLE_DEVICES-unset}"),
            "0\nunset\n");
  EXPECT_THAT(e.actions(), ::testing::IsEmpty());
  EXPECT_THAT(e.log(), HasSubstr(R"(pod default/e2e-npu: gpu ["Ascend910-0"] not NVIDIA's)"));
}

// koordlet as it is today, through a crihookd of its own: a server built from
// Koordinator's current proto answers container_envs (one changed, one
// removed, one added), a cpuset and an annotation, and a pod label; its
// registration lists PreRemoveRunPodSandbox (koordlet's Resctrl feature) and
// a key crihook does not know. What it decided is seen from inside the
// container, by a process exec'd there (it gets the container's environment,
// in order, and cgroup), the environment in the container's order.
TEST_F(ContainerdE2E, KoordletAnswersWithEnvsCpusetAndAnnotationsReachTheContainer) {
  using RS = v1::RuntimeService::Stub;
  const std::string dir = env->dir + "/koordlet";
  std::filesystem::create_directories(dir + "/hookserver.d");
  const std::string cpu = std::thread::hardware_concurrency() >= 2 ? "1" : "0";
  KoordServer koordlet(dir + "/koordlet.sock");
  koordlet.on_pod = [](const ::runtime::v1alpha1::PodSandboxHookRequest&,
                       ::runtime::v1alpha1::PodSandboxHookResponse& resp) {
    (*resp.mutable_labels())["koordinator.sh/qosClass"] = "LSR";
  };
  koordlet.on_container = [cpu](const ::runtime::v1alpha1::ContainerResourceHookRequest&,
                                ::runtime::v1alpha1::ContainerResourceHookResponse& resp) {
    auto& envs = *resp.mutable_container_envs();
    envs["KOORD_CHANGED"] = "new";
    envs.erase("KOORD_REMOVED");
    envs["KOORD_ADDED"] = "added";
    resp.mutable_container_resources()->set_cpuset_cpus(cpu);
    (*resp.mutable_container_annotations())["koordinator.sh/e2e"] = "from-koordlet";
  };
  koordlet.start();
  std::ofstream(dir + "/hookserver.d/koordlet.json")
      << R"({"remote-endpoint": ")" << dir << R"(/koordlet.sock", "failure-policy": "Fail",
            "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", "PreRemoveRunPodSandbox"],
            "koordlet-version": "v1.6"})";
  std::ofstream(dir + "/crihookd.toml")
      << "[hooks]\nstate_dir = \"" << dir << "/state\"\nhookserver_dir = \"" << dir
      << "/hookserver.d\"\n";
  ChildProcess crihookd(CRIHOOKD_BINARY,
                        std::vector<std::string>{"--config", dir + "/crihookd.toml", "--listen",
                                                 dir + "/crihook.sock", "--backend",
                                                 "unix://" + env->dir + "/ctd/containerd.sock"},
                        dir + "/crihookd.log");
  ASSERT_TRUE(waitForFile(dir + "/crihook.sock", 10s)) << readFile(dir + "/crihookd.log");
  auto stub = v1::RuntimeService::NewStub(unixChannel(dir + "/crihook.sock"));

  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("e2e-koordlet");
  v1::RunPodSandboxResponse ran;
  ASSERT_TRUE(call(*stub, &RS::RunPodSandbox, run, &ran).ok()) << readFile(dir + "/crihookd.log");
  v1::CreateContainerRequest create = boxRequest(ran.pod_sandbox_id(), run.config(), "koordlet");
  (*create.mutable_config()->mutable_annotations())["from"] = "kubelet";
  for (auto [k, v] : {std::pair{"KOORD_FIRST", "1"},
                      {"KOORD_CHANGED", "old"},
                      {"KOORD_REMOVED", "x"},
                      {"KOORD_LAST", "z"}}) {
    auto* e = create.mutable_config()->add_envs();
    e->set_key(k);
    e->set_value(v);
  }
  v1::CreateContainerResponse created;
  ASSERT_TRUE(call(*stub, &RS::CreateContainer, create, &created).ok())
      << readFile(dir + "/crihookd.log");
  v1::StartContainerRequest start;
  start.set_container_id(created.container_id());
  v1::StartContainerResponse started;
  ASSERT_TRUE(call(*stub, &RS::StartContainer, start, &started).ok());

  v1::ExecSyncResponse out;
  ASSERT_TRUE(call(*stub, &RS::ExecSync,
                   shell(created.container_id(),
                         "tr '\\0' '\\n' < /proc/$$/environ | grep '^KOORD_'; "
                         "grep Cpus_allowed_list /proc/$$/status"),
                   &out)
                  .ok());
  EXPECT_EQ(out.stdout(), cat("KOORD_FIRST=1\nKOORD_CHANGED=new\nKOORD_LAST=z\nKOORD_ADDED=added\n",
                              "Cpus_allowed_list:\t", cpu, "\n"))
      << out.stderr();

  // containerd itself has the merged annotations and the pod's label.
  auto direct = runtime(env->direct);
  v1::ContainerStatusRequest cs;
  cs.set_container_id(created.container_id());
  v1::ContainerStatusResponse status;
  ASSERT_TRUE(call(*direct, &RS::ContainerStatus, cs, &status).ok());
  EXPECT_EQ(status.status().annotations().at("koordinator.sh/e2e"), "from-koordlet");
  EXPECT_EQ(status.status().annotations().at("from"), "kubelet");
  v1::PodSandboxStatusRequest ps;
  ps.set_pod_sandbox_id(ran.pod_sandbox_id());
  v1::PodSandboxStatusResponse pod_status;
  ASSERT_TRUE(call(*direct, &RS::PodSandboxStatus, ps, &pod_status).ok());
  EXPECT_EQ(pod_status.status().labels().at("koordinator.sh/qosClass"), "LSR");

  // The registration was taken whole, what it could not use named once.
  const std::string log = readFile(dir + "/crihookd.log");
  EXPECT_THAT(log, HasSubstr("hook server koordlet.json: \"koordlet-version\": unknown key"));
  EXPECT_THAT(log, HasSubstr("hook server koordlet.json: runtime-hooks: PreRemoveRunPodSandbox"));

  v1::StopPodSandboxRequest stop;
  stop.set_pod_sandbox_id(ran.pod_sandbox_id());
  v1::StopPodSandboxResponse r1;
  EXPECT_TRUE(call(*stub, &RS::StopPodSandbox, stop, &r1).ok());
  v1::RemovePodSandboxRequest rm;
  rm.set_pod_sandbox_id(ran.pod_sandbox_id());
  v1::RemovePodSandboxResponse r2;
  EXPECT_TRUE(call(*stub, &RS::RemovePodSandbox, rm, &r2).ok());
  crihookd.signal(SIGTERM);
  crihookd.wait(10s);
}

}  // namespace
}  // namespace crihook::testing
