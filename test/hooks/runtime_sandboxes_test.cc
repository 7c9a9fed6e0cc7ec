// hooks/runtime_sandboxes.h: the runtime's sandboxes, listed over v1 or
// v1alpha2 from a fake runtime (moved here from the device-lifecycle hook's
// test, its one user).

#include "hooks/runtime_sandboxes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;

TEST(RuntimeSandboxes, AreListedOverV1OrV1alpha2) {
  TempDir dir;
  FakeCriServer runtime(dir.file("runtime.sock"));
  v1::ListPodSandboxResponse list;
  auto* item = list.add_items();
  item->set_id("sb-1");
  item->set_state(v1::SANDBOX_NOTREADY);
  item->mutable_metadata()->set_uid("uid-1");
  item->mutable_metadata()->set_namespace_("ml");
  item->mutable_metadata()->set_name("train-0");
  item->mutable_metadata()->set_attempt(2);
  auto answer = [&](FakeCall&, std::string* out) {
    *out = list.SerializeAsString();
    return grpc::Status::OK;
  };
  // An old runtime: v1 is UNIMPLEMENTED, v1alpha2 answers.
  runtime.onUnary("/runtime.v1alpha2.RuntimeService/ListPodSandbox", answer);
  runtime.start();
  const std::string endpoint = "unix://" + dir.file("runtime.sock");
  auto got = listRuntimeSandboxes(endpoint, std::chrono::seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].id, "sb-1");
  EXPECT_EQ((*got)[0].uid, "uid-1");
  EXPECT_EQ((*got)[0].name, "train-0");
  EXPECT_EQ((*got)[0].attempt, 2u);
  EXPECT_FALSE((*got)[0].ready);
  runtime.onUnary("/runtime.v1.RuntimeService/ListPodSandbox", answer);
  ASSERT_TRUE(listRuntimeSandboxes(endpoint, std::chrono::seconds(5)).ok());
  EXPECT_EQ(runtime.callCount("/runtime.v1alpha2.RuntimeService/ListPodSandbox"), 1u);
  runtime.stop();
  auto down = listRuntimeSandboxes(endpoint, std::chrono::seconds(5));
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("ListPodSandbox on " + endpoint));
}

}  // namespace
}  // namespace crihook::testing
