#include "sluice/buffer.hpp"

#include <algorithm>

#include "pool/memory.hpp"

namespace sluice {

buffer::buffer(std::size_t size) : buffer(size, size) {}

buffer::buffer(std::size_t size, std::size_t capacity)
    : data_(detail::allocate_bytes(std::max(size, capacity))),
      size_(size),
      capacity_(std::max(size, capacity)) {}

}  // namespace sluice
