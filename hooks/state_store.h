#pragma once

// What crihookd remembers about the pods and containers it saw: their
// configuration, what the hooks decided at each stage (with owners), and what
// went to the runtime. Hooks read it at later stages (StopContainer sees what
// CreateContainer applied), UpdateContainerResources re-applies the hooks'
// resource decisions from it, and `crihookctl explain` prints it.
//
// Kept in memory as immutable snapshots (readers hold a shared_ptr; writers
// replace it) and, when a directory is configured, one JSON file per pod
// (<dir>/pods/<sandbox id>.json, a crihook.hook.v1.PodState), written to a
// temporary file and renamed, so a crash leaves the old or the new record,
// never half of one; read back on start. Files are written by the store's
// own writer thread, never by the caller: a burst of changes to one pod is
// one write of its latest state, and a proxy event loop never waits on disk.
// A write that fails (a full disk) is logged naming the file, leaves the old
// file as it was, and is tried again every kStateWriteRetry until it
// succeeds, so the file catches up once space returns even if the pod does
// not change again. Every file operation goes through an Env (base/env.h).

#include <spdlog/logger.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "base/mutex.h"
#include "cri-api/crihook_hook_v1.pb.h"
#include "hooks/process_env.h"

namespace crihook {

// How soon a pod record whose write failed is written again. A full disk is
// freed by a person or a log rotation, in seconds to minutes; one small
// write every 5 s costs nothing meanwhile and puts the record on disk within
// 5 s of space returning.
inline constexpr std::chrono::milliseconds kStateWriteRetry{5000};

class StateStore {
 public:
  // `dir` empty: memory only. `env` (its files and clock) outlives the store.
  StateStore(std::string dir, std::shared_ptr<spdlog::logger> log, Env& env = processEnv());
  ~StateStore();  // writes what is still pending (a failed write is tried once more)

  // Creates the directory and reads the records in it. A file that cannot be
  // read or parsed is logged (naming it) and skipped; only a directory that
  // cannot be created is an error. Files carry a format version
  // (state_version.h; none = 1): a file of a newer version is logged as an
  // error naming the file, its version and the versions this build reads,
  // and is never overwritten nor removed (that pod's changes are kept in
  // memory only): the pod's record is history, not a debt.
  absl::Status load();

  // Snapshots; null when unknown. Thread-safe, non-blocking.
  std::shared_ptr<const hook::v1::PodRecord> pod(const std::string& sandbox_id) const;
  std::shared_ptr<const hook::v1::ContainerRecord> container(const std::string& id) const;

  // Store or replace in memory at once, and mark the pod's file to be
  // written (a failed write is logged; the memory copy stays). Thread-safe,
  // non-blocking.
  void putPod(hook::v1::PodRecord pod);
  void putContainer(hook::v1::ContainerRecord container);
  void removeContainer(const std::string& id);
  void removePod(const std::string& sandbox_id);  // and its containers

  // Squares the records with the runtime's own list (NRI's Synchronize):
  // `pods` and `containers` are every sandbox and container id it has. The
  // records of others are removed (they went away while crihookd did not
  // see it), and their ids returned. Thread-safe, non-blocking.
  struct Forgotten {
    std::vector<std::string> pods, containers;
  };
  Forgotten retainOnly(const std::set<std::string>& pods, const std::set<std::string>& containers);

  // Blocks until every change made so far was written, or its write failed
  // (then it is retried later, as above).
  void flush();

  size_t podCount() const;
  size_t containerCount() const;

  // The pods whose record's last write failed (they are retried; see
  // kStateWriteRetry), and why the latest of them failed ("" when none):
  // what /readyz and crihook_state_unwritten_records report. Thread-safe.
  size_t unwritten() const;
  std::string writeError() const;

  // Reads `dir` (not a running store) for the container whose id is `id` or
  // starts with it. NOT_FOUND, or INVALID_ARGUMENT when the prefix matches
  // several. Used by `crihookctl explain`.
  static absl::StatusOr<hook::v1::PodState> findContainer(const std::string& dir,
                                                          const std::string& id,
                                                          std::string* full_id);

 private:
  struct Pod {
    std::shared_ptr<const hook::v1::PodRecord> record;
    std::map<std::string, std::shared_ptr<const hook::v1::ContainerRecord>> containers;
  };
  void markDirtyLocked(const std::string& sandbox_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer thread ("state-writer"): writes the dirty pods' files, retries
  // failed ones, until stopping and everything was written or tried.
  void writeLoop();
  // The pod's latest state as its file's JSON; nullopt when it is gone.
  std::optional<std::string> podJson(const std::string& sandbox_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pod's record as `json`, or (nullopt) its file removed; why not
  // (logged). Called without mu_: it writes to disk.
  absl::Status writeFile(const std::string& sandbox_id, const std::optional<std::string>& json);

  const std::string dir_;
  const std::shared_ptr<spdlog::logger> log_;
  Env* const env_;
  mutable Mutex mu_;
  CondVar cv_;  // dirty_ grew, a write ended, or stopping
  // sandbox ids whose file is out of date
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  // sandbox ids whose file is of a newer format: never written
  std::set<std::string> refused_ ABSL_GUARDED_BY(mu_);
  // sandbox ids whose last write failed: tried again at retry_at_
  std::set<std::string> failed_ ABSL_GUARDED_BY(mu_);
  // sandbox ids whose latest write failed; kept through retries
  std::set<std::string> unwritten_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // the latest failure's
  MonotonicClock::time_point retry_at_ ABSL_GUARDED_BY(mu_);
  // stopping: the failed writes were given their last try
  bool last_try_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_ ABSL_GUARDED_BY(mu_);               // started by the first change
  std::map<std::string, Pod> pods_ ABSL_GUARDED_BY(mu_);  // by sandbox id
  // container id -> sandbox id
  std::map<std::string, std::string> container_sandbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace crihook
