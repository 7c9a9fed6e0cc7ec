#pragma once

// Untrusted text (pod and container names, annotation values, what other
// software wrote into a file, what a hook server or module answered) on its
// way into a log line or a status message: quoted and cut short, so that a
// newline in a pod name cannot forge a log line and a 10 MiB id cannot make
// a 10 MiB message. The one helper every part uses.

#include <cstddef>
#include <string>
#include <string_view>

namespace crihook {

// A name, a value, a line read from a file is shown in full up to here: long
// enough to recognise, short enough to keep a log line one screen wide.
inline constexpr size_t kMaxQuotedBytes = 64;

// gRPC leaves the size of grpc-message to the HTTP/2 header limits (the
// client's SETTINGS_MAX_HEADER_LIST_SIZE, 16 KiB in grpc-go, 8 KiB in some
// clients): a longer message is never delivered and the caller waits for its
// deadline. 4 KiB is far above any message crihook writes itself.
inline constexpr size_t kMaxStatusMessageBytes = 4096;

// `text` in double quotes: printable ASCII (0x20-0x7e) kept, `"` and `\`
// backslash-escaped, every other byte (newline, control characters, bytes of
// non-ASCII UTF-8) as \xNN; at most `max_bytes` bytes of `text`, then `...`
// after the closing quote. The result is printable ASCII, one line, at most
// 4 * max_bytes + 5 bytes.
// (Not named `quoted`: argument-dependent lookup would pick std::quoted
// for a std::string argument, and std::quoted(s, 200) compiles.)
std::string quote(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

// A whole message (built by crihook, holding quoted parts) cut to at most
// `max_bytes` bytes: the start kept, ending with " ... (N bytes cut)". Bytes
// that are not printable ASCII or tab are replaced by '?' so the message
// stays one line whatever it holds.
std::string boundedMessage(std::string_view text, size_t max_bytes = kMaxStatusMessageBytes);

}  // namespace crihook
