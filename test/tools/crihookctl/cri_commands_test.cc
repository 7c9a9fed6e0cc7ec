#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/fake_cri_server.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;

class CrihookctlAgainstFake : public ::testing::Test {
 protected:
  CrihookctlAgainstFake() : backend_(dir_.file("cri.sock")) {}
  std::vector<std::string> with(std::vector<std::string> args) {
    args.insert(args.begin(), {"-r", "unix://" + dir_.file("cri.sock")});
    return args;
  }
  TempDir dir_;
  FakeCriServer backend_;
};

TEST_F(CrihookctlAgainstFake, RunpReadsCrictlStylePodConfig) {
  backend_.onUnary("/runtime.v1.RuntimeService/RunPodSandbox", [](FakeCall& call,
                                                                  std::string* out) {
    v1::RunPodSandboxRequest req;
    req.ParseFromString(call.request);
    v1::RunPodSandboxResponse resp;
    resp.set_pod_sandbox_id("sb-" + req.config().metadata().namespace_() + "-" +
                            req.config().metadata().name() + "-" + req.config().log_directory());
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  std::ofstream(dir_.file("pod.json"))
      << R"({"metadata":{"name":"nginx-sandbox","namespace":"default","attempt":1,"uid":"u1"},"log_directory":"/tmp","linux":{}})";
  Result r = ctl(with({"runp", dir_.file("pod.json")}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-default-nginx-sandbox-/tmp\n");
}

TEST_F(CrihookctlAgainstFake, BadConfigNamesTheFile) {
  backend_.start();
  std::ofstream(dir_.file("pod.json")) << R"({"metadata":{"name":5, "bogus":1}})";
  Result r = ctl(with({"runp", dir_.file("pod.json")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(dir_.file("pod.json")));
  EXPECT_THAT(r.err, HasSubstr("runtime.v1.PodSandboxConfig"));
}

// A FIFO or a device is refused at once, not read (a reader never blocks).
TEST_F(CrihookctlAgainstFake, AConfigThatIsAFifoIsRefusedNotWaitedOn) {
  backend_.start();
  ASSERT_EQ(::mkfifo(dir_.file("pod.fifo").c_str(), 0600), 0);
  Result r = ctl(with({"runp", dir_.file("pod.fifo")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read " + dir_.file("pod.fifo") + ": a FIFO"));
}

TEST_F(CrihookctlAgainstFake, ExecExitsWithTheCommandsCodeAndRuntimeErrorsExitOne) {
  backend_.onUnary("/runtime.v1.RuntimeService/ExecSync", [](FakeCall& call, std::string* out) {
    v1::ExecSyncRequest req;
    req.ParseFromString(call.request);
    v1::ExecSyncResponse resp;
    resp.set_stdout(req.container_id() + ":" + req.cmd(0));
    resp.set_stderr("warn");
    resp.set_exit_code(3);
    *out = resp.SerializeAsString();
    return grpc::Status::OK;
  });
  backend_.start();
  Result r = ctl(with({"exec", "c1", "echo", "hi"}));
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "c1:echo");
  EXPECT_EQ(r.err, "warn");
  r = ctl(with({"start", "c1"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("StartContainer: Unimplemented"));
}

TEST_F(CrihookctlAgainstFake, PsShowsContainersAsATable) {
  backend_.onUnary(
      "/runtime.v1.RuntimeService/ListContainers", [](FakeCall& call, std::string* out) {
        v1::ListContainersRequest req;
        req.ParseFromString(call.request);
        v1::ListContainersResponse resp;
        auto* c = resp.add_containers();
        c->set_id("0123456789abcdef0123");
        c->set_pod_sandbox_id("fedcba9876543210");
        c->mutable_metadata()->set_name(req.filter().has_state() ? "running-only" : "all");
        c->set_state(v1::CONTAINER_RUNNING);
        *out = resp.SerializeAsString();
        return grpc::Status::OK;
      });
  backend_.start();
  Result r = ctl(with({"ps"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CONTAINER"));
  EXPECT_THAT(r.out, HasSubstr("0123456789abc "));
  EXPECT_THAT(r.out, HasSubstr("running-only"));
  r = ctl(with({"ps", "-a", "-q"}));
  EXPECT_EQ(r.out, "0123456789abcdef0123\n");
  r = ctl(with({"-o", "json", "ps", "-a"}));
  EXPECT_THAT(r.out, HasSubstr("\"podSandboxId\": \"fedcba9876543210\""));
}

}  // namespace
}  // namespace crihook::testing
