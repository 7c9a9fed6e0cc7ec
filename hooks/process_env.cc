#include "hooks/process_env.h"

#include <algorithm>

#include "confine/launcher.h"

namespace crihook {
namespace {

class LauncherExecutor final : public Executor {
 public:
  absl::StatusOr<ExecResult> run(const ExecRequest& request) override {
    confine::LaunchRequest launch;
    launch.argv = request.argv;
    launch.timeout =
        std::clamp(request.timeout, std::chrono::milliseconds(1), confine::kMaxTimeout);
    auto result = confine::processLauncher()->launch(launch);
    if (!result.ok()) return result.status();
    ExecResult out;
    using End = confine::LaunchResult::End;
    out.end = result->end == End::kTimedOut   ? ExecResult::End::kTimedOut
              : result->end == End::kSignaled ? ExecResult::End::kSignaled
                                              : ExecResult::End::kExited;
    out.code = result->code;
    out.output = std::move(result->output);
    return out;
  }
};

}  // namespace

std::shared_ptr<Executor> launcherExecutor() { return std::make_shared<LauncherExecutor>(); }

Env& processEnv() {
  static PosixEnv* env = new PosixEnv(launcherExecutor());
  return *env;
}

}  // namespace crihook
