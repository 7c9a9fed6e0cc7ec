// An example hook module, built and tested in-tree: what a module author
// starts from. It speaks only the C ABI of crihook_module.h and JSON; it links
// neither protobuf nor anything of crihookd.
//
// On PreCreateContainer it sets the env var named by the setting `env`
// (default CRIHOOK_EXAMPLE) to the setting `value`, and refuses containers of
// pods annotated example.crihook.io/deny (the annotation's value is the
// reason).
//
//   [[hook]]
//   name = "example"
//   module = "example_module.so"
//   [hook.settings]
//   env = "TEAM"
//   value = "ml-platform"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "crihook_module.h"

#define EXPORT __attribute__((visibility("default")))

extern "C" {

EXPORT extern const struct crihook_module_info crihook_module_info;
const struct crihook_module_info crihook_module_info = {
    CRIHOOK_MODULE_ABI_VERSION,
    sizeof(struct crihook_module_info),
    "example",
    "1.0",
    CRIHOOK_STAGE(CRIHOOK_CREATE_CONTAINER, CRIHOOK_PRE),
    CRIHOOK_MODULE_INLINE,
    0,
};

}  // extern "C"

namespace {

struct Instance {
  std::string env = "CRIHOOK_EXAMPLE";
  std::string value;
};

char* copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

EXPORT int crihook_module_init(const char* settings_json, size_t settings_len, void** instance,
                               char** error) {
  auto settings =
      nlohmann::json::parse(settings_json, settings_json + settings_len, nullptr, false);
  if (!settings.is_object()) {
    *error = copy("settings: expected a table");
    return 1;
  }
  auto* self = new Instance;
  for (const auto& [key, value] : settings.items()) {
    if ((key != "env" && key != "value") || !value.is_string()) {
      delete self;
      *error = copy("settings." + key + ": expected env or value, as a string");
      return 1;
    }
    (key == "env" ? self->env : self->value) = value.get<std::string>();
  }
  *instance = self;
  return 0;
}

EXPORT int crihook_module_run(void* instance, const char* request, size_t request_len, char** reply,
                              size_t* reply_len, char** error) {
  const auto* self = static_cast<const Instance*>(instance);
  auto in = nlohmann::json::parse(request, request + request_len, nullptr, false);
  if (!in.is_object()) {
    *error = copy("the request is not JSON");
    return 1;
  }
  nlohmann::json out;
  const nlohmann::json annotations =
      in.value("/pod/config/annotations"_json_pointer, nlohmann::json::object());
  if (auto deny = annotations.find("example.crihook.io/deny"); deny != annotations.end()) {
    out["decision"] = "REJECT";
    out["reject_code"] = 9;  // FAILED_PRECONDITION
    out["reject_message"] =
        "denied by the example module: " + (deny->is_string() ? deny->get<std::string>() : "");
  } else {
    out["adjustment"]["env"] = {{{"key", self->env}, {"value", self->value}}};
  }
  const std::string text = out.dump();
  *reply = copy(text);
  *reply_len = text.size();
  return *reply == nullptr ? 1 : 0;
}

EXPORT void crihook_module_free(void* p) { std::free(p); }

EXPORT void crihook_module_fini(void* instance) { delete static_cast<Instance*>(instance); }

}  // extern "C"
