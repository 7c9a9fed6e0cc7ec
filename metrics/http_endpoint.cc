#include "metrics/http_endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/text.h"
#include "base/thread_name.h"
#include "base/unix_listener.h"

namespace crihook::metrics {

namespace asio = boost::asio;
using Generic = asio::generic::stream_protocol;
using Acceptor = asio::basic_socket_acceptor<Generic>;

namespace {

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

std::string serialise(const HttpResponse& r) {
  std::string out =
      cat("HTTP/1.1 ", r.status, " ", reasonPhrase(r.status), "\r\nContent-Type: ", r.content_type,
          "\r\nContent-Length: ", r.body.size(), "\r\nConnection: close\r\n");
  if (r.status == 405) out += "Allow: GET\r\n";
  out += "\r\n";
  out += r.body;
  return out;
}

}  // namespace

struct HttpEndpoint::Impl : std::enable_shared_from_this<HttpEndpoint::Impl> {
  struct Conn : std::enable_shared_from_this<Conn> {
    Conn(Generic::socket s, Impl& owner)
        : socket(std::move(s)), timer(socket.get_executor()), owner(owner) {}
    Generic::socket socket;
    asio::steady_timer timer;
    Impl& owner;
    std::string request;
    std::array<char, 2048> buf;
    std::string out;
    bool done = false;      // a response is on its way or the connection is closed
    bool priority = false;  // a request for one of options.priority_paths
    uint64_t seq = 0;       // accept order: the lowest is the oldest
  };

  HttpEndpointOptions options;
  Handler handler;
  std::shared_ptr<spdlog::logger> log;
  asio::io_context loop{1};
  std::unique_ptr<Acceptor> acceptor;
  std::set<std::shared_ptr<Conn>> conns;  // loop thread only
  std::atomic<size_t> open{0};
  std::atomic<bool> stopped{false};
  uint64_t accepted = 0;  // loop thread only
  // accept()'s failures: the wait before the next try, how many in a row
  // (loop thread only), and in all (read by tests).
  asio::steady_timer accept_timer{loop};
  std::chrono::milliseconds accept_backoff{0};
  uint64_t accept_failures_in_a_row = 0;
  std::atomic<uint64_t> accept_failures{0};

  // Handlers capture `this`: they run only inside loop.run(), on the thread
  // that holds the Impl, and are destroyed with the loop, never run later.
  // What they touch (conns, each Conn) is the loop thread's alone: the
  // functions below but accept() assert they run there (debug builds).
  bool inLoop() { return loop.get_executor().running_in_this_thread(); }

  void accept() {
    acceptor->async_accept([this](const boost::system::error_code& ec, Generic::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) {
        if (accept_failures_in_a_row > 0) {
          log->info("metrics endpoint: accepting again after {} failed accept(s)",
                    accept_failures_in_a_row);
        }
        accept_failures_in_a_row = 0;
        accept_backoff = std::chrono::milliseconds(0);
        serve(std::move(socket));
        return accept();
      }
      ++accept_failures;
      accept_backoff = nextAcceptBackoff(accept_backoff);
      if (accept_failures_in_a_row++ == 0) {
        log->warn("metrics endpoint: accept: {}; retrying after {}ms, backing off up to {}ms",
                  ec.message(), accept_backoff.count(), kAcceptBackoffMax.count());
      }
      accept_timer.expires_after(accept_backoff);
      accept_timer.async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
    });
  }

  void serve(Generic::socket socket) {
    assert(inLoop());
    if (conns.size() >= options.max_connections && !makeRoom()) {
      // Every slot a probe's: no reply, no buffer, the connection closed.
      boost::system::error_code ignored;
      socket.close(ignored);
      log->debug("metrics endpoint: connection refused, {} probes open", conns.size());
      return;
    }
    auto c = std::make_shared<Conn>(std::move(socket), *this);
    c->seq = ++accepted;
    conns.insert(c);
    open = conns.size();
    c->timer.expires_after(options.read_timeout);
    c->timer.async_wait([this, c](const boost::system::error_code& ec) {
      if (ec || c->done) return;
      log->debug("metrics endpoint: request not read within {}ms; closed",
                 options.read_timeout.count());
      close(c);
    });
    read(c);
  }

  // Closes the oldest connection that is not a probe's; false when every
  // one is. A scan of at most max_connections.
  bool makeRoom() {
    assert(inLoop());
    std::shared_ptr<Conn> oldest;
    for (const auto& c : conns) {
      if (!c->priority && (!oldest || c->seq < oldest->seq)) oldest = c;
    }
    if (!oldest) return false;
    log->debug("metrics endpoint: {} connections open; the oldest closed for a new one",
               conns.size());
    close(oldest);
    return true;
  }

  void read(const std::shared_ptr<Conn>& c) {
    assert(inLoop());
    c->socket.async_read_some(asio::buffer(c->buf),
                              [this, c](const boost::system::error_code& ec, size_t n) {
                                if (c->done) return;
                                if (ec) {
                                  close(c);
                                  return;
                                }
                                c->request.append(c->buf.data(), n);
                                const size_t end = c->request.find("\r\n\r\n");
                                const bool complete = end != std::string::npos;
                                if ((complete && end + 4 > options.max_request_bytes) ||
                                    (!complete && c->request.size() >= options.max_request_bytes)) {
                                  respond(c, {431, "text/plain; charset=utf-8",
                                              cat("request line and headers are limited to ",
                                                  options.max_request_bytes, " bytes\n")});
                                  return;
                                }
                                if (!complete) {
                                  read(c);
                                  return;
                                }
                                handle(c, std::string_view(c->request).substr(0, end));
                              });
  }

  void handle(const std::shared_ptr<Conn>& c, std::string_view head) {
    const std::string_view line = head.substr(0, head.find("\r\n"));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
      respond(c, {400, "text/plain; charset=utf-8", "malformed request line\n"});
      return;
    }
    if (line.substr(0, sp1) != "GET") {
      respond(c, {405, "text/plain; charset=utf-8", "only GET is served\n"});
      return;
    }
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    c->priority = std::find(options.priority_paths.begin(), options.priority_paths.end(), target) !=
                  options.priority_paths.end();
    c->done = true;  // from here the reply or stop() ends it
    c->timer.cancel();
    // The reply may come from another thread, and after stop(): it holds the
    // Impl weakly, so a late reply keeps nothing alive.
    std::weak_ptr<Impl> weak = shared_from_this();
    handler(std::string(target), [weak, c](HttpResponse r) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      asio::post(self->loop, [weak, c, r = std::move(r)]() mutable {
        auto impl = weak.lock();
        if (!impl || impl->conns.count(c) == 0) return;  // stopped meanwhile
        impl->write(c, std::move(r));
      });
    });
  }

  void respond(const std::shared_ptr<Conn>& c, HttpResponse r) {
    assert(inLoop());
    c->done = true;
    c->timer.cancel();
    write(c, std::move(r));
  }

  void write(const std::shared_ptr<Conn>& c, HttpResponse r) {
    assert(inLoop());
    c->out = serialise(r);
    // A client that stops reading holds its slot no longer than this.
    c->timer.expires_after(options.write_timeout);
    c->timer.async_wait([this, c](const boost::system::error_code& ec) {
      if (ec || conns.count(c) == 0) return;
      log->debug("metrics endpoint: answer not read within {}ms; closed",
                 options.write_timeout.count());
      close(c);
    });
    asio::async_write(c->socket, asio::buffer(c->out),
                      [this, c](const boost::system::error_code&, size_t) { close(c); });
  }

  void close(const std::shared_ptr<Conn>& c) {
    assert(inLoop());
    c->done = true;
    boost::system::error_code ignored;
    c->timer.cancel();
    c->socket.shutdown(Generic::socket::shutdown_both, ignored);
    c->socket.close(ignored);
    conns.erase(c);
    open = conns.size();
  }
};

HttpEndpoint::HttpEndpoint(HttpEndpointOptions options, Handler handler,
                           std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->log = std::move(log);
}

HttpEndpoint::~HttpEndpoint() { stop(); }

size_t HttpEndpoint::connections() const { return impl_->open.load(); }

uint64_t HttpEndpoint::acceptFailures() const { return impl_->accept_failures.load(); }

absl::Status HttpEndpoint::start() {
  Impl& i = *impl_;
  const HttpEndpointOptions& o = i.options;
  boost::system::error_code ec;
  std::string where;
  if (!o.unix_path.empty()) {
    where = o.unix_path;
    std::error_code fec;
    const auto dir = std::filesystem::path(o.unix_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, fec);
    if (fec)
      return absl::FailedPreconditionError(
          cat("metrics listen directory ", dir.string(), ": ", fec.message()));
    if (unixSocketIsLive(o.unix_path))
      return absl::FailedPreconditionError(
          cat("metrics listen ", o.unix_path, ": another process serves it"));
    // Listening with its mode and group before the path appears
    // (config/unix_listener.h).
    auto fd = listenUnixSocket(
        o.unix_path, {.mode = o.unix_mode, .group = o.unix_group, .what = "metrics listen"});
    if (!fd.ok()) return fd.status();
    i.acceptor = std::make_unique<Acceptor>(i.loop);
    i.acceptor->assign(asio::generic::stream_protocol(AF_UNIX, 0), *fd, ec);
    if (ec) ::close(*fd);
  } else {
    auto address = asio::ip::make_address(o.tcp_host, ec);
    if (ec)
      return absl::InvalidArgumentError(cat("metrics listen ", o.tcp_host, ": not an IP address"));
    const asio::ip::tcp::endpoint tcp(address, o.tcp_port);
    where = cat(o.tcp_host, ":", o.tcp_port);
    const Generic::endpoint ep{tcp};
    i.acceptor = std::make_unique<Acceptor>(i.loop);
    i.acceptor->open(ep.protocol(), ec);
    if (!ec) i.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) i.acceptor->bind(ep, ec);
    if (!ec) i.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) return absl::FailedPreconditionError(cat("metrics listen ", where, ": ", ec.message()));
  if (o.unix_path.empty()) {
    // The bound port, for port 0.
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(i.acceptor->native_handle(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET)
        port_ = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      else if (ss.ss_family == AF_INET6)
        port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
  }
  i.accept();
  thread_ = namedThread("metrics-http", [impl = impl_] {
    auto guard = asio::make_work_guard(impl->loop);
    impl->loop.run();
  });
  return absl::OkStatus();
}

void HttpEndpoint::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (!thread_.joinable()) return;
  asio::post(impl_->loop, [impl = impl_] {
    boost::system::error_code ignored;
    impl->acceptor->close(ignored);
    auto conns = impl->conns;
    for (auto& c : conns) impl->close(c);
    impl->loop.stop();
  });
  thread_.join();
  if (!impl_->options.unix_path.empty()) ::unlink(impl_->options.unix_path.c_str());
}

}  // namespace crihook::metrics
