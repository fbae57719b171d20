// basic_pool_resource: the pools behind std::pmr::memory_resource (sluice/pool_resource.hpp).
#include "sluice/pool_resource.hpp"

#include "exact_class.hpp"

namespace sluice {

namespace {

// The pool's blocks are aligned to at least 16 (buffer.hpp), which serves every alignment up to
// max_align_t; anything stricter goes upstream.
static_assert(alignof(std::max_align_t) <= 16);

bool pooled(std::size_t bytes, std::size_t alignment, std::size_t ceiling) noexcept {
  return alignment <= alignof(std::max_align_t) && bytes <= ceiling;
}

}  // namespace

template <class Pool>
basic_pool_resource<Pool>::basic_pool_resource(pool_options options, std::pmr::memory_resource* upstream)
    : pool_(options), ceiling_(options.ceiling), upstream_(upstream) {}

template <class Pool>
void* basic_pool_resource<Pool>::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (!pooled(bytes, alignment, ceiling_)) return upstream_->allocate(bytes, alignment);
  return detail::exact_class::allocate(pool_, bytes);  // capacity: exactly the size of bytes' class
}

template <class Pool>
void basic_pool_resource<Pool>::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if (!pooled(bytes, alignment, ceiling_)) return upstream_->deallocate(p, bytes, alignment);
  detail::exact_class::deallocate(pool_, p, bytes);  // docs/pool.md, EXACT CLASSES
}

template class basic_pool_resource<pool>;
template class basic_pool_resource<mutex_pool>;

}  // namespace sluice
