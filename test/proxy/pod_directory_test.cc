#include "proxy/pod_directory.h"

#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

TEST(PodDirectory, LaterCallsFindThePodOfTheirContainer) {
  PodDirectory pods;
  v1::RunPodSandboxRequest run;
  run.mutable_config()->mutable_metadata()->set_namespace_("ml");
  run.mutable_config()->mutable_metadata()->set_name("train-0");
  const LifecycleSpec& run_spec = specOf(LifecycleMethod::kRunPodSandbox);
  CallIdentity pod = identityOf(run_spec, run, pods);
  EXPECT_EQ(pod.pod_name, "train-0");
  v1::RunPodSandboxResponse ran;
  ran.set_pod_sandbox_id("sb1");
  recordOutcome(run_spec, pod, ran, pods);
  EXPECT_EQ(pod.sandbox_id, "sb1");

  v1::CreateContainerRequest create;
  create.set_pod_sandbox_id("sb1");
  create.mutable_config()->mutable_metadata()->set_name("trainer");
  const LifecycleSpec& create_spec = specOf(LifecycleMethod::kCreateContainer);
  CallIdentity c = identityOf(create_spec, create, pods);
  EXPECT_EQ(c.pod_namespace, "ml");
  v1::CreateContainerResponse created;
  created.set_container_id("ct1");
  recordOutcome(create_spec, c, created, pods);

  v1::StopContainerRequest stop;
  stop.set_container_id("ct1");
  const LifecycleSpec& stop_spec = specOf(LifecycleMethod::kStopContainer);
  CallIdentity s = identityOf(stop_spec, stop, pods);
  EXPECT_EQ(s.pod_namespace, "ml");
  EXPECT_EQ(s.pod_name, "train-0");
  EXPECT_EQ(s.sandbox_id, "sb1");
  EXPECT_EQ(s.container_name, "trainer");

  recordOutcome(specOf(LifecycleMethod::kRemovePodSandbox), pod, v1::RemovePodSandboxResponse(),
                pods);
  EXPECT_EQ(pods.size(), 0u) << "removing a sandbox forgets its containers";
  CallIdentity gone = identityOf(stop_spec, stop, pods);
  EXPECT_TRUE(gone.pod_name.empty());
}

}  // namespace
}  // namespace crihook
