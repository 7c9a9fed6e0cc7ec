#include "hooks/state_store.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "hooks/state_version.h"

namespace crihook {
namespace {

namespace hv1 = ::crihook::hook::v1;
namespace fs = std::filesystem;
using google::protobuf::util::JsonParseOptions;
using google::protobuf::util::JsonPrintOptions;

// Runtime ids are hex; anything else must not become a path.
bool safeId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  }
  return true;
}

// The file's format version goes first in its JSON object, beside
// PodState's fields (readers ignore members they do not know; the version is
// checked before the rest is parsed).
std::string withVersion(const std::string& pod_state_json) {
  const std::string version = cat("{\"version\":", kPodStateVersion);
  if (pod_state_json.size() < 2 || pod_state_json.front() != '{') return version + "}";
  const bool empty = pod_state_json.find_first_not_of(" \n", 1) == pod_state_json.size() - 1;
  return cat(version, empty ? "" : ",", pod_state_json.substr(1));
}

// FAILED_PRECONDITION when the file is of a format version this build does
// not read (the caller leaves it alone); INVALID_ARGUMENT when it is not a
// pod record.
absl::StatusOr<hv1::PodState> readPodFile(Env& env, const fs::path& file) {
  // Written by this daemon: a link, a FIFO or a huge file there is not ours.
  auto text = env.readFile(file.string(), kMaxStateFileBytes, FileLinks::kRefuse);
  if (!text.ok())
    return absl::InvalidArgumentError(cat(file.string(), ": ", sv(text.status().message())));
  if (!jsonNestingWithin(*text, kMaxJsonNesting))
    return absl::InvalidArgumentError(
        cat(file.string(), ": not a pod record: nested deeper than ", kMaxJsonNesting));
  // The version first, from the JSON alone: a newer format may not parse as
  // this build's PodState at all, and must be named as newer, not as broken.
  const nlohmann::json peek = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (peek.is_discarded())
    return absl::InvalidArgumentError(cat(file.string(), ": not a pod record: not JSON"));
  if (auto v = stateVersionOf(peek, kPodStateVersion, cat("pod record ", file.string())); !v.ok())
    return v.status();
  hv1::PodState state;
  JsonParseOptions options;
  options.ignore_unknown_fields = true;  // fields added by a newer crihookd, same version
  auto s = google::protobuf::util::JsonStringToMessage(*text, &state, options);
  if (!s.ok())
    return absl::InvalidArgumentError(
        cat(file.string(), ": not a pod record: ", quote(s.message().ToString(), 200)));
  return state;
}

// Whether every record in `state` is of sandbox `id`, the file's name: a
// file copied under another pod's name would give that pod its containers.
bool ofSandbox(const hv1::PodState& state, const std::string& id) {
  if (state.has_pod() && state.pod().sandbox_id() != id) return false;
  return std::all_of(state.containers().begin(), state.containers().end(),
                     [&](const hv1::ContainerRecord& c) { return c.sandbox_id() == id; });
}

}  // namespace

StateStore::StateStore(std::string dir, std::shared_ptr<spdlog::logger> log, Env& env)
    : dir_(std::move(dir)), log_(std::move(log)), env_(&env) {}

absl::Status StateStore::load() {
  if (dir_.empty()) return absl::OkStatus();
  const std::string pods = (fs::path(dir_) / "pods").string();
  if (auto s = env_->makeDirectories(pods, 0755); !s.ok()) {
    return absl::FailedPreconditionError(cat("state directory: ", s.message()));
  }
  auto entries = env_->listDirectory(pods);
  if (!entries.ok()) {
    return absl::FailedPreconditionError(
        cat("state directory ", pods, " cannot be read: ", entries.status().message()));
  }
  MutexLock lock(mu_);
  for (const DirEntry& e : *entries) {
    const fs::path path = fs::path(pods) / e.name;
    if (path.extension() != ".json") continue;
    const std::string id = path.stem().string();
    if (!safeId(id)) {
      if (log_) log_->warn("{}: not named by a sandbox id; skipped", quote(path.string(), 256));
      continue;
    }
    auto state = readPodFile(*env_, path);
    if (state.status().code() == absl::StatusCode::kFailedPrecondition) {
      // Another crihookd's format: never overwritten nor removed by this one.
      refused_.insert(id);
      if (log_) {
        log_->error("{}; skipped and left as it is (this pod's changes are kept in memory only)",
                    sv(state.status().message()));
      }
      continue;
    }
    if (state.ok() && !ofSandbox(*state, id)) {
      state = absl::InvalidArgumentError(
          cat(path.string(), ": names another sandbox than its file name does"));
    }
    if (!state.ok()) {
      if (log_) log_->warn("{}; skipped", sv(state.status().message()));
      continue;
    }
    Pod& pod = pods_[id];
    if (state->has_pod()) pod.record = std::make_shared<const hv1::PodRecord>(state->pod());
    for (const auto& c : state->containers()) {
      pod.containers[c.id()] = std::make_shared<const hv1::ContainerRecord>(c);
      container_sandbox_[c.id()] = id;
    }
  }
  if (log_) {
    log_->info("{} pods and {} containers read from {}", pods_.size(), container_sandbox_.size(),
               dir_);
  }
  return absl::OkStatus();
}

std::shared_ptr<const hv1::PodRecord> StateStore::pod(const std::string& sandbox_id) const {
  MutexLock lock(mu_);
  auto it = pods_.find(sandbox_id);
  return it == pods_.end() ? nullptr : it->second.record;
}

std::shared_ptr<const hv1::ContainerRecord> StateStore::container(const std::string& id) const {
  MutexLock lock(mu_);
  auto s = container_sandbox_.find(id);
  if (s == container_sandbox_.end()) return nullptr;
  const Pod& pod = pods_.at(s->second);
  auto it = pod.containers.find(id);
  return it == pod.containers.end() ? nullptr : it->second;
}

void StateStore::putPod(hv1::PodRecord record) {
  MutexLock lock(mu_);
  const std::string id = record.sandbox_id();
  pods_[id].record = std::make_shared<const hv1::PodRecord>(std::move(record));
  markDirtyLocked(id);
}

void StateStore::putContainer(hv1::ContainerRecord record) {
  MutexLock lock(mu_);
  const std::string id = record.id(), sandbox = record.sandbox_id();
  pods_[sandbox].containers[id] = std::make_shared<const hv1::ContainerRecord>(std::move(record));
  container_sandbox_[id] = sandbox;
  markDirtyLocked(sandbox);
}

void StateStore::removeContainer(const std::string& id) {
  MutexLock lock(mu_);
  auto s = container_sandbox_.find(id);
  if (s == container_sandbox_.end()) return;
  const std::string sandbox = s->second;
  container_sandbox_.erase(s);
  pods_[sandbox].containers.erase(id);
  markDirtyLocked(sandbox);
}

void StateStore::removePod(const std::string& sandbox_id) {
  MutexLock lock(mu_);
  auto it = pods_.find(sandbox_id);
  if (it == pods_.end()) return;
  for (const auto& [id, c] : it->second.containers) container_sandbox_.erase(id);
  pods_.erase(it);
  markDirtyLocked(sandbox_id);  // the writer removes the file
}

StateStore::Forgotten StateStore::retainOnly(const std::set<std::string>& pods,
                                             const std::set<std::string>& containers) {
  MutexLock lock(mu_);
  Forgotten out;
  for (auto it = pods_.begin(); it != pods_.end();) {
    const std::string sandbox = it->first;
    Pod& pod = it->second;
    if (!pods.count(sandbox)) {
      if (pod.record) out.pods.push_back(sandbox);
      for (const auto& [id, c] : pod.containers) container_sandbox_.erase(id);
      it = pods_.erase(it);
      markDirtyLocked(sandbox);
      continue;
    }
    bool changed = false;
    for (auto c = pod.containers.begin(); c != pod.containers.end();) {
      if (containers.count(c->first)) {
        ++c;
        continue;
      }
      out.containers.push_back(c->first);
      container_sandbox_.erase(c->first);
      c = pod.containers.erase(c);
      changed = true;
    }
    if (changed) markDirtyLocked(sandbox);
    ++it;
  }
  return out;
}

size_t StateStore::podCount() const {
  MutexLock lock(mu_);
  return pods_.size();
}

size_t StateStore::containerCount() const {
  MutexLock lock(mu_);
  return container_sandbox_.size();
}

void StateStore::markDirtyLocked(const std::string& sandbox_id) {
  if (dir_.empty()) return;
  if (!safeId(sandbox_id)) {
    if (log_) log_->warn("sandbox id \"{}\" is not a file name; kept in memory only", sandbox_id);
    return;
  }
  if (refused_.count(sandbox_id)) return;  // its file is of a newer format (load() said so)
  dirty_.insert(sandbox_id);
  if (!writer_.joinable()) writer_ = namedThread("state-writer", [this] { writeLoop(); });
  cv_.notifyOne();
}

void StateStore::flush() {
  MutexLock lock(mu_);
  while (!dirty_.empty() || writing_) cv_.wait(lock);
}

StateStore::~StateStore() {
  std::thread writer;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    writer = std::move(writer_);
  }
  cv_.notifyAll();
  if (writer.joinable()) writer.join();  // writes what is still dirty first
}

void StateStore::writeLoop() {
  MutexLock lock(mu_);
  for (;;) {
    MonotonicClock& clock = env_->clock();
    // Failed writes come due again (or, when stopping, get their last try).
    if (!failed_.empty() && (clock.now() >= retry_at_ || (stopping_ && !last_try_))) {
      last_try_ = stopping_;
      dirty_.merge(failed_);
      failed_.clear();
    }
    if (dirty_.empty()) {
      if (stopping_) return;  // everything written, or tried for the last time
      if (failed_.empty()) {
        cv_.wait(lock);
      } else {
        // By the env's clock: a test jumps it.
        const MonotonicClock::time_point until = retry_at_;
        cv_.waitUntilBy(lock, clock, until);
      }
      continue;
    }
    std::set<std::string> batch;
    batch.swap(dirty_);
    writing_ = true;
    for (const std::string& id : batch) {
      // Serialised under the lock (a consistent snapshot), written without it.
      const std::optional<std::string> json = podJson(id);
      lock.unlock();
      const absl::Status written = writeFile(id, json);
      lock.lock();
      if (written.ok()) {
        failed_.erase(id);
        unwritten_.erase(id);
        continue;
      }
      unwritten_.insert(id);
      last_error_ = std::string(written.message());
      if (!dirty_.count(id)) {  // a newer change is written next anyway
        if (failed_.empty()) retry_at_ = clock.now() + kStateWriteRetry;
        failed_.insert(id);
      }
    }
    writing_ = false;
    cv_.notifyAll();
  }
}

std::optional<std::string> StateStore::podJson(const std::string& sandbox_id) const {
  auto it = pods_.find(sandbox_id);
  if (it == pods_.end()) return std::nullopt;
  hv1::PodState state;
  if (it->second.record) *state.mutable_pod() = *it->second.record;
  for (const auto& [cid, c] : it->second.containers) *state.add_containers() = *c;
  JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string body;
  (void)google::protobuf::util::MessageToJsonString(state, &body, options);
  return withVersion(body);
}

absl::Status StateStore::writeFile(const std::string& sandbox_id,
                                   const std::optional<std::string>& json) {
  const std::string path = (fs::path(dir_) / "pods" / (sandbox_id + ".json")).string();
  // Written whole beside it, then renamed over the old record: a reader or
  // a crash sees one or the other; a failed write leaves the old one.
  absl::Status s = json ? env_->writeFileAtomic(path, *json, Sync::kNone)
                        : env_->removeFile(path, Sync::kNone);  // the pod is gone
  if (s.ok()) return s;
  if (log_) {
    log_->error("{}; the record is kept in memory and written again in {}s", sv(s.message()),
                kStateWriteRetry.count() / 1000);
  }
  return s;
}

size_t StateStore::unwritten() const {
  MutexLock lock(mu_);
  return unwritten_.size();
}

std::string StateStore::writeError() const {
  MutexLock lock(mu_);
  return unwritten_.empty() ? std::string() : last_error_;
}

absl::StatusOr<hv1::PodState> StateStore::findContainer(const std::string& dir,
                                                        const std::string& id,
                                                        std::string* full_id) {
  Env& env = processEnv();  // crihookctl's: the real files
  auto entries = env.listDirectory((fs::path(dir) / "pods").string());
  if (!entries.ok()) {
    return absl::NotFoundError(
        cat("state directory ", dir, "/pods cannot be read: ", entries.status().message()));
  }
  std::optional<hv1::PodState> found;
  int matches = 0;
  for (const DirEntry& e : *entries) {
    const fs::path path = fs::path(dir) / "pods" / e.name;
    if (path.extension() != ".json") continue;
    auto state = readPodFile(env, path);
    if (!state.ok()) continue;
    for (const auto& c : state->containers()) {
      if (c.id().compare(0, id.size(), id) != 0 || id.empty()) continue;
      ++matches;
      if (c.id() == id) matches = 1;  // an exact id wins over prefixes
      *full_id = c.id();
      found = *state;
      if (c.id() == id) return *found;
    }
  }
  if (matches == 0) return absl::NotFoundError(cat("no container ", id, " in ", dir));
  if (matches > 1)
    return absl::InvalidArgumentError(
        cat("container id prefix ", id, " matches ", matches, " containers; give more of it"));
  return *found;
}

}  // namespace crihook
