#include "hooks/builtin/devices/cpu_pools.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "hooks/process_env.h"
#include "hooks/state_version.h"
#include "topology/topology.h"

namespace crihook {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A node has a few hundred containers at most; the record of each is a few
// hundred bytes. Anything far beyond that is not a file this hook wrote.
constexpr size_t kMaxRecordBytes = 4 << 20;
// The record is {"pinned": {id: {...}}, "shared": {...}}: 3 levels.
constexpr int kMaxRecordNesting = 8;
// A CPU list of a record: every CPU of the largest node one by one is under
// 20 KiB.
constexpr size_t kMaxCpuListBytes = 64 << 10;
constexpr size_t kMaxContainers = 4096;
constexpr size_t kMaxIdBytes = 128;    // containerd ids are 64 hex digits
constexpr size_t kMaxNameBytes = 512;  // namespace/name of a pod, a container name
constexpr auto kPendingTtl = 5min;     // beyond kubelet's CreateContainer timeout
constexpr auto kFirstRetry = 500ms;
constexpr auto kMaxRetry = 30s;

std::string id12(const std::string& id) { return id.substr(0, 12); }

bool validId(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::vector<int> cpuList(const json& v, const char* key) {
  std::vector<int> out;
  auto it = v.find(key);
  if (it == v.end() || !it->is_string() ||
      it->get_ref<const std::string&>().size() > kMaxCpuListBytes ||
      !topology::parseCpuList(it->get<std::string>(), out))
    out.clear();
  return out;
}

std::string text(const json& v, const char* key) {
  auto it = v.find(key);
  if (it == v.end() || !it->is_string()) return "";
  std::string s = it->get<std::string>();
  return s.size() > kMaxNameBytes ? s.substr(0, kMaxNameBytes) : s;
}

json ownerJson(const CpuOwner& o, std::chrono::system_clock::time_point since) {
  return {{"sandbox", o.sandbox_id},
          {"pod", o.pod},
          {"container", o.container},
          {"since",
           std::chrono::duration_cast<std::chrono::seconds>(since.time_since_epoch()).count()}};
}

CpuOwner ownerOf(const json& v, std::chrono::system_clock::time_point* since) {
  auto s = v.find("since");
  *since = std::chrono::system_clock::time_point(
      std::chrono::seconds(s != v.end() && s->is_number_integer() ? s->get<int64_t>() : 0));
  return {text(v, "sandbox"), text(v, "pod"), text(v, "container")};
}

}  // namespace

CpuPools::CpuPools(std::string file, UpdateFn update, std::shared_ptr<spdlog::logger> log)
    : file_(std::move(file)), update_(std::move(update)), log_(std::move(log)) {}

CpuPools::~CpuPools() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_cv_.notifyAll();
  if (thread_.joinable()) thread_.join();
}

void CpuPools::start() {
  load();
  MutexLock lock(mu_);
  if (started_) return;
  started_ = true;
  wake_ = true;
  thread_ = namedThread("cpuset-pools", [this] { loop(); });
}

void CpuPools::load() {
  if (file_.empty()) return;
  // Written by this hook, but read as any file on disk is: a FIFO, a link or
  // a huge file there must not hang or sink crihookd's start.
  auto data = readRegularFile(file_, kMaxRecordBytes, FileLinks::kRefuse);
  if (!data.ok()) {
    if (data.status().code() != absl::StatusCode::kNotFound)
      log_->error("cpu pools {}: {}; starting empty", file_, sv(data.status().message()));
    return;
  }
  auto parsed = parseJsonBounded(*data, kMaxRecordBytes, kMaxRecordNesting);
  if (!parsed.ok() || !parsed->is_object()) {
    log_->error("cpu pools {}: {}; starting empty", file_,
                parsed.ok() ? "not a JSON object" : sv(parsed.status().message()));
    return;
  }
  const json& j = *parsed;
  if (auto v = stateVersionOf(j, kCpuPoolsVersion, cat("cpu pools ", file_)); !v.ok()) {
    if (v.status().code() == absl::StatusCode::kFailedPrecondition) {
      // A newer crihookd's pins: not ours to overwrite.
      keep_file_ = true;
      log_->error(
          "{}; left as it is, and this crihookd keeps its pins in memory only (its pins "
          "and those recorded there may overlap until the file is moved away)",
          sv(v.status().message()));
    } else {
      log_->error("{}; starting empty", sv(v.status().message()));
    }
    return;
  }
  MutexLock lock(mu_);
  size_t skipped = 0;
  if (auto p = j.find("pinned"); p != j.end() && p->is_object()) {
    for (const auto& [id, v] : p->items()) {
      Pin pin;
      if (pins_.size() >= kMaxContainers || !validId(id) || !v.is_object() ||
          (pin.cpus = cpuList(v, "cpus")).empty()) {
        ++skipped;
        continue;
      }
      pin.owner = ownerOf(v, &pin.since);
      pins_[id] = std::move(pin);
    }
  }
  if (auto s = j.find("shared"); s != j.end() && s->is_object()) {
    for (const auto& [id, v] : s->items()) {
      Shared sh;
      std::vector<int> mems;
      if (shared_.size() >= kMaxContainers || !validId(id) || !v.is_object() ||
          (sh.node_cpus = cpuList(v, "node_cpus")).empty() || (mems = cpuList(v, "mems")).empty()) {
        ++skipped;
        continue;
      }
      sh.owner = ownerOf(v, &sh.since);
      sh.mems = topology::formatCpuList(mems);
      std::vector<int> applied = cpuList(v, "applied");
      sh.applied = applied.empty() ? "" : topology::formatCpuList(applied);
      shared_[id] = std::move(sh);
    }
  }
  if (skipped > 0) log_->warn("cpu pools {}: {} malformed entries left out", file_, skipped);
  log_->info("cpu pools {}: {} pinned and {} shared containers", file_, pins_.size(),
             shared_.size());
}

void CpuPools::write(const std::string& text) {
  if (keep_file_) return;  // of a newer format (load() said so)
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
  if (absl::Status s = processEnv().writeFileAtomic(file_, text, Sync::kDurable); !s.ok())
    log_->error("cpu pools: {}; the record on disk is older", sv(s.message()));
}

std::string CpuPools::toJsonLocked() const {
  json pinned = json::object(), shared = json::object();
  for (const auto& [id, p] : pins_) {
    json v = ownerJson(p.owner, p.since);
    v["cpus"] = topology::formatCpuList(p.cpus);
    pinned[id] = std::move(v);
  }
  for (const auto& [id, s] : shared_) {
    json v = ownerJson(s.owner, s.since);
    v["node_cpus"] = topology::formatCpuList(s.node_cpus);
    v["mems"] = s.mems;
    v["applied"] = s.applied;
    shared[id] = std::move(v);
  }
  return json{{"version", kCpuPoolsVersion},
              {"pinned", std::move(pinned)},
              {"shared", std::move(shared)}}
             .dump(1) +
         "\n";
}

void CpuPools::changedLocked(bool persist) {
  if (persist) dirty_ = true;
  wake_ = true;
  idle_ = false;
  wake_cv_.notifyAll();
}

void CpuPools::reserve(const std::string& key, std::vector<int> cpus) {
  MutexLock lock(mu_);
  pending_[key] = {std::move(cpus), Clock::now() + kPendingTtl};
  changedLocked(false);
}

void CpuPools::commit(const std::string& key, const std::string& id, CpuOwner owner) {
  MutexLock lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  if (validId(id))
    pins_[id] = {std::move(owner), std::move(it->second.cpus), std::chrono::system_clock::now()};
  pending_.erase(it);
  changedLocked(true);
}

void CpuPools::drop(const std::string& key) {
  MutexLock lock(mu_);
  if (pending_.erase(key) > 0) changedLocked(false);
}

std::vector<int> CpuPools::sharedCpusLocked(const std::vector<int>& node_cpus) const {
  std::set<int> held;
  for (const auto& [id, p] : pins_) held.insert(p.cpus.begin(), p.cpus.end());
  const auto now = Clock::now();
  for (const auto& [key, p] : pending_) {
    if (p.expires > now) held.insert(p.cpus.begin(), p.cpus.end());
  }
  std::vector<int> out;
  for (int c : node_cpus) {
    if (!held.count(c)) out.push_back(c);
  }
  return out.empty() ? node_cpus : out;
}

std::vector<int> CpuPools::sharedCpus(const std::vector<int>& node_cpus) const {
  MutexLock lock(mu_);
  return sharedCpusLocked(node_cpus);
}

void CpuPools::addShared(const std::string& id, CpuOwner owner, std::vector<int> node_cpus,
                         std::string mems, std::string applied) {
  if (!validId(id) || node_cpus.empty()) return;
  MutexLock lock(mu_);
  if (shared_.size() >= kMaxContainers && !shared_.count(id)) {
    log_->error(
        "pod {} container {} ({}): {} shared containers recorded already; not moved "
        "when pins change",
        owner.pod, owner.container, id12(id), kMaxContainers);
    return;
  }
  Shared& s = shared_[id];
  s.owner = std::move(owner);
  s.node_cpus = std::move(node_cpus);
  s.mems = std::move(mems);
  s.applied = std::move(applied);
  s.since = std::chrono::system_clock::now();
  s.failures = 0;
  s.next_try = {};
  changedLocked(true);
}

std::optional<std::string> CpuPools::sharedCpusOf(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = shared_.find(id);
  if (it == shared_.end()) return std::nullopt;
  return topology::formatCpuList(sharedCpusLocked(it->second.node_cpus));
}

void CpuPools::applied(const std::string& id, std::string cpus) {
  MutexLock lock(mu_);
  auto it = shared_.find(id);
  if (it == shared_.end() || it->second.applied == cpus) return;
  it->second.applied = std::move(cpus);
  changedLocked(true);
}

void CpuPools::forget(const std::string& id) {
  MutexLock lock(mu_);
  if (pins_.erase(id) + shared_.erase(id) > 0) changedLocked(true);
}

void CpuPools::forgetSandbox(const std::string& sandbox_id) {
  MutexLock lock(mu_);
  const size_t before = pins_.size() + shared_.size();
  std::erase_if(pins_, [&](const auto& e) { return e.second.owner.sandbox_id == sandbox_id; });
  std::erase_if(shared_, [&](const auto& e) { return e.second.owner.sandbox_id == sandbox_id; });
  if (pins_.size() + shared_.size() != before) changedLocked(true);
}

void CpuPools::keepOnly(const std::set<std::string>& ready,
                        std::chrono::system_clock::time_point listed_at) {
  MutexLock lock(mu_);
  auto gone = [&](const auto& e) {
    if (e.second.since >= listed_at || ready.count(e.second.owner.sandbox_id)) return false;
    log_->info("pod {} container {} ({}): its sandbox is no longer running; forgotten",
               e.second.owner.pod, e.second.owner.container, id12(e.first));
    return true;
  };
  const size_t before = pins_.size() + shared_.size();
  std::erase_if(pins_, gone);
  std::erase_if(shared_, gone);
  if (pins_.size() + shared_.size() != before) changedLocked(true);
}

std::vector<int> CpuPools::pinnedCpus() const {
  MutexLock lock(mu_);
  std::set<int> held;
  for (const auto& [id, p] : pins_) held.insert(p.cpus.begin(), p.cpus.end());
  return {held.begin(), held.end()};
}

size_t CpuPools::sharedCount() const {
  MutexLock lock(mu_);
  return shared_.size();
}

std::optional<CpuPools::Move> CpuPools::dueLocked(Clock::time_point now,
                                                  Clock::time_point& next) const {
  if (!update_) return std::nullopt;
  for (const auto& [id, s] : shared_) {
    const std::string cpus = topology::formatCpuList(sharedCpusLocked(s.node_cpus));
    if (cpus == s.applied) continue;
    if (s.next_try <= now) return Move{id, cpus, s.mems, s.owner};
    next = std::min(next, s.next_try);
  }
  return std::nullopt;
}

bool CpuPools::settle(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return idle_cv_.waitFor(lock, timeout, [&] {
    mu_.assertHeld();
    return idle_ || !started_;
  });
}

size_t CpuPools::owedMoves() const {
  MutexLock lock(mu_);
  if (!update_) return 0;
  size_t owed = 0;
  for (const auto& [id, s] : shared_)
    owed += topology::formatCpuList(sharedCpusLocked(s.node_cpus)) != s.applied;
  return owed;
}

void CpuPools::expireLocked(Clock::time_point now, Clock::time_point& next) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.expires <= now) {
      it = pending_.erase(it);  // its CPUs are free again: shared containers may widen
      wake_ = true;
    } else {
      next = std::min(next, it->second.expires);
      ++it;
    }
  }
}

void CpuPools::movedLocked(const Move& m, const absl::Status& s) {
  auto it = shared_.find(m.id);
  if (it == shared_.end()) return;  // forgotten meanwhile
  Shared& sh = it->second;
  if (s.ok()) {
    log_->info("pod {} container {} ({}): moved to CPUs {} (mems {})", sh.owner.pod,
               sh.owner.container, id12(m.id), m.cpus, m.mems);
    sh.applied = m.cpus;
    sh.failures = 0;
    dirty_ = true;
  } else if (s.code() == absl::StatusCode::kNotFound) {
    log_->info("pod {} container {} ({}): the runtime no longer has it; forgotten", sh.owner.pod,
               sh.owner.container, id12(m.id));
    shared_.erase(it);
    dirty_ = true;
  } else {
    const auto wait = std::min<std::chrono::milliseconds>(
        kMaxRetry, kFirstRetry * (1 << std::min(sh.failures, 6)));
    ++sh.failures;
    sh.next_try = Clock::now() + wait;
    log_->warn("pod {} container {} ({}): cannot move to CPUs {}: {}; retry in {} ms", sh.owner.pod,
               sh.owner.container, id12(m.id), m.cpus, quote(sv(s.message())), wait.count());
  }
}

// Each turn does one thing with the lock released (write the file, or move
// one container), then looks again: a change made meanwhile is never missed.
void CpuPools::loop() {
  MutexLock lock(mu_);
  for (;;) {
    wake_ = false;
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    expireLocked(now, next);
    if (dirty_ && file_.empty()) dirty_ = false;  // memory only
    if (dirty_) {
      dirty_ = false;
      const std::string text = toJsonLocked();
      lock.unlock();
      write(text);
      lock.lock();
      continue;
    }
    if (stopping_) break;  // after the last write: a restart reads what was decided
    if (std::optional<Move> m = dueLocked(now, next)) {
      lock.unlock();
      const absl::Status s = update_(m->id, m->cpus, m->mems);
      lock.lock();
      movedLocked(*m, s);
      continue;
    }
    if (wake_) continue;
    idle_ = true;
    idle_cv_.notifyAll();
    while (!stopping_ && !wake_) {
      if (next == Clock::time_point::max()) {
        wake_cv_.wait(lock);
      } else if (wake_cv_.waitUntil(lock, next) == std::cv_status::timeout) {
        break;
      }
    }
    idle_ = false;
  }
  idle_ = true;
  idle_cv_.notifyAll();
}

}  // namespace crihook
