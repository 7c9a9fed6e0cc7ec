#pragma once

// String building shared by every part. Debian's Abseil is built as C++14, so
// its string_view is not std::string_view and absl::StrCat does not take
// std::string_view; crihook::cat takes both, and anything fmt formats.

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace crihook {

namespace text_detail {
inline void append(std::string& out, std::string_view s) { out.append(s); }
inline void append(std::string& out, const char* s) { out.append(s); }
inline void append(std::string& out, const std::string& s) { out.append(s); }
template <typename T>
requires std::is_same_v<T, absl::string_view> &&
    (!std::is_same_v<absl::string_view, std::string_view>)inline void append(std::string& out,
                                                                             const T& s) {
  out.append(s.data(), s.size());
}
template <typename T>
requires(!std::is_convertible_v<const T&, std::string_view> &&
         !std::is_same_v<T, absl::string_view>) inline void append(std::string& out, const T& v) {
  fmt::format_to(std::back_inserter(out), "{}", v);
}
}  // namespace text_detail

template <typename... Args>
std::string cat(const Args&... args) {
  std::string out;
  (text_detail::append(out, args), ...);
  return out;
}

// A duration as a config file writes it: "2s" when whole seconds, else
// "1500ms".
inline std::string durationText(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? cat(d.count() / 1000, "s") : cat(d.count(), "ms");
}

// absl::Status::message() as a std::string_view.
inline std::string_view sv(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace crihook
