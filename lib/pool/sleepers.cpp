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
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>

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

extern "C" void on_decay_signal(int, siginfo_t* info, void*) {
  if (info == nullptr || info->si_code != SI_QUEUE) return;  // a kill(): not a step's request
  const int saved = errno;
  detail::release_idle_pages(info->si_value.sival_ptr);
  errno = saved;
}

[[noreturn]] void refuse(int signo, const char* why) {
  throw std::invalid_argument("sluice::set_decay_signal(" + std::to_string(signo) + "): " + why);
}

}  // namespace

// No lock: two calls that race install the same handler, and one that finds the other's keeps
// it; a lock would be one more for a fork to leave held in its child.
void set_decay_signal(int signo) {
  if (signo == 0) {
    // The handler stays: requests may be queued, and the default action of a real-time signal
    // ends the process.
    decay_signal.store(0, std::memory_order_relaxed);
    return;
  }
#if defined(__linux__)
  if (signo < SIGRTMIN || signo > SIGRTMAX) refuse(signo, "not a real-time signal (SIGRTMIN to SIGRTMAX)");
#if defined(PR_GET_TAGGED_ADDR_CTRL) && defined(PR_MTE_TCF_MASK)
  // arm64 memory tagging: MADV_DONTNEED may clear a page's tags, and the next access through
  // the buffer's tagged pointer would then fault.
  if (const int tagged = prctl(PR_GET_TAGGED_ADDR_CTRL, 0, 0, 0, 0); tagged > 0 && (tagged & PR_MTE_TCF_MASK) != 0) {
    refuse(signo, "memory tagging is on, and pages given back would lose their tags");
  }
#endif
  struct sigaction now {};
  if (sigaction(signo, nullptr, &now) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
  const bool ours = (now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_decay_signal;
  if (!ours) {
    if ((now.sa_flags & SA_SIGINFO) != 0 || now.sa_handler != SIG_DFL) {
      refuse(signo, "the program has set its disposition (a handler, or ignored)");
    }
    struct sigaction mine {};
    mine.sa_sigaction = on_decay_signal;
    // SA_ONSTACK: a thread with an alternate signal stack (small fibers, Go's) runs it there.
    mine.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    if (sigaction(signo, &mine, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
  }
  decay_signal.store(signo, std::memory_order_release);  // (D1)
#else
  refuse(signo, "signals for decay need Linux");
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

void note_sleepers(pool_core& c, std::uint32_t step) noexcept {
  if (decay_signal.load(std::memory_order_relaxed) == 0) return;  // ask_sleepers reads it (D2)
  std::lock_guard lock(c.admin_mutex);  // (M): the registry
  const pthread_t me = pthread_self();
  for (cache* tc = c.registry; tc != nullptr; tc = tc->next) {
    tc->ask_now = false;
    if (tc->owner != cache::kind::thread || tc->given_back || pthread_equal(tc->thread, me)) continue;
    std::uint64_t uses = 0, held = 0;
    // acquire, as stats() reads another thread's cache: pairs with install()'s release.
    tc->for_each_magazine(
        [&](std::size_t, const magazine& m) {
          uses += m.takes.load(std::memory_order_relaxed) + m.retires.load(std::memory_order_relaxed);
          // What the handler would reach: all but a magazine's top buffer (release_idle_pages),
          // of two pages or more (one under that may lie across a page's edge with none whole).
          const std::uint64_t n = m.count.load(std::memory_order_relaxed);
          if (m.capacity >= 2 * page_bytes && n > 1) held += n - 1;
        },
        std::memory_order_acquire);
    if (uses != tc->quiet_uses) {  // used since the last look, before this step began
      tc->quiet_uses = uses;
      tc->quiet_since = step - 1;
      continue;
    }
    // Relaxed: released_uses is a hint (a stale one asks once more, or once less until the next use).
    tc->ask_now = held > 0 && decay_schedule::stale(tc->quiet_since, step) &&
                  tc->released_uses.load(std::memory_order_relaxed) != uses;
  }
}

void ask_sleepers(pool_core& c, std::uint32_t step) noexcept {
  const int signo = decay_signal.load(std::memory_order_acquire);  // (D2)
  if (signo == 0) return;
  std::lock_guard lock(c.admin_mutex);  // (M): the registry, and each thread alive while its cache is in it
  for (cache* tc = c.registry; tc != nullptr; tc = tc->next) {
    if (!tc->ask_now) continue;
    tc->ask_now = false;
    // Given back since the look (its thread exited while a trim held the cache pinned, with
    // admin_mutex let go): its thread may be gone (review).
    if (tc->given_back) continue;
    // A request still queued keeps its fields (review: rewritten, an older signal's handler read
    // the newer request's). Only this step (decay_mutex) moves the word from idle, so the fields
    // written after this look are read by no handler before the CAS below.
    if (tc->release.load(std::memory_order_relaxed) != release_idle) continue;
    tc->asked_uses.store(tc->quiet_uses, std::memory_order_relaxed);
    tc->asked_step.store(step, std::memory_order_relaxed);
    std::uint32_t idle = release_idle;
    // (Q) release: the fields above to the handler's acquire CAS.
    if (!tc->release.compare_exchange_strong(idle, release_asked, std::memory_order_release, std::memory_order_relaxed)) {
      continue;
    }
    sigval value{};
    value.sival_ptr = tc;
    if (pthread_sigqueue(tc->thread, signo, value) != 0) tc->release.store(release_idle, std::memory_order_relaxed);
  }
}

void close_release(cache& tc) noexcept {
  for (;;) {
    // (W) acquire: pairs with the handler's release; its madvise is over before ~pool frees.
    std::uint32_t now = tc.release.load(std::memory_order_acquire);
    if (now == release_running) {  // a handler at work (a few madvise calls): sleep until it ends
      syscall(SYS_futex, &tc.release, FUTEX_WAIT_PRIVATE, release_running, nullptr, nullptr, 0);
      continue;
    }
    if (tc.release.compare_exchange_weak(now, release_closed, std::memory_order_acquire, std::memory_order_relaxed)) return;
  }
}

void end_release(cache& tc) noexcept {
  // (W) release: pairs with close_release's acquire, so that ~pool frees the buffers only after
  // their madvise returned. The wake is a system call, async-signal-safe.
  tc.release.store(release_idle, std::memory_order_release);
  syscall(SYS_futex, &tc.release, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace detail
}  // namespace sluice
