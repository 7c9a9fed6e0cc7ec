// hook_chain_bench: what the hook framework costs per CreateContainer, in
// process:
//  - the chain alone: empty, five built-in no-op hooks (builtin "noop"), five
//    built-in hooks that each set an env var (builtin "static"; merge + apply);
//  - the whole pre- and post-stage as crihookd runs them (HookInterceptor:
//    context from the state records, chain, apply, record), same chains;
//  - one remote hook (crihook protocol, an in-process gRPC server on a Unix
//    socket) against one plain gRPC round trip to the same server.
//
//   hook_chain_bench [--iterations N] [--remote-iterations N]
//
// Reports medians and p99s. Through the proxy, crihook_bench measures the
// whole CRI call.

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/dgx_fixture.h"
#include "cri-api/crihook_hook_v1.grpc.pb.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/apply.h"
#include "hooks/chain.h"
#include "hooks/hook_interceptor.h"
#include "hooks/registry.h"
#include "hooks/remote/remote_hooks.h"
#include "hooks/wire.h"
#include "topology/holder.h"

namespace {

using namespace crihook;
using Clock = std::chrono::steady_clock;
namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;

v1::CreateContainerRequest createRequest() {
  v1::CreateContainerRequest base;
  base.set_pod_sandbox_id("sb");
  base.mutable_sandbox_config()->mutable_metadata()->set_name("train-0");
  base.mutable_sandbox_config()->mutable_metadata()->set_namespace_("ml");
  base.mutable_config()->mutable_metadata()->set_name("c");
  for (int i = 0; i < 20; ++i) {
    auto* e = base.mutable_config()->add_envs();
    e->set_key("ENV_" + std::to_string(i));
    e->set_value("v");
  }
  return base;
}

struct Figures {
  double p50, p99;
};

template <typename F>
Figures timeIt(int iterations, F&& once) {
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    once();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 99 / 100]};
}

void report(const char* label, Figures f) {
  std::printf("%-58s p50 %9.0f ns   p99 %9.0f ns\n", label, f.p50, f.p99);
}

Figures chainOnly(const HookChain& chain, int iterations) {
  const v1::CreateContainerRequest base = createRequest();
  CallIdentity id;
  return timeIt(iterations, [&] {
    v1::CreateContainerRequest req = base;  // the proxy decodes a fresh one per call
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.request = &req;
    in.identity = &id;
    ChainOutcome out = chain.run(in, Clock::time_point::max());
    if (!out.merged.result().empty()) applyToContainer(out.merged.result(), *req.mutable_config());
  });
}

// Pre-stage, a successful runtime answer, post-stage: what crihookd adds to
// a CreateContainer besides the relay (records kept in memory here).
Figures throughInterceptor(std::shared_ptr<const HookChain> chain, int iterations,
                           const v1::CreateContainerRequest& base = createRequest(),
                           const topology::SnapshotHolder* topology = nullptr) {
  ChainHolder holder(std::move(chain));
  StateStore state("", nullptr);
  HookInterceptor interceptor(holder, state, nullptr, 1, topology);
  int n = 0;
  return timeIt(iterations, [&] {
    auto call = std::make_shared<InterceptedCall>();
    call->method = LifecycleMethod::kCreateContainer;
    call->api = CriApi::kV1;
    call->deadline = Clock::time_point::max();
    call->request = std::make_unique<v1::CreateContainerRequest>(base);
    interceptor.pre(call, [](absl::Status) {});
    auto resp = std::make_unique<v1::CreateContainerResponse>();
    resp->set_container_id("ctr-" + std::to_string(n++ % 1000));
    call->response = std::move(resp);
    interceptor.post(call, [] {});
  });
}

class EmptyAnswer final : public hv1::HookService::Service {
  grpc::Status Handle(grpc::ServerContext*, const hv1::HookRequest*, hv1::HookResponse*) override {
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200000, remote_iterations = 5000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") iterations = std::stoi(argv[++i]);
    if (std::string(argv[i]) == "--remote-iterations") remote_iterations = std::stoi(argv[++i]);
  }
  HookRegistry builtins = builtinHooks();
  auto empty = std::make_shared<HookChain>(nullptr);
  auto noop = std::make_shared<HookChain>(nullptr);
  auto env = std::make_shared<HookChain>(nullptr);
  for (int i = 0; i < 5; ++i) {
    noop->add(*builtins.create("noop", "noop" + std::to_string(i), "{}"), {});
    env->add(*builtins.create("static", "env" + std::to_string(i),
                              R"({"adjustment": {"env": [{"key": "HOOK_)" + std::to_string(i) +
                                  R"(", "value": "1"}]}})"),
             {});
  }
  const Figures chain_empty = chainOnly(*empty, iterations);
  const Figures chain_noop = chainOnly(*noop, iterations);
  report("chain: empty", chain_empty);
  report("chain: 5 built-in no-op hooks", chain_noop);
  report("chain: 5 built-in static hooks, one env var each", chainOnly(*env, iterations));
  std::printf("  -> per no-op hook: %.0f ns (goal < 5000 ns)\n",
              (chain_noop.p50 - chain_empty.p50) / 5);
  const int staged = std::max(1, iterations / 10);
  const Figures stage_empty = throughInterceptor(empty, staged);
  const Figures stage_noop = throughInterceptor(noop, staged);
  report("pre+post stage: empty chain", stage_empty);
  report("pre+post stage: 5 built-in no-op hooks", stage_noop);
  report("pre+post stage: 5 built-in static hooks", throughInterceptor(env, staged));
  std::printf("  -> per no-op hook: %.0f ns\n", (stage_noop.p50 - stage_empty.p50) / 5);

  // The device hooks on the DGX-shaped fixture: 2 GPUs, an RDMA VF, a cpuset, a CDI device.
  {
    const std::optional<bench::DgxFixture> fixture = bench::makeDgxFixture();
    if (!fixture) return 1;
    const std::string& fixtures = fixture->root;
    const std::string& dev = fixture->dev;
    topology::SnapshotHolder topo(std::make_shared<const topology::Snapshot>(
        topology::discover(topology::SysRoot(fixture->dgx))));
    auto devices = std::make_shared<HookChain>(nullptr);
    const std::string settings = R"({"device_root": ")" + dev + "\"}";
    for (const char* type : {"gpu", "rdma"})
      devices->add(*builtins.create(type, type, settings), {});
    devices->add(*builtins.create("cpuset", "cpuset", "{}"), {});
    std::filesystem::create_directories(fixtures + "/cdi");
    std::ofstream(fixtures + "/cdi/vendor.json")
        << R"({"cdiVersion": "0.6.0", "kind": "vendor.com/fpga", "devices": [{"name": "0",)"
        << R"( "containerEdits": {"env": ["FPGA_VISIBLE=0"], "deviceNodes": [{"path": "/dev/vfpga0"}]}}]})";
    devices->add(*builtins.create("cdi", "cdi", R"({"spec_dirs": [")" + fixtures + "/cdi\"]}"), {});
    v1::CreateContainerRequest req = createRequest();
    auto& annotations = *req.mutable_sandbox_config()->mutable_annotations();
    annotations["scheduling.koordinator.sh/device-allocated"] =
        R"({"gpu":[{"minor":0,"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},{"minor":1}],)"
        R"("rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1c:00.3"}]}}]})";
    annotations["scheduling.koordinator.sh/resource-status"] = R"({"cpuset":"0-7,32-39"})";
    req.mutable_config()->add_cdi_devices()->set_name("vendor.com/fpga=0");
    const Figures with_devices = throughInterceptor(devices, staged, req, &topo);
    const Figures empty_same_request = throughInterceptor(empty, staged, req, &topo);
    report("pre+post stage: empty chain (device-annotated request)", empty_same_request);
    report("pre+post stage: gpu + rdma + cpuset + cdi hooks", with_devices);
    std::printf("  -> added by the device hooks: %.1f us (goal < 50 us)\n",
                (with_devices.p50 - empty_same_request.p50) / 1000);
    std::filesystem::remove_all(fixtures);
  }

  // One remote hook against one plain round trip to the same server.
  char tmpl[] = "/tmp/crihook-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string socket = dir + "/hook.sock";
  EmptyAnswer service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto stub = hv1::HookService::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  const v1::CreateContainerRequest base = createRequest();
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.request = &base;
  const hv1::HookRequest request = hookRequest(in);
  // With a deadline, as any bounded call has (gRPC arms a timer for it).
  auto round_trip = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    hv1::HookResponse reply;
    (void)stub->Handle(&ctx, request, &reply);
  };
  for (int i = 0; i < 200; ++i) round_trip();  // connect and warm up
  auto remote = std::make_shared<HookChain>(nullptr);
  remote->add(
      makeCrihookRemoteHook("remote", socket, {{LifecycleMethod::kCreateContainer, Phase::kPre}},
                            {kDefaultHookWorkers, kDefaultHookQueue}),
      {});
  (void)chainOnly(*remote, 200);
  // Interleaved rounds, so both see the same machine; the median of the
  // rounds' figures and of their ratios.
  constexpr int kRounds = 11;
  std::vector<double> rt, hook, ratio;
  for (int round = 0; round < kRounds; ++round) {
    rt.push_back(timeIt(remote_iterations / kRounds, round_trip).p50);
    hook.push_back(chainOnly(*remote, remote_iterations / kRounds).p50 - chain_empty.p50);
    ratio.push_back(hook.back() / rt.back());
  }
  for (auto* v : {&rt, &hook, &ratio}) std::sort(v->begin(), v->end());
  std::printf("%-58s p50 %9.0f ns\n", "one gRPC round trip (HookService/Handle, 2 s deadline)",
              rt[kRounds / 2]);
  std::printf("%-58s p50 %9.0f ns\n", "chain: one remote hook, added over the empty chain",
              hook[kRounds / 2]);
  std::printf("  -> remote hook / round trip: %.2f, rounds from %.2f to %.2f (goal <= 1)\n",
              ratio[kRounds / 2], ratio.front(), ratio.back());
  server->Shutdown();
  ::unlink(socket.c_str());
  ::rmdir(dir.c_str());
  return 0;
}
