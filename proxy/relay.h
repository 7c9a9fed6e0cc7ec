#pragma once

// The data path: one kubelet-side HTTP/2 connection relayed to the runtime
// (relay::Transparent, transparent.h; docs/transparent-relay.md).
//
// Each accepted connection gets its own connection to the runtime, opened at
// accept, and both live on one EventLoop thread, so a call's frames are
// never touched by two threads and need no lock. Frames pass through as
// they came, every one read, with HTTP/2 flow control carried end to end.
// The calls crihookd answers itself (refused requests, intercepted methods,
// every call while the runtime could not be reached at accept) go on a side
// connection of crihookd's own; intercepted methods are buffered whole,
// decoded, run through the Interceptor's stages, and answered.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "config/config.h"
#include "cri/interceptor.h"
#include "metrics/call_metrics.h"
#include "proxy/event_loop.h"

namespace crihook {
namespace relay {
class Transparent;
}

// A warning a hostile peer can repeat at will (accept failing, connections
// cut at a limit): logged at most once per interval, with how many were held
// back since the last one. Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::milliseconds interval = std::chrono::seconds(10))
      : interval_(interval) {}
  // True when this occurrence is to be logged; `held_back` is then how many
  // occurrences since the last logged one were not.
  bool allow(uint64_t& held_back);

 private:
  const std::chrono::milliseconds interval_;
  Mutex mu_;
  std::chrono::steady_clock::time_point next_ ABSL_GUARDED_BY(mu_){};
  uint64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

// Limits against a hostile client; the [server] keys of the same names,
// their defaults the product's (config/config.h says why each is what it
// is).
struct RelayLimits {
  std::chrono::milliseconds preface_timeout = kDefaultPrefaceTimeout;
  std::chrono::milliseconds idle_timeout = kDefaultIdleTimeout;
  std::chrono::milliseconds request_timeout = kDefaultRequestTimeout;
  uint64_t max_connection_buffered_bytes = kDefaultMaxConnectionBufferedBytes;
  uint64_t max_buffered_bytes = kDefaultMaxBufferedBytes;
};

// The calls accepted and not yet answered, process-wide: counted as they
// come and go on the loops' threads (lock-free), waited for by a shutdown's
// grace. Thread-safe.
class ActiveCalls {
 public:
  void add() { n_.fetch_add(1); }
  // One answered: wakes a waiter once none is left.
  void done();
  int64_t load() const { return n_.load(); }
  // Blocks until no call is active or `deadline` has passed; whether none
  // is.
  bool waitForNone(std::chrono::steady_clock::time_point deadline);
  // How many are in waitForNone (a shutdown; the tests wait for it).
  int waiting() const { return waiters_.load(); }

 private:
  std::atomic<int64_t> n_{0};
  std::atomic<int> waiters_{0};  // in waitForNone: done() takes mu_ to wake them
  Mutex mu_;                     // guards no data: the condition is n_, read under it
  CondVar none_;
};

// What every connection of one server shares. Outlives all connections.
// Its defaults are the product's (config/config.h).
struct RelayContext {
  std::string backend_path;      // Unix socket of the CRI runtime
  std::string backend_endpoint;  // as configured, for messages
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  std::chrono::milliseconds connect_timeout = kDefaultBackendConnectTimeout;
  Interceptor* interceptor = nullptr;  // never null once serving
  // Runs a task off the event loops (large requests' pre stages:
  // intercept_stage.h kDecodeOffLoopBytes); unset: they run on their loop.
  // Set before serving; called from the loops.
  std::function<void(std::function<void()>)> offload;
  std::shared_ptr<spdlog::logger> log;
  ActiveCalls active_calls;
  RelayLimits limits;
  // Process-wide tallies, for the limits, the metrics endpoint and tests.
  std::atomic<int64_t> open_connections{0};  // Connections not yet destroyed
  // Of them, those crihookd stands in for the runtime on (accepted while it
  // could not be reached).
  std::atomic<int64_t> stand_in_connections{0};
  std::atomic<int64_t> buffered_bytes{0};        // intercepted calls' messages held
  std::atomic<int64_t> header_bytes{0};          // decoded header fields held, both directions
  LogLimiter timeout_log;                        // connections cut by a timeout
  LogLimiter refusal_log;                        // request header blocks refused
  metrics::CallMetrics* call_metrics = nullptr;  // every call, when it ends; null: none
};

class Connection {
 public:
  // `fd` is an accepted socket, non-blocking, now the connection's;
  // everything the connection does runs on `loop`, which outlives it. Opens
  // the connection to the runtime (crihookd stands in for it when it cannot
  // be reached) and has the loop start reading both. From any thread.
  Connection(relay::EventLoop& loop, int fd, RelayContext& ctx);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Graceful: GOAWAY to the client (no new streams), in-flight calls finish.
  // Thread-safe (posts to the connection's loop).
  void shutdown();

  // Abrupt: closes both sides now. Thread-safe.
  void close();

  // False once the connection has closed and released everything.
  // Thread-safe.
  bool alive() const;

 private:
  // Held by its loop's handlers and tasks, never here: it ends when it
  // closes.
  std::weak_ptr<relay::Transparent> relay_;
};

}  // namespace crihook
