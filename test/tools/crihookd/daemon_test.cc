// crihookd's life (tools/crihookd/daemon.cc) in the built binary: start-up
// in its order, hooks and their registrations, the topology and SIGHUP, the
// socket's mode, the graceful SIGTERM, the call log lines, confinement.

#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "cri/lifecycle.h"
#include "proxy/call_log.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "test/support/koord_server.h"
#include "test/support/process_stats.h"
#include "test/tools/crihookd/crihookd_fixture.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;

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
  auto d = startWithConfig();
  ASSERT_NE(d, nullptr);
  const grpc::Status v = version(dir_.file("s.sock"));
  EXPECT_TRUE(v.ok()) << v.error_message() << "\n" << slurp(dir_.file("log"));
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("hook[old]: module refused, hook left out: module " VARIANT_DIR
                        "/variant_abi99.so: built for module ABI version 99"));
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(5s), 0);
}

// An in-process module that loops (declaring itself INLINE all the same):
// its call is answered by its failure policy at its timeout, Version is
// never held, and SIGTERM stops crihookd within its stop timeout although
// the module never returns. Before, the loop held an event loop, every
// second connection hung, and crihookd was alive 18 s after SIGTERM.
TEST_F(CrihookdTest, AnInProcessModuleThatLoopsHoldsNeitherCallsNorTheStop) {
  backend_.onUnary("/runtime.v1.RuntimeService/CreateContainer", [](FakeCall&, std::string* out) {
    v1::CreateContainerResponse r;
    r.set_container_id("c1");
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  std::ofstream(dir_.file("c.toml"))
      << "[server]\nshutdown_grace = \"1s\"\n[hooks]\nhookserver_dir = \"\"\n"
      << "[[hook]]\nname = \"spin\"\nmodule = \"" << VARIANT_DIR << "/variant_spin.so\"\n"
      << "timeout = \"300ms\"\nfailure_policy = \"ignore\"\n";
  auto d = startWithConfig();
  ASSERT_NE(d, nullptr);
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id("sb");
  req.mutable_config()->mutable_metadata()->set_name("c");
  auto stub = v1::RuntimeService::NewStub(unixChannel(dir_.file("s.sock")));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::CreateContainerResponse resp;
  EXPECT_TRUE(stub->CreateContainer(&ctx, req, &resp).ok());  // the module ignored at 300 ms
  // Every new connection is answered, whichever loop it lands on.
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(version(dir_.file("s.sock")).ok()) << i;
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(10s), 0) << slurp(dir_.file("log"));
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

// The configuration README.md offers as one that works, as it is written
// there: crihookd starts with it, serves, and its hooks act (the
// device-lifecycle hook refuses a pod whose allocation is malformed).
TEST_F(CrihookdTest, TheReadmesWorkingConfigurationStartsAndItsHooksAct) {
  const std::string readme = slurp(CRIHOOK_SOURCE_DIR "/README.md");
  const size_t section = readme.find("\n## A working configuration\n");
  ASSERT_NE(section, std::string::npos) << "README.md: no \"## A working configuration\"";
  const size_t begin = readme.find("```toml\n", section);
  ASSERT_NE(begin, std::string::npos) << "README.md: no TOML block in \"A working configuration\"";
  const size_t end = readme.find("\n```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  std::ofstream(dir_.file("c.toml")) << readme.substr(begin + 8, end - begin - 8) << "\n";
  backend_.start();
  auto d = startWithConfig();
  ASSERT_NE(d, nullptr);
  const grpc::Status v = version(dir_.file("s.sock"));
  EXPECT_TRUE(v.ok()) << v.error_message() << "\n" << slurp(dir_.file("log"));

  auto stub = ::runtime::v1::RuntimeService::NewStub(unixChannel(dir_.file("s.sock")));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  ::runtime::v1::RunPodSandboxRequest run;
  auto& meta = *run.mutable_config()->mutable_metadata();
  meta.set_name("train-0");
  meta.set_namespace_("ml");
  meta.set_uid("uid-train-0");
  (*run.mutable_config()->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu": [{"minor": "zero"}]})";
  ::runtime::v1::RunPodSandboxResponse resp;
  const grpc::Status s = stub->RunPodSandbox(&ctx, run, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("annotation scheduling.koordinator.sh/device-allocated of pod ml/train-0"));
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(10s), 0) << slurp(dir_.file("log"));
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
  auto d = startWithHookServerDir();
  ASSERT_NE(d, nullptr);
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
  EXPECT_FALSE(annotated());
  std::ofstream(dir_.file("hookserver.d/koordlet.json"))
      << R"({"remote-endpoint": ")" << dir_.file("koordlet.sock")
      << R"(", "failure-policy": "Fail", "runtime-hooks": ["PreCreateContainer"]})";
  EXPECT_TRUE(eventually([&] { return annotated(); })) << slurp(dir_.file("log"));
  std::filesystem::remove(dir_.file("hookserver.d/koordlet.json"));
  EXPECT_TRUE(eventually([&] { return !annotated(); })) << slurp(dir_.file("log"));
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("hook server koordlet.json registered"));
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("hook server koordlet.json removed"));
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(5s), 0);
}

// hookserver.d flooded while crihookd runs: 10,000 registrations of 60 KB
// each (hard links to one file, so the test writes 60 KB, not 600 MB).
// crihookd reads within its bounds, says what it left, stays small and
// keeps serving.
TEST_F(CrihookdTest, AFloodedHookServerDirIsReadWithinItsBoundsAndSaidSo) {
  backend_.start();
  auto d = startWithHookServerDir();
  ASSERT_NE(d, nullptr);
  const long before = peakRssKiB(d->pid());
  {
    std::ofstream one(dir_.file("one.json"));
    one << R"({"remote-endpoint": ")" << dir_.file("nobody.sock")
        << R"(", "failure-policy": "Ignore", "runtime-hooks": ["PreCreateContainer"])";
    one << std::string(60 * 1024, ' ') << "}";
  }
  for (int i = 0; i < 10000; ++i) {
    std::filesystem::create_hard_link(dir_.file("one.json"),
                                      dir_.file(cat("hookserver.d/", 10000 + i, ".json")));
  }
  EXPECT_TRUE(eventually(
      [&] {
        return slurp(dir_.file("log")).find(": 10000 entries; left unread") != std::string::npos;
      },
      30s))
      << slurp(dir_.file("log"));
  const std::string log = slurp(dir_.file("log"));
  EXPECT_THAT(log, HasSubstr(": 10000 entries; left unread past 1048576 bytes of registrations: "));
  EXPECT_THAT(log, HasSubstr(", of them 8976 not listed"));
  EXPECT_TRUE(version(dir_.file("s.sock")).ok());
  // What it read is bounded (1 MiB of registrations): the unbounded read took
  // 0.85-1.15 GB here.
  const long peak = peakRssKiB(d->pid());
  EXPECT_LT(peak - before, 64 * 1024)
      << "peak RSS " << before << " KiB before, " << peak << " after";
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(10s), 0);
}

// NRI mode refuses what would get crihook dropped by the runtime: hooks
// that together could outlast its plugin timeout, and an index that puts
// crihook before koordlet's own plugin.
TEST_F(CrihookdTest, NriModeRefusesHooksThatOutlastThePluginTimeoutAndKoordletsIndex) {
  std::filesystem::create_directories(dir_.file("hookserver.d"));
  std::ofstream(dir_.file("hookserver.d/koordlet.json"))
      << R"({"remote-endpoint": ")" << dir_.file("koordlet.sock")
      << R"(", "failure-policy": "Fail", "runtime-hooks": ["PreCreateContainer"]})";
  const std::string nri =
      cat("[server]\nmode = \"nri\"\n[nri]\nsocket_path = \"", dir_.file("nri.sock"), "\"\n");
  const std::string hooks = cat("[hooks]\nhookserver_dir = \"", dir_.file("hookserver.d"),
                                "\"\nhookserver_timeout = \"1500ms\"\n");
  // koordlet's plugin off: its hook server is called, and with the
  // module-less remote hook below CreateContainer's hooks need 2.5 s.
  std::ofstream(dir_.file("c.toml"))
      << nri << "koordlet_plugin = false\n"
      << hooks << "[[hook]]\nname = \"gpu-remote\"\nendpoint = \"unix://"
      << dir_.file("remote.sock") << "\"\nstages = [\"PreCreateContainer\"]\n";
  Daemon d({"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock")}, dir_.file("log"));
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("NRI event CreateContainer runs hooks for up to 2500ms: gpu-remote (1s, "
                        "pre) + hookserver/koordlet (1500ms, pre)"));
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr("to at least 2600ms"));
  // Told the runtime's real timeout, it starts (and waits for the runtime).
  // A hook that runs inline takes microseconds: its timeout is not counted.
  std::ofstream(dir_.file("c2.toml"))
      << nri << "koordlet_plugin = false\nplugin_request_timeout = \"3s\"\n"
      << hooks << "[[hook]]\nname = \"gpu-remote\"\nendpoint = \"unix://"
      << dir_.file("remote.sock") << "\"\nstages = [\"PreCreateContainer\"]\n"
      << "[[hook]]\nname = \"site-env\"\nbuiltin = \"static\"\n[hook.settings.adjustment]\n"
      << "env = [{key = \"SITE\", value = \"x\"}]\n";
  Daemon started({"--config", dir_.file("c2.toml"), "--listen", dir_.file("s.sock")},
                 dir_.file("log2"));
  EXPECT_TRUE(eventually([&] { return logHas(dir_.file("log2"), "NRI connection to"); }));
  EXPECT_THAT(slurp(dir_.file("log2")), HasSubstr("NRI connection to " + dir_.file("nri.sock")));
  EXPECT_THAT(slurp(dir_.file("log2")),
              HasSubstr("hook chain: gpu-remote, site-env, hookserver/koordlet"));
  started.signal(SIGTERM);
  EXPECT_EQ(started.wait(5s), 0);

  // koordlet's plugin on (the default): its hook server is not read at all,
  // and crihook may not take koordlet's index.
  std::ofstream(dir_.file("c3.toml")) << nri << "plugin_index = \"00\"\n" << hooks;
  Daemon early({"--config", dir_.file("c3.toml"), "--listen", dir_.file("s.sock")},
               dir_.file("log3"));
  EXPECT_EQ(early.wait(5s), 1);
  EXPECT_THAT(slurp(dir_.file("log3")),
              HasSubstr("nri.plugin_index: expected an index after koordlet's own plugin (00, "
                        "nri.koordlet_plugin = true), got \"00\""));
  std::ofstream(dir_.file("c4.toml")) << nri << hooks;
  Daemon skipping({"--config", dir_.file("c4.toml"), "--listen", dir_.file("s.sock")},
                  dir_.file("log4"));
  EXPECT_TRUE(eventually([&] { return logHas(dir_.file("log4"), "NRI connection to"); }));
  EXPECT_THAT(slurp(dir_.file("log4")), HasSubstr("hook chain: no hooks"));
  EXPECT_THAT(slurp(dir_.file("log4")),
              HasSubstr("Koordinator's hook servers are not called (koordlet's own NRI plugin "
                        "acts)"));
  skipping.signal(SIGTERM);
  EXPECT_EQ(skipping.wait(5s), 0);
}

TEST_F(CrihookdTest, DiscoversTheTopologyUnderItsRootAndAgainOnSighup) {
  backend_.start();
  std::ofstream(dir_.file("c.toml"))
      << "[topology]\nroot = \"" << fixtureTree("dgx") << "\"\n[hooks]\nhookserver_dir = \"\"\n";
  auto d = startWithConfig();
  ASSERT_NE(d, nullptr);
  // The warning: NVML is not asked about a fixture's GPUs (their memory).
  const std::string line = "64 CPUs, 2 NUMA nodes, 8 GPUs, 7 RDMA devices, 1 warnings";
  EXPECT_THAT(slurp(dir_.file("log")), HasSubstr(line));
  d->signal(SIGHUP);
  EXPECT_TRUE(eventually([&] {
    const std::string log = slurp(dir_.file("log"));
    return log.find(line) != log.rfind(line);
  })) << slurp(dir_.file("log"));
  EXPECT_TRUE(version(dir_.file("s.sock")).ok());  // SIGHUP does not stop it
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(5s), 0);
}

// A group crihookd does not run as, other than root's: a chown to it shows.
// Root may chown to any group; anyone else only to a group they are in.
std::optional<std::pair<std::string, gid_t>> otherGroup() {
  std::optional<std::pair<std::string, gid_t>> found;
  std::vector<gid_t> mine(256);
  const int n = ::getgroups(static_cast<int>(mine.size()), mine.data());
  mine.resize(n > 0 ? static_cast<size_t>(n) : 0);
  ::setgrent();
  while (struct group* g = ::getgrent()) {
    if (g->gr_gid == 0 || g->gr_gid == ::getegid()) continue;
    if (::geteuid() != 0 && std::find(mine.begin(), mine.end(), g->gr_gid) == mine.end()) continue;
    found.emplace(g->gr_name, g->gr_gid);
    break;
  }
  ::endgrent();
  return found;
}

TEST_F(CrihookdTest, SocketIsCreatedWithTheConfiguredModeAndGroup) {
  // docs/configuration.md: server.socket_mode, server.socket_group. 0640 is
  // neither the default (0660) nor what bind(2) leaves under a usual umask.
  const auto group = otherGroup();
  if (!group) GTEST_SKIP() << "no group to chown to: not root, and in no group but its own";
  backend_.start();
  std::ofstream(dir_.file("c.toml")) << "[server]\nsocket_mode = \"0640\"\nsocket_group = \""
                                     << group->first << "\"\n[hooks]\nhookserver_dir = \"\"\n";
  const std::string sock = dir_.file("s.sock");
  Daemon d({"--config", dir_.file("c.toml"), "--listen", sock, "--backend",
            "unix://" + dir_.file("backend.sock")},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(sock)) << slurp(dir_.file("log"));
  struct stat st {};
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u) << std::oct << (st.st_mode & 07777);
  EXPECT_EQ(st.st_gid, group->second) << "socket_group = " << group->first;
  EXPECT_TRUE(version(sock).ok());
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
}

TEST_F(CrihookdTest, SigtermAnswersACallThatEndsWithinTheGraceAndCutsOffOneThatDoesNot) {
  // docs/operations.md, Restarts and upgrades: on SIGTERM crihookd lets in-flight calls finish for
  // server.shutdown_grace, then cuts off the rest (UNAVAILABLE, the
  // runtime's stream cancelled) and exits 0.
  constexpr auto kGrace = 2s;
  constexpr auto kExitBound = 3s;  // from the end of the grace to crihookd's exit
  const std::string quick = "/runtime.v1.RuntimeService/Quick";
  const std::string slow = "/runtime.v1.RuntimeService/Slow";
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  backend_.onUnary(quick, [&](FakeCall&, std::string* out) {
    if (released.wait_for(20s) != std::future_status::ready)
      return grpc::Status(grpc::StatusCode::INTERNAL, "fake: never released");
    *out = "quick";
    return grpc::Status::OK;
  });
  std::promise<void> slow_cancelled;
  backend_.onUnary(slow, [&](FakeCall& call, std::string* out) {
    if (eventually([&] { return call.cancelled(); }, 15s)) slow_cancelled.set_value();
    *out = "slow";
    return grpc::Status::OK;
  });
  backend_.start();
  std::ofstream(dir_.file("c.toml")) << "[server]\nshutdown_grace = \"2s\"\n"
                                     << "[hooks]\nhookserver_dir = \"\"\n";
  const std::string sock = dir_.file("s.sock");
  Daemon d({"--config", dir_.file("c.toml"), "--listen", sock, "--backend",
            "unix://" + dir_.file("backend.sock")},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(sock)) << slurp(dir_.file("log"));
  auto channel = unixChannel(sock);  // one kubelet connection for both calls
  auto call = [&](const std::string& method) {
    return std::async(std::launch::async, [&, method] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 30s);
      std::string reply;
      grpc::Status s = genericUnary(channel, &ctx, method, "x", &reply);
      return std::make_pair(s, std::chrono::steady_clock::now());
    });
  };
  auto quick_call = call(quick);
  auto slow_call = call(slow);
  const auto any = [](const FakeCall&) { return true; };
  ASSERT_TRUE(backend_.waitForCall(quick, any, 10s));
  ASSERT_TRUE(backend_.waitForCall(slow, any, 10s));

  const auto sigterm = std::chrono::steady_clock::now();
  d.signal(SIGTERM);
  // Draining has begun, with both calls in flight; then the quick one ends.
  ASSERT_TRUE(eventually([&] {
    return logHas(dir_.file("log"), "no longer accepting on " + sock + "; 2 calls in flight");
  })) << slurp(dir_.file("log"));
  release.set_value();
  auto [quick_status, quick_end] = quick_call.get();
  EXPECT_TRUE(quick_status.ok()) << quick_status.error_code() << " "
                                 << quick_status.error_message();
  EXPECT_LT(quick_end - sigterm, kGrace) << "answered only when the grace ran out";

  auto [slow_status, slow_end] = slow_call.get();
  EXPECT_EQ(slow_status.error_code(), grpc::StatusCode::UNAVAILABLE) << slow_status.error_message();
  EXPECT_GE(slow_end - sigterm, kGrace) << "cut off before the grace ran out";
  EXPECT_LT(slow_end - sigterm, kGrace + 1s) << "cut off well after the grace ran out";
  EXPECT_EQ(slow_cancelled.get_future().wait_for(5s), std::future_status::ready)
      << "the runtime kept working on a call crihookd cut off";
  const int code = d.wait(std::chrono::duration_cast<std::chrono::milliseconds>(
      kGrace + kExitBound - (std::chrono::steady_clock::now() - sigterm)));
  EXPECT_EQ(code, 0) << "crihookd did not exit within the grace and " << kExitBound.count() << " s";
  EXPECT_THAT(slurp(dir_.file("log")),
              HasSubstr("1 calls were still running when the grace period ended"));
}

// The part of crihookd's log line for `method` from the method name on
// (after the time, level and logger), the `nth` such line (0: the first).
std::string callLine(const std::string& log, const std::string& method, int nth = 0) {
  std::istringstream in(log);
  std::string line;
  const std::string marker = " " + method + " api=";
  while (std::getline(in, line)) {
    const size_t at = line.find(marker);
    if (at != std::string::npos && nth-- == 0) return line.substr(at + 1);
  }
  return "";
}

TEST_F(CrihookdTest, EachInterceptedCallWritesOneWholeLogLine) {
  // README.md: "One log line per intercepted call: CreateContainer api=v1
  // pod=default/train-0 sandbox=7707ee14db15 container=bab486912aa8
  // duration=8.975ms status=OK"; a pod name that is not a plain DNS name
  // is quoted, so it cannot forge a line.
  const std::string sandbox = "7707ee14db15aabbccddeeff00112233";
  const std::string container = "bab486912aa8ffeeddccbbaa99887766";
  backend_.onUnary("/runtime.v1.RuntimeService/RunPodSandbox", [&](FakeCall&, std::string* out) {
    v1::RunPodSandboxResponse r;
    r.set_pod_sandbox_id(sandbox);
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.onUnary("/runtime.v1.RuntimeService/CreateContainer", [&](FakeCall&, std::string* out) {
    std::this_thread::sleep_for(200ms);  // the runtime's own work: the duration shows it
    v1::CreateContainerResponse r;
    r.set_container_id(container);
    *out = r.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.onUnary("/runtime.v1.RuntimeService/StartContainer", [](FakeCall&, std::string*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "container \"bab4\" not found");
  });
  backend_.start();
  std::ofstream(dir_.file("c.toml")) << "[hooks]\nhookserver_dir = \"\"\n";
  const std::string sock = dir_.file("s.sock");
  Daemon d({"--config", dir_.file("c.toml"), "--listen", sock, "--backend",
            "unix://" + dir_.file("backend.sock"), "--log-level", "info"},
           dir_.file("log"));
  ASSERT_TRUE(waitForSocket(sock)) << slurp(dir_.file("log"));
  auto stub = v1::RuntimeService::NewStub(unixChannel(sock));
  auto deadline = [] { return std::chrono::system_clock::now() + 10s; };

  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_namespace_("default");
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::RunPodSandboxResponse r;
    ASSERT_TRUE(stub->RunPodSandbox(&ctx, run, &r).ok());
  }
  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id(sandbox);
  *create.mutable_sandbox_config() = run.config();
  create.mutable_config()->mutable_metadata()->set_name("trainer");
  const auto t0 = std::chrono::steady_clock::now();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::CreateContainerResponse r;
    ASSERT_TRUE(stub->CreateContainer(&ctx, create, &r).ok());
  }
  const auto create_took = std::chrono::steady_clock::now() - t0;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::StartContainerRequest start;
    start.set_container_id(container);
    v1::StartContainerResponse r;
    EXPECT_EQ(stub->StartContainer(&ctx, start, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // A pod whose name holds a newline and spaces (the API server would refuse
  // it; a client of the socket need not ask the API server).
  v1::CreateContainerRequest forged = create;
  forged.mutable_sandbox_config()->mutable_metadata()->set_name("a b\nforged status=OK");
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::CreateContainerResponse r;
    ASSERT_TRUE(stub->CreateContainer(&ctx, forged, &r).ok());
  }
  // The log is written when each call's stream closes, possibly just after
  // its answer: wait for the last line.
  std::string log;
  EXPECT_TRUE(eventually([&] {
    log = slurp(dir_.file("log"));
    return !callLine(log, "CreateContainer", 1).empty();
  })) << log;

  EXPECT_THAT(
      callLine(log, "RunPodSandbox"),
      ::testing::MatchesRegex("RunPodSandbox api=v1 pod=default/train-0 sandbox=7707ee14db15 "
                              "container=- duration=[0-9]+\\.[0-9]{3}ms status=OK"))
      << log;
  const std::string created = callLine(log, "CreateContainer");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      created, m,
      std::regex("CreateContainer api=v1 pod=default/train-0 sandbox=7707ee14db15 "
                 "container=bab486912aa8 duration=([0-9]+)\\.([0-9]{3})ms status=OK")))
      << log;
  const auto logged = std::chrono::milliseconds(std::stoll(m[1].str())) +
                      std::chrono::microseconds(std::stoll(m[2].str()));
  EXPECT_GE(logged, 200ms) << "the runtime alone took 200 ms: " << created;
  EXPECT_LE(logged, create_took) << "longer than the caller waited: " << created;
  EXPECT_THAT(callLine(log, "StartContainer"),
              ::testing::MatchesRegex("StartContainer api=v1 pod=default/train-0 "
                                      "sandbox=7707ee14db15 container=bab486912aa8 "
                                      "duration=[0-9]+\\.[0-9]{3}ms status=NOT_FOUND "
                                      "message=container \"bab4\" not found"))
      << log;
  EXPECT_THAT(callLine(log, "CreateContainer", 1),
              ::testing::MatchesRegex("CreateContainer api=v1 pod=\"default/a b\\\\x0aforged "
                                      "status=OK\" sandbox=7707ee14db15 container=bab486912aa8 "
                                      "duration=[0-9]+\\.[0-9]{3}ms status=OK"))
      << log;
  // Nothing of the name began a line of its own.
  EXPECT_THAT(log, ::testing::Not(HasSubstr("\nforged"))) << log;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
}

// The duration in a call's line is milliseconds with three decimals, the
// microseconds (proxy/call_log.cc, on a logger of the test's own). The clock
// runs while the line is written: the duration logged lies between what had
// passed before and after. Any try shows a wrong microsecond part unless the
// write took about as long as the error it would hide (hundreds of
// microseconds): the tries stop at a quick one.
TEST(CallLogTest, TheDurationIsWholeMillisecondsAndTheirMicroseconds) {
  std::ostringstream out;
  spdlog::logger log("proxy", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  log.set_pattern("%v");
  relay::Call call(1 << 20);
  call.intercepted = findInterceptedMethod("/runtime.v1.RuntimeService/StopContainer");
  ASSERT_TRUE(call.intercepted);
  const std::regex duration("duration=([0-9]+)\\.([0-9]{3})ms status=OK");
  for (int i = 0; i < 1000; ++i) {
    out.str("");
    const auto before = relay::Clock::now();
    call.start = before - 500ms;
    relay::logCall(log, call);
    const auto took = relay::Clock::now() - before;
    const std::string line = out.str();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, duration)) << line;
    const auto logged = std::chrono::milliseconds(std::stoll(m[1].str())) +
                        std::chrono::microseconds(std::stoll(m[2].str()));
    EXPECT_GE(logged, 500ms) << line;
    EXPECT_LE(logged, 500ms + std::chrono::ceil<std::chrono::microseconds>(took)) << line;
    if (took < 100us) break;
  }
}

// Confinement (docs/security.md "Confinement"): the filter, the capabilities and the
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
  return eventually([pid] { return processGone(pid); });
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
    backend_.onUnary("/runtime.v1.RuntimeService/CreateContainer", [](FakeCall&, std::string* out) {
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
    // No wait for the "confined:" line: crihookd accepts only once its
    // filter is on, so even a call made the moment the socket appears runs
    // confined (when it accepted before the filter, one run in three here
    // saw the module's calls succeed).
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

// Out-of-process modules (docs/hooks.md "Hook execution"): the helper is started
// through the spawner of a confined crihookd; a module that segfaults costs
// the call and a restart of its helper, never crihookd.
TEST_F(ConfinedDaemonTest, ASegfaultingIsolatedModuleLeavesTheConfinedDaemonServing) {
  std::ofstream(dir_.file("isolated.toml"))
      << "[hooks]\nhookserver_dir = \"\"\nmodule_host = \"" << MODULE_HOST << "\"\n"
      << "[[hook]]\nname = \"segv\"\nmodule = \"" << VARIANT_DIR
      << "/variant_segv.so\"\nisolation = \"process\"\n";
  Daemon d({"--config", dir_.file("isolated.toml"), "--listen", dir_.file("isolated.sock"),
            "--backend", "unix://" + dir_.file("backend.sock")},
           dir_.file("isolated.log"));
  ASSERT_TRUE(waitForSocket(dir_.file("isolated.sock"))) << slurp(dir_.file("isolated.log"));
  auto createNamed = [&](const std::string& name) {
    v1::CreateContainerRequest req;
    req.set_pod_sandbox_id("sb");
    req.mutable_config()->mutable_metadata()->set_name(name);
    auto stub = v1::RuntimeService::NewStub(unixChannel(dir_.file("isolated.sock")));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::CreateContainerResponse resp;
    return stub->CreateContainer(&ctx, req, &resp);
  };
  grpc::Status s = createNamed("c");
  ASSERT_TRUE(s.ok()) << s.error_message() << slurp(dir_.file("isolated.log"));

  // The segv variant crashes on a request that carries "segv".
  s = createNamed("segv");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("hook segv failed in PreCreateContainer: its helper"));
  EXPECT_TRUE(version(dir_.file("isolated.sock")).ok()) << "crihookd serves on";

  // After the helper's backoff, the next calls work again.
  EXPECT_TRUE(eventually(
      [&] {
        s = createNamed("c");
        return s.ok();
      },
      10s))
      << s.error_message() << slurp(dir_.file("isolated.log"));
  const std::string log = slurp(dir_.file("isolated.log"));
  EXPECT_THAT(log, HasSubstr("module segv: helper pid "));
  EXPECT_THAT(log, HasSubstr("is gone"));
  EXPECT_THAT(log, ::testing::MatchesRegex("(.|\n)*helper pid [0-9]+ serving(.|\n)*helper pid "
                                           "[0-9]+ serving(.|\n)*"));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0);
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
  // Threads started on demand after the drop count too: a large request
  // takes a "decode" thread, its module's stage a "hook-stage" one.
  v1::CreateContainerRequest big;
  big.set_pod_sandbox_id("sb");
  big.mutable_config()->mutable_metadata()->set_name("c");
  for (int i = 0; i < 100; ++i)
    (*big.mutable_config()->mutable_annotations())[cat("a", i)] = std::string(1024, 'x');
  auto stub = v1::RuntimeService::NewStub(unixChannel(dir_.file("caps.sock")));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::CreateContainerResponse resp;
  EXPECT_TRUE(stub->CreateContainer(&ctx, big, &resp).ok());
  const auto threads = threadCaps(d->pid());
  EXPECT_GT(threads.size(), 3u) << "event loops, hook workers, decode and hook-stage threads";
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
