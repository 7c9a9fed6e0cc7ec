// crihookd's main (tools/crihookd/main.cc) as an operator runs it: flags
// and a config file, readiness to systemd, SIGTERM.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "test/tools/crihookd/crihookd_fixture.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;

TEST_F(CrihookdTest, UnknownConfigKeyStopsStartupNamingFileAndKey) {
  std::ofstream(dir_.file("c.toml")) << "[backend]\nendpiont = \"unix:///x\"\n";
  Daemon d({"--config", dir_.file("c.toml")}, dir_.file("log"));
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("config " + dir_.file("c.toml") + ": backend.endpiont: unknown key"));
}

TEST_F(CrihookdTest, BadFlagValueIsRefused) {
  Daemon d({"--listen", dir_.file("s.sock"), "--log-level", "chatty"}, dir_.file("log"));
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("log level: expected one of"));
  Daemon d2({"--listen"}, dir_.file("log2"));
  EXPECT_EQ(d2.wait(5s), 2);
  EXPECT_THAT(slurp(dir_.file("log2")), HasSubstr("flag --listen needs a value"));
}

TEST_F(CrihookdTest, FlagsOverrideTheConfigFileAndSigtermExitsZero) {
  backend_.start();
  std::ofstream(dir_.file("c.toml"))
      << "[server]\nlisten = \"" << dir_.file("from-file.sock")
      << "\"\n[backend]\nendpoint = \"unix://" << dir_.file("backend.sock")
      << "\"\n[log]\nlevel = \"error\"\n";
  // A systemd-style notification socket, to see READY=1.
  int notify = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string notify_path = dir_.file("notify");
  std::strncpy(addr.sun_path, notify_path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(notify, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("from-flag.sock"), "--log-level",
            "info"},
           dir_.file("log"), notify_path);
  ASSERT_TRUE(waitForSocket(dir_.file("from-flag.sock"))) << slurp(dir_.file("log"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("from-file.sock")));
  grpc::Status s = version(dir_.file("from-flag.sock"));
  EXPECT_TRUE(s.ok()) << s.error_message();

  char buf[256] = {};
  timeval tv{5, 0};
  setsockopt(notify, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ssize_t n = ::recv(notify, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), HasSubstr("READY=1"));
  ::close(notify);

  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("from-flag.sock")));
  const std::string log = slurp(dir_.file("log"));
  EXPECT_THAT(log, HasSubstr("Terminated: stopping"));
  EXPECT_THAT(log, HasSubstr("stopped"));
}

}  // namespace
}  // namespace crihook::testing
