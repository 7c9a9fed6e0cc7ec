#include "base/quote.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace crihook {

std::string quote(std::string_view text, size_t max_bytes) {
  const size_t n = std::min(text.size(), max_bytes);
  std::string out;
  out.reserve(n + 8);
  out += '"';
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += text.size() > max_bytes ? "\"..." : "\"";
  return out;
}

std::string boundedMessage(std::string_view text, size_t max_bytes) {
  std::string out;
  std::string_view kept = text;
  std::string tail;
  if (text.size() > max_bytes) {
    // The marker's own length depends on the number; 40 bytes hold any.
    constexpr size_t kMarker = 40;
    const size_t keep = max_bytes > kMarker ? max_bytes - kMarker : 0;
    kept = text.substr(0, keep);
    tail = fmt::format(" ... ({} bytes cut)", text.size() - keep);
    if (tail.size() > max_bytes) tail.resize(max_bytes);
  }
  out.reserve(kept.size() + tail.size());
  for (char ch : kept) {
    const auto c = static_cast<unsigned char>(ch);
    out += (c >= 0x20 && c < 0x7f) || c == '\t' ? ch : '?';
  }
  out += tail;
  return out;
}

}  // namespace crihook
