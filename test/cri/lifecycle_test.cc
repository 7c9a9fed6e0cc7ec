#include "cri/lifecycle.h"

#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

TEST(Lifecycle, TheEightLifecycleCallsOnBothApiVersions) {
  const char* names[] = {"RunPodSandbox",   "StopPodSandbox",          "RemovePodSandbox",
                         "CreateContainer", "StartContainer",          "StopContainer",
                         "RemoveContainer", "UpdateContainerResources"};
  for (const char* name : names) {
    for (auto [prefix, api] : {std::pair{"/runtime.v1.RuntimeService/", CriApi::kV1},
                               std::pair{"/runtime.v1alpha2.RuntimeService/", CriApi::kV1alpha2}}) {
      auto m = findInterceptedMethod(std::string(prefix) + name);
      ASSERT_TRUE(m.has_value()) << prefix << name;
      EXPECT_EQ(methodName(m->spec->method), name);
      EXPECT_EQ(m->api, api);
      EXPECT_EQ(m->spec->newRequest()->GetDescriptor()->name(), std::string(name) + "Request");
      EXPECT_EQ(m->spec->newResponse()->GetDescriptor()->name(), std::string(name) + "Response");
    }
  }
}

TEST(Lifecycle, EveryRowSitsAtItsMethodsIndex) {
  ASSERT_EQ(lifecycleSpecs().size(), kLifecycleMethods);
  for (size_t i = 0; i < kLifecycleMethods; ++i) {
    const auto method = static_cast<LifecycleMethod>(i);
    EXPECT_EQ(specOf(method).method, method) << i;
    EXPECT_EQ(&specOf(method), &lifecycleSpecs()[i]);
  }
  EXPECT_EQ(stageName(LifecycleMethod::kCreateContainer, Phase::kPre), "PreCreateContainer");
  EXPECT_EQ(stageName(LifecycleMethod::kStopPodSandbox, Phase::kPost), "PostStopPodSandbox");
}

TEST(Lifecycle, EverythingElsePassesThrough) {
  for (const char* path :
       {"/runtime.v1.RuntimeService/Version", "/runtime.v1.RuntimeService/ListContainers",
        "/runtime.v1.ImageService/PullImage", "/runtime.v1.RuntimeService/CreateContainerX",
        "/runtime.v1.ImageService/CreateContainer", "/runtime.v2.RuntimeService/CreateContainer",
        "", "/"}) {
    EXPECT_FALSE(findInterceptedMethod(path).has_value()) << path;
  }
}

// Each row reads the ids and configurations from the fields that carry them.
TEST(Lifecycle, EachRowReadsItsOwnFields) {
  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_namespace_("ml");
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  run.mutable_config()->mutable_metadata()->set_uid("u1");
  CallIdentity id = identityFromRequest(specOf(LifecycleMethod::kRunPodSandbox), run);
  EXPECT_EQ(id.pod_namespace, "ml");
  EXPECT_EQ(id.pod_name, "train-0");
  EXPECT_EQ(id.pod_uid, "u1");
  EXPECT_EQ(id.sandbox_id, "");
  v1::RunPodSandboxResponse ran;
  ran.set_pod_sandbox_id("sb1");
  run.set_runtime_handler("nvidia");
  EXPECT_EQ(specOf(LifecycleMethod::kRunPodSandbox).runtimeHandler(run), "nvidia");
  EXPECT_EQ(specOf(LifecycleMethod::kRunPodSandbox).createdId(ran), "sb1");
  noteCreatedId(specOf(LifecycleMethod::kRunPodSandbox), ran, id);
  EXPECT_EQ(id.sandbox_id, "sb1");
  EXPECT_EQ(specOf(LifecycleMethod::kRunPodSandbox).mutableSandboxConfig(run),
            run.mutable_config());

  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id("sb1");
  create.mutable_sandbox_config()->mutable_metadata()->set_name("train-0");
  create.mutable_config()->mutable_metadata()->set_name("trainer");
  const LifecycleSpec& c = specOf(LifecycleMethod::kCreateContainer);
  id = identityFromRequest(c, create);
  EXPECT_EQ(id.sandbox_id, "sb1");
  EXPECT_EQ(id.pod_name, "train-0");
  EXPECT_EQ(id.container_name, "trainer");
  EXPECT_EQ(c.mutableContainerConfig(create), create.mutable_config());
  EXPECT_EQ(c.mutableSandboxConfig(create), create.mutable_sandbox_config());
  EXPECT_EQ(c.mutableResources, nullptr);
  v1::CreateContainerResponse created;
  created.set_container_id("ct1");
  EXPECT_EQ(c.createdId(created), "ct1");
  noteCreatedId(c, created, id);
  EXPECT_EQ(id.container_id, "ct1");
  EXPECT_EQ(id.sandbox_id, "sb1") << "a container's creation leaves its sandbox id";

  v1::StopPodSandboxRequest stop_pod;
  stop_pod.set_pod_sandbox_id("sb2");
  EXPECT_EQ(identityFromRequest(specOf(LifecycleMethod::kStopPodSandbox), stop_pod).sandbox_id,
            "sb2");
  v1::RemovePodSandboxRequest remove_pod;
  remove_pod.set_pod_sandbox_id("sb3");
  EXPECT_EQ(specOf(LifecycleMethod::kRemovePodSandbox).sandboxId(remove_pod), "sb3");
  EXPECT_EQ(specOf(LifecycleMethod::kRemovePodSandbox).effect, Effect::kRemovesSandbox);

  v1::StartContainerRequest start;
  start.set_container_id("c-start");
  EXPECT_EQ(specOf(LifecycleMethod::kStartContainer).containerId(start), "c-start");
  v1::StopContainerRequest stop;
  stop.set_container_id("c-stop");
  EXPECT_EQ(specOf(LifecycleMethod::kStopContainer).containerId(stop), "c-stop");
  v1::RemoveContainerRequest remove;
  remove.set_container_id("c-rm");
  EXPECT_EQ(specOf(LifecycleMethod::kRemoveContainer).containerId(remove), "c-rm");
  EXPECT_EQ(specOf(LifecycleMethod::kRemoveContainer).effect, Effect::kRemovesContainer);
  v1::UpdateContainerResourcesRequest update;
  update.set_container_id("c-up");
  const LifecycleSpec& u = specOf(LifecycleMethod::kUpdateContainerResources);
  EXPECT_EQ(u.containerId(update), "c-up");
  EXPECT_EQ(u.mutableResources(update), update.mutable_linux());
  EXPECT_EQ(u.mutableContainerConfig, nullptr);
  EXPECT_EQ(u.podConfig, nullptr);
  EXPECT_EQ(u.sandboxId(update), "");
}

}  // namespace
}  // namespace crihook
