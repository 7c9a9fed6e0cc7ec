// Reencoder and literalBlock (proxy/reencoder.h), read back with the HPACK
// decoder a peer has (nghttp2's, through hpack::Decoder): the receiver whose
// table the sender's encoder filled reads crihookd's re-encoded blocks, its
// table emptied first; crihookd's own literal blocks change no table.

#include "proxy/reencoder.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "proxy/hpack.h"

namespace crihook::relay {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

Fields decoded(hpack::Decoder& decoder, const std::string& block) {
  Fields fields;
  auto st = decoder.decode(block, [&](std::string_view n, std::string_view v) {
    fields.emplace_back(std::string(n), std::string(v));
  });
  EXPECT_TRUE(st.ok()) << st;
  return fields;
}

const Headers kRequest = {
    {":method", "POST"}, {":path", "/runtime.v1.RuntimeService/Version"}, {"x-trace", "t1"}};
const Fields kRequestFields = {
    {":method", "POST"}, {":path", "/runtime.v1.RuntimeService/Version"}, {"x-trace", "t1"}};

TEST(Reencoder, ItsFirstBlockEmptiesTheTableTheSendersEncoderFilled) {
  // The sender's blocks, as they came: the receiver's table fills.
  hpack::Encoder sender;
  hpack::Decoder receiver;
  std::string theirs;
  ASSERT_TRUE(sender.encode(toNv({{"x-sender", std::string(100, 's')}}), theirs).ok());
  decoded(receiver, theirs);
  ASSERT_GT(receiver.dynamicEntries(), 0u);

  Reencoder reencoder;
  EXPECT_FALSE(reencoder.on());
  reencoder.start();
  EXPECT_TRUE(reencoder.on());
  std::string block;
  ASSERT_TRUE(reencoder.encode(kRequest, block).ok());
  EXPECT_EQ(block[0], '\x20') << "a table size update to 0 first";
  EXPECT_EQ(decoded(receiver, block), kRequestFields);
  // Only crihookd's entries are left: the sender's went with the reset.
  std::string again;
  ASSERT_TRUE(reencoder.encode(kRequest, again).ok());
  EXPECT_NE(again[0], '\x20') << "the reset goes once";
  EXPECT_LT(again.size(), block.size()) << "the second refers to the entries the first made";
  EXPECT_EQ(decoded(receiver, again), kRequestFields);
}

TEST(Reencoder, StartingTwiceResetsTheTableOnce) {
  Reencoder reencoder;
  reencoder.start();
  std::string first;
  ASSERT_TRUE(reencoder.encode(kRequest, first).ok());
  reencoder.start();
  std::string second;
  ASSERT_TRUE(reencoder.encode(kRequest, second).ok());
  EXPECT_NE(second[0], '\x20');
}

TEST(Reencoder, TheTableComesBackToWhatTheReceiverAllowsCappedAtOurs) {
  for (auto [announced, expected] :
       {std::pair<uint32_t, size_t>{1000, 1000}, std::pair<uint32_t, size_t>{1 << 20, 4096}}) {
    Reencoder reencoder;
    reencoder.setMaxTableSize(announced);
    reencoder.start();
    std::string block;
    ASSERT_TRUE(reencoder.encode(kRequest, block).ok());
    std::string prefix(1, '\x20');
    hpack::appendTableSizeUpdate(prefix, expected);
    EXPECT_EQ(block.substr(0, prefix.size()), prefix) << "announced " << announced;
    hpack::Decoder receiver;
    receiver.setMaxTableSize(announced);
    EXPECT_EQ(decoded(receiver, block), kRequestFields);
  }
}

TEST(LiteralBlock, ReadsAsItsFieldsAndChangesNoTable) {
  const std::string block = literalBlock(kRequest);
  EXPECT_FALSE(hpack::changesDynamicTable(block));
  hpack::Decoder receiver;
  EXPECT_EQ(decoded(receiver, block), kRequestFields);
  EXPECT_EQ(receiver.dynamicEntries(), 0u);
}

}  // namespace
}  // namespace crihook::relay
