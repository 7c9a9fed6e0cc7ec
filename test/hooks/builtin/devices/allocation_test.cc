// The scheduler's allocation annotations: valid ones read whole, each kind of
// invalid one refused naming the pod, the annotation, the field and why.

#include "builtin/devices/allocation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(DeviceAllocated, KoordinatorsExampleIsReadWhole) {
  auto a = parseDeviceAllocated(
      R"({"gpu":[{"minor":0,"id":"GPU-1","resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}],
          "rdma":[{"minor":1,"id":"0000:1f:00.0","resources":{"koordinator.sh/rdma":"100"},
                   "extension":{"vfs":[{"minor":3,"busID":"0000:1f:00.5"}]}}]})",
      "default/train-0");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->gpu.size(), 1u);
  EXPECT_EQ(a->gpu[0].minor, 0);
  EXPECT_EQ(a->gpu[0].id, "GPU-1");
  EXPECT_THAT(a->gpu[0].resources, ElementsAre(Pair("koordinator.sh/gpu-core", "100"),
                                               Pair("koordinator.sh/gpu-memory-ratio", "100")));
  ASSERT_EQ(a->rdma.size(), 1u);
  EXPECT_EQ(a->rdma[0].id, "0000:1f:00.0");
  ASSERT_EQ(a->rdma[0].vfs.size(), 1u);
  EXPECT_EQ(a->rdma[0].vfs[0].minor, 3);
  EXPECT_EQ(a->rdma[0].vfs[0].bus_id, "0000:1f:00.5");
  EXPECT_TRUE(a->fpga.empty());
  EXPECT_TRUE(parseDeviceAllocated("{}", "p")->empty());
}

TEST(DeviceAllocated, EachKindOfBadInputNamesPodAnnotationAndField) {
  const std::string prefix =
      "annotation scheduling.koordinator.sh/device-allocated of pod default/train-0: ";
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"{", "not valid JSON"},
      {"[]", "expected an object by device type, got []"},
      {R"({"npu":[]})", "npu: unknown device type (expected gpu, rdma or fpga)"},
      {R"({"gpu":{}})", "gpu: expected an array, got {}"},
      {R"({"gpu":[{"minor":"x"}]})", "gpu[0].minor: expected a non-negative integer, got \"x\""},
      {R"({"gpu":[{"minor":0},{"minor":-1}]})",
       "gpu[1].minor: expected a non-negative integer, got -1"},
      {R"({"gpu":[{"id":"GPU-1"}]})", "gpu[0].minor: missing"},
      {R"({"gpu":[{"minor":0},{"minor":0}]})", "gpu[1].minor: minor 0 is allocated twice"},
      {R"({"gpu":[{"minor":0,"id":7}]})", "gpu[0].id: expected a string, got 7"},
      {R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":[1]}}]})",
       "gpu[0].resources.koordinator.sh/gpu-core: expected a quantity, got [1]"},
      {R"({"gpu":[{"minor":0,"extension":{"vfs":[]}}]})",
       "gpu[0].extension.vfs: only RDMA devices have virtual functions"},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"0000:1f:00.5"}]}}]})",
       "rdma[0].extension.vfs[0].minor: missing"},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"minor":2,"busID":5}]}}]})",
       "rdma[0].extension.vfs[0].busID: expected a string, got 5"},
  };
  for (const Case& c : cases) {
    auto a = parseDeviceAllocated(c.json, "default/train-0");
    ASSERT_FALSE(a.ok()) << c.json;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(a.status().message()), prefix + c.message) << c.json;
  }
}

TEST(ResourceStatus, CpusetAndNumaNodesAreRead) {
  auto r = parseResourceStatus(
      R"({"cpuset":"2-5","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"8Gi"}}]})",
      "ml/a");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cpuset, "2-5");
  ASSERT_EQ(r->numa_nodes.size(), 1u);
  EXPECT_EQ(r->numa_nodes[0].node, 0);
  EXPECT_EQ(r->numa_nodes[0].resources.at("cpu"), "4");
  EXPECT_FALSE(parseResourceStatus("{}", "ml/a")->cpuset.has_value());

  auto bad = parseResourceStatus(R"({"cpuset":"2-x"})", "ml/a");
  EXPECT_EQ(std::string(bad.status().message()),
            "annotation scheduling.koordinator.sh/resource-status of pod ml/a: cpuset: expected a "
            "CPU list such as \"2-5\", got \"2-x\"");
  bad = parseResourceStatus(R"({"numaNodeResources":[{"resources":{}}]})", "ml/a");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("numaNodeResources[0].node: missing"));
  bad = parseResourceStatus(R"({"numaNodeResources":[{"node":"zero"}]})", "ml/a");
  EXPECT_THAT(
      std::string(bad.status().message()),
      HasSubstr("numaNodeResources[0].node: expected a non-negative integer, got \"zero\""));
}

TEST(Quantity, ReadsKubernetesQuantitiesRoundingUp) {
  EXPECT_EQ(parseQuantity("100"), 100);
  EXPECT_EQ(parseQuantity("16Gi"), int64_t{16} << 30);
  EXPECT_EQ(parseQuantity("1.5Gi"), int64_t{3} << 29);
  EXPECT_EQ(parseQuantity("2G"), 2000000000);
  EXPECT_EQ(parseQuantity("512Mi"), int64_t{512} << 20);
  EXPECT_EQ(parseQuantity("1k"), 1000);
  EXPECT_EQ(parseQuantity("1500m"), 2);  // Value() rounds up
  EXPECT_EQ(parseQuantity("1e3"), 1000);
  EXPECT_EQ(parseQuantity("0"), 0);
  EXPECT_EQ(parseQuantity("0.5"), 1);
  for (const char* bad :
       {"", "Gi", "abc", "16GB", "1..2", "-1", "8Ei", "1e", "99999999999999999999"})
    EXPECT_EQ(parseQuantity(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace crihook::testing
