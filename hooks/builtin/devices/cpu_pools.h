#pragma once

// The cpuset hook's record of who holds which CPUs of this node, kept as
// koordlet keeps its share pools: a container of a pod with a resource-status
// cpuset ("pinned") holds those CPUs; a container of a NUMA-aware pod without
// one ("shared") runs on its NUMA nodes' CPUs that no pinned container holds,
// and is moved there (UpdateContainerResources at the runtime) whenever a pin
// arrives or leaves.
//
// State lives in memory and, when a file is given, in that file (JSON; a
// temporary file, fsync, rename), written by the pools' own thread after each
// change and read back by start(): pins and shared containers survive a
// crihookd restart. Reservations of containers still being created are kept
// in memory only (a call in flight does not survive a restart either).
//
// Threading: every method is thread-safe and non-blocking (memory only, fit
// for an event loop) except start(), settle() and the destructor. The pools'
// one thread, "cpuset-pools", writes the file and calls UpdateFn (never with
// mu_ held); a failed move is retried with backoff (0.5 s doubling to 30 s)
// until it succeeds, the runtime says NOT_FOUND (the container is
// forgotten) or the container is forgotten. One mutex, mu_, guards every
// record and the thread's flags.

#include <spdlog/logger.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"

namespace crihook {

// Whose CPUs these are, for records and log lines.
struct CpuOwner {
  std::string sandbox_id;
  std::string pod;        // namespace/name
  std::string container;  // the container's name in the pod
};

class CpuPools {
 public:
  // Moves container `id` to `cpus` and `mems` at the runtime. Blocking, but
  // bounded by its own timeout; called on the pools' thread only.
  using UpdateFn = std::function<absl::Status(const std::string& id, const std::string& cpus,
                                              const std::string& mems)>;

  // `file` empty: memory only. `update` null: no runtime to call (a shared
  // container gets its CPUs at CreateContainer and kubelet's updates only).
  CpuPools(std::string file, UpdateFn update, std::shared_ptr<spdlog::logger> log);
  ~CpuPools();  // writes what is pending, then stops the thread (after the move in flight)

  // Reads the file (none: empty pools; unreadable or malformed: logged naming
  // the file and the reason, and the pools start empty) and starts the
  // thread, which then moves every shared container whose CPUs are stale.
  // The file carries a format version (state_version.h; none = 1); one of a
  // newer version is logged as an error naming it, the version and the
  // versions read, and left as it is: the pools start empty and are kept in
  // memory only (never written over it).
  void start();

  // Pins. `key` names a container being created (sandbox/name/attempt): its
  // CPUs are held from reserve(), then under the container's id from
  // commit() until forget(). drop() undoes a reservation whose container was
  // not created; one neither committed nor dropped expires after 5 minutes.
  void reserve(const std::string& key, std::vector<int> cpus);
  void commit(const std::string& key, const std::string& id, CpuOwner owner);
  void drop(const std::string& key);

  // The CPUs of `node_cpus` that no pin (committed or reserved) holds; all of
  // `node_cpus` when pins hold every one of them (the container then shares
  // its NUMA nodes with the pins rather than run nowhere).
  std::vector<int> sharedCpus(const std::vector<int>& node_cpus) const;

  // A shared container that the runtime created with `applied` CPUs (a CPU
  // list); moved whenever that differs from sharedCpus(node_cpus).
  void addShared(const std::string& id, CpuOwner owner, std::vector<int> node_cpus,
                 std::string mems, std::string applied);
  // sharedCpus() of container `id` as a CPU list, when it is a shared one.
  std::optional<std::string> sharedCpusOf(const std::string& id) const;
  // What a call through crihookd (kubelet's UpdateContainerResources) gave
  // shared container `id`; "" when unknown (the call failed). Moved again if
  // that is stale.
  void applied(const std::string& id, std::string cpus);

  // A container stopped or removed: its pin released, or no longer moved.
  void forget(const std::string& id);
  void forgetSandbox(const std::string& sandbox_id);
  // Forgets the containers whose sandbox is not in `ready` (the runtime's
  // ready sandboxes as listed at `listed_at`), except those recorded since.
  void keepOnly(const std::set<std::string>& ready,
                std::chrono::system_clock::time_point listed_at);

  // Blocks (up to `timeout`) until the file is written and no move is due
  // now; false on timeout. For tests and orderly shutdown.
  bool settle(std::chrono::milliseconds timeout);
  // Shared containers whose CPUs at the runtime differ from what they should
  // be: moves owed, now or after a backoff (0 without UpdateFn). None owed
  // and no call made: the thread moves nothing. For tests.
  size_t owedMoves() const;

  std::vector<int> pinnedCpus() const;  // union of every pin's CPUs
  size_t sharedCount() const;

 private:
  struct Pin {
    CpuOwner owner;
    std::vector<int> cpus;
    std::chrono::system_clock::time_point since;
  };
  struct Pending {
    std::vector<int> cpus;
    std::chrono::steady_clock::time_point expires;
  };
  struct Shared {
    CpuOwner owner;
    std::vector<int> node_cpus;
    std::string mems;
    std::string applied;  // CPU list the runtime has; "" unknown
    std::chrono::system_clock::time_point since;
    int failures = 0;
    std::chrono::steady_clock::time_point next_try{};
  };
  struct Move {
    std::string id, cpus, mems;
    CpuOwner owner;
  };

  std::vector<int> sharedCpusLocked(const std::vector<int>& node_cpus) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void changedLocked(bool persist) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<Move> dueLocked(std::chrono::steady_clock::time_point now,
                                std::chrono::steady_clock::time_point& next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string toJsonLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops expired reservations (their CPUs are free again); lowers `next`
  // to the earliest expiry left.
  void expireLocked(std::chrono::steady_clock::time_point now,
                    std::chrono::steady_clock::time_point& next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the runtime answered to move `m`.
  void movedLocked(const Move& m, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void load();
  void write(const std::string& text);
  void loop();

  const std::string file_;
  const UpdateFn update_;
  std::shared_ptr<spdlog::logger> log_;
  // The file is of a newer format: never written. Set by load() before the
  // thread starts, read by it only after.
  bool keep_file_ = false;

  mutable Mutex mu_;
  CondVar wake_cv_;  // the thread: something changed, or stop
  CondVar idle_cv_;  // settle(): the thread went idle
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;  // the file is older than the records
  bool idle_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Pin> pins_ ABSL_GUARDED_BY(mu_);         // by container id
  std::map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by creation key
  std::map<std::string, Shared> shared_ ABSL_GUARDED_BY(mu_);    // by container id
  std::thread thread_;  // started by start() (with started_), joined by the destructor
};

}  // namespace crihook
