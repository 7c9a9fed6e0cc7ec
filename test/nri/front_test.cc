// nri::Front against a runtime played by the test (FakeNriRuntime): when an
// event is answered relative to its stages. containerd holds every pod
// operation of the node while a plugin has not answered, so an event none of
// whose stages has a hook is answered before its records are made, and one
// whose stages have hooks only once they ran. The stages are a gate the
// test opens: an answer that waited for a closed gate never comes.

#include "nri/front.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fake_nri_runtime.h"

namespace crihook::nri {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::runtime::v1;

// Records each stage it runs ("pre RemoveContainer", …); a stage close()d
// waits until it is open()ed (or 10 s, longer than any wait of the test's
// runtime, so an answer that waited for it is reported missing first). An
// open stage runs on the caller's thread; a closed one waits on a thread of
// its own, as a hook runs on the interceptor's workers, so the Front's
// thread goes on reading and answering other events meanwhile.
class GateInterceptor final : public Interceptor {
 public:
  ~GateInterceptor() override {
    open();
    // A waiter's stage may call the next stage, which runs inline now.
    for (;;) {
      std::vector<std::thread> waiters;
      {
        MutexLock lock(mu_);
        waiters.swap(waiters_);
      }
      if (waiters.empty()) break;
      for (std::thread& t : waiters) t.join();
    }
  }
  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override {
    {
      MutexLock lock(mu_);
      calls_.push_back(call);
    }
    pass(cat("pre ", methodName(call->method)), [this, call, done] {
      std::function<void(InterceptedCall&)> edit;
      {
        MutexLock lock(mu_);
        edit = edit_;
      }
      edit(*call);
      done(absl::OkStatus());
    });
  }
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override {
    pass(cat("post ", methodName(call->method)), std::move(done));
  }

  // What every pre-stage does to its call, as a hook's adjustment would
  // (set before the first call).
  void edit(std::function<void(InterceptedCall&)> f) {
    MutexLock lock(mu_);
    edit_ = std::move(f);
  }

  void close(const std::string& stage) {
    MutexLock lock(mu_);
    closed_.insert(stage);
  }
  void open() {
    MutexLock lock(mu_);
    closed_.clear();
    cv_.notifyAll();
  }
  void open(const std::string& stage) {
    MutexLock lock(mu_);
    closed_.erase(stage);
    cv_.notifyAll();
  }
  std::vector<std::string> ran() {
    MutexLock lock(mu_);
    return ran_;
  }
  // The last call a pre-stage got, held by whoever else holds it.
  std::weak_ptr<InterceptedCall> lastCall() {
    MutexLock lock(mu_);
    return calls_.empty() ? std::weak_ptr<InterceptedCall>() : calls_.back();
  }
  // Waits (up to 5 s) until `stage` ran.
  bool waitFor(const std::string& stage) {
    MutexLock lock(mu_);
    return cv_.waitFor(lock, 5s, [&] {
      mu_.assertHeld();
      return std::find(ran_.begin(), ran_.end(), stage) != ran_.end();
    });
  }
  // Waits (up to 5 s) until `stage` is held at its closed gate.
  bool waitAtGate(const std::string& stage) {
    MutexLock lock(mu_);
    return cv_.waitFor(lock, 5s, [&] {
      mu_.assertHeld();
      return at_gate_.count(stage) > 0;
    });
  }

 private:
  // Runs `stage`, then `done`: at once when its gate is open, else on a
  // waiter thread once it opens.
  void pass(const std::string& stage, std::function<void()> done) {
    MutexLock lock(mu_);
    if (!closed_.count(stage)) {
      ran_.push_back(stage);
      cv_.notifyAll();
      lock.unlock();
      return done();
    }
    at_gate_.insert(stage);
    cv_.notifyAll();
    waiters_.push_back(namedThread("gate-waiter", [this, stage, done = std::move(done)] {
      {
        MutexLock lock(mu_);
        cv_.waitFor(lock, 10s, [&] {
          mu_.assertHeld();
          return !closed_.count(stage);
        });
        at_gate_.erase(stage);
        ran_.push_back(stage);
        cv_.notifyAll();
      }
      done();
    }));
  }

  Mutex mu_;
  CondVar cv_;
  std::function<void(InterceptedCall&)> edit_ ABSL_GUARDED_BY(mu_) = [](InterceptedCall&) {};
  std::set<std::string> closed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> at_gate_ ABSL_GUARDED_BY(mu_);  // stages held by a closed gate
  std::vector<std::string> ran_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<InterceptedCall>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> waiters_ ABSL_GUARDED_BY(mu_);
};

class FrontTest : public ::testing::Test {
 protected:
  // A Front whose only hook is on CreateContainer's pre-stage (the bench's
  // static hook), registered and synchronised with the test's runtime.
  void SetUp() override {
    Front::Options options;
    options.socket_path = runtime_.path();
    options.has_hooks = [this](LifecycleMethod m, Phase p) { return hooked(m, p); };
    front_ = std::make_unique<Front>(
        hooks_, options,
        std::make_shared<spdlog::logger>(
            "nri", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_)));
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
  // Which stages have a hook (asked at Configure).
  virtual bool hooked(LifecycleMethod m, Phase p) const {
    return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
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

  std::ostringstream log_text_;  // read once front_ stopped: its thread writes it
  ::crihook::testing::TempDir dir_;
  ::crihook::testing::FakeNriRuntime runtime_{dir_.file("nri.sock")};
  GateInterceptor hooks_;
  std::unique_ptr<Front> front_;
  int32_t events_ = 0;
};

// An operator sees the registration, under the plugin's index and name.
TEST_F(FrontTest, ARegistrationIsLoggedWithTheSocketIndexAndName) {
  ASSERT_TRUE(eventually([&] { return front_->registered(); }));
  front_->stop();  // its thread, which writes the log, is done
  EXPECT_THAT(log_text_.str(),
              ::testing::HasSubstr(cat("NRI: registered at ", runtime_.path(), " as 10-crihook")));
  EXPECT_THAT(log_text_.str(), ::testing::Not(::testing::HasSubstr("ended")));
}

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
  // The hook on the pre-stage decides the answer: nothing comes while it
  // waits. An event the Front answers at once, sent once the stage waits,
  // is answered first: an answer to CreateContainer queued before would
  // have come before it.
  ASSERT_TRUE(hooks_.waitAtGate("pre CreateContainer"));
  stateChange(23, api::POST_START_CONTAINER);  // no StartContainer waits for it
  EXPECT_EQ(runtime_.answer().first, 23u) << "answered before the pre-stage ran";
  hooks_.open("pre CreateContainer");
  auto [stream, resp] = runtime_.answer();  // while the post-stage (records) waits
  EXPECT_EQ(stream, 21u);
  EXPECT_FALSE(resp.has_status() && resp.status().code() != 0) << resp.status().message();
  hooks_.open();
  EXPECT_TRUE(hooks_.waitFor("post CreateContainer"));
}

// A StartContainer waits for its PostStart event with its call; a
// container removed without one (it failed to start) takes its call with it.
TEST_F(FrontTest, AStartedCallWaitingForItsPostStartGoesWithItsContainer) {
  stateChange(41, api::START_CONTAINER);
  ASSERT_EQ(runtime_.answer().first, 41u);
  const std::weak_ptr<InterceptedCall> started = hooks_.lastCall();
  ASSERT_FALSE(started.expired()) << "waits for PostStart";
  ASSERT_EQ(started.lock()->method, LifecycleMethod::kStartContainer);
  stateChange(43, api::REMOVE_CONTAINER);
  ASSERT_EQ(runtime_.answer().first, 43u);
  EXPECT_TRUE(eventually([&] { return started.expired(); }));
  ASSERT_TRUE(hooks_.waitFor("post RemoveContainer"));
}

// Hooks on the post stages of CreateContainer and UpdateContainerResources
// too: those calls wait for NRI's PostCreate and PostUpdate events.
class FrontPostHooksTest : public FrontTest {
 protected:
  bool hooked(LifecycleMethod m, Phase) const override {
    return m == LifecycleMethod::kCreateContainer ||
           m == LifecycleMethod::kUpdateContainerResources;
  }
};

// A container removed before its PostCreate or PostUpdate came (it failed
// to start, an update the runtime gave up) takes the waiting calls with it.
TEST_F(FrontPostHooksTest, CallsWaitingForTheirDoneEventGoWithTheirContainer) {
  createContainer(51);
  ASSERT_EQ(runtime_.answer().first, 51u);
  const std::weak_ptr<InterceptedCall> created = hooks_.lastCall();
  api::UpdateContainerRequest req;
  req.mutable_pod()->set_id("pod-1");
  req.mutable_container()->set_id("ctr-1");
  req.mutable_container()->set_pod_sandbox_id("pod-1");
  req.mutable_linux_resources()->mutable_cpu()->set_cpus("0-3");
  runtime_.call(53, "UpdateContainer", req.SerializeAsString());
  ASSERT_EQ(runtime_.answer().first, 53u);
  const std::weak_ptr<InterceptedCall> updated = hooks_.lastCall();
  ASSERT_FALSE(created.expired()) << "waits for PostCreate";
  ASSERT_FALSE(updated.expired()) << "waits for PostUpdate";
  EXPECT_EQ(created.lock()->method, LifecycleMethod::kCreateContainer);
  EXPECT_EQ(updated.lock()->method, LifecycleMethod::kUpdateContainerResources);
  stateChange(55, api::REMOVE_CONTAINER);
  ASSERT_EQ(runtime_.answer().first, 55u);
  EXPECT_TRUE(eventually([&] { return created.expired() && updated.expired(); }));
}

// UpdateContainer: what the hooks changed in the resources goes back as an
// update naming the container; an update they left alone goes back empty.
TEST_F(FrontTest, UpdateContainerAnswersTheHooksChangeForItsContainer) {
  hooks_.edit([](InterceptedCall& call) {
    if (call.method != LifecycleMethod::kUpdateContainerResources) return;
    auto& req = static_cast<v1::UpdateContainerResourcesRequest&>(*call.request);
    if (req.linux().cpu_shares() != 1024) return;  // the second update: left alone
    req.mutable_linux()->set_cpuset_cpus("4-7");
    call.request_changed = true;
  });
  auto update = [this](uint32_t stream, int64_t shares) {
    api::UpdateContainerRequest req;
    req.mutable_pod()->set_id("pod-1");
    req.mutable_container()->set_id("ctr-1");
    req.mutable_container()->set_pod_sandbox_id("pod-1");
    req.mutable_linux_resources()->mutable_cpu()->mutable_shares()->set_value(shares);
    req.mutable_linux_resources()->mutable_cpu()->set_cpus("0-3");
    runtime_.call(stream, "UpdateContainer", req.SerializeAsString());
    auto [answered, resp] = runtime_.answer();
    EXPECT_EQ(answered, stream);
    EXPECT_FALSE(resp.has_status() && resp.status().code() != 0) << resp.status().message();
    api::UpdateContainerResponse out;
    EXPECT_TRUE(out.ParseFromString(resp.payload()));
    return out;
  };
  const api::UpdateContainerResponse changed = update(31, 1024);
  ASSERT_EQ(changed.update_size(), 1);
  EXPECT_EQ(changed.update(0).container_id(), "ctr-1");
  EXPECT_EQ(changed.update(0).linux().resources().cpu().cpus(), "4-7");
  EXPECT_EQ(changed.update(0).linux().resources().cpu().shares().value(), 1024u)
      << "the rest of the resources as the runtime sent them";
  EXPECT_EQ(update(33, 2048).update_size(), 0) << "nothing changed, nothing to update";
  // Then each update's records: its hooks ran once, at the pre-stage.
  auto count = [this](const std::string& stage) {
    const auto ran = hooks_.ran();
    return std::count(ran.begin(), ran.end(), stage);
  };
  EXPECT_TRUE(::crihook::eventually([&] { return count("post UpdateContainerResources") == 2; }));
  EXPECT_EQ(count("pre UpdateContainerResources"), 2);
}

// Refuses RunPodSandbox's pre-stage as a device init that fails would; every
// other stage passes. Records what ran, as GateInterceptor does.
class RefusingInterceptor final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> done) override {
    note(cat("pre ", methodName(call->method)));
    if (call->method == LifecycleMethod::kRunPodSandbox)
      return done(absl::UnavailableError("devices: init of gpu 0 failed"));
    done(absl::OkStatus());
  }
  void post(std::shared_ptr<InterceptedCall> call, std::function<void()> done) override {
    note(cat("post ", methodName(call->method)));
    done();
  }
  std::vector<std::string> ran() {
    MutexLock lock(mu_);
    return ran_;
  }

 private:
  void note(const std::string& stage) {
    MutexLock lock(mu_);
    ran_.push_back(stage);
  }
  Mutex mu_;
  std::vector<std::string> ran_ ABSL_GUARDED_BY(mu_);
};

// A Front with a hook on RunPodSandbox's pre-stage (a device init of 3 s)
// and the budget check the daemon gives it; each test plays the runtime's
// Configure itself.
class ConfigureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Front::Options options;
    options.socket_path = runtime_.path();
    options.request_timeout = 12s;  // [nri] plugin_request_timeout, as told
    options.has_hooks = [](LifecycleMethod m, Phase p) {
      return m == LifecycleMethod::kRunPodSandbox && p == Phase::kPre;
    };
    options.check_budget = [this](std::chrono::milliseconds runtime_timeout) {
      MutexLock lock(mu_);
      checked_.push_back(runtime_timeout);
      return checkBudget(
          [](LifecycleMethod m, Phase p) {
            return m == LifecycleMethod::kRunPodSandbox && p == Phase::kPre
                       ? std::vector<TimedHook>{{"devices", 3s}}
                       : std::vector<TimedHook>{};
          },
          runtime_timeout, 100ms, TimeoutSource::kRuntime);
    };
    options.on_refused = [this](const absl::Status& why) {
      MutexLock lock(mu_);
      refused_.push_back(std::string(why.message()));
    };
    options.on_synchronize = [this](const Synchronized& sync) {
      MutexLock lock(mu_);
      synchronized_.push_back(sync);
    };
    options.on_registration = [this](bool registered) {
      MutexLock lock(mu_);
      registration_changes_.push_back(registered);
    };
    options.reconnect_first = 10ms;
    front_ =
        std::make_unique<Front>(hooks_, options, std::make_shared<spdlog::logger>("nri", log_));
    front_->start();
    ASSERT_TRUE(runtime_.accept());
    runtime_.answerRegistration();
  }
  void TearDown() override { front_->stop(); }

  bool logged(const std::string& text) const {
    const auto lines = log_->last_formatted();
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }

  // The runtime's Configure on stream 1: its name, version and (NRI >= 0.7)
  // request timeout in ms, 0 for none; the plugin's answer.
  ::ttrpc::Response configure(const std::string& name, const std::string& version,
                              int64_t request_timeout_ms, uint32_t stream = 1) {
    api::ConfigureRequest req;
    req.set_runtime_name(name);
    req.set_runtime_version(version);
    req.set_request_timeout(request_timeout_ms);
    req.set_registration_timeout(request_timeout_ms > 0 ? 5000 : 0);
    runtime_.call(stream, "Configure", req.SerializeAsString());
    return runtime_.answer().second;
  }
  void synchronize(uint32_t stream, bool more, const std::string& pod) {
    api::SynchronizeRequest req;
    req.set_more(more);
    req.add_pods()->set_id(pod);
    runtime_.call(stream, "Synchronize", req.SerializeAsString());
  }
  // A part of `pods` pods and `containers` containers; its answer.
  ::ttrpc::Response synchronizeMany(uint32_t stream, bool more, int pods, int containers) {
    api::SynchronizeRequest req;
    req.set_more(more);
    for (int i = 0; i < pods; ++i) req.add_pods()->set_id(cat("p", stream, "-", i));
    for (int i = 0; i < containers; ++i) req.add_containers()->set_id(cat("c", stream, "-", i));
    runtime_.call(stream, "Synchronize", req.SerializeAsString());
    return runtime_.answer().second;
  }
  ::ttrpc::Response runPod(uint32_t stream, const std::string& pod = "pod-1") {
    api::StateChangeEvent ev;
    ev.set_event(api::RUN_POD_SANDBOX);
    ev.mutable_pod()->set_id(pod);
    ev.mutable_pod()->set_name("train-0");
    ev.mutable_pod()->set_namespace_("default");
    runtime_.call(stream, "StateChange", ev.SerializeAsString());
    return runtime_.answer().second;
  }
  ::ttrpc::Response createContainer(uint32_t stream, const std::string& pod = "pod-1") {
    api::CreateContainerRequest req;
    req.mutable_pod()->set_id(pod);
    req.mutable_pod()->set_name("train-0");
    req.mutable_pod()->set_namespace_("default");
    req.mutable_container()->set_id("ctr-1");
    req.mutable_container()->set_pod_sandbox_id(pod);
    req.mutable_container()->set_name("main");
    runtime_.call(stream, "CreateContainer", req.SerializeAsString());
    return runtime_.answer().second;
  }
  static bool failed(const ::ttrpc::Response& r) {
    return r.has_status() && r.status().code() != 0;
  }

  ::crihook::testing::TempDir dir_;
  ::crihook::testing::FakeNriRuntime runtime_{dir_.file("nri.sock")};
  RefusingInterceptor hooks_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  std::unique_ptr<Front> front_;
  Mutex mu_;
  std::vector<std::chrono::milliseconds> checked_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> refused_ ABSL_GUARDED_BY(mu_);
  std::vector<Synchronized> synchronized_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> registration_changes_ ABSL_GUARDED_BY(mu_);
};

// The case: crihookd told 12 s, containerd at 2 s, a 3 s device
// init. The config's figure passed at start-up; the runtime's does not.
TEST_F(ConfigureTest, ARuntimesOwnTimeoutTooShortForTheHooksRefusesTheRegistration) {
  const ::ttrpc::Response r = configure("containerd", "2.1.9+unknown", 2000);
  ASSERT_TRUE(failed(r));
  EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("NRI event RunPodSandbox runs hooks for up to 3s"));
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("the runtime's own, sent at NRI Configure: 2s"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("at least 3100ms"));
  MutexLock lock(mu_);
  EXPECT_EQ(checked_, std::vector<std::chrono::milliseconds>{2000ms});
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_FALSE(front_->registered());
}

TEST_F(ConfigureTest, ARuntimesOwnTimeoutThatFitsIsTaken) {
  EXPECT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  MutexLock lock(mu_);
  EXPECT_EQ(checked_, std::vector<std::chrono::milliseconds>{5000ms});
  EXPECT_TRUE(refused_.empty());
}

// containerd 1.7's NRI 0.6.1 sends no timeouts: the config's figure, checked
// at start-up, stands.
TEST_F(ConfigureTest, ARuntimeThatSendsNoTimeoutIsNotChecked) {
  EXPECT_FALSE(failed(configure("containerd", "1.7.24~ds1", 0)));
  MutexLock lock(mu_);
  EXPECT_TRUE(checked_.empty());
}

// NRI 0.8 closes a plugin whose answer to a part does not say `more`.
TEST_F(ConfigureTest, ASynchronizeInPartsIsAnsweredPartByPartAndDeliveredWhole) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, true, "pod-a");
  api::SynchronizeResponse part;
  ASSERT_TRUE(part.ParseFromString(runtime_.answer().second.payload()));
  EXPECT_TRUE(part.more());
  EXPECT_FALSE(front_->registered());
  synchronize(5, false, "pod-b");
  api::SynchronizeResponse last;
  ASSERT_TRUE(last.ParseFromString(runtime_.answer().second.payload()));
  EXPECT_FALSE(last.more());
  EXPECT_TRUE(front_->registered());
  MutexLock lock(mu_);
  ASSERT_EQ(synchronized_.size(), 1u);
  ASSERT_EQ(synchronized_[0].pods.size(), 2u);
  EXPECT_EQ(synchronized_[0].pods[0].sandbox_id, "pod-a");
  EXPECT_EQ(synchronized_[0].pods[1].sandbox_id, "pod-b");
}

// A Configure starts the registration again: a Synchronize left in parts
// before it is forgotten, not delivered with the next one's pods.
TEST_F(ConfigureTest, ASynchronizeLeftInPartsIsForgottenAtTheNextConfigure) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, true, "pod-stale");
  (void)runtime_.answer();
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000, 5)));
  synchronize(7, false, "pod-b");
  (void)runtime_.answer();
  MutexLock lock(mu_);
  ASSERT_EQ(synchronized_.size(), 1u);
  ASSERT_EQ(synchronized_[0].pods.size(), 1u);
  EXPECT_EQ(synchronized_[0].pods[0].sandbox_id, "pod-b");
}

// containerd 1.7 removes a sandbox NRI refused: the refusal is the answer.
TEST_F(ConfigureTest, OnARuntimeThatRemovesARefusedSandboxThePodIsRefusedAtRunPodSandbox) {
  ASSERT_FALSE(failed(configure("containerd", "1.7.24~ds1", 0)));
  synchronize(3, false, "other");
  runtime_.answer();
  const ::ttrpc::Response r = runPod(5);
  ASSERT_TRUE(failed(r));
  EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("devices: init of gpu 0 failed"));
  EXPECT_EQ(front_->refusedAtContainers(), 0u);
}

// containerd 2.1 would leak the sandbox: it is let through and the pod's
// containers are refused with the hooks' refusal, without running their
// stages; once the pod is removed, its id is forgotten.
TEST_F(ConfigureTest, OnARuntimeThatLeaksARefusedSandboxItsContainersAreRefusedInstead) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, false, "other");
  runtime_.answer();
  EXPECT_FALSE(failed(runPod(5)));
  EXPECT_EQ(front_->refusedAtContainers(), 1u);
  const ::ttrpc::Response r = createContainer(7);
  ASSERT_TRUE(failed(r));
  EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("refused this pod at RunPodSandbox"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("containerd 2.1.9+unknown"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("devices: init of gpu 0 failed"));
  for (const auto& stage : hooks_.ran()) EXPECT_NE(stage, "pre CreateContainer");
  EXPECT_TRUE(logged("NRI: CreateContainer pod=default/train-0 sandbox=pod-1 container=ctr-1: "))
      << "the refused container named in the log";

  api::StateChangeEvent removed;
  removed.set_event(api::REMOVE_POD_SANDBOX);
  removed.mutable_pod()->set_id("pod-1");
  runtime_.call(9, "StateChange", removed.SerializeAsString());
  EXPECT_FALSE(failed(runtime_.answer().second));
  // A container of a pod id seen again (a runtime reusing it) is not refused.
  EXPECT_FALSE(failed(createContainer(11)));
}

// The runtime going away (containerd restarting): the plugin says it is no
// longer registered, connects again after its back-off and registers anew.
TEST_F(ConfigureTest, ARuntimeThatGoesAwayIsConnectedToAgainAndRegisteredAnew) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, false, "pod-a");
  runtime_.answer();
  ASSERT_TRUE(front_->registered());
  runtime_.hangUp();
  ASSERT_TRUE(eventually([&] { return !front_->registered(); }));
  ASSERT_TRUE(runtime_.accept()) << "no new connection";
  runtime_.answerRegistration();
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, false, "pod-b");
  runtime_.answer();
  EXPECT_TRUE(front_->registered());
  EXPECT_EQ(front_->registrations(), 2);
  MutexLock lock(mu_);
  EXPECT_EQ(registration_changes_, (std::vector<bool>{true, false, true}));
  ASSERT_EQ(synchronized_.size(), 2u);
  EXPECT_EQ(synchronized_[1].pods[0].sandbox_id, "pod-b");
}

// The pods whose containers are refused are kept up to 4,096: the oldest
// is forgotten when one more comes (a runtime that never reports their
// removal cannot grow the set for ever).
TEST_F(ConfigureTest, OfRefusedSandboxesLetThroughTheLast4096AreKept) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  synchronize(3, false, "other");
  runtime_.answer();
  uint32_t stream = 5;
  for (int i = 0; i <= 4096; ++i, stream += 2)
    ASSERT_FALSE(failed(runPod(stream, cat("pod-", i)))) << i;
  EXPECT_EQ(front_->refusedAtContainers(), 4097u);
  EXPECT_FALSE(failed(createContainer(stream, "pod-0"))) << "the oldest, forgotten";
  EXPECT_TRUE(failed(createContainer(stream + 2, "pod-1")));
  EXPECT_TRUE(failed(createContainer(stream + 4, "pod-4096")));
}

// A Synchronize in parts holds up to 65,536 pods and containers in all;
// the part that passes that is refused, and the parts before it forgotten.
TEST_F(ConfigureTest, ASynchronizeInPartsPast65536ObjectsIsRefusedAndForgotten) {
  ASSERT_FALSE(failed(configure("containerd", "2.1.9+unknown", 5000)));
  ASSERT_FALSE(failed(synchronizeMany(3, true, 65535, 0)));
  ASSERT_FALSE(failed(synchronizeMany(5, true, 0, 1))) << "65,536 in all: taken";
  const ::ttrpc::Response over = synchronizeMany(7, true, 1, 0);
  ASSERT_TRUE(failed(over));
  EXPECT_EQ(over.status().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(over.status().message(),
              ::testing::HasSubstr("NRI Synchronize: over 65536 pods and containers"));
  ASSERT_FALSE(failed(synchronizeMany(9, false, 1, 0)));
  MutexLock lock(mu_);
  ASSERT_EQ(synchronized_.size(), 1u);
  EXPECT_EQ(synchronized_[0].pods.size(), 1u) << "the refused parts are not delivered";
  EXPECT_TRUE(synchronized_[0].containers.empty());
}

}  // namespace
}  // namespace crihook::nri
