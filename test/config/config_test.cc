#include "config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "fake_cri_server.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(Config, EmbeddedDefaultsNeedNoFile) {
  Config c;
  EXPECT_EQ(c.listen_path, "/run/crihook/crihook.sock");
  EXPECT_EQ(c.backend_endpoint, "unix:///run/containerd/containerd.sock");
  EXPECT_EQ(c.max_message_bytes, 16u << 20);
  EXPECT_EQ(c.socket_mode, 0660u);
  EXPECT_TRUE(validateConfig(c, "defaults").ok());
}

TEST(Config, EveryKeyIsRead) {
  auto c = parseConfig(R"(
[server]
listen = "/run/x/crihook.sock"
socket_mode = "0600"
socket_group = "kube"
workers = 4
shutdown_grace = "1500ms"
max_message_bytes = 33554432

[backend]
endpoint = "unix:///run/cri-dockerd.sock"
connect_timeout = "3s"

[log]
level = "debug"
)",
                       "test.toml");
  ASSERT_TRUE(c.ok()) << message(c.status());
  EXPECT_EQ(c->listen_path, "/run/x/crihook.sock");
  EXPECT_EQ(c->socket_mode, 0600u);
  EXPECT_EQ(c->socket_group, "kube");
  EXPECT_EQ(c->workers, 4);
  EXPECT_EQ(c->shutdown_grace, 1500ms);
  EXPECT_EQ(c->max_message_bytes, 32u << 20);
  EXPECT_EQ(c->backend_endpoint, "unix:///run/cri-dockerd.sock");
  EXPECT_EQ(c->backend_connect_timeout, 3000ms);
  EXPECT_EQ(c->log_level, "debug");
}

TEST(Config, UnknownKeysAndTablesNameTheFileAndKey) {
  auto c = parseConfig("[server]\nlisten_path = \"/x\"\n", "/etc/crihook/config.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(message(c.status()),
            "config /etc/crihook/config.toml: server.listen_path: unknown key");
  c = parseConfig("[hookz]\n", "f.toml");
  EXPECT_EQ(message(c.status()), "config f.toml: hookz: unknown key");
}

TEST(Config, BadValuesSayWhatWasExpected) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"[server]\nworkers = 0", "config f: server.workers: expected an integer in 1..64, got 0"},
      {"[server]\nworkers = \"two\"",
       "config f: server.workers: expected an integer in 1..64, got \"two\""},
      {"[server]\nmax_message_bytes = 1024",
       "server.max_message_bytes: expected an integer in 16777216.."},
      {"[server]\nsocket_mode = \"rw\"", "server.socket_mode: expected an octal mode"},
      {"[server]\nlisten = \"relative.sock\"", "server.listen: expected an absolute path"},
      {"[server]\nshutdown_grace = \"10 parsecs\"",
       "server.shutdown_grace: expected a duration unit"},
      {"[backend]\nendpoint = \"tcp://1.2.3.4:80\"",
       "backend.endpoint: expected a Unix socket endpoint"},
      {"[log]\nlevel = \"loud\"", "log.level: expected one of trace"},
      {"server = 3", "config f: server: expected a table, got 3"},
      {"[server\n", "config f: line 1"},
  };
  for (const Case& k : cases) {
    auto c = parseConfig(k.text, "f");
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_THAT(message(c.status()), HasSubstr(k.want)) << k.text;
  }
}

TEST(Config, MissingFileIsAnError) {
  auto c = loadConfigFile("/nonexistent/crihook.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(message(c.status()), HasSubstr("config /nonexistent/crihook.toml: cannot be read"));
}

TEST(Config, FileOnDiskIsRead) {
  testing::TempDir dir;
  std::ofstream(dir.file("c.toml")) << "[log]\nlevel = \"warn\"\n";
  auto c = loadConfigFile(dir.file("c.toml"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->log_level, "warn");
  EXPECT_EQ(c->listen_path, Config{}.listen_path) << "keys not in the file keep their defaults";
}

TEST(Endpoint, UnixSocketsOnly) {
  EXPECT_EQ(*unixSocketPath("unix:///run/containerd/containerd.sock"),
            "/run/containerd/containerd.sock");
  EXPECT_EQ(*unixSocketPath("/run/cri-dockerd.sock"), "/run/cri-dockerd.sock");
  EXPECT_FALSE(unixSocketPath("unix://relative").ok());
  EXPECT_FALSE(unixSocketPath("npipe:////./pipe/x").ok());
  EXPECT_FALSE(unixSocketPath("").ok());
}

}  // namespace
}  // namespace crihook
