// A hook module that, on PreCreateContainer, makes system calls crihookd's
// seccomp filter refuses, from inside the running daemon (modules are
// dlopen'd into crihookd), and reports each call's result as an env var of
// its adjustment: "0" when the call succeeded, else the errno's name.
// test/tools/crihookd_test.cc reads them from the request the runtime got.
//
//   CRIHOOK_TEST_UNSHARE  unshare(0): changes nothing when allowed
//   CRIHOOK_TEST_FORK     fork(): the child exits at once when allowed

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "crihook_module.h"

#define EXPORT __attribute__((visibility("default")))

extern "C" {

EXPORT extern const struct crihook_module_info crihook_module_info;
const struct crihook_module_info crihook_module_info = {
    CRIHOOK_MODULE_ABI_VERSION,
    sizeof(struct crihook_module_info),
    "syscall",
    "0",
    CRIHOOK_STAGE(CRIHOOK_CREATE_CONTAINER, CRIHOOK_PRE),
    CRIHOOK_MODULE_INLINE,
    0,
};

static char* copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

static std::string outcome(int rc) {
  if (rc == 0) return "0";
  const char* name = strerrorname_np(errno);
  return name ? name : std::to_string(errno);
}

EXPORT int crihook_module_init(const char*, size_t, void** instance, char**) {
  *instance = nullptr;
  return 0;
}

EXPORT int crihook_module_run(void*, const char*, size_t, char** reply, size_t* reply_len,
                              char**) {
  const std::string unshare_result = outcome(::unshare(0));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child > 0) ::waitpid(child, nullptr, 0);
  const std::string fork_result = outcome(child < 0 ? -1 : 0);
  const std::string text = R"({"adjustment":{"env":[{"key":"CRIHOOK_TEST_UNSHARE","value":")" +
                           unshare_result + R"("},{"key":"CRIHOOK_TEST_FORK","value":")" +
                           fork_result + R"("}]}})";
  *reply = copy(text);
  *reply_len = text.size();
  return 0;
}

EXPORT void crihook_module_free(void* p) { std::free(p); }
EXPORT void crihook_module_fini(void*) {}

}  // extern "C"
