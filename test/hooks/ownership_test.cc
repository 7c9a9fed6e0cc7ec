// ownership.h: two hooks' values that are one decision in two spellings
// (GPUs by minor, UUID or address; cpusets by their CPUs), and the class of
// each field ([hooks.owners]). How the chain uses them beside koordlet is
// chain_test's BesideKoordletTest.
#include "hooks/ownership.h"

#include <gtest/gtest.h>

#include "base/text.h"
#include "test/hooks/two_gpus.h"

namespace crihook {
namespace {

using testing::kUuids;
using testing::twoGpus;

TEST(SameDecision, GpusByMinorUuidOrAddressCpusetsByTheirCpus) {
  auto topo = twoGpus();
  const FieldKey visible{Field::kEnv, "NVIDIA_VISIBLE_DEVICES"};
  EXPECT_TRUE(sameDecision(visible, "2,3", kUuids, topo.get()));
  EXPECT_TRUE(sameDecision(visible, "3,2", kUuids, topo.get()));  // a set: CUDA orders by bus
  EXPECT_TRUE(sameDecision(visible, "0000:12:00.0, 3", kUuids, topo.get()));
  EXPECT_FALSE(sameDecision(visible, "2", kUuids, topo.get()));
  EXPECT_TRUE(sameDecision(visible, "2,4", "4,2", nullptr));    // the same entries, reordered
  EXPECT_FALSE(sameDecision(visible, "2,3", kUuids, nullptr));  // no node: spelling only
  EXPECT_FALSE(sameDecision(visible, "all", kUuids, topo.get()));
  EXPECT_FALSE(sameDecision(visible, "9,3", "GPU-x,3", topo.get()));  // neither names a GPU here
  EXPECT_FALSE(sameDecision(visible, "2,3", "<removed>", topo.get()));
  // Numbers mean minors only for the one variable the scheduler's minors go to.
  EXPECT_FALSE(sameDecision({Field::kEnv, "CUDA_VISIBLE_DEVICES"}, "2,3", kUuids, topo.get()));
  EXPECT_TRUE(sameDecision({Field::kCpusetCpus, ""}, "0-3,8", "8,2,3,0-1", nullptr));
  EXPECT_TRUE(sameDecision({Field::kCpusetMems, ""}, "0,1", "0-1", nullptr));
  EXPECT_FALSE(sameDecision({Field::kCpusetCpus, ""}, "0-3", "0-4", nullptr));
  EXPECT_FALSE(sameDecision({Field::kCpusetCpus, ""}, "0-3", "three", nullptr));
  EXPECT_FALSE(sameDecision({Field::kCpuQuota, ""}, "-1", "-01", nullptr));
}

TEST(OwnerClassOf, EachFieldHasTheClassTheReadmeGivesIt) {
  EXPECT_EQ(ownerClassOf({Field::kEnv, "NVIDIA_VISIBLE_DEVICES"}), OwnerClass::kDeviceEnv);
  EXPECT_EQ(ownerClassOf({Field::kEnv, "CUDA_DEVICE_MEMORY_LIMIT_1"}), OwnerClass::kDeviceEnv);
  EXPECT_EQ(ownerClassOf({Field::kEnv, "CUDA_DEVICE_MEMORY_LIMIT_x"}), OwnerClass::kOther);
  EXPECT_EQ(ownerClassOf({Field::kEnv, "LD_PRELOAD"}), OwnerClass::kDeviceEnv);
  EXPECT_EQ(ownerClassOf({Field::kEnv, "HF_HOME"}), OwnerClass::kOther);
  EXPECT_EQ(ownerClassOf({Field::kDevice, "/dev/nvidia2"}), OwnerClass::kDeviceEnv);
  EXPECT_EQ(ownerClassOf({Field::kCpusetMems, ""}), OwnerClass::kCpuset);
  EXPECT_EQ(ownerClassOf({Field::kCpuShares, ""}), OwnerClass::kResources);
  EXPECT_EQ(ownerClassOf({Field::kUnified, "memory.high"}), OwnerClass::kResources);
  EXPECT_EQ(ownerClassOf({Field::kAnnotation, "a"}), OwnerClass::kOther);
  EXPECT_EQ(ownerClassOf({Field::kCgroupParent, ""}), OwnerClass::kOther);
}

}  // namespace
}  // namespace crihook
