// The scheduler's allocation annotations: valid ones read whole, each kind of
// invalid one refused naming the pod, the annotation, the field and why.

#include "hooks/builtin/devices/allocation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/text.h"
#include "topology/report.h"
#include "topology/topology.h"

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
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"minor":-1}]}}]})",
       "rdma[0].extension.vfs[0].busID: missing (a VF is found by its busID)"},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"minor":2,"busID":5}]}}]})",
       "rdma[0].extension.vfs[0].busID: expected a PCI address such as 0000:1f:00.2, got 5"},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"0000:1F:00.2"}]}}]})",
       "rdma[0].extension.vfs[0].busID: expected a PCI address such as 0000:1f:00.2, got "
       "\"0000:1F:00.2\""},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"../../../../x"}]}}]})",
       "rdma[0].extension.vfs[0].busID: expected a PCI address such as 0000:1f:00.2, got "
       "\"../../../../x\""},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"0000:1f:00.8"}]}}]})",
       "rdma[0].extension.vfs[0].busID: expected a PCI address such as 0000:1f:00.2, got "
       "\"0000:1f:00.8\""},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"minor":-2,"busID":"0000:1f:00.2"}]}}]})",
       "rdma[0].extension.vfs[0].minor: expected an integer from -1, got -2"},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"minor":"-1","busID":"0000:1f:00.2"}]}}]})",
       "rdma[0].extension.vfs[0].minor: expected an integer from -1, got \"-1\""},
      {R"({"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"0000:1f:00.2"},{"busID":"0000:1f:00.2"}]}}]})",
       "rdma[0].extension.vfs[1].busID: VF 0000:1f:00.2 is allocated twice"},
      {R"({"rdma":[{"minor":0,"id":"mlx5_0"}]})",
       "rdma[0].id: expected a PCI address such as 0000:1f:00.0, got \"mlx5_0\""},
      {R"({"gpu":[{"minor":0,"extension":[]}]})", "gpu[0].extension: expected an object, got []"},
  };
  for (const Case& c : cases) {
    auto a = parseDeviceAllocated(c.json, "default/train-0");
    ASSERT_FALSE(a.ok()) << c.json;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(a.status().message()), prefix + c.message) << c.json;
  }
}

// Shapes copied from Koordinator's own tests (a7a1b76b), as its scheduler
// marshals apiext.DeviceAllocations with Go's encoding/json: fields in struct
// order (minor, resources, id, extension), map keys sorted, omitempty.
TEST(DeviceAllocated, ReadsKoordinatorsTestAnnotationsVerbatim) {
  // pkg/koordlet/statesinformer/impl/states_pod_resources_test.go: a VF with
  // koordlet's minor -1.
  auto a = parseDeviceAllocated(
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"23040Mi","koordinator.sh/gpu-memory-ratio":"100"},"id":"0"}],"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:01:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:01:00.2"}]}}]})",
      "test-namespace/test-pod");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->rdma.size(), 1u);
  EXPECT_EQ(a->rdma[0].id, "0000:01:00.0");
  ASSERT_EQ(a->rdma[0].vfs.size(), 1u);
  EXPECT_EQ(a->rdma[0].vfs[0].minor, -1);
  EXPECT_EQ(a->rdma[0].vfs[0].bus_id, "0000:01:00.2");
  EXPECT_EQ(a->gpu[0].resources.at("koordinator.sh/gpu-memory"), "23040Mi");

  // pkg/scheduler/plugins/deviceshare/plugin_test.go: ids filled in (v1.6),
  // and a nil ResourceList written as null.
  a = parseDeviceAllocated(
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"}],"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0"}]})",
      "default/test");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->gpu.size(), 2u);
  EXPECT_EQ(a->gpu[1].minor, 1);
  EXPECT_EQ(a->gpu[1].id, "GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2");
  EXPECT_EQ(a->rdma[0].minor, 1);
  EXPECT_TRUE(a->rdma[0].vfs.empty());
  a = parseDeviceAllocated(
      R"({"gpu":[{"minor":0,"resources":null,"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}]})",
      "default/test");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->gpu[0].resources.empty());
  // Extension is a pointer: an extension of null is none, as Go's
  // json.Unmarshal reads it into koordlet's struct.
  a = parseDeviceAllocated(R"({"rdma":[{"minor":1,"id":"0000:1f:00.0","extension":null}]})",
                           "default/test");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->rdma[0].vfs.empty());
}

TEST(DeviceAllocated, ReadsAFullAnnotationWithAndWithoutIds) {
  // Built from device_share.go's struct tags: DeviceAllocation{Minor
  // `minor`, Resources `resources`, ID `id,omitempty`, Extension
  // `extension,omitempty`}, VirtualFunction{Minor `minor,omitempty`, BusID
  // `busID,omitempty`}: koordlet's VF minor -1 is written, a 0 is dropped;
  // extension.gpuSharedResourceTemplate (Huawei's) and unknown keys ignored.
  const std::string with_ids =
      R"({"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"20Gi","koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd","extension":{"gpuSharedResourceTemplate":"vir02"}},)"
      R"({"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd","future":{"x":1}}],)"
      R"("rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1c:00.0","extension":{"vfs":[{"minor":-1,"busID":"0000:1c:00.3"}]}},)"
      R"({"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:3c:00.0","extension":{"vfs":[{"busID":"0000:3c:00.1"}]}}]})";
  auto a = parseDeviceAllocated(with_ids, "ml/train-0");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->gpu.size(), 2u);
  EXPECT_EQ(a->gpu[0].id, "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(a->gpu[0].resources.at("koordinator.sh/gpu-memory-ratio"), "50");
  ASSERT_EQ(a->rdma.size(), 2u);
  EXPECT_EQ(a->rdma[0].vfs[0].minor, -1);
  EXPECT_EQ(a->rdma[0].vfs[0].bus_id, "0000:1c:00.3");
  EXPECT_EQ(a->rdma[1].id, "0000:3c:00.0");
  EXPECT_EQ(a->rdma[1].vfs[0].minor, 0);  // Go's omitempty dropped it
  EXPECT_EQ(a->rdma[1].vfs[0].bus_id, "0000:3c:00.1");

  // Before v1.6: no id anywhere.
  a = parseDeviceAllocated(
      R"({"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"100"}}],)"
      R"("rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"100"}}]})",
      "ml/train-0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->gpu[0].minor, 2);
  EXPECT_TRUE(a->gpu[0].id.empty());
  EXPECT_EQ(a->rdma[0].minor, 3);
  EXPECT_TRUE(a->rdma[0].id.empty());
}

TEST(DeviceAllocated, HostileSizesAreRefusedBeforeTheyCostAnything) {
  const std::string prefix = "annotation scheduling.koordinator.sh/device-allocated of pod ml/a: ";
  std::string deep = R"({"gpu":[{"minor":0,"extension":{"x":)" + std::string(20, '[') +
                     std::string(20, ']') + "}}]}";
  EXPECT_EQ(std::string(parseDeviceAllocated(deep, "ml/a").status().message()),
            prefix + "nested deeper than 16");
  // Brackets inside a string are text.
  EXPECT_TRUE(parseDeviceAllocated(
                  R"({"gpu":[{"minor":0,"id":")" + std::string(40, '[') + R"(\"]"}]})", "ml/a")
                  .ok());
  std::string many = R"({"gpu":[)";
  for (int i = 0; i < 129; ++i) {
    if (i > 0) many += ",";
    many += cat(R"({"minor":)", i, "}");
  }
  EXPECT_EQ(std::string(parseDeviceAllocated(many + "]}", "ml/a").status().message()),
            prefix + "gpu: 129 devices, more than 128");
  std::string big = R"({"gpu":[{"minor":0,"id":")" + std::string(256 * 1024, 'x') + R"("}]})";
  EXPECT_EQ(std::string(parseDeviceAllocated(big, "ml/a").status().message()),
            prefix + std::to_string(big.size()) +
                " bytes, more than the 262144 Kubernetes allows for all of a pod's annotations");
  EXPECT_EQ(parseResourceStatus(big, "ml/a").status().code(), absl::StatusCode::kInvalidArgument);
}

// What Koordinator's Go types (DeviceAllocations: a map of
// []*DeviceAllocation) decode is accepted: null is no devices, a null list
// none of its type, a null element no device; the scheduler may give any
// type VFs (defaultAllocateDevices with vfGroups), read for the hooks to
// decide; a 5-digit domain (Intel VMD) is a PCI address.
TEST(DeviceAllocated, WhatTheSchedulersTypesDecodeIsAccepted) {
  auto a = parseDeviceAllocated("null", "ml/a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->empty());
  a = parseDeviceAllocated(R"({"gpu":null,"rdma":[null,{"minor":0,"id":"0000:1c:00.0"},null]})",
                           "ml/a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->gpu.empty());
  ASSERT_EQ(a->rdma.size(), 1u);
  EXPECT_EQ(a->rdma[0].id, "0000:1c:00.0");
  a = parseDeviceAllocated(
      R"({"fpga":[{"minor":0,"id":"10000:3b:00.0","extension":{"vfs":[{"busID":"10000:3b:00.1"}]}}],)"
      R"("gpu":[{"minor":1,"extension":{"vfs":[{"minor":-1,"busID":"0000:18:00.4"}]}}]})",
      "ml/a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->fpga.size(), 1u);
  EXPECT_EQ(a->fpga[0].id, "10000:3b:00.0");
  ASSERT_EQ(a->fpga[0].vfs.size(), 1u);
  EXPECT_EQ(a->fpga[0].vfs[0].bus_id, "10000:3b:00.1");
  ASSERT_EQ(a->gpu[0].vfs.size(), 1u);
  a = parseDeviceAllocated(R"({"rdma":[{"minor":0,"id":"10000:1c:00.0"}]})", "ml/a");
  ASSERT_TRUE(a.ok()) << a.status();
}

TEST(DeviceAllocated, NamesAndAddressesAreCheckedForWhatTheyMustBe) {
  EXPECT_TRUE(isPciAddress("0000:1f:00.2"));
  // Intel VMD's domains: discovery reports such functions, the hooks take them.
  EXPECT_TRUE(isPciAddress("10000:1f:00.2"));
  EXPECT_TRUE(isPciAddress("ffffffff:1f:00.2"));
  for (const char* bad :
       {"0000:1F:00.2", "0000:1f:20.0", "0000:1f:00.8", "0000:1f:00", "0000-1f:00.2",
        "../../../../xx", "", "100000000:1f:00.2", "000:1f:00.2", "1000g:1f:00.2"})
    EXPECT_FALSE(isPciAddress(bad)) << bad;
  EXPECT_TRUE(isNvidiaGpuUuid("GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"));
  for (const char* bad :
       {"GPU-1", "GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8dx",
        "GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8 ", "MIG-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"})
    EXPECT_FALSE(isNvidiaGpuUuid(bad)) << bad;
  // koordlet's minor of an RDMA function: ^mlx\d+_(\d+)$.
  EXPECT_EQ(topology::mellanoxMinor("mlx5_0"), 0);
  EXPECT_EQ(topology::mellanoxMinor("mlx5_12"), 12);
  EXPECT_EQ(topology::mellanoxMinor("mlx4_3"), 3);
  for (const char* other : {"rocep24s0", "mlx5_", "mlx_1", "mlx5_1x", "irdma0", "mlx5_bond_0"})
    EXPECT_EQ(topology::mellanoxMinor(other), std::nullopt) << other;
}

TEST(DeviceAllocated, AnotherVendorsGpuIsToldApartFromAnNvidiaOne) {
  topology::Snapshot nvidia_node;
  nvidia_node.gpus.push_back({.address = "0000:1a:00.0", .vendor = "nvidia", .minor = 0});
  topology::Snapshot amd_node;
  amd_node.gpus.push_back({.address = "0000:83:00.0", .vendor = "amd"});
  auto gpu = [](int minor, std::string id) {
    DeviceAllocation d;
    d.minor = minor;
    d.id = std::move(id);
    return d;
  };
  // With an id: an NVIDIA UUID, or the address of one of the node's NVIDIA GPUs.
  EXPECT_TRUE(isNvidiaGpu(gpu(0, "GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"), &amd_node));
  EXPECT_TRUE(isNvidiaGpu(gpu(0, "0000:1a:00.0"), &nvidia_node));
  EXPECT_FALSE(isNvidiaGpu(gpu(0, "0000:83:00.0"), &amd_node));
  EXPECT_FALSE(isNvidiaGpu(gpu(0, "Ascend910-0"), &nvidia_node));
  // Without one: by whether the node has NVIDIA GPUs.
  EXPECT_TRUE(isNvidiaGpu(gpu(0, ""), &nvidia_node));
  EXPECT_FALSE(isNvidiaGpu(gpu(0, ""), &amd_node));
  EXPECT_FALSE(isNvidiaGpu(gpu(0, ""), nullptr));
  EXPECT_EQ(passthroughName(gpu(3, "")), "minor 3");
  EXPECT_EQ(passthroughName(gpu(3, "npu-0")), "npu-0");
  EXPECT_EQ(passthroughName(gpu(3, std::string(100, 'x'))), std::string(61, 'x') + "...");
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xc3\xa9";  // é: cut between characters only
  EXPECT_EQ(passthroughName(gpu(3, accents)), accents.substr(0, 60) + "...");
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
  // A long bad list is cut in the message, not echoed whole.
  std::string long_list = "{\"cpuset\":\"";
  for (int i = 0; i < 5000; ++i) long_list += "0-1,";
  bad = parseResourceStatus(long_list + "x\"}", "ml/a");
  EXPECT_LT(bad.status().message().size(), 200u) << bad.status().message().substr(0, 300);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("got \"0-1,0-1,"));
  bad = parseResourceStatus(R"({"numaNodeResources":[{"resources":{}}]})", "ml/a");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("numaNodeResources[0].node: missing"));
  bad = parseResourceStatus(R"({"numaNodeResources":[{"node":"zero"}]})", "ml/a");
  EXPECT_THAT(
      std::string(bad.status().message()),
      HasSubstr("numaNodeResources[0].node: expected a non-negative integer, got \"zero\""));
}

TEST(ResourceStatus, HostileInputIsRefusedBeforeItIsExpandedOrSerialised) {
  const std::string prefix = "annotation scheduling.koordinator.sh/resource-status of pod ml/a: ";
  const std::string deep =
      R"({"cpuset":)" + std::string(60000, '[') + std::string(60000, ']') + "}";
  EXPECT_EQ(std::string(parseResourceStatus(deep, "ml/a").status().message()),
            prefix + "nested deeper than 16");
  // The text of a CPU list is capped.
  std::string list;
  while (list.size() <= kMaxCpuListBytes) list += "0,";
  EXPECT_EQ(
      std::string(parseResourceStatus(R"({"cpuset":")" + list + "0\"}", "ml/a").status().message()),
      prefix + "cpuset: " + std::to_string(list.size() + 1) +
          " bytes, more than the 65536 a CPU list takes");
  // Against a node: the first CPU beyond its count is named, from the text.
  topology::Snapshot two;
  two.cpus.push_back({.id = 0});
  two.cpus.push_back({.id = 1});
  auto r = parseResourceStatus(R"({"cpuset":"0,5-9,3"})", "ml/a", &two);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(r.status().message()),
            prefix + "cpuset: CPU 3 is beyond this node's 2 CPUs");
  EXPECT_EQ(parseResourceStatus(R"({"cpuset":"0-1"})", "ml/a", &two)->cpuset, "0-1");
  // Without a node, only the form: 65535 is the highest CPU a list may name.
  EXPECT_TRUE(parseResourceStatus(R"({"cpuset":"65535"})", "ml/a").ok());
  EXPECT_EQ(parseResourceStatus(R"({"cpuset":"65536"})", "ml/a").status().code(),
            absl::StatusCode::kInvalidArgument);
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
  // Every suffix, at its own power.
  EXPECT_EQ(parseQuantity("1Ki"), int64_t{1} << 10);
  EXPECT_EQ(parseQuantity("1Ti"), int64_t{1} << 40);
  EXPECT_EQ(parseQuantity("1Pi"), int64_t{1} << 50);
  EXPECT_EQ(parseQuantity("7Ei"), int64_t{7} << 60);
  EXPECT_EQ(parseQuantity("1n"), 1);
  EXPECT_EQ(parseQuantity("1000000000n"), 1);
  EXPECT_EQ(parseQuantity("1000000001n"), 2);
  EXPECT_EQ(parseQuantity("1000000u"), 1);
  EXPECT_EQ(parseQuantity("1001000u"), 2);
  EXPECT_EQ(parseQuantity("3M"), 3000000);
  EXPECT_EQ(parseQuantity("1T"), int64_t{1000000000000});
  EXPECT_EQ(parseQuantity("1P"), int64_t{1000000000000000});
  EXPECT_EQ(parseQuantity("9E"), int64_t{9000000000000000000});
  EXPECT_EQ(parseQuantity("10E"), std::nullopt) << "past int64";
  for (const char* bad :
       {"", "Gi", "abc", "16GB", "1..2", "-1", "8Ei", "1e", "99999999999999999999"})
    EXPECT_EQ(parseQuantity(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace crihook::testing
