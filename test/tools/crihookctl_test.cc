#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/logging.h"
#include "base/version.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/lifecycle/records.h"
#include "hooks/state_store.h"
#include "hooks/wire.h"
#include "metrics/health.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "tools/crihookctl/cli.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code;
  std::string out, err;
};

Result ctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = ctl::run(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(Crihookctl, UsageErrorsExitTwoWithUsage) {
  EXPECT_EQ(ctl({}).code, 2);
  Result r = ctl({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command frobnicate"));
  EXPECT_THAT(r.err, HasSubstr("usage: crihookctl"));
  EXPECT_EQ(ctl({"--help"}).code, 0);
}

// --version is crihookctl's own and asks no runtime (the version command
// does): an endpoint nothing listens on is never dialled.
TEST(Crihookctl, VersionFlagPrintsItsOwnVersionLine) {
  Result r = ctl({"-r", "unix:///nonexistent/cri.sock", "--version"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, versionLine("crihookctl", version(), commit()) + "\n");
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(ctl({"--help"}).out, HasSubstr("--version"));
}

class CrihookctlAgainstFake : public ::testing::Test {
 protected:
  CrihookctlAgainstFake() : backend_(dir_.file("cri.sock")) {}
  std::vector<std::string> with(std::vector<std::string> args) {
    args.insert(args.begin(), {"-r", "unix://" + dir_.file("cri.sock")});
    return args;
  }
  TempDir dir_;
  FakeCriServer backend_;
};

TEST_F(CrihookctlAgainstFake, RunpReadsCrictlStylePodConfig) {
  backend_.onUnary("/runtime.v1.RuntimeService/RunPodSandbox", [](FakeCall& call,
                                                                  std::string* out) {
    v1::RunPodSandboxRequest req;
    req.ParseFromString(call.request);
    v1::RunPodSandboxResponse resp;
    resp.set_pod_sandbox_id("sb-" + req.config().metadata().namespace_() + "-" +
                            req.config().metadata().name() + "-" + req.config().log_directory());
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  std::ofstream(dir_.file("pod.json"))
      << R"({"metadata":{"name":"nginx-sandbox","namespace":"default","attempt":1,"uid":"u1"},"log_directory":"/tmp","linux":{}})";
  Result r = ctl(with({"runp", dir_.file("pod.json")}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-default-nginx-sandbox-/tmp\n");
}

TEST_F(CrihookctlAgainstFake, BadConfigNamesTheFile) {
  backend_.start();
  std::ofstream(dir_.file("pod.json")) << R"({"metadata":{"name":5, "bogus":1}})";
  Result r = ctl(with({"runp", dir_.file("pod.json")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(dir_.file("pod.json")));
  EXPECT_THAT(r.err, HasSubstr("runtime.v1.PodSandboxConfig"));
}

// A FIFO or a device is refused at once, not read (a reader never blocks).
TEST_F(CrihookctlAgainstFake, AConfigThatIsAFifoIsRefusedNotWaitedOn) {
  backend_.start();
  ASSERT_EQ(::mkfifo(dir_.file("pod.fifo").c_str(), 0600), 0);
  Result r = ctl(with({"runp", dir_.file("pod.fifo")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read " + dir_.file("pod.fifo") + ": a FIFO"));
}

TEST_F(CrihookctlAgainstFake, ExecExitsWithTheCommandsCodeAndRuntimeErrorsExitOne) {
  backend_.onUnary("/runtime.v1.RuntimeService/ExecSync", [](FakeCall& call, std::string* out) {
    v1::ExecSyncRequest req;
    req.ParseFromString(call.request);
    v1::ExecSyncResponse resp;
    resp.set_stdout(req.container_id() + ":" + req.cmd(0));
    resp.set_stderr("warn");
    resp.set_exit_code(3);
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  Result r = ctl(with({"exec", "c1", "echo", "hi"}));
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "c1:echo");
  EXPECT_EQ(r.err, "warn");
  r = ctl(with({"start", "c1"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("StartContainer: Unimplemented"));
}

TEST_F(CrihookctlAgainstFake, PsShowsContainersAsATable) {
  backend_.onUnary(
      "/runtime.v1.RuntimeService/ListContainers", [](FakeCall& call, std::string* out) {
        v1::ListContainersRequest req;
        req.ParseFromString(call.request);
        v1::ListContainersResponse resp;
        auto* c = resp.add_containers();
        c->set_id("0123456789abcdef0123");
        c->set_pod_sandbox_id("fedcba9876543210");
        c->mutable_metadata()->set_name(req.filter().has_state() ? "running-only" : "all");
        c->set_state(v1::CONTAINER_RUNNING);
        *out = resp.SerializeAsString();
        return grpc::Status::OK;
      });
  backend_.start();
  Result r = ctl(with({"ps"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CONTAINER"));
  EXPECT_THAT(r.out, HasSubstr("0123456789abc "));
  EXPECT_THAT(r.out, HasSubstr("running-only"));
  r = ctl(with({"ps", "-a", "-q"}));
  EXPECT_EQ(r.out, "0123456789abcdef0123\n");
  r = ctl(with({"-o", "json", "ps", "-a"}));
  EXPECT_THAT(r.out, HasSubstr("\"podSandboxId\": \"fedcba9876543210\""));
}

// Stores pod ml/train-0 (sandbox sb-1) and returns the record of its
// container "trainer" (c0ffee1234) for the test to fill in and store.
hook::v1::ContainerRecord trainerOfTrain0(StateStore& state) {
  hook::v1::PodRecord pod;
  pod.set_sandbox_id("sb-1");
  pod.mutable_config()->mutable_metadata()->set_name("train-0");
  pod.mutable_config()->mutable_metadata()->set_namespace_("ml");
  state.putPod(pod);
  hook::v1::ContainerRecord c;
  c.set_id("c0ffee1234");
  c.set_sandbox_id("sb-1");
  c.mutable_requested()->mutable_metadata()->set_name("trainer");
  return c;
}

TEST(CrihookctlExplain, ShowsWhatKubeletSentEachHooksChangeAndWhatTheRuntimeGot) {
  TempDir dir;
  {
    StateStore state(dir.path(), nullptr);
    ASSERT_TRUE(state.load().ok());
    hook::v1::ContainerRecord c = trainerOfTrain0(state);
    auto* env = c.mutable_requested()->add_envs();
    env->set_key("PATH");
    env->set_value("/bin");
    c.mutable_requested()->mutable_linux()->mutable_resources()->set_cpuset_cpus("0-63");
    *c.mutable_sent() = c.requested();
    auto* gpu = c.mutable_sent()->add_envs();
    gpu->set_key("NVIDIA_VISIBLE_DEVICES");
    gpu->set_value("GPU-1");
    c.mutable_sent()->mutable_linux()->mutable_resources()->set_cpuset_cpus("8-15");
    Adjustment a;
    a.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-1"}};
    a.cpuset_cpus = "8-15";
    MergedAdjustment merged;
    ASSERT_TRUE(merged.add("gpu", {.env = a.env}).ok());
    ASSERT_TRUE(merged.add("numa", {.cpuset_cpus = a.cpuset_cpus}).ok());
    *c.add_decisions() = stageDecision("PreCreateContainer", {"gpu", "numa"}, merged);
    c.mutable_resources()->set_cpuset_cpus("8-15");
    state.putContainer(c);
  }
  std::ostringstream out, err;
  ASSERT_EQ(ctl::run({"explain", "--state-dir", dir.path(), "c0ffee"}, out, err), 0) << err.str();
  const std::string text = out.str();
  EXPECT_THAT(text,
              HasSubstr("container c0ffee1234 (trainer)\npod       ml/train-0 (sandbox sb-1)"));
  EXPECT_THAT(text, HasSubstr("kubelet sent:\n  env:         PATH=/bin\n"));
  EXPECT_THAT(text, HasSubstr("PreCreateContainer at "));
  EXPECT_THAT(text, HasSubstr("hooks run: gpu, numa"));
  EXPECT_THAT(text, ::testing::ContainsRegex("set env NVIDIA_VISIBLE_DEVICES=GPU-1 +by gpu"));
  EXPECT_THAT(text, ::testing::ContainsRegex("cpuset_cpus 8-15 +by numa"));
  EXPECT_THAT(
      text,
      HasSubstr("sent to the runtime:\n  env:         PATH=/bin, NVIDIA_VISIBLE_DEVICES=GPU-1"));
  EXPECT_THAT(text, HasSubstr("kept through UpdateContainerResources: cpuset_cpus=8-15"));

  std::ostringstream json;
  ASSERT_EQ(ctl::run({"-o", "json", "explain", "--state-dir", dir.path(), "c0ffee1234"}, json, err),
            0);
  EXPECT_THAT(json.str(), HasSubstr("\"owners\""));

  std::ostringstream none, why;
  EXPECT_EQ(ctl::run({"explain", "--state-dir", dir.path(), "beef"}, none, why), 1);
  EXPECT_THAT(why.str(), HasSubstr("no container beef in " + dir.path()));
}

// make-fixtures.sh's machines (test/support/fixture_trees.h).
class CrihookctlTopology : public ::testing::Test {};

TEST_F(CrihookctlTopology, PrintsTheFixtureAsTreeJsonAndDeviceObject) {
  const std::string root = fixtureTree("dgx");
  Result tree = ctl({"topology", "--root", root});
  ASSERT_EQ(tree.code, 0) << tree.err;
  EXPECT_THAT(tree.out, HasSubstr("socket 1\n  NUMA node 1: CPUs 16-31,48-63, 256 GiB\n"
                                  "    PCIe switch 0000:98:00.0\n"));
  Result json = ctl({"topology", "--root", root, "--output", "json"});
  ASSERT_EQ(json.code, 0);
  EXPECT_EQ(nlohmann::json::parse(json.out)["gpus"].size(), 8u);
  Result crd = ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json",
                    "--node", "gpu-node-7", "--pcie-id", "root-complex"});
  ASSERT_EQ(crd.code, 0) << crd.err;
  auto device = nlohmann::json::parse(crd.out);
  EXPECT_EQ(device["metadata"]["name"], "gpu-node-7");
  EXPECT_EQ(device["spec"]["devices"][0]["topology"]["pcieID"], "pci0000:17");
  // What the object lacks is said on stderr: no NVML for a fixture's GPUs.
  EXPECT_THAT(crd.err, HasSubstr("warning: NVML: not asked about a root other than /"));
  EXPECT_THAT(crd.err, HasSubstr("the Device report has no koordinator.sh/gpu-memory"));
  EXPECT_THAT(crd.err, HasSubstr("WARNING: 8 of the 8 GPU(s) in this report have no "
                                 "koordinator.sh/gpu-memory. Do not publish it on a node whose "
                                 "GPUs are shared"));
  Result sw = ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json",
                   "--pcie-id", "switch"});
  ASSERT_EQ(sw.code, 0) << sw.err;
  EXPECT_EQ(nlohmann::json::parse(sw.out)["spec"]["devices"][0]["topology"]["pcieID"],
            "0000:18:00.0");
  Result by_default =
      ctl({"topology", "--root", root, "--output", "device-crd", "--format", "json"});
  EXPECT_EQ(nlohmann::json::parse(by_default.out)["spec"]["devices"][0]["topology"]["pcieID"],
            "pci0000:17");
  Result yaml = ctl({"topology", "--root", root, "--output", "device-crd", "--node", "n"});
  EXPECT_THAT(yaml.out, HasSubstr("kind: \"Device\"\n"));
  Result bad = ctl({"topology", "--output", "xml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err,
              HasSubstr("--output must be tree, json, device-crd, matrix or dot, got \"xml\""));
}

// The matrix and the picture (topology/views.h; cell by cell in
// test/topology/views_test.cc): what the command prints.
TEST_F(CrihookctlTopology, PrintsTheMatrixAndTheDotGraph) {
  const std::string root = fixtureTree("dgx");
  Result matrix = ctl({"topology", "--root", root, "--output", "matrix"});
  ASSERT_EQ(matrix.code, 0) << matrix.err;
  EXPECT_THAT(matrix.out, ::testing::StartsWith("      GPU0  GPU1  GPU2"));
  EXPECT_THAT(matrix.out, ::testing::ContainsRegex("\nGPU0 +X +PIX +NODE +NODE +SYS "));
  EXPECT_THAT(matrix.out, ::testing::ContainsRegex("\nGPU7 .* 16-31,48-63 +1\\*\n"));
  EXPECT_THAT(matrix.out, HasSubstr("NIC Legend:\n\n  NIC0: mlx5_0 0000:1c:00.0\n"));
  Result dot = ctl({"topology", "--root", root, "--output", "dot"});
  ASSERT_EQ(dot.code, 0) << dot.err;
  EXPECT_THAT(dot.out, ::testing::StartsWith("digraph topology {\n"));
  EXPECT_THAT(dot.out, HasSubstr("label=\"PCIe switch\\n0000:18:00.0\""));
  EXPECT_THAT(dot.err, HasSubstr("warning: NVML: not asked about a root other than /"));
}

// Found by fuzz/fuzz_topology: a byte that is not UTF-8 in what a driver
// wrote (here a GPU's model name) made `topology` die on an exception.
TEST_F(CrihookctlTopology, TextThatIsNotUtf8IsReplacedNotFatal) {
  TempDir copy;  // the shared tree stays as the script made it
  std::filesystem::copy(
      fixtureTree("workstation"), copy.path(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const std::string root = copy.path();
  std::string info;
  for (const auto& e : std::filesystem::directory_iterator(root + "/proc/driver/nvidia/gpus")) {
    info = e.path().string() + "/information";
    break;
  }
  ASSERT_FALSE(info.empty());
  std::ofstream(info, std::ios::app) << "Model: \xff\xfeGPU\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"topology", "--root", root, "--output", "json"},
        std::vector<std::string>{"topology", "--root", root, "--output", "device-crd", "--format",
                                 "json", "--node", "n"},
        std::vector<std::string>{"topology", "--root", root, "--output", "device-crd", "--node",
                                 "n"}}) {
    Result r = ctl(args);
    EXPECT_EQ(r.code, 0) << args[3] << ": " << r.err;
  }
  EXPECT_THAT(ctl({"topology", "--root", root, "--output", "json"}).out,
              HasSubstr("\xef\xbf\xbd\xef\xbf\xbdGPU"))
      << "the model, with U+FFFD for each byte that is not UTF-8";
}

// explain and devices say where a pod's devices and CPUs sit, so a wrong
// allocation shows: here on the dgx fixture, GPU 0 (switch 0000:18:00.0,
// NUMA 0) with mlx5_1 (another switch and root complex of NUMA 0) and CPUs
// 16-19 of NUMA 1.
TEST_F(CrihookctlTopology, ExplainAndDevicesPlaceThePodOnTheMachine) {
  const std::string root = fixtureTree("dgx");
  TempDir state_dir;
  {
    StateStore state(state_dir.path(), nullptr);
    ASSERT_TRUE(state.load().ok());
    hook::v1::ContainerRecord c = trainerOfTrain0(state);
    *c.mutable_sent() = c.requested();
    for (const char* node : {"nvidia0", "nvidiactl", "infiniband/rdma_cm", "infiniband/uverbs1"}) {
      auto* d = c.mutable_sent()->add_devices();
      d->set_container_path(std::string("/dev/") + node);
      d->set_host_path(std::string("/dev/") + node);
    }
    c.mutable_sent()->mutable_linux()->mutable_resources()->set_cpuset_cpus("16-19");
    state.putContainer(c);
  }
  Result explain = ctl({"explain", "--state-dir", state_dir.path(), "--root", root, "c0ffee"});
  ASSERT_EQ(explain.code, 0) << explain.err;
  EXPECT_THAT(explain.out,
              HasSubstr("\non the machine (" + root +
                        "):\n"
                        "  GPU0 (minor 0, 0000:1a:00.0): switch 0000:18:00.0, root complex "
                        "pci0000:17, NUMA 0, socket 0\n"
                        "  NIC1 mlx5_1 (0000:3c:00.0): switch 0000:38:00.0, root complex "
                        "pci0000:37, NUMA 0, socket 0\n"
                        "  cpus 16-19 on NUMA 1 (socket 1)\n"
                        "  farthest link between its devices: NODE (GPU0 - NIC1)\n"
                        "  cpus 16-19 off its devices' NUMA node 0\n"));

  TempDir records_dir;
  DeviceRecord r;
  r.key = {"uid-a", 0};
  r.pod = {"ml", "train-0", "uid-a"};
  r.phase = DevicePhase::kReady;
  r.devices = {{"gpu", 0, 7, "", "GPU-7", "0000:bb:00.0", "", "nvidia7"},
               {"rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", ""}};
  ASSERT_TRUE(DeviceRecordDir(records_dir.path()).save(r).ok());
  Result devices = ctl({"devices", "--state-dir", records_dir.path(), "--root", root});
  ASSERT_EQ(devices.code, 0) << devices.err;
  EXPECT_THAT(devices.out,
              HasSubstr("\nml/train-0 (attempt 0) on the machine (" + root +
                        "):\n"
                        "  GPU7 (minor 7, 0000:bb:00.0): switch 0000:b8:00.0, root complex "
                        "pci0000:b7, NUMA 1 (numa_node -1: of bridge 0000:b8:00.0), socket 1\n"
                        "  NIC6 mlx5_6 (0000:1c:00.3, a VF): switch 0000:18:00.0, root complex "
                        "pci0000:17, NUMA 0, socket 0\n"
                        "  farthest link between its devices: SYS (GPU7 - NIC6)\n"));
  EXPECT_THAT(devices.out, Not(HasSubstr("cpus")));
}

TEST(CrihookctlDevices, ListsEachSandboxsDevicesAndWhatItOwes) {
  TempDir dir;
  DeviceRecordDir records(dir.path());
  DeviceRecord ready;
  ready.key = {"uid-a", 0};
  ready.pod = {"ml", "train-0", "uid-a"};
  ready.sandbox_id = "5f2c0ffee0123456789";
  ready.phase = DevicePhase::kReady;
  ready.devices = {{"gpu", 0, 0, "", "GPU-0", "0000:1a:00.0", "", "nvidia0"},
                   {"rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", ""}};
  ready.touched = 2;
  DeviceRecord owed;
  owed.key = {"uid-b", 1};
  owed.pod = {"ml", "eval-0", "uid-b"};
  owed.phase = DevicePhase::kCleanupPending;
  owed.devices = {{"gpu", 0, 3, "", "GPU-3", "", "", "nvidia3"}};
  owed.touched = 1;
  owed.cleanup_failures = 4;
  owed.last_error = "cleanup of gpu 0: exited with status 3: busy";
  ASSERT_TRUE(records.save(ready).ok());
  ASSERT_TRUE(records.save(owed).ok());
  std::ofstream(dir.file("uid-c_0.json")) << "{";

  Result r = ctl({"devices", "--state-dir", dir.path()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("POD +ATTEMPT +SANDBOX +PHASE +DEVICES +FAILURES"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "ml/train-0 +0 +5f2c0ffee0123 +ready +gpu0,rdma1\\(mlx5_6\\) +0"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "ml/eval-0 +1 +cleanup-pending +gpu3 +4 +cleanup of gpu 0: exited"));
  EXPECT_THAT(r.out, HasSubstr("warning: device record " + dir.file("uid-c_0.json")));
  // A reader leaves a broken record where it is: only crihookd moves it aside.
  EXPECT_TRUE(std::ifstream(dir.file("uid-c_0.json")).good());

  Result json = ctl({"-o", "json", "devices", "--state-dir", dir.path()});
  auto parsed = nlohmann::json::parse(json.out.substr(0, json.out.find("warning:")));
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0]["phase"], "ready");
  EXPECT_EQ(parsed[1]["cleanup_failures"], 4);

  EXPECT_EQ(ctl({"devices", "--state-dir", dir.file("absent")}).code, 1);
}

// A metrics endpoint as crihookd serves it, with numbers the test sets.
class CrihookctlStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.gauge("crihook_build_info", "v", {"version", "commit"})
        .with({"9.9.9", "abcdef012345-dirty"})
        .set(1);
    registry_.gauge("crihook_process_start_time_seconds", "t")
        .with({})
        .set(std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count() -
             3725);
    auto& calls = registry_.counter("crihook_cri_calls_total", "c", {"service", "method", "code"});
    calls.with({"runtime.v1.RuntimeService", "RunPodSandbox", "OK"}).inc(7);
    calls.with({"runtime.v1.RuntimeService", "RunPodSandbox", "FAILED_PRECONDITION"}).inc(2);
    calls.with({"runtime.v1.RuntimeService", "Version", "OK"}).inc(40);
    registry_.counter("crihook_hook_calls_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(9);
    registry_.counter("crihook_hook_failures_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(3);
    registry_.counter("crihook_hook_timeouts_total", "h", {"hook", "stage"})
        .with({"gpu", "PreCreateContainer"})
        .inc(1);
    registry_.gauge("crihook_device_cleanups_pending", "p", {"hook"}).with({"devices"}).set(2);
    metrics::HttpEndpointOptions o;
    o.unix_path = dir_.file("metrics.sock");
    endpoint_ = std::make_unique<metrics::HttpEndpoint>(
        o, metrics::routes(registry_, health_, ready_, "crihookd test"), logger("metrics"));
    ASSERT_TRUE(endpoint_->start().ok());
  }

  TempDir dir_;
  metrics::Registry registry_;
  std::atomic<bool> backend_up_{true};
  metrics::BackendHealth health_{
      [this](std::chrono::milliseconds) {
        return backend_up_ ? absl::OkStatus()
                           : absl::UnavailableError("runtime unix:///x did not answer Version");
      },
      std::chrono::seconds(1), std::chrono::milliseconds(0)};
  metrics::Readiness ready_;
  std::unique_ptr<metrics::HttpEndpoint> endpoint_;
};

TEST_F(CrihookctlStatus, SummarisesHealthReadinessCallsHooksAndCleanups) {
  ready_.set(true, "serving");
  Result r = ctl({"status", "--metrics", dir_.file("metrics.sock")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("crihookd 9.9.9 (git abcdef012345-dirty) at "));
  EXPECT_THAT(r.out, HasSubstr("up 1h02m"));
  EXPECT_THAT(r.out, HasSubstr("backend:  healthy"));
  EXPECT_THAT(r.out, HasSubstr("ready:    yes"));
  EXPECT_THAT(r.out, HasSubstr("pending device cleanups 2"));
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex(
                  "runtime.v1.RuntimeService/RunPodSandbox +9 +2  \\(FAILED_PRECONDITION 2\\)"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("gpu +9 +0 +3 +1"));
}

TEST_F(CrihookctlStatus, AnUnhealthyBackendOrNotReadyExitsOneWithTheReason) {
  ready_.set(false, "stopping");
  backend_up_ = false;
  Result r = ctl({"status", "--metrics", "unix://" + dir_.file("metrics.sock")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("UNHEALTHY: runtime unix:///x did not answer Version"));
  EXPECT_THAT(r.out, HasSubstr("ready:    NO: not ready: stopping"));
}

TEST_F(CrihookctlStatus, JsonCarriesTheSameNumbers) {
  ready_.set(true, "serving");
  Result r = ctl({"-o", "json", "status", "--metrics", dir_.file("metrics.sock")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["version"], "9.9.9");
  EXPECT_EQ(j["commit"], "abcdef012345-dirty");
  EXPECT_GE(j["uptime_seconds"].get<int64_t>(), 3725);
  EXPECT_EQ(j["backend"]["healthy"], true);
  EXPECT_EQ(j["pending_cleanups"], 2);
  bool found = false;
  for (const auto& m : j["methods"]) {
    if (m["method"] == "runtime.v1.RuntimeService/RunPodSandbox") {
      found = true;
      EXPECT_EQ(m["calls"], 9);
      EXPECT_EQ(m["errors"], 2);
      EXPECT_EQ(m["by_code"]["FAILED_PRECONDITION"], 2);
    }
  }
  EXPECT_TRUE(found) << r.out;
  ASSERT_EQ(j["hooks"].size(), 1u);
  EXPECT_EQ(j["hooks"][0]["failures"], 3);
  EXPECT_EQ(j["hooks"][0]["timeouts"], 1);
}

TEST_F(CrihookctlStatus, TheEndpointComesFromTheConfigFileAndUnreachableExitsOne) {
  ready_.set(true, "serving");
  std::ofstream(dir_.file("c.toml"))
      << "[server]\nlisten = \"" << dir_.file("crihook.sock") << "\"\n";
  Result r = ctl({"status", "--config", dir_.file("c.toml")});
  EXPECT_EQ(r.code, 0) << r.err;  // metrics.sock beside the CRI socket
  Result gone = ctl({"-t", "2", "status", "--metrics", dir_.file("nothing.sock")});
  EXPECT_EQ(gone.code, 1);
  EXPECT_THAT(gone.err, HasSubstr("metrics endpoint " + dir_.file("nothing.sock")));
}

}  // namespace
}  // namespace crihook::testing
