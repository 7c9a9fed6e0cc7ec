#pragma once

// Bytes waiting to go out on one side of a relayed stream.
//
// Header-only on purpose: append and read run once per DATA chunk in both
// directions, and the release build has no LTO, so they must be inlinable
// into the code that calls them (upstream.cc, own_streams.cc).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace crihook::relay {

// A FIFO of bytes: appended at the back, read from the front. Not
// thread-safe (a call's queues live on its connection's EventLoop thread).
class ByteQueue {
 public:
  // Copies `len` bytes in at the back.
  void append(const uint8_t* data, size_t len) {
    if (head_ > 0 && head_ == buf_.size()) {
      buf_.clear();
      head_ = 0;
    }
    buf_.append(reinterpret_cast<const char*>(data), len);
  }
  // Replaces the contents with `bytes`.
  void assign(std::string bytes) {
    buf_ = std::move(bytes);
    head_ = 0;
  }
  // Moves up to `max` bytes from the front into `out`; returns how many.
  size_t read(uint8_t* out, size_t max) {
    size_t n = std::min(max, buf_.size() - head_);
    std::memcpy(out, buf_.data() + head_, n);
    drop(n);
    return n;
  }
  // Drops up to `n` bytes from the front (those view() showed, once sent).
  // What was read is given back when the queue empties, or once it is over
  // 1 MiB and more than half of the buffer.
  void drop(size_t n) {
    head_ += std::min(n, buf_.size() - head_);
    if (head_ == buf_.size()) {
      buf_.clear();
      head_ = 0;
    } else if (head_ > (1u << 20) && head_ > buf_.size() / 2) {
      buf_.erase(0, head_);
      head_ = 0;
    }
  }
  // What the queue holds; valid until the next call that changes it.
  std::string_view view() const { return std::string_view(buf_).substr(head_); }
  // Empties the queue, handing over what it held.
  std::string take() {
    buf_.erase(0, head_);
    head_ = 0;
    return std::move(buf_);
  }
  size_t size() const { return buf_.size() - head_; }
  bool empty() const { return size() == 0; }

 private:
  std::string buf_;
  size_t head_ = 0;
};

}  // namespace crihook::relay
