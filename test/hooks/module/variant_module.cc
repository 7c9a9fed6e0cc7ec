// Modules that go wrong in one way each, built from this file with one
// VARIANT_* macro (test/meson.build), for module_hook_test.cc and module_host_test.cc.

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "crihook_module.h"

#define EXPORT __attribute__((visibility("default")))

#ifndef VARIANT_ABI
#define VARIANT_ABI CRIHOOK_MODULE_ABI_VERSION
#endif
// What info_size says: the struct's size, but for a module that claims a
// bigger one than it exports.
#ifdef VARIANT_INFO_SIZE
#define VARIANT_INFO_BYTES (sizeof(struct crihook_module_info) + 8)
#else
#define VARIANT_INFO_BYTES sizeof(struct crihook_module_info)
#endif
#if defined(VARIANT_SLOW) || defined(VARIANT_HANG) || defined(VARIANT_SEGV)
#define VARIANT_FLAGS 0u
#else
#define VARIANT_FLAGS CRIHOOK_MODULE_INLINE
#endif

// Proves whether any of the module's code ran: loading runs constructors.
__attribute__((constructor)) static void loaded() {
  if (const char* marker = std::getenv("CRIHOOK_TEST_MODULE_MARKER")) {
    if (FILE* f = std::fopen(marker, "w")) std::fclose(f);
  }
}

extern "C" {

EXPORT extern const struct crihook_module_info crihook_module_info;
const struct crihook_module_info crihook_module_info = {
    VARIANT_ABI,
    VARIANT_INFO_BYTES,
    "variant",
    "0",
    CRIHOOK_STAGE(CRIHOOK_CREATE_CONTAINER, CRIHOOK_PRE),
    VARIANT_FLAGS,
    0,
};

[[maybe_unused]] static char* copy(const char* s) {
  char* out = static_cast<char*>(std::malloc(std::strlen(s) + 1));
  std::strcpy(out, s);
  return out;
}

#ifdef VARIANT_SPIN
static std::atomic<bool> released{false};
EXPORT void variant_release() { released = true; }
#endif

EXPORT int crihook_module_init(const char*, size_t, void** instance, char**) {
  *instance = nullptr;
  return 0;
}

EXPORT int crihook_module_run(void*, const char* request, size_t request_len, char** reply,
                              size_t* reply_len, char** error) {
  (void)request, (void)request_len;
#if defined(VARIANT_FAIL)
  *error = copy("device busy");
  return 3;
#elif defined(VARIANT_HANG)
  // Never answers (a module stuck on a lock or a device).
  (void)reply, (void)reply_len, (void)error;
  for (;;) ::pause();
#elif defined(VARIANT_SPIN)
  // Loops (a bug), declaring itself INLINE all the same, until the test
  // releases it (variant_release) so that it burns no core past its test.
  (void)reply, (void)reply_len, (void)error;
  while (!released.load()) ::sched_yield();
  *reply = copy("{}");
  *reply_len = 2;
  return 0;
#elif defined(VARIANT_SEGV)
  // Crashes on a request that carries "segv" (any other is answered), so a
  // test can tell a crash from a module that never answers again.
  if (std::strstr(std::string(request, request_len).c_str(), "segv") != nullptr) {
    volatile int* p = nullptr;
    *p = 1;
  }
  *reply = copy("{}");
  *reply_len = 2;
  (void)error;
  return 0;
#elif defined(VARIANT_GARBAGE)
  *reply = copy("not json");
  *reply_len = std::strlen(*reply);
  return 0;
#elif defined(VARIANT_HUGE)
  // One byte over crihookd's 4 MiB bound on a module's reply.
  const size_t n = (size_t{4} << 20) + 1;
  *reply = static_cast<char*>(std::malloc(n));
  if (*reply == nullptr) return 1;
  std::memset(*reply, ' ', n);
  *reply_len = n;
  (void)error;
  return 0;
#else
#ifdef VARIANT_SLOW
  ::usleep(500 * 1000);
#endif
  *reply = copy("{}");
  *reply_len = 2;
  (void)error;
  return 0;
#endif
}

EXPORT void crihook_module_free(void* p) { std::free(p); }

#ifndef VARIANT_NO_FINI
EXPORT void crihook_module_fini(void*) {}
#endif

}  // extern "C"
