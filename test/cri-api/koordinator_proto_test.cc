// cri-api/koordinator_runtime_v1alpha1.proto against Koordinator's definition:
// every message, field (name, number, type, label, map) and RPC, walked from
// the generated descriptors and compared both ways with the table below.
//
// The table is written from Koordinator's apis/runtime/v1alpha1/api.proto at
// commit a7a1b76bbf81abd26f9c377de1f31a60dd965f6e (the file last changed in
// 3c2b6ef3039ad5495e46f37ef0b8b5e62f6b7873, 2022-08-18). When Koordinator
// changes its proto, change this table from theirs first, then crihook's
// proto until this test passes.

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cri-api/koordinator_runtime_v1alpha1.grpc.pb.h"
#include "test/support/proto_table.h"

namespace crihook::testing {
namespace {

namespace pb = ::google::protobuf;

// "Message.field = number: type" where type is a scalar name, a message name,
// "repeated <type>" or "map<key, value>".
const std::set<std::string> kKoordinatorFields = {
    "PodSandboxMetadata.name = 1: string",
    "PodSandboxMetadata.uid = 2: string",
    "PodSandboxMetadata.namespace = 3: string",
    "PodSandboxMetadata.attempt = 4: uint32",

    "PodSandboxHookRequest.pod_meta = 1: PodSandboxMetadata",
    "PodSandboxHookRequest.runtime_handler = 2: string",
    "PodSandboxHookRequest.labels = 3: map<string, string>",
    "PodSandboxHookRequest.annotations = 4: map<string, string>",
    "PodSandboxHookRequest.cgroup_parent = 5: string",
    "PodSandboxHookRequest.overhead = 6: LinuxContainerResources",
    "PodSandboxHookRequest.resources = 7: LinuxContainerResources",

    "PodSandboxHookResponse.labels = 1: map<string, string>",
    "PodSandboxHookResponse.annotations = 2: map<string, string>",
    "PodSandboxHookResponse.cgroup_parent = 3: string",
    "PodSandboxHookResponse.resources = 4: LinuxContainerResources",

    "LinuxContainerResources.cpu_period = 1: int64",
    "LinuxContainerResources.cpu_quota = 2: int64",
    "LinuxContainerResources.cpu_shares = 3: int64",
    "LinuxContainerResources.memory_limit_in_bytes = 4: int64",
    "LinuxContainerResources.oom_score_adj = 5: int64",
    "LinuxContainerResources.cpuset_cpus = 6: string",
    "LinuxContainerResources.cpuset_mems = 7: string",
    "LinuxContainerResources.hugepage_limits = 8: repeated HugepageLimit",
    "LinuxContainerResources.unified = 9: map<string, string>",
    "LinuxContainerResources.memory_swap_limit_in_bytes = 10: int64",

    "HugepageLimit.page_size = 1: string",
    "HugepageLimit.limit = 2: uint64",

    "ContainerMetadata.name = 1: string",
    "ContainerMetadata.attempt = 2: uint32",
    "ContainerMetadata.id = 3: string",

    "ContainerResourceHookRequest.pod_meta = 1: PodSandboxMetadata",
    "ContainerResourceHookRequest.container_meta = 2: ContainerMetadata",
    "ContainerResourceHookRequest.container_annotations = 3: map<string, string>",
    "ContainerResourceHookRequest.container_resources = 4: LinuxContainerResources",
    "ContainerResourceHookRequest.pod_resources = 5: LinuxContainerResources",
    "ContainerResourceHookRequest.pod_annotations = 6: map<string, string>",
    "ContainerResourceHookRequest.pod_labels = 7: map<string, string>",
    "ContainerResourceHookRequest.pod_cgroup_parent = 8: string",
    "ContainerResourceHookRequest.container_envs = 9: map<string, string>",

    "ContainerResourceHookResponse.container_annotations = 1: map<string, string>",
    "ContainerResourceHookResponse.container_resources = 2: LinuxContainerResources",
    "ContainerResourceHookResponse.pod_cgroup_parent = 3: string",
    "ContainerResourceHookResponse.container_envs = 4: map<string, string>",
};

// "Service.Method(Input) returns (Output)", none streaming.
const std::set<std::string> kKoordinatorMethods = {
    "RuntimeHookService.PreRunPodSandboxHook(PodSandboxHookRequest) returns "
    "(PodSandboxHookResponse)",
    "RuntimeHookService.PostStopPodSandboxHook(PodSandboxHookRequest) returns "
    "(PodSandboxHookResponse)",
    "RuntimeHookService.PreCreateContainerHook(ContainerResourceHookRequest) returns "
    "(ContainerResourceHookResponse)",
    "RuntimeHookService.PreStartContainerHook(ContainerResourceHookRequest) returns "
    "(ContainerResourceHookResponse)",
    "RuntimeHookService.PostStartContainerHook(ContainerResourceHookRequest) returns "
    "(ContainerResourceHookResponse)",
    "RuntimeHookService.PostStopContainerHook(ContainerResourceHookRequest) returns "
    "(ContainerResourceHookResponse)",
    "RuntimeHookService.PreUpdateContainerResourcesHook(ContainerResourceHookRequest) returns "
    "(ContainerResourceHookResponse)",
};

const pb::FileDescriptor& protoFile() {
  return *::runtime::v1alpha1::ContainerResourceHookRequest::descriptor()->file();
}

TEST(KoordinatorProtoTest, FileIsKoordinatorsPackageInProto3) {
  EXPECT_EQ(protoFile().package(), "runtime.v1alpha1");
  EXPECT_EQ(protoFile().syntax(), pb::FileDescriptor::SYNTAX_PROTO3);
  EXPECT_EQ(protoFile().enum_type_count(), 0);
  EXPECT_EQ(protoFile().extension_count(), 0);
}

TEST(KoordinatorProtoTest, EveryMessageAndFieldMatchesKoordinators) {
  expectSameLines(kKoordinatorFields, protoFieldsOf(protoFile()), "Koordinator");
}

TEST(KoordinatorProtoTest, EveryRpcMatchesKoordinators) {
  expectSameLines(kKoordinatorMethods, protoMethodsOf(protoFile()), "Koordinator");
}

}  // namespace
}  // namespace crihook::testing
