// crihookd accepts every request grpc-go's server accepts and refuses what it
// refuses, the way it refuses it: a raw HTTP/2 client sends each header block
// a gRPC library never would, and a grpc-go client (gocri) dials crihookd the
// way kubelet does, with the socket path as :authority.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstdio>
#include <filesystem>

#include "cri-api/runtime_v1.pb.h"
#include "test/support/child_process.h"
#include "test/support/proxy_fixture.h"
#include "test/support/raw_h2_backend.h"
#include "test/support/raw_h2_client.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

constexpr const char* kVersion = "/runtime.v1.RuntimeService/Version";

class RequestHeadersTest : public ProxyFixture {
 protected:
  void SetUp() override {
    backend_.onUnary(kVersion, [](FakeCall& call, std::string* out) {
      runtime::v1::VersionResponse r;
      r.set_runtime_name("fake");
      r.set_runtime_api_version("v1");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
    backend_.start();
    startProxy();
  }

  static std::string versionRequest() {
    runtime::v1::VersionRequest req;
    req.set_version("v1");
    return grpcFrame(req.SerializeAsString());
  }

  // Sends a good call on `client` and expects it answered: the connection
  // survived whatever came before.
  void expectUsable(RawH2Client& client) {
    RawH2Result ok = client.call(RawH2Client::grpcHeaders(kVersion), versionRequest());
    EXPECT_TRUE(client.usable());
    EXPECT_FALSE(ok.reset) << "code " << ok.reset_code;
    EXPECT_EQ(ok.grpc_status, 0) << ok.grpc_message;
  }

  static RawHeaders with(RawHeaders h, const std::string& name, const std::string& value) {
    h.emplace_back(name, value);
    return h;
  }
  static RawHeaders without(RawHeaders h, const std::string& name) {
    std::erase_if(h, [&](const auto& f) { return f.first == name; });
    return h;
  }
  static RawHeaders replaced(RawHeaders h, const std::string& name, const std::string& value) {
    for (auto& f : h) {
      if (f.first == name) f.second = value;
    }
    return h;
  }

  std::string sock() const { return dir_.file("crihook.sock"); }
};

TEST_F(RequestHeadersTest, AnyAuthorityGrpcGoAcceptsIsAccepted) {
  RawH2Client client(sock());
  const RawHeaders base = RawH2Client::grpcHeaders(kVersion);
  for (const std::string authority :
       {"/run/crihook/crihook.sock", "localhost", "", "unix:///run/containerd/containerd.sock",
        "%2Frun%2Fx.sock"}) {
    RawH2Result r = client.call(replaced(base, ":authority", authority), versionRequest());
    EXPECT_FALSE(r.reset) << "authority '" << authority << "': reset " << r.reset_code;
    EXPECT_EQ(r.grpc_status, 0) << "authority '" << authority << "': " << r.grpc_message;
  }
  RawH2Result none = client.call(without(base, ":authority"), versionRequest());
  EXPECT_EQ(none.grpc_status, 0) << "no :authority at all: " << none.grpc_message;
  EXPECT_EQ(backend_.callCount(kVersion), 6u);
}

TEST_F(RequestHeadersTest, RequestsGrpcGoAcceptsButNghttp2WouldNotAreAccepted) {
  RawH2Client client(sock());
  const RawHeaders base = RawH2Client::grpcHeaders(kVersion);
  struct Case {
    const char* what;
    RawHeaders headers;
  };
  const Case cases[] = {
      {"no :scheme", without(base, ":scheme")},
      {"te other than trailers", replaced(base, "te", "gzip")},
      {"no te", without(base, "te")},
      {"keep-alive", with(base, "keep-alive", "timeout=5")},
      {"proxy-connection", with(base, "proxy-connection", "keep-alive")},
      {"transfer-encoding", with(base, "transfer-encoding", "chunked")},
      {"upgrade", with(base, "upgrade", "h2c")},
      {"a tab and bytes over 0x7f in a value", with(base, "x-note", "a\tb \xc3\xa9")},
      {"a value with leading and trailing space", with(base, "x-note", " padded ")},
      {"content-type with a subtype", replaced(base, "content-type", "application/grpc+proto")},
      {"content-type with parameters", replaced(base, "content-type", "application/grpc;x=y")},
      {"a content-length that does not match", with(base, "content-length", "3")},
      {"one host beside :authority", with(base, "host", "example")},
  };
  for (const Case& c : cases) {
    RawH2Result r = client.call(c.headers, versionRequest());
    EXPECT_FALSE(r.reset) << c.what << ": reset " << r.reset_code;
    EXPECT_EQ(r.grpc_status, 0) << c.what << ": " << r.grpc_message;
  }
  EXPECT_EQ(backend_.callCount(kVersion), std::size(cases));
}

TEST_F(RequestHeadersTest, HopByHopHeadersAreDroppedNotForwarded) {
  RawH2Client client(sock());
  RawHeaders h = RawH2Client::grpcHeaders(kVersion);
  h = with(with(with(h, "keep-alive", "timeout=5"), "upgrade", "h2c"), "x-kept", "yes");
  ASSERT_EQ(client.call(h, versionRequest()).grpc_status, 0);
  const std::vector<FakeCall> calls = backend_.calls();
  ASSERT_EQ(calls.size(), 1u);
  const auto& md = calls[0].metadata;
  EXPECT_EQ(md.count("x-kept"), 1u);
  EXPECT_EQ(md.count("keep-alive"), 0u);
  EXPECT_EQ(md.count("upgrade"), 0u);
}

TEST_F(RequestHeadersTest, PathWithoutLeadingSlashIsServedAsGrpcGoServesIt) {
  RawH2Client client(sock());
  RawH2Result r = client.call(
      replaced(RawH2Client::grpcHeaders(kVersion), ":path", "runtime.v1.RuntimeService/Version"),
      versionRequest());
  EXPECT_EQ(r.grpc_status, 0) << r.grpc_message;
  EXPECT_EQ(backend_.callCount(kVersion), 1u) << "the runtime saw the canonical path";
}

// The runtime's HTTP/2 stack checks a request as RFC 9113 8.3 asks (nghttp2
// here; grpc-go, in containerd and CRI-O, too): a pseudo-header field twice
// makes it malformed, and the stream is reset. What crihookd completes of a
// request grpc-go accepts reaches such a runtime as one well-formed request.
class StrictRuntimeTest : public RequestHeadersTest {
 protected:
  void SetUp() override {}  // the runtime is the test's
};

TEST_F(StrictRuntimeTest, ARequestCrihookdCompletesIsOneTheRuntimeAccepts) {
  RawH2Backend runtime(dir_.file("backend.sock"));
  startProxy();
  RawH2Client client(sock());
  const std::string echo = "/runtime.v1.RuntimeService/Echo";
  const RawHeaders base = RawH2Client::grpcHeaders(echo);
  struct Case {
    const char* what;
    RawHeaders headers;
  };
  const Case cases[] = {
      {"no te", without(base, "te")},
      {"te other than trailers", replaced(base, "te", "gzip")},
      {"keep-alive", with(base, "keep-alive", "timeout=5")},
      {"no :authority", without(base, ":authority")},
      {"a path without its leading slash", replaced(base, ":path", echo.substr(1))},
  };
  for (const Case& c : cases) {
    RawH2Result r = client.call(c.headers, grpcFrame("hello"));
    EXPECT_FALSE(r.reset) << c.what << ": reset " << r.reset_code;
    EXPECT_EQ(r.grpc_status, 0) << c.what << ": " << r.grpc_message;
    EXPECT_EQ(r.body, grpcFrame("hello")) << c.what;
  }
  EXPECT_EQ(runtime.streams(), static_cast<int>(std::size(cases)));
}

// An interceptor refusing every intercepted call, counting them.
class RefuseAll final : public Interceptor {
 public:
  void pre(std::shared_ptr<InterceptedCall>, std::function<void(absl::Status)> done) override {
    ++seen;
    done(absl::PermissionDeniedError("refused by the test's hook"));
  }
  void post(std::shared_ptr<InterceptedCall>, std::function<void()> done) override { done(); }
  std::atomic<int> seen{0};
};

TEST_F(RequestHeadersTest, APathWithoutLeadingSlashCannotSlipPastTheHooks) {
  stopProxy();
  RefuseAll hooks;
  startProxy(&hooks);
  const std::string stop = "/runtime.v1.RuntimeService/StopContainer";
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  RawH2Client client(sock());
  RawH2Result r = client.call(replaced(RawH2Client::grpcHeaders(stop), ":path", stop.substr(1)),
                              grpcFrame(req.SerializeAsString()));
  EXPECT_EQ(r.grpc_status, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)) << r.grpc_message;
  EXPECT_EQ(hooks.seen.load(), 1);
  EXPECT_EQ(backend_.callCount(stop), 0u);
  stopProxy();  // before `hooks` goes
}

// Found by fuzz/fuzz_grpc_wire: grpc-timeout takes up to 8 digits of hours,
// past what the clock holds from now; the deadline wrapped into the past and
// an intercepted call was refused as expired before it reached the runtime.
TEST_F(RequestHeadersTest, TheLongestGrpcTimeoutIsAFarDeadlineNotAnExpiredOne) {
  const std::string stop = "/runtime.v1.RuntimeService/StopContainer";
  runtime::v1::StopContainerRequest req;
  req.set_container_id("c1");
  RawH2Client client(sock());
  for (const std::string timeout : {"99999999H", "2562047H"}) {
    RawH2Result r = client.call(with(RawH2Client::grpcHeaders(stop), "grpc-timeout", timeout),
                                grpcFrame(req.SerializeAsString()));
    EXPECT_NE(r.grpc_status, static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED))
        << timeout << ": " << r.grpc_message;
  }
  EXPECT_EQ(backend_.callCount(stop), 2u) << "both calls reached the runtime";
}

// Refused with RST_STREAM, as golang.org/x/net/http2's Framer (and grpc-go on
// a connection header or an oversized header list) refuses them.
TEST_F(RequestHeadersTest, MalformedHeaderBlocksAreResetLikeGrpcGoResetsThem) {
  RawH2Client client(sock());
  const RawHeaders base = RawH2Client::grpcHeaders(kVersion);
  RawHeaders after_regular = base;
  after_regular.emplace_back(":authority", "late");
  after_regular.erase(after_regular.begin() + 3);  // the first :authority
  RawHeaders status_mixed = base;
  status_mixed.insert(status_mixed.begin(), {":status", "200"});
  struct Case {
    const char* what;
    RawHeaders headers;
  };
  const Case cases[] = {
      {"an upper-case header name", with(base, "X-Upper", "1")},
      {"an upper-case A, the first letter, in a header name", with(base, "x-A", "1")},
      {"an upper-case Z, the last letter, in a header name", with(base, "x-Z", "1")},
      {"a space in a header name", with(base, "bad name", "1")},
      {"a colon inside a header name", with(base, "bad:name", "1")},
      {"a NUL in a value", with(base, "x-note", std::string("a\0b", 3))},
      {"a CR in a value", with(base, "x-note", "a\rb")},
      {"a LF in a value", with(base, "x-note", "a\nb")},
      {"a control character in a value", with(base, "x-note", "a\x01z")},
      {"DEL in a value", with(base, "x-note", "a\x7fz")},
      {"a LF in a pseudo-header value", replaced(base, ":authority", "a\nb")},
      {"a pseudo-header after a regular header", after_regular},
      {"an unknown pseudo-header",
       [&] {
         RawHeaders h = base;
         h.insert(h.begin() + 1, {":protocol", "websocket"});
         return h;
       }()},
      {"two :path",
       [&] {
         RawHeaders h = base;
         h.insert(h.begin() + 1, {":path", kVersion});
         return h;
       }()},
      {"two :authority",
       [&] {
         RawHeaders h = base;
         h.insert(h.begin() + 1, {":authority", "localhost"});
         return h;
       }()},
      {":status beside request pseudo-headers", status_mixed},
      {"a connection header", with(base, "connection", "keep-alive")},
  };
  for (const Case& c : cases) {
    RawH2Result r = client.call(c.headers, versionRequest());
    EXPECT_TRUE(r.reset) << c.what << ": grpc-status " << r.grpc_status << " " << r.grpc_message;
    EXPECT_EQ(r.reset_code, static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR)) << c.what;
    expectUsable(client);
  }
  // Trailers after a request: grpc-go ends the whole connection; crihookd
  // only this stream.
  RawH2Result t = client.call(base, versionRequest(), {{"x-trailer", "1"}});
  EXPECT_TRUE(t.reset);
  EXPECT_EQ(t.reset_code, static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
  expectUsable(client);
  // The trailers' call was forwarded as it arrived and may have been answered
  // by the runtime before its reset got there; the malformed ones never left.
  EXPECT_GE(backend_.callCount(kVersion), std::size(cases) + 1) << "only the good calls went on";
  EXPECT_LE(backend_.callCount(kVersion), std::size(cases) + 2) << "only the good calls went on";
}

TEST_F(RequestHeadersTest, OversizedHeaderListIsResetWithFrameSizeErrorAndAdvertised) {
  RawH2Client client(sock());
  expectUsable(client);
  // The runtime's own cap (gRPC C++: 8 KiB) or crihookd's, the smaller.
  EXPECT_LE(client.peerMaxHeaderListSize(), 64u << 10);
  // 20 fields of 4000 bytes: 80 KiB decoded, over the 64 KiB cap.
  RawHeaders big = RawH2Client::grpcHeaders(kVersion);
  for (int i = 0; i < 20; ++i)
    big.emplace_back("x-big-" + std::to_string(i), std::string(4000, 'v'));
  RawH2Result r = client.call(big, versionRequest());
  EXPECT_TRUE(r.reset);
  EXPECT_EQ(r.reset_code, static_cast<uint32_t>(NGHTTP2_FRAME_SIZE_ERROR));
  // HPACK amplification: a 3000-byte field enters the dynamic table once
  // (nghttp2 indexes fields up to 3/4 of the 4 KiB table) and each repeat is
  // a one-byte reference: a header block of ~3 KiB that decodes to 300 KB.
  RawHeaders amplified = RawH2Client::grpcHeaders(kVersion);
  for (int i = 0; i < 100; ++i) amplified.emplace_back("x-same", std::string(3000, 'a'));
  RawH2Result a = client.call(amplified, versionRequest());
  EXPECT_TRUE(a.reset);
  EXPECT_EQ(a.reset_code, static_cast<uint32_t>(NGHTTP2_FRAME_SIZE_ERROR));
  expectUsable(client);
  EXPECT_EQ(backend_.callCount(kVersion), 2u);
}

// Refused with an early trailers-only answer carrying grpc-go's HTTP status
// and gRPC code (http2_server.go operateHeaders, server.go handleStream).
TEST_F(RequestHeadersTest, NonGrpcRequestsGetGrpcGosEarlyAnswer) {
  RawH2Client client(sock());
  const RawHeaders base = RawH2Client::grpcHeaders(kVersion);
  struct Case {
    const char* what;
    RawHeaders headers;
    const char* http_status;
    grpc::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"no content-type", without(base, "content-type"), "415", grpc::INVALID_ARGUMENT,
       "invalid gRPC request content-type \"\""},
      {"content-type application/json", replaced(base, "content-type", "application/json"), "415",
       grpc::INVALID_ARGUMENT, "content-type \"application/json\""},
      {"content-type application/grpcx", replaced(base, "content-type", "application/grpcx"), "415",
       grpc::INVALID_ARGUMENT, "application/grpcx"},
      {"content-type in upper case", replaced(base, "content-type", "Application/gRPC"), "415",
       grpc::INVALID_ARGUMENT, "Application/gRPC"},
      {"two host headers", with(with(base, "host", "a"), "host", "b"), "400", grpc::INTERNAL,
       "2 host headers"},
      {"malformed grpc-timeout", with(base, "grpc-timeout", "soon"), "400", grpc::INTERNAL,
       "malformed grpc-timeout \"soon\""},
      {"binary metadata that is not base64", with(base, "x-data-bin", "!!!!"), "400",
       grpc::INTERNAL, "malformed binary metadata in header \"x-data-bin\""},
      {":method GET", replaced(base, ":method", "GET"), "405", grpc::INTERNAL,
       ":method \"GET\", gRPC takes POST"},
      {"no :method", without(base, ":method"), "405", grpc::INTERNAL, ":method \"\""},
      {"no :path", without(base, ":path"), "200", grpc::UNIMPLEMENTED,
       "malformed method name \"\""},
      {":path /", replaced(base, ":path", "/"), "200", grpc::UNIMPLEMENTED,
       "malformed method name \"/\""},
      {":path without a method", replaced(base, ":path", "/Version"), "200", grpc::UNIMPLEMENTED,
       "malformed method name \"/Version\""},
  };
  for (const Case& c : cases) {
    RawH2Result r = client.call(c.headers, versionRequest());
    EXPECT_EQ(r.http_status, c.http_status) << c.what;
    EXPECT_EQ(r.grpc_status, static_cast<int>(c.code)) << c.what << ": " << r.grpc_message;
    EXPECT_THAT(r.grpc_message, HasSubstr(c.message)) << c.what;
    expectUsable(client);
  }
  EXPECT_EQ(backend_.callCount(kVersion), std::size(cases)) << "only the good calls went on";
  // Binary metadata that is base64, padded or not, is accepted.
  for (const char* v : {"AAEC", "AAE", "AA==", "AAAAAA==", "AAAAAAA=", ""}) {
    RawH2Result r = client.call(with(base, "x-data-bin", v), versionRequest());
    EXPECT_EQ(r.grpc_status, 0) << "x-data-bin " << v << ": " << r.grpc_message;
  }
}

// gocri, the grpc-go client (test/e2e/gocri), dials crihookd exactly as
// kubelet <= 1.29 does (the socket path as :authority) and as kubelet >= 1.30
// does (:authority localhost).
TEST_F(RequestHeadersTest, GrpcGoClientCallsThroughCrihookdWithBothAuthorities) {
  ASSERT_TRUE(std::filesystem::exists(GOCRI_BINARY)) << GOCRI_BINARY << " was not built";
  for (const char* mode : {"path", "localhost"}) {
    const std::string cmd = std::string(GOCRI_BINARY) + " -endpoint " + sock() +
                            " -authority-mode " + mode + " version 2>&1";
    const auto [out, rc] = runShell(cmd);
    EXPECT_EQ(rc, 0) << mode << ": " << out;
    EXPECT_THAT(out, HasSubstr(R"("ok":true)")) << mode;
    EXPECT_THAT(out, HasSubstr(R"("runtime_name":"fake")")) << mode;
    EXPECT_THAT(out, HasSubstr(R"("step":"Version")")) << mode;
  }
  EXPECT_EQ(backend_.callCount(kVersion), 2u);
}

}  // namespace
}  // namespace crihook::testing
