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
#include <string>
#include <thread>
#include <vector>

#include "cri/interceptor.h"
#include "nri/budget.h"
#include "nri/plugin_connection.h"
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
    // The deadline of an event the runtime sent without one (containerd
    // always sends one): this long from its arrival.
    std::chrono::milliseconds request_timeout{2000};
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
  // How many connections were synchronised so far (a reconnect adds one).
  int registrations() const { return registrations_.load(); }
  // How many changes the hooks made that NRI could not carry.
  uint64_t notApplied() const { return not_applied_.load(); }

 private:
  void connect();
  void scheduleReconnect();
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
