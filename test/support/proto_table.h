#pragma once

// What the proto tests (test/cri-api/*_proto_test.cc) compare a generated
// file's descriptors with: one line per field, method and enum value, as
// the tests' tables spell them, and a two-way comparison that names what
// either side lacks.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace crihook::testing {

// A field's type: a scalar name, a message or enum name, "repeated <type>"
// or "map<key, value>".
inline std::string protoTypeOf(const google::protobuf::FieldDescriptor& f) {
  namespace pb = ::google::protobuf;
  if (f.is_map()) {
    return "map<" + protoTypeOf(*f.message_type()->map_key()) + ", " +
           protoTypeOf(*f.message_type()->map_value()) + ">";
  }
  std::string t = f.type() == pb::FieldDescriptor::TYPE_MESSAGE ? f.message_type()->name()
                  : f.type() == pb::FieldDescriptor::TYPE_ENUM  ? f.enum_type()->name()
                                                                : f.type_name();
  return f.is_repeated() ? "repeated " + t : t;
}

// "Message.field = number: type" for every field of `file`'s messages.
// Also expects of each message what the peers' protos have: no nested types
// but protoc's map entries, no enums inside, no oneofs, no proto3
// "optional" (which would change presence).
inline std::set<std::string> protoFieldsOf(const google::protobuf::FileDescriptor& file) {
  std::set<std::string> ours;
  for (int i = 0; i < file.message_type_count(); ++i) {
    const google::protobuf::Descriptor& m = *file.message_type(i);
    for (int n = 0; n < m.nested_type_count(); ++n)
      EXPECT_TRUE(m.nested_type(n)->options().map_entry()) << m.nested_type(n)->full_name();
    EXPECT_EQ(m.enum_type_count(), 0) << m.full_name();
    EXPECT_EQ(m.oneof_decl_count(), 0) << m.full_name();
    for (int f = 0; f < m.field_count(); ++f) {
      const google::protobuf::FieldDescriptor& field = *m.field(f);
      EXPECT_FALSE(field.has_optional_keyword()) << field.full_name();
      ours.insert(m.name() + "." + field.name() + " = " + std::to_string(field.number()) + ": " +
                  protoTypeOf(field));
    }
  }
  return ours;
}

// "Service.Method(Input) returns (Output)" for every method of `file`, none
// streaming.
inline std::set<std::string> protoMethodsOf(const google::protobuf::FileDescriptor& file) {
  std::set<std::string> ours;
  for (int s = 0; s < file.service_count(); ++s) {
    const google::protobuf::ServiceDescriptor& service = *file.service(s);
    for (int i = 0; i < service.method_count(); ++i) {
      const google::protobuf::MethodDescriptor& m = *service.method(i);
      EXPECT_FALSE(m.client_streaming() || m.server_streaming()) << m.full_name();
      ours.insert(service.name() + "." + m.name() + "(" + m.input_type()->name() + ") returns (" +
                  m.output_type()->name() + ")");
    }
  }
  return ours;
}

// Each line of `theirs` is in `ours` and each of `ours` in `theirs`;
// `who` names their side in the failures.
inline void expectSameLines(const std::set<std::string>& theirs, const std::set<std::string>& ours,
                            const std::string& who) {
  for (const auto& l : theirs) EXPECT_TRUE(ours.count(l)) << who << " has, crihook lacks: " << l;
  for (const auto& l : ours)
    EXPECT_TRUE(theirs.count(l)) << "crihook has, " << who << " lacks: " << l;
}

}  // namespace crihook::testing
