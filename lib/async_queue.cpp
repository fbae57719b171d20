#include "async_queue.hpp"

#include <cstdint>
#include <new>

namespace sluice::detail {

namespace {
// The table grows past one gate a bucket and shrinks below a quarter, never under its inline
// buckets, nor past 2^26 buckets.
constexpr unsigned most_bits = 26;
}  // namespace

async_queues::~async_queues() {
  if (buckets_ != inline_) delete[] buckets_;
}

void async_queues::forget_all() noexcept {
  if (buckets_ != inline_) delete[] buckets_;
  buckets_ = inline_;
  bits_ = inline_bits;
  gates_ = 0;
  for (async_waiter*& b : inline_) b = nullptr;
}

// Fibonacci hashing: the address times 2^64 / phi, top bits. The spot was chosen from the low
// bits of the same address (lib/parking.cpp); these mix all of them.
async_waiter** async_queues::bucket(const void* gate) const noexcept {
  const auto h = reinterpret_cast<std::uintptr_t>(gate) * std::uint64_t{0x9e3779b97f4a7c15};
  return &buckets_[static_cast<std::uint64_t>(h) >> (64 - bits_)];
}

async_waiter* async_queues::head(const void* gate) const noexcept {
  for (async_waiter* h = *bucket(gate); h != nullptr; h = h->bucket_next) {
    if (h->gate == gate) return h;
  }
  return nullptr;
}

// Puts head at the front of the chain that starts at slot.
void async_queues::chain(async_waiter& head, async_waiter** slot) noexcept {
  head.bucket_next = *slot;
  if (head.bucket_next != nullptr) head.bucket_next->bucket_link = &head.bucket_next;
  head.bucket_link = slot;
  *slot = &head;
}

void async_queues::push(async_waiter& w) noexcept {
  w.next = nullptr;
  if (async_waiter* const h = head(w.gate)) {
    w.prev = h->tail;
    h->tail->next = &w;
    h->tail = &w;
    return;
  }
  w.prev = nullptr;
  w.tail = &w;
  chain(w, bucket(w.gate));
  if (++gates_ > (std::size_t{1} << bits_) && bits_ < most_bits) resize(bits_ + 1);
}

bool async_queues::remove(async_waiter& w) noexcept {
  bool left = true;
  if (w.prev != nullptr) {  // not the head: the head keeps its place
    w.prev->next = w.next;
    if (w.next != nullptr) {
      w.next->prev = w.prev;
    } else {
      head(w.gate)->tail = w.prev;
    }
  } else if (async_waiter* const successor = w.next) {  // the next one takes the head's place
    successor->prev = nullptr;
    successor->tail = w.tail;
    successor->bucket_next = w.bucket_next;
    if (successor->bucket_next != nullptr) successor->bucket_next->bucket_link = &successor->bucket_next;
    successor->bucket_link = w.bucket_link;
    *successor->bucket_link = successor;
  } else {  // the gate's last waiter
    *w.bucket_link = w.bucket_next;
    if (w.bucket_next != nullptr) w.bucket_next->bucket_link = w.bucket_link;
    left = false;
    if (--gates_ < (std::size_t{1} << bits_) / 4 && bits_ > inline_bits) resize(bits_ - 1);
  }
  w.prev = w.next = w.tail = w.bucket_next = nullptr;
  w.bucket_link = nullptr;
  return left;
}

// Moves every head into a table of 2^bits buckets; keeps the old one if the memory cannot be had.
void async_queues::resize(unsigned bits) noexcept {
  async_waiter** const fresh = bits == inline_bits ? inline_ : new (std::nothrow) async_waiter*[std::size_t{1} << bits]();
  if (fresh == nullptr) return;
  async_waiter** const old = buckets_;
  const std::size_t old_count = std::size_t{1} << bits_;
  if (fresh == inline_) {
    for (auto& b : inline_) b = nullptr;
  }
  buckets_ = fresh;
  bits_ = bits;
  for (std::size_t i = 0; i < old_count; ++i) {
    for (async_waiter* h = old[i]; h != nullptr;) {
      async_waiter* const next = h->bucket_next;
      chain(*h, bucket(h->gate));
      h = next;
    }
  }
  if (old != inline_) delete[] old;
}

}  // namespace sluice::detail
