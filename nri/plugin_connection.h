#pragma once

// One connection to a runtime's NRI socket, as an NRI plugin (NRI v0.6.1):
// crihookd dials the socket, registers (Runtime.RegisterPlugin on mux
// connection 2), then serves the runtime's calls of the Plugin service
// (Configure, Synchronize, CreateContainer, UpdateContainer, StopContainer,
// StateChange) on mux connection 1. What the calls mean is the caller's
// (Callbacks::on_call); this is the transport: the socket, the framing
// (wire.h), ttrpc's envelopes, stream ids, bounds and timeouts.
//
// Runs on the given io_context, which one thread runs; every callback is
// called there. A Reply may be called from any thread, also after the
// connection and its owner are gone (it holds the io_context, not the
// connection). Not thread-safe otherwise: start() and close() from the
// io_context's thread (or before it runs).

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nri/wire.h"

namespace crihook::nri {

// The plugin's name and index as the runtime orders plugins by: the index
// is two digits ("00".."99"), the name [A-Za-z0-9_.-], 1 to 64 characters.
struct PluginIdentity {
  std::string name;
  std::string index;
};
// INVALID_ARGUMENT naming the field when `id` is not one a runtime takes.
absl::Status validateIdentity(const PluginIdentity& id);

// A handler's answer to one call: a status (OK, or the error the runtime
// gets: its code and message travel as ttrpc's google.rpc.Status) and, when
// OK, the serialised response message.
using Reply = std::function<void(const absl::Status& status, std::string payload)>;

class PluginConnection : public std::enable_shared_from_this<PluginConnection> {
 public:
  struct Callbacks {
    // A call of the Plugin service: `method` ("Configure", …; the service
    // is checked), the serialised request, the runtime's deadline for it
    // (time_point::max() when it sent none). Answer once through `reply`;
    // a reply after the connection closed goes nowhere.
    std::function<void(std::string_view method, std::string payload,
                       std::chrono::steady_clock::time_point deadline, Reply reply)>
        on_call;
    // The connection ended: the runtime closed it, a protocol fault, a
    // registration that failed or took too long, or close(). Called once;
    // nothing is called after it.
    std::function<void(const absl::Status& why)> on_closed;
  };

  struct Options {
    std::string socket_path;
    PluginIdentity identity;
    // How long RegisterPlugin's answer may take (the runtime's own
    // registration timeout is 5 s).
    std::chrono::milliseconds register_timeout{2000};
  };

  // At most this many of the runtime's calls unanswered at once; past it a
  // call is answered RESOURCE_EXHAUSTED (a 0.6.1 runtime sends one at a
  // time).
  static constexpr size_t kMaxCallsInFlight = 64;
  // What may wait to be written, beyond the write under way, before the
  // runtime is taken not to read and the connection is ended.
  static constexpr size_t kMaxPendingOut = 16 << 20;

  PluginConnection(std::shared_ptr<boost::asio::io_context> io, Options options,
                   Callbacks callbacks);
  ~PluginConnection();
  PluginConnection(const PluginConnection&) = delete;
  PluginConnection& operator=(const PluginConnection&) = delete;

  // Dials and registers. `registered` is called once: OK when the runtime
  // accepted the registration, else why not (then on_closed follows).
  // Must be held by a shared_ptr.
  void start(std::function<void(const absl::Status&)> registered);

  // Ends the connection with `why` (on_closed gets it).
  void close(const absl::Status& why);

  bool closed() const { return closed_; }

 private:
  void read();
  void onMessage(Message m);
  void onRequest(Message m);
  void onResponse(Message m);
  void answer(uint32_t stream, const absl::Status& status, std::string payload);
  void send(const Message& m);
  void write();

  std::shared_ptr<boost::asio::io_context> io_;
  Options options_;
  Callbacks callbacks_;
  boost::asio::local::stream_protocol::socket socket_;
  boost::asio::steady_timer register_timer_;
  std::function<void(const absl::Status&)> registered_;
  Demux demux_;
  std::array<char, 64 << 10> buf_;
  std::string out_;      // waiting to be written
  std::string writing_;  // being written
  uint32_t last_runtime_stream_ = 0;
  size_t in_flight_ = 0;
  bool closed_ = false;
};

}  // namespace crihook::nri
