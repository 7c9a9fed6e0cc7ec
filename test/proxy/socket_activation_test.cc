// crihookd on a socket systemd holds (crihookd.socket): served as passed,
// never unlinked, and a restart never refuses a client: what dials while no
// crihookd runs waits in the backlog and is served by the next one.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/create_channel_posix.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/activated_daemon.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/unix_socket.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A listening Unix socket, as systemd makes it for a ListenStream= line.
int listeningSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A connected client socket, or -1 (ECONNREFUSED when nothing listens).
int dial(const std::string& path) { return ::crihook::testing::connectUnixSocket(path); }

// Whether `file` comes to hold `text` (10 s at most).
bool waitForLine(const std::string& file, const std::string& text) {
  return eventually([&] { return readFile(file).find(text) != std::string::npos; }, 10s);
}

// crihookd as systemd starts it (test/support/activated_daemon.h).
class ActivatedDaemon : public ::crihook::testing::ActivatedDaemon {
 public:
  ActivatedDaemon(int fd, const std::vector<std::string>& args, const std::string& log,
                  int pid_offset = 0)
      : ::crihook::testing::ActivatedDaemon(CRIHOOKD_BINARY, fd, args, log, pid_offset) {}
};

class SocketActivationTest : public ::testing::Test {
 protected:
  SocketActivationTest() : backend_(dir_.file("backend.sock")) {
    backend_.onUnary("/runtime.v1.RuntimeService/Version",
                     [this](FakeCall& call, std::string* out) {
                       v1::VersionRequest req;
                       req.ParseFromString(call.request);
                       if (req.version() == "hold") {  // held until the test releases it
                         std::unique_lock lock(mu_);
                         ++held_;
                         cv_.notify_all();
                         cv_.wait(lock, [&] { return released_; });
                       }
                       v1::VersionResponse r;
                       r.set_runtime_name("fake");
                       *out = r.SerializeAsString();
                       return grpc::Status::OK;
                     });
    backend_.start();
  }
  std::vector<std::string> args(const std::string& listen) {
    return {"--listen",    listen,
            "--backend",   "unix://" + dir_.file("backend.sock"),
            "--state-dir", dir_.file("state"),
            "--log-level", "info"};
  }
  static grpc::Status version(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& what = "", std::chrono::seconds within = 10s) {
    auto stub = v1::RuntimeService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + within);
    ctx.set_wait_for_ready(true);
    v1::VersionRequest req;
    req.set_version(what);
    v1::VersionResponse r;
    grpc::Status s = stub->Version(&ctx, req, &r);
    if (s.ok() && r.runtime_name() != "fake") return grpc::Status(grpc::StatusCode::INTERNAL, "?");
    return s;
  }
  // A gRPC channel on a connection already made (it dialed at `fd`'s connect).
  static std::shared_ptr<grpc::Channel> channelOn(int fd) {
    return grpc::CreateInsecureChannelFromFd("crihook", fd);
  }
  bool waitHeld(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return held_ >= n; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  // Lets held calls go before the backend is destroyed.
  ~SocketActivationTest() override { release(); }

  TempDir dir_;
  FakeCriServer backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
};

TEST_F(SocketActivationTest, SystemdSocketActivateStartsCrihookdOnItsSocket) {
  if (!std::filesystem::exists(SYSTEMD_SOCKET_ACTIVATE))
    GTEST_SKIP() << SYSTEMD_SOCKET_ACTIVATE << " is not installed (Debian package systemd)";
  const std::string sock = dir_.file("crihook.sock");
  std::vector<std::string> a{"-l", sock, CRIHOOKD_BINARY};
  for (const std::string& x : args(sock)) a.push_back(x);
  ChildProcess activator(SYSTEMD_SOCKET_ACTIVATE, a, dir_.file("log"));
  ASSERT_TRUE(waitForFile(sock, 5s)) << readFile(dir_.file("log"));
  // The first connection starts crihookd (systemd-socket-activate execs it
  // with LISTEN_FDS), which serves it.
  EXPECT_TRUE(version(unixChannel(sock)).ok()) << readFile(dir_.file("log"));
  EXPECT_TRUE(version(unixChannel(sock)).ok());
  EXPECT_THAT(readFile(dir_.file("log")), HasSubstr("serving the activated socket " + sock));
  activator.signal(SIGTERM);
  EXPECT_EQ(activator.wait(10s), 0) << readFile(dir_.file("log"));
  EXPECT_TRUE(std::filesystem::exists(sock)) << "the socket is systemd's: never unlinked";
}

TEST_F(SocketActivationTest, ARestartNeverRefusesAClientAndInFlightCallsDrain) {
  const std::string sock = dir_.file("crihook.sock");
  const int fd = listeningSocket(sock);
  ASSERT_GE(fd, 0) << std::strerror(errno);

  auto first = std::make_unique<ActivatedDaemon>(fd, args(sock), dir_.file("log1"));
  ASSERT_TRUE(version(unixChannel(sock)).ok()) << readFile(dir_.file("log1"));

  // A call in flight when crihookd is told to stop finishes (shutdown_grace).
  auto in_flight = std::async(std::launch::async,
                              [&] { return version(unixChannel(sock), "hold").error_code(); });
  ASSERT_TRUE(waitHeld(1));
  first->signal(SIGTERM);
  // Until the held call returns crihookd drains: it stays up, accepts no
  // more, and its socket (systemd's) takes new connections all along.
  ASSERT_TRUE(waitForLine(dir_.file("log1"), "no longer accepting on " + sock + "; 1 calls"))
      << readFile(dir_.file("log1"));
  const int during_drain = dial(sock);
  EXPECT_GE(during_drain, 0) << "refused while draining";
  release();
  EXPECT_EQ(in_flight.get(), grpc::StatusCode::OK);
  EXPECT_EQ(first->wait(10s), 0) << readFile(dir_.file("log1"));
  first.reset();
  EXPECT_TRUE(std::filesystem::exists(sock)) << "unlinked by crihookd";

  // No crihookd runs now: a client dials, and is not refused.
  const int during_gap = dial(sock);
  ASSERT_GE(during_gap, 0) << "refused while no crihookd ran: " << std::strerror(errno);
  auto gap_call = std::async(std::launch::async,
                             [&] { return version(channelOn(during_gap), "", 20s).error_code(); });
  auto drain_call = std::async(
      std::launch::async, [&] { return version(channelOn(during_drain), "", 20s).error_code(); });

  ActivatedDaemon second(fd, args(sock), dir_.file("log2"));
  EXPECT_EQ(gap_call.get(), grpc::StatusCode::OK) << readFile(dir_.file("log2"));
  EXPECT_EQ(drain_call.get(), grpc::StatusCode::OK) << readFile(dir_.file("log2"));
  EXPECT_TRUE(version(unixChannel(sock)).ok());

  // The single-instance lock holds with a shared socket: a third crihookd
  // on the same socket, activated or not, is refused, and the second serves on.
  ActivatedDaemon third(fd, args(sock), dir_.file("log3"));
  EXPECT_EQ(third.wait(10s), 1);
  EXPECT_THAT(readFile(dir_.file("log3")), HasSubstr("another crihookd is serving " + sock));
  ChildProcess plain(CRIHOOKD_BINARY, args(sock), dir_.file("log4"));
  EXPECT_EQ(plain.wait(10s), 1);
  EXPECT_THAT(readFile(dir_.file("log4")), HasSubstr("another crihookd is serving " + sock));
  EXPECT_TRUE(version(unixChannel(sock)).ok());

  second.signal(SIGTERM);
  EXPECT_EQ(second.wait(10s), 0);
  EXPECT_TRUE(std::filesystem::exists(sock));
  ::close(fd);
}

TEST_F(SocketActivationTest, AnActivatedSocketElsewhereIsServedAndSaidSo) {
  const std::string sock = dir_.file("systemd.sock");
  const int fd = listeningSocket(sock);
  ASSERT_GE(fd, 0);
  ActivatedDaemon d(fd, args(dir_.file("configured.sock")), dir_.file("log"));
  ASSERT_TRUE(version(unixChannel(sock)).ok()) << readFile(dir_.file("log"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("configured.sock")));
  EXPECT_THAT(readFile(dir_.file("log")),
              HasSubstr("serving the activated socket " + sock + "; the configured listen path " +
                        dir_.file("configured.sock") + " is not used"));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
  ::close(fd);
}

TEST_F(SocketActivationTest, WhatIsNotAListeningUnixSocketStopsStartUp) {
  const std::string sock = dir_.file("crihook.sock");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ActivatedDaemon on_pipe(pipe_fds[0], args(sock), dir_.file("log1"));
  EXPECT_EQ(on_pipe.wait(10s), 1);
  EXPECT_THAT(readFile(dir_.file("log1")),
              HasSubstr("socket activation: none of the 1 sockets passed is a listening Unix "
                        "socket on " +
                        sock + " (fd 3: not a socket"));

  // Bound but not listening.
  int bound = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(bound, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ActivatedDaemon not_listening(bound, args(sock), dir_.file("log2"));
  EXPECT_EQ(not_listening.wait(10s), 1);
  EXPECT_THAT(readFile(dir_.file("log2")), HasSubstr("fd 3: not listening"));

  // A datagram socket.
  int dgram = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  ActivatedDaemon datagram(dgram, args(sock), dir_.file("log3"));
  EXPECT_EQ(datagram.wait(10s), 1);
  EXPECT_THAT(readFile(dir_.file("log3")), HasSubstr("fd 3: not a SOCK_STREAM socket"));
  for (int fd : {pipe_fds[0], pipe_fds[1], bound, dgram}) ::close(fd);
}

TEST_F(SocketActivationTest, VariablesMeantForAnotherProcessAreIgnored) {
  // LISTEN_PID names another process: crihookd binds its own socket.
  const std::string other = dir_.file("other.sock");
  const int fd = listeningSocket(other);
  ASSERT_GE(fd, 0);
  const std::string sock = dir_.file("crihook.sock");
  ActivatedDaemon d(fd, args(sock), dir_.file("log"), /*pid_offset=*/1);
  ASSERT_TRUE(waitForFile(sock, 5s)) << readFile(dir_.file("log"));
  EXPECT_TRUE(version(unixChannel(sock)).ok());
  EXPECT_THAT(readFile(dir_.file("log")), HasSubstr("listening on " + sock));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
  EXPECT_FALSE(std::filesystem::exists(sock)) << "its own socket is removed on stop";
  ::close(fd);
}

}  // namespace
}  // namespace crihook::testing
