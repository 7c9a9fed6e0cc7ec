// NRI's wire (nri/wire.h) on an arbitrary byte stream from the runtime's
// side of the NRI socket: split into reads at arbitrary points, the Demux
// must report the same messages and the same fault as when the stream comes
// whole; every message framed again by appendMessage must read back the
// same; and every message's payload goes through the decoding NRI mode does
// (ttrpc's envelope, then the NRI message its method names), which must not
// crash on anything.
//
// Input: the stream, then 1 byte choosing the read size (FuzzedDataProvider
// takes integers from the end).

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/ttrpc.pb.h"
#include "nri/translate.h"
#include "nri/wire.h"

namespace {

namespace front = crihook::nri;
namespace api = ::nri::pkg::api::v1alpha1;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_nri_wire: %s\n", what);
    std::abort();
  }
}

struct Run {
  std::vector<front::Message> messages;
  std::string fault;
};

Run readAll(std::string_view wire, size_t piece) {
  Run run;
  front::Demux demux;
  while (!wire.empty()) {
    std::string_view in = wire.substr(0, piece);
    wire.remove_prefix(in.size());
    absl::Status st = demux.feed(in, run.messages);
    if (!st.ok()) {
      run.fault = std::string(st.message());
      break;
    }
  }
  return run;
}

bool same(const front::Message& a, const front::Message& b) {
  return a.conn == b.conn && a.stream == b.stream && a.type == b.type && a.flags == b.flags &&
         a.payload == b.payload && a.too_large == b.too_large;
}

// What NRI mode decodes of a runtime's request.
void decode(const front::Message& m) {
  ::ttrpc::Request req;
  if (!req.ParseFromString(m.payload)) return;
  const std::string& method = req.method();
  if (method == "CreateContainer") {
    api::CreateContainerRequest r;
    if (r.ParseFromString(req.payload())) {
      auto before = front::createContainerRequestOf(r.pod(), r.container());
      auto after = before;
      auto answer = front::adjustmentOf(before, after, [](const std::string&) {
        return absl::StatusOr<front::DeviceNode>(front::DeviceNode{});
      });
      check(answer.ok() && answer->adjust.ByteSizeLong() == 0,
            "a request compared with itself is not an empty adjustment");
    }
  } else if (method == "StateChange") {
    api::StateChangeEvent ev;
    if (ev.ParseFromString(req.payload())) (void)front::runPodSandboxRequestOf(ev.pod());
  } else if (method == "UpdateContainer") {
    api::UpdateContainerRequest r;
    if (r.ParseFromString(req.payload())) (void)front::resourcesOf(r.linux_resources());
  } else if (method == "Synchronize") {
    api::SynchronizeRequest r;
    (void)r.ParseFromString(req.payload());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const size_t piece = 1 + in.ConsumeIntegralInRange<size_t>(0, 63);
  const std::string wire = in.ConsumeRemainingBytesAsString();
  const Run whole = readAll(wire, wire.size() + 1);
  const Run split = readAll(wire, piece);
  check(whole.fault == split.fault, "a different fault with the split");
  check(whole.messages.size() == split.messages.size(), "messages differ with the split");
  for (size_t i = 0; i < whole.messages.size(); ++i)
    check(same(whole.messages[i], split.messages[i]), "a message differs with the split");
  for (const front::Message& m : whole.messages) {
    check(m.conn == front::kPluginServiceConn || m.conn == front::kRuntimeServiceConn,
          "a message of a connection crihook does not read");
    check(m.payload.size() <= front::kMaxTtrpcMessage, "a payload over ttrpc's limit");
    if (m.too_large) continue;
    std::string again;
    check(front::appendMessage(again, m).ok(), "a message read does not frame again");
    const Run back = readAll(again, again.size());
    check(back.fault.empty() && back.messages.size() == 1 && same(back.messages[0], m),
          "a message framed again reads back otherwise");
    decode(m);
  }
  return 0;
}
