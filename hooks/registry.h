#pragma once

// Built-in hooks by type name. crihookd's config names a type in
// `[[hook]] builtin = "static"`; the registry makes the hook from its
// settings. Registration is explicit (builtinHooks()), not by static
// initialisers, so nothing depends on link order.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/hook.h"

namespace crihook {

class Env;
namespace metrics {
class Registry;
}

// What crihookd's configuration tells a built-in hook beyond its settings.
struct BuiltinContext {
  std::string state_dir;            // [hooks] state_dir; empty: nothing kept on disk
  std::string topology_root = "/";  // [topology] root: where sys/ and dev/ are read
  // [backend] endpoint (unix://…): the runtime, for hooks that call it on
  // their own (hooks/runtime_sandboxes.h); empty: none to call.
  std::string runtime_endpoint;
  // Where a built-in exports numbers of its own (device-lifecycle's device
  // counts); null: none.
  metrics::Registry* metrics = nullptr;
  // The files, commands and clock a built-in uses (base/env.h); null:
  // processEnv(). Tests hand in a FaultEnv.
  Env* env = nullptr;
};

class HookRegistry {
 public:
  // Makes a hook called `name` from `settings_json` ([hook.settings] as a JSON
  // object). Bad settings are INVALID_ARGUMENT naming the setting.
  using Factory = std::function<absl::StatusOr<std::shared_ptr<Hook>>(
      const std::string& name, const std::string& settings_json, const BuiltinContext& context)>;
  using SimpleFactory = absl::StatusOr<std::shared_ptr<Hook>> (*)(const std::string& name,
                                                                  const std::string& settings_json);

  void add(std::string type, Factory factory);
  void add(std::string type, SimpleFactory factory);  // a hook that needs no context

  // INVALID_ARGUMENT for an unknown type (listing the known ones) or bad settings.
  absl::StatusOr<std::shared_ptr<Hook>> create(const std::string& type, const std::string& name,
                                               const std::string& settings_json,
                                               const BuiltinContext& context = {}) const;

  std::vector<std::string> types() const;

 private:
  std::map<std::string, Factory> factories_;
};

// The hooks compiled into crihookd (hooks/builtin/*).
HookRegistry builtinHooks();

}  // namespace crihook
