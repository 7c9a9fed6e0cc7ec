// metrics/call_metrics.cc: the CRI calls' series, by method (from the
// build's RPC table) and code.

#include "metrics/call_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"
#include "cri-api/runtime_v1.rpcs.h"
#include "metrics/metric_registry.h"

namespace crihook::metrics {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// The build's table of RPC names (cri-api/gen_rpcs.py reads the .proto's
// text) against what protoc made of the same file: every service and method,
// in order, nothing more.
TEST(CallMetricsTest, TheRpcTableIsTheProtosServicesAndMethods) {
  const auto* file = runtime::v1::VersionRequest::descriptor()->file();
  std::vector<std::string> from_descriptors, from_table;
  for (int s = 0; s < file->service_count(); ++s) {
    for (int m = 0; m < file->service(s)->method_count(); ++m)
      from_descriptors.push_back(file->service(s)->name() + "/" +
                                 file->service(s)->method(m)->name());
  }
  for (const criapi::Rpc& rpc : criapi::kRuntimeRpcs)
    from_table.push_back(std::string(rpc.service) + "/" + std::string(rpc.method));
  EXPECT_EQ(from_table, from_descriptors);
  EXPECT_GE(from_table.size(), 30u);  // 29 RuntimeService + 5 ImageService RPCs today
}

TEST(CallMetricsTest, KnownMethodsByNameAndCodeUnknownPathsAsOther) {
  Registry r;
  CallMetrics m(r);
  m.record("/runtime.v1.RuntimeService/Version", absl::StatusCode::kOk, 300us);
  m.record("/runtime.v1.RuntimeService/Version", absl::StatusCode::kOk, 300us);
  m.record("/runtime.v1alpha2.ImageService/PullImage", absl::StatusCode::kNotFound, 2s);
  m.record("/made.up/\"path\"", absl::StatusCode::kUnimplemented, 1ms);
  m.record("/another.made.up/path", absl::StatusCode::kUnimplemented, 1ms);
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"runtime.v1.RuntimeService\","
                              "method=\"Version\",code=\"OK\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"runtime.v1alpha2.ImageService\","
                              "method=\"PullImage\",code=\"NOT_FOUND\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("crihook_cri_calls_total{service=\"other\",method=\"other\","
                              "code=\"UNIMPLEMENTED\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("made.up")));
  EXPECT_THAT(text,
              HasSubstr("crihook_cri_call_duration_seconds_bucket{service=\"runtime.v1."
                        "RuntimeService\",method=\"Version\",code=\"OK\",le=\"0.00025\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("crihook_cri_call_duration_seconds_bucket{service=\"runtime.v1."
                        "RuntimeService\",method=\"Version\",code=\"OK\",le=\"0.0005\"} 2\n"));
}

}  // namespace
}  // namespace crihook::metrics
