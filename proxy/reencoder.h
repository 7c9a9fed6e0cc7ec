#pragma once

// Header blocks the relay writes rather than passes on (docs/transparent-
// relay.md, "The design"). One direction's blocks go to their receiver as
// they came while its decoder mirrors the sender's encoder; a block crihookd
// must leave out (one that changes the receiver's dynamic table) or change
// (a request to canonicalise) switches that direction to re-encoding, for
// good: a Reencoder. crihookd's own blocks to kubelet (answers it gives
// itself) are literals that change no table: literalBlock.
//
// Not thread-safe; each Reencoder belongs to one direction of one
// connection.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proxy/h2_headers.h"
#include "proxy/hpack.h"

namespace crihook::relay {

class Reencoder {
 public:
  // Whether the direction is re-encoded (start() was called).
  bool on() const { return on_; }
  // From here on, every block of the direction is encode()d; the first
  // opens with a dynamic table size update to 0, which empties the
  // receiver's table (what the sender's encoder put there), then back to
  // what the receiver allows.
  void start();
  // The receiver's SETTINGS_HEADER_TABLE_SIZE.
  void setMaxTableSize(uint32_t value);
  // Appends `fields` as a block (the table reset first when owed); the
  // encoder's error (out of memory) when it fails.
  absl::Status encode(const Headers& fields, std::string& block);

 private:
  bool on_ = false;
  bool reset_owed_ = false;
  uint32_t table_size_ = hpack::kDefaultTableSize;  // the receiver's, capped at ours
  hpack::Encoder encoder_;
};

// `headers` as a header block of literals without indexing (hpack.h's
// appendLiteral): it reads the same whatever the receiver's table holds and
// changes nothing in it, so it may go between a peer's blocks.
std::string literalBlock(const Headers& headers);

}  // namespace crihook::relay
