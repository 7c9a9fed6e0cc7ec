// Remote hook servers through crihookd's proxy and chain: Koordinator's
// protocol (a runtime.v1alpha1 server written here, registered by files in a
// hookserver.d directory) and crihook's own.

#include "remote/remote_hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "crihook_hook_v1.grpc.pb.h"
#include "hook_interceptor.h"
#include "hook_manager.h"
#include "koord_server.h"
#include "koordinator_runtime_v1alpha1.grpc.pb.h"
#include "proxy_fixture.h"
#include "runtime_v1.grpc.pb.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
namespace koord = ::runtime::v1alpha1;
namespace hv1 = ::crihook::hook::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr const char* kRun = "/runtime.v1.RuntimeService/RunPodSandbox";
constexpr const char* kCreate = "/runtime.v1.RuntimeService/CreateContainer";

class RemoteHooksTest : public ProxyFixture {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.file("hookserver.d"));
    for (const char* m : {kRun, kCreate}) {
      backend_.onUnary(m, [m](FakeCall&, std::string* out) {
        if (std::string(m) == kRun) {
          v1::RunPodSandboxResponse r;
          r.set_pod_sandbox_id("sb-1");
          *out = r.SerializeAsString();
        } else {
          v1::CreateContainerResponse r;
          r.set_container_id("ctr-1");
          *out = r.SerializeAsString();
        }
        return grpc::Status::OK;
      });
    }
    backend_.start();
  }
  void TearDown() override {
    stopProxy();
    interceptor_.reset();
    manager_.reset();
  }

  void registerServer(const std::string& file, const std::string& socket, const std::string& policy,
                      const std::string& hooks = R"("PreRunPodSandbox", "PreCreateContainer")") {
    std::ofstream(dir_.file("hookserver.d/" + file))
        << R"({"remote-endpoint": ")" << socket << R"(", "failure-policy": ")" << policy
        << R"(", "runtime-hooks": [)" << hooks << "]}";
  }

  void startCrihook(Config config = {}) {
    config.state_dir = "";
    config.hookserver_dir = dir_.file("hookserver.d");
    if (config.hookserver_timeout == Config{}.hookserver_timeout) config.hookserver_timeout = 300ms;
    auto m = HookManager::create(config, builtinHooks(), logger("hook"));
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
    interceptor_ = std::make_unique<HookInterceptor>(manager_->chains(), state_, logger("hook"));
    startProxy(interceptor_.get());
  }

  v1::CreateContainerRequest createRequest(std::map<std::string, std::string> labels = {}) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb-1");
    auto* pod = req.mutable_sandbox_config();
    pod->mutable_metadata()->set_name("train-0");
    pod->mutable_metadata()->set_namespace_("ml");
    pod->mutable_metadata()->set_uid("uid-1");
    for (const auto& [k, v] : labels) (*pod->mutable_labels())[k] = v;
    req.mutable_config()->mutable_metadata()->set_name("trainer");
    (*req.mutable_config()->mutable_annotations())["from"] = "kubelet";
    return req;
  }

  grpc::Status create(const v1::CreateContainerRequest& req) {
    auto stub = v1::RuntimeService::NewStub(proxyChannel());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::CreateContainerResponse resp;
    return stub->CreateContainer(&ctx, req, &resp);
  }

  v1::CreateContainerRequest lastCreateSeenByRuntime() {
    v1::CreateContainerRequest seen;
    EXPECT_TRUE(seen.ParseFromString(backend_.calls().back().request));
    return seen;
  }

  bool waitForChain(size_t hooks) {
    for (int i = 0; i < 300; ++i) {
      if (manager_->chains().get()->names().size() == hooks) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  StateStore state_{"", nullptr};
  std::unique_ptr<HookManager> manager_;
  std::unique_ptr<HookInterceptor> interceptor_;
};

TEST_F(RemoteHooksTest, KoordinatorServerAnswersReachTheRuntime) {
  KoordServer koordlet(dir_.file("koordlet.sock"));
  koordlet.start();
  registerServer("koordlet.json", dir_.file("koordlet.sock"), "Fail");
  startCrihook();

  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  run.mutable_config()->mutable_metadata()->set_namespace_("ml");
  (*run.mutable_config()->mutable_labels())["app"] = "train";
  run.mutable_config()->mutable_linux()->mutable_resources()->set_cpu_shares(2048);
  run.set_runtime_handler("runc");
  {
    auto stub = v1::RuntimeService::NewStub(proxyChannel());
    grpc::ClientContext ctx;
    v1::RunPodSandboxResponse resp;
    ASSERT_TRUE(stub->RunPodSandbox(&ctx, run, &resp).ok());
  }
  v1::RunPodSandboxRequest sandbox_seen;
  ASSERT_TRUE(sandbox_seen.ParseFromString(backend_.calls().back().request));
  EXPECT_EQ(sandbox_seen.config().labels().at("koordinator.sh/qos"), "LS");
  EXPECT_EQ(sandbox_seen.config().labels().at("app"), "train");
  EXPECT_EQ(sandbox_seen.config().linux().cgroup_parent(), "/kubepods/burstable/pod-x");

  ASSERT_TRUE(create(createRequest()).ok());
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime();
  EXPECT_EQ(seen.config().annotations().at("seen-by"), "koord");
  EXPECT_EQ(seen.config().annotations().at("from"), "kubelet");
  EXPECT_EQ(seen.config().linux().resources().cpuset_cpus(), "2-3");
  EXPECT_EQ(seen.config().linux().resources().cpu_shares(), 1024);

  std::lock_guard lock(koordlet.mu);
  ASSERT_EQ(koordlet.pod_requests.size(), 1u);
  const auto& p = koordlet.pod_requests[0];
  EXPECT_EQ(p.pod_meta().name(), "train-0");
  EXPECT_EQ(p.runtime_handler(), "runc");
  EXPECT_EQ(p.labels().at("app"), "train");
  EXPECT_EQ(p.resources().cpu_shares(), 2048);
  ASSERT_EQ(koordlet.container_requests.size(), 1u);
  const auto& c = koordlet.container_requests[0];
  EXPECT_EQ(c.pod_meta().namespace_(), "ml");
  EXPECT_EQ(c.container_mata().name(), "trainer");
  EXPECT_EQ(c.container_annotations().at("from"), "kubelet");
  // The pod's record from RunPodSandbox, with what the server itself decided then.
  EXPECT_EQ(c.pod_labels().at("koordinator.sh/qos"), "LS");
}

TEST_F(RemoteHooksTest, ServerErrorsFailTheCallUnderFailAndAreSkippedUnderIgnore) {
  KoordServer strict(dir_.file("strict.sock")), lenient(dir_.file("lenient.sock"));
  strict.start();
  lenient.start();
  strict.mode = KoordServer::Mode::kError;
  lenient.mode = KoordServer::Mode::kError;
  registerServer("a-lenient.json", dir_.file("lenient.sock"), "Ignore");
  startCrihook();
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(lenient.calls, 1);
  EXPECT_EQ(lastCreateSeenByRuntime().config().annotations().count("seen-by"), 0u);

  registerServer("b-strict.json", dir_.file("strict.sock"), "Fail");
  manager_->reload();
  grpc::Status s = create(createRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook hookserver/b-strict failed in PreCreateContainer: hook server " +
                        dir_.file("strict.sock") + ": koordlet: cannot read the pod's QoS"));
  EXPECT_THAT(s.error_message(), HasSubstr("(pod ml/train-0)"));
  EXPECT_EQ(backend_.callCount(kCreate), 1u);  // only the first call reached the runtime
}

TEST_F(RemoteHooksTest, HangingServerIsCutOffAtItsTimeout) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  koordlet.mode = KoordServer::Mode::kHang;
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  auto start = std::chrono::steady_clock::now();
  grpc::Status s = create(createRequest());
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("hook hookserver/k failed in PreCreateContainer"));
  EXPECT_LT(took, 2s);  // the server would have taken 3 s
  EXPECT_EQ(backend_.callCount(kCreate), 0u);
}

TEST_F(RemoteHooksTest, ServerCrashingMidCallFailsThatCallAndARestartedServerIsUsedAgain) {
  auto koordlet = std::make_unique<KoordServer>(dir_.file("k.sock"));
  koordlet->start();
  koordlet->mode = KoordServer::Mode::kCrash;
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  grpc::Status s = create(createRequest());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(), HasSubstr("hook hookserver/k failed in PreCreateContainer"));
  koordlet.reset();
  // Down: fails fast naming the hook.
  s = create(createRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // Back: used again without restarting crihookd.
  std::filesystem::remove(dir_.file("k.sock"));
  koordlet = std::make_unique<KoordServer>(dir_.file("k.sock"));
  koordlet->start();
  bool ok = false;
  for (int i = 0; i < 40 && !ok; ++i) {
    ok = create(createRequest()).ok();
    if (!ok) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ok);
  EXPECT_EQ(lastCreateSeenByRuntime().config().annotations().at("seen-by"), "koord");
}

TEST_F(RemoteHooksTest, RegistrationFilesAddedEditedAndRemovedTakeEffectLive) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  startCrihook();
  manager_->watch();
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(koordlet.calls, 0);

  registerServer("k.json", dir_.file("k.sock"), "Fail");
  ASSERT_TRUE(waitForChain(1));
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(koordlet.calls, 1);
  EXPECT_EQ(lastCreateSeenByRuntime().config().annotations().at("seen-by"), "koord");

  // Edited: no longer on PreCreateContainer.
  registerServer("k.json", dir_.file("k.sock"), "Fail", R"("PreRunPodSandbox")");
  for (int i = 0; i < 300 && manager_->chains().get()->subscribers(
                                 LifecycleMethod::kCreateContainer, Phase::kPre) != 0;
       ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(koordlet.calls, 1);

  // A broken edit keeps the last good registration.
  std::ofstream(dir_.file("hookserver.d/k.json")) << "{\"remote-endpoint\": ";
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(manager_->chains().get()->names(), std::vector<std::string>{"hookserver/k"});

  std::filesystem::remove(dir_.file("hookserver.d/k.json"));
  ASSERT_TRUE(waitForChain(0));
}

TEST_F(RemoteHooksTest, AllServersAreCalledInFileNameOrderAndConflictsNameBoth) {
  KoordServer a(dir_.file("a.sock"), "same"), b(dir_.file("b.sock"), "same");
  a.start();
  b.start();
  registerServer("20-b.json", dir_.file("b.sock"), "Fail");
  registerServer("10-a.json", dir_.file("a.sock"), "Fail");
  startCrihook();
  EXPECT_EQ(manager_->chains().get()->names(),
            (std::vector<std::string>{"hookserver/10-a", "hookserver/20-b"}));
  ASSERT_TRUE(create(createRequest()).ok());  // equal decisions are no conflict
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(b.calls, 1);

  KoordServer c(dir_.file("c.sock"), "other");
  c.start();
  registerServer("30-c.json", dir_.file("c.sock"), "Fail");
  manager_->reload();
  grpc::Status s = create(createRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook hookserver/10-a and hook hookserver/30-c both set annotation "
                        "seen-by: \"same\" vs \"other\""));
}

TEST_F(RemoteHooksTest, PodsLabelledSkipHookServerAreNotSent) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  ASSERT_TRUE(create(createRequest({{kSkipHookServerLabel, "true"}})).ok());
  EXPECT_EQ(koordlet.calls, 0);
  EXPECT_EQ(lastCreateSeenByRuntime().config().annotations().count("seen-by"), 0u);
  auto other = createRequest({{kSkipHookServerLabel, "false"}});
  other.set_pod_sandbox_id("sb-2");
  ASSERT_TRUE(create(other).ok());
  EXPECT_EQ(koordlet.calls, 1);
}

TEST(HookServerFileTest, BadRegistrationsNameFileKeyAndReason) {
  auto error = [](const std::string& text) {
    auto r = parseHookServerFile("k.json", text);
    return r.ok() ? "accepted" : std::string(r.status().message());
  };
  EXPECT_EQ(error("{"), "hook server registration k.json: not valid JSON");
  EXPECT_THAT(error(R"({"failure-policy": "Fail", "runtime-hooks": ["PreCreateContainer"]})"),
              HasSubstr("k.json: remote-endpoint: expected the hook server's Unix socket path"));
  EXPECT_THAT(error(R"({"remote-endpoint": "tcp://x", "runtime-hooks": ["PreCreateContainer"]})"),
              HasSubstr("k.json: remote-endpoint: expected a Unix socket endpoint"));
  EXPECT_THAT(
      error(
          R"({"remote-endpoint": "/k.sock", "failure-policy": "Panic", "runtime-hooks": ["PreCreateContainer"]})"),
      HasSubstr("k.json: failure-policy: expected \"Fail\" or \"Ignore\", got \"Panic\""));
  EXPECT_THAT(error(R"({"remote-endpoint": "/k.sock", "runtime-hooks": ["PreStopContainer"]})"),
              HasSubstr("k.json: runtime-hooks[0]: unknown runtime hook \"PreStopContainer\""));
  EXPECT_THAT(error(R"({"remote-endpoint": "/k.sock", "runtime-hook": []})"),
              HasSubstr("k.json: runtime-hook: unknown key"));
  auto ok = parseHookServerFile("koordlet.json",
                                R"({"remote-endpoint": "unix:///var/run/koordlet/koordlet.sock",
       "runtime-hooks": ["PreRunPodSandbox", "PostStopPodSandbox", "PreCreateContainer",
       "PreStartContainer", "PostStartContainer", "PostStopContainer", "PreUpdateContainerResources"]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->name, "hookserver/koordlet");
  EXPECT_EQ(ok->socket_path, "/var/run/koordlet/koordlet.sock");
  EXPECT_TRUE(ok->ignore_failures);
  EXPECT_EQ(ok->stages.size(), 7u);
}

// crihook's own protocol: what Koordinator's cannot say.
class CrihookServer final : public hv1::HookService::Service {
 public:
  grpc::Status Handle(grpc::ServerContext*, const hv1::HookRequest* req,
                      hv1::HookResponse* resp) override {
    last = *req;
    if (req->pod().config().annotations().count("deny")) {
      resp->set_decision(hv1::HookResponse::REJECT);
      resp->set_reject_code(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
      resp->set_reject_message("no free GPU");
      return grpc::Status::OK;
    }
    auto* a = resp->mutable_adjustment();
    auto* env = a->add_env();
    env->set_key("NVIDIA_VISIBLE_DEVICES");
    env->set_value("GPU-1234");
    auto* dev = a->add_devices();
    dev->set_container_path("/dev/nvidia0");
    dev->set_host_path("/dev/nvidia0");
    dev->set_permissions("rwm");
    auto* mount = a->add_mounts();
    mount->set_container_path("/usr/local/nvidia");
    mount->set_host_path("/opt/nvidia");
    mount->set_readonly(true);
    a->add_cdi_devices("nvidia.com/gpu=0");
    return grpc::Status::OK;
  }
  hv1::HookRequest last;
};

TEST_F(RemoteHooksTest, CrihookProtocolServerCanAddDevicesMountsAndCdiAndReject) {
  CrihookServer service;
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + dir_.file("gpu.sock"), grpc::InsecureServerCredentials());
  b.RegisterService(&service);
  auto server = b.BuildAndStart();
  Config config;
  HookConfig gpu;
  gpu.name = "gpu";
  gpu.endpoint = "unix://" + dir_.file("gpu.sock");
  gpu.stages = {"PreCreateContainer"};
  config.hooks = {gpu};
  startCrihook(config);

  ASSERT_TRUE(create(createRequest()).ok());
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime();
  ASSERT_EQ(seen.config().envs_size(), 1);
  EXPECT_EQ(seen.config().envs(0).value(), "GPU-1234");
  ASSERT_EQ(seen.config().devices_size(), 1);
  EXPECT_EQ(seen.config().devices(0).permissions(), "rwm");
  ASSERT_EQ(seen.config().mounts_size(), 1);
  EXPECT_TRUE(seen.config().mounts(0).readonly());
  ASSERT_EQ(seen.config().cdi_devices_size(), 1);
  EXPECT_EQ(seen.config().cdi_devices(0).name(), "nvidia.com/gpu=0");
  EXPECT_EQ(service.last.stage(), "PreCreateContainer");
  EXPECT_EQ(service.last.container().requested().metadata().name(), "trainer");
  EXPECT_GT(service.last.timeout_millis(), 0);

  auto denied = createRequest();
  (*denied.mutable_sandbox_config()->mutable_annotations())["deny"] = "1";
  denied.set_pod_sandbox_id("sb-2");
  grpc::Status s = create(denied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("hook gpu rejected PreCreateContainer: no free GPU"));
  server->Shutdown();
}

}  // namespace
}  // namespace crihook::testing
