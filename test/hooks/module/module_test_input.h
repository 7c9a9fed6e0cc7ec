#pragma once

// What module_hook_test and module_host_test share: where test/meson.build
// put the variant modules (VARIANT_DIR), and the CreateContainer pre-stage
// input a module is asked about.

#include <map>
#include <memory>
#include <string>

#include "cri-api/crihook_hook_v1.pb.h"
#include "hooks/hook.h"

namespace crihook::testing {

// The variant module built as variant_<name>.so (hooks/module/variant_module.cc).
inline std::string variant(const std::string& name) {
  return VARIANT_DIR "/variant_" + name + ".so";
}

// A CreateContainer pre-stage of a pod with `annotations`.
inline HookInput createInput(std::map<std::string, std::string> annotations = {}) {
  auto pod = std::make_shared<::crihook::hook::v1::PodRecord>();
  for (const auto& [k, v] : annotations) (*pod->mutable_config()->mutable_annotations())[k] = v;
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.pod = pod;
  return in;
}

}  // namespace crihook::testing
