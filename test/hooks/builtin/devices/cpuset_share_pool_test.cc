// The cpuset hook's share pools end to end through crihookd's proxy against
// the fake runtime: a NUMA-only container is moved off a pinned container's
// CPUs when that arrives and back when it leaves (UpdateContainerResources
// that crihookd sends on its own), kubelet's updates keep the hook's cpuset,
// and all of it survives a crihookd restart.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <set>
#include <thread>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "hooks/builtin/devices/device_hooks.h"
#include "hooks/hook_interceptor.h"
#include "test/support/proxy_fixture.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;

constexpr const char* kCreate = "/runtime.v1.RuntimeService/CreateContainer";
constexpr const char* kUpdate = "/runtime.v1.RuntimeService/UpdateContainerResources";
constexpr const char* kStop = "/runtime.v1.RuntimeService/StopContainer";
constexpr const char* kRemove = "/runtime.v1.RuntimeService/RemoveContainer";

// Two NUMA nodes of four CPUs: node 0 = 0-3, node 1 = 4-7.
std::shared_ptr<const topology::Snapshot> twoNodes() {
  auto s = std::make_shared<topology::Snapshot>();
  for (int n = 0; n < 2; ++n) {
    topology::NumaNode node;
    node.id = n;
    node.socket = n;
    for (int c = 4 * n; c < 4 * n + 4; ++c) {
      node.cpus.push_back(c);
      s->cpus.push_back({c, n, c, n, {c}});
    }
    s->nodes.push_back(node);
  }
  return s;
}

class CpusetSharePoolTest : public ProxyFixture {
 protected:
  void SetUp() override {
    backend_.onUnary(kCreate, [this](FakeCall& call, std::string* out) {
      v1::CreateContainerRequest req;
      req.ParseFromString(call.request);
      {
        std::unique_lock lock(mu_);  // a container being created for as long as the test says
        released_.wait(lock, [&] { return !held_.count(req.config().metadata().name()); });
      }
      v1::CreateContainerResponse r;
      r.set_container_id("id-" + req.config().metadata().name());
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
    for (const char* m : {kUpdate, kStop, kRemove}) {
      backend_.onUnary(m, [](FakeCall&, std::string* out) {
        *out = "";
        return grpc::Status::OK;
      });
    }
    backend_.start();
    topology_.set(twoNodes());
    startCrihookd();
  }
  void TearDown() override { stopCrihookd(); }

  // crihookd's parts as its main wires them, over the state directory.
  void startCrihookd() {
    state_ = std::make_unique<StateStore>(dir_.file("state"), logger("state"));
    ASSERT_TRUE(state_->load().ok());
    auto hook = makeCpusetHook(
        "cpuset", "{}",
        BuiltinContext{dir_.file("state"), "/", "unix://" + dir_.file("backend.sock")});
    ASSERT_TRUE(hook.ok()) << hook.status();
    auto chain = std::make_shared<HookChain>(logger("hook"));
    chain->add(*hook, {});
    chains_ = std::make_unique<ChainHolder>(chain);
    interceptor_ =
        std::make_unique<HookInterceptor>(*chains_, *state_, logger("hook"), 2, &topology_);
    startProxy(interceptor_.get());
  }
  void stopCrihookd() {
    stopProxy();
    interceptor_.reset();
    chains_.reset();  // the hook, its pools and their thread
    if (state_) state_->flush();
    state_.reset();
  }

  v1::CreateContainerRequest create(const std::string& pod, const std::string& name,
                                    const std::string& resource_status) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb-" + pod);
    req.mutable_sandbox_config()->mutable_metadata()->set_name(pod);
    req.mutable_sandbox_config()->mutable_metadata()->set_namespace_("ml");
    (*req.mutable_sandbox_config()
          ->mutable_annotations())["scheduling.koordinator.sh/resource-status"] = resource_status;
    req.mutable_config()->mutable_metadata()->set_name(name);
    grpc::ClientContext ctx;
    v1::CreateContainerResponse resp;
    EXPECT_TRUE(
        v1::RuntimeService::NewStub(proxyChannel())->CreateContainer(&ctx, req, &resp).ok());
    return createdAs(name);
  }

  // The last CreateContainer of container `name` as the runtime got it.
  v1::CreateContainerRequest createdAs(const std::string& name) {
    auto calls = backend_.calls();
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
      v1::CreateContainerRequest req;
      if (it->method == kCreate && req.ParseFromString(it->request) &&
          req.config().metadata().name() == name)
        return req;
    }
    ADD_FAILURE() << "no CreateContainer of " << name;
    return {};
  }

  // CreateContainer of `name` is held at the runtime until release(name).
  void hold(const std::string& name) {
    std::lock_guard lock(mu_);
    held_.insert(name);
  }
  void release(const std::string& name) {
    std::lock_guard lock(mu_);
    held_.erase(name);
    released_.notify_all();
  }
  bool atRuntime(const std::string& name) {
    return backend_.waitForCall(
        kCreate,
        [&](const FakeCall& c) {
          v1::CreateContainerRequest r;
          return r.ParseFromString(c.request) && r.config().metadata().name() == name;
        },
        10s);
  }

  // kubelet's UpdateContainerResources through crihookd; what the runtime got.
  v1::LinuxContainerResources kubeletUpdate(const std::string& id) {
    v1::UpdateContainerResourcesRequest req;
    req.set_container_id(id);
    req.mutable_linux()->set_cpuset_cpus("0-7");
    req.mutable_linux()->set_cpu_quota(200000);
    req.mutable_linux()->set_cpu_shares(1024);
    grpc::ClientContext ctx;
    v1::UpdateContainerResourcesResponse resp;
    EXPECT_TRUE(v1::RuntimeService::NewStub(proxyChannel())
                    ->UpdateContainerResources(&ctx, req, &resp)
                    .ok());
    v1::UpdateContainerResourcesRequest seen;
    EXPECT_TRUE(seen.ParseFromString(lastCall(kUpdate).request));
    EXPECT_EQ(seen.container_id(), id);
    return seen.linux();
  }

  void call(const char* method, const google::protobuf::Message& req) {
    grpc::ClientContext ctx;
    std::string reply;
    ASSERT_TRUE(genericUnary(proxyChannel(), &ctx, method, req.SerializeAsString(), &reply).ok());
  }

  // Whether crihookd itself moved container `id` to `cpus` (an update the
  // runtime got after call number `from`, that nobody sent through the proxy).
  bool movedTo(const std::string& id, const std::string& cpus, size_t from) {
    return backend_.waitForCall(
        kUpdate,
        [&](const FakeCall& c) {
          v1::UpdateContainerResourcesRequest r;
          return r.ParseFromString(c.request) && r.container_id() == id &&
                 r.linux().cpuset_cpus() == cpus && r.linux().cpu_quota() == 0;
        },
        10s, from);
  }

  FakeCall lastCall(const std::string& method) {
    auto calls = backend_.calls();
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
      if (it->method == method) return *it;
    }
    ADD_FAILURE() << "no call of " << method;
    return {};
  }

  std::mutex mu_;
  std::condition_variable released_;
  std::set<std::string> held_;
  topology::SnapshotHolder topology_;
  std::unique_ptr<StateStore> state_;
  std::unique_ptr<ChainHolder> chains_;
  std::unique_ptr<HookInterceptor> interceptor_;
};

TEST_F(CpusetSharePoolTest, NumaOnlyContainerMakesRoomForAPinAndGetsItsCpusBack) {
  const std::string numa0 = R"({"numaNodeResources":[{"node":0,"resources":{"cpu":"2"}}]})";
  v1::CreateContainerRequest ls = create("ls", "ls", numa0);
  EXPECT_EQ(ls.config().linux().resources().cpuset_cpus(), "0-3");
  EXPECT_EQ(ls.config().linux().resources().cpuset_mems(), "0");
  EXPECT_EQ(ls.config().linux().resources().cpu_quota(), 0);

  // A pinned container arrives: created as allocated, quota lifted, and the
  // running NUMA-only one moved off its CPUs by crihookd.
  size_t from = backend_.calls().size();
  v1::CreateContainerRequest lsr = create("lsr", "lsr", R"({"cpuset":"1-2"})");
  EXPECT_EQ(lsr.config().linux().resources().cpuset_cpus(), "1-2");
  EXPECT_EQ(lsr.config().linux().resources().cpu_quota(), -1);
  EXPECT_TRUE(movedTo("id-ls", "0,3", from));

  // kubelet's updates keep each hook decision (its own cpuset and quota dropped).
  v1::LinuxContainerResources r = kubeletUpdate("id-ls");
  EXPECT_EQ(r.cpuset_cpus(), "0,3");
  EXPECT_EQ(r.cpuset_mems(), "0");
  EXPECT_EQ(r.cpu_shares(), 1024);
  r = kubeletUpdate("id-lsr");
  EXPECT_EQ(r.cpuset_cpus(), "1-2");
  EXPECT_EQ(r.cpu_quota(), -1);

  // A NUMA-only container created now keeps off the pin from the start.
  EXPECT_EQ(create("ls2", "ls2", numa0).config().linux().resources().cpuset_cpus(), "0,3");

  // crihookd restarts over the same state directory.
  stopCrihookd();
  startCrihookd();
  EXPECT_EQ(kubeletUpdate("id-ls").cpuset_cpus(), "0,3");
  EXPECT_EQ(kubeletUpdate("id-lsr").cpu_quota(), -1);

  // The pinned container stops and is removed: both NUMA-only ones get node 0 back.
  from = backend_.calls().size();
  v1::StopContainerRequest stop;
  stop.set_container_id("id-lsr");
  call(kStop, stop);
  v1::RemoveContainerRequest rm;
  rm.set_container_id("id-lsr");
  call(kRemove, rm);
  EXPECT_TRUE(movedTo("id-ls", "0-3", from));
  EXPECT_TRUE(movedTo("id-ls2", "0-3", from));
  EXPECT_EQ(kubeletUpdate("id-ls").cpuset_cpus(), "0-3");

  // And that, too, outlives a restart.
  stopCrihookd();
  startCrihookd();
  EXPECT_EQ(kubeletUpdate("id-ls2").cpuset_cpus(), "0-3");
}

// The two orders in which a NUMA-only container and a pin can be created at
// once; both end with the NUMA-only container off the pin's CPUs.
TEST_F(CpusetSharePoolTest, NumaOnlyContainerCreatedWhileAPinIsAddedEndsUpOffIt) {
  const std::string numa0 = R"({"numaNodeResources":[{"node":0,"resources":{"cpu":"2"}}]})";
  // The pin is at the runtime (its pre stage done, no answer yet) when the
  // NUMA-only container is created: it keeps off the pin from the start.
  hold("lsr");
  std::thread pin([&] { create("lsr", "lsr", R"({"cpuset":"1-2"})"); });
  EXPECT_TRUE(atRuntime("lsr"));
  EXPECT_EQ(create("ls", "ls", numa0).config().linux().resources().cpuset_cpus(), "0,3");
  release("lsr");
  pin.join();

  // The NUMA-only container's CPUs were chosen (and it is at the runtime)
  // before a second pin arrives: once created, it is moved off that pin.
  hold("ls2");
  std::thread numa([&] { create("ls2", "ls2", numa0); });
  EXPECT_TRUE(atRuntime("ls2"));
  size_t from = backend_.calls().size();
  EXPECT_EQ(create("lse", "lse", R"({"cpuset":"3"})").config().linux().resources().cpuset_cpus(),
            "3");
  EXPECT_TRUE(movedTo("id-ls", "0", from));
  release("ls2");
  numa.join();
  EXPECT_EQ(createdAs("ls2").config().linux().resources().cpuset_cpus(), "0,3");
  EXPECT_TRUE(movedTo("id-ls2", "0", from));
  EXPECT_EQ(kubeletUpdate("id-ls2").cpuset_cpus(), "0");
}

}  // namespace
}  // namespace crihook::testing
