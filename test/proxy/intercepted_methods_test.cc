#include "intercepted_methods.h"

#include <gtest/gtest.h>

#include "runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

TEST(InterceptedMethods, TheEightLifecycleCallsOnBothApiVersions) {
  const char* names[] = {"RunPodSandbox",   "StopPodSandbox",          "RemovePodSandbox",
                         "CreateContainer", "StartContainer",          "StopContainer",
                         "RemoveContainer", "UpdateContainerResources"};
  for (const char* name : names) {
    for (auto [prefix, api] : {std::pair{"/runtime.v1.RuntimeService/", CriApi::kV1},
                               std::pair{"/runtime.v1alpha2.RuntimeService/", CriApi::kV1alpha2}}) {
      const InterceptedMethod* m = findInterceptedMethod(std::string(prefix) + name);
      ASSERT_NE(m, nullptr) << prefix << name;
      EXPECT_EQ(methodName(m->method), name);
      EXPECT_EQ(m->api, api);
      EXPECT_EQ(m->newRequest()->GetDescriptor()->name(), std::string(name) + "Request");
      EXPECT_EQ(m->newResponse()->GetDescriptor()->name(), std::string(name) + "Response");
    }
  }
}

TEST(InterceptedMethods, EverythingElsePassesThrough) {
  for (const char* path :
       {"/runtime.v1.RuntimeService/Version", "/runtime.v1.RuntimeService/ListContainers",
        "/runtime.v1.ImageService/PullImage", "/runtime.v1.RuntimeService/CreateContainerX",
        "/runtime.v1.ImageService/CreateContainer", "/runtime.v2.RuntimeService/CreateContainer",
        "", "/"}) {
    EXPECT_EQ(findInterceptedMethod(path), nullptr) << path;
  }
}

TEST(Identity, LaterCallsFindThePodOfTheirContainer) {
  PodDirectory pods;
  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_namespace_("ml");
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  CallIdentity pod = identityOf(LifecycleMethod::kRunPodSandbox, run, pods);
  EXPECT_EQ(pod.pod_name, "train-0");
  v1::RunPodSandboxResponse ran;
  ran.set_pod_sandbox_id("sb1");
  recordOutcome(LifecycleMethod::kRunPodSandbox, pod, ran, pods);
  EXPECT_EQ(pod.sandbox_id, "sb1");

  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id("sb1");
  create.mutable_config()->mutable_metadata()->set_name("trainer");
  CallIdentity c = identityOf(LifecycleMethod::kCreateContainer, create, pods);
  EXPECT_EQ(c.pod_namespace, "ml");
  v1::CreateContainerResponse created;
  created.set_container_id("ct1");
  recordOutcome(LifecycleMethod::kCreateContainer, c, created, pods);

  v1::StopContainerRequest stop;
  stop.set_container_id("ct1");
  CallIdentity s = identityOf(LifecycleMethod::kStopContainer, stop, pods);
  EXPECT_EQ(s.pod_namespace, "ml");
  EXPECT_EQ(s.pod_name, "train-0");
  EXPECT_EQ(s.sandbox_id, "sb1");
  EXPECT_EQ(s.container_name, "trainer");

  recordOutcome(LifecycleMethod::kRemovePodSandbox, pod, v1::RemovePodSandboxResponse(), pods);
  EXPECT_EQ(pods.size(), 0u) << "removing a sandbox forgets its containers";
  CallIdentity gone = identityOf(LifecycleMethod::kStopContainer, stop, pods);
  EXPECT_TRUE(gone.pod_name.empty());
}

}  // namespace
}  // namespace crihook
