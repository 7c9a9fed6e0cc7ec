// nri::Front against a runtime played by the test (FakeNriRuntime): when an
// event is answered relative to its stages. containerd holds every pod
// operation of the node while a plugin has not answered, so an event none of
// whose stages has a hook is answered before its records are made, and one
// whose stages have hooks only once they ran. The stages are a gate the
// test opens: an answer that waited for a closed gate never comes.

#include "nri/front.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/text.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fake_nri_runtime.h"

namespace crihook::nri {
namespace {

using namespace std::chrono_literals;

// Records each stage it runs ("pre RemoveContainer", …); a stage close()d
// waits until it is open()ed (or 10 s, longer than any wait of the test's
// runtime, so an answer that waited for it is reported missing first).
class GateInterceptor final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override {
    pass(cat("pre ", methodName(call->method)));
    done(absl::OkStatus());
  }
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override {
    pass(cat("post ", methodName(call->method)));
    done();
  }

  void close(const std::string& stage) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.insert(stage);
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.clear();
    cv_.notify_all();
  }
  void open(const std::string& stage) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.erase(stage);
    cv_.notify_all();
  }
  std::vector<std::string> ran() {
    std::lock_guard<std::mutex> lock(mu_);
    return ran_;
  }
  // Waits (up to 5 s) until `stage` ran.
  bool waitFor(const std::string& stage) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 5s, [&] {
      for (const auto& s : ran_)
        if (s == stage) return true;
      return false;
    });
  }

 private:
  void pass(const std::string& stage) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return !closed_.count(stage); });
    ran_.push_back(stage);
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> closed_;
  std::vector<std::string> ran_;
};

class FrontTest : public ::testing::Test {
 protected:
  // A Front whose only hook is on CreateContainer's pre-stage (the bench's
  // static hook), registered and synchronised with the test's runtime.
  void SetUp() override {
    Front::Options options;
    options.socket_path = runtime_.path();
    options.has_hooks = [](LifecycleMethod m, Phase p) {
      return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
    };
    front_ = std::make_unique<Front>(
        hooks_, options,
        std::make_shared<spdlog::logger>("nri", std::make_shared<spdlog::sinks::null_sink_mt>()));
    front_->start();
    ASSERT_TRUE(runtime_.accept());
    runtime_.answerRegistration();
    runtime_.call(1, "Configure", api::ConfigureRequest().SerializeAsString());
    api::ConfigureResponse configured;
    ASSERT_TRUE(configured.ParseFromString(runtime_.answer().second.payload()));
    events_ = configured.events();
    runtime_.call(3, "Synchronize", api::SynchronizeRequest().SerializeAsString());
    runtime_.answer();
  }
  void TearDown() override {
    hooks_.open();
    front_->stop();
  }

  void stateChange(uint32_t stream, api::Event event) {
    api::StateChangeEvent ev;
    ev.set_event(event);
    ev.mutable_pod()->set_id("pod-1");
    ev.mutable_pod()->set_name("train-0");
    ev.mutable_pod()->set_namespace_("default");
    ev.mutable_container()->set_id("ctr-1");
    ev.mutable_container()->set_pod_sandbox_id("pod-1");
    runtime_.call(stream, "StateChange", ev.SerializeAsString());
  }
  void createContainer(uint32_t stream) {
    api::CreateContainerRequest req;
    req.mutable_pod()->set_id("pod-1");
    req.mutable_pod()->set_name("train-0");
    req.mutable_pod()->set_namespace_("default");
    req.mutable_container()->set_id("ctr-1");
    req.mutable_container()->set_pod_sandbox_id("pod-1");
    req.mutable_container()->set_name("main");
    runtime_.call(stream, "CreateContainer", req.SerializeAsString());
  }

  ::crihook::testing::TempDir dir_;
  ::crihook::testing::FakeNriRuntime runtime_{dir_.file("nri.sock")};
  GateInterceptor hooks_;
  std::unique_ptr<Front> front_;
  int32_t events_ = 0;
};

TEST_F(FrontTest, SubscribesToTheRecordEventsAndNotToPostCreate) {
  EXPECT_TRUE(events_ & eventBit(api::RUN_POD_SANDBOX));
  EXPECT_TRUE(events_ & eventBit(api::CREATE_CONTAINER));
  EXPECT_TRUE(events_ & eventBit(api::REMOVE_CONTAINER));
  EXPECT_TRUE(events_ & eventBit(api::REMOVE_POD_SANDBOX));
  EXPECT_FALSE(events_ & eventBit(api::POST_CREATE_CONTAINER));
  EXPECT_FALSE(events_ & eventBit(api::START_CONTAINER));
}

TEST_F(FrontTest, AnEventWithoutHooksIsAnsweredBeforeItsRecordsAreMade) {
  uint32_t stream = 5;  // the runtime's streams: odd, rising
  for (auto [event, method] : {std::pair{api::RUN_POD_SANDBOX, "RunPodSandbox"},
                               std::pair{api::REMOVE_CONTAINER, "RemoveContainer"},
                               std::pair{api::REMOVE_POD_SANDBOX, "RemovePodSandbox"}}) {
    SCOPED_TRACE(method);
    hooks_.close(cat("pre ", method));
    hooks_.close(cat("post ", method));
    stateChange(stream, event);
    auto [answered, resp] = runtime_.answer();  // while the stages wait at the gate
    EXPECT_EQ(answered, stream);
    EXPECT_FALSE(resp.has_status() && resp.status().code() != 0) << resp.status().message();
    hooks_.open();
    // Then the records are made: both stages, in order.
    ASSERT_TRUE(hooks_.waitFor(cat("post ", method)));
    auto ran = hooks_.ran();
    ASSERT_GE(ran.size(), 2u);
    EXPECT_EQ(ran[ran.size() - 2], cat("pre ", method));
    stream += 2;
  }
}

TEST_F(FrontTest, CreateContainerIsAnsweredOnceItsHookRanAndBeforeItsRecords) {
  hooks_.close("pre CreateContainer");
  hooks_.close("post CreateContainer");
  createContainer(21);
  // The hook on the pre-stage decides the answer: nothing comes while it waits.
  EXPECT_FALSE(runtime_.sentWithin(300)) << "answered before the pre-stage ran";
  hooks_.open("pre CreateContainer");
  auto [stream, resp] = runtime_.answer();  // while the post-stage (records) waits
  EXPECT_EQ(stream, 21u);
  EXPECT_FALSE(resp.has_status() && resp.status().code() != 0) << resp.status().message();
  hooks_.open();
  EXPECT_TRUE(hooks_.waitFor("post CreateContainer"));
}

}  // namespace
}  // namespace crihook::nri
