#pragma once

// crihookd's listener: the Unix socket kubelet connects to, the event-loop
// threads, and graceful shutdown. One Server per process.

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/growing_pool.h"
#include "base/mutex.h"
#include "config/config.h"
#include "cri/interceptor.h"
#include "proxy/event_loop.h"
#include "proxy/relay.h"
#include "proxy/socket_activation.h"

namespace crihook {

// Threads decoding large intercepted requests at once (proxy/intercept_stage.h
// kDecodeOffLoopBytes). Decoding is CPU work: more threads than a node's
// spare cores would not finish sooner, and the buffer budget
// ([server] max_buffered_bytes) already bounds what they hold.
inline constexpr size_t kDecodeThreads = 4;

class Server {
 public:
  // `interceptor` must outlive the server.
  Server(const Config& config, Interceptor& interceptor, std::shared_ptr<spdlog::logger> log);
  ~Server();  // shuts down with no grace if still running

  // Serve `socket` (systemd's, from takeActivatedSocket) instead of binding
  // the configured path; the server owns the fd from here. start() then
  // neither removes, binds nor chmods the socket, and shutdown() leaves it
  // in place: connections made while no crihookd runs wait in its backlog
  // for the next one. Call before start().
  void adoptListener(ActivatedSocket socket);

  // Creates the socket directory, refuses to start while another live
  // crihookd serves the same path (FAILED_PRECONDITION; the lock
  // <path>.lock, also with an adopted socket), removes a stale socket, binds
  // with the configured mode and group, and starts the event-loop threads
  // ("relay-loop-N", one per server.workers).
  // Does not need the backend to be up. start() = listen() + serve().
  absl::Status start();
  // All of start() but accepting: the socket exists and connections wait in
  // its backlog until serve(). crihookd installs its seccomp filter in
  // between, so no call is ever relayed or hooked unconfined.
  absl::Status listen();
  // Starts accepting (after a successful listen()).
  void serve();

  // Stops accepting, sends GOAWAY on every connection, lets in-flight calls
  // finish for up to `grace` (woken when the last one is answered), then
  // closes everything and joins the threads. Blocks. Returns the number of
  // calls cut off when the grace ran out.
  int64_t shutdown(std::chrono::milliseconds grace);

  int64_t activeCalls() const { return ctx_.active_calls.load(); }
  // What the limits count (docs/operations.md "Limits and timeouts"), process-wide:
  // kubelet-side connections open, intercepted calls' message bytes
  // buffered, decoded header fields held.
  int64_t connections() const { return ctx_.open_connections.load(); }
  // Of them, those that opened while the runtime could not be reached, on
  // which crihookd stands in for the runtime until it answers and they
  // reconnect (exported as crihook_connections_terminating, the name of
  // earlier releases, whose terminating relay served them).
  int64_t standInConnections() const { return ctx_.stand_in_connections.load(); }
  int64_t bufferedBytes() const { return ctx_.buffered_bytes.load(); }
  int64_t heldHeaderBytes() const { return ctx_.header_bytes.load(); }
  // Every call is recorded there when it ends. Call before start(); `m`
  // must outlive the server.
  void setCallMetrics(metrics::CallMetrics* m) { ctx_.call_metrics = m; }

 private:
  class Acceptor;

  // On loops_[0]: accepts every connection waiting, handing each to the
  // next loop in turn. A connection past server.max_connections is closed
  // at once; out of descriptors or memory, accepting backs off
  // (kAcceptBackoffMin doubling to kAcceptBackoffMax) instead of spinning.
  void acceptReady();
  void acceptLater();
  void closeListener();

  Config config_;
  RelayContext ctx_;
  std::vector<std::unique_ptr<relay::EventLoop>> loops_;
  std::vector<std::thread> threads_;
  // Large requests' pre stages ("decode" threads, started as needed): after
  // the loops, so it is gone, its tasks run, before them.
  GrowingPool decoders_{"decode", kDecodeThreads};
  int listen_fd_ = -1;      // non-blocking, watched by loops_[0]
  bool accepting_ = false;  // on loops_[0]: serve() was called, not yet shut down
  std::shared_ptr<Acceptor> acceptor_;
  size_t next_loop_ = 0;
  uint64_t accept_timer_ = 0;  // on loops_[0]: the backoff's retry
  std::chrono::milliseconds accept_backoff_{0};
  LogLimiter accept_log_;
  LogLimiter refused_log_;
  int lock_fd_ = -1;
  std::optional<ActivatedSocket> adopted_;  // systemd's socket, served as it is
  Mutex connections_mu_;
  std::list<Connection> connections_ ABSL_GUARDED_BY(connections_mu_);
  bool running_ = false;
};

}  // namespace crihook
