// crihookd as an operator runs it: flags, config file, readiness, signals.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <map>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "fake_cri_server.h"
#include "koord_server.h"
#include "runtime_v1.grpc.pb.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::vector<std::string> withStateDir(std::vector<std::string> args, const std::string& dir) {
  args.insert(args.begin(), {"--state-dir", dir});
  return args;
}

// crihookd with `args`, its output in `log`, its records next to it.
class Daemon : public ChildProcess {
 public:
  Daemon(const std::vector<std::string>& args, const std::string& log,
         const std::string& notify_socket = "")
      : ChildProcess(CRIHOOKD_BINARY, withStateDir(args, log + ".state"), log,
                     notify_socket.empty()
                         ? std::map<std::string, std::string>{}
                         : std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_socket}}) {}
};

std::string slurp(const std::string& path) { return readFile(path); }

bool waitForSocket(const std::string& path) { return waitForFile(path, 5000ms); }

class CrihookdTest : public ::testing::Test {
 protected:
  CrihookdTest() : backend_(dir_.file("backend.sock")) {
    backend_.onUnary("/runtime.v1.RuntimeService/Version", [](FakeCall&, std::string* out) {
      v1::VersionResponse r;
      r.set_runtime_name("fake");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
  }
  grpc::Status version(const std::string& socket) {
    auto stub = v1::RuntimeService::NewStub(unixChannel(socket));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::VersionResponse r;
    return stub->Version(&ctx, v1::VersionRequest(), &r);
  }
  TempDir dir_;
  FakeCriServer backend_;
};

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

TEST_F(CrihookdTest, SecondDaemonOnTheSameSocketIsRefused) {
  backend_.start();
  const std::string sock = dir_.file("one.sock");
  const std::string backend = "unix://" + dir_.file("backend.sock");
  Daemon first({"--listen", sock, "--backend", backend}, dir_.file("log1"));
  ASSERT_TRUE(waitForSocket(sock));
  Daemon second({"--listen", sock, "--backend", backend}, dir_.file("log2"));
  EXPECT_EQ(second.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log2")), HasSubstr("another crihookd is serving " + sock));
  EXPECT_TRUE(version(sock).ok()) << "the first keeps serving";
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(10s), 0);
}

TEST_F(CrihookdTest, AModuleOfAnotherAbiIsRefusedWithALogLineAndTheDaemonServes) {
  backend_.start();
  std::ofstream(dir_.file("c.toml"))
      << "[hooks]\nhookserver_dir = \"\"\n"
      << "[[hook]]\nname = \"old\"\nmodule = \"" << VARIANT_DIR << "/variant_abi99.so\"\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock"), "--backend",
            "unix://" + dir_.file("backend.sock")},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(dir_.file("s.sock"))) << slurp(dir_.file("log"));
  EXPECT_TRUE(version(dir_.file("s.sock")).ok());
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("hook[old]: module refused, hook left out: module " VARIANT_DIR
                        "/variant_abi99.so: built for module ABI version 99"));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

TEST_F(CrihookdTest, BadBuiltInHookSettingsStopStartupNamingTheHook) {
  std::ofstream(dir_.file("c.toml")) << "[[hook]]\nname = \"env\"\nbuiltin = \"static\"\n"
                                     << "[hook.settings.adjustment]\ncpuset_cpus = \"all\"\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock")}, dir_.file("log"));
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("hook[env]: hook env: settings: adjustment.cpuset_cpus: expected a CPU or "
                        "node list"));
}

TEST_F(CrihookdTest, KoordinatorRegistrationFilesAddedAndRemovedWhileItRuns) {
  backend_.onUnary("/runtime.v1.RuntimeService/CreateContainer", [](FakeCall&, std::string* out) {
    v1::CreateContainerResponse r;
    r.set_container_id("c1");
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  KoordServer koordlet(dir_.file("koordlet.sock"));
  koordlet.start();
  std::filesystem::create_directories(dir_.file("hookserver.d"));
  std::ofstream(dir_.file("c.toml"))
      << "[hooks]\nhookserver_dir = \"" << dir_.file("hookserver.d") << "\"\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock"), "--backend",
            "unix://" + dir_.file("backend.sock")},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(dir_.file("s.sock"))) << slurp(dir_.file("log"));
  // Whether the runtime got a CreateContainer annotated by koordlet.
  auto annotated = [&] {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb");
    req.mutable_config()->mutable_metadata()->set_name("c");
    auto stub = v1::RuntimeService::NewStub(unixChannel(dir_.file("s.sock")));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::CreateContainerResponse resp;
    EXPECT_TRUE(stub->CreateContainer(&ctx, req, &resp).ok());
    v1::CreateContainerRequest seen;
    EXPECT_TRUE(seen.ParseFromString(backend_.calls().back().request));
    return seen.config().annotations().count("seen-by") == 1;
  };
  auto eventually = [&](bool want) {
    for (int i = 0; i < 50; ++i) {
      if (annotated() == want) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  EXPECT_FALSE(annotated());
  std::ofstream(dir_.file("hookserver.d/koordlet.json"))
      << R"({"remote-endpoint": ")" << dir_.file("koordlet.sock")
      << R"(", "failure-policy": "Fail", "runtime-hooks": ["PreCreateContainer"]})";
  EXPECT_TRUE(eventually(true)) << slurp(dir_.file("log"));
  std::filesystem::remove(dir_.file("hookserver.d/koordlet.json"));
  EXPECT_TRUE(eventually(false)) << slurp(dir_.file("log"));
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("hook server koordlet.json registered"));
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("hook server koordlet.json removed"));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

TEST_F(CrihookdTest, DiscoversTheTopologyUnderItsRootAndAgainOnSighup) {
  backend_.start();
  ASSERT_EQ(std::system(("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh " +
                         dir_.file("fixtures"))
                            .c_str()),
            0);
  std::ofstream(dir_.file("c.toml")) << "[topology]\nroot = \"" << dir_.file("fixtures/dgx")
                                     << "\"\n[hooks]\nhookserver_dir = \"\"\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock"), "--backend",
            "unix://" + dir_.file("backend.sock")},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(dir_.file("s.sock"))) << slurp(dir_.file("log"));
  // The warning: NVML is not asked about a fixture's GPUs (their memory).
  const std::string line = "64 CPUs, 2 NUMA nodes, 8 GPUs, 7 RDMA devices, 1 warnings";
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr(line));
  d.signal(SIGHUP);
  bool again = false;
  for (int i = 0; i < 50 && !again; ++i) {
    std::this_thread::sleep_for(50ms);
    const std::string log = slurp(dir_.file("log"));
    again = log.find(line) != log.rfind(line);
  }
  EXPECT_TRUE(again) << slurp(dir_.file("log"));
  EXPECT_TRUE(version(dir_.file("s.sock")).ok());  // SIGHUP does not stop it
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// Confinement (README "Confinement"): the filter, the capabilities and the
// spawner, in the real binary.

// The CapEff / CapBnd values of every thread of `pid`.
std::vector<std::pair<std::string, std::string>> threadCaps(pid_t pid) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream status(task.path() / "status");
    std::string line, eff, bnd;
    while (std::getline(status, line)) {
      if (line.rfind("CapEff:\t", 0) == 0) eff = line.substr(8);
      if (line.rfind("CapBnd:\t", 0) == 0) bnd = line.substr(8);
    }
    out.emplace_back(eff, bnd);
  }
  return out;
}

std::string capEffOf(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("CapEff:\t", 0) == 0) return line.substr(8);
  return "";
}

// Gone, or a zombie nobody reaped yet.
bool processGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

bool waitProcessGone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (processGone(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

pid_t spawnerOf(pid_t daemon) {
  std::ifstream children("/proc/" + std::to_string(daemon) + "/task/" + std::to_string(daemon) +
                         "/children");
  pid_t pid = -1;
  children >> pid;
  return pid;
}

class ConfinedDaemonTest : public CrihookdTest {
 protected:
  ConfinedDaemonTest() {
    backend_.onUnary("/runtime.v1.RuntimeService/CreateContainer",
                     [](FakeCall&, std::string* out) {
                       v1::CreateContainerResponse r;
                       r.set_container_id("c1");
                       *out = r.SerializeAsString();
                       return grpc::Status::OK;
                     });
    backend_.start();
  }
  // crihookd with the syscall module (test/confine/syscall_module.cc) and
  // `security` as its [security] table.
  std::unique_ptr<Daemon> start(const std::string& security, const std::string& name) {
    std::ofstream(dir_.file(name + ".toml"))
        << "[hooks]\nhookserver_dir = \"\"\n"
        << security << "[[hook]]\nname = \"syscall\"\nmodule = \"" << VARIANT_DIR
        << "/syscall_module.so\"\n";
    auto d = std::make_unique<Daemon>(
        std::vector<std::string>{"--config", dir_.file(name + ".toml"), "--listen",
                                 dir_.file(name + ".sock"), "--backend",
                                 "unix://" + dir_.file("backend.sock")},
        dir_.file(name + ".log"));
    EXPECT_TRUE(waitForSocket(dir_.file(name + ".sock"))) << slurp(dir_.file(name + ".log"));
    return d;
  }
  // The env the module's calls put in the CreateContainer the runtime got.
  grpc::Status create(const std::string& name, std::map<std::string, std::string>* env) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb");
    req.mutable_config()->mutable_metadata()->set_name("c");
    auto stub = v1::RuntimeService::NewStub(unixChannel(dir_.file(name + ".sock")));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::CreateContainerResponse resp;
    grpc::Status s = stub->CreateContainer(&ctx, req, &resp);
    if (s.ok()) {
      v1::CreateContainerRequest seen;
      EXPECT_TRUE(seen.ParseFromString(backend_.calls().back().request));
      for (const auto& kv : seen.config().envs()) (*env)[kv.key()] = kv.value();
    }
    return s;
  }
};

TEST_F(ConfinedDaemonTest, AForbiddenSystemCallIsRefusedInsideTheRunningDaemon) {
  auto d = start("", "default");  // the filter is on by default
  std::map<std::string, std::string> env;
  grpc::Status s = create("default", &env);
  ASSERT_TRUE(s.ok()) << s.error_message() << slurp(dir_.file("default.log"));
  EXPECT_EQ(env["CRIHOOK_TEST_UNSHARE"], "EPERM");
  EXPECT_EQ(env["CRIHOOK_TEST_FORK"], "EPERM");
  EXPECT_THAT(slurp(dir_.file("default.log")),
              ::testing::MatchesRegex("(.|\n)*confined: seccomp errno \\([0-9]+ system calls "
                                      "allowed\\), capabilities kept: none; spawner pid [0-9]+ "
                                      "\\(seccomp off, capabilities: all\\)(.|\n)*"));
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(10s), 0);

  // The same calls without the filter succeed: it was the filter.
  auto off = start("[security]\nseccomp = \"off\"\n", "off");
  env.clear();
  s = create("off", &env);
  ASSERT_TRUE(s.ok()) << s.error_message() << slurp(dir_.file("off.log"));
  EXPECT_EQ(env["CRIHOOK_TEST_UNSHARE"], "0");
  EXPECT_EQ(env["CRIHOOK_TEST_FORK"], "0");
  off->signal(SIGTERM);
  EXPECT_EQ(off->wait(10s), 0);
}

TEST_F(ConfinedDaemonTest, KillModeEndsTheDaemonAtAForbiddenCall) {
  auto d = start("[security]\nseccomp = \"kill\"\n", "kill");
  std::map<std::string, std::string> env;
  EXPECT_FALSE(create("kill", &env).ok());
  EXPECT_EQ(d->wait(10s), 128 + SIGSYS);
}

TEST_F(ConfinedDaemonTest, ABadSecuritySettingStopsStartupNamingTheKey) {
  std::ofstream(dir_.file("c.toml")) << "[security]\nseccomp = \"strict\"\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock")}, dir_.file("log"));
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("config " + dir_.file("c.toml") +
                        ": security.seccomp: expected \"errno\", \"kill\", \"log\" or \"off\", "
                        "got \"strict\""));
  std::ofstream(dir_.file("c2.toml")) << "[security]\ncapabilities = [\"CAP_FLY\"]\n";
  Daemon d2({"--config", dir_.file("c2.toml"), "--listen", dir_.file("s2.sock")},
            dir_.file("log2"));
  EXPECT_EQ(d2.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log2")),
              HasSubstr("security.capabilities: security.capabilities[0]: unknown capability "
                        "\"CAP_FLY\""));
}

TEST_F(ConfinedDaemonTest, EveryThreadDropsItsCapabilitiesAndTheSpawnerKeepsThem) {
  const std::string mine = capEffOf("self");
  if (mine == "0000000000000000") GTEST_SKIP() << "the test runs without capabilities";
  auto d = start("[security]\ncapabilities = [\"CAP_NET_ADMIN\"]\n", "caps");
  const auto threads = threadCaps(d->pid());
  EXPECT_GT(threads.size(), 3u) << "event loops, hook pool, watcher";
  for (const auto& [eff, bnd] : threads) {
    EXPECT_EQ(eff, "0000000000001000");  // CAP_NET_ADMIN alone
    EXPECT_EQ(bnd, "0000000000001000");
  }
  const pid_t spawner = spawnerOf(d->pid());
  ASSERT_GT(spawner, 0);
  EXPECT_EQ(capEffOf(std::to_string(spawner)), mine);
  // The spawner ends with crihookd, even one killed outright.
  d->signal(SIGKILL);
  d->wait(10s);
  EXPECT_TRUE(waitProcessGone(spawner));
}

}  // namespace
}  // namespace crihook::testing
