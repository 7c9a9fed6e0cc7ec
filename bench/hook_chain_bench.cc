// hook_chain_bench: what the hook chain itself costs per call, in process:
// an empty chain, five built-in (inline) no-op hooks, and five hooks that
// each set one env var (merge + apply to a CreateContainer request).
//
//   hook_chain_bench [--iterations N]
//
// Reports the median and p99 per chain run in nanoseconds. Through the
// proxy, crihook_bench measures the whole call.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apply.h"
#include "chain.h"
#include "runtime_v1.pb.h"

namespace {

using namespace crihook;
using Clock = std::chrono::steady_clock;

class NoOpHook : public Hook {
 public:
  NoOpHook(std::string name, bool sets_env) : name_(std::move(name)), sets_env_(sets_env) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
  }
  bool runsInline() const override { return true; }
  HookDecision run(const HookInput&) override {
    if (!sets_env_) return HookDecision::proceed();
    Adjustment a;
    a.env = {{"HOOK_" + name_, "1"}};
    return HookDecision::proceed(std::move(a));
  }

 private:
  std::string name_;
  bool sets_env_;
};

void measure(const char* label, const HookChain& chain, int iterations) {
  runtime::v1::CreateContainerRequest base;
  base.set_pod_sandbox_id("sb");
  base.mutable_config()->mutable_metadata()->set_name("c");
  for (int i = 0; i < 20; ++i) {
    auto* e = base.mutable_config()->add_envs();
    e->set_key("ENV_" + std::to_string(i));
    e->set_value("v");
  }
  CallIdentity id;
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    runtime::v1::CreateContainerRequest req = base;  // the proxy decodes a fresh one per call
    auto t0 = Clock::now();
    HookInput in;
    in.method = LifecycleMethod::kCreateContainer;
    in.phase = Phase::kPre;
    in.request = &req;
    in.identity = &id;
    ChainOutcome out = chain.run(in, Clock::time_point::max());
    if (!out.merged.result().empty()) applyToContainer(out.merged.result(), *req.mutable_config());
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  std::printf("%-40s p50 %8.0f ns   p99 %8.0f ns\n", label, ns[ns.size() / 2],
              ns[ns.size() * 99 / 100]);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") iterations = std::stoi(argv[++i]);
  }
  HookChain empty(nullptr), noop(nullptr), env(nullptr);
  for (int i = 0; i < 5; ++i) {
    noop.add(std::make_shared<NoOpHook>("noop" + std::to_string(i), false), {});
    env.add(std::make_shared<NoOpHook>("env" + std::to_string(i), true), {});
  }
  measure("empty chain", empty, iterations);
  measure("5 built-in no-op hooks", noop, iterations);
  measure("5 built-in hooks, one env var each", env, iterations);
  return 0;
}
