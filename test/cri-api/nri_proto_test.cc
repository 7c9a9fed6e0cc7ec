// cri-api/nri_api_v1alpha1.proto and cri-api/ttrpc.proto against NRI's and
// ttrpc's definitions: every message, field (name, number, type, label,
// map), enum value and RPC, walked from the generated descriptors and
// compared both ways with the tables below.
//
// The NRI tables are taken from github.com/containerd/nri pkg/api/api.proto
// at tag v0.8.0 (commit 6d486acd3f71), the revision containerd v2.1.x's
// go.mod requires (Debian unstable's 2.1.9 carries the same descriptor);
// the lines v0.8.0 added to v0.6.1 (commit fa64d110ed4a, containerd
// v1.7.24's, Debian 13's) are marked and listed in kNriAddedSince061, and a
// test checks that they only add to 0.6.1's messages (new numbers above the
// old ones), which keeps the 1.7 runtimes served; ttrpc's from github.com/containerd/ttrpc
// request.proto at v1.2.5 and googleapis' google/rpc/status.proto. To move to another NRI revision,
// change these tables from its file first, then crihook's proto until this test passes.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/ttrpc.pb.h"
#include "test/support/proto_table.h"

namespace crihook::testing {
namespace {

namespace pb = ::google::protobuf;

// "Message.field = number: type" where type is a scalar name, a message or
// enum name, "repeated <type>" or "map<key, value>".
const std::set<std::string> kNriFields = {
    "RegisterPluginRequest.plugin_name = 1: string",
    "RegisterPluginRequest.plugin_idx = 2: string",
    "UpdateContainersRequest.update = 1: repeated ContainerUpdate",
    "UpdateContainersRequest.evict = 2: repeated ContainerEviction",
    "UpdateContainersResponse.failed = 1: repeated ContainerUpdate",
    "ConfigureRequest.config = 1: string",
    "ConfigureRequest.runtime_name = 2: string",
    "ConfigureRequest.runtime_version = 3: string",
    "ConfigureRequest.registration_timeout = 4: int64",  // 0.7
    "ConfigureRequest.request_timeout = 5: int64",       // 0.7
    "ConfigureResponse.events = 2: int32",
    "SynchronizeRequest.pods = 1: repeated PodSandbox",
    "SynchronizeRequest.containers = 2: repeated Container",
    "SynchronizeRequest.more = 3: bool",  // 0.8
    "SynchronizeResponse.update = 1: repeated ContainerUpdate",
    "SynchronizeResponse.more = 2: bool",  // 0.8
    "CreateContainerRequest.pod = 1: PodSandbox",
    "CreateContainerRequest.container = 2: Container",
    "CreateContainerResponse.adjust = 1: ContainerAdjustment",
    "CreateContainerResponse.update = 2: repeated ContainerUpdate",
    "CreateContainerResponse.evict = 3: repeated ContainerEviction",
    "UpdateContainerRequest.pod = 1: PodSandbox",
    "UpdateContainerRequest.container = 2: Container",
    "UpdateContainerRequest.linux_resources = 3: LinuxResources",
    "UpdateContainerResponse.update = 1: repeated ContainerUpdate",
    "UpdateContainerResponse.evict = 2: repeated ContainerEviction",
    "StopContainerRequest.pod = 1: PodSandbox",
    "StopContainerRequest.container = 2: Container",
    "StopContainerResponse.update = 1: repeated ContainerUpdate",
    "StateChangeEvent.event = 1: Event",
    "StateChangeEvent.pod = 2: PodSandbox",
    "StateChangeEvent.container = 3: Container",
    "PodSandbox.id = 1: string",
    "PodSandbox.name = 2: string",
    "PodSandbox.uid = 3: string",
    "PodSandbox.namespace = 4: string",
    "PodSandbox.labels = 5: map<string, string>",
    "PodSandbox.annotations = 6: map<string, string>",
    "PodSandbox.runtime_handler = 7: string",
    "PodSandbox.linux = 8: LinuxPodSandbox",
    "PodSandbox.pid = 9: uint32",
    "PodSandbox.ips = 10: repeated string",  // 0.8
    "LinuxPodSandbox.pod_overhead = 1: LinuxResources",
    "LinuxPodSandbox.pod_resources = 2: LinuxResources",
    "LinuxPodSandbox.cgroup_parent = 3: string",
    "LinuxPodSandbox.cgroups_path = 4: string",
    "LinuxPodSandbox.namespaces = 5: repeated LinuxNamespace",
    "LinuxPodSandbox.resources = 6: LinuxResources",
    "Container.id = 1: string",
    "Container.pod_sandbox_id = 2: string",
    "Container.name = 3: string",
    "Container.state = 4: ContainerState",
    "Container.labels = 5: map<string, string>",
    "Container.annotations = 6: map<string, string>",
    "Container.args = 7: repeated string",
    "Container.env = 8: repeated string",
    "Container.mounts = 9: repeated Mount",
    "Container.hooks = 10: Hooks",
    "Container.linux = 11: LinuxContainer",
    "Container.pid = 12: uint32",
    "Container.rlimits = 13: repeated POSIXRlimit",
    "Mount.destination = 1: string",
    "Mount.type = 2: string",
    "Mount.source = 3: string",
    "Mount.options = 4: repeated string",
    "Hooks.prestart = 1: repeated Hook",
    "Hooks.create_runtime = 2: repeated Hook",
    "Hooks.create_container = 3: repeated Hook",
    "Hooks.start_container = 4: repeated Hook",
    "Hooks.poststart = 5: repeated Hook",
    "Hooks.poststop = 6: repeated Hook",
    "Hook.path = 1: string",
    "Hook.args = 2: repeated string",
    "Hook.env = 3: repeated string",
    "Hook.timeout = 4: OptionalInt",
    "LinuxContainer.namespaces = 1: repeated LinuxNamespace",
    "LinuxContainer.devices = 2: repeated LinuxDevice",
    "LinuxContainer.resources = 3: LinuxResources",
    "LinuxContainer.oom_score_adj = 4: OptionalInt",
    "LinuxContainer.cgroups_path = 5: string",
    "LinuxNamespace.type = 1: string",
    "LinuxNamespace.path = 2: string",
    "LinuxDevice.path = 1: string",
    "LinuxDevice.type = 2: string",
    "LinuxDevice.major = 3: int64",
    "LinuxDevice.minor = 4: int64",
    "LinuxDevice.file_mode = 5: OptionalFileMode",
    "LinuxDevice.uid = 6: OptionalUInt32",
    "LinuxDevice.gid = 7: OptionalUInt32",
    "LinuxDeviceCgroup.allow = 1: bool",
    "LinuxDeviceCgroup.type = 2: string",
    "LinuxDeviceCgroup.major = 3: OptionalInt64",
    "LinuxDeviceCgroup.minor = 4: OptionalInt64",
    "LinuxDeviceCgroup.access = 5: string",
    "LinuxResources.memory = 1: LinuxMemory",
    "LinuxResources.cpu = 2: LinuxCPU",
    "LinuxResources.hugepage_limits = 3: repeated HugepageLimit",
    "LinuxResources.blockio_class = 4: OptionalString",
    "LinuxResources.rdt_class = 5: OptionalString",
    "LinuxResources.unified = 6: map<string, string>",
    "LinuxResources.devices = 7: repeated LinuxDeviceCgroup",
    "LinuxResources.pids = 8: LinuxPids",  // 0.7
    "LinuxPids.limit = 1: int64",          // 0.7
    "LinuxMemory.limit = 1: OptionalInt64",
    "LinuxMemory.reservation = 2: OptionalInt64",
    "LinuxMemory.swap = 3: OptionalInt64",
    "LinuxMemory.kernel = 4: OptionalInt64",
    "LinuxMemory.kernel_tcp = 5: OptionalInt64",
    "LinuxMemory.swappiness = 6: OptionalUInt64",
    "LinuxMemory.disable_oom_killer = 7: OptionalBool",
    "LinuxMemory.use_hierarchy = 8: OptionalBool",
    "LinuxCPU.shares = 1: OptionalUInt64",
    "LinuxCPU.quota = 2: OptionalInt64",
    "LinuxCPU.period = 3: OptionalUInt64",
    "LinuxCPU.realtime_runtime = 4: OptionalInt64",
    "LinuxCPU.realtime_period = 5: OptionalUInt64",
    "LinuxCPU.cpus = 6: string",
    "LinuxCPU.mems = 7: string",
    "HugepageLimit.page_size = 1: string",
    "HugepageLimit.limit = 2: uint64",
    "POSIXRlimit.type = 1: string",
    "POSIXRlimit.hard = 2: uint64",
    "POSIXRlimit.soft = 3: uint64",
    "ContainerAdjustment.annotations = 2: map<string, string>",
    "ContainerAdjustment.mounts = 3: repeated Mount",
    "ContainerAdjustment.env = 4: repeated KeyValue",
    "ContainerAdjustment.hooks = 5: Hooks",
    "ContainerAdjustment.linux = 6: LinuxContainerAdjustment",
    "ContainerAdjustment.rlimits = 7: repeated POSIXRlimit",
    "ContainerAdjustment.CDI_devices = 8: repeated CDIDevice",  // 0.7
    "CDIDevice.name = 1: string",                               // 0.7
    "LinuxContainerAdjustment.devices = 1: repeated LinuxDevice",
    "LinuxContainerAdjustment.resources = 2: LinuxResources",
    "LinuxContainerAdjustment.cgroups_path = 3: string",
    "LinuxContainerAdjustment.oom_score_adj = 4: OptionalInt",  // 0.7
    "ContainerUpdate.container_id = 1: string",
    "ContainerUpdate.linux = 2: LinuxContainerUpdate",
    "ContainerUpdate.ignore_failure = 3: bool",
    "LinuxContainerUpdate.resources = 1: LinuxResources",
    "ContainerEviction.container_id = 1: string",
    "ContainerEviction.reason = 2: string",
    "KeyValue.key = 1: string",
    "KeyValue.value = 2: string",
    "OptionalString.value = 1: string",
    "OptionalInt.value = 1: int64",
    "OptionalInt32.value = 1: int32",
    "OptionalUInt32.value = 1: uint32",
    "OptionalInt64.value = 1: int64",
    "OptionalUInt64.value = 1: uint64",
    "OptionalBool.value = 1: bool",
    "OptionalFileMode.value = 1: uint32",
};

// The lines of kNriFields that NRI v0.7.0 and v0.8.0 added to v0.6.1 (git
// diff v0.6.1 v0.8.0 -- pkg/api/api.proto): the rest is 0.6.1's table.
const std::set<std::string> kNriAddedSince061 = {
    "ConfigureRequest.registration_timeout = 4: int64",
    "ConfigureRequest.request_timeout = 5: int64",
    "SynchronizeRequest.more = 3: bool",
    "SynchronizeResponse.more = 2: bool",
    "PodSandbox.ips = 10: repeated string",
    "LinuxResources.pids = 8: LinuxPids",
    "LinuxPids.limit = 1: int64",
    "ContainerAdjustment.CDI_devices = 8: repeated CDIDevice",
    "CDIDevice.name = 1: string",
    "LinuxContainerAdjustment.oom_score_adj = 4: OptionalInt",
};

// "Enum.VALUE = number".
const std::set<std::string> kNriEnumValues = {
    "Event.UNKNOWN = 0",
    "Event.RUN_POD_SANDBOX = 1",
    "Event.STOP_POD_SANDBOX = 2",
    "Event.REMOVE_POD_SANDBOX = 3",
    "Event.CREATE_CONTAINER = 4",
    "Event.POST_CREATE_CONTAINER = 5",
    "Event.START_CONTAINER = 6",
    "Event.POST_START_CONTAINER = 7",
    "Event.UPDATE_CONTAINER = 8",
    "Event.POST_UPDATE_CONTAINER = 9",
    "Event.STOP_CONTAINER = 10",
    "Event.REMOVE_CONTAINER = 11",
    "Event.LAST = 12",
    "ContainerState.CONTAINER_UNKNOWN = 0",
    "ContainerState.CONTAINER_CREATED = 1",
    "ContainerState.CONTAINER_PAUSED = 2",
    "ContainerState.CONTAINER_RUNNING = 3",
    "ContainerState.CONTAINER_STOPPED = 4",
};

// "Service.Method(Input) returns (Output)", none streaming.
const std::set<std::string> kNriMethods = {
    "Runtime.RegisterPlugin(RegisterPluginRequest) returns (Empty)",
    "Runtime.UpdateContainers(UpdateContainersRequest) returns (UpdateContainersResponse)",
    "Plugin.Configure(ConfigureRequest) returns (ConfigureResponse)",
    "Plugin.Synchronize(SynchronizeRequest) returns (SynchronizeResponse)",
    "Plugin.Shutdown(Empty) returns (Empty)",
    "Plugin.CreateContainer(CreateContainerRequest) returns (CreateContainerResponse)",
    "Plugin.UpdateContainer(UpdateContainerRequest) returns (UpdateContainerResponse)",
    "Plugin.StopContainer(StopContainerRequest) returns (StopContainerResponse)",
    "Plugin.StateChange(StateChangeEvent) returns (Empty)",
};

const std::set<std::string> kTtrpcFields = {
    "Request.service = 1: string",
    "Request.method = 2: string",
    "Request.payload = 3: bytes",
    "Request.timeout_nano = 4: int64",
    "Request.metadata = 5: repeated KeyValue",
    "Response.status = 1: Status",
    "Response.payload = 2: bytes",
    "KeyValue.key = 1: string",
    "KeyValue.value = 2: string",
    "Status.code = 1: int32",
    "Status.message = 2: string",
    "Status.details = 3: repeated Any",
};

const pb::FileDescriptor& nriFile() {
  return *::nri::pkg::api::v1alpha1::ContainerAdjustment::descriptor()->file();
}

TEST(NriProtoTest, FilesAreTheirPackagesInProto3) {
  EXPECT_EQ(nriFile().package(), "nri.pkg.api.v1alpha1");
  EXPECT_EQ(nriFile().syntax(), pb::FileDescriptor::SYNTAX_PROTO3);
  EXPECT_EQ(nriFile().extension_count(), 0);
  const pb::FileDescriptor& ttrpc = *::ttrpc::Request::descriptor()->file();
  EXPECT_EQ(ttrpc.package(), "ttrpc");
  EXPECT_EQ(ttrpc.syntax(), pb::FileDescriptor::SYNTAX_PROTO3);
}

TEST(NriProtoTest, EveryMessageAndFieldMatchesNris) {
  expectSameLines(kNriFields, protoFieldsOf(nriFile()), "NRI v0.8.0");
}

// A 0.6.1 peer skips what 0.8.0 added only if no added field takes a
// number 0.6.1 used (or left free on purpose: field 1 of ConfigureResponse
// and ContainerAdjustment) in a message 0.6.1 has.
TEST(NriProtoTest, WhatNri08AddedOnlyExtends061) {
  std::map<std::string, int> highest_061;  // message -> its highest 0.6.1 number
  for (const auto& line : kNriFields) {
    if (kNriAddedSince061.count(line)) continue;
    const std::string message = line.substr(0, line.find('.'));
    const int number = std::stoi(line.substr(line.find(" = ") + 3));
    highest_061[message] = std::max(highest_061[message], number);
  }
  int extended = 0;
  for (const auto& line : kNriAddedSince061) {
    ASSERT_TRUE(kNriFields.count(line)) << line;
    const std::string message = line.substr(0, line.find('.'));
    const int number = std::stoi(line.substr(line.find(" = ") + 3));
    auto it = highest_061.find(message);
    if (it == highest_061.end()) continue;  // a message 0.6.1 lacks
    ++extended;
    EXPECT_GT(number, it->second) << line << ": 0.6.1's " << message << " goes up to "
                                  << it->second;
  }
  EXPECT_EQ(extended, 8);  // all but LinuxPids and CDIDevice, new in 0.7
}

TEST(NriProtoTest, EveryEnumValueMatchesNris) {
  std::set<std::string> ours;
  for (int e = 0; e < nriFile().enum_type_count(); ++e) {
    const pb::EnumDescriptor& en = *nriFile().enum_type(e);
    for (int v = 0; v < en.value_count(); ++v)
      ours.insert(en.name() + "." + en.value(v)->name() + " = " +
                  std::to_string(en.value(v)->number()));
  }
  expectSameLines(kNriEnumValues, ours, "NRI v0.8.0");
}

TEST(NriProtoTest, EveryRpcMatchesNris) {
  // ttrpc names a service by its full name: "nri.pkg.api.v1alpha1.Plugin".
  for (int s = 0; s < nriFile().service_count(); ++s)
    EXPECT_EQ(nriFile().service(s)->full_name(),
              "nri.pkg.api.v1alpha1." + nriFile().service(s)->name());
  expectSameLines(kNriMethods, protoMethodsOf(nriFile()), "NRI v0.8.0");
}

TEST(NriProtoTest, TtrpcsEnvelopeMatchesTtrpcs) {
  expectSameLines(kTtrpcFields, protoFieldsOf(*::ttrpc::Request::descriptor()->file()),
                  "ttrpc v1.2.5");
}

}  // namespace
}  // namespace crihook::testing
