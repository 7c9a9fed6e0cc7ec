#pragma once

// HPACK (RFC 7541) for a relay that decodes every header block but forwards
// one direction's blocks as they came (docs/transparent-relay.md): a decoder
// and an encoder on nghttp2's HPACK codec (without its session), and the one
// representation crihookd may put between a peer's blocks without changing
// the receiver's dynamic table: a literal without indexing.
//
// Not thread-safe; each object belongs to one direction of one connection.

#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace crihook::relay::hpack {

// The dynamic table size every HPACK peer starts with (SETTINGS_HEADER_TABLE_SIZE's
// default).
inline constexpr size_t kDefaultTableSize = 4096;

// Decodes the header blocks of one direction, in the order they were sent
// (the dynamic table is shared state between them).
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Calls `field(name, value)` for each field of the whole header block
  // `block`, in order; the views are valid during the call only. On a block
  // that does not decode, INVALID_ARGUMENT naming why (HTTP/2 makes it a
  // COMPRESSION_ERROR of the connection) and the decoder is unusable.
  template <class Field>
  absl::Status decode(std::string_view block, Field&& field) {
    if (!broken_.empty()) return absl::FailedPreconditionError(broken_);
    auto in = reinterpret_cast<const uint8_t*>(block.data());
    size_t left = block.size();
    for (;;) {
      nghttp2_nv nv;
      int got = 0;
      if (!step(in, left, nv, got)) return absl::InvalidArgumentError(broken_);
      if (got == kField) {
        field(std::string_view(reinterpret_cast<const char*>(nv.name), nv.namelen),
              std::string_view(reinterpret_cast<const char*>(nv.value), nv.valuelen));
      } else if (got == kEnd) {
        return absl::OkStatus();
      }
    }
  }

  // The table size its peer's encoder may use: what the decoding side
  // advertised in SETTINGS_HEADER_TABLE_SIZE. Between blocks only.
  void setMaxTableSize(size_t bytes);

  // Entries in the dynamic table now (for tests).
  size_t dynamicEntries() const;

 private:
  static constexpr int kNothing = 0, kField = 1, kEnd = 2;
  // One step of nghttp2's inflater; false (broken_ set) on an error.
  bool step(const uint8_t*& in, size_t& left, nghttp2_nv& nv, int& got);

  nghttp2_hd_inflater* inflater_ = nullptr;
  std::string broken_;
};

// Encodes header blocks for one direction, indexing as nghttp2 does.
class Encoder {
 public:
  Encoder();
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Appends the block of `fields` to `out`. INTERNAL when nghttp2 fails
  // (out of memory); the encoder is then unusable.
  absl::Status encode(const std::vector<nghttp2_nv>& fields, std::string& out);

  // The receiver's SETTINGS_HEADER_TABLE_SIZE (at most kDefaultTableSize
  // is used).
  void setMaxTableSize(size_t bytes);

 private:
  nghttp2_hd_deflater* deflater_ = nullptr;
};

// Whether decoding the whole header block `block` changes a decoder's
// dynamic table: it holds a literal with incremental indexing or a dynamic
// table size update (RFC 7541 6.2.1, 6.3). A block that does not may be
// kept from its receiver without the receiver's table and the sender's
// encoder falling out of step. Reads only each representation's first byte
// and its lengths (no Huffman decoding, nothing allocated); a block it
// cannot read counts as changing the table.
bool changesDynamicTable(std::string_view block);

// Appends a dynamic table size update to `bytes` (RFC 7541 6.3); at the
// start of a block only.
void appendTableSizeUpdate(std::string& block, size_t bytes);

// Appends `name: value` to a header block as a literal field without
// indexing, with a literal name and no Huffman coding: the receiver's
// dynamic table does not change. `name` must already be lowercase.
void appendLiteral(std::string& block, std::string_view name, std::string_view value);

}  // namespace crihook::relay::hpack
