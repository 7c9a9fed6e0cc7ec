#pragma once

// A container runtime's side of an NRI socket, played by a test: it listens
// on a Unix socket, accepts the plugin, reads what the plugin sends (mux
// messages, nri/wire.h) and sends the runtime's calls and answers. Every
// wait is bounded (5 s); a missing message is a test failure, not a hang.
// One thread (the test's) uses it.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cri-api/ttrpc.pb.h"
#include "nri/wire.h"

namespace crihook::testing {

class FakeNriRuntime {
 public:
  // Listens on `path`.
  explicit FakeNriRuntime(const std::string& path) : path_(path) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
  }
  ~FakeNriRuntime() {
    if (plugin_ >= 0) ::close(plugin_);
    ::close(listener_);
  }
  FakeNriRuntime(const FakeNriRuntime&) = delete;
  FakeNriRuntime& operator=(const FakeNriRuntime&) = delete;

  const std::string& path() const { return path_; }

  // Accepts the plugin's connection (within 5 s); false when none came.
  bool accept() {
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, 5000) == 1) plugin_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    return plugin_ >= 0;
  }

  // Closes the runtime's end of the connection, as a runtime that exits.
  void hangUp() {
    if (plugin_ >= 0) ::close(plugin_);
    plugin_ = -1;
  }

  // Whether the plugin sent something within `ms` (read and kept for next()).
  bool sentWithin(int ms) { return pending_.size() > 0 || readOnce(ms); }

  // The next message the plugin sends, within 5 s.
  nri::Message next() {
    while (pending_.empty()) {
      if (!readOnce(5000)) {
        ADD_FAILURE() << "nothing from the plugin within 5 s";
        return {};
      }
    }
    nri::Message m = std::move(pending_.front());
    pending_.erase(pending_.begin());
    return m;
  }

  void send(const nri::Message& m) {
    std::string wire;
    ASSERT_TRUE(nri::appendMessage(wire, m).ok());
    ASSERT_EQ(::send(plugin_, wire.data(), wire.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(wire.size()));
  }

  // Reads the plugin's RegisterPlugin and answers it with `status` (OK:
  // none).
  void answerRegistration(const absl::Status& status = absl::OkStatus()) {
    nri::Message reg = next();
    ::ttrpc::Response resp;
    if (!status.ok()) {
      resp.mutable_status()->set_code(static_cast<int>(status.code()));
      resp.mutable_status()->set_message(std::string(status.message()));
    }
    send({nri::kRuntimeServiceConn, reg.stream, 2, 0, resp.SerializeAsString()});
  }

  // A call of `service`.`method` from the runtime on `stream`.
  void call(uint32_t stream, const std::string& method, const std::string& payload,
            const std::string& service = "nri.pkg.api.v1alpha1.Plugin") {
    ::ttrpc::Request req;
    req.set_service(service);
    req.set_method(method);
    req.set_payload(payload);
    req.set_timeout_nano(2'000'000'000);
    send({nri::kPluginServiceConn, stream, 1, 0, req.SerializeAsString()});
  }

  // The plugin's answer: its stream and decoded Response.
  std::pair<uint32_t, ::ttrpc::Response> answer() {
    nri::Message m = next();
    EXPECT_EQ(m.conn, nri::kPluginServiceConn);
    EXPECT_EQ(m.type, static_cast<uint8_t>(nri::MessageType::kResponse));
    ::ttrpc::Response resp;
    EXPECT_TRUE(resp.ParseFromString(m.payload));
    return {m.stream, resp};
  }

 private:
  bool readOnce(int ms) {
    pollfd p{plugin_, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return false;
    char buf[65536];
    const ssize_t n = ::recv(plugin_, buf, sizeof(buf), 0);
    if (n <= 0) {
      ADD_FAILURE() << "the plugin closed the connection";
      return false;
    }
    EXPECT_TRUE(demux_.feed(std::string_view(buf, n), pending_).ok());
    return true;
  }

  std::string path_;
  int listener_ = -1;
  int plugin_ = -1;
  nri::Demux demux_;
  std::vector<nri::Message> pending_;
};

}  // namespace crihook::testing
