#include "nri/front.h"

#include <google/protobuf/util/message_differencer.h>

#include <boost/asio/post.hpp>

#include "base/quote.h"
#include "base/text.h"

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
      backoff_(options_.reconnect_first) {}

Front::~Front() { stop(); }

void Front::start() {
  thread_ = std::thread([this] {
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
  if (method == "Configure") {
    api::ConfigureRequest req;
    req.ParseFromString(payload);
    log_->info("NRI: configured by {} {}", quote(req.runtime_name()), quote(req.runtime_version()));
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
    return reply(absl::OkStatus(), resp.SerializeAsString());
  }
  if (method == "Synchronize") {
    api::SynchronizeRequest req;
    req.ParseFromString(payload);
    log_->info("NRI: the runtime has {} pods and {} containers", req.pods_size(),
               req.containers_size());
    if (options_.on_synchronize) options_.on_synchronize(synchronizedOf(req));
    reply(absl::OkStatus(), api::SynchronizeResponse().SerializeAsString());
    // Only now does the runtime send this plugin events: a pod made
    // between the registration and here went without crihook's hooks (and
    // is not in this list either), so ready means synchronised.
    if (!registered_.exchange(true)) {
      ++registrations_;
      if (options_.on_registration) options_.on_registration(true);
    }
    return;
  }
  if (method == "CreateContainer") return onCreateContainer(std::move(payload), deadline, reply);
  if (method == "UpdateContainer") return onUpdateContainer(std::move(payload), deadline, reply);
  if (method == "StopContainer") return onStopContainer(std::move(payload), deadline, reply);
  if (method == "StateChange") return onStateChange(std::move(payload), deadline, reply);
  if (method == "Shutdown") return reply(absl::OkStatus(), emptyAnswer());
  reply(absl::UnimplementedError(cat("method ", quote(method))), {});
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
  if (deadline == Clock::time_point::max()) deadline = Clock::now() + options_.request_timeout;
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
  // A "done" event: the post-stage of the call its pre-stage began.
  auto done = [&](Waiting& waiting, std::unique_ptr<PbMessage> response) {
    auto call = waiting.take(ctr);
    if (!call) return reply(absl::OkStatus(), emptyAnswer());
    post(call, std::move(response), [reply] { reply(absl::OkStatus(), emptyAnswer()); });
  };
  switch (ev.event()) {
    case api::RUN_POD_SANDBOX: {
      auto request = std::make_unique<v1::RunPodSandboxRequest>(runPodSandboxRequestOf(ev.pod()));
      const std::string pod = ev.pod().id();
      if (answerFirst(LifecycleMethod::kRunPodSandbox)) {
        // No hook on the pod: nothing to carry or refuse, only its record.
        auto response = std::make_unique<v1::RunPodSandboxResponse>();
        response->set_pod_sandbox_id(pod);
        reply(absl::OkStatus(), emptyAnswer());
        return recordAfterAnswer(
            newCall(LifecycleMethod::kRunPodSandbox, std::move(request), deadline),
            std::move(response), true);
      }
      auto before = std::make_shared<v1::RunPodSandboxRequest>(*request);
      auto call = newCall(LifecycleMethod::kRunPodSandbox, std::move(request), deadline);
      return pre(call, [this, call, before, pod, reply](absl::Status st) {
        if (!st.ok()) return reply(st, {});
        if (call->request_changed && !MessageDifferencer::Equals(*before, *call->request)) {
          noteNotApplied(*call,
                         "sandbox labels, annotations, cgroup parent, resources: NRI 0.6.1 "
                         "cannot change a pod");
        }
        auto response = std::make_unique<v1::RunPodSandboxResponse>();
        response->set_pod_sandbox_id(pod);
        post(call, std::move(response), [reply] { reply(absl::OkStatus(), emptyAnswer()); });
      });
    }
    case api::POST_CREATE_CONTAINER: {
      auto response = std::make_unique<v1::CreateContainerResponse>();
      response->set_container_id(ctr);
      return done(created_, std::move(response));
    }
    case api::START_CONTAINER: {
      auto request = std::make_unique<v1::StartContainerRequest>();
      request->set_container_id(ctr);
      auto call = newCall(LifecycleMethod::kStartContainer, std::move(request), deadline);
      return pre(call, [this, call, ctr, reply](absl::Status st) {
        if (!st.ok()) return reply(st, {});
        started_.add(ctr, call);
        reply(absl::OkStatus(), emptyAnswer());
      });
    }
    case api::POST_START_CONTAINER:
      return done(started_, std::make_unique<v1::StartContainerResponse>());
    case api::POST_UPDATE_CONTAINER:
      return done(updated_, std::make_unique<v1::UpdateContainerResourcesResponse>());
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
      auto request = std::make_unique<v1::RemovePodSandboxRequest>();
      request->set_pod_sandbox_id(ev.pod().id());
      return both(newCall(LifecycleMethod::kRemovePodSandbox, std::move(request), deadline),
                  std::make_unique<v1::RemovePodSandboxResponse>(), reply, emptyAnswer());
    }
    default:
      return reply(absl::OkStatus(), emptyAnswer());
  }
}

}  // namespace crihook::nri
