#pragma once

// JSON from outside (annotations, CDI specs, registrations, state files,
// hook settings) parsed within bounds, and shown in messages without being
// serialised whole. nlohmann's parser is iterative, but dump() and the
// recursive walks over a parsed value are not: a value nested 60,000 deep
// overflows the stack in the first of them, so the nesting is counted on the
// text before anything parses it.

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/status/statusor.h"

namespace crihook {

// Every JSON document crihook reads is a few levels deep (a CDI spec 5, a
// record 4); 32 leaves room for what newer writers add.
inline constexpr int kMaxJsonNesting = 32;

// Whether the arrays and objects of `text` nest at most `max_depth` deep
// (strings skipped, escapes honoured). Linear, no allocation; meant to run
// before a parser on text that is not JSON too.
bool jsonNestingWithin(std::string_view text, int max_depth);

// `text` as JSON once it is at most `max_bytes` bytes and nested at most
// `max_depth` deep. INVALID_ARGUMENT with the reason only ("1234 bytes, more
// than the 1024 allowed", "nested deeper than 32", "not valid JSON at byte
// 17"); the caller names what it read.
absl::StatusOr<nlohmann::json> parseJsonBounded(std::string_view text, size_t max_bytes,
                                                int max_depth = kMaxJsonNesting);

// A JSON value from outside for a message: a string quoted (quote.h), any
// other value compact with non-ASCII escaped; cut at kMaxQuotedBytes. Bounded
// in time by the value's size and in stack by its depth (parsed by
// parseJsonBounded, or built by crihook).
std::string shownJson(const nlohmann::json& v);

}  // namespace crihook
