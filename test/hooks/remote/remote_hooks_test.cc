// Remote hook servers through crihookd's proxy and chain: Koordinator's
// protocol (a runtime.v1alpha1 server written here, registered by files in a
// hookserver.d directory) and crihook's own.

#include "hooks/remote/remote_hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/text.h"
#include "cri-api/crihook_hook_v1.grpc.pb.h"
#include "cri-api/koordinator_runtime_v1alpha1.grpc.pb.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "hooks/hook_interceptor.h"
#include "hooks/hook_manager.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/koord_server.h"
#include "test/support/proxy_fixture.h"

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

  void startCrihook(Config config = {}, size_t stage_threads = kDefaultHookStages) {
    config.state_dir = "";
    config.hookserver_dir = dir_.file("hookserver.d");
    if (config.hookserver_timeout == Config{}.hookserver_timeout) config.hookserver_timeout = 300ms;
    auto m = HookManager::create(config, builtinHooks(), logger("hook"));
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
    interceptor_ = std::make_unique<HookInterceptor>(manager_->chains(), state_, logger("hook"),
                                                     stage_threads);
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

  // RunPodSandbox through crihookd; `seen`: the request as the runtime got it.
  void runSandbox(const v1::RunPodSandboxRequest& run, v1::RunPodSandboxRequest& seen) {
    auto stub = v1::RuntimeService::NewStub(proxyChannel());
    grpc::ClientContext ctx;
    v1::RunPodSandboxResponse resp;
    ASSERT_TRUE(stub->RunPodSandbox(&ctx, run, &resp).ok());
    ASSERT_TRUE(seen.ParseFromString(backend_.calls().back().request));
  }

  v1::CreateContainerRequest lastCreateSeenByRuntime() {
    v1::CreateContainerRequest seen;
    EXPECT_TRUE(seen.ParseFromString(backend_.calls().back().request));
    return seen;
  }

  bool waitForChain(size_t hooks) {
    return eventually([&] { return manager_->chains().get()->names().size() == hooks; });
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
  v1::RunPodSandboxRequest sandbox_seen;
  ASSERT_NO_FATAL_FAILURE(runSandbox(run, sandbox_seen));
  EXPECT_EQ(sandbox_seen.config().labels().at("koordinator.sh/qos"), "LS");
  EXPECT_EQ(sandbox_seen.config().labels().at("app"), "train");
  EXPECT_EQ(sandbox_seen.config().linux().cgroup_parent(), "/kubepods/burstable/pod-x");
  // The server echoed the pod's resources; koord-runtime-proxy takes none from
  // a pod-level answer, and the echo changed nothing anyway.
  EXPECT_EQ(sandbox_seen.config().linux().resources().cpu_shares(), 2048);

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
  EXPECT_EQ(c.container_meta().name(), "trainer");
  EXPECT_EQ(c.container_annotations().at("from"), "kubelet");
  // The pod's record from RunPodSandbox, with what the server itself decided then.
  EXPECT_EQ(c.pod_labels().at("koordinator.sh/qos"), "LS");
  // Its annotations too: koordlet reads the scheduler's device allocation there.
  ASSERT_EQ(c.pod_annotations().count("seen-by"), 1u);
  EXPECT_EQ(c.pod_annotations().at("seen-by"), "koord");
}

// The chain gives every hook a deadline; a hook run without one (a tool, a
// test) still asks its server, under a default deadline of its own.
TEST_F(RemoteHooksTest, AKoordinatorHookRunWithoutADeadlineStillAsksItsServer) {
  KoordServer koordlet(dir_.file("koordlet.sock"));
  koordlet.start();
  auto stage = koordinatorStage("PreRunPodSandbox");
  ASSERT_TRUE(stage.ok()) << stage.status();
  auto hook = makeKoordinatorHook("koordlet", dir_.file("koordlet.sock"), {*stage});
  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  run.mutable_config()->mutable_metadata()->set_namespace_("ml");
  HookInput in;
  in.method = LifecycleMethod::kRunPodSandbox;
  in.phase = Phase::kPre;
  in.request = &run;
  ASSERT_EQ(in.deadline, std::chrono::steady_clock::time_point::max());
  const HookDecision d = hook->run(in);
  EXPECT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  std::lock_guard lock(koordlet.mu);
  EXPECT_EQ(koordlet.pod_requests.size(), 1u);
}

// koordlet's hook server is a grpc-go server: crihookd's gRPC client
// (base/grpc_channel.h) against grpc-go itself (gocri koordhook, built from
// Debian's grpc-go), not only against the gRPC C++ servers of these tests.
TEST_F(RemoteHooksTest, AGrpcGoKoordinatorServersAnswersAndErrorsArrive) {
  ChildProcess go(GOCRI_BINARY, {"-endpoint", dir_.file("go.sock"), "koordhook"},
                  dir_.file("go.log"));
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir_.file("go.sock")); }, 10s));
  registerServer("go.json", dir_.file("go.sock"), "Fail");
  startCrihook();

  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  (*run.mutable_config()->mutable_labels())["app"] = "train";
  v1::RunPodSandboxRequest sandbox_seen;
  ASSERT_NO_FATAL_FAILURE(runSandbox(run, sandbox_seen));
  EXPECT_EQ(sandbox_seen.config().labels().at("go-hook"), "grpc-go");
  EXPECT_EQ(sandbox_seen.config().labels().at("app"), "train");

  v1::CreateContainerRequest req = createRequest();
  auto* env = req.mutable_config()->add_envs();
  env->set_key("PATH");
  env->set_value("/bin");
  ASSERT_TRUE(create(req).ok());
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime();
  ASSERT_EQ(seen.config().envs_size(), 2);
  EXPECT_EQ(seen.config().envs(0).key(), "PATH");
  EXPECT_EQ(seen.config().envs(1).key(), "GO_HOOK");
  EXPECT_EQ(seen.config().envs(1).value(), "grpc-go");
  EXPECT_EQ(seen.config().linux().resources().cpuset_cpus(), "0-1");

  // A pod the server refuses: its message, one line of ASCII (base/quote.h).
  v1::CreateContainerRequest refused = createRequest();
  refused.set_pod_sandbox_id("sb-refuse");
  refused.mutable_sandbox_config()->mutable_metadata()->set_name("refuse");
  grpc::Status s = create(refused);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook server " + dir_.file("go.sock") +
                        ": refused by the grpc-go hook server: pod geh??rt nicht hierher"));

  // A server slower than the hook timeout (300 ms here) is cut off.
  v1::CreateContainerRequest slow = createRequest();
  slow.set_pod_sandbox_id("sb-slow");
  slow.mutable_sandbox_config()->mutable_metadata()->set_name("slow");
  const auto start = std::chrono::steady_clock::now();
  s = create(slow);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // And the server is used again at once.
  EXPECT_TRUE(create(createRequest()).ok());
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
  EXPECT_TRUE(eventually([&] { return create(createRequest()).ok(); }));
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
  ASSERT_TRUE(eventually([&] {
    return manager_->chains().get()->subscribers(LifecycleMethod::kCreateContainer, Phase::kPre) ==
           0;
  }));
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(koordlet.calls, 1);

  // A broken edit keeps the last good registration. Each reload reads the
  // whole directory, so the one that shows a file written after the broken
  // edit has read the broken file too: that is the event to wait for.
  std::ofstream(dir_.file("hookserver.d/k.json")) << "{\"remote-endpoint\": ";
  registerServer("z.json", dir_.file("z.sock"), "Ignore");
  auto has_z = [&] {
    const auto names = manager_->chains().get()->names();
    return std::find(names.begin(), names.end(), "hookserver/z") != names.end();
  };
  ASSERT_TRUE(eventually(has_z));
  EXPECT_EQ(manager_->chains().get()->names(),
            (std::vector<std::string>{"hookserver/k", "hookserver/z"}));

  std::filesystem::remove(dir_.file("hookserver.d/k.json"));
  std::filesystem::remove(dir_.file("hookserver.d/z.json"));
  ASSERT_TRUE(waitForChain(0));
}

// A hookserver_dir that does not exist when crihookd starts is looked for;
// once made, its registrations count, and removing the whole directory
// removes its servers until it is made again.
TEST_F(RemoteHooksTest, AHookServerDirMadeRemovedAndMadeAgainIsFollowed) {
  std::filesystem::remove_all(dir_.file("hookserver.d"));
  startCrihook();
  manager_->watch();
  EXPECT_TRUE(manager_->chains().get()->names().empty());

  std::filesystem::create_directories(dir_.file("hookserver.d"));
  registerServer("k.json", dir_.file("k.sock"), "Ignore");
  ASSERT_TRUE(waitForChain(1));

  std::filesystem::remove_all(dir_.file("hookserver.d"));
  ASSERT_TRUE(waitForChain(0));

  std::filesystem::create_directories(dir_.file("hookserver.d"));
  registerServer("z.json", dir_.file("z.sock"), "Ignore");
  ASSERT_TRUE(waitForChain(1));
  EXPECT_EQ(manager_->chains().get()->names(), std::vector<std::string>{"hookserver/z"});
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

// A server that takes calls and never answers them (failure policy
// Ignore) holds the calls it subscribes to, each in a stage thread of its
// own: sixteen at once, none waiting for another, while a pod that opts out
// of hook servers and Version go by untouched. Its timeout is a minute here
// so that nothing times out on its own while the test looks.
TEST_F(RemoteHooksTest, AHungServerHoldsOnlyItsOwnCallsAndEachInParallel) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  koordlet.mode = KoordServer::Mode::kHold;
  registerServer("k.json", dir_.file("k.sock"), "Ignore");
  backend_.onUnary("/runtime.v1.RuntimeService/Version", [](FakeCall&, std::string* out) {
    v1::VersionResponse r;
    r.set_runtime_name("fake");
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  Config config;
  config.hookserver_timeout = 60s;
  startCrihook(config);
  ASSERT_TRUE(waitForChain(1));

  std::vector<std::thread> held;
  std::atomic<int> answered_ok{0};
  for (int i = 0; i < 16; ++i) {
    held.emplace_back([&, i] {
      auto req = createRequest();
      req.set_pod_sandbox_id(cat("sb-", i));
      auto stub = v1::RuntimeService::NewStub(proxyChannel());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 120s);
      v1::CreateContainerResponse resp;
      answered_ok += stub->CreateContainer(&ctx, req, &resp).ok();
    });
  }
  // All sixteen reach the server: none queued behind another's stage.
  EXPECT_TRUE(eventually([&] { return koordlet.held == 16; }, 30s)) << koordlet.held;

  // While it holds them: a pod labelled to skip hook servers, and Version.
  auto skip = createRequest({{kSkipHookServerLabel, "true"}});
  skip.set_pod_sandbox_id("sb-skip");
  EXPECT_TRUE(create(skip).ok());
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::VersionResponse version;
  EXPECT_TRUE(stub->Version(&ctx, v1::VersionRequest(), &version).ok());
  EXPECT_EQ(koordlet.held, 16);  // and the server still holds every one

  koordlet.release();
  for (auto& t : held) t.join();
  EXPECT_EQ(answered_ok, 16);
}

// With every stage thread held by a hung server, a call that no hook that
// may block concerns (a pod labelled to skip hook servers) runs where it
// arrives: it waits for no thread.
TEST_F(RemoteHooksTest, ACallNoBlockingHookConcernsWaitsForNoStageThread) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  koordlet.mode = KoordServer::Mode::kHold;
  registerServer("k.json", dir_.file("k.sock"), "Ignore");
  Config config;
  config.hookserver_timeout = 60s;
  startCrihook(config, 1);
  ASSERT_TRUE(waitForChain(1));
  grpc::Status first;
  std::thread held([&] { first = create(createRequest()); });
  ASSERT_TRUE(eventually([&] { return koordlet.held == 1; }, 30s));
  auto skip = createRequest({{kSkipHookServerLabel, "true"}});
  skip.set_pod_sandbox_id("sb-skip");
  EXPECT_TRUE(create(skip).ok());
  koordlet.release();
  held.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
}

// The same against grpc-go, as koordlet serves: sixteen pods its server
// takes 3 s to answer (gocri's "slow") are all answered within one answer's
// time and their 6 s hook timeout, so kubelet's 8 s deadline is never
// reached. Waves of four (the old four shared threads) would end the later
// waves at 6, 9 and 12 s: past the hook timeout, answered without the
// server's changes (Ignore), and past kubelet's deadline.
TEST_F(RemoteHooksTest, AGrpcGoServerSlowForSixteenPodsAnswersThemAllAtOnce) {
  ChildProcess go(GOCRI_BINARY, {"-endpoint", dir_.file("go.sock"), "koordhook"},
                  dir_.file("go.log"));
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir_.file("go.sock")); }, 10s));
  registerServer("go.json", dir_.file("go.sock"), "Ignore");
  Config config;
  config.hookserver_timeout = 6s;
  startCrihook(config);
  ASSERT_TRUE(waitForChain(1));
  std::vector<std::thread> calls;
  std::atomic<int> with_the_servers_answer{0};
  for (int i = 0; i < 16; ++i) {
    calls.emplace_back([&, i] {
      auto req = createRequest();
      req.set_pod_sandbox_id(cat("sb-", i));
      req.mutable_sandbox_config()->mutable_metadata()->set_name("slow");
      auto stub = v1::RuntimeService::NewStub(proxyChannel());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 8s);
      v1::CreateContainerResponse resp;
      grpc::Status s = stub->CreateContainer(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << i << ": " << s.error_message();
    });
  }
  for (auto& t : calls) t.join();
  for (const auto& call : backend_.calls()) {
    v1::CreateContainerRequest seen;
    if (!seen.ParseFromString(call.request)) continue;
    for (const auto& env : seen.config().envs()) with_the_servers_answer += env.key() == "GO_HOOK";
  }
  EXPECT_EQ(with_the_servers_answer, 16);
}

// Beyond its call slots, a server's calls wait for one no longer than their
// own deadline, and beyond its queue they are refused at once: the server
// is asked no more than its slots.
TEST_F(RemoteHooksTest, AServersCallsBeyondItsSlotsWaitTheirDeadlineOrAreRefused) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  koordlet.mode = KoordServer::Mode::kHold;
  auto stage = koordinatorStage("PreRunPodSandbox");
  ASSERT_TRUE(stage.ok()) << stage.status();
  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  auto input = [&](std::chrono::steady_clock::duration budget) {
    HookInput in;
    in.method = LifecycleMethod::kRunPodSandbox;
    in.phase = Phase::kPre;
    in.request = &run;
    in.deadline = std::chrono::steady_clock::now() + budget;
    return in;
  };
  for (size_t queue : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE(cat("queue ", queue));
    auto hook = makeKoordinatorHook("koordlet", dir_.file("k.sock"), {*stage}, {1, queue});
    const int before = koordlet.calls;
    std::thread first([&] { (void)hook->run(input(60s)); });
    ASSERT_TRUE(eventually([&] { return koordlet.held == 1; }, 30s));
    const HookDecision d = hook->run(input(queue == 0 ? 60s : 100ms));
    EXPECT_EQ(d.kind, HookDecision::Kind::kError);
    if (queue == 0) {
      EXPECT_EQ(d.status.code(), absl::StatusCode::kResourceExhausted) << d.status;
      EXPECT_THAT(d.status.message(), HasSubstr("1 calls in flight and 0 waiting"));
    } else {
      EXPECT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded) << d.status;
      EXPECT_THAT(d.status.message(), HasSubstr("none of its 1 calls in flight ended"));
    }
    EXPECT_EQ(koordlet.calls, before + 1);
    koordlet.release();
    first.join();
    koordlet.mode = KoordServer::Mode::kHold;
    koordlet.rearm();
  }
}

// A [[hook]] endpoint's workers and queue are its server's call slots: with
// one worker and no queue, a second call while the first is in flight is
// refused at once, naming the limit. The server here accepts a connection
// and never says a word.
TEST_F(RemoteHooksTest, AnEndpointHooksWorkersAndQueueBoundItsCallsInFlight) {
  const std::string socket = dir_.file("mute.sock");
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  Config config;
  HookConfig mute;
  mute.name = "mute";
  mute.endpoint = "unix://" + socket;
  mute.stages = {"PreCreateContainer"};
  mute.timeout = 60s;
  mute.workers = 1;
  mute.queue = 0;
  config.hooks = {mute};
  startCrihook(config);

  grpc::Status first;
  std::thread held([&] { first = create(createRequest()); });
  // Connected: the first call holds the one slot.
  pollfd pfd{listener, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 30000), 1);
  const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  auto second = createRequest();
  second.set_pod_sandbox_id("sb-2");
  grpc::Status s = create(second);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("1 calls in flight and 0 waiting"));
  ::close(conn);  // the first call fails on the closed connection
  ::close(listener);
  held.join();
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(backend_.callCount(kCreate), 0u);
}

// container_envs: the environment as the server wants it, applied to the
// container's list in its order.
TEST_F(RemoteHooksTest, KoordinatorEnvAnswerKeepsTheOrderSettingRemovingAndAppending) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.on_container = [](const koord::ContainerResourceHookRequest&,
                             koord::ContainerResourceHookResponse& resp) {
    auto& env = *resp.mutable_container_envs();
    env["B"] = "20";    // changed
    env.erase("C");     // removed
    env["ZNEW"] = "z";  // added
    env["ANEW"] = "a";  // added
  };
  koordlet.start();
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  auto req = createRequest();
  for (auto [k, v] : {std::pair{"PATH", "/bin"}, {"C", "3"}, {"B", "2"}, {"A", "1"}, {"B", "2b"}}) {
    auto* e = req.mutable_config()->add_envs();
    e->set_key(k);
    e->set_value(v);
  }
  ASSERT_TRUE(create(req).ok());
  const v1::CreateContainerRequest seen = lastCreateSeenByRuntime();
  std::vector<std::string> env;
  for (const auto& e : seen.config().envs()) env.push_back(e.key() + "=" + e.value());
  EXPECT_EQ(env,
            (std::vector<std::string>{"PATH=/bin", "B=20", "A=1", "B=20", "ANEW=a", "ZNEW=z"}));
  std::lock_guard lock(koordlet.mu);
  ASSERT_EQ(koordlet.container_requests.size(), 1u);
  const auto& sent = koordlet.container_requests[0].container_envs();
  EXPECT_EQ(sent.size(), 4u);
  EXPECT_EQ(sent.at("B"), "2b");  // a name given twice: its last value, as Go's map has it
}

// An empty container_envs (a server that predates it, or has nothing to say)
// leaves the environment alone: proto3 cannot tell empty from absent.
TEST_F(RemoteHooksTest, KoordinatorEmptyEnvAnswerChangesNothing) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.on_container = [](const koord::ContainerResourceHookRequest&,
                             koord::ContainerResourceHookResponse& resp) {
    resp.clear_container_envs();
    (*resp.mutable_container_annotations())["seen-by"] = "old-koordlet";
  };
  koordlet.start();
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  auto req = createRequest();
  auto* e = req.mutable_config()->add_envs();
  e->set_key("KEEP");
  e->set_value("me");
  ASSERT_TRUE(create(req).ok());
  auto seen = lastCreateSeenByRuntime();
  ASSERT_EQ(seen.config().envs_size(), 1);
  EXPECT_EQ(seen.config().envs(0).key(), "KEEP");
  EXPECT_EQ(seen.config().annotations().at("seen-by"), "old-koordlet");
}

// Which resource values of an answer are taken, as koord-runtime-proxy's
// updateResource() takes them; an empty cpuset is no opinion in crihook.
TEST_F(RemoteHooksTest, KoordinatorResourceAnswersAreTakenAsKoordRuntimeProxyTakesThem) {
  KoordServer koordlet(dir_.file("k.sock"));
  std::atomic<int> round{0};
  koordlet.on_container = [&round](const koord::ContainerResourceHookRequest&,
                                   koord::ContainerResourceHookResponse& resp) {
    auto* r = resp.mutable_container_resources();
    if (round == 0) {
      r->set_cpu_quota(0);               // zero: not specified
      r->set_memory_limit_in_bytes(-5);  // not positive: not taken
      r->set_memory_swap_limit_in_bytes(0);
      r->set_oom_score_adj(-1001);  // outside -1000..1000: not taken
      r->clear_hugepage_limits();   // hugepages: never taken
      r->add_hugepage_limits()->set_page_size("1GB");
      r->mutable_hugepage_limits(0)->set_limit(1 << 30);
      (*r->mutable_unified())["memory.low"] = "1048576";  // merged into what was sent
      r->clear_cpuset_cpus();                             // koord-runtime-proxy would clear it
      r->set_cpuset_mems("0");
    } else {
      r->set_cpu_quota(-1);
      r->set_cpu_period(200000);
      r->set_oom_score_adj(-998);
      r->set_memory_limit_in_bytes(int64_t{2} << 30);
      r->set_memory_swap_limit_in_bytes(int64_t{4} << 30);
      r->set_cpuset_cpus("1");
    }
  };
  koordlet.start();
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  auto req = createRequest();
  auto* sent = req.mutable_config()->mutable_linux()->mutable_resources();
  sent->set_cpuset_cpus("0-1");
  sent->set_cpu_quota(50000);
  sent->set_cpu_period(100000);
  sent->set_cpu_shares(512);
  sent->set_memory_limit_in_bytes(1 << 30);
  sent->set_oom_score_adj(1000);
  (*sent->mutable_unified())["memory.high"] = "max";
  auto* huge = sent->add_hugepage_limits();
  huge->set_page_size("2MB");
  huge->set_limit(4 << 20);

  ASSERT_TRUE(create(req).ok());
  auto r = lastCreateSeenByRuntime().config().linux().resources();
  EXPECT_EQ(r.cpu_quota(), 50000);
  EXPECT_EQ(r.cpu_period(), 100000);
  EXPECT_EQ(r.cpu_shares(), 512);
  EXPECT_EQ(r.memory_limit_in_bytes(), 1 << 30);
  EXPECT_EQ(r.memory_swap_limit_in_bytes(), 0);
  EXPECT_EQ(r.oom_score_adj(), 1000);
  ASSERT_EQ(r.hugepage_limits_size(), 1);
  EXPECT_EQ(r.hugepage_limits(0).page_size(), "2MB");
  EXPECT_EQ(r.unified().at("memory.high"), "max");
  EXPECT_EQ(r.unified().at("memory.low"), "1048576");
  EXPECT_EQ(r.cpuset_cpus(), "0-1");
  EXPECT_EQ(r.cpuset_mems(), "0");

  round = 1;
  ASSERT_TRUE(create(req).ok());
  r = lastCreateSeenByRuntime().config().linux().resources();
  EXPECT_EQ(r.cpu_quota(), -1);
  EXPECT_EQ(r.cpu_period(), 200000);
  EXPECT_EQ(r.oom_score_adj(), -998);
  EXPECT_EQ(r.memory_limit_in_bytes(), int64_t{2} << 30);
  EXPECT_EQ(r.memory_swap_limit_in_bytes(), int64_t{4} << 30);
  EXPECT_EQ(r.cpuset_cpus(), "1");
}

// pod_cgroup_parent in a container answer: the runtime reads it from
// CreateContainer's sandbox config.
TEST_F(RemoteHooksTest, KoordinatorPodCgroupParentOnCreateContainerReachesTheSandboxConfig) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.on_container = [](const koord::ContainerResourceHookRequest& req,
                             koord::ContainerResourceHookResponse& resp) {
    EXPECT_EQ(req.pod_cgroup_parent(), "/kubepods/besteffort/pod-1");
    resp.set_pod_cgroup_parent("/kubepods/koord-be/pod-1");
  };
  koordlet.start();
  registerServer("k.json", dir_.file("k.sock"), "Fail");
  startCrihook();
  auto req = createRequest();
  req.mutable_sandbox_config()->mutable_linux()->set_cgroup_parent("/kubepods/besteffort/pod-1");
  ASSERT_TRUE(create(req).ok());
  EXPECT_EQ(lastCreateSeenByRuntime().sandbox_config().linux().cgroup_parent(),
            "/kubepods/koord-be/pod-1");
}

// koordlet echoes everything it was sent: an echoed value is no decision, so
// it never conflicts with another server's change; two changes do.
TEST_F(RemoteHooksTest, EchoedValuesNeverConflictButTwoDifferentChangesDo) {
  KoordServer echo(dir_.file("echo.sock")), changer(dir_.file("changer.sock")),
      other(dir_.file("other.sock"));
  echo.on_container = [](const koord::ContainerResourceHookRequest&,
                         koord::ContainerResourceHookResponse&) {};
  changer.on_container = [](const koord::ContainerResourceHookRequest&,
                            koord::ContainerResourceHookResponse& resp) {
    resp.mutable_container_resources()->set_cpuset_cpus("4-5");
    (*resp.mutable_container_annotations())["from"] = "changer";
    (*resp.mutable_container_envs())["MODE"] = "fast";
  };
  other.on_container = [](const koord::ContainerResourceHookRequest&,
                          koord::ContainerResourceHookResponse& resp) {
    resp.mutable_container_resources()->set_cpuset_cpus("6-7");
  };
  echo.start();
  changer.start();
  other.start();
  registerServer("10-echo.json", dir_.file("echo.sock"), "Fail");
  registerServer("20-changer.json", dir_.file("changer.sock"), "Fail");
  startCrihook();
  auto req = createRequest();
  req.mutable_config()->mutable_linux()->mutable_resources()->set_cpuset_cpus("0-3");
  auto* e = req.mutable_config()->add_envs();
  e->set_key("MODE");
  e->set_value("slow");
  ASSERT_TRUE(create(req).ok());
  auto seen = lastCreateSeenByRuntime();
  EXPECT_EQ(seen.config().linux().resources().cpuset_cpus(), "4-5");
  EXPECT_EQ(seen.config().annotations().at("from"), "changer");
  ASSERT_EQ(seen.config().envs_size(), 1);
  EXPECT_EQ(seen.config().envs(0).value(), "fast");

  registerServer("30-other.json", dir_.file("other.sock"), "Fail");
  manager_->reload();
  grpc::Status s = create(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook hookserver/20-changer and hook hookserver/30-other "
                        "both set cpuset_cpus: \"4-5\" vs \"6-7\""));
}

TEST_F(RemoteHooksTest, KoordletRegistrationWithPreRemoveRunPodSandboxAndUnknownKeyIsCalled) {
  KoordServer koordlet(dir_.file("k.sock"));
  koordlet.start();
  std::ofstream(dir_.file("hookserver.d/koordlet.json"))
      << R"({"remote-endpoint": ")" << dir_.file("k.sock")
      << R"(", "failure-policy": "Ignore", "future-key": {"x": 1}, "runtime-hooks":
         ["PreRunPodSandbox", "PreCreateContainer", "PreRemoveRunPodSandbox", "PreFutureHook"]})";
  startCrihook();
  EXPECT_EQ(manager_->chains().get()->names(), std::vector<std::string>{"hookserver/koordlet"});
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(koordlet.calls, 1);
  EXPECT_EQ(lastCreateSeenByRuntime().config().annotations().at("seen-by"), "koord");
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

// [hooks.owners] decides a cpuset that a crihook hook and koordlet both
// set: koordlet's by default, the crihook hook's when the config says so.
TEST_F(RemoteHooksTest, TheConfiguredOwnerDecidesACpusetBothSidesSet) {
  KoordServer koordlet(dir_.file("koordlet.sock"));  // sets 2-3
  koordlet.start();
  registerServer("koordlet.json", dir_.file("koordlet.sock"), "Fail");
  Config config;
  HookConfig pin;
  pin.name = "pin";
  pin.builtin = "static";
  pin.settings_json = R"({"adjustment": {"cpuset_cpus": "6-7"}})";
  config.hooks = {pin};
  config.owners[static_cast<size_t>(OwnerClass::kCpuset)] = OwnerSide::kCrihook;
  startCrihook(config);
  ASSERT_TRUE(waitForChain(2));
  ASSERT_TRUE(create(createRequest()).ok());
  EXPECT_EQ(lastCreateSeenByRuntime().config().linux().resources().cpuset_cpus(), "6-7");
}

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
