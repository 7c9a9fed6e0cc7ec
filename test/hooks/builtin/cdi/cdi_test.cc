// CDI: specs in JSON and YAML, a later directory winning, the edits a
// container gets, and the refusals (unknown device, a broken spec, OCI hooks
// under on_unsupported = "reject").

#include "builtin/cdi/cdi.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fake_cri_server.h"
#include "registry.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

TEST_F(CdiTest, TheHookAppliesRequestedDevicesAndReportsOciHooks) {
  auto hook = make();
  HookDecision d =
      hook->run(container({"vendor.com/gpu=0"}, {{"cdi.k8s.io/nic", "vendor.com/nic=a"}}));
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(d.adjustment.devices.size(), 3u);
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

}  // namespace
}  // namespace crihook::testing
