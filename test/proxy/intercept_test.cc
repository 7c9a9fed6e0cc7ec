// The seam the hook framework plugs into: intercepted lifecycle calls are
// decoded, passed through the pre-stage (which may edit or reject them),
// forwarded, passed through the post-stage, and answered.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <future>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "proxy/intercept_stage.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr const char* kCreate = "/runtime.v1.RuntimeService/CreateContainer";
constexpr const char* kCreateV1alpha2 = "/runtime.v1alpha2.RuntimeService/CreateContainer";

// A stand-in for the hook chain: records what it saw, and does what the test
// tells it to.
class RecordingInterceptor : public Interceptor {
 public:
  std::function<absl::Status(InterceptedCall&)> on_pre = [](InterceptedCall&) {
    return absl::OkStatus();
  };
  std::chrono::milliseconds pre_delay{0};  // >0: answer later, from another thread

  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override {
    {
      char name[16] = {};
      ::pthread_getname_np(::pthread_self(), name, sizeof name);
      std::lock_guard lock(mu_);
      pre_calls.push_back({call->method, call->api, call->identity, call->deadline, name});
    }
    if (pre_delay.count() == 0) {
      done(on_pre(*call));
      return;
    }
    std::thread([this, call, done, delay = pre_delay] {
      std::this_thread::sleep_for(delay);
      done(on_pre(*call));
    }).detach();
  }

  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override {
    {
      std::lock_guard lock(mu_);
      post_calls.push_back({call->method, call->backend_status, call->identity,
                            call->response ? call->response->SerializeAsString() : std::string()});
    }
    done();
  }

  struct Pre {
    LifecycleMethod method;
    CriApi api;
    CallIdentity identity;
    std::chrono::steady_clock::time_point deadline;
    std::string thread;  // the name of the thread pre() was called on
  };
  struct Post {
    LifecycleMethod method;
    absl::Status status;
    CallIdentity identity;
    std::string response;
  };
  std::mutex mu_;
  std::vector<Pre> pre_calls;
  std::vector<Post> post_calls;
};

v1::CreateContainerRequest createRequest() {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id("sandbox-0123456789abcdef");
  req.mutable_sandbox_config()->mutable_metadata()->set_namespace_("ml");
  req.mutable_sandbox_config()->mutable_metadata()->set_name("train-0");
  req.mutable_config()->mutable_metadata()->set_name("trainer");
  auto* env = req.mutable_config()->add_envs();
  env->set_key("A");
  env->set_value("1");
  return req;
}

void serveCreate(FakeCriServer& backend, const std::string& method, std::string container_id) {
  backend.onUnary(method, [container_id](FakeCall&, std::string* out) {
    v1::CreateContainerResponse resp;
    resp.set_container_id(container_id);
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
}

v1::CreateContainerRequest lastCreateSeenByRuntime(const FakeCriServer& backend,
                                                   const std::string& method) {
  v1::CreateContainerRequest seen;
  for (const FakeCall& c : backend.calls()) {
    if (c.method == method) seen.ParseFromString(c.request);
  }
  return seen;
}

class InterceptTest : public ProxyFixture {
 protected:
  RecordingInterceptor hooks_;
};

TEST_F(InterceptTest, UnchangedRequestReachesTheRuntimeAsSentAndBothStagesRun) {
  serveCreate(backend_, kCreate, "ctr-1");
  backend_.start();
  startProxy(&hooks_);
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::CreateContainerResponse resp;
  v1::CreateContainerRequest req = createRequest();
  ASSERT_TRUE(stub->CreateContainer(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.container_id(), "ctr-1");

  ASSERT_EQ(backend_.callCount(kCreate), 1u);
  EXPECT_EQ(backend_.calls()[0].request, req.SerializeAsString())
      << "no edit: the caller's exact bytes";
  ASSERT_EQ(hooks_.pre_calls.size(), 1u);
  EXPECT_EQ(hooks_.pre_calls[0].method, LifecycleMethod::kCreateContainer);
  EXPECT_EQ(hooks_.pre_calls[0].api, CriApi::kV1);
  EXPECT_EQ(hooks_.pre_calls[0].identity.pod_namespace, "ml");
  EXPECT_EQ(hooks_.pre_calls[0].identity.pod_name, "train-0");
  EXPECT_EQ(hooks_.pre_calls[0].identity.container_name, "trainer");
  EXPECT_NE(hooks_.pre_calls[0].deadline, std::chrono::steady_clock::time_point::max());
  ASSERT_EQ(hooks_.post_calls.size(), 1u);
  EXPECT_TRUE(hooks_.post_calls[0].status.ok());
  EXPECT_EQ(hooks_.post_calls[0].response, resp.SerializeAsString());
  EXPECT_EQ(hooks_.post_calls[0].identity.container_id, "ctr-1");
}

TEST_F(InterceptTest, PreStageEditReachesTheRuntimeWithEnvOrderKept) {
  serveCreate(backend_, kCreate, "ctr-2");
  backend_.start();
  hooks_.on_pre = [](InterceptedCall& call) {
    auto& req = static_cast<v1::CreateContainerRequest&>(*call.request);
    auto* env = req.mutable_config()->add_envs();
    env->set_key("NVIDIA_VISIBLE_DEVICES");
    env->set_value("0,1");
    call.request_changed = true;
    return absl::OkStatus();
  };
  startProxy(&hooks_);
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime(backend_, kCreate);
  ASSERT_EQ(seen.config().envs_size(), 2);
  EXPECT_EQ(seen.config().envs(0).key(), "A");
  EXPECT_EQ(seen.config().envs(1).key(), "NVIDIA_VISIBLE_DEVICES");
  EXPECT_EQ(seen.config().envs(1).value(), "0,1");
}

TEST_F(InterceptTest, RejectionAnswersTheCallerAndTheRuntimeNeverSeesIt) {
  serveCreate(backend_, kCreate, "never");
  backend_.start();
  hooks_.on_pre = [](InterceptedCall&) {
    return absl::FailedPreconditionError("hook gpu: GPU minor 3 is not on this node");
  };
  startProxy(&hooks_);
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  grpc::Status s = stub->CreateContainer(&ctx, createRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "hook gpu: GPU minor 3 is not on this node");
  EXPECT_EQ(backend_.callCount(kCreate), 0u);
  EXPECT_TRUE(hooks_.post_calls.empty());
}

TEST_F(InterceptTest, RuntimeErrorReachesCallerAndPostStageSeesIt) {
  backend_.onUnary(kCreate, [](FakeCall&, std::string*) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "name \"trainer\" is reserved");
  });
  backend_.start();
  startProxy(&hooks_);
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  grpc::Status s = stub->CreateContainer(&ctx, createRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(s.error_message(), "name \"trainer\" is reserved");
  ASSERT_EQ(hooks_.post_calls.size(), 1u);
  EXPECT_EQ(hooks_.post_calls[0].status.code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(InterceptTest, V1alpha2CallIsInterceptedAndForwardedOnItsOwnPath) {
  serveCreate(backend_, kCreateV1alpha2, "ctr-old");
  backend_.start();
  hooks_.on_pre = [](InterceptedCall& call) {
    auto& req = static_cast<v1::CreateContainerRequest&>(*call.request);
    auto* d = req.mutable_config()->add_devices();
    d->set_host_path("/dev/nvidia0");
    d->set_container_path("/dev/nvidia0");
    d->set_permissions("rw");
    call.request_changed = true;
    return absl::OkStatus();
  };
  startProxy(&hooks_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  std::string reply;
  grpc::Status s = genericUnary(proxyChannel(), &ctx, kCreateV1alpha2,
                                createRequest().SerializeAsString(), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::CreateContainerResponse resp;
  ASSERT_TRUE(resp.ParseFromString(reply));
  EXPECT_EQ(resp.container_id(), "ctr-old");
  ASSERT_EQ(hooks_.pre_calls.size(), 1u);
  EXPECT_EQ(hooks_.pre_calls[0].api, CriApi::kV1alpha2);
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime(backend_, kCreateV1alpha2);
  ASSERT_EQ(seen.config().devices_size(), 1);
  EXPECT_EQ(seen.config().devices(0).host_path(), "/dev/nvidia0");
}

TEST_F(InterceptTest, SlowStageDoesNotHoldUpOtherCalls) {
  serveCreate(backend_, kCreate, "ctr-slow");
  backend_.onUnary("/runtime.v1.RuntimeService/Version", [](FakeCall&, std::string* out) {
    *out = "";
    return grpc::Status::OK;
  });
  backend_.start();
  hooks_.pre_delay = 400ms;
  startProxy(&hooks_);
  auto channel = proxyChannel();  // one kubelet connection for both calls
  auto slow = std::async(std::launch::async, [&] {
    auto stub = v1::RuntimeService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    return stub->CreateContainer(&ctx, createRequest(), &resp);
  });
  // The slow call is in its stage.
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(hooks_.mu_);
    return !hooks_.pre_calls.empty();
  }));
  auto stub = v1::RuntimeService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::VersionResponse v;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(stub->Version(&ctx, v1::VersionRequest(), &v).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 300ms)
      << "a waiting hook must not block the event loop";
  EXPECT_TRUE(slow.get().ok());
}

// A large request is decoded, staged and encoded again off the event loop
// ("decode" threads): while its pre stage holds its thread, Version on
// another connection of the same (single) loop is answered. A small one
// stays on its loop. Before, a 14.7 MB RunPodSandbox held its loop for the
// decode and every connection on it waited.
TEST_F(InterceptTest, ALargeRequestsStageRunsOffTheLoopAndHoldsNoOtherCall) {
  serveCreate(backend_, kCreate, "ctr-big");
  backend_.onUnary("/runtime.v1.RuntimeService/Version", [](FakeCall&, std::string* out) {
    *out = v1::VersionResponse().SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  hooks_.on_pre = [released](InterceptedCall& call) {
    auto& req = static_cast<v1::CreateContainerRequest&>(*call.request);
    if (req.config().annotations_size() > 0) released.wait();  // the large one
    (*req.mutable_config()->mutable_annotations())["seen"] = "1";
    call.request_changed = true;
    return absl::OkStatus();
  };
  Config config;
  config.workers = 1;
  startProxy(&hooks_, config);

  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  {
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  }
  v1::CreateContainerRequest big = createRequest();
  for (int i = 0; i < 200; ++i)
    (*big.mutable_config()->mutable_annotations())[cat("a", i)] = std::string(1024, 'x');
  ASSERT_GE(big.ByteSizeLong(), relay::kDecodeOffLoopBytes);
  grpc::Status big_status;
  std::thread big_call([&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    v1::CreateContainerResponse resp;
    big_status = stub->CreateContainer(&ctx, big, &resp);
  });
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lock(hooks_.mu_);
        return hooks_.pre_calls.size() == 2;
      },
      30s));
  // Its stage holds its thread; the loop serves another connection.
  auto other = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::VersionResponse version;
  EXPECT_TRUE(other->Version(&ctx, v1::VersionRequest(), &version).ok());
  release.set_value();
  big_call.join();
  ASSERT_TRUE(big_status.ok()) << big_status.error_message();
  {
    std::lock_guard lock(hooks_.mu_);
    EXPECT_NE(hooks_.pre_calls[0].thread, "decode");
    EXPECT_EQ(hooks_.pre_calls[1].thread, "decode");
  }
  // Encoded again off the loop too: the runtime got the edit and all of it.
  v1::CreateContainerRequest seen = lastCreateSeenByRuntime(backend_, kCreate);
  EXPECT_EQ(seen.config().annotations().at("seen"), "1");
  EXPECT_EQ(seen.config().annotations_size(), 201);
}

TEST_F(InterceptTest, DeadlineSpentInThePreStageIsAnsweredByCrihookdAndNeverForwarded) {
  // A caller that does not enforce its own deadline (a raw HTTP/2 client
  // sending grpc-timeout: 300 ms) and a pre-stage that takes 1.5 s: only
  // crihookd can answer DEADLINE_EXCEEDED here, and it must, instead of
  // forwarding a call whose time is up. The runtime is a raw HTTP/2 server
  // that counts every stream it receives, in order.
  RawH2Backend runtime(dir_.file("backend.sock"));
  hooks_.pre_delay = 1500ms;
  startProxy(&hooks_);
  RawH2Client kubelet(dir_.file("crihook.sock"));
  RawHeaders headers = RawH2Client::grpcHeaders(kCreate);
  headers.emplace_back("grpc-timeout", "300m");
  const auto t0 = std::chrono::steady_clock::now();
  RawH2Result r = kubelet.call(headers, grpcFrame(createRequest().SerializeAsString()));
  ASSERT_TRUE(r.closed);
  EXPECT_EQ(r.grpc_status, static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_EQ(r.grpc_message, "crihookd: deadline exceeded in the pre-stage hooks");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1500ms) << "answered before the stage ended";
  {
    std::lock_guard lock(hooks_.mu_);
    EXPECT_EQ(hooks_.pre_calls.size(), 1u);
    EXPECT_TRUE(hooks_.post_calls.empty()) << "a post stage for a call the runtime never got";
  }
  // Had crihookd forwarded the expired call, it would have gone to the
  // runtime before this one (one thread, one runtime connection, in order):
  // once this one is answered, the runtime has seen exactly one stream.
  RawH2Result echo =
      kubelet.call(RawH2Client::grpcHeaders("/runtime.v1.RuntimeService/Echo"), grpcFrame("ping"));
  ASSERT_TRUE(echo.closed);
  EXPECT_EQ(echo.grpc_status, 0);
  EXPECT_EQ(runtime.streams(), 1) << "the expired CreateContainer reached the runtime";
}

TEST_F(InterceptTest, RemainingDeadlineIsForwarded) {
  // The pre-stage takes 2 s of a 10 s deadline: the runtime's deadline is
  // the caller's (within 1 s), not 2 s past it, as it would be were the
  // caller's whole timeout forwarded after the stage.
  std::promise<std::chrono::system_clock::time_point> runtime_deadline;
  backend_.onUnary(kCreate, [&](FakeCall& call, std::string* out) {
    runtime_deadline.set_value(call.deadline);
    *out = "";
    return grpc::Status::OK;
  });
  backend_.start();
  hooks_.pre_delay = 2000ms;
  startProxy(&hooks_);
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  const auto deadline = std::chrono::system_clock::now() + 10s;
  ctx.set_deadline(deadline);
  v1::CreateContainerResponse resp;
  ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(
                        runtime_deadline.get_future().get() - deadline)
                        .count();
  EXPECT_LE(late, 1000) << "ms: the runtime got more than what was left";
  EXPECT_GE(late, -1000) << "ms";
}

TEST_F(InterceptTest, RuntimeDyingMidCallAnswersUnavailableAndThePostStageSeesIt) {
  // docs/operations.md: a runtime that goes away fails the calls it had with
  // UNAVAILABLE. It dies (its connection gone, no GOAWAY nor RST_STREAM)
  // while it holds an intercepted call.
  std::promise<void> started;
  backend_.onUnary(kCreate, [&](FakeCall& call, std::string*) {
    started.set_value();
    eventually([&] { return call.cancelled(); }, 10s);
    return grpc::Status(grpc::StatusCode::INTERNAL, "fake: should have been cut off");
  });
  backend_.start();
  startProxy(&hooks_);
  auto created = std::async(std::launch::async, [&] {
    auto stub = v1::RuntimeService::NewStub(proxyChannel());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 20s);
    v1::CreateContainerResponse resp;
    return stub->CreateContainer(&ctx, createRequest(), &resp);
  });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_GE(backend_.dropConnections(), 1);
  grpc::Status s = created.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("backend connection lost"));
  std::lock_guard lock(hooks_.mu_);
  ASSERT_EQ(hooks_.post_calls.size(), 1u);
  EXPECT_EQ(hooks_.post_calls[0].status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(InterceptTest, MalformedRequestIsRejectedNamingTheMethod) {
  serveCreate(backend_, kCreate, "x");
  backend_.start();
  startProxy(&hooks_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  std::string reply;
  grpc::Status s =
      genericUnary(proxyChannel(), &ctx, kCreate, std::string("\x0a\xff\xff\xff", 4), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("CreateContainer"));
  EXPECT_THAT(s.error_message(), HasSubstr("cannot decode runtime.v1.CreateContainerRequest"));
  EXPECT_EQ(backend_.callCount(kCreate), 0u);
}

}  // namespace
}  // namespace crihook::testing
