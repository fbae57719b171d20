// A pause for a spin loop that expects its wait to end within a few hundred nanoseconds: it
// tells the core that the loop spins (x86 pause, AArch64 yield), so a sibling hyperthread runs and
// the loop's exit costs no mis-speculation. Not a yield to the kernel.
#pragma once

namespace sluice::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace sluice::detail
