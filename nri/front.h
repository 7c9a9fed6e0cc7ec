#pragma once

// NRI mode's front: crihookd as an NRI plugin drives the same seam the
// proxy drives (cri/interceptor.h), from NRI's events instead of kubelet's
// calls. Each event becomes the lifecycle call it stands for (docs/nri.md,
// "The mapping"): a runtime.v1 request made from what the runtime presents
// (nri/translate.h), the pre-stage before NRI gets its answer, the
// post-stage when NRI says the step is done. What the pre-stage changed
// goes back as NRI's adjustment or update; what NRI 0.6.1 cannot carry is
// logged, naming the pod, and counted.
//
// Speaks NRI 0.8.0's messages and serves 0.6.1 runtimes (containerd 1.7)
// as well: from a runtime that sends its timeouts at Configure (NRI >= 0.7,
// containerd 2.x) the budget is checked against its plugin_request_timeout;
// on a runtime that leaves a refused sandbox running (runtime_facts.h) a
// pod refused at RunPodSandbox is refused at each of its containers
// instead.
//
// Owns one thread running its io_context: the connection, its reconnects
// and every answer. The Interceptor's stages run where the Interceptor runs
// them and answer from there.

#include <spdlog/logger.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cri/interceptor.h"
#include "nri/budget.h"
#include "nri/plugin_connection.h"
#include "nri/runtime_facts.h"
#include "nri/translate.h"

namespace crihook::nri {

// What the runtime said exists when the connection was synchronised: its
// pods (namespace, name, uid, sandbox id) and containers (sandbox and
// container id).
struct Synchronized {
  std::vector<CallIdentity> pods;
  std::vector<CallIdentity> containers;
};

class Front {
 public:
  struct Options {
    std::string socket_path = "/var/run/nri/nri.sock";
    PluginIdentity identity{"crihook", "10"};
    std::chrono::milliseconds register_timeout{2000};
    // Between a lost connection (or a failed one) and the next try: doubled
    // each time from the first, up to the last.
    std::chrono::milliseconds reconnect_first{500};
    std::chrono::milliseconds reconnect_max{30000};
    // What crihookd keeps of the runtime's deadline for itself: the stages
    // must be done this much before it (answering late drops the plugin).
    std::chrono::milliseconds answer_margin{100};
    // What crihookd's config says the runtime's plugin_request_timeout is
    // ([nri] plugin_request_timeout). The deadline of an event the runtime
    // sent without one (containerd always sends one) is this long from its
    // arrival, or the runtime's own figure once its Configure sent one.
    std::chrono::milliseconds request_timeout{2000};
    // Asked at each Configure whose runtime sends its plugin_request_timeout
    // (NRI >= 0.7): whether the hooks fit under it (budget.h checkBudget
    // with TimeoutSource::kRuntime). Not OK: the Configure is refused with
    // FAILED_PRECONDITION and that message (the runtime drops the plugin,
    // as it would at the first event cut short), logged, on_refused is
    // called, and the connection is tried again with backoff. Null: not
    // checked.
    std::function<absl::Status(std::chrono::milliseconds runtime_timeout)> check_budget;
    // Called on the Front's thread when a Configure was refused (why).
    std::function<void(const absl::Status& why)> on_refused;
    DeviceLookup lookup = statDevice;
    // Called on the Front's thread (keep it short: the runtime waits): with
    // true once a connection is registered and synchronised (registered()),
    // with false when it ends.
    std::function<void(bool registered)> on_registration;
    // Called on the Front's thread with each Synchronize, before it is
    // answered.
    std::function<void(const Synchronized&)> on_synchronize;
    // Whether a hook is on a stage (asked at each Configure): events whose
    // stages have none, and that make, change or remove nothing crihookd
    // keeps records of, are not subscribed (nri/budget.h
    // subscribedEvents); with no hook on CreateContainer's or
    // UpdateContainerResources' post-stage, that stage runs as the
    // pre-stage's event is answered, and the Post* event is not subscribed.
    // An event none of whose stages has a hook is answered first and its
    // records made right after (answerFirst). Null: every event, each stage
    // at its own, answered once its stages ran.
    StageSubscribed has_hooks;
  };

  // `interceptor` and `log` outlive the Front.
  Front(Interceptor& interceptor, Options options, std::shared_ptr<spdlog::logger> log);
  ~Front();  // stop()s
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  // Starts the thread; it connects, and reconnects whenever the connection
  // ends, until stop().
  void start();
  // Closes the connection and joins the thread. Stages still running answer
  // into nothing.
  void stop();

  // Whether the current connection is registered and synchronised: the
  // runtime sends it every event from then on.
  bool registered() const { return registered_.load(); }
  // How many pods refused at RunPodSandbox were let through because the
  // runtime would leak their sandbox (RefusedSandbox::kLeaked), their
  // containers refused instead.
  uint64_t refusedAtContainers() const { return refused_at_containers_.load(); }
  // How many connections were synchronised so far (a reconnect adds one).
  int registrations() const { return registrations_.load(); }
  // How many changes the hooks made that NRI could not carry.
  uint64_t notApplied() const { return not_applied_.load(); }

 private:
  void connect();
  void scheduleReconnect();
  void onConfigure(std::string payload, Reply reply);
  void onSynchronize(std::string payload, Reply reply);
  // A pod's RunPodSandbox pre-stage refused with `why`: answered with `why`
  // where the runtime removes a refused sandbox, else let through and
  // remembered, so that its containers are refused (refusedPod).
  void refusePod(const InterceptedCall& call, const std::string& pod, const absl::Status& why,
                 const Reply& reply);
  // The refusal a container of `sandbox` gets: OK when its pod was not
  // refused.
  absl::Status refusedPod(const std::string& sandbox) const;
  void onCall(std::string_view method, std::string payload,
              std::chrono::steady_clock::time_point deadline, Reply reply);
  void onCreateContainer(std::string payload, std::chrono::steady_clock::time_point deadline,
                         Reply reply);
  void onUpdateContainer(std::string payload, std::chrono::steady_clock::time_point deadline,
                         Reply reply);
  void onStopContainer(std::string payload, std::chrono::steady_clock::time_point deadline,
                       Reply reply);
  void onStateChange(std::string payload, std::chrono::steady_clock::time_point deadline,
                     Reply reply);
  // StateChange's RUN_POD_SANDBOX: the pre-stage, then (NRI has no Post*
  // for a pod) the post-stage at once; a refusal goes to refusePod().
  void onRunPodSandbox(const api::PodSandbox& pod, std::chrono::steady_clock::time_point deadline,
                       Reply reply);
  // StateChange's START_CONTAINER: the pre-stage; the call waits in
  // started_ for POST_START_CONTAINER.
  void onStartContainer(const std::string& ctr, std::chrono::steady_clock::time_point deadline,
                        Reply reply);
  class Waiting;
  // A "done" event (PostCreate, PostStart, PostUpdate): the post-stage of
  // the call `waiting` holds for `ctr`, with `response` as the runtime's
  // answer; answered at once when none waits.
  void done(Waiting& waiting, const std::string& ctr,
            std::unique_ptr<google::protobuf::Message> response, Reply reply);
  // Runs the pre-stage of `call`; `then` gets its status on this Front's
  // thread.
  void pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> then);
  // Runs the post-stage with the step done (OK, `response`); `then` on this
  // Front's thread.
  void post(std::shared_ptr<InterceptedCall> call,
            std::unique_ptr<google::protobuf::Message> response, std::function<void()> then);
  // Pre and post at once: a step NRI reports when it is done or cannot be
  // refused (StopContainer, StopPodSandbox, RemoveContainer,
  // RemovePodSandbox).
  void both(std::shared_ptr<InterceptedCall> call,
            std::unique_ptr<google::protobuf::Message> response, Reply reply,
            std::string empty_answer);
  std::shared_ptr<InterceptedCall> newCall(LifecycleMethod method,
                                           std::unique_ptr<google::protobuf::Message> request,
                                           std::chrono::steady_clock::time_point deadline);
  void noteNotApplied(const InterceptedCall& call, const std::string& what);
  // Whether `method`'s post-stage waits for NRI's Post* event: whether this
  // connection subscribed to it (subscribedEvents: a hook is on the stage,
  // or has_hooks is not given). Otherwise it runs, making the records, as
  // the pre-stage's event is answered.
  bool waitsForDone(LifecycleMethod method) const;
  // Whether no hook is on either stage of `method` (has_hooks, asked at
  // Configure): its event is then answered before its stages run. They only
  // make records, which the runtime does not wait for; while it waits for a
  // plugin, containerd holds every pod operation of the node.
  bool answerFirst(LifecycleMethod method) const {
    return answer_first_[static_cast<size_t>(method)];
  }
  // Runs `call`'s stages (the pre-stage too when `with_pre`) in a handler
  // of its own queued behind the answer just given: the answer is written
  // first, and the records are made before the next event is read. The
  // stages have no hook (answerFirst, or a post-stage nothing waits for),
  // so they run inline.
  void recordAfterAnswer(std::shared_ptr<InterceptedCall> call,
                         std::unique_ptr<google::protobuf::Message> response, bool with_pre);

  Interceptor& interceptor_;
  Options options_;
  std::shared_ptr<spdlog::logger> log_;
  // Shared with what answers later from other threads (a stage's callback,
  // a Reply): it outlives the Front for them; run only by thread_.
  std::shared_ptr<boost::asio::io_context> io_ = std::make_shared<boost::asio::io_context>(1);
  boost::asio::steady_timer reconnect_timer_;
  std::thread thread_;
  std::shared_ptr<PluginConnection> conn_;
  std::chrono::milliseconds backoff_;
  bool stopping_ = false;
  std::atomic<bool> registered_{false};
  std::atomic<int> registrations_{0};
  std::atomic<uint64_t> not_applied_{0};
  std::atomic<uint64_t> refused_at_containers_{0};
  // Of the runtime that configured the current connection. Front thread
  // only.
  std::string runtime_;  // "containerd 2.1.9+unknown"
  RefusedSandbox refused_sandbox_ = RefusedSandbox::kUnknown;
  std::chrono::milliseconds request_timeout_;  // the runtime's, else the config's
  // Runtime versions already warned about (once per version per process),
  // and the runtime's timeout last warned about. Front thread only.
  std::set<std::string> warned_leaks_;
  std::chrono::milliseconds warned_timeout_{0};
  // A Synchronize in parts (NRI 0.8's `more`): what came so far.
  Synchronized sync_parts_;
  // Pods refused at RunPodSandbox and let through (refusePod), by sandbox
  // id, with their refusal; forgotten at RemovePodSandbox, and past
  // kMaxWaiting the oldest. Front thread only.
  std::map<std::string, std::pair<uint64_t, absl::Status>> refused_pods_;
  uint64_t refused_next_ = 0;
  // The events the current connection subscribed to (its Configure answer).
  // Front thread only.
  int32_t events_ = 0;
  // answerFirst() per method, for the current connection. Front thread only.
  std::array<bool, kLifecycleMethods> answer_first_{};
  // Calls whose pre-stage ran, waiting for NRI's "done" event (PostCreate,
  // PostStart, PostUpdate), by container id. Past a bound the oldest is
  // forgotten: its event never came (a reconnect in between, a runtime
  // that skips it). Front thread only.
  class Waiting {
   public:
    void add(const std::string& id, std::shared_ptr<InterceptedCall> call);
    std::shared_ptr<InterceptedCall> take(const std::string& id);  // null when none
    void erase(const std::string& id) { calls_.erase(id); }

   private:
    std::map<std::string, std::pair<uint64_t, std::shared_ptr<InterceptedCall>>> calls_;
    uint64_t next_ = 0;  // arrival order
  };
  Waiting created_, started_, updated_;
};

}  // namespace crihook::nri
