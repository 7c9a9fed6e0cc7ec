// The data path, end to end through crihookd's Server, against an in-process
// fake runtime: pass-through of any method, streaming, deadlines,
// cancellation, status details, large messages, backend outages, GOAWAY; a
// configuration naming the terminating relay of old. And what relay.h holds
// beside Connection: RelayContext's defaults, ActiveCalls.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/eventually.h"
#include "test/support/proxy_fixture.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr const char* kVersion = "/runtime.v1.RuntimeService/Version";
constexpr const char* kListContainers = "/runtime.v1.RuntimeService/ListContainers";
constexpr const char* kEvents = "/runtime.v1.RuntimeService/GetContainerEvents";

std::chrono::system_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

void serveVersion(FakeCriServer& backend) {
  backend.onUnary(kVersion, [](FakeCall& call, std::string* out) {
    v1::VersionRequest req;
    req.ParseFromString(call.request);
    v1::VersionResponse resp;
    resp.set_version(req.version());
    resp.set_runtime_name("fake");
    resp.set_runtime_version("1.0.0");
    resp.set_runtime_api_version("v1");
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
}

grpc::Status callVersion(const std::shared_ptr<grpc::Channel>& ch, v1::VersionResponse* resp,
                         std::chrono::milliseconds timeout = 5000ms) {
  auto stub = v1::RuntimeService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(in(timeout));
  v1::VersionRequest req;
  req.set_version("0.1.0");
  return stub->Version(&ctx, req, resp);
}

using RelayTest = ProxyFixture;

TEST_F(RelayTest, UnaryCallIsAnsweredAsTheRuntimeAnswersIt) {
  serveVersion(backend_);
  backend_.start();
  startProxy();
  v1::VersionResponse direct, proxied;
  ASSERT_TRUE(callVersion(directChannel(), &direct).ok());
  grpc::Status s = callVersion(proxyChannel(), &proxied);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(direct.SerializeAsString(), proxied.SerializeAsString());
  EXPECT_EQ(proxied.runtime_name(), "fake");
}

// listen() makes the socket and leaves connections in its backlog; only
// serve() accepts (crihookd installs its seccomp filter in between).
TEST_F(RelayTest, ListeningIsNotServingUntilServe) {
  serveVersion(backend_);
  backend_.start();
  proxy_ = std::make_unique<Server>(proxyConfig(), pass_, logger("proxy"));
  ASSERT_TRUE(proxy_->listen().ok());
  ASSERT_TRUE(std::filesystem::exists(dir_.file("crihook.sock")));
  v1::VersionResponse resp;
  auto ch = proxyChannel();
  grpc::Status s = callVersion(ch, &resp, 300ms);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(backend_.calls().empty());
  proxy_->serve();
  s = callVersion(ch, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(RelayTest, MethodUnknownToCrihooksProtoPassesThroughByteForByte) {
  const std::string method = "/runtime.v1.RuntimeService/SomethingFromKubernetes2030";
  backend_.onUnary(method, [](FakeCall& call, std::string* out) {
    *out = "echo:" + call.request;
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  std::string payload("\x00\x01\xff binary \x7f", 13);
  grpc::ClientContext ctx;
  ctx.set_deadline(in(5000ms));
  std::string reply;
  grpc::Status s = genericUnary(proxyChannel(), &ctx, method, payload, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, "echo:" + payload);
  // Not Unimplemented, and a service crihook has never heard of works too.
  grpc::ClientContext ctx2;
  ctx2.set_deadline(in(5000ms));
  backend_.onUnary("/vendor.Other/Call", [](FakeCall&, std::string* out) {
    *out = "ok";
    return grpc::Status::OK;
  });
  ASSERT_TRUE(genericUnary(proxyChannel(), &ctx2, "/vendor.Other/Call", "x", &reply).ok());
  EXPECT_EQ(reply, "ok");
}

TEST_F(RelayTest, ServerStreamingCallDeliversEveryEventAsItHappens) {
  backend_.onStream(kEvents, [](FakeCall&, const std::function<bool(const std::string&)>& write) {
    for (int i = 0; i < 3; ++i) {
      v1::ContainerEventResponse ev;
      ev.set_container_id(cat("c", i));  // not "c" + to_string: GCC 12 warns (bug 105329)
      ev.set_container_event_type(static_cast<v1::ContainerEventType>(i));
      if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
      std::this_thread::sleep_for(50ms);
    }
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(in(5000ms));
  auto reader = stub->GetContainerEvents(&ctx, v1::GetEventsRequest());
  v1::ContainerEventResponse ev;
  std::vector<std::string> ids;
  while (reader->Read(&ev)) ids.push_back(ev.container_id());
  grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(ids, ::testing::ElementsAre("c0", "c1", "c2"));
}

TEST_F(RelayTest, CallersDeadlineReachesTheRuntime) {
  std::promise<std::chrono::system_clock::time_point> seen;
  backend_.onUnary(kVersion, [&](FakeCall& call, std::string* out) {
    seen.set_value(call.deadline);
    *out = "";
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  const auto deadline = in(3000ms);
  ctx.set_deadline(deadline);
  v1::VersionResponse resp;
  ASSERT_TRUE(stub->Version(&ctx, v1::VersionRequest(), &resp).ok());
  auto runtime_deadline = seen.get_future().get();
  // grpc-timeout is relative: the runtime counts from when it read the call.
  EXPECT_LE(runtime_deadline, deadline + 100ms);
  EXPECT_GE(runtime_deadline, deadline - 500ms);
}

TEST_F(RelayTest, DeadlinePassingCancelsTheRuntimesWork) {
  std::promise<void> cancelled;
  backend_.onUnary(kVersion, [&](FakeCall& call, std::string*) {
    if (eventually([&] { return call.cancelled(); })) cancelled.set_value();
    return grpc::Status::CANCELLED;
  });
  backend_.start();
  startProxy();
  v1::VersionResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = callVersion(proxyChannel(), &resp, 300ms);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(cancelled.get_future().wait_for(3s), std::future_status::ready)
      << "the runtime kept working on a call whose caller gave up";
}

TEST_F(RelayTest, ClientCancellationReachesTheRuntime) {
  std::promise<void> started, cancelled;
  backend_.onStream(kEvents,
                    [&](FakeCall& call, const std::function<bool(const std::string&)>& write) {
                      write(v1::ContainerEventResponse().SerializeAsString());
                      started.set_value();
                      if (eventually([&] { return call.cancelled(); })) cancelled.set_value();
                      return grpc::Status::OK;
                    });
  backend_.start();
  startProxy();
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  auto reader = stub->GetContainerEvents(&ctx, v1::GetEventsRequest());
  v1::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  started.get_future().wait();
  ctx.TryCancel();
  EXPECT_EQ(cancelled.get_future().wait_for(3s), std::future_status::ready);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(RelayTest, StatusCodeMessageDetailsAndMetadataPassBothWays) {
  std::promise<std::multimap<std::string, std::string>> metadata;
  backend_.onUnary(kVersion, [&](FakeCall& call, std::string*) {
    metadata.set_value(call.metadata);
    call.trailing.emplace("x-runtime-note", "from the runtime");
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "container \"c1\" not found: 100% gone\nreally",
                        std::string("\x08\x05\x12\x03"
                                    "abc",
                                    7));
  });
  backend_.start();
  startProxy();
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-kubelet-trace", "trace-123");
  ctx.AddMetadata("x-blob-bin", std::string("\x00\xff\x10", 3));
  v1::VersionResponse resp;
  grpc::Status s = stub->Version(&ctx, v1::VersionRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "container \"c1\" not found: 100% gone\nreally");
  EXPECT_EQ(s.error_details(), std::string("\x08\x05\x12\x03"
                                           "abc",
                                           7));
  auto trailing = ctx.GetServerTrailingMetadata();
  auto note = trailing.find("x-runtime-note");
  ASSERT_NE(note, trailing.end());
  EXPECT_EQ(std::string(note->second.data(), note->second.size()), "from the runtime");
  auto md = metadata.get_future().get();
  ASSERT_EQ(md.count("x-kubelet-trace"), 1u);
  EXPECT_EQ(md.find("x-kubelet-trace")->second, "trace-123");
  ASSERT_EQ(md.count("x-blob-bin"), 1u);
  EXPECT_EQ(md.find("x-blob-bin")->second, std::string("\x00\xff\x10", 3));
}

v1::ListContainersResponse manyContainers(int n, size_t label_bytes) {
  v1::ListContainersResponse resp;
  for (int i = 0; i < n; ++i) {
    auto* c = resp.add_containers();
    c->set_id(std::string(64, static_cast<char>('a' + i % 26)));
    c->set_pod_sandbox_id("sandbox-" + std::to_string(i));
    c->mutable_metadata()->set_name("container-" + std::to_string(i));
    (*c->mutable_labels())["blob"] = std::string(label_bytes, 'x');
  }
  return resp;
}

TEST_F(RelayTest, SixteenMebibyteMessagesCrossBothWays) {
  // Well past the 1 MiB stream window: the relay must keep both windows moving.
  const v1::ListContainersResponse big = manyContainers(16, (16 << 20) / 16 - 512);
  ASSERT_LT(big.ByteSizeLong(), 16u << 20);
  ASSERT_GT(big.ByteSizeLong(), 15u << 20);
  backend_.onUnary(kListContainers, [&](FakeCall& call, std::string* out) {
    *out = big.SerializeAsString();
    return grpc::Status::OK;
  });
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    *out = call.request;
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto stub = v1::RuntimeService::NewStub(proxyChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(in(20000ms));
  v1::ListContainersResponse resp;
  grpc::Status s = stub->ListContainers(&ctx, v1::ListContainersRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.SerializeAsString(), big.SerializeAsString());

  std::string request((16 << 20) - 64, '\0');
  for (size_t i = 0; i < request.size(); ++i) request[i] = static_cast<char>(i * 131);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(in(20000ms));
  std::string reply;
  s = genericUnary(proxyChannel(), &ctx2, echo, request, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(reply == request);
}

TEST_F(RelayTest, MessageOverTheLimitIsRefusedWithResourceExhausted) {
  const v1::ListContainersResponse big = manyContainers(17, 1 << 20);
  ASSERT_GT(big.ByteSizeLong(), 16u << 20);
  backend_.onUnary(kListContainers, [&](FakeCall&, std::string* out) {
    *out = big.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  // The client itself would take 64 MiB: the refusal is crihookd's.
  auto stub = v1::RuntimeService::NewStub(proxyChannel(64 << 20));
  grpc::ClientContext ctx;
  ctx.set_deadline(in(20000ms));
  v1::ListContainersResponse resp;
  grpc::Status s = stub->ListContainers(&ctx, v1::ListContainersRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("larger than the limit"));
  // And the proxy keeps serving.
  serveVersion(backend_);
  v1::VersionResponse v;
  EXPECT_TRUE(callVersion(proxyChannel(), &v).ok());
}

TEST_F(RelayTest, BackendDownFailsFastWithUnavailableThenRecoversByItself) {
  startProxy();  // no backend yet: starting must not need it
  auto channel = proxyChannel();
  v1::VersionResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = callVersion(channel, &resp, 10000ms);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("backend"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s)
      << "must fail fast, not at the caller's deadline";

  serveVersion(backend_);
  backend_.start();
  s = callVersion(channel, &resp);  // same kubelet connection
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.runtime_name(), "fake");
}

TEST_F(RelayTest, RuntimeDyingMidStreamEndsTheStreamWithUnavailableAndLaterCallsWork) {
  // docs/operations.md: "A runtime that restarts mid-stream ends that stream with
  // UNAVAILABLE". The runtime dies: its connection is gone without a GOAWAY
  // or an RST_STREAM (a graceful stop would send those, and the caller would
  // get the code the runtime chose).
  std::promise<void> streaming;
  backend_.onStream(kEvents,
                    [&](FakeCall& call, const std::function<bool(const std::string&)>& write) {
                      write(v1::ContainerEventResponse().SerializeAsString());
                      streaming.set_value();
                      eventually([&] { return call.cancelled(); }, 10s);
                      return grpc::Status::OK;
                    });
  serveVersion(backend_);
  backend_.start();
  startProxy();
  auto channel = proxyChannel();
  auto stub = v1::RuntimeService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(in(20000ms));
  auto reader = stub->GetContainerEvents(&ctx, v1::GetEventsRequest());
  v1::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  ASSERT_EQ(streaming.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_GE(backend_.dropConnections(), 1);  // the runtime dies with the stream open
  while (reader->Read(&ev)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("backend connection lost"));

  // The runtime is back (it kept listening): the same kubelet connection's
  // next call gets a fresh runtime connection.
  v1::VersionResponse resp;
  s = callVersion(channel, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(RelayTest, PassThroughRequestOverTheLimitIsRefusedAndItsConnectionServesOn) {
  // docs/operations.md: "A message over max_message_bytes is refused with
  // RESOURCE_EXHAUSTED; other calls are unaffected." A method crihookd does
  // not intercept, so the message is relayed as it arrives, never decoded.
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    *out = call.request;
    return grpc::Status::OK;
  });
  std::promise<void> go_on;
  std::shared_future<void> go_on_seen = go_on.get_future().share();
  backend_.onStream(
      kEvents, [&](FakeCall& call, const std::function<bool(const std::string&)>& write) {
        v1::ContainerEventResponse ev;
        ev.set_container_id("before");
        if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
        if (go_on_seen.wait_for(20s) != std::future_status::ready)
          return grpc::Status(grpc::StatusCode::INTERNAL, "fake: never told to go on");
        ev.set_container_id("after");
        if (!write(ev.SerializeAsString())) return grpc::Status::CANCELLED;
        return grpc::Status::OK;
      });
  backend_.start();
  startProxy();
  // One kubelet connection for everything; the client itself would send
  // 64 MiB, so the refusal is crihookd's.
  auto channel = proxyChannel(64 << 20);
  auto stub = v1::RuntimeService::NewStub(channel);
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(in(30000ms));
  auto reader = stub->GetContainerEvents(&stream_ctx, v1::GetEventsRequest());
  v1::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  EXPECT_EQ(ev.container_id(), "before");

  const std::string too_big((16u << 20) + 1, 'x');
  grpc::ClientContext ctx;
  ctx.set_deadline(in(20000ms));
  std::string reply;
  grpc::Status s = genericUnary(channel, &ctx, echo, too_big, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("request message of 16777217 bytes is larger than the "
                                           "limit of 16777216 bytes"));
  EXPECT_EQ(backend_.callCount(echo), 0u) << "the runtime got the message whole";

  // The next call on the same connection is served ...
  const std::string small(1000, 'y');
  grpc::ClientContext ctx2;
  ctx2.set_deadline(in(10000ms));
  s = genericUnary(channel, &ctx2, echo, small, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, small);
  // ... and the stream that was open meanwhile still delivers: the
  // connection was never closed under it.
  go_on.set_value();
  ASSERT_TRUE(reader->Read(&ev));
  EXPECT_EQ(ev.container_id(), "after");
  EXPECT_FALSE(reader->Read(&ev));
  s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(RelayTest, ManyConcurrentStreamsEachGetTheirOwnAnswer) {
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    std::this_thread::sleep_for(std::chrono::milliseconds(call.request.size() % 7));
    *out = call.request;
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto channel = proxyChannel();
  constexpr int kCalls = 200;
  std::vector<std::future<bool>> results;
  for (int i = 0; i < kCalls; ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      std::string payload(static_cast<size_t>(i * 997 % 70000), static_cast<char>('A' + i % 26));
      grpc::ClientContext ctx;
      ctx.set_deadline(in(20000ms));
      std::string reply;
      return genericUnary(channel, &ctx, echo, payload, &reply).ok() && reply == payload;
    }));
  }
  int ok = 0;
  for (auto& r : results) ok += r.get();
  EXPECT_EQ(ok, kCalls);
}

TEST_F(RelayTest, BackendGoawayLetsInFlightCallsFinishAndNewCallsUseAFreshConnection) {
  std::promise<void> in_flight;
  backend_.onUnary(kVersion, [&](FakeCall& call, std::string* out) {
    if (call.metadata.count("x-slow")) {
      in_flight.set_value();
      std::this_thread::sleep_for(300ms);
    }
    v1::VersionResponse r;
    r.set_runtime_name("fake");
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto channel = proxyChannel();
  auto slow = std::async(std::launch::async, [&] {
    auto stub = v1::RuntimeService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-slow", "1");
    ctx.set_deadline(in(5000ms));
    v1::VersionResponse r;
    return stub->Version(&ctx, v1::VersionRequest(), &r);
  });
  in_flight.get_future().wait();
  // Graceful shutdown sends GOAWAY and waits up to 2 s for the slow call.
  backend_.stop(2000ms);
  grpc::Status s = slow.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  backend_.start();
  v1::VersionResponse resp;
  s = callVersion(channel, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(RelayTest, ShutdownLetsInFlightCallsFinishAndStopsListening) {
  std::promise<void> in_flight;
  backend_.onUnary(kVersion, [&](FakeCall&, std::string* out) {
    in_flight.set_value();
    std::this_thread::sleep_for(300ms);
    *out = "";
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  auto slow = std::async(std::launch::async, [&] {
    v1::VersionResponse r;
    return callVersion(proxyChannel(), &r);
  });
  in_flight.get_future().wait();
  EXPECT_EQ(stopProxy(5000ms), 0) << "no call should have been cut off";
  grpc::Status s = slow.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::VersionResponse r;
  EXPECT_EQ(callVersion(proxyChannel(), &r, 1000ms).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(RelayTest, SecondInstanceOnTheSameSocketIsRefusedAndAStaleSocketIsReplaced) {
  serveVersion(backend_);
  backend_.start();
  startProxy();
  Server second(proxyConfig(), pass_, logger("proxy"));
  absl::Status s = second.start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("another crihookd"));
  v1::VersionResponse r;
  EXPECT_TRUE(callVersion(proxyChannel(), &r).ok()) << "the first instance must keep serving";
  stopProxy();

  // A socket file left by a crashed crihookd is no obstacle.
  const std::string path = proxyConfig().listen_path;
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);  // the file stays, nobody listens
  ASSERT_TRUE(std::filesystem::exists(path));
  startProxy();
  EXPECT_TRUE(callVersion(proxyChannel(), &r).ok());
}

}  // namespace
}  // namespace crihook::testing

namespace crihook::testing {
namespace {

TEST_F(RelayTest, LargeRepliesBackToBackOnSeveralConnections) {
  // Each reply is bigger than the stream window; connections run them in a
  // row and side by side, as kubelet's relists do.
  // 2 MiB each, 30 on one connection: far past the 16 MiB connection window,
  // so every byte must be handed back to the runtime's window.
  const v1::ListContainersResponse big = manyContainers(500, 4000);
  backend_.onUnary(kListContainers, [&](FakeCall&, std::string* out) {
    *out = big.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  startProxy();
  std::vector<std::future<int>> clients;
  for (int c = 0; c < 4; ++c) {
    clients.push_back(std::async(std::launch::async, [&] {
      auto stub = v1::RuntimeService::NewStub(proxyChannel());
      int ok = 0;
      for (int i = 0; i < 30; ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(in(10000ms));
        v1::ListContainersResponse resp;
        ok += stub->ListContainers(&ctx, v1::ListContainersRequest(), &resp).ok() &&
              resp.containers_size() == 500;
      }
      return ok;
    }));
  }
  for (auto& c : clients) EXPECT_EQ(c.get(), 30);
}

}  // namespace
}  // namespace crihook::testing

namespace crihook::testing {
namespace {

TEST_F(RelayTest, ChurnOfCancelsDeadlinesAndARestartLeavesNothingBehind) {
  // Many clients at once, some cancelling, some timing out, mixed sizes,
  // streaming and unary, while the runtime dies and restarts once. Every call must
  // end (no hang), crihookd must keep serving, and no call may stay counted.
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  backend_.onUnary(echo, [](FakeCall& call, std::string* out) {
    const int delay = static_cast<unsigned char>(call.request.empty() ? 0 : call.request[0]) % 40;
    eventually([&] { return call.cancelled(); }, std::chrono::milliseconds(delay));
    *out = call.request;
    return grpc::Status::OK;
  });
  backend_.onStream(kEvents,
                    [](FakeCall& call, const std::function<bool(const std::string&)>& write) {
                      for (int i = 0; i < 20 && !call.cancelled(); ++i) {
                        if (!write(std::string(static_cast<size_t>(i) * 1000, 'e'))) break;
                        std::this_thread::sleep_for(5ms);
                      }
                      return grpc::Status::OK;
                    });
  serveVersion(backend_);
  backend_.start();
  startProxy();

  // How each call ended, by kind: every one must end with a code the relay
  // can owe it here, and none that was given 10 s may end at its deadline
  // (something held it: crihookd lost track of a call).
  std::mutex mu;
  std::map<int, std::vector<grpc::StatusCode>> ended;  // kind -> codes
  int wrong_replies = 0;
  auto record = [&](int kind, const grpc::Status& s, bool reply_ok) {
    std::lock_guard lock(mu);
    ended[kind].push_back(s.error_code());
    if (s.ok() && !reply_ok) ++wrong_replies;
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      auto channel = proxyChannel();
      auto stub = v1::RuntimeService::NewStub(channel);
      for (int i = 0; i < 25; ++i) {
        const int kind = (c * 31 + i * 7) % 4;
        grpc::ClientContext ctx;
        if (kind == 0) {  // deadline shorter than some replies take
          ctx.set_deadline(in(std::chrono::milliseconds(5 + (i % 30))));
        } else {
          ctx.set_deadline(in(10000ms));
        }
        if (kind == 3) {
          auto reader = stub->GetContainerEvents(&ctx, v1::GetEventsRequest());
          v1::ContainerEventResponse ev;
          for (int n = 0; n < 3 && reader->Read(&ev); ++n) {
          }
          ctx.TryCancel();
          while (reader->Read(&ev)) {
          }
          record(kind, reader->Finish(), true);
        } else {
          std::string payload(static_cast<size_t>((c * 7919 + i * 104729) % 300000),
                              static_cast<char>(i));
          std::string reply;
          if (kind == 2) {
            std::thread canceller([&ctx] {
              std::this_thread::sleep_for(3ms);
              ctx.TryCancel();
            });
            grpc::Status s = genericUnary(channel, &ctx, echo, payload, &reply);
            canceller.join();
            record(kind, s, reply == payload);
          } else {
            grpc::Status s = genericUnary(channel, &ctx, echo, payload, &reply);
            record(kind, s, reply == payload);
          }
        }
      }
    });
  }
  // The restart lands among the calls: once a fifth of them have ended.
  eventually(
      [&] {
        std::lock_guard lock(mu);
        size_t n = 0;
        for (const auto& [kind, codes] : ended) n += codes.size();
        return n >= 40;
      },
      10s);
  // The runtime dies (its connections gone at once), then comes back.
  backend_.dropConnections();
  backend_.stop(0ms);
  backend_.start();
  for (auto& t : clients) t.join();

  using grpc::StatusCode;
  // OK; the caller's own cancel or deadline; the runtime gone (UNAVAILABLE),
  // or gone with a reply half relayed (reset: INTERNAL).
  const std::set<StatusCode> possible = {StatusCode::OK, StatusCode::CANCELLED,
                                         StatusCode::DEADLINE_EXCEEDED, StatusCode::UNAVAILABLE,
                                         StatusCode::INTERNAL};
  size_t calls = 0;
  for (const auto& [kind, codes] : ended) {
    calls += codes.size();
    for (StatusCode code : codes) {
      EXPECT_TRUE(possible.count(code)) << "kind " << kind << " ended with code " << code;
      if (kind != 0) {
        EXPECT_NE(code, StatusCode::DEADLINE_EXCEEDED)
            << "kind " << kind << ": a call with 10 s to spare ran into its deadline";
      }
    }
  }
  EXPECT_EQ(calls, 8u * 25u);
  EXPECT_EQ(wrong_replies, 0) << "an OK reply that is not the request echoed";
  EXPECT_GT(std::count(ended[1].begin(), ended[1].end(), StatusCode::OK), 0)
      << "no plain call was served at all";

  v1::VersionResponse v;
  grpc::Status s = callVersion(proxyChannel(), &v);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(eventually([&] { return proxy_->activeCalls() == 0; }))
      << "a call stayed counted after its client left";
}

TEST_F(RelayTest, AConfigNamingTheTerminatingRelayStartsAndSaysTheTransparentOneServes) {
  // The terminating relay is gone; a configuration written for it must not
  // keep crihookd from starting on upgrade.
  serveVersion(backend_);
  backend_.start();
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  Config config = proxyConfig();
  config.relay = "terminating";
  proxy_ = std::make_unique<Server>(config, pass_, std::make_shared<spdlog::logger>("proxy", sink));
  ASSERT_TRUE(proxy_->start().ok());
  v1::VersionResponse resp;
  grpc::Status s = callVersion(proxyChannel(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.runtime_name(), "fake");
  std::vector<std::string> warnings;
  for (const std::string& line : sink->last_formatted()) {
    if (line.find("[warning]") != std::string::npos) warnings.push_back(line);
  }
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(sink->last_formatted());
  EXPECT_THAT(warnings[0], HasSubstr("server.relay = \"terminating\""));
  EXPECT_THAT(warnings[0], HasSubstr("the transparent relay serves every connection"));
}

TEST(RelayContext, ItsDefaultsAreTheProducts) {
  // A relay made without a Config (a unit test, a fuzz harness) runs with
  // the limits crihookd runs with.
  const Config product;
  const RelayContext ctx;
  EXPECT_EQ(ctx.max_message_bytes, product.max_message_bytes);
  EXPECT_EQ(ctx.connect_timeout, product.backend_connect_timeout);
  EXPECT_EQ(ctx.limits.preface_timeout, product.preface_timeout);
  EXPECT_EQ(ctx.limits.idle_timeout, product.idle_timeout);
  EXPECT_EQ(ctx.limits.request_timeout, product.request_timeout);
  EXPECT_EQ(ctx.limits.max_connection_buffered_bytes, product.max_connection_buffered_bytes);
  EXPECT_EQ(ctx.limits.max_buffered_bytes, product.max_buffered_bytes);
}

TEST(ActiveCalls, AWaitEndsWhenTheLastCallIsAnswered) {
  ActiveCalls calls;
  calls.add();
  calls.add();
  auto waited = std::async(std::launch::async, [&] {
    return calls.waitForNone(std::chrono::steady_clock::now() + 60s);
  });
  // Answered while the waiter waits (not before it looks): only done()'s
  // wake-up can end the wait before its minute.
  ASSERT_TRUE(eventually([&] { return calls.waiting() == 1; }));
  calls.done();
  EXPECT_EQ(waited.wait_for(0s), std::future_status::timeout) << "one call is still active";
  calls.done();
  ASSERT_EQ(waited.wait_for(10s), std::future_status::ready) << "woken by the last answer";
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(calls.waiting(), 0) << "the waiter is gone";

  // A later wait (a second stop) is woken the same way.
  calls.add();
  waited = std::async(std::launch::async,
                      [&] { return calls.waitForNone(std::chrono::steady_clock::now() + 60s); });
  ASSERT_TRUE(eventually([&] { return calls.waiting() == 1; }));
  calls.done();
  ASSERT_EQ(waited.wait_for(10s), std::future_status::ready) << "woken by the last answer";
  EXPECT_TRUE(waited.get());
}

TEST(ActiveCalls, AWaitEndsAtItsDeadlineWithCallsStillActive) {
  ActiveCalls calls;
  EXPECT_TRUE(calls.waitForNone(std::chrono::steady_clock::now())) << "none active";
  calls.add();
  EXPECT_FALSE(calls.waitForNone(std::chrono::steady_clock::now() + 20ms));
  EXPECT_EQ(calls.load(), 1);
  calls.done();
}

}  // namespace
}  // namespace crihook::testing
