// device_hooks_bench: what the device hooks cost per CreateContainer, and
// what running them off the caller's thread would cost instead (the
// reason the gpu and rdma hooks run inline: hooks/builtin/devices/).
//
//  - each hook's run() alone on the DGX-shaped fixture (2 GPUs; an RDMA VF;
//    a cpuset), device nodes under a fixture device root;
//  - the whole pre- and post-stage as crihookd runs them (HookInterceptor),
//    gpu + rdma + cpuset: inline (as they are), and with gpu and rdma each on
//    an executor of its own (what `runsInline() == false` costs: the stage
//    goes to the worker pool, each hook to its workers, and the answer back).
//
//   device_hooks_bench [--iterations N] [--rounds N]
//
// The figures are interleaved in rounds (every variant once per round), so
// that a loaded machine loads each alike; printed: the median over the
// rounds of each round's p50 and p99.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "bench/dgx_fixture.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/chain.h"
#include "hooks/hook_interceptor.h"
#include "hooks/registry.h"
#include "hooks/state_store.h"
#include "topology/holder.h"

namespace {

using namespace crihook;
using Clock = std::chrono::steady_clock;
namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;

struct Figures {
  double p50, p99;
};

Figures timeIt(int iterations, const std::function<void()>& once) {
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    once();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 99 / 100]};
}

// A hook as it is, but not inline: the chain gives it an executor.
class NotInline final : public Hook {
 public:
  explicit NotInline(std::shared_ptr<Hook> hook) : hook_(std::move(hook)) {}
  const std::string& name() const override { return hook_->name(); }
  bool subscribes(LifecycleMethod m, Phase p) const override { return hook_->subscribes(m, p); }
  HookDecision run(const HookInput& in) override { return hook_->run(in); }
  bool runsInline() const override { return false; }

 private:
  std::shared_ptr<Hook> hook_;
};

// Waits for an interceptor's `done`, which comes on the caller's thread
// for an inline stage and from a pool thread otherwise (as the proxy's
// event loop is woken by it).
class Done {
 public:
  void set() {
    MutexLock lock(mu_);
    done_ = true;
    cv_.notifyOne();
  }
  void wait() {
    MutexLock lock(mu_);
    while (!done_) cv_.wait(lock);
    done_ = false;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

v1::CreateContainerRequest deviceRequest() {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id("sb");
  auto& sandbox = *req.mutable_sandbox_config();
  sandbox.mutable_metadata()->set_name("train-0");
  sandbox.mutable_metadata()->set_namespace_("ml");
  auto& annotations = *sandbox.mutable_annotations();
  annotations["scheduling.koordinator.sh/device-allocated"] =
      R"({"gpu":[{"minor":0,"id":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"},{"minor":1}],)"
      R"("rdma":[{"minor":0,"id":"0000:1c:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1c:00.3"}]}}]})";
  annotations["scheduling.koordinator.sh/resource-status"] = R"({"cpuset":"0-7,32-39"})";
  req.mutable_config()->mutable_metadata()->set_name("c");
  return req;
}

// Pre-stage, a successful runtime answer, post-stage (HookInterceptor, its
// records in memory), one call at a time.
class Stage {
 public:
  Stage(std::shared_ptr<const HookChain> chain, const topology::SnapshotHolder& topology)
      : holder_(std::move(chain)),
        state_("", nullptr),
        interceptor_(holder_, state_, nullptr, 1, &topology) {}

  void once(const v1::CreateContainerRequest& base) {
    auto call = std::make_shared<InterceptedCall>();
    call->method = LifecycleMethod::kCreateContainer;
    call->api = CriApi::kV1;
    call->deadline = Clock::time_point::max();
    call->request = std::make_unique<v1::CreateContainerRequest>(base);
    interceptor_.pre(call, [this](absl::Status) { done_.set(); });
    done_.wait();
    auto resp = std::make_unique<v1::CreateContainerResponse>();
    resp->set_container_id("ctr-" + std::to_string(n_++ % 1000));
    call->response = std::move(resp);
    interceptor_.post(call, [this] { done_.set(); });
    done_.wait();
  }

 private:
  ChainHolder holder_;
  StateStore state_;
  HookInterceptor interceptor_;
  Done done_;
  int n_ = 0;
};

struct Variant {
  const char* label;
  std::function<void()> once;
  std::vector<Figures> rounds;
};

void report(std::vector<Variant>& variants) {
  for (Variant& v : variants) {
    std::vector<double> p50, p99;
    for (const Figures& f : v.rounds) {
      p50.push_back(f.p50);
      p99.push_back(f.p99);
    }
    std::sort(p50.begin(), p50.end());
    std::sort(p99.begin(), p99.end());
    std::printf("%-62s p50 %8.1f us   p99 %8.1f us\n", v.label, p50[p50.size() / 2] / 1000,
                p99[p99.size() / 2] / 1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20000, rounds = 9;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") iterations = std::stoi(argv[++i]);
    if (std::string(argv[i]) == "--rounds") rounds = std::stoi(argv[++i]);
  }
  const std::optional<bench::DgxFixture> fixture = bench::makeDgxFixture();
  if (!fixture) return 1;
  const std::string& fixtures = fixture->root;
  const std::string& dev = fixture->dev;
  topology::SnapshotHolder topology(std::make_shared<const topology::Snapshot>(
      topology::discover(topology::SysRoot(fixture->dgx))));
  {
    const HookRegistry builtins = builtinHooks();
    const std::string settings = R"({"device_root": ")" + dev + "\"}";
    auto gpu = *builtins.create("gpu", "gpu", settings);
    auto rdma = *builtins.create("rdma", "rdma", settings);
    auto cpuset = *builtins.create("cpuset", "cpuset", R"({"share_pool": false})");

    auto inline_chain = std::make_shared<HookChain>(nullptr);
    auto offloaded_chain = std::make_shared<HookChain>(nullptr);
    for (const auto& h : {gpu, rdma}) {
      inline_chain->add(h, {});
      offloaded_chain->add(std::make_shared<NotInline>(h), {});
    }
    inline_chain->add(cpuset, {});
    offloaded_chain->add(cpuset, {});
    Stage empty(std::make_shared<HookChain>(nullptr), topology);
    Stage inlined(inline_chain, topology);
    Stage offloaded(offloaded_chain, topology);

    const v1::CreateContainerRequest req = deviceRequest();
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.request = &req;
    in.topology = topology.get();
    auto pod = std::make_shared<hv1::PodRecord>();
    *pod->mutable_config() = req.sandbox_config();
    in.pod = pod;

    std::vector<Variant> variants = {
        {"gpu hook run(): 2 GPUs, their nodes and the control nodes", [&] { gpu->run(in); }},
        {"rdma hook run(): a VF's uverbs node and rdma_cm", [&] { rdma->run(in); }},
        {"pre+post stage: empty chain", [&] { empty.once(req); }},
        {"pre+post stage: gpu + rdma + cpuset, inline", [&] { inlined.once(req); }},
        {"pre+post stage: gpu + rdma on executors, cpuset inline", [&] { offloaded.once(req); }},
    };
    for (int r = 0; r < rounds; ++r) {
      for (Variant& v : variants) v.rounds.push_back(timeIt(iterations / rounds, v.once));
    }
    report(variants);
  }
  std::filesystem::remove_all(fixtures);
  return 0;
}
