#include "sluice/buffer.hpp"

#include <algorithm>
#include <utility>

#include "pool/memory.hpp"

namespace sluice {

buffer::buffer(std::size_t size) : buffer(size, size) {}

buffer::buffer(std::size_t size, std::size_t capacity)
    : data_(detail::allocate_bytes(std::max(size, capacity))),
      size_(size),
      capacity_(std::max(size, capacity)) {}

buffer::buffer(buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

buffer& buffer::operator=(buffer&& other) noexcept {
  if (this != &other) {
    detail::free_bytes(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

buffer::~buffer() { detail::free_bytes(data_); }

}  // namespace sluice
