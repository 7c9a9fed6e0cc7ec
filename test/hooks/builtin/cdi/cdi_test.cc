// CDI: specs in JSON and YAML, a later directory winning, the edits a
// container gets, and the refusals (unknown device, a broken spec, OCI hooks
// under on_unsupported = "reject").

#include "hooks/builtin/cdi/cdi.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "base/text.h"
#include "hooks/registry.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class CdiTest : public ::testing::Test {
 protected:
  CdiTest() {
    std::filesystem::create_directories(dir_.file("etc"));
    std::filesystem::create_directories(dir_.file("run"));
    std::ofstream(dir_.file("etc/vendor.json")) << R"({
      "cdiVersion": "0.6.0", "kind": "vendor.com/gpu",
      "containerEdits": {"env": ["VENDOR_DRIVER=1"]},
      "devices": [
        {"name": "0", "containerEdits": {
          "env": ["VENDOR_VISIBLE=0"],
          "deviceNodes": [{"path": "/dev/vgpu0", "hostPath": "/dev/vgpu0"}, {"path": "/dev/vgpuctl"}],
          "mounts": [{"hostPath": "/opt/vendor/lib", "containerPath": "/usr/lib/vendor", "options": ["ro", "bind"]}]}},
        {"name": "1", "containerEdits": {"env": ["VENDOR_VISIBLE=1"]}}]})";
    // The later directory redefines device 1, and brings a NIC with an OCI hook.
    std::ofstream(dir_.file("run/vendor.yaml")) << R"(cdiVersion: "0.6.0"
kind: vendor.com/gpu
devices:
  - name: "1"
    containerEdits:
      env: ["VENDOR_VISIBLE=1-from-run"]
      deviceNodes:
        - path: /dev/vgpu1
          permissions: rw
)";
    std::ofstream(dir_.file("run/nic.yaml")) << R"(cdiVersion: "0.6.0"
kind: vendor.com/nic
devices:
  - name: a
    containerEdits:
      deviceNodes: [{path: /dev/vnic0}]
      hooks:
        - hookName: createContainer
          path: /usr/bin/vendor-ctk
)";
  }

  std::shared_ptr<Hook> make(const std::string& extra = "") {
    auto h = builtinHooks().create("cdi", "cdi",
                                   R"({"spec_dirs": [")" + dir_.file("etc") + R"(", ")" +
                                       dir_.file("run") + "\"]" + extra + "}");
    EXPECT_TRUE(h.ok()) << h.status();
    return *h;
  }

  static HookInput container(std::vector<std::string> cdi,
                             std::map<std::string, std::string> ann = {}) {
    auto c = std::make_shared<hv1::ContainerRecord>();
    c->mutable_requested()->mutable_metadata()->set_name("trainer");
    for (const auto& n : cdi) c->mutable_requested()->add_cdi_devices()->set_name(n);
    for (const auto& [k, v] : ann) (*c->mutable_requested()->mutable_annotations())[k] = v;
    auto pod = std::make_shared<hv1::PodRecord>();
    pod->mutable_config()->mutable_metadata()->set_name("train-0");
    pod->mutable_config()->mutable_metadata()->set_namespace_("ml");
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.pod = pod;
    in.container = c;
    return in;
  }

  TempDir dir_;
};

TEST_F(CdiTest, SpecsResolveWithGlobalEditsAndTheLaterDirectoryWins) {
  CdiRegistry r({dir_.file("etc"), dir_.file("run")});
  auto zero = r.resolve({"vendor.com/gpu=0"}, nullptr)[0];
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_THAT(zero->adjustment.env,
              ElementsAre(EnvVar{"VENDOR_VISIBLE", "0"}, EnvVar{"VENDOR_DRIVER", "1"}));
  EXPECT_THAT(zero->adjustment.devices,
              ElementsAre(DeviceSpec{"/dev/vgpu0", "/dev/vgpu0", "rwm"},
                          DeviceSpec{"/dev/vgpuctl", "/dev/vgpuctl", "rwm"}));
  EXPECT_THAT(zero->adjustment.mounts,
              ElementsAre(MountSpec{"/usr/lib/vendor", "/opt/vendor/lib", true, 0}));
  auto one = r.resolve({"vendor.com/gpu=1"}, nullptr)[0];
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->adjustment.env[0].value, "1-from-run");  // YAML, from the later directory
  EXPECT_EQ(one->adjustment.devices[0].permissions, "rw");
  EXPECT_EQ(r.resolve({"vendor.com/gpu=7"}, nullptr)[0].status().code(),
            absl::StatusCode::kNotFound);
}

// A spec's own containerEdits (beside its devices) apply with each of its
// devices: env, device nodes and mounts alike.
TEST_F(CdiTest, ASpecsGlobalDeviceNodesAndMountsComeWithEachDevice) {
  std::filesystem::create_directories(dir_.file("global"));
  std::ofstream(dir_.file("global/ctl.json")) << R"({
    "cdiVersion": "0.6.0", "kind": "vendor.com/ctl",
    "containerEdits": {
      "env": ["CTL_DRIVER=1"],
      "deviceNodes": [{"path": "/dev/vendorctl", "permissions": "rw"}],
      "mounts": [{"hostPath": "/opt/ctl", "containerPath": "/usr/lib/ctl", "options": ["ro"]}]},
    "devices": [{"name": "a", "containerEdits": {"env": ["CTL=a"]}}]})";
  CdiRegistry r({dir_.file("global")});
  auto a = r.resolve({"vendor.com/ctl=a"}, nullptr)[0];
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->adjustment.env, ElementsAre(EnvVar{"CTL", "a"}, EnvVar{"CTL_DRIVER", "1"}));
  EXPECT_THAT(a->adjustment.devices,
              ElementsAre(DeviceSpec{"/dev/vendorctl", "/dev/vendorctl", "rw"}));
  EXPECT_THAT(a->adjustment.mounts, ElementsAre(MountSpec{"/usr/lib/ctl", "/opt/ctl", true, 0}));
}

TEST_F(CdiTest, TheHookAppliesRequestedDevicesAndReportsOciHooks) {
  auto hook = make();
  HookDecision d =
      hook->run(container({"vendor.com/gpu=0"}, {{"cdi.k8s.io/nic", "vendor.com/nic=a"}}));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  ASSERT_EQ(d.adjustment.devices.size(), 3u);
  EXPECT_EQ(d.adjustment.devices[2].container_path, "/dev/vnic0");
  EXPECT_EQ(d.adjustment.annotations.at("crihook.io/cdi-unsupported"),
            "vendor.com/nic=a: hook createContainer /usr/bin/vendor-ctk");
  EXPECT_TRUE(hook->run(container({})).adjustment.empty());

  auto strict = make(R"(, "on_unsupported": "reject")");
  d = strict->run(container({}, {{"cdi.k8s.io/nic", "vendor.com/nic=a"}}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "container trainer of pod ml/train-0: CDI edits CRI cannot carry: vendor.com/nic=a: "
            "hook createContainer /usr/bin/vendor-ctk");

  d = hook->run(container({"vendor.com/gpu=9"}));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(d.status.message()),
            "container trainer of pod ml/train-0: CDI device vendor.com/gpu=9: no CDI spec defines "
            "vendor.com/gpu=9");
  EXPECT_FALSE(
      make(R"(, "mode": "runtime")")->subscribes(LifecycleMethod::kCreateContainer, Phase::kPre));
}

TEST_F(CdiTest, ABrokenSpecNamesFileAndFieldAndTheOthersStillServe) {
  std::ofstream(dir_.file("run/broken.json"))
      << R"({"cdiVersion": "0.6.0", "kind": "vendor.com/x", "devices": [{"name": "0", "containerEdits": {"env": ["NOEQUALS"]}}]})";
  CdiRegistry r({dir_.file("etc"), dir_.file("run")});
  std::vector<std::string> errors;
  EXPECT_TRUE(r.resolve({"vendor.com/gpu=0"}, &errors)[0].ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            dir_.file("run/broken.json") +
                ": devices[0].containerEdits.env[0]: expected NAME=VALUE, got \"NOEQUALS\"");
  std::string kind;
  std::map<std::string, CdiEdits> devices;
  CdiEdits global;
  EXPECT_THAT(
      std::string(parseCdiSpec("x.yaml", "kind: [", true, &kind, &devices, &global).message()),
      HasSubstr("x.yaml: not valid YAML"));
  EXPECT_EQ(
      std::string(parseCdiSpec("x.json", R"({"cdiVersion":"0.6.0","kind":"gpu","devices":[]})",
                               false, &kind, &devices, &global)
                      .message()),
      "x.json: kind: expected vendor.com/class, got \"gpu\"");
}

// 700 bytes of YAML whose aliases stand for 9^9 nodes once expanded: it
// aborted crihookd (memory) while being converted.
TEST_F(CdiTest, AYamlAliasBombIsRefusedNamingTheFile) {
  std::string bomb =
      "cdiVersion: \"0.6.0\"\nkind: vendor.com/bomb\na: &a "
      "[\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'i'; ++c, ++prev) {
    bomb += cat(c, ": &", c, " [");
    for (int i = 0; i < 9; ++i) bomb += cat(i ? "," : "", "*", prev);
    bomb += "]\n";
  }
  bomb += "devices: [{name: x, containerEdits: {env: *i}}]\n";
  ASSERT_LT(bomb.size(), 800u);
  std::ofstream(dir_.file("run/bomb.yaml")) << bomb;
  CdiRegistry r({dir_.file("etc"), dir_.file("run")});
  std::vector<std::string> errors;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.resolve({"vendor.com/gpu=0"}, &errors)[0].ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            dir_.file("run/bomb.yaml") + ": more than 100000 nodes once its aliases are expanded");
}

TEST_F(CdiTest, DeepOrHugeSpecsAreRefusedNamingTheFile) {
  std::ofstream(dir_.file("run/deep.json"))
      << R"({"cdiVersion":"0.6.0","kind":"vendor.com/d","devices":)" << std::string(60000, '[')
      << std::string(60000, ']') << "}";
  std::ofstream(dir_.file("run/deep.yaml"))
      << "cdiVersion: \"0.6.0\"\nkind: vendor.com/y\ndevices: " << std::string(40, '[')
      << std::string(40, ']') << "\n";
  std::ofstream(dir_.file("run/huge.json")) << "{";
  ASSERT_EQ(::truncate(dir_.file("run/huge.json").c_str(), 300 << 20), 0);  // sparse
  ASSERT_EQ(::symlink("/dev/zero", dir_.file("run/zero.json").c_str()), 0);
  CdiRegistry r({dir_.file("etc"), dir_.file("run")});
  std::vector<std::string> errors;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.resolve({"vendor.com/gpu=0"}, &errors)[0].ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_THAT(
      errors,
      ElementsAre(dir_.file("run/deep.json") + ": nested deeper than 32",
                  dir_.file("run/deep.yaml") + ": nested deeper than 32",
                  dir_.file("run/huge.json") + ": 314572800 bytes, more than the 1048576 allowed",
                  dir_.file("run/zero.json") + ": a character device, not a regular file"));
}

// A spec of kind vendor.com/b defining device `name`, `bytes` long at least.
std::string paddedSpec(const std::string& name, size_t bytes = 0) {
  std::string spec = R"({"cdiVersion":"0.6.0","kind":"vendor.com/b","devices":[{"name":")" + name +
                     R"(","containerEdits":{"env":["PAD=)";
  return spec + std::string(bytes > spec.size() + 8 ? bytes - spec.size() - 8 : 1, 'x') +
         R"("]}}]})";
}

// A directory of many entries costs the first 1024 by name; at most 64
// specs of a directory and 16 MiB of specs in all are read; what a bound
// leaves out is named among the errors.
TEST_F(CdiTest, WhatTheDirectoriesMayHoldIsBoundedAndWhatIsLeftUnreadNamed) {
  namespace fs = std::filesystem;
  fs::create_directories(dir_.file("many"));
  for (int i = 0; i < 1030; ++i) std::ofstream(dir_.file("many/a" + std::to_string(1000 + i)));
  std::ofstream(dir_.file("many/z.json")) << paddedSpec("late");
  fs::create_directories(dir_.file("specs"));
  for (int i = 0; i < 65; ++i)
    std::ofstream(dir_.file("specs/s" + std::to_string(100 + i) + ".json")) << paddedSpec(cat(i));
  CdiRegistry r({dir_.file("many"), dir_.file("specs")});
  std::vector<std::string> errors;
  auto got = r.resolve({"vendor.com/b=late", "vendor.com/b=63", "vendor.com/b=64"}, &errors);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(got[1].ok()) << got[1].status();
  EXPECT_EQ(got[2].status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      errors,
      ElementsAre(dir_.file("many") + ": 1031 entries; only the first 1024 by name are looked at",
                  dir_.file("specs") + ": more than 64 spec files; \"s164.json\" and the ones "
                                       "after it by name are not read"));

  fs::create_directories(dir_.file("big"));
  const size_t each = kMaxCdiSpecBytes - 1000;
  const size_t fit = kMaxCdiSpecsBytes / each;
  for (size_t i = 0; i <= fit; ++i)
    std::ofstream(dir_.file("big/b" + std::to_string(100 + i) + ".json"))
        << paddedSpec(cat(i), each);
  CdiRegistry big({dir_.file("big")});
  errors.clear();
  got = big.resolve({cat("vendor.com/b=", fit - 1), cat("vendor.com/b=", fit)}, &errors);
  EXPECT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr(dir_.file("big/b" + std::to_string(100 + fit) + ".json") +
                                   "\": the specs before it hold"));
  EXPECT_THAT(errors[0],
              HasSubstr("they would pass 16777216: it and the specs after it are not used"));
}

// A FIFO among the specs hung every CDI call (and its thread) for good.
TEST_F(CdiTest, AFifoSpecIsNamedAndTheCallReturnsPromptly) {
  ASSERT_EQ(::mkfifo(dir_.file("run/fifo.yaml").c_str(), 0600), 0);
  auto hook = make();
  auto call =
      std::async(std::launch::async, [&] { return hook->run(container({"vendor.com/gpu=7"})); });
  if (call.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "the CDI call blocked on the FIFO";
    ::close(::open(dir_.file("run/fifo.yaml").c_str(), O_WRONLY | O_NONBLOCK));  // unblock it
  }
  HookDecision d = call.get();
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  CdiRegistry r({dir_.file("etc"), dir_.file("run")});
  std::vector<std::string> errors;
  EXPECT_TRUE(r.resolve({"vendor.com/gpu=1"}, &errors)[0].ok());
  EXPECT_THAT(errors, ElementsAre(dir_.file("run/fifo.yaml") + ": a FIFO, not a regular file"));
}

TEST_F(CdiTest, ADeviceNameThatIsNotOneIsRefusedQuoted) {
  auto hook = make();
  HookDecision d = hook->run(container({}, {{"cdi.k8s.io/x", "vendor.com/gpu=0,evil\nname=1"}}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(std::string(d.status.message()),
            "container trainer of pod ml/train-0: CDI device \"evil\\x0aname=1\": expected a "
            "name such as vendor.com/class=name");
  // Each part there: a vendor, a class, a name after the '='.
  for (const char* bad : {"vendor.com/gpu=", "/gpu=0", "vendor.com/=0", "vendor.com/gpu"}) {
    d = hook->run(container({bad}));
    EXPECT_EQ(d.kind, HookDecision::Kind::kReject) << bad;
    EXPECT_THAT(std::string(d.status.message()), HasSubstr("expected a name such as")) << bad;
  }
  // Each character from the name's set: letters, digits, '.', '-', '_', and
  // ':' after the '='.
  for (const char* bad : {"vendor.com/gpu=0 1", "vendor.com/gp$u=0", "vendor.com/gpu=a\x7f",
                          "vendor.com/gpu=\xc3\xa9", "ven:dor.com/gpu=0", "vendor.com/g=p=0"}) {
    d = hook->run(container({bad}));
    EXPECT_EQ(d.kind, HookDecision::Kind::kReject) << bad;
    EXPECT_THAT(std::string(d.status.message()), HasSubstr("expected a name such as")) << bad;
  }
  // Up to 256 bytes: a name that is one is looked up (and not found here).
  const std::string longest = "v.com/c=" + std::string(248, 'n');
  for (const std::string& good : {std::string("Vendor-1.example_x/GPU.2=a-b_c.d:e"), longest}) {
    d = hook->run(container({good}));
    EXPECT_THAT(std::string(d.status.message()), Not(HasSubstr("expected a name such as"))) << good;
  }
  d = hook->run(container({longest + "n"}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_THAT(std::string(d.status.message()), HasSubstr("expected a name such as"));
}

}  // namespace
}  // namespace crihook::testing
