#include "confine/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/text.h"
#include "base/thread_name.h"
#include "confine/capabilities.h"

extern char** environ;

namespace crihook::confine {
namespace {

constexpr uint32_t kVersion = 1;
// The largest reply: a status message or the output tail, plus a header.
constexpr size_t kMaxReplyBytes = kMaxOutputBytes + 2048;
// The largest request message: kMaxRequestBytes of strings, their length
// prefixes and the header.
constexpr size_t kMaxRequestMessage = kMaxRequestBytes + 4 * (kMaxArgs + kMaxEnv) + 64;
// How long past the command's own timeout the client waits for the worker's
// reply (it kills the command at the timeout; this covers fork and reaping).
constexpr std::chrono::milliseconds kReplyGrace{5000};
// The spawner's first message, after its own set-up; how long start() waits.
constexpr std::chrono::milliseconds kStartTimeout{5000};
// Longest status message carried in a reply.
constexpr size_t kMaxMessageBytes = 1024;

void put32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void putString(std::string& out, std::string_view s) {
  put32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads what encodeRequest / encodeReply wrote; every read is bounded by the
// bytes left.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool get32(uint32_t& v) {
    if (in_.size() < 4) return false;
    std::memcpy(&v, in_.data(), 4);
    in_.remove_prefix(4);
    return true;
  }
  bool getString(std::string& s, size_t max) {
    uint32_t n = 0;
    if (!get32(n) || n > in_.size() || n > max) return false;
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

absl::Status truncated(std::string_view what) {
  return absl::InvalidArgumentError(cat("spawner ", what, ": malformed or over its bounds"));
}

// Waits up to `timeout` for one message on `fd`; "" and OK on EOF is told
// apart by `eof`.
absl::StatusOr<std::string> receive(int fd, size_t max, std::chrono::milliseconds timeout,
                                    bool& eof) {
  eof = false;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return absl::DeadlineExceededError("no answer");
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) return absl::InternalError(cat("poll: ", strerror(errno)));
    if (r <= 0) continue;
    std::string buf(max + 1, '\0');
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(cat("recv: ", strerror(errno)));
    if (n == 0) {
      eof = true;
      return std::string();
    }
    if (static_cast<size_t>(n) > max) return absl::InvalidArgumentError("message over its bound");
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
}

void reapWorkers() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// A start request: fork and exec the process with `channel` as its fd 3
// (the spawner's child: reapWorkers reaps it); the reply carries its pid.
void serveStart(const LaunchRequest& request, int reply, int channel) {
  if (request.argv[0][0] != '/') {
    (void)sendWithFd(reply,
                     encodeReply(absl::InvalidArgumentError("argv[0]: not an absolute path")), -1);
    return;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    (void)sendWithFd(
        reply,
        encodeReply(absl::ResourceExhaustedError(cat("spawner cannot fork: ", strerror(errno)))),
        -1);
    return;
  }
  if (pid == 0) {
    // Single-threaded: the child may allocate.
    std::vector<char*> args, envp;
    for (const auto& a : request.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (channel == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      ::dup2(channel, 3);
    }
    ::close_range(4, ~0u, 0);
    ::execve(args[0], args.data(), request.env.empty() ? environ : envp.data());
    ::_exit(127);
  }
  LaunchResult started;
  started.code = pid;
  (void)sendWithFd(reply, encodeReply(started), -1);
}

// One request: validate, fork a worker, which runs it and replies on `reply`.
void serve(std::string_view bytes, bool truncated_msg, int reply, int channel) {
  absl::StatusOr<LaunchRequest> request =
      truncated_msg ? absl::StatusOr<LaunchRequest>(truncated("request")) : decodeRequest(bytes);
  if (request.ok()) {
    if (auto s = validateRequest(*request); !s.ok()) request = s;
  }
  if (!request.ok()) {
    (void)sendWithFd(reply, encodeReply(request.status()), -1);
    return;
  }
  if (channel >= 0) return serveStart(*request, reply, channel);
  const pid_t worker = ::fork();
  if (worker < 0) {
    (void)sendWithFd(reply,
                     encodeReply(absl::ResourceExhaustedError(
                         cat("spawner cannot fork a worker: ", strerror(errno)))),
                     -1);
    return;
  }
  if (worker == 0) {
    // The spawner is single-threaded, so the worker may allocate.
    DirectLauncher direct;
    (void)sendWithFd(reply, encodeReply(direct.launch(*request)), -1);
    ::_exit(0);
  }
}

}  // namespace

ssize_t sendWithFd(int sock, const std::string& bytes, int fd_to_pass, int second_fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  if (fd_to_pass >= 0) {
    const int fds[2] = {fd_to_pass, second_fd};
    const size_t count = second_fd >= 0 ? 2 : 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

std::string encodeRequest(const LaunchRequest& r) {
  std::string out;
  put32(out, kVersion);
  put32(out, static_cast<uint32_t>(std::min<int64_t>(r.timeout.count(), UINT32_MAX)));
  put32(out, static_cast<uint32_t>(r.argv.size()));
  put32(out, static_cast<uint32_t>(r.env.size()));
  for (const auto& a : r.argv) putString(out, a);
  for (const auto& e : r.env) putString(out, e);
  return out;
}

absl::StatusOr<LaunchRequest> decodeRequest(std::string_view bytes) {
  Reader in(bytes);
  uint32_t version = 0, timeout = 0, argc = 0, envc = 0;
  if (!in.get32(version) || version != kVersion) return truncated("request version");
  if (!in.get32(timeout) || !in.get32(argc) || !in.get32(envc) || argc > kMaxArgs || envc > kMaxEnv)
    return truncated("request header");
  LaunchRequest r;
  r.timeout = std::chrono::milliseconds(timeout);
  r.argv.resize(argc);
  r.env.resize(envc);
  for (auto& a : r.argv)
    if (!in.getString(a, kMaxRequestBytes)) return truncated("request argv");
  for (auto& e : r.env)
    if (!in.getString(e, kMaxRequestBytes)) return truncated("request env");
  if (!in.done()) return truncated("request (trailing bytes)");
  return r;
}

std::string encodeReply(const absl::StatusOr<LaunchResult>& result) {
  std::string out;
  put32(out, kVersion);
  if (!result.ok()) {
    put32(out, 1);
    put32(out, static_cast<uint32_t>(result.status().code()));
    putString(out, sv(result.status().message()).substr(0, kMaxMessageBytes));
    return out;
  }
  put32(out, 0);
  put32(out, static_cast<uint32_t>(result->end));
  put32(out, static_cast<uint32_t>(result->code));
  std::string_view output = result->output;
  if (output.size() > kMaxOutputBytes) output = output.substr(output.size() - kMaxOutputBytes);
  putString(out, output);
  return out;
}

absl::StatusOr<LaunchResult> decodeReply(std::string_view bytes) {
  Reader in(bytes);
  uint32_t version = 0, kind = 0;
  if (!in.get32(version) || version != kVersion || !in.get32(kind))
    return absl::InternalError("spawner reply: malformed header");
  if (kind == 1) {
    uint32_t code = 0;
    std::string message;
    if (!in.get32(code) || code == 0 || code > 16 || !in.getString(message, kMaxMessageBytes) ||
        !in.done())
      return absl::InternalError("spawner reply: malformed error");
    return absl::Status(static_cast<absl::StatusCode>(code), message);
  }
  uint32_t end = 0, code = 0;
  LaunchResult r;
  if (kind != 0 || !in.get32(end) || end > 2 || !in.get32(code) ||
      !in.getString(r.output, kMaxOutputBytes) || !in.done())
    return absl::InternalError("spawner reply: malformed result");
  r.end = static_cast<LaunchResult::End>(end);
  r.code = static_cast<int>(code);
  return r;
}

void spawnerMain(int fd, const SpawnerOptions& options) {
  setThreadName("crihook-spawner");
  // Everything but stdio and the socket: the spawner must not hold crihookd's
  // lock file, listening socket or records open.
  if (fd > 3) ::close_range(3, static_cast<unsigned>(fd - 1), 0);
  ::close_range(static_cast<unsigned>(fd + 1), ~0u, 0);
  ::signal(SIGPIPE, SIG_IGN);  // a caller that gave up must not kill a worker
  // Its life is crihookd's (EOF, PDEATHSIG), not the service's: systemd's
  // SIGTERM to the whole cgroup at stop must not cut the actions of calls
  // crihookd is still finishing in its grace period.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  absl::Status setup = absl::OkStatus();
  if (!options.keep_all_capabilities) setup = keepOnlyCapabilities(options.capabilities);
  if (setup.ok()) {
    auto n = installFilter(options.seccomp, FilterFor::kSpawner);
    if (!n.ok()) setup = n.status();
  }
  // The first message tells start() how set-up went: "R" ready, "E<why>"
  // (an empty SOCK_SEQPACKET message would read as EOF).
  (void)sendWithFd(fd, setup.ok() ? std::string("R") : cat("E", sv(setup.message())), -1);
  if (!setup.ok()) ::_exit(1);

  std::string buf(kMaxRequestMessage + 1, '\0');
  for (;;) {
    reapWorkers();
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 1000);  // wakes to reap finished workers
    if (r <= 0) continue;
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) ::_exit(0);  // crihookd closed its end: it is gone
    // Every passed descriptor is ours to close; the first is the reply end,
    // the second (a start request) the channel of the process to start.
    int reply = -1, channel = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (reply < 0) {
          reply = passed;
        } else if (channel < 0) {
          channel = passed;
        } else {
          ::close(passed);
        }
      }
    }
    if (reply < 0) continue;  // nobody to answer: not a request
    const bool too_big = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
                         static_cast<size_t>(n) > kMaxRequestMessage;
    serve(std::string_view(buf.data(), static_cast<size_t>(n)), too_big, reply, channel);
    ::close(reply);
    if (channel >= 0) ::close(channel);
  }
}

absl::StatusOr<std::unique_ptr<SpawnerClient>> SpawnerClient::start(const SpawnerOptions& options) {
  if (int n = processThreadCount(); n != 1)
    return absl::FailedPreconditionError(
        cat("spawner: must be forked while the process has one thread, it has ", n));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return absl::FailedPreconditionError(cat("spawner: socketpair: ", strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(pair[0]);
    ::close(pair[1]);
    return absl::FailedPreconditionError(cat("spawner: fork: ", strerror(e)));
  }
  if (pid == 0) {
    ::close(pair[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::getppid() != parent) ::_exit(0);  // crihookd died before the line above
    spawnerMain(pair[1], options);
  }
  ::close(pair[1]);
  std::unique_ptr<SpawnerClient> client(new SpawnerClient(pid, pair[0]));
  bool eof = false;
  auto hello = receive(pair[0], kMaxMessageBytes, kStartTimeout, eof);
  if (!hello.ok() || eof || *hello != "R") {
    const std::string why = !hello.ok() ? std::string(sv(hello.status().message()))
                            : eof       ? std::string("it exited")
                                        : hello->substr(1);
    return absl::FailedPreconditionError(cat("spawner (pid ", pid, ") did not start: ", why));
  }
  return client;
}

SpawnerClient::~SpawnerClient() {
  ::close(fd_);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

absl::StatusOr<LaunchResult> SpawnerClient::launch(const LaunchRequest& request) {
  if (auto s = validateRequest(request); !s.ok()) return s;
  auto gone = [&](std::string_view why) {
    gone_ = true;
    return absl::UnavailableError(cat("spawner (pid ", pid_, ") is gone: ", why));
  };
  if (gone_) return gone("it died earlier; crihookd must be restarted to run commands");
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return absl::ResourceExhaustedError(cat("spawner: socketpair: ", strerror(errno)));
  const ssize_t sent = sendWithFd(fd_, encodeRequest(request), pair[1]);
  const int send_errno = errno;
  ::close(pair[1]);
  if (sent < 0) {
    ::close(pair[0]);
    if (send_errno == EPIPE || send_errno == ECONNRESET || send_errno == ENOTCONN)
      return gone(strerror(send_errno));
    return absl::UnavailableError(cat("spawner (pid ", pid_, "): send: ", strerror(send_errno)));
  }
  bool eof = false;
  auto reply = receive(pair[0], kMaxReplyBytes, request.timeout + kReplyGrace, eof);
  ::close(pair[0]);
  if (!reply.ok())
    return absl::UnavailableError(cat("spawner (pid ", pid_, "): no reply for ", request.argv[0],
                                      ": ", sv(reply.status().message())));
  if (eof) {
    // The spawner closes our end unanswered only when it (or the worker) died.
    // (waitpid, not kill(pid, 0): crihookd's filter has no kill.)
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return gone("it exited");
    return absl::UnavailableError(cat("spawner (pid ", pid_, "): its worker for ", request.argv[0],
                                      " ended without a reply"));
  }
  return decodeReply(*reply);
}

absl::StatusOr<pid_t> SpawnerClient::start(const LaunchRequest& request, int channel) {
  if (auto s = validateRequest(request); !s.ok()) return s;
  if (gone_)
    return absl::UnavailableError(cat("spawner (pid ", pid_, ") is gone: it died earlier"));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return absl::ResourceExhaustedError(cat("spawner: socketpair: ", strerror(errno)));
  const ssize_t sent = sendWithFd(fd_, encodeRequest(request), pair[1], channel);
  const int send_errno = errno;
  ::close(pair[1]);
  if (sent < 0) {
    ::close(pair[0]);
    return absl::UnavailableError(cat("spawner (pid ", pid_, "): send: ", strerror(send_errno)));
  }
  bool eof = false;
  auto reply = receive(pair[0], kMaxReplyBytes, kReplyGrace, eof);
  ::close(pair[0]);
  if (!reply.ok() || eof)
    return absl::UnavailableError(
        cat("spawner (pid ", pid_, "): no reply for starting ", request.argv[0]));
  auto result = decodeReply(*reply);
  if (!result.ok()) return result.status();
  return static_cast<pid_t>(result->code);
}

}  // namespace crihook::confine
