#include "base/bounded_json.h"

#include "base/quote.h"
#include "base/text.h"

namespace crihook {

bool jsonNestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

absl::StatusOr<nlohmann::json> parseJsonBounded(std::string_view text, size_t max_bytes,
                                                int max_depth) {
  if (text.size() > max_bytes)
    return absl::InvalidArgumentError(
        cat(text.size(), " bytes, more than the ", max_bytes, " allowed"));
  if (!jsonNestingWithin(text, max_depth))
    return absl::InvalidArgumentError(cat("nested deeper than ", max_depth));
  nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return v;
}

std::string shownJson(const nlohmann::json& v) {
  if (v.is_string()) return quote(v.get_ref<const std::string&>());
  // ensure_ascii: control characters and non-ASCII come out as \uXXXX.
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (s.size() > kMaxQuotedBytes) {
    s.resize(kMaxQuotedBytes);
    s += "...";
  }
  return s;
}

}  // namespace crihook
