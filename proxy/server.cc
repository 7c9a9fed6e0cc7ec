#include "proxy/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>

#include "base/text.h"
#include "base/unix_listener.h"

namespace crihook {

namespace asio = boost::asio;
using Stream = asio::local::stream_protocol;

namespace {

// Backing off accept() while the process is out of descriptors (EMFILE,
// ENFILE) or kernel memory (ENOBUFS, ENOMEM): the pending connection stays in
// the backlog and accept fails again at once, so retrying at once spins a
// core. 10 ms lets a descriptor freed by a closing call be used soon; 1 s
// bounds how long a recovered daemon waits.
constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};

bool outOfResources(const boost::system::error_code& ec) {
  const int e = ec.value();
  return ec.category() == boost::system::system_category() &&
         (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM);
}

}  // namespace

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
}

Server::~Server() {
  if (running_) shutdown(std::chrono::milliseconds(0));
  if (adopted_ && adopted_->fd >= 0) ::close(adopted_->fd);  // adopted, never served
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Server::adoptListener(ActivatedSocket socket) { adopted_ = std::move(socket); }

absl::Status Server::start() {
  if (absl::Status s = listen(); !s.ok()) return s;
  serve();
  return absl::OkStatus();
}

void Server::serve() {
  asio::post(*loops_[0], [this] { accept(); });
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
  for (int i = 0; i < workers; ++i) loops_.push_back(std::make_unique<asio::io_context>(1));

  acceptor_ = std::make_unique<Stream::acceptor>(*loops_[0]);
  accept_timer_ = std::make_unique<asio::steady_timer>(*loops_[0]);
  boost::system::error_code bec;
  if (adopted_) {
    // Its mode and group are the socket unit's (SocketMode=, SocketGroup=).
    acceptor_->assign(Stream(), adopted_->fd, bec);
    if (bec) {
      return absl::FailedPreconditionError(
          cat("activated socket ", path, " (fd ", adopted_->fd, "): ", bec.message()));
    }
    adopted_->fd = -1;  // the acceptor's now
  } else {
    // Listening with its mode and group before the path appears
    // (config/unix_listener.h): a client that dials as soon as the file
    // exists is never refused.
    auto fd = listenUnixSocket(
        path, {.mode = config_.socket_mode, .group = config_.socket_group, .what = "listen on"});
    if (!fd.ok()) return fd.status();
    acceptor_->assign(Stream(), *fd, bec);
    if (bec) {
      ::close(*fd);
      return absl::FailedPreconditionError(cat("listen on ", path, ": ", bec.message()));
    }
  }

  for (auto& loop : loops_) {
    guards_.emplace_back(asio::make_work_guard(*loop));
    threads_.emplace_back([l = loop.get()] { l->run(); });
  }
  running_ = true;
  ctx_.log->info("{} {}, relaying to {} ({} event loops)",
                 adopted_ ? "serving the activated socket" : "listening on", path,
                 config_.backend_endpoint, workers);
  return absl::OkStatus();
}

void Server::accept() {
  asio::io_context& loop = *loops_[next_loop_++ % loops_.size()];
  acceptor_->async_accept(loop, [this](const boost::system::error_code& ec, Stream::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
    uint64_t held_back = 0;
    if (!ec) {
      accept_backoff_ = std::chrono::milliseconds(0);
      if (ctx_.open_connections.load() >= config_.max_connections) {
        boost::system::error_code ignored;
        socket.close(ignored);
        if (refused_log_.allow(held_back)) {
          ctx_.log->warn(
              "closed a new connection: {} connections open, server.max_connections is {}; "
              "{} more closed since the last message",
              ctx_.open_connections.load(), config_.max_connections, held_back);
        }
      } else {
        std::lock_guard lock(connections_mu_);
        connections_.remove_if([](const Connection& c) { return !c.alive(); });
        connections_.emplace_back(std::move(socket), ctx_).start();
      }
    } else if (outOfResources(ec)) {
      accept_backoff_ = std::clamp(accept_backoff_ * 2, kAcceptBackoffMin, kAcceptBackoffMax);
      if (accept_log_.allow(held_back)) {
        ctx_.log->warn(
            "accept: {}; retrying after {}ms, backing off up to {}ms; {} more failures "
            "since the last message",
            ec.message(), accept_backoff_.count(), kAcceptBackoffMax.count(), held_back);
      }
      acceptLater();
      return;
    } else if (accept_log_.allow(held_back)) {
      ctx_.log->warn("accept: {}; {} more failures since the last message", ec.message(),
                     held_back);
    }
    accept();
  });
}

void Server::acceptLater() {
  accept_timer_->expires_after(accept_backoff_);
  accept_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || !acceptor_->is_open()) return;
    accept();
  });
}

int64_t Server::shutdown(std::chrono::milliseconds grace) {
  if (!running_) return 0;
  running_ = false;
  // Closed before the connections are told to go away, and waited for: a
  // connection accepted until then gets its GOAWAY below; one made after it
  // waits in the backlog (an activated socket) for the next crihookd.
  auto closed = std::make_shared<std::promise<void>>();
  asio::post(*loops_[0], [this, closed] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    accept_timer_->cancel();
    closed->set_value();
  });
  closed->get_future().wait_for(std::chrono::seconds(2));
  ctx_.log->info("no longer accepting on {}; {} calls in flight", config_.listen_path,
                 ctx_.active_calls.load());
  {
    std::lock_guard lock(connections_mu_);
    for (Connection& c : connections_) c.shutdown();
  }
  const auto until = std::chrono::steady_clock::now() + grace;
  while (ctx_.active_calls.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int64_t cut = ctx_.active_calls.load();
  {
    std::lock_guard lock(connections_mu_);
    for (Connection& c : connections_) c.close();
  }
  // Let the closes and their handlers run out, then stop whatever is left.
  guards_.clear();
  const auto stop_by = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& loop : loops_) {
    while (!loop->stopped() && std::chrono::steady_clock::now() < stop_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    loop->stop();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  {
    std::lock_guard lock(connections_mu_);
    connections_.clear();
  }
  accept_timer_.reset();
  acceptor_.reset();
  loops_.clear();
  // systemd's socket stays: the next crihookd serves what queued meanwhile.
  if (!adopted_) ::unlink(config_.listen_path.c_str());
  return cut;
}

}  // namespace crihook
