// nri::PluginConnection against a runtime played by the test on a Unix
// socket: registration (accepted, refused, unanswered), the runtime's calls
// and their answers, ttrpc's rules for what a runtime sends, the bound on
// calls in flight, and the end of the connection.

#include "nri/plugin_connection.h"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>

#include "base/mutex.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/ttrpc.pb.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fake_nri_runtime.h"

namespace crihook::nri {
namespace {

using namespace std::chrono_literals;
namespace api = ::nri::pkg::api::v1alpha1;

class PluginConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = runtime_.path();
    io_thread_ = std::thread([this] { io_->run(); });
  }

  void TearDown() override {
    if (conn_) boost::asio::post(*io_, [c = conn_] { c->close(absl::CancelledError("done")); });
    work_.reset();
    io_thread_.join();
  }

  // Starts the plugin with `options` (the socket and identity filled in
  // unless set) and accepts its connection as the runtime.
  std::future<absl::Status> start(PluginConnection::Options options = {}) {
    if (options.socket_path.empty()) options.socket_path = path_;
    if (options.identity.name.empty()) options.identity = {"crihook", "10"};
    PluginConnection::Callbacks cb;
    cb.on_call = [this](std::string_view method, std::string payload,
                        std::chrono::steady_clock::time_point deadline, Reply reply) {
      MutexLock lock(mu_);
      calls_.push_back({std::string(method), std::move(payload), deadline, std::move(reply)});
    };
    cb.on_closed = [this](const absl::Status& why) { closed_.set_value(why); };
    conn_ = std::make_shared<PluginConnection>(io_, options, cb);
    auto registered = std::make_shared<std::promise<absl::Status>>();
    auto result = registered->get_future();
    boost::asio::post(*io_, [this, registered] {
      conn_->start([registered](const absl::Status& st) { registered->set_value(st); });
    });
    runtime_.accept();
    return result;
  }

  // The runtime's side (test/support/fake_nri_runtime.h).
  Message next() { return runtime_.next(); }
  void sendToPlugin(const Message& m) { runtime_.send(m); }
  void answerRegistration(const absl::Status& status = absl::OkStatus()) {
    runtime_.answerRegistration(status);
  }
  void call(uint32_t stream, const std::string& method, const std::string& payload,
            const std::string& service = "nri.pkg.api.v1alpha1.Plugin") {
    runtime_.call(stream, method, payload, service);
  }
  std::pair<uint32_t, ::ttrpc::Response> answer() { return runtime_.answer(); }

  struct Call {
    std::string method, payload;
    std::chrono::steady_clock::time_point deadline;
    Reply reply;
  };

  size_t callCount() {
    MutexLock lock(mu_);
    return calls_.size();
  }
  bool waitForCalls(size_t n) {
    return eventually([&] { return callCount() >= n; });
  }
  // The runtime's call number `i` as the plugin's callback got it.
  Call callAt(size_t i) {
    MutexLock lock(mu_);
    return calls_.at(i);
  }

  testing::TempDir dir_;
  testing::FakeNriRuntime runtime_{dir_.file("nri.sock")};
  std::string path_;
  std::shared_ptr<boost::asio::io_context> io_ = std::make_shared<boost::asio::io_context>();
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_->get_executor()};
  std::thread io_thread_;
  std::shared_ptr<PluginConnection> conn_;
  Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::promise<absl::Status> closed_;
};

TEST_F(PluginConnectionTest, RegistersThenAnswersTheRuntimesCalls) {
  auto registered = start();
  Message reg = next();
  EXPECT_EQ(reg.conn, kRuntimeServiceConn);
  EXPECT_EQ(reg.stream, 1u);
  ::ttrpc::Request req;
  ASSERT_TRUE(req.ParseFromString(reg.payload));
  EXPECT_EQ(req.service(), "nri.pkg.api.v1alpha1.Runtime");
  EXPECT_EQ(req.method(), "RegisterPlugin");
  EXPECT_EQ(req.timeout_nano(), 2'000'000'000);
  api::RegisterPluginRequest body;
  ASSERT_TRUE(body.ParseFromString(req.payload()));
  EXPECT_EQ(body.plugin_name(), "crihook");
  EXPECT_EQ(body.plugin_idx(), "10");
  sendToPlugin({kRuntimeServiceConn, 1, 2, 0, ::ttrpc::Response().SerializeAsString()});
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(registered.get().ok());

  api::ConfigureRequest configure;
  configure.set_runtime_name("containerd");
  call(1, "Configure", configure.SerializeAsString());
  ASSERT_TRUE(waitForCalls(1));
  Call c = callAt(0);
  EXPECT_EQ(c.method, "Configure");
  EXPECT_EQ(c.payload, configure.SerializeAsString());
  EXPECT_LT(c.deadline, std::chrono::steady_clock::now() + 3s) << "the runtime's timeout";
  api::ConfigureResponse resp;
  resp.set_events(0x8d);
  // From another thread, as a hook's worker answers.
  std::thread([&] { c.reply(absl::OkStatus(), resp.SerializeAsString()); }).join();
  auto [stream, got] = answer();
  EXPECT_EQ(stream, 1u);
  EXPECT_FALSE(got.has_status() && got.status().code() != 0);
  EXPECT_EQ(got.payload(), resp.SerializeAsString());

  // An error travels as ttrpc's status, its code and message.
  call(3, "CreateContainer", "");
  ASSERT_TRUE(waitForCalls(2));
  callAt(1).reply(absl::FailedPreconditionError("gpu 3 is not healthy"), "ignored");
  callAt(1).reply(absl::OkStatus(), "a second reply goes nowhere");
  auto [stream3, failed] = answer();
  EXPECT_EQ(stream3, 3u);
  EXPECT_EQ(failed.status().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(failed.status().message(), "gpu 3 is not healthy");
  EXPECT_TRUE(failed.payload().empty());
}

// Responses to nothing crihookd asked are dropped: one on a stream it never
// opened is not its registration's answer, and a second answer to the
// registration changes nothing; the connection goes on serving.
TEST_F(PluginConnectionTest, ResponsesToNothingCrihookdAskedAreDropped) {
  auto registered = start();
  const Message reg = next();
  ::ttrpc::Response refusal;
  refusal.mutable_status()->set_code(static_cast<int>(absl::StatusCode::kPermissionDenied));
  refusal.mutable_status()->set_message("not an answer to crihookd");
  sendToPlugin({kRuntimeServiceConn, reg.stream + 6, 2, 0, refusal.SerializeAsString()});
  sendToPlugin({kRuntimeServiceConn, reg.stream, 2, 0, ::ttrpc::Response().SerializeAsString()});
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(registered.get().ok()) << "the answer on the registration's stream decides";

  sendToPlugin({kRuntimeServiceConn, reg.stream, 2, 0, refusal.SerializeAsString()});
  sendToPlugin({kRuntimeServiceConn, reg.stream + 8, 2, 0, refusal.SerializeAsString()});
  call(1, "Configure", "");
  ASSERT_TRUE(waitForCalls(1));
  callAt(0).reply(absl::OkStatus(), "configured");
  auto [stream, got] = answer();
  EXPECT_EQ(stream, 1u);
  EXPECT_EQ(got.payload(), "configured");
  EXPECT_EQ(closed_.get_future().wait_for(0s), std::future_status::timeout) << "still open";
}

TEST_F(PluginConnectionTest, ARefusedRegistrationIsNamedAndEndsTheConnection) {
  auto registered = start();
  answerRegistration(absl::InvalidArgumentError("invalid plugin index"));
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  const absl::Status st = registered.get();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "NRI registration refused: invalid plugin index");
  auto closed = closed_.get_future();
  ASSERT_EQ(closed.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(closed.get(), st);
}

TEST_F(PluginConnectionTest, AnUnansweredRegistrationTimesOut) {
  PluginConnection::Options options;
  options.register_timeout = 100ms;
  auto registered = start(options);
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  const absl::Status st = registered.get();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("RegisterPlugin within 100 ms"), std::string_view::npos) << st;
}

TEST_F(PluginConnectionTest, CallsAgainstTtrpcsRulesAreAnsweredWithoutTheHandler) {
  auto registered = start();
  answerRegistration();
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);

  call(2, "Configure", "");  // an even stream id
  auto [s2, even] = answer();
  EXPECT_EQ(s2, 2u);
  EXPECT_EQ(even.status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  call(5, "Configure", "", "nri.pkg.api.v1alpha1.Runtime");  // not the plugin's service
  auto [s5, service] = answer();
  EXPECT_EQ(s5, 5u);
  EXPECT_EQ(service.status().code(), static_cast<int>(absl::StatusCode::kUnimplemented));
  call(3, "Configure", "");  // below the last
  auto [s3, reused] = answer();
  EXPECT_EQ(reused.status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  sendToPlugin({kPluginServiceConn, 7, 1, 0, "\xff not a request"});
  auto [s7, garbage] = answer();
  EXPECT_EQ(s7, 7u);
  EXPECT_EQ(garbage.status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(callCount(), 0u);
}

TEST_F(PluginConnectionTest, CallsPastTheBoundInFlightAreRefused) {
  auto registered = start();
  answerRegistration();
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  for (uint32_t i = 0; i < PluginConnection::kMaxCallsInFlight; ++i)
    call(2 * i + 1, "StateChange", "");
  ASSERT_TRUE(waitForCalls(PluginConnection::kMaxCallsInFlight));
  const uint32_t over = 2 * PluginConnection::kMaxCallsInFlight + 1;
  call(over, "StateChange", "");
  auto [stream, refused] = answer();
  EXPECT_EQ(stream, over);
  EXPECT_EQ(refused.status().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  // One answered: room for the next.
  callAt(0).reply(absl::OkStatus(), "");
  EXPECT_EQ(answer().first, 1u);
  call(over + 2, "StateChange", "");
  EXPECT_TRUE(waitForCalls(PluginConnection::kMaxCallsInFlight + 1));
}

// A runtime that stops reading: its answers wait for it, up to 16 MiB
// beyond the one being written; past that the connection ends, saying why.
TEST_F(PluginConnectionTest, AnswersWaitForARuntimeThatDoesNotReadUpTo16MiB) {
  auto registered = start();
  answerRegistration();
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  for (uint32_t i = 0; i < 6; ++i) call(2 * i + 1, "StateChange", "");
  ASSERT_TRUE(waitForCalls(6));
  const std::string payload(4'000'000, 'p');  // under ttrpc's 4 MiB
  ::ttrpc::Response resp;
  resp.set_payload(payload);
  std::string wire;
  ASSERT_TRUE(appendMessage(wire, {kPluginServiceConn, 1, 2, 0, resp.SerializeAsString()}).ok());
  ASSERT_GT(4 * wire.size(), size_t{15} << 20);  // four waiting: near 16 MiB,
  ASSERT_LE(4 * wire.size(), size_t{16} << 20);  // not over it
  // Runs on the connection's thread after everything posted before it.
  auto closedNow = [this] {
    auto p = std::make_shared<std::promise<bool>>();
    boost::asio::post(*io_, [this, p] { p->set_value(conn_->closed()); });
    return p->get_future().get();
  };
  for (size_t i = 0; i < 5; ++i) callAt(i).reply(absl::OkStatus(), payload);
  EXPECT_FALSE(closedNow()) << "one answer being written, four waiting";
  callAt(5).reply(absl::OkStatus(), payload);
  auto closed = closed_.get_future();
  ASSERT_EQ(closed.wait_for(5s), std::future_status::ready);
  const absl::Status why = closed.get();
  EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(why.message(), "the NRI runtime does not read what crihookd sends");
}

TEST_F(PluginConnectionTest, TheRuntimeGoingAwayEndsTheConnectionOnce) {
  auto registered = start();
  answerRegistration();
  ASSERT_EQ(registered.wait_for(5s), std::future_status::ready);
  call(1, "Synchronize", "");
  ASSERT_TRUE(waitForCalls(1));
  runtime_.hangUp();
  auto closed = closed_.get_future();
  ASSERT_EQ(closed.wait_for(5s), std::future_status::ready);
  const absl::Status why = closed.get();
  EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(why.message(), "the runtime closed the NRI connection");
  callAt(0).reply(absl::OkStatus(), "after the end: dropped");
}

TEST_F(PluginConnectionTest, NoSocketIsUnavailableNamingIt) {
  PluginConnection::Options options;
  options.socket_path = dir_.file("missing.sock");
  options.identity = {"crihook", "10"};
  conn_ = std::make_shared<PluginConnection>(io_, options, PluginConnection::Callbacks{});
  std::promise<absl::Status> registered;
  boost::asio::post(
      *io_, [&] { conn_->start([&](const absl::Status& st) { registered.set_value(st); }); });
  const absl::Status st = registered.get_future().get();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("missing.sock"), std::string_view::npos) << st;
}

TEST(PluginIdentityTest, NamesAndIndexesARuntimeTakes) {
  EXPECT_TRUE(validateIdentity({"crihook", "10"}).ok());
  EXPECT_TRUE(validateIdentity({"koordlet_nri", "00"}).ok());
  for (const PluginIdentity& bad : std::vector<PluginIdentity>{{"crihook", "1"},
                                                               {"crihook", "1a"},
                                                               {"crihook", "100"},
                                                               {"", "10"},
                                                               {"a/b", "10"},
                                                               {std::string(65, 'x'), "10"},
                                                               {"new\nline", "10"}}) {
    const absl::Status st = validateIdentity(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad.name << " " << bad.index;
  }
}

}  // namespace
}  // namespace crihook::nri
