#include "nri/front.h"

#include <google/protobuf/util/message_differencer.h>

#include <boost/asio/post.hpp>

#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"

namespace crihook::nri {

namespace asio = boost::asio;
namespace v1 = ::runtime::v1;
using Clock = std::chrono::steady_clock;
using PbMessage = google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

namespace {

// Every event of NRI 0.6.1 (bit `event - 1` each).
constexpr int32_t kAllEvents = 0x7ff;
// Calls waiting for NRI's "done" event are forgotten past this many (the
// event never came: a reconnect in between, a runtime that skips it).
constexpr size_t kMaxWaiting = 4096;
// A Synchronize in parts holds at most this many pods and containers in
// all: kubelet runs at most 110 pods a node by default and a few thousand
// containers is past any node's; more is a runtime gone wrong.
constexpr size_t kMaxSyncObjects = 1 << 16;
// A runtime's timeout above this is taken as this (a bogus figure must not
// overflow the budget's sums).
constexpr std::chrono::milliseconds kMaxRuntimeTimeout = std::chrono::hours(1);

std::string emptyAnswer() { return api::Empty().SerializeAsString(); }

Synchronized synchronizedOf(const api::SynchronizeRequest& req) {
  Synchronized out;
  for (const api::PodSandbox& p : req.pods()) {
    CallIdentity& id = out.pods.emplace_back();
    id.pod_namespace = p.namespace_();
    id.pod_name = p.name();
    id.pod_uid = p.uid();
    id.sandbox_id = p.id();
  }
  for (const api::Container& c : req.containers()) {
    CallIdentity& id = out.containers.emplace_back();
    id.sandbox_id = c.pod_sandbox_id();
    id.container_id = c.id();
  }
  return out;
}

// The step is done (NRI reports it or it cannot fail): `response` is what
// the post-stage sees as the runtime's answer.
void markDone(InterceptedCall& call, std::unique_ptr<PbMessage> response) {
  call.backend_status = absl::OkStatus();
  noteCreatedId(specOf(call.method), *response, call.identity);
  call.response = std::move(response);
}

}  // namespace

void Front::Waiting::add(const std::string& id, std::shared_ptr<InterceptedCall> call) {
  if (calls_.size() >= kMaxWaiting && !calls_.count(id)) {
    // Rare (an event that never comes, 4,096 times): a scan is fine.
    auto oldest = calls_.begin();
    for (auto it = calls_.begin(); it != calls_.end(); ++it) {
      if (it->second.first < oldest->second.first) oldest = it;
    }
    calls_.erase(oldest);
  }
  calls_[id] = {next_++, std::move(call)};
}

std::shared_ptr<InterceptedCall> Front::Waiting::take(const std::string& id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return nullptr;
  auto call = std::move(it->second.second);
  calls_.erase(it);
  return call;
}

Front::Front(Interceptor& interceptor, Options options, std::shared_ptr<spdlog::logger> log)
    : interceptor_(interceptor),
      options_(std::move(options)),
      log_(std::move(log)),
      reconnect_timer_(*io_),
      backoff_(options_.reconnect_first),
      request_timeout_(options_.request_timeout) {}

Front::~Front() { stop(); }

void Front::start() {
  thread_ = namedThread("nri-front", [this] {
    auto work = asio::make_work_guard(*io_);
    asio::post(*io_, [this] { connect(); });
    io_->run();
  });
}

void Front::stop() {
  if (!thread_.joinable()) return;
  asio::post(*io_, [this] {
    stopping_ = true;
    reconnect_timer_.cancel();
    if (conn_) conn_->close(absl::CancelledError("crihookd stops"));
    io_->stop();
  });
  thread_.join();
}

void Front::connect() {
  PluginConnection::Callbacks cb;
  cb.on_call = [this](std::string_view method, std::string payload, Clock::time_point deadline,
                      Reply reply) {
    onCall(method, std::move(payload), deadline, std::move(reply));
  };
  cb.on_closed = [this](const absl::Status& why) {
    const bool was = registered_.exchange(false);
    if (stopping_) return;
    if (was && options_.on_registration) options_.on_registration(false);
    log_->warn("NRI connection to {} ended: {}", options_.socket_path, why.ToString());
    scheduleReconnect();
  };
  conn_ = std::make_shared<PluginConnection>(
      io_,
      PluginConnection::Options{options_.socket_path, options_.identity, options_.register_timeout},
      std::move(cb));
  conn_->start([this](const absl::Status& st) {
    if (!st.ok()) return;  // on_closed follows
    backoff_ = options_.reconnect_first;
    log_->info("NRI: registered at {} as {}-{}", options_.socket_path, options_.identity.index,
               options_.identity.name);
  });
}

void Front::scheduleReconnect() {
  reconnect_timer_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.reconnect_max);
  reconnect_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    connect();
  });
}

void Front::onCall(std::string_view method, std::string payload, Clock::time_point deadline,
                   Reply reply) {
  if (method == "Configure") return onConfigure(std::move(payload), std::move(reply));
  if (method == "Synchronize") return onSynchronize(std::move(payload), std::move(reply));
  if (method == "CreateContainer") return onCreateContainer(std::move(payload), deadline, reply);
  if (method == "UpdateContainer") return onUpdateContainer(std::move(payload), deadline, reply);
  if (method == "StopContainer") return onStopContainer(std::move(payload), deadline, reply);
  if (method == "StateChange") return onStateChange(std::move(payload), deadline, reply);
  if (method == "Shutdown") return reply(absl::OkStatus(), emptyAnswer());
  reply(absl::UnimplementedError(cat("method ", quote(method))), {});
}

void Front::onConfigure(std::string payload, Reply reply) {
  api::ConfigureRequest req;
  if (!req.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("ConfigureRequest does not decode"), {});
  runtime_ = cat(boundedMessage(req.runtime_name()), " ", boundedMessage(req.runtime_version()));
  refused_sandbox_ = refusedSandboxOf(req.runtime_name(), req.runtime_version());
  sync_parts_ = {};
  using std::chrono::milliseconds;
  // NRI >= 0.7 sends the runtime's timeouts (milliseconds); 0.6 sends none.
  const bool sent = req.request_timeout() > 0;
  log_->info("NRI: configured by {} {}; its plugin_request_timeout {}, registration timeout {}",
             quote(req.runtime_name()), quote(req.runtime_version()),
             sent ? durationText(milliseconds(req.request_timeout()))
                  : "not sent (NRI < 0.7): nri.plugin_request_timeout = " +
                        durationText(options_.request_timeout) + " is taken",
             req.registration_timeout() > 0 ? durationText(milliseconds(req.registration_timeout()))
                                            : std::string("not sent"));
  request_timeout_ = options_.request_timeout;
  if (sent) {
    const milliseconds theirs = std::min(milliseconds(req.request_timeout()), kMaxRuntimeTimeout);
    if (theirs != options_.request_timeout && theirs != warned_timeout_) {
      warned_timeout_ = theirs;
      log_->warn(
          "NRI: {}'s plugin_request_timeout is {}, nri.plugin_request_timeout says {}: crihookd "
          "goes by the runtime's; set nri.plugin_request_timeout = \"{}\" to match it",
          runtime_, durationText(theirs), durationText(options_.request_timeout),
          durationText(theirs));
    }
    if (options_.check_budget) {
      if (absl::Status st = options_.check_budget(theirs); !st.ok()) {
        const absl::Status why = absl::FailedPreconditionError(
            cat("crihookd refuses the registration: ", sv(st.message())));
        log_->error("NRI: {}", sv(why.message()));
        if (options_.on_refused) options_.on_refused(why);
        return reply(why, {});
      }
    }
    request_timeout_ = theirs;
  }
  if (refused_sandbox_ == RefusedSandbox::kLeaked && warned_leaks_.insert(runtime_).second) {
    log_->warn(
        "NRI: {} leaves the sandbox of a pod an NRI plugin refuses at RunPodSandbox running, "
        "listed by no CRI call, and fails its next start on that pod's name (containerd #13355, "
        "fixed in 2.2.6 and 2.3.3): crihookd lets such a pod's sandbox be made and refuses each "
        "of its containers instead, naming the refusal",
        runtime_);
  }
  events_ = options_.has_hooks ? subscribedEvents(options_.has_hooks) : kAllEvents;
  for (size_t i = 0; i < kLifecycleMethods; ++i) {
    const auto m = static_cast<LifecycleMethod>(i);
    answer_first_[i] = options_.has_hooks && !options_.has_hooks(m, Phase::kPre) &&
                       !options_.has_hooks(m, Phase::kPost);
  }
  api::ConfigureResponse resp;
  resp.set_events(events_);
  std::string names;
  for (const EventStages& e : eventStages()) {
    if (events_ & eventBit(e.number)) names += cat(names.empty() ? "" : ", ", e.event);
  }
  log_->info("NRI: subscribed to {}", names);
  reply(absl::OkStatus(), resp.SerializeAsString());
}

void Front::onSynchronize(std::string payload, Reply reply) {
  api::SynchronizeRequest req;
  if (!req.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("SynchronizeRequest does not decode"), {});
  Synchronized part = synchronizedOf(req);
  if (sync_parts_.pods.size() + sync_parts_.containers.size() + part.pods.size() +
          part.containers.size() >
      kMaxSyncObjects) {
    sync_parts_ = {};
    return reply(absl::ResourceExhaustedError(
                     cat("NRI Synchronize: over ", kMaxSyncObjects, " pods and containers")),
                 {});
  }
  auto append = [](std::vector<CallIdentity>& to, std::vector<CallIdentity>& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(sync_parts_.pods, part.pods);
  append(sync_parts_.containers, part.containers);
  api::SynchronizeResponse resp;
  if (req.more()) {
    // NRI 0.8 checks that a part's answer says `more` and updates nothing.
    resp.set_more(true);
    return reply(absl::OkStatus(), resp.SerializeAsString());
  }
  const Synchronized all = std::move(sync_parts_);
  sync_parts_ = {};
  log_->info("NRI: the runtime has {} pods and {} containers", all.pods.size(),
             all.containers.size());
  if (options_.on_synchronize) options_.on_synchronize(all);
  reply(absl::OkStatus(), resp.SerializeAsString());
  // Only now does the runtime send this plugin events: a pod made
  // between the registration and here went without crihook's hooks (and
  // is not in this list either), so ready means synchronised.
  if (!registered_.exchange(true)) {
    ++registrations_;
    if (options_.on_registration) options_.on_registration(true);
  }
}

void Front::refusePod(const InterceptedCall& call, const std::string& pod, const absl::Status& why,
                      const Reply& reply) {
  if (refused_sandbox_ != RefusedSandbox::kLeaked) return reply(why, {});
  // The runtime would keep this sandbox's pause task running where no CRI
  // call sees it (runtime_facts.h): the sandbox is let through, to be
  // stopped and removed as any other, and what the hooks refused is
  // refused at each container, where the runtime does clean up.
  if (refused_pods_.size() >= kMaxWaiting && !refused_pods_.count(pod)) {
    auto oldest = refused_pods_.begin();
    for (auto it = refused_pods_.begin(); it != refused_pods_.end(); ++it) {
      if (it->second.first < oldest->second.first) oldest = it;
    }
    refused_pods_.erase(oldest);
  }
  refused_pods_[pod] = {refused_next_++, why};
  ++refused_at_containers_;
  log_->warn(
      "NRI: RunPodSandbox {}: refused: {}; {} would leak a refused sandbox: the sandbox is let "
      "through and its containers are refused",
      identityTags(call.identity), why.ToString(), runtime_);
  reply(absl::OkStatus(), emptyAnswer());
}

absl::Status Front::refusedPod(const std::string& sandbox) const {
  auto it = refused_pods_.find(sandbox);
  if (it == refused_pods_.end()) return absl::OkStatus();
  const absl::Status& why = it->second.second;
  return absl::Status(why.code(), cat("crihook refused this pod at RunPodSandbox (its sandbox "
                                      "was let through: ",
                                      runtime_, " would leak it): ", sv(why.message())));
}

bool Front::waitsForDone(LifecycleMethod method) const {
  return (events_ & eventBit(eventOf(method, Phase::kPost))) != 0;
}

std::shared_ptr<InterceptedCall> Front::newCall(LifecycleMethod method,
                                                std::unique_ptr<PbMessage> request,
                                                Clock::time_point deadline) {
  auto call = std::make_shared<InterceptedCall>();
  call->method = method;
  call->api = CriApi::kV1;
  if (deadline == Clock::time_point::max()) deadline = Clock::now() + request_timeout_;
  call->deadline = deadline - options_.answer_margin;
  call->identity = identityFromRequest(specOf(method), *request);
  call->request = std::move(request);
  return call;
}

void Front::pre(std::shared_ptr<InterceptedCall> call, std::function<void(absl::Status)> then) {
  // After stop() the io_context runs no more: a late stage's answer waits
  // in it, never run, and goes with the last owner.
  interceptor_.pre(call, [io = io_, then = std::move(then)](absl::Status st) {
    asio::post(*io, [then, st] { then(st); });
  });
}

void Front::post(std::shared_ptr<InterceptedCall> call, std::unique_ptr<PbMessage> response,
                 std::function<void()> then) {
  markDone(*call, std::move(response));
  interceptor_.post(call, [io = io_, then = std::move(then)] { asio::post(*io, then); });
}

void Front::recordAfterAnswer(std::shared_ptr<InterceptedCall> call,
                              std::unique_ptr<PbMessage> response, bool with_pre) {
  // The Reply queued the answer on io_; this handler comes after it. The
  // interceptor outlives the Front, and a stage without hooks runs inline:
  // nothing here runs on another thread or after the Front is gone.
  auto holder = std::make_shared<std::unique_ptr<PbMessage>>(std::move(response));
  asio::post(*io_, [&interceptor = interceptor_, call, holder, with_pre] {
    auto records = [&interceptor, call, holder](absl::Status) {
      markDone(*call, std::move(*holder));
      interceptor.post(call, [] {});
    };
    if (!with_pre) return records(absl::OkStatus());
    interceptor.pre(call, records);
  });
}

void Front::both(std::shared_ptr<InterceptedCall> call, std::unique_ptr<PbMessage> response,
                 Reply reply, std::string empty_answer) {
  if (answerFirst(call->method)) {
    reply(absl::OkStatus(), std::move(empty_answer));
    return recordAfterAnswer(std::move(call), std::move(response), true);
  }
  auto response_holder = std::make_shared<std::unique_ptr<PbMessage>>(std::move(response));
  pre(call, [this, call, response_holder, reply, empty_answer](absl::Status st) {
    if (!st.ok()) {
      // The step is done already: a rejection cannot undo it.
      log_->warn("NRI: {} {}: a hook refused a step NRI reports done: {}", methodName(call->method),
                 identityTags(call->identity), st.ToString());
    }
    post(call, std::move(*response_holder),
         [reply, empty_answer] { reply(absl::OkStatus(), empty_answer); });
  });
}

void Front::noteNotApplied(const InterceptedCall& call, const std::string& what) {
  ++not_applied_;
  log_->warn("NRI: {} {}: not applied: {}", methodName(call.method), identityTags(call.identity),
             what);
}

void Front::onCreateContainer(std::string payload, Clock::time_point deadline, Reply reply) {
  api::CreateContainerRequest req;
  if (!req.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("CreateContainerRequest does not decode"), {});
  if (absl::Status refused = refusedPod(req.pod().id()); !refused.ok()) {
    CallIdentity id;
    id.pod_namespace = req.pod().namespace_();
    id.pod_name = req.pod().name();
    id.sandbox_id = req.pod().id();
    id.container_id = req.container().id();
    log_->warn("NRI: CreateContainer {}: {}", identityTags(id), refused.ToString());
    return reply(refused, {});
  }
  auto request = std::make_unique<v1::CreateContainerRequest>(
      createContainerRequestOf(req.pod(), req.container()));
  auto before = std::make_shared<v1::CreateContainerRequest>(*request);
  auto call = newCall(LifecycleMethod::kCreateContainer, std::move(request), deadline);
  const std::string id = req.container().id();
  pre(call, [this, call, before, id, reply](absl::Status st) {
    if (!st.ok()) return reply(st, {});
    api::CreateContainerResponse resp;
    if (call->request_changed) {
      auto answer = adjustmentOf(
          *before, static_cast<const v1::CreateContainerRequest&>(*call->request), options_.lookup);
      if (!answer.ok()) return reply(answer.status(), {});
      for (const auto& line : answer->not_applied) noteNotApplied(*call, line);
      *resp.mutable_adjust() = std::move(answer->adjust);
    }
    if (!waitsForDone(LifecycleMethod::kCreateContainer)) {
      // No hook waits for the container to exist: PostCreateContainer is
      // not subscribed (a round trip less), and its records are made as
      // soon as the answer is on its way.
      auto response = std::make_unique<v1::CreateContainerResponse>();
      response->set_container_id(id);
      reply(absl::OkStatus(), resp.SerializeAsString());
      return recordAfterAnswer(call, std::move(response), false);
    }
    created_.add(id, call);
    reply(absl::OkStatus(), resp.SerializeAsString());
  });
}

void Front::onUpdateContainer(std::string payload, Clock::time_point deadline, Reply reply) {
  api::UpdateContainerRequest req;
  if (!req.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("UpdateContainerRequest does not decode"), {});
  auto request = std::make_unique<v1::UpdateContainerResourcesRequest>();
  request->set_container_id(req.container().id());
  *request->mutable_linux() = resourcesOf(req.linux_resources());
  const v1::LinuxContainerResources before = request->linux();
  auto call = newCall(LifecycleMethod::kUpdateContainerResources, std::move(request), deadline);
  const std::string id = req.container().id();
  pre(call, [this, call, before, id, reply](absl::Status st) {
    if (!st.ok()) return reply(st, {});
    api::UpdateContainerResponse resp;
    const auto& after =
        static_cast<const v1::UpdateContainerResourcesRequest&>(*call->request).linux();
    if (!MessageDifferencer::Equals(before, after)) {
      auto* update = resp.add_update();
      update->set_container_id(id);
      *update->mutable_linux()->mutable_resources() = nriResourcesOf(after);
      if (after.oom_score_adj() != before.oom_score_adj())
        noteNotApplied(*call, "oom_score_adj: NRI 0.6.1 cannot change it");
    }
    if (!waitsForDone(LifecycleMethod::kUpdateContainerResources)) {
      reply(absl::OkStatus(), resp.SerializeAsString());
      return recordAfterAnswer(call, std::make_unique<v1::UpdateContainerResourcesResponse>(),
                               false);
    }
    updated_.add(id, call);
    reply(absl::OkStatus(), resp.SerializeAsString());
  });
}

void Front::onStopContainer(std::string payload, Clock::time_point deadline, Reply reply) {
  api::StopContainerRequest req;
  if (!req.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("StopContainerRequest does not decode"), {});
  auto request = std::make_unique<v1::StopContainerRequest>();
  request->set_container_id(req.container().id());
  auto call = newCall(LifecycleMethod::kStopContainer, std::move(request), deadline);
  both(call, std::make_unique<v1::StopContainerResponse>(), reply,
       api::StopContainerResponse().SerializeAsString());
}

void Front::onStateChange(std::string payload, Clock::time_point deadline, Reply reply) {
  api::StateChangeEvent ev;
  if (!ev.ParseFromString(payload))
    return reply(absl::InvalidArgumentError("StateChangeEvent does not decode"), {});
  const std::string ctr = ev.container().id();
  switch (ev.event()) {
    case api::RUN_POD_SANDBOX:
      return onRunPodSandbox(ev.pod(), deadline, reply);
    case api::POST_CREATE_CONTAINER: {
      auto response = std::make_unique<v1::CreateContainerResponse>();
      response->set_container_id(ctr);
      return done(created_, ctr, std::move(response), reply);
    }
    case api::START_CONTAINER:
      return onStartContainer(ctr, deadline, reply);
    case api::POST_START_CONTAINER:
      return done(started_, ctr, std::make_unique<v1::StartContainerResponse>(), reply);
    case api::POST_UPDATE_CONTAINER:
      return done(updated_, ctr, std::make_unique<v1::UpdateContainerResourcesResponse>(), reply);
    case api::STOP_POD_SANDBOX: {
      auto request = std::make_unique<v1::StopPodSandboxRequest>();
      request->set_pod_sandbox_id(ev.pod().id());
      return both(newCall(LifecycleMethod::kStopPodSandbox, std::move(request), deadline),
                  std::make_unique<v1::StopPodSandboxResponse>(), reply, emptyAnswer());
    }
    case api::REMOVE_CONTAINER: {
      created_.erase(ctr);
      started_.erase(ctr);
      updated_.erase(ctr);
      auto request = std::make_unique<v1::RemoveContainerRequest>();
      request->set_container_id(ctr);
      return both(newCall(LifecycleMethod::kRemoveContainer, std::move(request), deadline),
                  std::make_unique<v1::RemoveContainerResponse>(), reply, emptyAnswer());
    }
    case api::REMOVE_POD_SANDBOX: {
      refused_pods_.erase(ev.pod().id());
      auto request = std::make_unique<v1::RemovePodSandboxRequest>();
      request->set_pod_sandbox_id(ev.pod().id());
      return both(newCall(LifecycleMethod::kRemovePodSandbox, std::move(request), deadline),
                  std::make_unique<v1::RemovePodSandboxResponse>(), reply, emptyAnswer());
    }
    default:
      return reply(absl::OkStatus(), emptyAnswer());
  }
}

void Front::onRunPodSandbox(const api::PodSandbox& pod, Clock::time_point deadline, Reply reply) {
  auto request = std::make_unique<v1::RunPodSandboxRequest>(runPodSandboxRequestOf(pod));
  const std::string id = pod.id();
  if (answerFirst(LifecycleMethod::kRunPodSandbox)) {
    // No hook on the pod: nothing to carry or refuse, only its record.
    auto response = std::make_unique<v1::RunPodSandboxResponse>();
    response->set_pod_sandbox_id(id);
    reply(absl::OkStatus(), emptyAnswer());
    return recordAfterAnswer(newCall(LifecycleMethod::kRunPodSandbox, std::move(request), deadline),
                             std::move(response), true);
  }
  auto before = std::make_shared<v1::RunPodSandboxRequest>(*request);
  auto call = newCall(LifecycleMethod::kRunPodSandbox, std::move(request), deadline);
  pre(call, [this, call, before, id, reply](absl::Status st) {
    if (!st.ok()) return refusePod(*call, id, st, reply);
    if (call->request_changed && !MessageDifferencer::Equals(*before, *call->request)) {
      noteNotApplied(*call,
                     "sandbox labels, annotations, cgroup parent, resources: NRI 0.6.1 "
                     "cannot change a pod");
    }
    auto response = std::make_unique<v1::RunPodSandboxResponse>();
    response->set_pod_sandbox_id(id);
    post(call, std::move(response), [reply] { reply(absl::OkStatus(), emptyAnswer()); });
  });
}

void Front::onStartContainer(const std::string& ctr, Clock::time_point deadline, Reply reply) {
  auto request = std::make_unique<v1::StartContainerRequest>();
  request->set_container_id(ctr);
  auto call = newCall(LifecycleMethod::kStartContainer, std::move(request), deadline);
  pre(call, [this, call, ctr, reply](absl::Status st) {
    if (!st.ok()) return reply(st, {});
    started_.add(ctr, call);
    reply(absl::OkStatus(), emptyAnswer());
  });
}

void Front::done(Waiting& waiting, const std::string& ctr, std::unique_ptr<PbMessage> response,
                 Reply reply) {
  auto call = waiting.take(ctr);
  if (!call) return reply(absl::OkStatus(), emptyAnswer());
  post(call, std::move(response), [reply] { reply(absl::OkStatus(), emptyAnswer()); });
}

}  // namespace crihook::nri
