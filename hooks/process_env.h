#pragma once

// The Env (base/env.h) the hooks use unless a test hands them another: the
// real file system and clock, and commands run through the process's launcher
// (confine::processLauncher(): crihookd's spawner once main installed it, a
// direct fork/exec in tests that do not).

#include <memory>

#include "base/env.h"

namespace crihook {

// Lives for the process; thread-safe.
Env& processEnv();

// An Executor that forwards each command to confine::processLauncher() as
// it is at the time of the call.
std::shared_ptr<Executor> launcherExecutor();

}  // namespace crihook
