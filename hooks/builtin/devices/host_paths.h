#pragma once

// HostPaths: whether paths exist on the host, answered from memory, so that
// a hook that runs inline (on the caller's thread: in proxy mode a relay
// event loop) never waits on the filesystem.
//
// Two kinds of paths, given at construction:
//  - the entries of one directory whose names begin with a prefix: the
//    device nodes a hook hands out (<device_root>/nvidia*,
//    <device_root>/infiniband/*). Listed at construction, then again each
//    time the directory changes (Env::watchDirectory: inotify; a directory
//    that does not exist yet, or cannot be watched, is looked at every
//    `poll`). At most kMaxEntries names are kept (the prefix keeps it to
//    the few dozen a hook asks for); beyond that a listing is logged, naming
//    the directory, and the rest left out.
//  - single paths (HAMi-core's library and lock directory): whether each
//    exists (access(F_OK): links followed), checked at construction and
//    again every `poll`.
// An answer is as of the last read: a node created or removed is seen once
// the thread has read the change (at once after inotify reports it), a
// single path within `poll`.
//
// Threading: hasEntry() and exists() are thread-safe and non-blocking (a
// mutex held for a lookup in memory; the thread holds it only to swap in
// what it read). The constructor reads the filesystem (blocking: call it
// where a hook is made, never on an event loop) and starts one thread,
// "host-paths", that does every later read; the destructor stops its watch
// and joins it (after the read in progress, if any).

#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/mutex.h"

namespace crihook {

class HostPaths {
 public:
  // A node has a few dozen GPUs or RDMA functions; a directory with far
  // more matching entries than that is not worth keeping whole in memory.
  static constexpr size_t kMaxEntries = 4096;
  static constexpr std::chrono::milliseconds kPoll{1000};

  struct Spec {
    std::string dir;                 // absolute; its entries named `prefix`... are kept
    std::string prefix;              // "" keeps every entry
    std::vector<std::string> paths;  // absolute single paths
  };

  // `env` (base/env.h) lists, watches and checks; it outlives this.
  HostPaths(Spec spec, std::shared_ptr<spdlog::logger> log, Env& env,
            std::chrono::milliseconds poll = kPoll);
  ~HostPaths();
  HostPaths(const HostPaths&) = delete;
  HostPaths& operator=(const HostPaths&) = delete;

  // Whether the directory held an entry `name` (no slash) at the last
  // listing. Memory only.
  bool hasEntry(std::string_view name) const;
  // Whether single path `path` (one of Spec::paths) existed at the last
  // check; false for a path not given. Memory only.
  bool exists(std::string_view path) const;

 private:
  using Names = std::set<std::string, std::less<>>;

  void listDirectory();
  void checkPaths();
  void loop();

  const Spec spec_;
  const std::shared_ptr<spdlog::logger> log_;
  Env& env_;
  const std::chrono::milliseconds poll_;
  std::unique_ptr<DirectoryWatch> watch_;
  std::string last_error_;  // the thread's own: the listing's last failure, logged once

  mutable Mutex mu_;
  Names entries_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> existing_ ABSL_GUARDED_BY(mu_);  // of spec_.paths
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace crihook
