#pragma once

// DeviceHooksTest: the device hooks' tests' fixture (gpu_hook_test,
// rdma_hook_test, cpuset_hook_test, topology_check_hook_test,
// allocation_hook_test): the DGX-shaped fixture topology, a fixture device
// root, and pods carrying the scheduler's annotations.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hooks/hook.h"
#include "hooks/registry.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "topology/topology.h"

namespace crihook::testing {

namespace hv1 = ::crihook::hook::v1;

class DeviceHooksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    topology_ = std::make_shared<const topology::Snapshot>(
        topology::discover(topology::SysRoot(fixtureTree("dgx"))));
    // A device root with what the host would have (plain files stand in:
    // the hooks only look them up).
    std::filesystem::create_directories(dir_->file("dev/infiniband"));
    for (const char* n :
         {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "infiniband/rdma_cm",
          "infiniband/uverbs0", "infiniband/uverbs2", "infiniband/uverbs5", "infiniband/uverbs6"})
      std::ofstream(dir_->file("dev/") + n) << "";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  std::shared_ptr<Hook> make(const std::string& type, std::string settings = "",
                             const std::string& name = "") {
    if (settings.empty()) settings = R"({"device_root": ")" + dir_->file("dev") + "\"}";
    auto h = builtinHooks().create(type, name.empty() ? type : name, settings);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : nullptr;
  }

  static HookInput input(std::map<std::string, std::string> annotations) {
    auto pod = std::make_shared<hv1::PodRecord>();
    pod->mutable_config()->mutable_metadata()->set_name("train-0");
    pod->mutable_config()->mutable_metadata()->set_namespace_("ml");
    for (const auto& [k, v] : annotations) (*pod->mutable_config()->mutable_annotations())[k] = v;
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.pod = pod;
    in.topology = topology_;
    return in;
  }
  static HookInput allocated(const std::string& json) {
    return input({{"scheduling.koordinator.sh/device-allocated", json}});
  }
  static std::vector<std::string> hostPaths(const Adjustment& a) {
    std::vector<std::string> out;
    for (const DeviceSpec& d : a.devices) {
      out.push_back(d.container_path + "<-" + d.host_path.substr(dir_->file("dev").size()));
    }
    return out;
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::shared_ptr<const topology::Snapshot> topology_;
};

}  // namespace crihook::testing
