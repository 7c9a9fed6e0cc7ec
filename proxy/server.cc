#include "proxy/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>

#include "base/text.h"
#include "base/thread_name.h"
#include "base/unix_listener.h"

namespace crihook {

namespace {

bool outOfResources(int e) { return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM; }

}  // namespace

// The listening socket's handler on loops_[0].
class Server::Acceptor final : public relay::IoHandler {
 public:
  explicit Acceptor(Server& server) : server_(server) {}
  void onReadable(bool) override { server_.acceptReady(); }
  void onWritable() override {}

 private:
  Server& server_;
};

Server::Server(const Config& config, Interceptor& interceptor, std::shared_ptr<spdlog::logger> log)
    : config_(config) {
  ctx_.backend_endpoint = config.backend_endpoint;
  ctx_.backend_path = unixSocketPath(config.backend_endpoint).value_or(config.backend_endpoint);
  ctx_.max_message_bytes = config.max_message_bytes;
  ctx_.connect_timeout = config.backend_connect_timeout;
  ctx_.limits.preface_timeout = config.preface_timeout;
  ctx_.limits.idle_timeout = config.idle_timeout;
  ctx_.limits.request_timeout = config.request_timeout;
  ctx_.limits.max_connection_buffered_bytes = config.max_connection_buffered_bytes;
  ctx_.limits.max_buffered_bytes = config.max_buffered_bytes;
  ctx_.interceptor = &interceptor;
  ctx_.log = std::move(log);
  ctx_.offload = [this](std::function<void()> task) { decoders_.post(std::move(task)); };
}

Server::~Server() {
  if (running_) shutdown(std::chrono::milliseconds(0));
  if (adopted_ && adopted_->fd >= 0) ::close(adopted_->fd);  // adopted, never served
  if (listen_fd_ >= 0) ::close(listen_fd_);                  // listened, never served
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Server::adoptListener(ActivatedSocket socket) { adopted_ = std::move(socket); }

absl::Status Server::start() {
  if (absl::Status s = listen(); !s.ok()) return s;
  serve();
  return absl::OkStatus();
}

void Server::serve() {
  loops_[0]->post([this] {
    accepting_ = true;
    acceptReady();  // what queued in the backlog since listen()
  });
}

absl::Status Server::listen() {
  // An adopted socket is served at the path it is bound to, whatever the
  // configuration says (main logs both when they differ).
  if (adopted_) config_.listen_path = adopted_->path;
  const std::string& path = config_.listen_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(
        cat("listen path ", path, ": longer than a Unix socket path may be"));
  }
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::FailedPreconditionError(
        cat("listen directory ", dir.string(), ": ", ec.message()));

  // The lock serialises two crihookds starting at once; the connect check
  // catches one that serves the path without the lock.
  const std::string lock_path = path + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    return absl::FailedPreconditionError(cat("lock file ", lock_path, ": ", std::strerror(errno)));
  }
  // An adopted socket accepts connections whoever serves it (systemd holds
  // it), so only the lock tells whether another crihookd is serving it.
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0 || (!adopted_ && unixSocketIsLive(path))) {
    return absl::FailedPreconditionError(
        cat("another crihookd is serving ", path, "; refusing to start a second one"));
  }
  if (!adopted_ && ::unlink(path.c_str()) == 0) ctx_.log->info("removed stale socket {}", path);

  const int workers = std::max(1, config_.workers);
  for (int i = 0; i < workers; ++i) {
    auto loop = relay::EventLoop::create();
    if (!loop.ok())
      return absl::FailedPreconditionError(cat("event loop: ", loop.status().message()));
    loops_.push_back(std::move(*loop));
  }

  if (adopted_) {
    // Its mode and group are the socket unit's (SocketMode=, SocketGroup=).
    listen_fd_ = adopted_->fd;
    adopted_->fd = -1;  // the server's now
  } else {
    // Listening with its mode and group before the path appears
    // (base/unix_listener.h): a client that dials as soon as the file
    // exists is never refused.
    auto fd = listenUnixSocket(
        path, {.mode = config_.socket_mode, .group = config_.socket_group, .what = "listen on"});
    if (!fd.ok()) return fd.status();
    listen_fd_ = *fd;
  }
  // Non-blocking: accepted until EAGAIN on each edge (acceptReady).
  if (const int flags = ::fcntl(listen_fd_, F_GETFL);
      flags < 0 || ::fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::FailedPreconditionError(
        adopted_ ? cat("activated socket ", path, " (fd ", listen_fd_, "): ", std::strerror(errno))
                 : cat("listen on ", path, ": ", std::strerror(errno)));
  }
  // Watched before the loop runs; accepted from only once serve() is called.
  acceptor_ = std::make_shared<Acceptor>(*this);
  if (absl::Status s = loops_[0]->watch(listen_fd_, acceptor_); !s.ok())
    return absl::FailedPreconditionError(cat("listen on ", path, ": ", s.message()));

  for (size_t i = 0; i < loops_.size(); ++i)
    threads_.push_back(namedThread(cat("relay-loop-", i), [l = loops_[i].get()] { l->run(); }));
  running_ = true;
  ctx_.log->info("{} {}, relaying to {} ({} event loops, transparent relay)",
                 adopted_ ? "serving the activated socket" : "listening on", path,
                 config_.backend_endpoint, workers);
  if (config_.relay == "terminating") {
    // The relay before there was one: accepted, so that an existing
    // configuration still starts.
    ctx_.log->warn(
        "server.relay = \"terminating\": the terminating relay no longer exists; the "
        "transparent relay serves every connection (remove the key)");
  }
  return absl::OkStatus();
}

void Server::acceptReady() {
  if (!accepting_ || accept_timer_ != 0) return;  // not yet, or backing off
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    uint64_t held_back = 0;
    if (fd < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return;  // drained: the next edge tells
      if (e == EINTR || e == ECONNABORTED) continue;
      if (outOfResources(e)) {
        accept_backoff_ = nextAcceptBackoff(accept_backoff_);
        if (accept_log_.allow(held_back)) {
          ctx_.log->warn(
              "accept: {}; retrying after {}ms, backing off up to {}ms; {} more failures "
              "since the last message",
              std::strerror(e), accept_backoff_.count(), kAcceptBackoffMax.count(), held_back);
        }
      } else {
        accept_backoff_ = kAcceptBackoffMin;
        if (accept_log_.allow(held_back)) {
          ctx_.log->warn("accept: {}; {} more failures since the last message", std::strerror(e),
                         held_back);
        }
      }
      // The connection stays in the backlog and no new edge comes for it:
      // try again after the backoff.
      acceptLater();
      return;
    }
    accept_backoff_ = std::chrono::milliseconds(0);
    if (ctx_.open_connections.load() >= config_.max_connections) {
      ::close(fd);
      if (refused_log_.allow(held_back)) {
        ctx_.log->warn(
            "closed a new connection: {} connections open, server.max_connections is {}; "
            "{} more closed since the last message",
            ctx_.open_connections.load(), config_.max_connections, held_back);
      }
      continue;
    }
    relay::EventLoop& loop = *loops_[next_loop_++ % loops_.size()];
    MutexLock lock(connections_mu_);
    connections_.remove_if([](const Connection& c) { return !c.alive(); });
    connections_.emplace_back(loop, fd, ctx_);
  }
}

void Server::acceptLater() {
  accept_timer_ = loops_[0]->runAfter(accept_backoff_, [this] {
    accept_timer_ = 0;
    acceptReady();
  });
}

void Server::closeListener() {
  accepting_ = false;
  if (accept_timer_ != 0) loops_[0]->cancel(accept_timer_);
  accept_timer_ = 0;
  if (listen_fd_ >= 0) {
    loops_[0]->unwatch(listen_fd_);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

int64_t Server::shutdown(std::chrono::milliseconds grace) {
  if (!running_) return 0;
  running_ = false;
  // Closed before the connections are told to go away, and waited for: a
  // connection accepted until then gets its GOAWAY below; one made after it
  // waits in the backlog (an activated socket) for the next crihookd.
  auto closed = std::make_shared<std::promise<void>>();
  loops_[0]->post([this, closed] {
    closeListener();
    closed->set_value();
  });
  closed->get_future().wait_for(std::chrono::seconds(2));
  ctx_.log->info("no longer accepting on {}; {} calls in flight", config_.listen_path,
                 ctx_.active_calls.load());
  {
    MutexLock lock(connections_mu_);
    for (Connection& c : connections_) c.shutdown();
  }
  const auto until = std::chrono::steady_clock::now() + grace;
  ctx_.active_calls.waitForNone(until);
  const int64_t cut = ctx_.active_calls.load();
  {
    MutexLock lock(connections_mu_);
    for (Connection& c : connections_) c.close();
  }
  // A loop runs the closes (and what they post) before it stops.
  for (auto& loop : loops_) loop->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  {
    MutexLock lock(connections_mu_);
    connections_.clear();
  }
  loops_.clear();
  acceptor_.reset();
  // systemd's socket stays: the next crihookd serves what queued meanwhile.
  if (!adopted_) ::unlink(config_.listen_path.c_str());
  return cut;
}

}  // namespace crihook
