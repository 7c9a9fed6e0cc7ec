// nri_null_plugin: the least an NRI plugin doing the bench's hook costs.
// bench/nri-mode.sh runs it as a fourth configuration beside direct, proxy
// mode and crihookd in NRI mode, so the report can tell the runtime's own
// NRI path (what any plugin pays) from crihookd's part of NRI mode.
//
//   nri_null_plugin --socket PATH [--index NN] [--name NAME]
//
// It registers as crihookd does (nri/plugin_connection.h: the same
// transport), subscribes to the events crihookd subscribes to when its only
// hook is on PreCreateContainer (nri::subscribedEvents: RunPodSandbox,
// CreateContainer, UpdateContainer, RemoveContainer, RemovePodSandbox), and
// answers each at once: CreateContainer with the adjustment the bench's
// static hook makes (env CRIHOOK_BENCH=hooked, so the runtime applies one
// as it does for crihookd and the bench's probe finds it), every other call
// with an empty answer. No hooks, no records, no logging per call. Prints
// "registered" on stdout once the runtime sent Synchronize (the point from
// which it sends events); exits 0 on SIGTERM or SIGINT, 1 when the
// connection ends otherwise.

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "nri/budget.h"
#include "nri/plugin_connection.h"
#include "nri/translate.h"

namespace {

namespace asio = boost::asio;
namespace api = crihook::nri::api;

int usage() {
  std::fprintf(stderr, "usage: nri_null_plugin --socket PATH [--index NN] [--name NAME]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  crihook::nri::PluginConnection::Options options;
  options.identity = {"null-bench", "10"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--socket")) {
      options.socket_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--index")) {
      options.identity.index = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--name")) {
      options.identity.name = argv[i + 1];
    } else {
      return usage();
    }
  }
  if (options.socket_path.empty() || argc % 2 == 0) return usage();
  if (absl::Status st = crihook::nri::validateIdentity(options.identity); !st.ok()) {
    std::fprintf(stderr, "nri_null_plugin: %s\n", st.ToString().c_str());
    return 2;
  }

  const int32_t events = crihook::nri::subscribedEvents(
      [](crihook::LifecycleMethod, crihook::Phase) { return false; });
  api::CreateContainerResponse adjusted;
  api::KeyValue* env = adjusted.mutable_adjust()->add_env();
  env->set_key("CRIHOOK_BENCH");
  env->set_value("hooked");
  const std::string create_answer = adjusted.SerializeAsString();
  const std::string empty_answer = api::Empty().SerializeAsString();

  auto io = std::make_shared<asio::io_context>();
  int rc = 0;
  bool stopping = false;
  crihook::nri::PluginConnection::Callbacks cb;
  cb.on_call = [&](std::string_view method, std::string, std::chrono::steady_clock::time_point,
                   crihook::nri::Reply reply) {
    if (method == "Configure") {
      api::ConfigureResponse resp;
      resp.set_events(events);
      return reply(absl::OkStatus(), resp.SerializeAsString());
    }
    if (method == "Synchronize") {
      reply(absl::OkStatus(), api::SynchronizeResponse().SerializeAsString());
      std::puts("registered");
      std::fflush(stdout);
      return;
    }
    if (method == "CreateContainer") return reply(absl::OkStatus(), create_answer);
    if (method == "UpdateContainer")
      return reply(absl::OkStatus(), api::UpdateContainerResponse().SerializeAsString());
    if (method == "StopContainer")
      return reply(absl::OkStatus(), api::StopContainerResponse().SerializeAsString());
    reply(absl::OkStatus(), empty_answer);  // StateChange, Shutdown
  };
  cb.on_closed = [&](const absl::Status& why) {
    if (!stopping) {
      std::fprintf(stderr, "nri_null_plugin: connection ended: %s\n", why.ToString().c_str());
      rc = 1;
    }
    io->stop();
  };
  auto conn = std::make_shared<crihook::nri::PluginConnection>(io, options, std::move(cb));
  asio::signal_set signals(*io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    stopping = true;
    conn->close(absl::CancelledError("nri_null_plugin stops"));
  });
  conn->start([](const absl::Status&) {});  // a failed registration: on_closed says why
  io->run();
  return rc;
}
