#pragma once

// 32-bit big-endian integers, as the wire formats crihook reads lay them out
// (gRPC's message length, HTTP/2's frame fields, NRI's mux and ttrpc
// headers).

#include <cstdint>
#include <string>

namespace crihook {

// The integer in the 4 bytes at `p`.
inline uint32_t readBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Appends `v` as 4 bytes.
inline void appendBigEndian32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

}  // namespace crihook
