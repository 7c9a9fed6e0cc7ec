#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "base/text.h"
#include "test/support/fake_cri_server.h"

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
  EXPECT_EQ(c.max_connections, 1024);
  EXPECT_EQ(c.preface_timeout, 10000ms);
  EXPECT_EQ(c.idle_timeout, 300000ms);
  EXPECT_EQ(c.request_timeout, 30000ms);
  EXPECT_EQ(c.max_connection_buffered_bytes, 64u << 20);
  EXPECT_EQ(c.max_buffered_bytes, 256u << 20);
  EXPECT_EQ(c.relay, "transparent");
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
max_connections = 16
preface_timeout = "3s"
idle_timeout = "2m"
request_timeout = "20s"
max_connection_buffered_bytes = 67108864
max_buffered_bytes = 134217728
relay = "terminating"

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
  EXPECT_EQ(c->max_connections, 16);
  EXPECT_EQ(c->preface_timeout, 3000ms);
  EXPECT_EQ(c->idle_timeout, 120000ms);
  EXPECT_EQ(c->request_timeout, 20000ms);
  EXPECT_EQ(c->max_connection_buffered_bytes, 64u << 20);
  EXPECT_EQ(c->max_buffered_bytes, 128u << 20);
  EXPECT_EQ(c->relay, "terminating");
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

// A refused path is shown in its first 200 bytes, whatever its length.
TEST(Config, ALongRefusedPathIsShownInItsFirst200Bytes) {
  auto c = parseConfig("[nri]\nsocket_path = \"" + std::string(300, 'r') + "\"\n", "f");
  EXPECT_THAT(message(c.status()),
              HasSubstr("expected an absolute path, got \"" + std::string(200, 'r') + "\"..."));
  c = parseConfig("[nri]\nsocket_path = \"/" + std::string(300, 's') + "\"\n", "f");
  EXPECT_THAT(message(c.status()),
              HasSubstr("expected a Unix socket path of at most 107 bytes, got 301 bytes: \"/" +
                        std::string(199, 's') + "\"..."));
}

TEST(Config, BadValuesSayWhatWasExpected) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"[server]\nworkers = 0", "config f: server.workers: expected an integer in 1..64, got 0"},
      {"[server]\nrelay = \"fast\"",
       "config f: server.relay: expected \"terminating\" or \"transparent\", got \"fast\""},
      {"[server]\nworkers = \"two\"",
       "config f: server.workers: expected an integer in 1..64, got \"two\""},
      {"[server]\nworkers = true",
       "config f: server.workers: expected an integer in 1..64, got true"},
      {"[server]\nworkers = 1979-05-27",
       "config f: server.workers: expected an integer in 1..64, got a date or time"},
      {"[server]\nworkers = [2]",
       "config f: server.workers: expected an integer in 1..64, got an array"},
      {"[server]\nworkers = 2.5",
       "config f: server.workers: expected an integer in 1..64, got 2.5"},
      {"[server]\nlisten = { path = \"/run/x.sock\" }",
       "config f: server.listen: expected a string, got a table"},
      {"[server]\nmax_message_bytes = 1024",
       "server.max_message_bytes: expected an integer in 16777216.."},
      {"[server]\nsocket_mode = \"rw\"", "server.socket_mode: expected an octal mode"},
      {"[server]\nlisten = \"relative.sock\"", "server.listen: expected an absolute path"},
      {"[server]\nshutdown_grace = \"10 parsecs\"",
       "server.shutdown_grace: expected a duration unit"},
      {"[server]\nmax_connections = 0",
       "server.max_connections: expected an integer in 1..65536, got 0"},
      {"[server]\nidle_timeout = \"0s\"", "server.idle_timeout: expected a duration above 0"},
      {"[server]\nmax_connection_buffered_bytes = 1048576",
       "server.max_connection_buffered_bytes: expected an integer in 16777216.."},
      {"[server]\nmax_message_bytes = 33554432\nmax_connection_buffered_bytes = 16777216",
       "server.max_connection_buffered_bytes: expected an integer in 33554432.."},
      {"[server]\nmax_connection_buffered_bytes = 536870912",
       "server.max_buffered_bytes: expected at least max_connection_buffered_bytes (536870912)"},
      {"[server]\nmax_message_bytes = 134217728",
       "server.max_connection_buffered_bytes: expected at least max_message_bytes (134217728)"},
      {"[backend]\nendpoint = \"tcp://1.2.3.4:80\"",
       "backend.endpoint: expected a Unix socket endpoint"},
      {"[log]\nlevel = \"loud\"", "log.level: expected one of trace"},
      {"[server]\nmode = \"sidecar\"",
       "config f: server.mode: expected \"proxy\" or \"nri\", got \"sidecar\""},
      {"[nri]\nsocket_path = \"nri.sock\"",
       "config f: nri.socket_path: expected an absolute path, got \"nri.sock\""},

      {"[nri]\nplugin_request_timeout = \"50ms\"",
       "config f: nri.plugin_request_timeout: expected a duration from 200ms to 10m"},
      {"[nri]\nkoordlet_plugin = \"yes\"", "config f: nri.koordlet_plugin: expected true or false"},
      {"[nri]\nindex = \"10\"", "config f: nri.index: unknown key"},
      {"server = 3", "config f: server: expected a table, got 3"},
      {"[server\n", "config f: line 1"},
  };
  for (const Case& k : cases) {
    auto c = parseConfig(k.text, "f");
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_THAT(message(c.status()), HasSubstr(k.want)) << k.text;
  }
}

TEST(Config, NriModeReadsItsTableAndTakesItsOwnHookDefaults) {
  auto c = parseConfig(R"(
[server]
mode = "nri"
[nri]
socket_path = "/run/nri/private.sock"
plugin_name = "crihook-gpu"
plugin_index = "20"
plugin_request_timeout = "30s"
koordlet_plugin = false
[[hook]]
name = "default"
builtin = "noop"
[[hook]]
name = "given"
builtin = "noop"
timeout = "5s"
)",
                       "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, "nri");
  EXPECT_EQ(c->nri.socket_path, "/run/nri/private.sock");
  EXPECT_EQ(c->nri.plugin_name, "crihook-gpu");
  EXPECT_EQ(c->nri.plugin_index, "20");
  EXPECT_EQ(c->nri.plugin_request_timeout, std::chrono::seconds(30));
  EXPECT_FALSE(c->nri.koordlet_plugin);
  // A timeout not given is NRI's default (1 s), not proxy mode's 2 s; a
  // given one stands.
  EXPECT_EQ(c->hooks[0].timeout, kNriHookTimeout);
  EXPECT_EQ(c->hooks[1].timeout, std::chrono::seconds(5));
  EXPECT_EQ(c->hookserver_timeout, kNriHookServerTimeout);

  auto proxy = parseConfig("[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\n", "f");
  ASSERT_TRUE(proxy.ok());
  EXPECT_EQ(proxy->mode, "proxy");
  EXPECT_EQ(proxy->hooks[0].timeout, std::chrono::seconds(2));
  EXPECT_EQ(proxy->hookserver_timeout, std::chrono::seconds(10));
  EXPECT_EQ(proxy->nri.socket_path, "/var/run/nri/nri.sock");
  EXPECT_EQ(proxy->nri.plugin_index, "10");
  EXPECT_TRUE(proxy->nri.koordlet_plugin);

  auto kept = parseConfig("[server]\nmode = \"nri\"\n[hooks]\nhookserver_timeout = \"3s\"\n", "f");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->hookserver_timeout, std::chrono::seconds(3));
}

TEST(Config, MissingFileIsAnError) {
  auto c = loadConfigFile("/nonexistent/crihook.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(message(c.status()), HasSubstr("config /nonexistent/crihook.toml: cannot be read"));
}

// A FIFO at the config path hung crihookd's start (and SIGTERM with it).
TEST(Config, AFifoOrAnOversizedFileIsRefusedNamingThePath) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo.toml").c_str(), 0600), 0);
  auto c = loadConfigFile(dir.file("fifo.toml"));
  EXPECT_EQ(message(c.status()),
            "config " + dir.file("fifo.toml") + ": cannot be read: a FIFO, not a regular file");
  std::ofstream(dir.file("big.toml")) << "#";
  ASSERT_EQ(::truncate(dir.file("big.toml").c_str(), 2 << 20), 0);
  c = loadConfigFile(dir.file("big.toml"));
  EXPECT_EQ(message(c.status()), "config " + dir.file("big.toml") +
                                     ": cannot be read: 2097152 bytes, more than the 1048576 "
                                     "allowed");
}

TEST(Config, FileOnDiskIsRead) {
  testing::TempDir dir;
  std::ofstream(dir.file("c.toml")) << "[log]\nlevel = \"warn\"\n";
  auto c = loadConfigFile(dir.file("c.toml"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->log_level, "warn");
  EXPECT_EQ(c->listen_path, Config{}.listen_path) << "keys not in the file keep their defaults";
}

TEST(Config, HooksAreReadInTheirOrder) {
  auto c = parseConfig(R"(
[topology]
root = "/srv/fixtures/dgx"

[hooks]
state_dir = "/var/lib/crihook-test"
module_dir = "/opt/crihook/modules"
hookserver_dir = ""
hookserver_timeout = "500ms"
workers = 8

[[hook]]
name = "site-env"
builtin = "static"
timeout = "100ms"
failure_policy = "ignore"
wins_over = ["gpu"]
[hook.settings]
namespaces = ["ml"]
[hook.settings.adjustment]
env = [{ key = "SITE", value = "eu-1" }]

[[hook]]
name = "gpu"
endpoint = "unix:///run/gpu-hook.sock"
stages = ["PreCreateContainer", "PostStopContainer"]

[[hook]]
name = "example"
enabled = false
module = "example_module.so"
workers = 3
queue = 0
isolation = "process"
)",
                       "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state_dir, "/var/lib/crihook-test");
  EXPECT_EQ(c->module_dir, "/opt/crihook/modules");
  EXPECT_EQ(c->hookserver_dir, "");
  EXPECT_EQ(c->hookserver_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->hook_workers, 8);
  EXPECT_EQ(c->topology_root, "/srv/fixtures/dgx");
  ASSERT_EQ(c->hooks.size(), 3u);
  EXPECT_EQ(c->hooks[0].name, "site-env");
  EXPECT_EQ(c->hooks[0].builtin, "static");
  EXPECT_TRUE(c->hooks[0].ignore_failures);
  EXPECT_EQ(c->hooks[0].timeout, std::chrono::milliseconds(100));
  EXPECT_EQ(c->hooks[0].wins_over, std::vector<std::string>{"gpu"});
  EXPECT_THAT(c->hooks[0].settings_json, HasSubstr(R"("key" : "SITE")"));
  EXPECT_EQ(c->hooks[0].origin, "config f: hook[site-env]");
  EXPECT_EQ(c->hooks[1].endpoint, "unix:///run/gpu-hook.sock");
  EXPECT_EQ(c->hooks[1].stages.size(), 2u);
  EXPECT_FALSE(c->hooks[1].ignore_failures);
  EXPECT_EQ(c->hooks[2].module, "example_module.so");
  EXPECT_EQ(c->hooks[2].settings_json, "{}");
  EXPECT_FALSE(c->hooks[2].enabled);
  EXPECT_TRUE(c->hooks[0].enabled);
  EXPECT_EQ(c->hooks[2].workers, 3);
  EXPECT_EQ(c->hooks[2].queue, 0);
  EXPECT_TRUE(c->hooks[2].isolated);
  EXPECT_EQ(c->hooks[0].workers, kDefaultHookWorkers);
  EXPECT_EQ(c->hooks[0].queue, kDefaultHookQueue);
  EXPECT_FALSE(c->hooks[0].isolated);
}

// The longest names each key takes: a hook's 63 characters, a capability's
// 32 (its kernel name is resolved at start-up, not here).
TEST(Config, NamesAtTheirLongestAreTaken) {
  const std::string hook(63, 'h'), cap = "CAP_" + std::string(28, 'X');
  auto c = parseConfig(cat("[[hook]]\nname = \"", hook, "\"\nbuiltin = \"noop\"\n[security]\n",
                           "capabilities = [\"", cap, "\"]\n"),
                       "f");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->hooks.size(), 1u);
  EXPECT_EQ(c->hooks[0].name, hook);
  EXPECT_EQ(c->capabilities, std::vector<std::string>{cap});
}

TEST(Config, BadHooksNameTheEntry) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"[[hook]]\nname = \"a b\"\nbuiltin = \"noop\"",
       "config f: hook[0].name: expected 1-63 letters"},
      {"[[hook]]\nname = \"\"\nbuiltin = \"noop\"",
       "config f: hook[0].name: expected 1-63 letters"},
      {"[[hook]]\nname = "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nbuiltin = "
       "\"noop\"",
       "config f: hook[0].name: expected 1-63 letters"},
      {"[security]\ncapabilities = [\"\"]",
       "security.capabilities[0]: expected a capability name such as \"CAP_NET_ADMIN\""},
      {"[security]\nspawner_capabilities = [\"CAP_NET_ADMIN\", "
       "\"CAP_AAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"]",
       "security.spawner_capabilities[1]: expected a capability name"},
      {"[[hook]]\nname = \"a\"",
       "config f: hook[a].builtin: expected exactly one of builtin, module and endpoint"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nmodule = \"m.so\"",
       "hook[a].builtin: expected exactly one"},
      {"[[hook]]\nname = \"a\"\nendpoint = \"unix:///a.sock\"",
       "hook[a].stages: a hook server needs the stages"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nstages = [\"PreCreateContainer\"]",
       "hook[a].stages: only a hook server"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nfailure_policy = \"retry\"",
       "hook[a].failure_policy: expected \"fail\" or \"ignore\""},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\ntimeout = \"0s\"",
       "hook[a].timeout: expected a duration above 0"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nwins_over = [\"b\"]",
       "hook[a].wins_over: no other hook is named \"b\""},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\n[[hook]]\nname = \"a\"\nbuiltin = \"noop\"",
       "hook[a]: the name is used twice"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\ncolour = 1", "hook[a].colour: unknown key"},
      {"hook = 3", "config f: hook: expected [[hook]] tables"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nenabled = \"no\"",
       "hook[a].enabled: expected true or false, got \"no\""},
      {"[hooks]\nstate_dir = \"var/lib\"", "hooks.state_dir: expected an absolute path"},
      {"[hooks]\nworkers = 0", "hooks.workers: expected an integer in 1..256"},
      {"[[hook]]\nname = \"a\"\nmodule = \"m.so\"\nworkers = 0",
       "hook[a].workers: expected an integer in 1..64, got 0"},
      {"[[hook]]\nname = \"a\"\nmodule = \"m.so\"\nqueue = 1025",
       "hook[a].queue: expected an integer in 0..1024, got 1025"},
      {"[[hook]]\nname = \"a\"\nbuiltin = \"noop\"\nisolation = \"process\"",
       "hook[a].isolation: only a module can run in a helper process"},
      {"[[hook]]\nname = \"a\"\nmodule = \"m.so\"\nisolation = \"vm\"",
       "hook[a].isolation: expected \"none\" or \"process\", got \"vm\""},
      {"[hooks]\nmodule_host = \"bin/host\"", "hooks.module_host: expected an absolute path"},
      {"[topology]\nroot = \"fixtures\"", "topology.root: expected an absolute path"},
      {"[topology]\nroute = \"/\"", "topology.route: unknown key"},
      {"[hooks.owners]\ncpuset = \"koordlet\"",
       "config f: hooks.owners.cpuset: expected \"crihook\", \"koordinator\" or \"refuse\", "
       "got \"koordlet\""},
      {"[hooks.owners]\ngpu = \"crihook\"",
       "hooks.owners.gpu: unknown class of fields (known: device_env, cpuset, resources, other)"},
      {"[hooks.owners]\ncpuset = 1", "hooks.owners.cpuset: expected a string, got 1"},
      {"[hooks]\nowners = 1", "hooks.owners: expected a table"},
  };
  for (const Case& k : cases) {
    auto c = parseConfig(k.text, "f");
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_THAT(message(c.status()), HasSubstr(k.want)) << k.text;
  }
}

// Beside koordlet: who decides a field both set differently (hooks/ownership.h).
TEST(Config, FieldOwnersHaveDefaultsAndAreSetByClass) {
  auto c = parseConfig("", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->owners, (FieldOwners{OwnerSide::kCrihook, OwnerSide::kKoordinator,
                                    OwnerSide::kKoordinator, OwnerSide::kRefuse}));
  c = parseConfig("[hooks.owners]\ncpuset = \"crihook\"\nother = \"koordinator\"\n", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->owners, (FieldOwners{OwnerSide::kCrihook, OwnerSide::kCrihook,
                                    OwnerSide::kKoordinator, OwnerSide::kKoordinator}));
}

// docs/koordinator.md's [hooks.owners] table is kOwnerClasses, row by row.
TEST(Config, TheDocsOwnerTableIsTheCodes) {
  std::ifstream in(CRIHOOK_SOURCE_DIR "/docs/koordinator.md");
  ASSERT_TRUE(in) << CRIHOOK_SOURCE_DIR "/docs/koordinator.md";
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const OwnerClassSpec& c : kOwnerClasses) {
    EXPECT_THAT(page, HasSubstr(cat("| `", c.key, "` | ", c.holds, " | `\"", ownerSideName(c.side),
                                    "\"` | ", c.why, " |\n")))
        << "docs/koordinator.md: the [hooks.owners] row of " << c.key;
  }
}

// Every key that holds a path is read by one check with one message: the
// key, "expected an absolute path" (or "", where "" turns the part off),
// the value quoted.
TEST(Config, EveryPathKeyRefusesARelativePathNamingTheKey) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"[server]\nlisten = \"crihook.sock\"",
       "config f: server.listen: expected an absolute path, got \"crihook.sock\""},
      {"[server]\nlisten = \"\"", "config f: server.listen: expected an absolute path, got \"\""},
      {"[nri]\nsocket_path = \"\"",
       "config f: nri.socket_path: expected an absolute path, got \"\""},
      {"[hooks]\nstate_dir = \"var/lib/crihook\"",
       "config f: hooks.state_dir: expected an absolute path or \"\", got \"var/lib/crihook\""},
      {"[hooks]\nmodule_dir = \"modules\"",
       "config f: hooks.module_dir: expected an absolute path or \"\", got \"modules\""},
      {"[hooks]\nhookserver_dir = \"./hookserver.d\"",
       "config f: hooks.hookserver_dir: expected an absolute path or \"\", got \"./hookserver.d\""},
      {"[hooks]\nmodule_host = \"\"",
       "config f: hooks.module_host: expected an absolute path, got \"\""},
      {"[topology]\nroot = \"sys\"",
       "config f: topology.root: expected an absolute path, got \"sys\""},
      {"[security.mounts]\ndeny = [\"/etc\", \"proc\"]",
       "config f: security.mounts.deny[1]: expected an absolute path, got \"proc\""},
      {"[security.mounts]\ndeny_rw = [\"\"]",
       "config f: security.mounts.deny_rw[0]: expected an absolute path, got \"\""},
  };
  for (const Case& k : cases) {
    auto c = parseConfig(k.text, "f");
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_EQ(message(c.status()), k.want) << k.text;
  }
  // A socket's path fits a sockaddr_un: 107 bytes and its NUL.
  const std::string longest = "/" + std::string(106, 's');
  auto fits = parseConfig(cat("[nri]\nsocket_path = \"", longest, "\""), "f");
  EXPECT_TRUE(fits.ok()) << fits.status();
  auto too_long = parseConfig(cat("[nri]\nsocket_path = \"", longest, "s\""), "f");
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(message(too_long.status()),
              HasSubstr("config f: nri.socket_path: expected a Unix socket path of at most 107 "
                        "bytes, got 108 bytes: \"/sss"));
  // Where the part may be off, "" is taken; a path that is not text is quoted.
  auto off =
      parseConfig("[hooks]\nstate_dir = \"\"\nmodule_dir = \"\"\nhookserver_dir = \"\"", "f");
  EXPECT_TRUE(off.ok()) << off.status();
  auto odd = parseConfig("[topology]\nroot = \"a\\nb\"", "f");
  EXPECT_EQ(message(odd.status()),
            "config f: topology.root: expected an absolute path, got \"a\\x0ab\"");
  // The flags' --listen: the same check.
  Config flags;
  flags.listen_path = "rel.sock";
  EXPECT_EQ(message(validateConfig(flags, "flags")),
            "flags: listen: expected an absolute path, got \"rel.sock\"");
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

namespace crihook {
namespace {

MetricsListen listenOf(const std::string& toml) {
  auto c = parseConfig(toml, "m.toml");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  auto m = metricsListen(*c, "m.toml");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : MetricsListen{};
}

TEST(MetricsConfig, DefaultIsASocketBesideTheCriSocket) {
  MetricsListen m = listenOf("");
  EXPECT_EQ(m.kind, MetricsListen::Kind::kUnix);
  EXPECT_EQ(m.path, "/run/crihook/metrics.sock");
  m = listenOf("[server]\nlisten = \"/tmp/t/c.sock\"\n");
  EXPECT_EQ(m.path, "/tmp/t/metrics.sock");
  m = listenOf("[metrics]\nlisten = \"unix:///run/m.sock\"\n");
  EXPECT_EQ(m.path, "/run/m.sock");
  EXPECT_EQ(listenOf("[metrics]\nlisten = \"\"\n").kind, MetricsListen::Kind::kNone);
}

TEST(MetricsConfig, TcpOnLoopbackOnlyUnlessAllowed) {
  MetricsListen m = listenOf("[metrics]\nlisten = \"127.0.0.1:9464\"\n");
  EXPECT_EQ(m.kind, MetricsListen::Kind::kTcp);
  EXPECT_EQ(m.host, "127.0.0.1");
  EXPECT_EQ(m.port, 9464);
  EXPECT_EQ(listenOf("[metrics]\nlisten = \"[::1]:9464\"\n").host, "::1");
  auto remote = parseConfig("[metrics]\nlisten = \"0.0.0.0:9464\"\n", "m.toml");
  ASSERT_FALSE(remote.ok());
  EXPECT_THAT(message(remote.status()),
              HasSubstr("config m.toml: metrics.listen: not a loopback address"));
  EXPECT_THAT(message(remote.status()), HasSubstr("allow_remote"));
  EXPECT_EQ(listenOf("[metrics]\nlisten = \"10.0.0.1:9464\"\nallow_remote = true\n").host,
            "10.0.0.1");
  for (const char* bad : {"localhost:9464", "127.0.0.1:70000", "127.0.0.1:x"}) {
    auto c = parseConfig(cat("[metrics]\nlisten = \"", bad, "\"\n"), "m.toml");
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_THAT(message(c.status()), HasSubstr("metrics.listen"));
    }
  }
  EXPECT_EQ(listenOf("[metrics]\nlisten = \"127.0.0.1:65535\"\n").port, 65535);
  EXPECT_EQ(listenOf("[metrics]\nlisten = \"127.0.0.1:0\"\n").port, 0);  // any free port
  // Loopback is 127.0.0.0/8 and ::1, nothing else (the endpoint has no
  // authentication: anything wider serves the network).
  for (const char* ok : {"127.0.0.1", "127.255.255.254", "127.1.2.3", "[::1]"}) {
    EXPECT_EQ(listenOf(cat("[metrics]\nlisten = \"", ok, ":9464\"\n")).kind,
              MetricsListen::Kind::kTcp)
        << ok;
  }
  for (const char* host :
       {"128.0.0.1", "126.255.255.255", "255.255.255.255", "10.0.0.127", "1.0.0.127",
        "192.168.127.1", "[::]", "[::2]", "[::ffff:10.0.0.1]", "[fe80::1]", "[2001:db8::1]"}) {
    auto c = parseConfig(cat("[metrics]\nlisten = \"", host, ":9464\"\n"), "m.toml");
    ASSERT_FALSE(c.ok()) << host << " taken as loopback";
    EXPECT_THAT(message(c.status()), HasSubstr("not a loopback address")) << host;
  }
  auto typo = parseConfig("[metrics]\nlistn = \"x\"\n", "m.toml");
  EXPECT_THAT(message(typo.status()), HasSubstr("metrics.listn: unknown key"));
}

}  // namespace
}  // namespace crihook
