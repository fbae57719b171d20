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
  buffer(buffer&& other) noexcept
      : data_(other.data_), size_(in_register(other.size_)), capacity_(in_register(other.capacity_)) {
    other.forget();
  }
  buffer& operator=(buffer&& other) noexcept {      // self-move leaves the buffer as it was
    if (this != &other) {
      release();
      data_ = other.data_;
      size_ = in_register(other.size_);
      capacity_ = in_register(other.capacity_);
      other.forget();
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
  void forget() noexcept {  // holds nothing now, without freeing what it held
    data_ = nullptr;
    size_ = 0;
    capacity_ = 0;
  }
  // The moves copy a buffer's size and capacity each through a general register. Left to
  // themselves, GCC and Clang copy the two as one 16-byte load, which the store buffer cannot
  // serve from the two 8-byte stores that wrote them when the buffer comes fresh from a call that
  // was not inlined (mutex_pool::acquire, a program's own function returning a buffer), so the
  // move waits for those stores to reach the cache: about 4 ns a move on x86-64
  // (docs/bench/profiles.md, "One thread").
  static std::size_t in_register(std::size_t word) noexcept {
    asm("" : "+r"(word));  // NOLINT(hicpp-no-assembler): emits nothing; the word is in a register
    return word;
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
    b.forget();
    return h;
  }
};
}  // namespace detail

}  // namespace sluice
