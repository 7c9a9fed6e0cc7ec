// End to end, NRI's wire: crihook's NRI plugin connection (nri/
// plugin_connection.h) against the real containerd 1.7 from Debian 13 with
// NRI on (test/e2e/containerd17.sh fetches it into a cache; never
// installed). The plugin registers, answers Configure (every event) and
// Synchronize, records every event of a whole pod lifecycle made with CRI
// calls straight to containerd, and answers CreateContainer with an env
// adjustment the container must see. What the events mean to crihook's hooks
// is not tested here: only that crihook speaks NRI as containerd does.
//
// Needs what the other e2e suites need, plus deb.debian.org on the first run
// (the cache: CRIHOOK_CONTAINERD17_CACHE, default
// /var/cache/crihook-test/containerd17). Skipped without them unless
// CRIHOOK_E2E_REQUIRED is truthy, where it fails.

#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "base/text.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "nri/front.h"
#include "nri/plugin_connection.h"
#include "test/support/child_process.h"
#include "test/support/cri_pods.h"
#include "test/support/e2e_env.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
namespace api = ::nri::pkg::api::v1alpha1;
using namespace std::chrono_literals;

// What the plugin saw, in order: "Configure", "Synchronize",
// "CreateContainer <pod>/<container>", "StateChange RUN_POD_SANDBOX <pod>", ….
struct Seen {
  std::mutex mu;
  std::vector<std::string> calls;
  void add(std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(std::move(s));
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

class NriWireE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    CRIHOOK_E2E_SKIP_UNLESS_MACHINE_HAS_ALL();
    std::string containerd;
    CRIHOOK_E2E_CONTAINERD17_OR_SKIP(containerd);
    const std::string scripts = CRIHOOK_SOURCE_DIR "/test/e2e/";
    char tmpl[] = "/tmp/crihook-nri-e2e-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    runShellOrThrow(scripts + "make-busybox-image.sh " + dir_ + "/busybox.tar " + kE2eImage +
                    " 2>&1");
    containerd_ = startGuardedDaemon(guard_, scripts + "containerd-private.sh",
                                     {dir_ + "/ctd", kE2eImage, dir_ + "/busybox.tar", containerd},
                                     dir_ + "/ctd-start.log", 120s);
    ASSERT_TRUE(waitForFile(dir_ + "/ctd/nri.sock", 10s));
    runtime_ = v1::RuntimeService::NewStub(unixChannel(dir_ + "/ctd/containerd.sock"));
    io_thread_ = std::thread([this] { io_->run(); });
  }

  void TearDown() override {
    if (conn_)
      boost::asio::post(*io_, [c = conn_] { c->close(absl::CancelledError("test done")); });
    work_.reset();
    if (io_thread_.joinable()) io_thread_.join();
    if (containerd_ > 0) {
      terminateDaemon(containerd_, 5s);
    }
    guard_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Connects the plugin: events recorded into seen_; CreateContainer gets
  // an env adjustment. Returns the registration's result.
  absl::Status connect() {
    nri::PluginConnection::Callbacks cb;
    cb.on_call = [this](std::string_view method, std::string payload,
                        std::chrono::steady_clock::time_point, nri::Reply reply) {
      if (method == "Configure") {
        api::ConfigureRequest req;
        req.ParseFromString(payload);
        seen_.add(cat("Configure ", req.runtime_name()));
        api::ConfigureResponse resp;
        resp.set_events(0x7ff);  // every event of NRI 0.6.1
        return reply(absl::OkStatus(), resp.SerializeAsString());
      }
      if (method == "Synchronize") {
        seen_.add("Synchronize");
        return reply(absl::OkStatus(), api::SynchronizeResponse().SerializeAsString());
      }
      if (method == "CreateContainer") {
        api::CreateContainerRequest req;
        req.ParseFromString(payload);
        seen_.add(cat("CreateContainer ", req.pod().name(), "/", req.container().name()));
        api::CreateContainerResponse resp;
        auto* env = resp.mutable_adjust()->add_env();
        env->set_key("CRIHOOK_NRI");
        env->set_value("from-the-plugin");
        return reply(absl::OkStatus(), resp.SerializeAsString());
      }
      if (method == "StopContainer") {
        api::StopContainerRequest req;
        req.ParseFromString(payload);
        seen_.add(cat("StopContainer ", req.container().name()));
        return reply(absl::OkStatus(), api::StopContainerResponse().SerializeAsString());
      }
      if (method == "UpdateContainer") {
        seen_.add("UpdateContainer");
        return reply(absl::OkStatus(), api::UpdateContainerResponse().SerializeAsString());
      }
      if (method == "StateChange") {
        api::StateChangeEvent ev;
        ev.ParseFromString(payload);
        seen_.add(cat("StateChange ", api::Event_Name(ev.event()), " ", ev.pod().name(),
                      ev.has_container() ? "/" + ev.container().name() : std::string()));
        return reply(absl::OkStatus(), api::Empty().SerializeAsString());
      }
      reply(absl::UnimplementedError(cat("method ", method)), {});
    };
    cb.on_closed = [this](const absl::Status& why) { seen_.add(cat("closed ", why.ToString())); };
    nri::PluginConnection::Options options;
    options.socket_path = dir_ + "/ctd/nri.sock";
    options.identity = {"crihook-e2e", "10"};
    conn_ = std::make_shared<nri::PluginConnection>(io_, options, cb);
    std::promise<absl::Status> registered;
    boost::asio::post(*io_, [this, &registered] {
      conn_->start([&registered](const absl::Status& st) { registered.set_value(st); });
    });
    auto future = registered.get_future();
    if (future.wait_for(10s) != std::future_status::ready)
      return absl::DeadlineExceededError("no registration result");
    return future.get();
  }

  bool waitForCall(const std::string& call, std::chrono::milliseconds timeout) {
    return eventually(
        [&] {
          for (const auto& c : seen_.all())
            if (c == call) return true;
          return false;
        },
        timeout);
  }

  v1::PodSandboxConfig podConfig(const std::string& name) {
    return e2ePodConfig(name, dir_ + "/logs");
  }

  std::string dir_;
  pid_t containerd_ = -1;
  std::unique_ptr<ChildProcess> guard_;
  std::unique_ptr<v1::RuntimeService::Stub> runtime_;
  std::shared_ptr<boost::asio::io_context> io_ = std::make_shared<boost::asio::io_context>();
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_->get_executor()};
  std::thread io_thread_;
  std::shared_ptr<nri::PluginConnection> conn_;
  Seen seen_;
};

TEST_F(NriWireE2E, APodLifecycleReachesThePluginAndItsAdjustmentTheContainer) {
  ASSERT_TRUE(connect().ok());
  ASSERT_TRUE(waitForCall("Synchronize", 10s)) << "containerd synchronises an external plugin";

  grpc::ClientContext c_run;
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("nri-pod");
  v1::RunPodSandboxResponse ran;
  ASSERT_TRUE(runtime_->RunPodSandbox(&c_run, run, &ran).ok());
  const std::string pod = ran.pod_sandbox_id();

  grpc::ClientContext c_create;
  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id(pod);
  *create.mutable_sandbox_config() = run.config();
  create.mutable_config()->mutable_metadata()->set_name("box");
  create.mutable_config()->mutable_image()->set_image(kE2eImage);
  create.mutable_config()->add_command("sleep");
  create.mutable_config()->add_args("300");
  auto* env = create.mutable_config()->add_envs();
  env->set_key("FROM_KUBELET");
  env->set_value("yes");
  create.mutable_config()->set_log_path("box.log");
  v1::CreateContainerResponse created;
  auto st = runtime_->CreateContainer(&c_create, create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string ctr = created.container_id();
  grpc::ClientContext c_start;
  v1::StartContainerRequest start;
  start.set_container_id(ctr);
  v1::StartContainerResponse started;
  ASSERT_TRUE(runtime_->StartContainer(&c_start, start, &started).ok());

  grpc::ClientContext c_exec;
  v1::ExecSyncRequest exec;
  exec.set_container_id(ctr);
  exec.add_cmd("sh");
  exec.add_cmd("-c");
  exec.add_cmd("echo $FROM_KUBELET $CRIHOOK_NRI");
  exec.set_timeout(20);
  v1::ExecSyncResponse out;
  ASSERT_TRUE(runtime_->ExecSync(&c_exec, exec, &out).ok());
  EXPECT_EQ(out.stdout(), "yes from-the-plugin\n") << "the plugin's env, kubelet's kept";

  grpc::ClientContext c_stop, c_rm;
  v1::StopContainerRequest stop;
  stop.set_container_id(ctr);
  v1::StopContainerResponse stopped;
  ASSERT_TRUE(runtime_->StopContainer(&c_stop, stop, &stopped).ok());
  v1::RemoveContainerRequest rm;
  rm.set_container_id(ctr);
  v1::RemoveContainerResponse removed;
  ASSERT_TRUE(runtime_->RemoveContainer(&c_rm, rm, &removed).ok());
  ASSERT_TRUE(stopAndRemovePod(*runtime_, pod).ok());
  ASSERT_TRUE(waitForCall("StateChange REMOVE_POD_SANDBOX nri-pod", 10s));

  const std::vector<std::string> expected = {
      "Configure containerd",
      "Synchronize",
      "StateChange RUN_POD_SANDBOX nri-pod",
      "CreateContainer nri-pod/box",
      "StateChange POST_CREATE_CONTAINER nri-pod/box",
      "StateChange START_CONTAINER nri-pod/box",
      "StateChange POST_START_CONTAINER nri-pod/box",
      "StopContainer box",
      "StateChange REMOVE_CONTAINER nri-pod/box",
      "StateChange STOP_POD_SANDBOX nri-pod",
      "StateChange REMOVE_POD_SANDBOX nri-pod",
  };
  EXPECT_EQ(seen_.all(), expected);
}

// What a hook chain would do, recorded: each stage with the call's method
// and who it is about; CreateContainer gets an env var, an annotation and
// a device node; StartContainer of a container named "refused" is refused.
class RecordingInterceptor final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override {
    seen.add(cat("pre ", methodName(call->method), " ", call->identity.pod_name,
                 call->identity.container_name.empty() ? "" : "/" + call->identity.container_name));
    if (call->method == LifecycleMethod::kCreateContainer) {
      auto& req = static_cast<v1::CreateContainerRequest&>(*call->request);
      auto* env = req.mutable_config()->add_envs();
      env->set_key("CRIHOOK_FRONT");
      env->set_value("from-a-hook");
      (*req.mutable_config()->mutable_annotations())["crihook.io/seen"] = "yes";
      auto* dev = req.mutable_config()->add_devices();
      dev->set_container_path("/dev/crihook-null");
      dev->set_host_path("/dev/null");
      dev->set_permissions("rwm");
      call->request_changed = true;
    }
    if (call->method == LifecycleMethod::kStartContainer &&
        call->identity.container_id == refuse_id)
      return done(absl::FailedPreconditionError("the test refuses this start"));
    done(absl::OkStatus());
  }
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override {
    seen.add(cat("post ", methodName(call->method), " ",
                 call->identity.sandbox_id.empty() ? "" : "sandbox",
                 call->identity.container_id.empty() ? "" : " container"));
    done();
  }
  Seen seen;
  std::string refuse_id;
};

TEST_F(NriWireE2E, TheFrontDrivesTheSeamFromNriEventsAndItsAdjustmentReachesTheContainer) {
  RecordingInterceptor hooks;
  nri::Front::Options options;
  options.socket_path = dir_ + "/ctd/nri.sock";
  options.identity = {"crihook-front", "10"};
  auto log =
      std::make_shared<spdlog::logger>("nri", std::make_shared<spdlog::sinks::null_sink_mt>());
  nri::Front front(hooks, options, log);
  front.start();
  ASSERT_TRUE(eventually([&] { return front.registered(); }));

  grpc::ClientContext c_run;
  v1::RunPodSandboxRequest run;
  *run.mutable_config() = podConfig("front-pod");
  v1::RunPodSandboxResponse ran;
  ASSERT_TRUE(runtime_->RunPodSandbox(&c_run, run, &ran).ok());
  const std::string pod = ran.pod_sandbox_id();
  auto create = [&](const std::string& name) {
    grpc::ClientContext ctx;
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id(pod);
    *req.mutable_sandbox_config() = run.config();
    req.mutable_config()->mutable_metadata()->set_name(name);
    req.mutable_config()->mutable_image()->set_image(kE2eImage);
    req.mutable_config()->add_command("sleep");
    req.mutable_config()->add_args("300");
    req.mutable_config()->set_log_path(name + ".log");
    v1::CreateContainerResponse resp;
    auto st = runtime_->CreateContainer(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.container_id();
  };
  const std::string box = create("box");
  grpc::ClientContext c_start;
  v1::StartContainerRequest start;
  start.set_container_id(box);
  v1::StartContainerResponse started;
  ASSERT_TRUE(runtime_->StartContainer(&c_start, start, &started).ok());

  grpc::ClientContext c_exec;
  v1::ExecSyncRequest exec;
  exec.set_container_id(box);
  exec.add_cmd("sh");
  exec.add_cmd("-c");
  exec.add_cmd(
      "echo $CRIHOOK_FRONT; stat -c '%t:%T' /dev/crihook-null; echo x > /dev/crihook-null && echo "
      "written");
  exec.set_timeout(20);
  v1::ExecSyncResponse out;
  ASSERT_TRUE(runtime_->ExecSync(&c_exec, exec, &out).ok());
  EXPECT_EQ(out.stdout(), "from-a-hook\n1:3\nwritten\n") << out.stderr();
  grpc::ClientContext c_status;
  v1::ContainerStatusRequest status_req;
  status_req.set_container_id(box);
  status_req.set_verbose(true);  // the OCI spec, where NRI puts annotations
  v1::ContainerStatusResponse status;
  ASSERT_TRUE(runtime_->ContainerStatus(&c_status, status_req, &status).ok());
  ASSERT_TRUE(status.info().count("info"));
  EXPECT_NE(status.info().at("info").find(R"("crihook.io/seen":"yes")"), std::string::npos);

  // A start the hooks refuse fails the CRI call with their status.
  const std::string refused = create("refused");
  hooks.refuse_id = refused;
  grpc::ClientContext c_start2;
  v1::StartContainerRequest start2;
  start2.set_container_id(refused);
  auto st = runtime_->StartContainer(&c_start2, start2, &started);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("the test refuses this start"), std::string::npos)
      << st.error_message();

  ASSERT_TRUE(stopAndRemovePod(*runtime_, pod).ok());
  eventually([&] {
    auto all = hooks.seen.all();
    return !all.empty() && all.back().rfind("post RemovePodSandbox", 0) == 0;
  });
  const std::vector<std::string> expected = {
      "pre RunPodSandbox front-pod",
      "post RunPodSandbox sandbox",
      "pre CreateContainer front-pod/box",
      "post CreateContainer sandbox container",
      "pre StartContainer ",
      "post StartContainer  container",
      "pre CreateContainer front-pod/refused",
      "post CreateContainer sandbox container",
      "pre StartContainer ",
      "pre StopContainer ",
      "post StopContainer  container",
      "pre StopContainer ",
      "post StopContainer  container",
      "pre StopPodSandbox ",
      "post StopPodSandbox sandbox",
      "pre RemoveContainer ",
      "post RemoveContainer  container",
      "pre RemoveContainer ",
      "post RemoveContainer  container",
      "pre RemovePodSandbox ",
      "post RemovePodSandbox sandbox",
  };
  EXPECT_EQ(hooks.seen.all(), expected);
  EXPECT_EQ(front.notApplied(), 0u);
  front.stop();
}

}  // namespace
}  // namespace crihook::testing
