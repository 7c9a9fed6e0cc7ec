/*
 * crihook hook modules: the C ABI between crihookd and a shared object it
 * loads with dlopen from [hooks] module_dir. Installed as
 * <includedir>/crihook/crihook_module.h for module authors.
 *
 * A module exports, with C linkage and default visibility:
 *
 *   const struct crihook_module_info crihook_module_info;
 *     Read from the file (not by running it) before the module is loaded:
 *     a wrong abi_version or info_size, or a missing symbol, and crihookd
 *     refuses the module with a log line naming the file and the reason; no
 *     code of the module ever runs.
 *
 *   int crihook_module_init(const char* settings_json, size_t settings_len,
 *                           void** instance, char** error);
 *     Once, with [hook.settings] as a JSON object. Returns 0 and sets
 *     *instance, or non-zero and sets *error (a NUL-terminated message the
 *     module allocated; crihookd frees it with crihook_module_free).
 *
 *   int crihook_module_run(void* instance, const char* request, size_t request_len,
 *                          char** reply, size_t* reply_len, char** error);
 *     For every stage the module subscribes to. `request` is a
 *     crihook.hook.v1.HookRequest, `*reply` a crihook.hook.v1.HookResponse,
 *     both in the proto3 JSON mapping (cri-api/crihook_hook_v1.proto), not
 *     NUL-terminated. Returns 0 with *reply set, or non-zero with *error set:
 *     the hook failed, and its failure_policy decides. Called from several
 *     threads at once: must be thread-safe. It runs on the hook's pool of
 *     worker threads ([[hook]] workers) under the hook's timeout; a call
 *     that overruns is abandoned, not interrupted: it is answered by the
 *     hook's failure_policy, and its worker stays stuck until the module
 *     returns (three timeouts in a row and the hook is refused until it
 *     answers again). A module that never returns costs its workers, never
 *     crihookd's event loops, nor its stop. A module that crashes takes
 *     crihookd with it: with [[hook]] isolation = "process" it runs in a
 *     helper process of its own, one call at a time, and a crash costs the
 *     helper only.
 *
 *   void crihook_module_free(void* p);
 *     Frees what init and run handed out (*reply, *error).
 *
 *   void crihook_module_fini(void* instance);
 *     At shutdown. Modules are never unloaded while crihookd runs.
 */
#ifndef CRIHOOK_MODULE_H
#define CRIHOOK_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CRIHOOK_MODULE_ABI_VERSION 1u

/* The calls, in the order of the CRI lifecycle. */
enum crihook_method {
  CRIHOOK_RUN_POD_SANDBOX = 0,
  CRIHOOK_STOP_POD_SANDBOX = 1,
  CRIHOOK_REMOVE_POD_SANDBOX = 2,
  CRIHOOK_CREATE_CONTAINER = 3,
  CRIHOOK_START_CONTAINER = 4,
  CRIHOOK_STOP_CONTAINER = 5,
  CRIHOOK_REMOVE_CONTAINER = 6,
  CRIHOOK_UPDATE_CONTAINER_RESOURCES = 7,
};
enum crihook_phase { CRIHOOK_PRE = 0, CRIHOOK_POST = 1 };

/* A stage as a bit of crihook_module_info.stages. */
#define CRIHOOK_STAGE(method, phase) (UINT64_C(1) << ((method)*2 + (phase)))

/* flags */
/* Pure computation, no I/O. Accepted for modules built against earlier
   headers; such a module too runs on its workers under its timeout. */
#define CRIHOOK_MODULE_INLINE 1u

struct crihook_module_info {
  uint32_t abi_version; /* CRIHOOK_MODULE_ABI_VERSION */
  uint32_t info_size;   /* sizeof(struct crihook_module_info) */
  char name[64];        /* NUL-terminated */
  char version[32];     /* NUL-terminated */
  uint64_t stages;      /* CRIHOOK_STAGE(...) | ... */
  uint32_t flags;
  uint32_t reserved; /* 0 */
};

#ifdef __cplusplus
}
#endif

#endif /* CRIHOOK_MODULE_H */
