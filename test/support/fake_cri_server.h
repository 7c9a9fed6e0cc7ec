#pragma once

// An in-process stand-in for a CRI runtime: a gRPC server on a Unix socket
// that answers any method path (declared in the CRI or not) with handlers the
// test installs. Handlers run on their own threads, so they may block, sleep
// and watch for cancellation.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace crihook::testing {

struct FakeCall {
  std::string method;
  std::multimap<std::string, std::string> metadata;  // what the client sent
  std::chrono::system_clock::time_point deadline;
  std::string request;  // serialized request message
  // Set by handlers to be sent back.
  std::multimap<std::string, std::string> trailing;
  // True once the client (or the proxy for it) cancelled.
  std::function<bool()> cancelled;
};

// Returns the status; on OK, `response` is the serialized reply.
using UnaryHandler = std::function<grpc::Status(FakeCall&, std::string* response)>;
// Writes zero or more messages with `write` (false: the stream is gone).
using StreamHandler =
    std::function<grpc::Status(FakeCall&, const std::function<bool(const std::string&)>& write)>;

class FakeCriServer {
 public:
  explicit FakeCriServer(std::string socket_path);
  ~FakeCriServer();

  void onUnary(const std::string& method, UnaryHandler handler);
  void onStream(const std::string& method, StreamHandler handler);

  // Starts (or restarts, after stop()) serving on the socket path.
  void start();
  // Stops serving: GOAWAY, in-flight calls get `grace`, then are cancelled.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  // Loses every connection it has accepted, at once, as a runtime process
  // that dies does: shutdown(2) of its end of each socket, so the peer reads
  // EOF with no GOAWAY or RST_STREAM before it (stop() sends those, however
  // short its grace). Handlers in flight see their calls cancelled; the
  // server keeps listening, as a restarted runtime would. Returns how many
  // connections were cut.
  int dropConnections();
  bool running() const { return server_ != nullptr; }

  // Calls received so far, in order (the requests as the runtime saw them).
  std::vector<FakeCall> calls() const;
  size_t callCount(const std::string& method) const;
  // Waits up to `timeout` for a call of `method` that `match`es, among the
  // calls from index `from` on (calls().size() taken earlier); true once one
  // is recorded (its handler may still be running).
  bool waitForCall(const std::string& method, const std::function<bool(const FakeCall&)>& match,
                   std::chrono::milliseconds timeout, size_t from = 0) const;
  std::atomic<int> cancellations{0};

  const std::string& path() const { return path_; }

 private:
  class Reactor;
  friend class Reactor;
  struct Handlers {
    std::map<std::string, UnaryHandler> unary;
    std::map<std::string, StreamHandler> stream;
  };

  std::string path_;
  mutable std::mutex mu_;
  mutable std::condition_variable recorded_;  // a call was added to calls_
  Handlers handlers_;
  std::vector<FakeCall> calls_;
  std::unique_ptr<grpc::CallbackGenericService> service_;
  std::unique_ptr<grpc::Server> server_;
};

// A unique short temporary directory (Unix socket paths are short), removed
// with its content on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A gRPC channel to a Unix socket with the given message limit.
std::shared_ptr<grpc::Channel> unixChannel(const std::string& path,
                                           int max_message_bytes = 64 << 20);

}  // namespace crihook::testing

namespace crihook::testing {

// A blocking unary call of any method path with raw message bytes.
grpc::Status genericUnary(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                          const std::string& method, const std::string& request,
                          std::string* response);

}  // namespace crihook::testing
