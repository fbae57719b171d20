// Decay's reach into a sleeping thread's cache (docs/pool.md, DECAY): a step signals each other
// thread whose cache has sat unused since before the step before, and that thread's handler
// gives back the pages of the buffers its cache holds. The buffers stay where they are, valid
// memory without pages, until the thread's next call frees them as decay's catch-up does; what
// comes back to the system at once is their memory.
//
// Why a signal: another thread's cache is written by its thread alone, with plain stores on the
// inline path, and that thread may be stopped anywhere in it, so no other thread may take from it
// or touch its buffers' bytes (a take may have just answered one). A handler runs on the thread
// itself, between two of its instructions: what it reads there is exact, and the pages it drops
// hold no byte anyone will read (thread_caches.cpp, release_idle_pages). It costs the inline
// paths nothing: two signal fences, which emit no instruction.
//
// Off unless the program names a signal (set_decay_signal): a handler it did not install would
// be a surprise, and a signal may cut short a system call that is not restarted (epoll_wait,
// nanosleep: EINTR). A thread is signalled at most once per quiet spell: after its handler ran,
// not again until its cache is used.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include <sys/mman.h>
#include <unistd.h>

#include "core.hpp"

namespace sluice {
namespace {

// The signal set, 0 for none. (D1) release: the handler is installed first; (D2) the steps'
// acquire. A plain std::atomic: the model checkers' builds never set one.
std::atomic<int> decay_signal{0};
// The page size, read by the handlers. Initialized when the library loads.
const std::size_t page_bytes = [] {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<std::size_t>(page) : std::size_t{4096};
}();
std::mutex setting;             // one set_decay_signal at a time

extern "C" void on_decay_signal(int, siginfo_t* info, void*) {
  if (info == nullptr || info->si_code != SI_QUEUE) return;  // a kill(): not a step's request
  const int saved = errno;
  detail::release_idle_pages(info->si_value.sival_ptr);
  errno = saved;
}

}  // namespace

void set_decay_signal(int signo) {
  if (signo == 0) {
    decay_signal.store(0, std::memory_order_relaxed);  // the handler stays: requests in flight
    return;
  }
#if defined(__linux__)
  if (signo < SIGRTMIN || signo > SIGRTMAX) {
    throw std::invalid_argument("sluice::set_decay_signal: " + std::to_string(signo) +
                                " is not a real-time signal (SIGRTMIN to SIGRTMAX)");
  }
  std::lock_guard lock(setting);
  struct sigaction now {};
  if (sigaction(signo, nullptr, &now) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
  const bool ours = (now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_decay_signal;
  if (!ours) {
    if ((now.sa_flags & SA_SIGINFO) != 0 || now.sa_handler != SIG_DFL) {
      throw std::invalid_argument("sluice::set_decay_signal: signal " + std::to_string(signo) +
                                  " already has a disposition of the program's");
    }
    struct sigaction mine {};
    mine.sa_sigaction = on_decay_signal;
    mine.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&mine.sa_mask);
    if (sigaction(signo, &mine, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
  }
  decay_signal.store(signo, std::memory_order_release);  // (D1)
#else
  throw std::invalid_argument("sluice::set_decay_signal: signals for decay need Linux");
#endif
}

namespace detail {

std::size_t give_back_pages(std::byte* p, std::size_t n) noexcept {
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page_bytes - 1) / page_bytes * page_bytes;
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) / page_bytes * page_bytes;
  if (end <= begin) return 0;
  // Fails (EINVAL) on locked or huge pages: those stay, and count for nothing.
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0 ? end - begin : 0;
}

void ask_sleepers(pool_core& c, std::uint32_t step) noexcept {
  const int signo = decay_signal.load(std::memory_order_acquire);  // (D2)
  if (signo == 0) return;
  std::lock_guard lock(c.admin_mutex);  // (M): the registry, and each thread alive while its cache is in it
  const pthread_t me = pthread_self();
  for (cache* tc = c.registry; tc != nullptr; tc = tc->next) {
    if (tc->owner != cache::kind::thread || tc->given_back || pthread_equal(tc->thread, me)) continue;
    std::uint64_t uses = 0, held = 0;
    // acquire, as stats() reads another thread's cache: pairs with install()'s release.
    tc->for_each_magazine(
        [&](std::size_t, const magazine& m) {
          uses += m.takes.load(std::memory_order_relaxed) + m.retires.load(std::memory_order_relaxed);
          // Buffers below a page have no whole page to give: not worth a signal.
          if (m.capacity >= page_bytes) held += m.count.load(std::memory_order_relaxed);
        },
        std::memory_order_acquire);
    if (uses != tc->quiet_uses) {  // used since the last step: in the step before this one
      tc->quiet_uses = uses;
      tc->quiet_since = step - 1;
      continue;
    }
    // Relaxed: released_uses is a hint (above).
    if (held == 0 || !decay_schedule::stale(tc->quiet_since, step) ||
        tc->released_uses.load(std::memory_order_relaxed) == uses) {
      continue;
    }
    std::uint32_t idle = release_idle;
    // Relaxed: the request publishes nothing; the handler reads only its own thread's writes.
    if (!tc->release.compare_exchange_strong(idle, release_asked, std::memory_order_relaxed)) continue;
    sigval value{};
    value.sival_ptr = tc;
    if (pthread_sigqueue(tc->thread, signo, value) != 0) tc->release.store(release_idle, std::memory_order_relaxed);
  }
}

void close_release(cache& tc) noexcept {
  for (;;) {
    // (W) acquire: pairs with the handler's release; its madvise is over before ~pool frees.
    std::uint32_t now = tc.release.load(std::memory_order_acquire);
    if (now == release_running) {
      sched_yield();  // a handler is short: a few madvise calls
      continue;
    }
    if (tc.release.compare_exchange_weak(now, release_closed, std::memory_order_acquire, std::memory_order_relaxed)) return;
  }
}

}  // namespace detail
}  // namespace sluice
