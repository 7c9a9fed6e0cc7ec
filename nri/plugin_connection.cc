#include "nri/plugin_connection.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cctype>

#include "base/quote.h"
#include "base/text.h"
#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/ttrpc.pb.h"

namespace crihook::nri {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view kPluginService = "nri.pkg.api.v1alpha1.Plugin";
constexpr std::string_view kRuntimeService = "nri.pkg.api.v1alpha1.Runtime";
// The stream id of the plugin's first call (ttrpc's client ids are odd and
// rise from 1): RegisterPlugin.
constexpr uint32_t kRegisterStream = 1;
// A runtime that sends a deadline further out than this is held to this.
constexpr auto kMaxDeadline = std::chrono::hours(1);

absl::Status statusOf(const ::ttrpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), boundedMessage(s.message()));
}

}  // namespace

absl::Status validateIdentity(const PluginIdentity& id) {
  if (id.index.size() != 2 || !std::isdigit(static_cast<unsigned char>(id.index[0])) ||
      !std::isdigit(static_cast<unsigned char>(id.index[1]))) {
    return absl::InvalidArgumentError(
        cat("NRI plugin index: expected two digits, got ", quote(id.index)));
  }
  const bool name_ok =
      !id.name.empty() && id.name.size() <= 64 &&
      std::all_of(id.name.begin(), id.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      });
  if (!name_ok) {
    return absl::InvalidArgumentError(
        cat("NRI plugin name: expected 1 to 64 of [A-Za-z0-9_.-], got ", quote(id.name)));
  }
  return absl::OkStatus();
}

PluginConnection::PluginConnection(std::shared_ptr<asio::io_context> io, Options options,
                                   Callbacks callbacks)
    : io_(std::move(io)),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      socket_(*io_),
      register_timer_(*io_) {}

PluginConnection::~PluginConnection() = default;

void PluginConnection::start(std::function<void(const absl::Status&)> registered) {
  registered_ = std::move(registered);
  if (auto st = validateIdentity(options_.identity); !st.ok()) return close(st);
  auto self = shared_from_this();
  socket_.async_connect(
      asio::local::stream_protocol::endpoint(options_.socket_path),
      [self](const boost::system::error_code& ec) {
        if (self->closed_) return;
        if (ec) {
          return self->close(absl::UnavailableError(
              cat("NRI socket ", quote(self->options_.socket_path), ": ", ec.message())));
        }
        self->read();
        ::nri::pkg::api::v1alpha1::RegisterPluginRequest reg;
        reg.set_plugin_name(self->options_.identity.name);
        reg.set_plugin_idx(self->options_.identity.index);
        ::ttrpc::Request req;
        req.set_service(std::string(kRuntimeService));
        req.set_method("RegisterPlugin");
        req.set_payload(reg.SerializeAsString());
        req.set_timeout_nano(
            std::chrono::duration_cast<std::chrono::nanoseconds>(self->options_.register_timeout)
                .count());
        self->send({kRuntimeServiceConn, kRegisterStream,
                    static_cast<uint8_t>(MessageType::kRequest), 0, req.SerializeAsString()});
        self->register_timer_.expires_after(self->options_.register_timeout);
        self->register_timer_.async_wait([self](const boost::system::error_code& ec) {
          if (ec || self->closed_ || !self->registered_) return;
          self->close(
              absl::DeadlineExceededError(cat("NRI runtime did not answer RegisterPlugin within ",
                                              self->options_.register_timeout.count(), " ms")));
        });
      });
}

void PluginConnection::close(const absl::Status& why) {
  if (closed_) return;
  closed_ = true;
  register_timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (registered_) {
    auto registered = std::move(registered_);
    registered_ = nullptr;
    registered(why);
  }
  if (callbacks_.on_closed) callbacks_.on_closed(why);
}

void PluginConnection::read() {
  auto self = shared_from_this();
  socket_.async_read_some(
      asio::buffer(buf_), [self](const boost::system::error_code& ec, size_t n) {
        if (self->closed_) return;
        if (ec) {
          return self->close(absl::UnavailableError(
              ec == asio::error::eof ? std::string("the runtime closed the NRI connection")
                                     : cat("NRI connection: ", ec.message())));
        }
        std::vector<Message> messages;
        const absl::Status st = self->demux_.feed(std::string_view(self->buf_.data(), n), messages);
        for (Message& m : messages) {
          if (self->closed_) return;
          self->onMessage(std::move(m));
        }
        if (!st.ok()) return self->close(st);
        if (!self->closed_) self->read();
      });
}

void PluginConnection::onMessage(Message m) {
  if (m.conn == kPluginServiceConn && m.type == static_cast<uint8_t>(MessageType::kRequest))
    return onRequest(std::move(m));
  if (m.conn == kRuntimeServiceConn && m.type == static_cast<uint8_t>(MessageType::kResponse))
    return onResponse(std::move(m));
  // Streaming data, or a message type of a later ttrpc: no NRI call uses them.
}

void PluginConnection::onRequest(Message m) {
  // ttrpc's server rules: odd stream ids, each above the last.
  if (m.stream % 2 == 0 || m.stream <= last_runtime_stream_) {
    return answer(
        m.stream,
        absl::InvalidArgumentError(cat("ttrpc stream id ", m.stream,
                                       " is even or not above the last, ", last_runtime_stream_)),
        {});
  }
  last_runtime_stream_ = m.stream;
  if (m.too_large) {
    return answer(
        m.stream,
        absl::ResourceExhaustedError(cat("ttrpc message over ", kMaxTtrpcMessage, " bytes")), {});
  }
  ::ttrpc::Request req;
  if (!req.ParseFromString(m.payload))
    return answer(m.stream, absl::InvalidArgumentError("ttrpc request does not decode"), {});
  if (req.service() != kPluginService) {
    return answer(m.stream, absl::UnimplementedError(cat("service ", quote(req.service()))), {});
  }
  if (in_flight_ >= kMaxCallsInFlight) {
    return answer(
        m.stream,
        absl::ResourceExhaustedError(cat("crihookd has ", in_flight_, " NRI calls unanswered")),
        {});
  }
  Clock::time_point deadline = Clock::time_point::max();
  if (req.timeout_nano() > 0) {
    deadline = Clock::now() + std::min<Clock::duration>(
                                  std::chrono::nanoseconds(req.timeout_nano()), kMaxDeadline);
  }
  ++in_flight_;
  std::weak_ptr<PluginConnection> weak = weak_from_this();
  auto once = std::make_shared<std::atomic<bool>>(false);
  Reply reply = [weak, once, stream = m.stream, io = io_](const absl::Status& status,
                                                          std::string payload) {
    if (once->exchange(true)) return;
    asio::post(*io, [weak, stream, status, payload = std::move(payload)]() mutable {
      auto self = weak.lock();
      if (!self || self->closed_) return;
      --self->in_flight_;
      self->answer(stream, status, std::move(payload));
    });
  };
  if (!callbacks_.on_call) return reply(absl::UnimplementedError("no handler"), {});
  callbacks_.on_call(req.method(), std::move(*req.mutable_payload()), deadline, std::move(reply));
}

void PluginConnection::onResponse(Message m) {
  if (m.stream != kRegisterStream || !registered_) return;  // nothing else is called yet
  register_timer_.cancel();
  ::ttrpc::Response resp;
  absl::Status result;
  if (m.too_large || !resp.ParseFromString(m.payload)) {
    result = absl::InvalidArgumentError("NRI runtime's RegisterPlugin answer does not decode");
  } else if (resp.has_status() && resp.status().code() != 0) {
    result = statusOf(resp.status());
  }
  auto registered = std::move(registered_);
  registered_ = nullptr;
  if (!result.ok()) {
    const absl::Status why(result.code(), cat("NRI registration refused: ", result.message()));
    registered(why);
    return close(why);
  }
  registered(absl::OkStatus());
}

void PluginConnection::answer(uint32_t stream, const absl::Status& status, std::string payload) {
  ::ttrpc::Response resp;
  if (status.ok()) {
    resp.set_payload(std::move(payload));
  } else {
    resp.mutable_status()->set_code(static_cast<int32_t>(status.code()));
    resp.mutable_status()->set_message(boundedMessage(sv(status.message())));
  }
  std::string bytes = resp.SerializeAsString();
  if (bytes.size() > kMaxTtrpcMessage) {
    resp.Clear();
    resp.mutable_status()->set_code(static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
    resp.mutable_status()->set_message(
        cat("crihookd's answer is ", bytes.size(), " bytes, over ttrpc's ", kMaxTtrpcMessage));
    bytes = resp.SerializeAsString();
  }
  send({kPluginServiceConn, stream, static_cast<uint8_t>(MessageType::kResponse), 0,
        std::move(bytes)});
}

void PluginConnection::send(const Message& m) {
  if (closed_) return;
  if (auto st = appendMessage(out_, m); !st.ok()) return close(st);
  if (out_.size() > kMaxPendingOut)
    return close(absl::UnavailableError("the NRI runtime does not read what crihookd sends"));
  write();
}

void PluginConnection::write() {
  if (!writing_.empty() || out_.empty() || closed_) return;
  writing_.swap(out_);
  auto self = shared_from_this();
  asio::async_write(
      socket_, asio::buffer(writing_), [self](const boost::system::error_code& ec, size_t) {
        if (self->closed_) return;
        if (ec) {
          return self->close(absl::UnavailableError(cat("NRI connection: write: ", ec.message())));
        }
        self->writing_.clear();
        self->write();
      });
}

}  // namespace crihook::nri
