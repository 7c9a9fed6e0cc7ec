#include "hooks/module/module_host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/mutex.h"
#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "confine/capabilities.h"
#include "confine/seccomp_filter.h"
#include "hooks/wire.h"

namespace crihook {
namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  char kind = 0;
  std::string payload;
};

void put32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

std::string frame(char kind, std::string_view payload) {
  std::string out;
  put32(out, static_cast<uint32_t>(payload.size() + 1));
  out.push_back(kind);
  out.append(payload);
  return out;
}

// Waits for `events` on fd until `deadline`: OK, or DEADLINE_EXCEEDED.
absl::Status waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int timeout = -1;
    if (deadline != Clock::time_point::max()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return absl::DeadlineExceededError("no answer in time");
      timeout = static_cast<int>(std::min<int64_t>(left + 1, 60000));
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, timeout);
    if (r < 0 && errno != EINTR) return absl::InternalError(cat("poll: ", strerror(errno)));
    if (r > 0) return absl::OkStatus();
  }
}

absl::Status writeAll(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status st = waitFor(fd, POLLOUT, deadline); !st.ok()) return st;
      continue;
    }
    return absl::UnavailableError(cat("the helper's socket is closed (", strerror(errno), ")"));
  }
  return absl::OkStatus();
}

absl::Status readExactly(int fd, char* out, size_t len, Clock::time_point deadline) {
  while (len > 0) {
    const ssize_t n = ::recv(fd, out, len, MSG_DONTWAIT);
    if (n > 0) {
      out += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return absl::UnavailableError("the helper's socket is closed (EOF)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status st = waitFor(fd, POLLIN, deadline); !st.ok()) return st;
      continue;
    }
    return absl::UnavailableError(cat("the helper's socket failed (", strerror(errno), ")"));
  }
  return absl::OkStatus();
}

// One frame, at most `max` bytes (kind and payload), by `deadline`.
absl::StatusOr<Frame> readFrame(int fd, size_t max, Clock::time_point deadline) {
  uint32_t len = 0;
  if (absl::Status st = readExactly(fd, reinterpret_cast<char*>(&len), 4, deadline); !st.ok())
    return st;
  if (len == 0 || len > max)
    return absl::InvalidArgumentError(cat("a frame of ", len, " bytes (1..", max, " allowed)"));
  Frame f;
  if (absl::Status st = readExactly(fd, &f.kind, 1, deadline); !st.ok()) return st;
  f.payload.resize(len - 1);
  if (absl::Status st = readExactly(fd, f.payload.data(), len - 1, deadline); !st.ok()) return st;
  return f;
}

// Holds a TimedMutex the caller took (lock() or tryLockUntil()) until the
// end of its scope, which releases it.
class ABSL_SCOPED_LOCKABLE HeldTimedMutex {
 public:
  explicit HeldTimedMutex(TimedMutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) : mu_(mu) {}
  ~HeldTimedMutex() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  HeldTimedMutex(const HeldTimedMutex&) = delete;
  HeldTimedMutex& operator=(const HeldTimedMutex&) = delete;

 private:
  TimedMutex& mu_;
};

bool get32(std::string_view& in, uint32_t& v) {
  if (in.size() < 4) return false;
  std::memcpy(&v, in.data(), 4);
  in.remove_prefix(4);
  return true;
}

// The helper of one module, as crihookd sees it.
class IsolatedModuleHook final : public Hook {
 public:
  IsolatedModuleHook(std::string name, std::string path, crihook_module_info info,
                     std::string settings, ModuleIsolation isolation,
                     std::shared_ptr<spdlog::logger> log)
      : name_(std::move(name)),
        path_(std::move(path)),
        info_(info),
        settings_(std::move(settings)),
        isolation_(std::move(isolation)),
        log_(std::move(log)) {
    if (!isolation_.launcher) isolation_.launcher = confine::processLauncher();
  }
  ~IsolatedModuleHook() override {
    mu_.lock();
    HeldTimedMutex held(mu_);
    drop();  // EOF: the host calls fini and exits
    reap();
  }

  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return (info_.stages & stageBit(m, p)) != 0;
  }
  bool honoursDeadline() const override { return true; }

  absl::Status startFirst() {
    mu_.lock();
    HeldTimedMutex held(mu_);
    absl::Status s = launch(Clock::time_point::max());
    if (s.ok()) s = awaitReady(Clock::time_point::max());
    if (!s.ok()) drop();
    return s;
  }

  // Starts a helper and sends it its settings, by `deadline`; its ready frame
  // is awaitReady's.
  absl::Status launch(Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reap();
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return absl::ResourceExhaustedError(cat("socketpair: ", strerror(errno)));
    confine::LaunchRequest request;
    request.argv = {isolation_.host,
                    "--module",
                    path_,
                    "--seccomp",
                    isolation_.seccomp,
                    "--capabilities",
                    isolation_.capabilities};
    auto pid = isolation_.launcher->start(request, pair[1]);
    ::close(pair[1]);
    if (!pid.ok()) {
      ::close(pair[0]);
      return absl::UnavailableError(
          cat("cannot start its helper ", isolation_.host, ": ", sv(pid.status().message())));
    }
    fd_ = pair[0];
    pid_ = *pid;
    ready_ = false;
    hello_.clear();
    start_until_ = Clock::now() + kHostStartTimeout;
    if (absl::Status s = writeAll(fd_, frame('I', settings_), std::min(deadline, start_until_));
        !s.ok())
      return absl::UnavailableError(cat("its helper did not start: ", sv(s.message())));
    return absl::OkStatus();
  }

  // Waits for the helper launch() started to say ready, by `deadline`, and
  // not past kHostStartTimeout from its launch. A call's deadline that comes
  // first leaves it starting, for the next call to wait on:
  // DEADLINE_EXCEEDED (a start under load outlasts a short budget; cutting it
  // there would never let one finish). Else FAILED_PRECONDITION (the host
  // refused: its reason) or UNAVAILABLE (it did not start); the caller drops
  // it.
  absl::Status awaitReady(Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Frame> hello = readHello(std::min(deadline, start_until_));
    if (hello.ok() && hello->kind == 'R') {
      ready_ = true;
      if (log_) log_->info("module {}: helper pid {} serving {}", name_, pid_, path_);
      return absl::OkStatus();
    }
    if (!hello.ok() && hello.status().code() == absl::StatusCode::kDeadlineExceeded &&
        Clock::now() < start_until_)
      return absl::DeadlineExceededError(cat("its helper (pid ", pid_, ") is still starting"));
    if (hello.ok() && hello->kind == 'E')
      return absl::FailedPreconditionError(boundedMessage(hello->payload, 2048));
    return absl::UnavailableError(
        cat("its helper did not start: ",
            hello.ok() ? "an unexpected frame" : std::string(sv(hello.status().message()))));
  }

  // The helper's first frame, read into hello_ as it comes, so that a call
  // whose deadline cuts it short leaves the rest for the next.
  absl::StatusOr<Frame> readHello(Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (;;) {
      if (hello_.size() >= 4) {
        uint32_t len = 0;
        std::memcpy(&len, hello_.data(), 4);
        if (len == 0 || len > kMaxHostReplyBytes)
          return absl::InvalidArgumentError(
              cat("a frame of ", len, " bytes (1..", kMaxHostReplyBytes, " allowed)"));
        if (hello_.size() >= 4 + size_t{len}) {
          // Nothing follows it: the host waits for a call.
          Frame f{hello_[4], hello_.substr(5, len - 1)};
          hello_.clear();
          return f;
        }
      }
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        hello_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return absl::UnavailableError("the helper's socket is closed (EOF)");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return absl::UnavailableError(cat("the helper's socket failed (", strerror(errno), ")"));
      if (absl::Status st = waitFor(fd_, POLLIN, deadline); !st.ok()) return st;
    }
  }

  HookDecision run(const HookInput& input) override {
    if (!mu_.tryLockUntil(input.deadline)) {
      return HookDecision::error(absl::DeadlineExceededError(
          "timed out waiting for its helper (it serves one call at a time)"));
    }
    HeldTimedMutex held(mu_);
    if (absl::Status s = readyHelper(input.deadline); !s.ok()) return HookDecision::error(s);
    return ask(input);
  }

 private:
  // A helper ready to be asked by `deadline`: the one there is, or a new one
  // once the backoff after a death has passed (a start that fails is a death
  // too). Else why not (timeToAsk's reasons included).
  absl::Status readyHelper(Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fd_ < 0) {
      const auto now = Clock::now();
      if (now < next_start_) {
        return absl::UnavailableError(
            cat("its helper died; restarting in ",
                std::chrono::duration_cast<std::chrono::milliseconds>(next_start_ - now).count(),
                "ms"));
      }
      if (absl::Status s = launch(deadline); !s.ok()) {
        died(cat("start failed: ", sv(s.message())));
        return s;
      }
    }
    const bool starting = !ready_;
    if (starting) {
      if (absl::Status s = awaitReady(deadline); !s.ok()) {
        if (s.code() != absl::StatusCode::kDeadlineExceeded)
          died(cat("start failed: ", sv(s.message())));
        return s;
      }
    }
    return timeToAsk(deadline, starting);
  }

  // The call, put to the ready helper, and its answer. A helper that does not
  // answer in time is replaced at once; one that ends or garbles its answer
  // is a death (restarted after the backoff).
  HookDecision ask(const HookInput& input) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto budget = input.deadline == Clock::time_point::max()
                            ? uint32_t{UINT32_MAX}
                            : static_cast<uint32_t>(std::clamp<int64_t>(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(
                                      input.deadline - Clock::now())
                                      .count(),
                                  1, UINT32_MAX));
    std::string query;
    put32(query, budget);
    query += moduleRequest(input);
    absl::Status s = writeAll(fd_, frame('Q', query), input.deadline);
    absl::StatusOr<Frame> answer =
        s.ok() ? readFrame(fd_, kMaxHostReplyBytes, input.deadline) : absl::StatusOr<Frame>(s);
    if (!answer.ok()) {
      const pid_t pid = pid_;
      if (answer.status().code() == absl::StatusCode::kDeadlineExceeded) {
        // The host ends itself kHostGrace past the budget; the next call
        // starts a new one at once.
        drop();
        return HookDecision::error(absl::DeadlineExceededError(
            cat("its helper (pid ", pid, ") did not answer in time; it is replaced")));
      }
      died(sv(answer.status().message()));
      return HookDecision::error(
          absl::UnavailableError(cat("its helper (pid ", pid, ") ended during the call (",
                                     sv(answer.status().message()), "); restarting it")));
    }
    std::string_view in = answer->payload;
    uint32_t rc = 0, n = 0;
    if (answer->kind != 'A' || !get32(in, rc) || !get32(in, n) || n > in.size()) {
      died("a malformed answer");
      return HookDecision::error(absl::UnavailableError("its helper sent a malformed answer"));
    }
    deaths_in_a_row_ = 0;
    return moduleDecision(name_, input.phase, static_cast<int>(rc), std::string(in.substr(0, n)),
                          std::string(in.substr(n)));
  }

  // DEADLINE_EXCEEDED, the helper kept, when the call has too little left to
  // ask it: nothing, or under kMinQueryAfterStart when it became ready during
  // this call. Asking then could only cut a helper that did nothing wrong.
  absl::Status timeToAsk(Clock::time_point deadline, bool became_ready) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (deadline == Clock::time_point::max()) return absl::OkStatus();
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      return absl::DeadlineExceededError(cat("no time left to ask its helper (pid ", pid_, ")",
                                             became_ready ? ", which was starting" : "",
                                             "; it is kept"));
    }
    if (became_ready && left < kMinQueryAfterStart) {
      return absl::DeadlineExceededError(
          cat("its helper (pid ", pid_, ") finished starting with ",
              std::chrono::duration_cast<std::chrono::milliseconds>(left).count(),
              "ms of the call left, too little to ask it (", kMinQueryAfterStart.count(),
              "ms at least); it is kept"));
    }
    return absl::OkStatus();
  }
  // Closes the channel (the host sees EOF) and remembers the pid to reap.
  void drop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ready_ = false;
    if (pid_ > 0) unreaped_.push_back(pid_);
    pid_ = -1;
  }
  // Reaps helpers this process started (DirectLauncher); the spawner reaps
  // those it started (ECHILD here).
  void reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::erase_if(unreaped_, [](pid_t p) { return ::waitpid(p, nullptr, WNOHANG) != 0; });
  }
  void died(std::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const pid_t pid = pid_;
    drop();
    const auto backoff =
        std::min(kHostFirstRestart * (int64_t{1} << std::min(deaths_in_a_row_, 20)),
                 std::chrono::duration_cast<std::chrono::milliseconds>(kHostLastRestart));
    ++deaths_in_a_row_;
    next_start_ = Clock::now() + backoff;
    if (log_) {
      log_->error("module {}: helper (pid {}) is gone: {}; restarting in {}ms", name_, pid,
                  quote(why, 200), backoff.count());
    }
  }

  const std::string name_;
  const std::string path_;
  const crihook_module_info info_;
  const std::string settings_;
  ModuleIsolation isolation_;
  std::shared_ptr<spdlog::logger> log_;

  TimedMutex mu_;  // one call at a time; guards the rest
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  pid_t pid_ ABSL_GUARDED_BY(mu_) = -1;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;  // its ready frame came
  // When a helper not ready is given up.
  Clock::time_point start_until_ ABSL_GUARDED_BY(mu_){};
  std::string hello_ ABSL_GUARDED_BY(mu_);  // its ready frame so far
  std::vector<pid_t> unreaped_ ABSL_GUARDED_BY(mu_);
  int deaths_in_a_row_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point next_start_ ABSL_GUARDED_BY(mu_){};
};

// Ends the host when a call runs past its budget plus kHostGrace: the
// module is hung, crihookd has given up on the call and starts a new helper.
class Watchdog {
 public:
  Watchdog() : thread_(namedThread("module-watchdog", [this] { loop(); })) { thread_.detach(); }
  void arm(Clock::time_point until) {
    MutexLock lock(mu_);
    until_ = until;
    cv_.notifyOne();
  }

 private:
  void loop() {
    MutexLock lock(mu_);
    for (;;) {
      if (until_ == Clock::time_point::max()) {
        cv_.wait(lock);
      } else if (cv_.waitUntil(lock, until_) == std::cv_status::timeout && Clock::now() >= until_) {
        static const char msg[] = "crihook-module-host: the module overran its call; exiting\n";
        (void)!::write(2, msg, sizeof(msg) - 1);
        ::_exit(124);
      }
    }
  }
  Mutex mu_;
  CondVar cv_;  // until_ changed
  Clock::time_point until_ ABSL_GUARDED_BY(mu_) = Clock::time_point::max();
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> loadIsolatedModuleHook(const std::string& name,
                                                             const std::string& path,
                                                             const std::string& settings_json,
                                                             const ModuleIsolation& isolation,
                                                             std::shared_ptr<spdlog::logger> log) {
  auto info = readModuleInfo(path);
  if (!info.ok()) return info.status();
  if (isolation.host.empty() || isolation.host[0] != '/')
    return absl::InvalidArgumentError(
        cat("module ", path, ": module host ", quote(isolation.host, 200), " is not absolute"));
  auto hook = std::make_shared<IsolatedModuleHook>(name, path, *info, settings_json, isolation,
                                                   std::move(log));
  // The first helper now: a module that cannot load or init is refused at
  // start-up, as an in-process one is.
  if (absl::Status s = hook->startFirst(); !s.ok())
    return absl::Status(s.code(), cat("module ", path, ": ", sv(s.message())));
  return std::shared_ptr<Hook>(std::move(hook));
}

int moduleHostMain(int fd, const std::string& path, const std::string& seccomp,
                   const std::string& capabilities) {
  ::prctl(PR_SET_NAME, "crihook-module", 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  auto refuse = [&](std::string_view why) {
    (void)writeAll(fd, frame('E', why), Clock::time_point::max());
    return 1;
  };
  auto init = readFrame(fd, kMaxHostRequestBytes, Clock::time_point::max());
  if (!init.ok() || init->kind != 'I') return 1;
  auto mode = confine::parseSeccompMode(seccomp);
  if (!mode.ok()) return refuse(cat("module host: --seccomp: ", sv(mode.status().message())));
  // Capabilities are per thread: dropped while the host has one.
  if (capabilities != "all") {
    std::vector<std::string> names;
    for (std::string_view rest = capabilities; capabilities != "none" && !rest.empty();) {
      const size_t comma = rest.find(',');
      names.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    auto keep = confine::parseCapabilities(names, "--capabilities");
    if (!keep.ok()) return refuse(cat("module host: ", sv(keep.status().message())));
    if (absl::Status s = confine::keepOnlyCapabilities(*keep); !s.ok())
      return refuse(cat("module host: ", sv(s.message())));
  }
  auto module = openModule(path, init->payload);
  if (!module.ok()) return refuse(sv(module.status().message()));
  // Never destroyed: its thread waits on it until the process exits.
  Watchdog& watchdog = *new Watchdog;
  if (auto n = confine::installFilter(*mode, confine::FilterFor::kDaemon); !n.ok())
    return refuse(cat("module host: ", sv(n.status().message())));
  if (!writeAll(fd, frame('R', ""), Clock::time_point::max()).ok()) return 1;
  for (;;) {
    auto q = readFrame(fd, kMaxHostRequestBytes, Clock::time_point::max());
    if (!q.ok() || q->kind != 'Q') break;  // EOF: crihookd let go of this helper
    std::string_view in = q->payload;
    uint32_t budget = 0;
    if (!get32(in, budget)) break;
    if (budget != UINT32_MAX)
      watchdog.arm(Clock::now() + std::chrono::milliseconds(budget) + kHostGrace);
    char* reply = nullptr;
    size_t reply_len = 0;
    char* error = nullptr;
    const int rc = module->run(module->instance, in.data(), in.size(), &reply, &reply_len, &error);
    watchdog.arm(Clock::time_point::max());
    std::string a;
    put32(a, static_cast<uint32_t>(rc));
    const size_t n = reply ? std::min(reply_len, kMaxModuleReplyBytes + 1) : 0;
    put32(a, static_cast<uint32_t>(n));
    if (reply) a.append(reply, n);
    if (error) a.append(error, ::strnlen(error, kMaxHostErrorBytes));
    if (reply) module->free(reply);
    if (error) module->free(error);
    if (!writeAll(fd, frame('A', a), Clock::time_point::max()).ok()) break;
  }
  module->fini(module->instance);
  return 0;
}

}  // namespace crihook
