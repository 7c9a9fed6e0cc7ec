#include "proxy/reencoder.h"

#include <algorithm>

namespace crihook::relay {

void Reencoder::start() {
  if (on_) return;
  on_ = true;
  reset_owed_ = true;
}

void Reencoder::setMaxTableSize(uint32_t value) {
  encoder_.setMaxTableSize(value);
  table_size_ = std::min<uint32_t>(value, hpack::kDefaultTableSize);
}

absl::Status Reencoder::encode(const Headers& fields, std::string& block) {
  if (reset_owed_) {
    // RFC 7541 4.2, 6.3: size 0 empties the receiver's table (what the
    // sender's encoder put there), then back to what the receiver allows;
    // crihookd's encoder starts empty.
    reset_owed_ = false;
    block.push_back(0x20);
    hpack::appendTableSizeUpdate(block, table_size_);
  }
  return encoder_.encode(toNv(fields), block);
}

std::string literalBlock(const Headers& headers) {
  std::string block;
  for (const Header& h : headers) hpack::appendLiteral(block, h.name, h.value);
  return block;
}

}  // namespace crihook::relay
