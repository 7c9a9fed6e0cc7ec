// crihookd decodes runtime.v1alpha2 lifecycle calls with the runtime.v1
// message types. This shows the bytes survive: every field set, decoded as
// v1, re-encoded, is byte-for-byte what the old kubelet sent, and fields the
// v1 types do not know (unknown fields) are kept when a hook edits a message.

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "cri-api/runtime_v1.pb.h"
#include "cri-api/runtime_v1alpha2.pb.h"
#include "cri/lifecycle.h"

namespace crihook {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Sets every field of `m`, recursively, to a value that is not the default.
void fillAll(Message& m, int depth, int seed) {
  const auto* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const int n = seed + f->number();
    const int reps = f->is_repeated() ? 2 : 1;
    for (int k = 0; k < reps; ++k) {
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(&m, f, n + k) : r->SetInt32(&m, f, -n);
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(&m, f, n + k) : r->SetInt64(&m, f, int64_t{n} << 33);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          f->is_repeated() ? r->AddUInt32(&m, f, n + k) : r->SetUInt32(&m, f, n);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(&m, f, n + k)
                           : r->SetUInt64(&m, f, uint64_t{1} << 40 | n);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          f->is_repeated() ? r->AddBool(&m, f, true) : r->SetBool(&m, f, true);
          break;
        case FieldDescriptor::CPPTYPE_STRING: {
          std::string v = f->name() + "-" + std::to_string(n + k);
          f->is_repeated() ? r->AddString(&m, f, v) : r->SetString(&m, f, v);
          break;
        }
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* e = f->enum_type();
          const auto* v = e->value(e->value_count() - 1);
          f->is_repeated() ? r->AddEnum(&m, f, v) : r->SetEnum(&m, f, v);
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          if (depth > 0 || f->is_map()) {
            Message* sub = f->is_repeated() ? r->AddMessage(&m, f) : r->MutableMessage(&m, f);
            fillAll(*sub, f->is_map() ? 0 : depth - 1, n * 7 + k);
          }
          break;
        default:
          break;
      }
    }
  }
}

std::string deterministic(const Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

class V1alpha2Compat : public ::testing::TestWithParam<const char*> {};

TEST_P(V1alpha2Compat, BytesDecodeAsV1AndReencodeUnchanged) {
  const std::string method = GetParam();
  auto m = findInterceptedMethod("/runtime.v1alpha2.RuntimeService/" + method);
  ASSERT_TRUE(m.has_value());
  // The old kubelet's message, every field set.
  const auto* old_type = google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
      "runtime.v1alpha2." + method + "Request");
  ASSERT_NE(old_type, nullptr);
  std::unique_ptr<Message> old_msg(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(old_type)->New());
  fillAll(*old_msg, 5, 0);
  const std::string wire = deterministic(*old_msg);
  ASSERT_GT(wire.size(), 10u);

  std::unique_ptr<Message> as_v1 = m->spec->newRequest();
  ASSERT_TRUE(as_v1->ParseFromString(wire));
  EXPECT_EQ(as_v1->GetReflection()->GetUnknownFields(*as_v1).field_count(), 0)
      << "every v1alpha2 field has a v1 twin";
  EXPECT_EQ(deterministic(*as_v1), wire);

  std::unique_ptr<Message> back(old_msg->New());
  ASSERT_TRUE(back->ParseFromString(deterministic(*as_v1)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, *old_msg));
}

INSTANTIATE_TEST_SUITE_P(LifecycleCalls, V1alpha2Compat,
                         ::testing::Values("RunPodSandbox", "StopPodSandbox", "RemovePodSandbox",
                                           "CreateContainer", "StartContainer", "StopContainer",
                                           "RemoveContainer", "UpdateContainerResources"));

TEST(V1alpha2Compat, FieldsV1DoesNotKnowSurviveAHookEdit) {
  runtime::v1alpha2::CreateContainerRequest old_msg;
  old_msg.set_pod_sandbox_id("sb");
  old_msg.mutable_config()->mutable_metadata()->set_name("c");
  std::string wire = old_msg.SerializeAsString();
  // A field number neither package declares (as a field of a future or
  // vendor-patched kubelet would be), nested inside config.
  runtime::v1alpha2::ContainerConfig cfg = old_msg.config();
  cfg.GetReflection()->MutableUnknownFields(&cfg)->AddLengthDelimited(999, "vendor-extension");
  old_msg.mutable_config()->ParseFromString(cfg.SerializeAsString());
  wire = old_msg.SerializeAsString();

  runtime::v1::CreateContainerRequest v1;
  ASSERT_TRUE(v1.ParseFromString(wire));
  auto* env = v1.mutable_config()->add_envs();  // what a hook's adjustment does
  env->set_key("NVIDIA_VISIBLE_DEVICES");
  env->set_value("0");
  runtime::v1alpha2::CreateContainerRequest seen;
  ASSERT_TRUE(seen.ParseFromString(v1.SerializeAsString()));
  ASSERT_EQ(seen.config().envs_size(), 1);
  const auto& unknown = seen.config().GetReflection()->GetUnknownFields(seen.config());
  ASSERT_EQ(unknown.field_count(), 1);
  EXPECT_EQ(unknown.field(0).number(), 999);
  EXPECT_EQ(unknown.field(0).length_delimited(), "vendor-extension");
}

}  // namespace
}  // namespace crihook
