// sluice/buffer.hpp: a move-only, owning handle to a block of bytes, the unit a pool recycles.
//
// A buffer owns capacity() bytes aligned to at least 16 and exposes the first size() of them.
// Moving transfers the memory and leaves the source empty; destroying frees it. A buffer is not
// thread-safe: one holder at a time, handed between threads by the usual means (a queue, a
// join), which is exactly how a pool's users route frames.
//
//   buffer(n), buffer(n, cap)   fresh memory: size() == n, capacity() == max(n, cap)
//   data(), size(), capacity()  the memory, the bytes exposed, the bytes owned
//   bytes()                     the first size() bytes as a std::span
//   operator bool               whether it holds memory (a moved-from buffer holds none)
//
// Bad input: a capacity that cannot be allocated throws std::bad_alloc (buffer(SIZE_MAX) does);
// a capacity below the size is raised to the size.
#pragma once

#include "sluice/detail/platform.hpp"

#include <cstddef>
#include <new>
#include <span>

namespace sluice {

namespace detail {
struct buffer_access;

// A buffer's memory and capacity, as a pool holds it (the size is set when it is answered).
// Trivially copyable, so that it travels in registers between the pools' paths.
struct held {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
};
}  // namespace detail

class buffer {
 public:
  buffer() noexcept = default;                      // holds nothing
  explicit buffer(std::size_t size);                // fresh memory: size() == capacity() == size
  buffer(std::size_t size, std::size_t capacity);   // fresh memory: capacity() == max(size, capacity)
  buffer(buffer&& other) noexcept { take_from(other); }
  buffer& operator=(buffer&& other) noexcept {      // self-move leaves the buffer as it was
    if (this != &other) {
      release();
      take_from(other);
    }
    return *this;
  }
  ~buffer() { release(); }

  std::byte* data() noexcept { return data_; }                    // null when it holds nothing
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }             // the bytes it exposes
  std::size_t capacity() const noexcept { return capacity_; }     // the bytes it owns
  std::span<std::byte> bytes() noexcept { return {data_, size_}; }  // data(), size()
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  explicit operator bool() const noexcept { return data_ != nullptr; }  // holds memory

 private:
  friend struct detail::buffer_access;
  buffer(std::byte* data, std::size_t size, std::size_t capacity) noexcept
      : data_(data), size_(size), capacity_(capacity) {}
  void release() noexcept {
    if (data_ != nullptr) ::operator delete(data_);
  }
  // Moves other's memory here and empties other: word by word, each through a register. Left to
  // themselves, GCC and Clang copy size and capacity as one 16-byte load, which the store buffer
  // cannot serve from the two 8-byte stores that wrote them when the buffer is fresh from a call
  // (take() returning it, say), so the move waits for those stores to reach the cache: about 4 ns
  // a move on x86-64 (docs/bench/profiles.md, "One thread").
  void take_from(buffer& other) noexcept {
    std::byte* data = other.data_;
    std::size_t size = other.size_;
    std::size_t capacity = other.capacity_;
    asm("" : "+r"(size), "+r"(capacity));  // two registers, not one vector
    data_ = data;
    size_ = size;
    capacity_ = capacity;
    other.data_ = nullptr;
    other.size_ = 0;
    other.capacity_ = 0;
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

namespace detail {
// The one door through which the pools open and close a buffer.
struct buffer_access {
  static buffer make(held h, std::size_t size) noexcept { return buffer(h.data, size, h.capacity); }
  static buffer make_or_empty(held h, std::size_t size) noexcept { return h.data ? make(h, size) : buffer(); }
  static held release(buffer& b) noexcept {
    held h{b.data_, b.capacity_};
    b.data_ = nullptr;
    b.size_ = b.capacity_ = 0;
    return h;
  }
};
}  // namespace detail

}  // namespace sluice
