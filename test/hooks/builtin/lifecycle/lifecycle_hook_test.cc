// The device-lifecycle hook (lifecycle_hook.cc) as kubelet's calls and the
// runtime see it, on the DGX-shaped fixture topology: what runs, in which
// order, and what is owed after failures and restarts. The actions are a
// script that appends its arguments to a log (and fails on request), so the
// log is the order of events.

#include "hooks/builtin/lifecycle/lifecycle_hook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/logging.h"
#include "base/text.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/builtin/lifecycle/actions.h"
#include "hooks/builtin/lifecycle/records.h"
#include "hooks/chain.h"
#include "hooks/process_env.h"
#include "hooks/registry.h"
#include "hooks/runtime_sandboxes.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fault_env.h"
#include "test/support/fixture_trees.h"
#include "topology/topology.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
namespace v1 = ::runtime::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Clock = std::chrono::steady_clock;

constexpr char kGpu0[] = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
constexpr char kTwoGpusAndAVf[] =
    R"({"gpu":[{"minor":0},{"minor":1}],)"
    R"("rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1c:00.3"}]}}]})";

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

class LifecycleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    topology_ = std::make_shared<const topology::Snapshot>(
        topology::discover(topology::SysRoot(fixtureTree("dgx"))));
  }
  void SetUp() override {
    // act.sh STAGE TYPE MINOR ...: logs its arguments; fails (exit 3) while
    // fail-STAGE-TYPE-MINOR holds a count above 0; while gate-STAGE-TYPE-MINOR
    // is a FIFO, logs "... waits" and waits for a line written to it (a slow
    // action, ended by the test) before it logs its arguments. Each run first
    // notes when it started (wall clock, ms) in `times`.
    std::ofstream(dir_.file("act.sh"))
        << "#!/bin/sh\n"
        << "d=" << dir_.path() << "\n"
        << "date +%s%3N >> \"$d/times\"\n"
        << "f=\"$d/fail-$1-$2-$3\"\n"
        << "if [ -e \"$f\" ] && [ \"$(cat \"$f\")\" -gt 0 ]; then\n"
        << "  echo $(( $(cat \"$f\") - 1 )) > \"$f\"; echo \"$* FAILED\" >> \"$d/log\"\n"
        << "  echo \"device busy\"; exit 3\n"
        << "fi\n"
        << "g=\"$d/gate-$1-$2-$3\"\n"
        << "if [ -p \"$g\" ]; then echo \"$* waits\" >> \"$d/log\"; read x < \"$g\"; fi\n"
        << "echo \"$*\" >> \"$d/log\"\n";
    std::filesystem::permissions(dir_.file("act.sh"), std::filesystem::perms::owner_all);
  }

  std::string settings(const std::string& extra = "") const {
    const std::string act = dir_.file("act.sh");
    auto actions = [&](const char* type, const char* stage, const char* id) {
      return cat(R"({"command": [")", act, R"(", ")", stage, R"(", "{type}", "{minor}", ")", id,
                 R"(", "{pod_name}"]})");
    };
    return cat(R"({"gpu": {"init": [)", actions("gpu", "init", "{uuid}"), R"(], "cleanup": [)",
               actions("gpu", "cleanup", "{uuid}"), R"(]}, "rdma": {"init": [)",
               actions("rdma", "init", "{name}"), R"(], "cleanup": [)",
               actions("rdma", "cleanup", "{name}"), R"(]}, "retry_initial": "50ms", )",
               R"("retry_max": "200ms")", extra, "}");
  }

  std::shared_ptr<Hook> make(const std::string& s = "", Env* env = nullptr) {
    BuiltinContext context{dir_.file("state"), "/"};
    context.env = env;
    auto h =
        builtinHooks().create("device-lifecycle", "devices", s.empty() ? settings() : s, context);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : nullptr;
  }

  struct Sandbox {
    v1::RunPodSandboxRequest run;
    std::shared_ptr<hv1::PodRecord> pod = std::make_shared<hv1::PodRecord>();
    std::string id;
  };
  static Sandbox sandbox(const std::string& name, uint32_t attempt, const std::string& alloc) {
    Sandbox s;
    auto* meta = s.run.mutable_config()->mutable_metadata();
    meta->set_name(name);
    meta->set_namespace_("ml");
    meta->set_uid("uid-" + name);
    meta->set_attempt(attempt);
    if (!alloc.empty())
      (*s.run.mutable_config()
            ->mutable_annotations())["scheduling.koordinator.sh/device-allocated"] = alloc;
    *s.pod->mutable_config() = s.run.config();
    s.id = cat("sb-", name, "-", attempt);
    return s;
  }

  HookDecision runPre(Hook& h, const Sandbox& s) {
    HookInput in;
    in.method = LifecycleMethod::kRunPodSandbox;
    in.phase = Phase::kPre;
    in.request = &s.run;
    in.pod = s.pod;
    in.topology = topology_;
    in.deadline = Clock::now() + std::chrono::seconds(20);
    return h.run(in);
  }
  void runPost(Hook& h, const Sandbox& s, absl::Status backend = absl::OkStatus()) {
    v1::RunPodSandboxResponse resp;
    resp.set_pod_sandbox_id(s.id);
    HookInput in;
    in.method = LifecycleMethod::kRunPodSandbox;
    in.phase = Phase::kPost;
    in.request = &s.run;
    in.pod = s.pod;
    in.topology = topology_;
    in.backend_status = backend;
    if (backend.ok()) in.response = &resp;
    h.run(in);
  }
  void stopOrRemove(Hook& h, const Sandbox& s, LifecycleMethod m, bool pod_known = true) {
    v1::StopPodSandboxRequest stop;
    v1::RemovePodSandboxRequest remove;
    stop.set_pod_sandbox_id(s.id);
    remove.set_pod_sandbox_id(s.id);
    HookInput in;
    in.method = m;
    in.phase = Phase::kPost;
    in.request = m == LifecycleMethod::kStopPodSandbox
                     ? static_cast<const google::protobuf::Message*>(&stop)
                     : static_cast<const google::protobuf::Message*>(&remove);
    if (pod_known) in.pod = s.pod;
    in.topology = topology_;
    in.deadline = Clock::now() + std::chrono::seconds(20);
    h.run(in);
  }
  std::vector<std::string> log() const { return lines(dir_.file("log")); }
  void clearLog() {
    std::filesystem::remove(dir_.file("log"));
    std::filesystem::remove(dir_.file("times"));
  }
  size_t records() const {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_.file("state/devices"), ec))
      n += e.path().extension() == ".json";
    return n;
  }
  // Waits for the hook's retry thread to have logged `n` lines.
  bool waitForLog(size_t n) const {
    return eventually([&] { return log().size() >= n; }, std::chrono::seconds(10));
  }
  // When each action started (act.sh's `times`), in order.
  std::vector<std::chrono::milliseconds> actionTimes() const {
    std::vector<std::chrono::milliseconds> out;
    for (const std::string& l : lines(dir_.file("times")))
      out.push_back(std::chrono::milliseconds(std::stoll(l)));
    return out;
  }
  // Waits for the sandbox's record to reach `phase` ("gone": no record).
  bool waitForPhase(const Sandbox& s, const std::string& phase) const {
    return eventually([&] { return phaseOf(s) == phase; }, std::chrono::seconds(10));
  }
  void failNext(const std::string& what, int times) {
    std::ofstream(dir_.file("fail-" + what)) << times;
  }
  // The phase a sandbox's record holds on disk ("ready", "cleanup-pending",
  // "cleaned", ...); "gone" when there is no record. Only a cleanup-pending
  // record is ever cleaned up by the retry thread: a record in any other
  // phase proves no cleanup of it is under way or scheduled.
  std::string phaseOf(const Sandbox& s) const {
    const std::string file = dir_.file(cat("state/devices/", s.run.config().metadata().uid(), "_",
                                           s.run.config().metadata().attempt(), ".json"));
    // Records are replaced whole (rename), so one that reads empty is gone,
    // or went between the check and the read as the retry thread removed it.
    const std::string text = readFile(file);
    if (text.empty()) return "gone";
    return nlohmann::json::parse(text).at("phase").get<std::string>();
  }
  // The log once every cleanup retry scheduled so far has run, without the
  // probe's lines. The probe is a sandbox whose cleanup fails three times, so
  // its last retry waits retry_max (50, 100, then 200 ms): the hook's one
  // retry thread takes the earliest due first, so every retry scheduled
  // before the probe (each at most retry_max away) runs before the probe's
  // last one, which is the event waited for. Empty on timeout.
  std::optional<std::vector<std::string>> logAfterPendingRetries(Hook& h) {
    Sandbox probe = sandbox("probe-0", 0, R"({"gpu":[{"minor":7}]})");
    if (runPre(h, probe).kind != HookDecision::Kind::kContinue) return std::nullopt;
    runPost(h, probe);
    failNext("cleanup-gpu-7", 3);
    stopOrRemove(h, probe, LifecycleMethod::kRemovePodSandbox);
    const std::string done = "cleanup gpu 7 GPU-00000007-aaaa-bbbb-cccc-dddddddddddd probe-0";
    std::vector<std::string> l;
    if (!eventually(
            [&] {
              l = log();
              return std::find(l.begin(), l.end(), done) != l.end();
            },
            std::chrono::seconds(10)))
      return std::nullopt;
    std::erase_if(l, [](const std::string& x) { return x.find("probe-0") != std::string::npos; });
    return l;
  }

  TempDir dir_;
  static inline std::shared_ptr<const topology::Snapshot> topology_;
};

TEST_F(LifecycleTest, InitBeforeTheSandboxCleanupAfterItStopsEachOnce) {
  auto hook = make();
  // Init before the runtime makes the sandbox; cleanup only after the runtime
  // stopped or removed it (never while its containers may still run).
  EXPECT_TRUE(hook->subscribes(LifecycleMethod::kRunPodSandbox, Phase::kPre));
  for (LifecycleMethod m : {LifecycleMethod::kStopPodSandbox, LifecycleMethod::kRemovePodSandbox}) {
    EXPECT_TRUE(hook->subscribes(m, Phase::kPost));
    EXPECT_FALSE(hook->subscribes(m, Phase::kPre));
  }
  Sandbox s = sandbox("train-0", 0, kTwoGpusAndAVf);
  HookDecision d = runPre(*hook, s);
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(log(), ElementsAre(cat("init gpu 0 ", kGpu0, " train-0"),
                                 "init gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0",
                                 "init rdma 1 mlx5_6 train-0"));
  EXPECT_EQ(records(), 1u);
  runPost(*hook, s);
  // kubelet retrying the same sandbox: nothing is initialised twice.
  EXPECT_EQ(runPre(*hook, s).kind, HookDecision::Kind::kContinue);
  EXPECT_EQ(log().size(), 3u);
  clearLog();
  stopOrRemove(*hook, s, LifecycleMethod::kStopPodSandbox);
  EXPECT_THAT(log(), ElementsAre("cleanup rdma 1 mlx5_6 train-0",
                                 "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0",
                                 cat("cleanup gpu 0 ", kGpu0, " train-0")));
  stopOrRemove(*hook, s, LifecycleMethod::kStopPodSandbox);  // kubelet stops again
  stopOrRemove(*hook, s, LifecycleMethod::kRemovePodSandbox);
  EXPECT_EQ(log().size(), 3u);
  EXPECT_EQ(records(), 0u);
  // A pod without devices of the configured types: nothing runs, nothing is kept.
  EXPECT_EQ(runPre(*hook, sandbox("web-0", 0, "")).kind, HookDecision::Kind::kContinue);
  EXPECT_EQ(runPre(*hook, sandbox("fpga-0", 0, R"({"fpga":[{"minor":0}]})")).kind,
            HookDecision::Kind::kContinue);
  EXPECT_EQ(log().size(), 3u);
  EXPECT_EQ(records(), 0u);
  // A sandbox the hook never saw, its pod unknown too (made before crihookd
  // ran): stopping and removing it cleans nothing and keeps nothing.
  const Sandbox stranger = sandbox("stranger-0", 0, kTwoGpusAndAVf);
  stopOrRemove(*hook, stranger, LifecycleMethod::kStopPodSandbox, /*pod_known=*/false);
  stopOrRemove(*hook, stranger, LifecycleMethod::kRemovePodSandbox, /*pod_known=*/false);
  EXPECT_EQ(log().size(), 3u);
  EXPECT_EQ(records(), 0u);
}

// A device type with cleanup actions and no init ones (a VF reset after
// each pod, nothing before it): its devices, last in the pod's list, are
// cleaned up like the others, though nothing ran for them at the init.
TEST_F(LifecycleTest, ADeviceWithOnlyCleanupActionsIsCleanedUpToo) {
  const std::string act = dir_.file("act.sh");
  auto action = [&](const char* stage, const char* id) {
    return cat(R"([{"command": [")", act, R"(", ")", stage, R"(", "{type}", "{minor}", ")", id,
               R"(", "{pod_name}"]}])");
  };
  auto hook = make(cat(R"({"gpu": {"init": )", action("init", "{uuid}"), R"(, "cleanup": )",
                       action("cleanup", "{uuid}"), R"(}, "rdma": {"cleanup": )",
                       action("cleanup", "{name}"), "}}"));
  ASSERT_NE(hook, nullptr);
  Sandbox s = sandbox("train-0", 0, kTwoGpusAndAVf);
  ASSERT_EQ(runPre(*hook, s).kind, HookDecision::Kind::kContinue);
  runPost(*hook, s);
  EXPECT_EQ(log().size(), 2u);  // the two GPUs' inits
  clearLog();
  stopOrRemove(*hook, s, LifecycleMethod::kStopPodSandbox);
  EXPECT_THAT(log(), ElementsAre("cleanup rdma 1 mlx5_6 train-0",
                                 "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0",
                                 cat("cleanup gpu 0 ", kGpu0, " train-0")));
}

// The annotation as Koordinator's scheduler writes it (Go's encoding/json of
// apiext.DeviceAllocations: minor, resources, id, extension; koordlet's VF
// minor -1, or none for a 0): VFs found by busID, a PF without an id (before
// v1.6) by koordlet's minor, another vendor's GPU skipped.
TEST_F(LifecycleTest, KoordinatorsAnnotationIsResolvedByBusIdAndIdOrKoordletsMinor) {
  auto hook = make();
  Sandbox a = sandbox(
      "train-a", 0,
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},)"
      R"({"minor":1,"resources":{"koordinator.sh/gpu-core":"100"},"id":"Ascend910-1"}],)"
      R"("rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}}]})");
  Sandbox b = sandbox(
      "train-b", 0,
      R"({"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:1c:00.2"}]}},)"
      R"({"minor":2,"resources":{"koordinator.sh/rdma":"100"}}]})");
  for (Sandbox* s : {&a, &b}) {
    HookDecision d = runPre(*hook, *s);
    ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
    runPost(*hook, *s);
  }
  // {minor} of a VF is its virtfn number under the PF.
  EXPECT_THAT(log(),
              ElementsAre(cat("init gpu 0 ", kGpu0, " train-a"), "init rdma 1 mlx5_6 train-a",
                          "init rdma 0 mlx5_5 train-b", "init rdma 2 mlx5_2 train-b"));
  clearLog();
  stopOrRemove(*hook, a, LifecycleMethod::kStopPodSandbox);
  EXPECT_THAT(log(), ElementsAre("cleanup rdma 1 mlx5_6 train-a",
                                 cat("cleanup gpu 0 ", kGpu0, " train-a")));

  // A VF that is not the allocated PF's: refused before anything runs.
  clearLog();
  HookDecision d = runPre(
      *hook,
      sandbox(
          "train-c", 0,
          R"({"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:3c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.2"}]}}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-c: "
            "rdma[0].extension.vfs[0].busID: 0000:1c:00.2 is not a VF of mlx5_1 (0000:3c:00.0)");
  EXPECT_THAT(log(), IsEmpty());
  // VFs of a GPU (the scheduler gives any type VFs): none of them can be
  // checked to be the GPU's, so none is acted on.
  d = runPre(*hook,
             sandbox("train-v", 0,
                     R"({"gpu":[{"minor":0,"extension":{"vfs":[{"busID":"0000:18:00.4"}]}}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "annotation scheduling.koordinator.sh/device-allocated of pod ml/train-v: "
            "gpu[0].extension.vfs: device-lifecycle acts on RDMA virtual functions only; an "
            "NVIDIA GPU's cannot be checked to belong to the allocated device");
  EXPECT_THAT(log(), IsEmpty());
  // Another vendor's GPU alone: nothing to initialise, nothing kept.
  const size_t kept = records();
  d = runPre(*hook,
             sandbox("npu-0", 0, R"({"gpu":[{"minor":0,"resources":null,"id":"Ascend910-0"}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_THAT(log(), IsEmpty());
  EXPECT_EQ(records(), kept);
}

TEST_F(LifecycleTest, ASharedGpuIsInitialisedByItsFirstUserAndCleanedUpAfterItsLast) {
  auto hook = make();
  const std::string share =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory-ratio":"50"}}]})";
  Sandbox a = sandbox("half-a", 0, share), b = sandbox("half-b", 0, share);
  for (Sandbox* s : {&a, &b}) {
    ASSERT_EQ(runPre(*hook, *s).kind, HookDecision::Kind::kContinue);
    runPost(*hook, *s);
  }
  EXPECT_THAT(log(), ElementsAre(cat("init gpu 0 ", kGpu0, " half-a")));
  // a leaves while b still computes on the GPU: no reset under b.
  stopOrRemove(*hook, a, LifecycleMethod::kStopPodSandbox);
  stopOrRemove(*hook, a, LifecycleMethod::kRemovePodSandbox);
  EXPECT_EQ(log().size(), 1u);
  // A whole-GPU pod taking GPU 0 and 1 after b's share: only GPU 1 is new.
  Sandbox c = sandbox("whole-c", 0, R"({"gpu":[{"minor":0},{"minor":1}]})");
  ASSERT_EQ(runPre(*hook, c).kind, HookDecision::Kind::kContinue);
  runPost(*hook, c);
  EXPECT_THAT(log(), ElementsAre(HasSubstr("half-a"),
                                 "init gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd whole-c"));
  stopOrRemove(*hook, b, LifecycleMethod::kStopPodSandbox);
  EXPECT_EQ(log().size(), 2u);
  // The last user cleans up both.
  stopOrRemove(*hook, c, LifecycleMethod::kStopPodSandbox);
  EXPECT_THAT(log(), ElementsAre(HasSubstr("half-a"), HasSubstr("init gpu 1"),
                                 "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd whole-c",
                                 cat("cleanup gpu 0 ", kGpu0, " whole-c")));
}

TEST_F(LifecycleTest, AFailedInitRejectsTheSandboxAndCleansUpWhatWasInitialised) {
  auto hook = make();
  failNext("init-gpu-1", 1);
  Sandbox s = sandbox("train-0", 0, kTwoGpusAndAVf);
  HookDecision d = runPre(*hook, s);
  ASSERT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("pod ml/train-0: init of gpu 1 (minor 1, "
                        "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd, "));
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr(") failed: action 0 (" + dir_.file("act.sh") +
                        " init {type} {minor} {uuid} {pod_name}): exited with status 3: device "
                        "busy; the devices initialised so far were cleaned up"));
  EXPECT_THAT(log(),
              ElementsAre(cat("init gpu 0 ", kGpu0, " train-0"),
                          "init gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0 FAILED",
                          "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0",
                          cat("cleanup gpu 0 ", kGpu0, " train-0")));
  EXPECT_EQ(records(), 0u);
  // kubelet's retry initialises again from the start.
  clearLog();
  ASSERT_EQ(runPre(*hook, s).kind, HookDecision::Kind::kContinue);
  EXPECT_EQ(log().size(), 3u);
}

TEST_F(LifecycleTest, AFailedCleanupIsRetriedWithBackoffUntilItSucceeds) {
  auto hook = make();
  Sandbox s = sandbox("train-0", 0, R"({"gpu":[{"minor":0},{"minor":1}]})");
  ASSERT_EQ(runPre(*hook, s).kind, HookDecision::Kind::kContinue);
  runPost(*hook, s);
  clearLog();
  failNext("cleanup-gpu-1", 2);
  const auto start = Clock::now();
  stopOrRemove(*hook, s, LifecycleMethod::kStopPodSandbox);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // kubelet's call is not held
  stopOrRemove(*hook, s, LifecycleMethod::kRemovePodSandbox);
  ASSERT_TRUE(waitForLog(4));
  // gpu 0 was cleaned at once and is not cleaned again; gpu 1 failed at Stop,
  // again at Remove, then succeeded on the hook's own retry.
  const std::string gpu1 = "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd train-0";
  EXPECT_THAT(log(), ElementsAre(gpu1 + " FAILED", cat("cleanup gpu 0 ", kGpu0, " train-0"),
                                 gpu1 + " FAILED", gpu1));
  EXPECT_TRUE(eventually([&] { return records() == 0; }));
  // Nothing is cleaned up again once it succeeded, and no retry is left.
  EXPECT_THAT(
      logAfterPendingRetries(*hook),
      ::testing::Optional(ElementsAre(gpu1 + " FAILED", cat("cleanup gpu 0 ", kGpu0, " train-0"),
                                      gpu1 + " FAILED", gpu1)));
}

TEST_F(LifecycleTest, AfterARestartOwedCleanupsAreFoundAndReconciledWithTheRuntime) {
  Sandbox removed = sandbox("gone-0", 0, R"({"gpu":[{"minor":0}]})");
  Sandbox stopped = sandbox("stopped-0", 0, R"({"gpu":[{"minor":1}]})");
  Sandbox running = sandbox("running-0", 0, R"({"gpu":[{"minor":2}]})");
  Sandbox unfinished = sandbox("half-0", 0, R"({"gpu":[{"minor":3},{"minor":4}]})");
  {
    auto hook = make();
    for (Sandbox* s : {&removed, &stopped, &running}) {
      ASSERT_EQ(runPre(*hook, *s).kind, HookDecision::Kind::kContinue);
      runPost(*hook, *s);
    }
  }  // crihookd gone (the records are all it leaves)
  {
    // An init that crihookd did not live to finish: the record says a device was touched.
    nlohmann::json r = {
        {"version", 1},
        {"pod", {{"namespace", "ml"}, {"name", "half-0"}, {"uid", "uid-half-0"}, {"attempt", 0}}},
        {"sandbox_id", ""},
        {"phase", "initialising"},
        {"devices",
         {DeviceFacts{"gpu", 0, 3, "", "GPU-3", "", "", "nvidia3"}.toJson(),
          DeviceFacts{"gpu", 1, 4, "", "GPU-4", "", "", "nvidia4"}.toJson()}},
        {"touched", 1},
        {"cleaned", nlohmann::json::array()},
        {"removed", false},
        {"cleanup_failures", 0},
        {"last_error", ""}};
    std::ofstream(dir_.file("state/devices/uid-half-0_0.json")) << r.dump();
    std::ofstream(dir_.file("state/devices/uid-broken_0.json")) << "{not json";
  }
  clearLog();
  auto hook = make();
  EXPECT_TRUE(std::filesystem::exists(dir_.file("state/devices/uid-broken_0.json.bad")));
  dynamic_cast<Reconciler&>(*hook).reconcile(
      {
          {stopped.id, "uid-stopped-0", "ml", "stopped-0", 0, /*ready=*/false},
          {running.id, "uid-running-0", "ml", "running-0", 0, /*ready=*/true},
      },
      std::chrono::system_clock::now());
  // The running one's record stays ready: no cleanup of it is owed or can run.
  EXPECT_EQ(phaseOf(running), "ready");
  // The owed ones are done when the removed ones' records are gone and the
  // stopped one's says cleaned (kept until its Remove).
  eventually(
      [&] {
        return phaseOf(removed) == "gone" && phaseOf(unfinished) == "gone" &&
               phaseOf(stopped) == "cleaned";
      },
      std::chrono::seconds(10));
  EXPECT_EQ(phaseOf(removed), "gone");
  EXPECT_EQ(phaseOf(unfinished), "gone");
  EXPECT_EQ(phaseOf(stopped), "cleaned");
  EXPECT_EQ(phaseOf(running), "ready");
  // Each owed device once; the untouched GPU 4 of the unfinished init never.
  std::vector<std::string> l = log();
  std::sort(l.begin(), l.end());
  EXPECT_THAT(l, ElementsAre(cat("cleanup gpu 0 ", kGpu0, " gone-0"),
                             "cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd stopped-0",
                             "cleanup gpu 3 GPU-3 half-0"));
  EXPECT_EQ(records(), 2u);  // stopped-0 (cleaned, not yet removed) and running-0
  clearLog();
  // The stopped one is removed through crihookd: nothing more to clean.
  stopOrRemove(*hook, stopped, LifecycleMethod::kRemovePodSandbox, /*pod_known=*/false);
  // The running one stops: its record (not crihookd's pod records) names it.
  stopOrRemove(*hook, running, LifecycleMethod::kStopPodSandbox, /*pod_known=*/false);
  EXPECT_THAT(log(),
              ElementsAre("cleanup gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd running-0"));
  stopOrRemove(*hook, running, LifecycleMethod::kRemovePodSandbox, /*pod_known=*/false);
  EXPECT_EQ(records(), 0u);
}

// Records carry a format version: one without (crihookd before versions) is
// read as version 1 and its cleanup done; a newer one may owe a cleanup this
// build cannot read, so the hook (and crihookd) refuses to start, naming the
// file, and leaves it exactly as it was.
TEST_F(LifecycleTest, RecordsWithoutAVersionAreReadANewerVersionStopsStartUpUntouched) {
  Sandbox s = sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})");
  const std::string file = dir_.file("state/devices/uid-train-0_0.json");
  {
    auto hook = make();
    ASSERT_EQ(runPre(*hook, s).kind, HookDecision::Kind::kContinue);
    runPost(*hook, s);
  }
  nlohmann::json record = nlohmann::json::parse(readFile(file));
  EXPECT_EQ(record.at("version"), 1);

  record["version"] = 2;
  record["phase"] = "a-phase-of-the-future";
  const std::string newer = record.dump(2);
  std::ofstream(file, std::ios::trunc) << newer;
  auto refused = builtinHooks().create("device-lifecycle", "devices", settings(),
                                       BuiltinContext{dir_.file("state"), "/"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(cat("hook devices: device record ", file,
                            ": format version 2; this crihookd reads versions 1 to 1")));
  EXPECT_THAT(refused.status().message(), HasSubstr("move the file out of"));
  EXPECT_EQ(readFile(file), newer);
  EXPECT_FALSE(std::filesystem::exists(file + ".bad"));

  record.erase("version");
  record["phase"] = "ready";
  std::ofstream(file, std::ios::trunc) << record.dump();
  clearLog();
  auto hook = make();
  ASSERT_NE(hook, nullptr);
  stopOrRemove(*hook, s, LifecycleMethod::kStopPodSandbox, /*pod_known=*/false);
  EXPECT_THAT(log(), ElementsAre(cat("cleanup gpu 0 ", kGpu0, " train-0")));
}

TEST_F(LifecycleTest, ReconcilingWhileRunningCleansUpOnlyWhatTheListCanSpeakFor) {
  auto hook = make(settings(R"(, "orphan_grace": "300ms")"));
  auto& reconciler = dynamic_cast<Reconciler&>(*hook);
  Sandbox running = sandbox("running-0", 0, R"({"gpu":[{"minor":0}]})");
  Sandbox gone = sandbox("gone-0", 0, R"({"gpu":[{"minor":1}]})");
  Sandbox refused = sandbox("refused-0", 0, R"({"gpu":[{"minor":2}]})");
  for (Sandbox* s : {&running, &gone}) {
    ASSERT_EQ(runPre(*hook, *s).kind, HookDecision::Kind::kContinue);
    runPost(*hook, *s);
  }
  // A later hook refused this one's RunPodSandbox: no post stage, no sandbox.
  ASSERT_EQ(runPre(*hook, refused).kind, HookDecision::Kind::kContinue);
  const RuntimeSandbox live{running.id, "uid-running-0", "ml", "running-0", 0, true};
  // A list asked for before the last changes says nothing about them: reconcile
  // decides at once, and every record is left as it was (none cleanup-pending,
  // so none can be cleaned up).
  reconciler.reconcile({live}, std::chrono::system_clock::now() - std::chrono::seconds(5));
  EXPECT_EQ(phaseOf(running), "ready");
  EXPECT_EQ(phaseOf(gone), "ready");
  EXPECT_EQ(phaseOf(refused), "ready");
  // gone-0 was removed without crihookd seeing it; refused-0 is within its grace.
  clearLog();
  reconciler.reconcile({live}, std::chrono::system_clock::now());
  EXPECT_EQ(phaseOf(running), "ready");
  EXPECT_EQ(phaseOf(refused), "ready");
  EXPECT_TRUE(waitForPhase(gone, "gone"));
  EXPECT_THAT(log(), ElementsAre("cleanup gpu 1 GPU-00000001-aaaa-bbbb-cccc-dddddddddddd gone-0"));
  // In a list taken once the grace has passed (its time is the list's, not
  // this process's: no need to wait it out), refused-0 is an orphan.
  clearLog();
  reconciler.reconcile({live}, std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  EXPECT_EQ(phaseOf(running), "ready");
  EXPECT_TRUE(waitForPhase(refused, "gone"));
  EXPECT_THAT(log(),
              ElementsAre("cleanup gpu 2 GPU-00000002-aaaa-bbbb-cccc-dddddddddddd refused-0"));
  EXPECT_EQ(records(), 1u);  // running-0's
}

// A sandbox gone without crihookd seeing it (found by reconciling) owes its
// devices their cleanup, which waits its turn on the one retry thread
// behind a slow one. A pod given its GPU meanwhile runs that cleanup first,
// then its own init: the GPU is reset between the two pods, not skipped as
// "used by" the next one. The slow cleanup's pod sorts before the gone
// one, so the retry thread takes it first.
TEST_F(LifecycleTest, AGoneSandboxsOwedCleanupRunsBeforeTheNextPodsInit) {
  auto hook = make();
  Sandbox slow = sandbox("resetting-0", 0, R"({"gpu":[{"minor":7}]})");
  Sandbox gone = sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})");
  Sandbox next = sandbox("train-1", 0, R"({"gpu":[{"minor":0}]})");
  for (Sandbox* s : {&slow, &gone}) {
    ASSERT_EQ(runPre(*hook, *s).kind, HookDecision::Kind::kContinue);
    runPost(*hook, *s);
  }
  const std::string gate = dir_.file("gate-cleanup-gpu-7");
  ASSERT_EQ(::mkfifo(gate.c_str(), 0600), 0);
  clearLog();
  const std::string slow_cleanup =
      "cleanup gpu 7 GPU-00000007-aaaa-bbbb-cccc-dddddddddddd resetting-0";
  // Both sandboxes were removed unseen: a list taken after every change above.
  dynamic_cast<Reconciler&>(*hook).reconcile(
      {}, std::chrono::system_clock::now() + std::chrono::milliseconds(1));
  ASSERT_TRUE(waitForLog(1));
  ASSERT_THAT(log(), ElementsAre(slow_cleanup + " waits"));
  EXPECT_EQ(phaseOf(gone), "cleanup-pending");  // queued behind the slow one

  ASSERT_EQ(runPre(*hook, next).kind, HookDecision::Kind::kContinue);
  runPost(*hook, next);
  EXPECT_THAT(log(), ElementsAre(slow_cleanup + " waits", cat("cleanup gpu 0 ", kGpu0, " train-0"),
                                 cat("init gpu 0 ", kGpu0, " train-1")));
  EXPECT_EQ(phaseOf(gone), "gone");
  std::ofstream(gate) << "go\n";
  EXPECT_TRUE(waitForPhase(slow, "gone"));
  stopOrRemove(*hook, next, LifecycleMethod::kStopPodSandbox);
  EXPECT_THAT(log(), ElementsAre(slow_cleanup + " waits", cat("cleanup gpu 0 ", kGpu0, " train-0"),
                                 cat("init gpu 0 ", kGpu0, " train-1"), slow_cleanup,
                                 cat("cleanup gpu 0 ", kGpu0, " train-1")));
}

// A GPU whose cleanup failed after its pod stopped is given to no other pod
// until that cleanup succeeds: the next pod is refused (UNAVAILABLE, naming
// the device and the pod it waits on), leaving nothing behind, and kubelet's
// next try, once the cleanup can succeed, runs it and then the pod's init.
TEST_F(LifecycleTest, AGpuWhoseCleanupFailedGoesToNoPodUntilItSucceeds) {
  auto hook = make();
  Sandbox first = sandbox("train-a", 0, R"({"gpu":[{"minor":0}]})");
  Sandbox second = sandbox("train-b", 0, R"({"gpu":[{"minor":0}]})");
  ASSERT_EQ(runPre(*hook, first).kind, HookDecision::Kind::kContinue);
  runPost(*hook, first);
  failNext("cleanup-gpu-0", 1000);  // the retry thread's tries fail too
  stopOrRemove(*hook, first, LifecycleMethod::kRemovePodSandbox);
  EXPECT_EQ(phaseOf(first), "cleanup-pending");
  clearLog();

  HookDecision d = runPre(*hook, second);
  ASSERT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("is not cleaned up yet after pod ml/train-a, which used it last"));
  EXPECT_EQ(phaseOf(second), "gone") << "a refused pod leaves nothing";
  for (const std::string& l : log()) EXPECT_THAT(l, ::testing::Not(HasSubstr("init")));

  failNext("cleanup-gpu-0", 0);
  d = runPre(*hook, second);
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  runPost(*hook, second);
  const std::vector<std::string> l = log();
  ASSERT_GE(l.size(), 2u);
  EXPECT_EQ(l[l.size() - 2], cat("cleanup gpu 0 ", kGpu0, " train-a"));
  EXPECT_EQ(l.back(), cat("init gpu 0 ", kGpu0, " train-b"));
  EXPECT_EQ(phaseOf(first), "gone");
}

TEST_F(LifecycleTest, ASandboxTheRuntimeRefusedIsCleanedUpOneThatTimedOutIsKept) {
  auto hook = make();
  Sandbox refused = sandbox("refused-0", 0, R"({"gpu":[{"minor":0}]})");
  ASSERT_EQ(runPre(*hook, refused).kind, HookDecision::Kind::kContinue);
  runPost(*hook, refused, absl::UnknownError("failed to setup network for sandbox"));
  EXPECT_THAT(log(), ElementsAre(HasSubstr("init gpu 0"), HasSubstr("cleanup gpu 0")));
  EXPECT_EQ(records(), 0u);
  clearLog();
  Sandbox slow = sandbox("slow-0", 0, R"({"gpu":[{"minor":1}]})");
  ASSERT_EQ(runPre(*hook, slow).kind, HookDecision::Kind::kContinue);
  runPost(*hook, slow, absl::DeadlineExceededError("context deadline exceeded"));
  EXPECT_EQ(records(), 1u);
  // kubelet's retry while the runtime still makes the first: refused as a
  // duplicate, which must not clean up the devices the first one gets.
  ASSERT_EQ(runPre(*hook, slow).kind, HookDecision::Kind::kContinue);
  runPost(*hook, slow, absl::UnknownError("failed to reserve sandbox name: name is reserved"));
  EXPECT_EQ(records(), 1u);
  ASSERT_EQ(runPre(*hook, slow).kind, HookDecision::Kind::kContinue);  // and again, once it is made
  runPost(*hook, slow);
  EXPECT_THAT(log(), ElementsAre(HasSubstr("init gpu 1")));
  // Two calls in flight for one sandbox: the one that fails leaves the
  // devices to the other.
  clearLog();
  Sandbox twice = sandbox("twice-0", 0, R"({"gpu":[{"minor":2}]})");
  ASSERT_EQ(runPre(*hook, twice).kind, HookDecision::Kind::kContinue);
  ASSERT_EQ(runPre(*hook, twice).kind, HookDecision::Kind::kContinue);
  runPost(*hook, twice, absl::UnknownError("name is reserved"));
  runPost(*hook, twice);
  EXPECT_THAT(log(), ElementsAre(HasSubstr("init gpu 2")));
}

TEST_F(LifecycleTest, ANewSandboxOfThePodWaitsForTheCleanupItsPredecessorOwes) {
  auto hook = make();
  Sandbox first = sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})");
  ASSERT_EQ(runPre(*hook, first).kind, HookDecision::Kind::kContinue);
  runPost(*hook, first);
  // crihookd never saw the first sandbox stop; kubelet makes attempt 1.
  Sandbox second = sandbox("train-0", 1, R"({"gpu":[{"minor":0}]})");
  clearLog();
  ASSERT_EQ(runPre(*hook, second).kind, HookDecision::Kind::kContinue);
  EXPECT_THAT(log(), ElementsAre(HasSubstr("cleanup gpu 0"), HasSubstr("init gpu 0")));
  // The late Remove of the first sandbox leaves the second's devices alone.
  stopOrRemove(*hook, first, LifecycleMethod::kRemovePodSandbox);
  EXPECT_EQ(log().size(), 2u);
  EXPECT_EQ(records(), 1u);
}

TEST_F(LifecycleTest, NothingIsInitialisedWhenItsCleanupCouldNotBeGuaranteed) {
  auto hook = make();
  // The state directory is gone and a file stands in its place: no record can be written.
  std::filesystem::remove_all(dir_.file("state/devices"));
  std::ofstream(dir_.file("state/devices")) << "";
  HookDecision d = runPre(*hook, sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})"));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("pod ml/train-0: devices not initialised, their cleanup could not be "
                        "guaranteed: cannot write " +
                        dir_.file("state/devices/uid-train-0_0.json")));
  EXPECT_THAT(log(), IsEmpty());
}

// The state folder's disk fills during an init: no device is initialised
// whose record did not reach the disk first (a restart would owe no
// cleanup of it), and what was initialised before is cleaned up. Before,
// the init went on, kubelet got OK, and a restart owed no cleanup.
TEST_F(LifecycleTest, NoDeviceIsInitialisedBeforeItsRecordIsOnDisk) {
  FaultEnv env(launcherExecutor());
  auto hook = make("", &env);
  Sandbox a = sandbox("train-0", 0, kTwoGpusAndAVf);
  env.fillDiskAfterWrites(1);  // the record made; its first device's write fails
  HookDecision d = runPre(*hook, a);
  ASSERT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("pod ml/train-0: init of gpu 0 (minor 0, "));
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr(" not started: its record cannot be written (cannot write " +
                        dir_.file("state/devices/uid-train-0_0.json") +
                        ": No space left on device), so its cleanup could not be guaranteed"));
  EXPECT_THAT(log(), IsEmpty());
  env.freeDisk();
  EXPECT_EQ(records(), 0u);

  Sandbox b = sandbox("train-1", 0, kTwoGpusAndAVf);
  env.fillDiskAfterWrites(2);  // gpu 0 recorded and initialised; gpu 1's write fails
  d = runPre(*hook, b);
  ASSERT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_THAT(std::string(d.status.message()), HasSubstr("init of gpu 1 (minor 1, "));
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("; the devices initialised so far were cleaned up"));
  EXPECT_THAT(log(), ElementsAre(cat("init gpu 0 ", kGpu0, " train-1"),
                                 cat("cleanup gpu 0 ", kGpu0, " train-1")));
  env.freeDisk();
  EXPECT_EQ(records(), 0u);
  clearLog();
  ASSERT_EQ(runPre(*hook, b).kind, HookDecision::Kind::kContinue) << "kubelet's retry";
  EXPECT_EQ(log().size(), 3u);
}

TEST_F(LifecycleTest, BadSettingsNameTheSetting) {
  auto err = [&](const std::string& s) {
    auto h = builtinHooks().create("device-lifecycle", "devices", s,
                                   BuiltinContext{dir_.file("state"), "/"});
    return h.ok() ? std::string("ok") : std::string(h.status().message());
  };
  EXPECT_EQ(err(R"({"gpu": {"setup": []}})"),
            "hook devices: settings.gpu: unknown key \"setup\" (known: init, cleanup)");
  EXPECT_EQ(err(R"({"gpu": {"init": [{"command": "nvidia-smi"}]}})"),
            "hook devices: settings.gpu.init[0].command: expected a non-empty array of strings, "
            "got \"nvidia-smi\"");
  EXPECT_EQ(err(R"({"npu": {}})"), "hook devices: settings.npu: unknown setting");
  EXPECT_EQ(err(R"({"retry_initial": "10s", "retry_max": "1s"})"),
            "hook devices: settings.retry_max: is less than retry_initial");
  EXPECT_EQ(err(R"({"state_dir": "relative"})"),
            "hook devices: settings.state_dir: expected an absolute path, got \"relative\"");
}

// ---- faults (test/support/fault_env.h) ----

// The hook's clock jumps ahead by an hour (a suspend, a paused VM) while a
// failed cleanup waits out its backoff. What it does: the one retry that is
// now due runs once, at once; the next is scheduled from the new time with
// the next delay (here 1s), so a jump never fires several retries at once;
// and without a jump the retries go on at their delay, never stalling.
// (A sandbox has one due time: there is nothing to fire twice.)
TEST_F(LifecycleTest, AClockJumpDuringABackoffRunsTheDueRetryOnceAndKeepsTheDelay) {
  FaultEnv env(launcherExecutor());
  std::string s = settings();
  s.replace(s.find("\"50ms\""), 6, "\"1s\"");
  s.replace(s.find("\"200ms\""), 7, "\"1s\"");
  auto hook = make(s, &env);
  Sandbox a = sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})");
  ASSERT_EQ(runPre(*hook, a).kind, HookDecision::Kind::kContinue);
  runPost(*hook, a);
  failNext("cleanup-gpu-0", 1000);
  clearLog();
  stopOrRemove(*hook, a, LifecycleMethod::kStopPodSandbox);
  ASSERT_EQ(log().size(), 1u);  // the cleanup failed; the next try is 1s away
  EXPECT_EQ(phaseOf(a), "cleanup-pending");

  const auto jumped = Clock::now();
  env.jumpingClock().jump(std::chrono::hours(1));
  ASSERT_TRUE(waitForLog(2));
  EXPECT_LT(Clock::now() - jumped, std::chrono::milliseconds(900));  // not after the 1s delay
  // The next one is 1s after that retry, on the (jumped) clock, and it comes
  // without another jump: the third try (the event waited for) starts a full
  // delay after the second, not at once, as it would if the jump fired more
  // than the one retry due.
  ASSERT_TRUE(waitForLog(3));
  const auto times = actionTimes();
  ASSERT_GE(times.size(), 3u);
  EXPECT_GE(times[2] - times[1], std::chrono::milliseconds(900));
  EXPECT_THAT(log(), ::testing::Each(HasSubstr("FAILED")));
}

// A command that never exits (a GPU tool stuck on a wedged device), for
// init and cleanup alike, in a chain whose hook has 300ms: the init is cut
// at the call's deadline, the call is refused naming the device and the
// action, and it returns by its deadline: the cleanup of what was touched
// is not run past it on kubelet's call but left to the hook's retry thread.
// (Before, the cleanup ran with no deadline on the call: the call took the
// cleanup action's full 10s timeout more; checked failing.)
TEST_F(LifecycleTest, ACommandThatNeverExitsIsCutAtTheCallsDeadline) {
  FaultEnv env(launcherExecutor());
  auto hook = make("", &env);
  HookChain chain(logger("hook"));
  HookSettings settings;
  settings.timeout = std::chrono::milliseconds(300);
  settings.failure_policy = FailurePolicy::kFail;
  chain.add(hook, settings);

  Sandbox a = sandbox("train-0", 0, R"({"gpu":[{"minor":0}]})");
  HookInput in;
  in.method = LifecycleMethod::kRunPodSandbox;
  in.phase = Phase::kPre;
  in.request = &a.run;
  in.pod = a.pod;
  in.topology = topology_;
  env.hangCommands();
  const auto start = Clock::now();
  ChainOutcome out = chain.run(in, Clock::time_point::max());
  const auto took = Clock::now() - start;
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("pod ml/train-0: init of gpu 0 (minor 0, "));
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("failed: action 0 ("));
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("): timed out after "));
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("their cleanup failed and is retried"));
  // The bound: 300ms, and what a loaded machine adds to it.
  EXPECT_LT(took, std::chrono::milliseconds(300 + 1500));
  const auto timeouts = env.execTimeouts();
  ASSERT_EQ(timeouts.size(), 1u);  // the init only; the cleanup had no time left
  EXPECT_LE(timeouts[0], std::chrono::milliseconds(300));
  EXPECT_EQ(phaseOf(a), "cleanup-pending");

  // The device answers again: the retry thread cleans up and forgets the sandbox.
  env.releaseHungCommands();
  ASSERT_TRUE(waitForLog(1));
  EXPECT_THAT(log(), ElementsAre(HasSubstr("cleanup gpu 0")));
  EXPECT_TRUE(waitForPhase(a, "gone"));
}

}  // namespace
}  // namespace crihook::testing
