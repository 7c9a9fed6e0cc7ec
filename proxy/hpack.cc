#include "proxy/hpack.h"

#include <cstdint>

#include "base/text.h"

namespace crihook::relay::hpack {

namespace {

// An HPACK integer (RFC 7541 5.1) with an `prefix_bits`-bit prefix, the
// first byte's high bits `first`.
void appendInteger(std::string& out, uint8_t first, int prefix_bits, size_t value) {
  const size_t max_prefix = (size_t{1} << prefix_bits) - 1;
  if (value < max_prefix) {
    out.push_back(static_cast<char>(first | value));
    return;
  }
  out.push_back(static_cast<char>(first | max_prefix));
  value -= max_prefix;
  while (value >= 128) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void appendString(std::string& out, std::string_view s) {
  appendInteger(out, 0x00, 7, s.size());  // H bit clear: not Huffman-coded
  out.append(s);
}

// Reads an HPACK integer with a `prefix_bits`-bit prefix at `in[at]`;
// false when it runs past the block or past 2^32 (nothing here is longer).
bool skipInteger(std::string_view in, size_t& at, int prefix_bits, uint64_t& value) {
  if (at >= in.size()) return false;
  const uint64_t max_prefix = (uint64_t{1} << prefix_bits) - 1;
  value = static_cast<uint8_t>(in[at++]) & max_prefix;
  if (value < max_prefix) return true;
  for (int shift = 0; shift <= 28; shift += 7) {
    if (at >= in.size()) return false;
    const uint8_t b = static_cast<uint8_t>(in[at++]);
    value += uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return value <= UINT32_MAX;
  }
  return false;
}

// Steps over a string literal (its H bit, length and bytes).
bool skipString(std::string_view in, size_t& at) {
  uint64_t length = 0;
  if (!skipInteger(in, at, 7, length) || length > in.size() - at) return false;
  at += length;
  return true;
}

}  // namespace

bool changesDynamicTable(std::string_view block) {
  size_t at = 0;
  uint64_t index = 0;
  while (at < block.size()) {
    const uint8_t first = static_cast<uint8_t>(block[at]);
    if (first & 0x80) {  // indexed field: the table is only read
      if (!skipInteger(block, at, 7, index)) return true;
      continue;
    }
    // A literal with incremental indexing (01), a table size update (001):
    // both change the table.
    if ((first & 0xc0) == 0x40 || (first & 0xe0) == 0x20) return true;
    // A literal without indexing (0000) or never indexed (0001): a name
    // index (or 0 and the name), then the value.
    if (!skipInteger(block, at, 4, index)) return true;
    if (index == 0 && !skipString(block, at)) return true;
    if (!skipString(block, at)) return true;
  }
  return false;
}

Decoder::Decoder() {
  if (nghttp2_hd_inflate_new(&inflater_) != 0) broken_ = "HPACK decoder: out of memory";
}

Decoder::~Decoder() {
  if (inflater_) nghttp2_hd_inflate_del(inflater_);
}

bool Decoder::step(const uint8_t*& in, size_t& left, nghttp2_nv& nv, int& got) {
  int flags = 0;
  const ssize_t n = nghttp2_hd_inflate_hd2(inflater_, &nv, &flags, in, left, 1);
  if (n < 0) {
    broken_ = cat("HPACK: ", nghttp2_strerror(static_cast<int>(n)));
    return false;
  }
  in += n;
  left -= static_cast<size_t>(n);
  got = kNothing;
  if (flags & NGHTTP2_HD_INFLATE_EMIT) {
    got = kField;
  } else if (flags & NGHTTP2_HD_INFLATE_FINAL) {
    nghttp2_hd_inflate_end_headers(inflater_);
    got = kEnd;
  } else if (n == 0 && left == 0) {
    // nghttp2 ends a block with FINAL; reaching here would loop forever.
    broken_ = "HPACK: header block ended inside a field";
    return false;
  }
  return true;
}

void Decoder::setMaxTableSize(size_t bytes) {
  if (inflater_) nghttp2_hd_inflate_change_table_size(inflater_, bytes);
}

size_t Decoder::dynamicEntries() const {
  // nghttp2 counts the 61 static entries too.
  return inflater_ ? nghttp2_hd_inflate_get_num_table_entries(inflater_) - 61 : 0;
}

Encoder::Encoder() { nghttp2_hd_deflate_new(&deflater_, kDefaultTableSize); }

Encoder::~Encoder() {
  if (deflater_) nghttp2_hd_deflate_del(deflater_);
}

absl::Status Encoder::encode(const std::vector<nghttp2_nv>& fields, std::string& out) {
  if (deflater_ == nullptr) return absl::InternalError("HPACK encoder: out of memory");
  const size_t at = out.size();
  out.resize(at + nghttp2_hd_deflate_bound(deflater_, fields.data(), fields.size()));
  const ssize_t n = nghttp2_hd_deflate_hd(deflater_, reinterpret_cast<uint8_t*>(out.data() + at),
                                          out.size() - at, fields.data(), fields.size());
  if (n < 0) {
    out.resize(at);
    return absl::InternalError(cat("HPACK encoder: ", nghttp2_strerror(static_cast<int>(n))));
  }
  out.resize(at + static_cast<size_t>(n));
  return absl::OkStatus();
}

void Encoder::setMaxTableSize(size_t bytes) {
  if (deflater_) nghttp2_hd_deflate_change_table_size(deflater_, bytes);
}

void appendTableSizeUpdate(std::string& block, size_t bytes) {
  appendInteger(block, 0x20, 5, bytes);
}

void appendLiteral(std::string& block, std::string_view name, std::string_view value) {
  block.push_back(0x00);  // literal without indexing, new name (RFC 7541 6.2.2)
  appendString(block, name);
  appendString(block, value);
}

}  // namespace crihook::relay::hpack
