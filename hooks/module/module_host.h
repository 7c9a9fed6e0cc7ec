#pragma once

// Out-of-process modules ([[hook]] isolation = "process"): the module runs
// in a helper process of its own (crihook-module-host, tools/), spoken to
// over a socketpair with the same C ABI's bytes, so a module that crashes
// costs a restart of its helper, not crihookd.
//
// Protocol (SOCK_STREAM; each frame a u32 length, a kind byte, a payload;
// host byte order, both ends are one machine):
//   crihookd -> host  'I' settings JSON              once, first
//   host -> crihookd  'R'                            module loaded and init ok
//                     'E' reason                     refused; the host exits
//   crihookd -> host  'Q' u32 budget_ms, request     one call (a HookRequest, JSON)
//   host -> crihookd  'A' i32 rc, u32 n, reply[n], error text
// One call at a time per helper. The host kills itself (exit 124) when a
// call runs kHostGrace past its budget (a hung module), and exits on EOF.
// crihookd's end reads frames bounded by kMaxHostReplyBytes, each call
// within its deadline.
//
// The helper is started through the process launcher (confine/launcher.h:
// the spawner under crihookd, whose seccomp filter forbids fork): the spawner
// forks it, so crihookd never does. The host then drops to crihookd's
// capabilities and installs crihookd's own filter before serving calls (not
// before loading: crihookd loads its in-process modules before its filter
// too).

#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "confine/launcher.h"
#include "hooks/hook.h"
#include "hooks/module/module_hook.h"

namespace crihook {

// A reply frame: the module's reply plus its error text (cut to 64 KiB).
inline constexpr size_t kMaxHostErrorBytes = 64 * 1024;
inline constexpr size_t kMaxHostReplyBytes = kMaxModuleReplyBytes + kMaxHostErrorBytes + 16;
// A request frame: a HookRequest of a CRI request gRPC let through (at most
// crihookd's 16 MiB message limit), in JSON, which can be a few times its
// binary size.
inline constexpr size_t kMaxHostRequestBytes = 64u << 20;
// How long past a call's budget the host lets a module run before it ends
// itself: crihookd has given up on the call at its budget already.
inline constexpr std::chrono::milliseconds kHostGrace{1000};
// Start-up (exec, dlopen, init) before the helper must say ready, from its
// launch, whatever the deadlines of the calls that wait for it.
inline constexpr std::chrono::milliseconds kHostStartTimeout{10000};
// A helper that becomes ready during a call is asked only if this much of
// the call is left. A query it cannot answer in time replaces it, and a
// process just woken on a loaded machine can wait a scheduler period (CFS:
// 6 ms x (1 + log2 CPUs), 24 ms at most) before it runs: asked with a few ms
// left, a start that ended near a call's end would be thrown away and begun
// again, and with short budgets might never serve.
inline constexpr std::chrono::milliseconds kMinQueryAfterStart{25};
// Backoff between restarts of a helper that died: from the first to the
// last, doubling per death in a row; a call answered resets it.
inline constexpr std::chrono::milliseconds kHostFirstRestart{100};
inline constexpr std::chrono::milliseconds kHostLastRestart{30000};

struct ModuleIsolation {
  std::string host;  // absolute path of crihook-module-host
  // Passed to the host: the filter mode (config security.seccomp) and the
  // capabilities it keeps ("all", or "0x" + hex of crihookd's kept set).
  std::string seccomp = "off";
  std::string capabilities = "all";
  // Null: confine::processLauncher().
  std::shared_ptr<confine::Launcher> launcher;
};

// Reads the module's info from the file (no code of it runs here), starts its
// helper and waits for it to load and init the module (kHostStartTimeout).
// Errors as loadModuleHook's, from the helper ("module PATH: init failed
// ..."), or UNAVAILABLE when the helper cannot be started. The hook honours
// its deadline (HookInput::deadline): calls wait for the helper (one at a
// time) and its answer until then. A helper that dies (EOF) or overruns is
// dropped: the call gets UNAVAILABLE / DEADLINE_EXCEEDED (its failure policy
// decides) and the next call after the backoff starts a new one (logged).
// A call whose deadline comes before the new helper is ready gets
// DEADLINE_EXCEEDED and leaves it starting (up to kHostStartTimeout) for the
// next call: a start is not cut by a budget shorter than a start under load.
// So does a call that sees it become ready with less than
// kMinQueryAfterStart left: the helper is kept and asked by the next call.
absl::StatusOr<std::shared_ptr<Hook>> loadIsolatedModuleHook(const std::string& name,
                                                             const std::string& path,
                                                             const std::string& settings_json,
                                                             const ModuleIsolation& isolation,
                                                             std::shared_ptr<spdlog::logger> log);

// The host's side, on `fd` (crihook-module-host's main): reads the init
// frame, loads `path`, confines itself (`seccomp`, `capabilities` as in
// ModuleIsolation), serves calls until EOF. Returns the exit code.
int moduleHostMain(int fd, const std::string& path, const std::string& seccomp,
                   const std::string& capabilities);

}  // namespace crihook
