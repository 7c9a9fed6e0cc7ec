#pragma once

// Hook modules (tier 2): a shared object in [hooks] module_dir, speaking the
// C ABI of crihook_module.h, reached by the chain as a Hook.

#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hooks/hook.h"
#include "hooks/module/crihook_module.h"

namespace crihook {

// A module's reply is an adjustment of a few KiB; as a remote hook's reply.
inline constexpr size_t kMaxModuleReplyBytes = 4u << 20;

// Reads the module's crihook_module_info from the file itself (its ELF
// dynamic symbol table), running none of its code. NOT_FOUND for a missing
// file or symbol, FAILED_PRECONDITION for a file that is not a 64-bit ELF
// shared object of this machine or an info of another ABI version.
absl::StatusOr<crihook_module_info> readModuleInfo(const std::string& path);

// Checks the info, then loads the module (RTLD_NOW | RTLD_LOCAL), resolves
// its functions and calls its init with `settings_json`. Errors name the file
// and the reason. A loaded module stays loaded for the process's life.
absl::StatusOr<std::shared_ptr<Hook>> loadModuleHook(const std::string& name,
                                                     const std::string& path,
                                                     const std::string& settings_json);

// A module loaded into this process (what loadModuleHook and the module host
// use): its checked info, its instance and functions. Never unloaded.
struct LoadedModule {
  crihook_module_info info;
  void* instance;
  int (*run)(void*, const char*, size_t, char**, size_t*, char**);
  void (*free)(void*);
  void (*fini)(void*);
};

// readModuleInfo, dlopen, resolve, init: errors as loadModuleHook's.
absl::StatusOr<LoadedModule> openModule(const std::string& path, const std::string& settings_json);

// What a module is given: the crihook.hook.v1.HookRequest of `input` in
// the proto3 JSON mapping.
std::string moduleRequest(const HookInput& input);

// What the chain makes of a module's answer (run's return code, *reply and
// *error): bounded (bytes, nesting) before it is parsed as a HookResponse;
// errors name hook `name`.
HookDecision moduleDecision(const std::string& name, Phase phase, int rc, const std::string& reply,
                            const std::string& error);

}  // namespace crihook
