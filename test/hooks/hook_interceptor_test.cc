// The hook chain driving crihookd's interception seam, end to end through
// the proxy against the fake runtime.

#include "hooks/hook_interceptor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "base/quote.h"
#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/proxy_fixture.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr const char* kCreate = "/runtime.v1.RuntimeService/CreateContainer";
constexpr const char* kUpdate = "/runtime.v1.RuntimeService/UpdateContainerResources";
constexpr const char* kStart = "/runtime.v1.RuntimeService/StartContainer";
constexpr const char* kRemove = "/runtime.v1.RuntimeService/RemoveContainer";

// Remembers what a StartContainer hook was told about the container.
class StartWatcher : public Hook {
 public:
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return m == LifecycleMethod::kStartContainer && p == Phase::kPre;
  }
  bool runsInline() const override { return true; }
  HookDecision run(const HookInput& in) override {
    std::lock_guard lock(mu);
    seen = in.container;
    pod = in.pod;
    topology = in.topology;
    return HookDecision::proceed();
  }
  std::mutex mu;
  std::shared_ptr<const hook::v1::ContainerRecord> seen;
  std::shared_ptr<const hook::v1::PodRecord> pod;
  std::shared_ptr<const topology::Snapshot> topology;

 private:
  std::string name_ = "watcher";
};

// A GPU-like hook: gives every container a device, a mount, an env var,
// a cpuset and every other resource an adjustment can hold (but CPU shares),
// and refuses pods annotated "deny".
class DeviceHook : public Hook {
 public:
  explicit DeviceHook(bool inline_) : inline_(inline_) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
  }
  bool runsInline() const override { return inline_; }
  HookDecision run(const HookInput& in) override {
    const auto& req = static_cast<const v1::CreateContainerRequest&>(*in.request);
    if (req.sandbox_config().annotations().count("deny")) {
      // Echoes what it was given, as hooks do (and a 10 MiB id once made a
      // 10 MiB message that never reached the caller).
      return HookDecision::reject(absl::FailedPreconditionError(
          cat("GPU 3 is not on this node (sandbox ", req.pod_sandbox_id(), ")")));
    }
    Adjustment a;
    a.env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
    a.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
    a.mounts = {{"/usr/local/nvidia", "/opt/nvidia", true, 0}};
    a.cpuset_cpus = "8-15";
    a.cpuset_mems = "1";
    a.cpu_quota = -1;
    a.cpu_period = 50000;
    a.memory_limit_bytes = int64_t{8} << 30;
    a.memory_swap_limit_bytes = int64_t{16} << 30;
    a.oom_score_adj = -500;
    a.hugepage_limits = {{"2MB", uint64_t{1} << 30}};
    a.unified = {{"memory.high", "6G"}};
    return HookDecision::proceed(a);
  }

 private:
  std::string name_ = "gpu";
  bool inline_;
};

class HookInterceptorTest : public ProxyFixture, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    chain_->add(std::make_shared<DeviceHook>(GetParam()), {});
    chain_->add(watcher_, {});
    backend_.onUnary(kCreate, [](FakeCall&, std::string* out) {
      v1::CreateContainerResponse r;
      r.set_container_id("ctr-1");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
    for (const char* m : {kUpdate, kStart, kRemove}) {
      backend_.onUnary(m, [](FakeCall&, std::string* out) {
        *out = "";
        return grpc::Status::OK;
      });
    }
    backend_.start();
    ASSERT_TRUE(state_.load().ok());
    startProxy(hooks_.get());
  }
  void TearDown() override { stopProxy(); }

  v1::CreateContainerRequest createRequest(bool deny = false) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb");
    req.mutable_sandbox_config()->mutable_metadata()->set_name("train-0");
    req.mutable_sandbox_config()->mutable_metadata()->set_namespace_("ml");
    if (deny) (*req.mutable_sandbox_config()->mutable_annotations())["deny"] = "1";
    req.mutable_config()->mutable_metadata()->set_name("trainer");
    return req;
  }

  void call(const char* method, const google::protobuf::Message& req) {
    grpc::ClientContext ctx;
    std::string reply;
    ASSERT_TRUE(genericUnary(proxyChannel(), &ctx, method, req.SerializeAsString(), &reply).ok())
        << method;
  }

  std::shared_ptr<HookChain> chain_ = std::make_shared<HookChain>(logger("hook"));
  std::shared_ptr<StartWatcher> watcher_ = std::make_shared<StartWatcher>();
  ChainHolder chains_{chain_};
  StateStore state_{dir_.file("state"), logger("state")};
  topology::SnapshotHolder topology_;
  std::unique_ptr<HookInterceptor> hooks_ =
      std::make_unique<HookInterceptor>(chains_, state_, logger("hook"), 4, &topology_);
};

TEST_P(HookInterceptorTest, HookDecisionsReachTheRuntime) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  v1::CreateContainerRequest seen;
  ASSERT_TRUE(seen.ParseFromString(backend_.calls().back().request));
  ASSERT_EQ(seen.config().envs_size(), 1);
  EXPECT_EQ(seen.config().envs(0).key(), "NVIDIA_VISIBLE_DEVICES");
  ASSERT_EQ(seen.config().devices_size(), 1);
  EXPECT_EQ(seen.config().devices(0).host_path(), "/dev/nvidia0");
  ASSERT_EQ(seen.config().mounts_size(), 1);
  EXPECT_EQ(seen.config().linux().resources().cpuset_cpus(), "8-15");
}

TEST_P(HookInterceptorTest, RejectionLeavesNothingBehind) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  grpc::Status s = stub->CreateContainer(&ctx, createRequest(true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook gpu rejected PreCreateContainer: GPU 3 is not on this node"));
  EXPECT_THAT(s.error_message(), HasSubstr("ml/train-0"));
  EXPECT_EQ(backend_.callCount(kCreate), 0u);
}

// A rejection echoing a 10 MiB sandbox id was never delivered (a status
// message over the HTTP/2 header limit): the caller hung until its deadline.
// Now it is cut to kMaxStatusMessageBytes, one line, and answered promptly;
// a newline in the pod's name cannot start a line of its own.
TEST_P(HookInterceptorTest, AHugeEchoedIdGetsAPromptBoundedOneLineRejection) {
  v1::CreateContainerRequest req = createRequest(true);
  req.set_pod_sandbox_id(std::string(10 << 20, 'x'));
  req.mutable_sandbox_config()->mutable_metadata()->set_name("train\n2026-11-30 [info] forged");
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::CreateContainerResponse resp;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub->CreateContainer(&ctx, req, &resp);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message().substr(0, 200);
  EXPECT_LE(s.error_message().size(), kMaxStatusMessageBytes);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hook gpu rejected PreCreateContainer: GPU 3 is not on this node (sandbox "
                        "xxxxxxxx"));
  EXPECT_THAT(s.error_message(), HasSubstr(" bytes cut)"));
  EXPECT_EQ(s.error_message().find('\n'), std::string::npos);
  EXPECT_EQ(backend_.callCount(kCreate), 0u);

  // The pod's name, cut to one line, still says whose call it was.
  grpc::ClientContext ctx2;
  req.set_pod_sandbox_id("sb");
  s = stub->CreateContainer(&ctx2, req, &resp);
  EXPECT_THAT(s.error_message(), HasSubstr("(pod ml/train?2026-11-30 [info] forged)"));
  EXPECT_EQ(s.error_message().find('\n'), std::string::npos);
}

// What kubelet's CPU and memory managers send on UpdateContainerResources:
// values of their own for every field the hook decided, and some it did not.
v1::UpdateContainerResourcesRequest kubeletUpdate() {
  v1::UpdateContainerResourcesRequest update;
  update.set_container_id("ctr-1");
  auto* r = update.mutable_linux();
  r->set_cpuset_cpus("0-63");
  r->set_cpuset_mems("0-1");
  r->set_cpu_shares(512);
  r->set_cpu_quota(200000);
  r->set_cpu_period(100000);
  r->set_memory_limit_in_bytes(int64_t{4} << 30);
  r->set_memory_swap_limit_in_bytes(int64_t{4} << 30);
  r->set_oom_score_adj(900);
  for (const char* size : {"2MB", "1GB"}) {
    auto* h = r->add_hugepage_limits();
    h->set_page_size(size);
    h->set_limit(0);
  }
  (*r->mutable_unified())["memory.high"] = "max";
  (*r->mutable_unified())["pids.max"] = "4096";
  return update;
}

// Sends kubelet's update through the proxy and checks what the runtime got:
// every resource the hook decided at CreateContainer again, kubelet's own
// values for the rest.
void updateAsKubeletAndExpectTheHooksResources(v1::RuntimeService::Stub& stub,
                                               FakeCriServer& backend) {
  grpc::ClientContext ctx;
  v1::UpdateContainerResourcesResponse resp;
  ASSERT_TRUE(stub.UpdateContainerResources(&ctx, kubeletUpdate(), &resp).ok());
  v1::UpdateContainerResourcesRequest seen;
  ASSERT_TRUE(seen.ParseFromString(backend.calls().back().request));
  const v1::LinuxContainerResources& r = seen.linux();
  EXPECT_EQ(r.cpuset_cpus(), "8-15");
  EXPECT_EQ(r.cpuset_mems(), "1");
  EXPECT_EQ(r.cpu_quota(), -1);
  EXPECT_EQ(r.cpu_period(), 50000);
  EXPECT_EQ(r.memory_limit_in_bytes(), int64_t{8} << 30);
  EXPECT_EQ(r.memory_swap_limit_in_bytes(), int64_t{16} << 30);
  EXPECT_EQ(r.oom_score_adj(), -500);
  std::map<std::string, uint64_t> pages;
  for (const auto& h : r.hugepage_limits()) pages[h.page_size()] = h.limit();
  EXPECT_EQ(pages, (std::map<std::string, uint64_t>{{"1GB", 0}, {"2MB", uint64_t{1} << 30}}));
  EXPECT_EQ(r.unified_size(), 2);
  EXPECT_EQ(r.unified().at("memory.high"), "6G");
  // Fields the hook has no opinion on stay kubelet's.
  EXPECT_EQ(r.unified().at("pids.max"), "4096");
  EXPECT_EQ(r.cpu_shares(), 512);
}

TEST_P(HookInterceptorTest, KubeletsResourceUpdatesKeepEveryResourceTheHooksDecided) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  {
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  }
  // Twice: the second update finds what the first stored, not kubelet's values.
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(cat("update ", i));
    updateAsKubeletAndExpectTheHooksResources(*stub, backend_);
  }
}

TEST_P(HookInterceptorTest, KubeletsResourceUpdateKeepsTheHooksResourcesAcrossARestart) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  {
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  }
  // crihookd restarts: a new store reads the records back from the state directory.
  stopProxy();
  hooks_.reset();
  state_.flush();
  StateStore reread(dir_.file("state"), logger("state"));
  ASSERT_TRUE(reread.load().ok());
  ASSERT_NE(reread.container("ctr-1"), nullptr);
  EXPECT_EQ(reread.container("ctr-1")->resources().cpuset_cpus(), "8-15");
  HookInterceptor restarted(chains_, reread, logger("hook"));
  startProxy(&restarted);
  updateAsKubeletAndExpectTheHooksResources(*stub, backend_);
  stopProxy();
}

TEST_P(HookInterceptorTest, LaterStagesSeeWhatCreateContainerApplied) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  {
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  }
  v1::StartContainerRequest start;
  start.set_container_id("ctr-1");
  call(kStart, start);
  std::lock_guard lock(watcher_->mu);
  ASSERT_NE(watcher_->seen, nullptr);
  const auto& c = *watcher_->seen;
  EXPECT_EQ(c.id(), "ctr-1");
  EXPECT_EQ(c.requested().envs_size(), 0);  // as kubelet sent it
  ASSERT_EQ(c.sent().envs_size(), 1);       // as the runtime got it
  ASSERT_EQ(c.decisions_size(), 1);
  EXPECT_EQ(c.decisions(0).stage(), "PreCreateContainer");
  EXPECT_EQ(c.decisions(0).owners().at("env:NVIDIA_VISIBLE_DEVICES"), "gpu");
  EXPECT_EQ(c.decisions(0).owners().at("cpuset_cpus"), "gpu");
  ASSERT_NE(watcher_->pod, nullptr);
  EXPECT_EQ(watcher_->pod->config().metadata().name(), "train-0");
  EXPECT_EQ(watcher_->topology, topology_.get());  // the node's layout, as discovered
}

TEST_P(HookInterceptorTest, RemoveContainerForgetsItsRecord) {
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  v1::CreateContainerResponse resp;
  ASSERT_TRUE(stub->CreateContainer(&ctx, createRequest(), &resp).ok());
  EXPECT_EQ(state_.containerCount(), 1u);
  v1::RemoveContainerRequest rm;
  rm.set_container_id("ctr-1");
  call(kRemove, rm);
  EXPECT_EQ(state_.container("ctr-1"), nullptr);
  state_.flush();
  StateStore reread(dir_.file("state"), logger("state"));
  ASSERT_TRUE(reread.load().ok());
  EXPECT_EQ(reread.containerCount(), 0u);
}

// A runtime that answers OK with bytes that are no CreateContainerResponse:
// kubelet gets them as they are, and crihookd records no container it
// cannot name (nor reads an answer that is not there).
TEST_P(HookInterceptorTest, AnAnswerThatDoesNotDecodeRecordsNothing) {
  backend_.onUnary(kCreate, [](FakeCall&, std::string* out) {
    *out = "\xff\xff\xff\xff";
    return grpc::Status::OK;
  });
  grpc::ClientContext ctx;
  std::string reply;
  EXPECT_TRUE(
      genericUnary(proxyChannel(), &ctx, kCreate, createRequest().SerializeAsString(), &reply)
          .ok());
  EXPECT_EQ(reply, "\xff\xff\xff\xff");
  EXPECT_EQ(state_.containerCount(), 0u);
}

INSTANTIATE_TEST_SUITE_P(InlineAndOnTheWorkerPool, HookInterceptorTest, ::testing::Bool());

}  // namespace
}  // namespace crihook::testing
