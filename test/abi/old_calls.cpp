// Calls that a program built against earlier headers of this soname (0.2) makes out of line, and
// that later headers of it made inline: libsluice.so must still export each, and each must still
// do what its call does. A call that goes inline within a soname joins the list; one that stops
// being exported, or no longer admits, counts or floors as before, fails here.
//
// The calls are looked up by their mangled names in the libsluice.so this program loaded, as
// the dynamic linker resolves an older program's references, and called through the ABI's
// convention for a member function: the object's address first. Exits 0 when every call is
// there and behaves, 1 when one does not.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>

#include "sluice/gate.hpp"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

template <class Fn>
Fn* exported(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) std::fprintf(stderr, "FAILED: libsluice.so does not export %s\n", name);
  failures += symbol == nullptr;
  return reinterpret_cast<Fn*>(symbol);
}

}  // namespace

int main() {
  // The loaded libsluice.so, found through a function that only it defines.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&sluice::gate_category), &info) == 0 || info.dli_fname == nullptr) {
    std::fprintf(stderr, "FAILED: no shared object holds sluice::gate_category\n");
    return 1;
  }
  void* library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) {
    std::fprintf(stderr, "FAILED: dlopen(%s): %s\n", info.dli_fname, dlerror());
    return 1;
  }
  std::printf("libsluice: %s\n", info.dli_fname);

  using weighted_try = bool(sluice::gate*, std::int64_t);
  using weighted_note = void(sluice::gate*, std::int64_t);
  auto* try_admit = exported<weighted_try>(library, "_ZN6sluice4gate9try_admitEl");            // try_admit(n)
  auto* note_done = exported<weighted_note>(library, "_ZN6sluice4gate9note_doneEl");           // note_done(n)
  auto* note_submitted = exported<weighted_note>(library, "_ZN6sluice4gate14note_submittedEl");  // note_submitted(n)
  auto* admit_now = exported<weighted_try>(library, "_ZN6sluice4gate9admit_nowEl");            // the waiting forms' try
  if (failures != 0) return 1;

  sluice::gate g{10};
  note_submitted(&g, 4);
  check(g.in_flight() == 4, "note_submitted(4) counts 4");
  check(try_admit(&g, 6), "try_admit(6) admits up to the cap");
  check(!try_admit(&g, 1), "try_admit(1) refuses at the cap");
  check(!admit_now(&g, 1), "the waiting forms' try finds no room at the cap");
  note_done(&g, 3);
  check(g.in_flight() == 7, "note_done(3) counts 3 down");
  check(admit_now(&g, 3), "the waiting forms' try admits 3 into room for 3");
  note_done(&g, 100);
  check(g.in_flight() == 0, "note_done(100) stops at zero");
  check(!try_admit(&g, 11), "try_admit(11) refuses a weight above the cap");
  check(!try_admit(&g, sluice::gate_limit + 1), "try_admit refuses a weight above gate_limit");
  check(try_admit(&g, 0) && g.in_flight() == 0, "try_admit(0) admits, counting nothing");
  const sluice::gate_stats s = g.stats();
  check(s.admitted == 3 && s.refused == 3, "the exported calls count in stats() as the inline ones do");
  check(s.peak_in_flight == 10, "the exported calls raise the peak");
  std::printf("%s\n", failures == 0 ? "every exported call behaves" : "some exported call misbehaves");
  return failures == 0 ? 0 : 1;
}
