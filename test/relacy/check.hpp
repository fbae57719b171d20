// What the Relacy checks share: running one test body under Relacy's scheduler, and weakening one
// of the library's orderings on purpose, to show that the check reports it.
#pragma once

#include <atomic>
#include <cstdio>
#include <fstream>
#include <streambuf>
#include <string>
#include <type_traits>
#include <vector>

#include "../doctest.hpp"
#include "relacy_atomic.hpp"
#include "sluice/detail/atomic.hpp"

// seam/ ahead of include/ on the include path (meson.build): Relacy's atomic, not std's.
static_assert(!std::is_same_v<sluice::detail::atomic<int>, std::atomic<int>>, "the Relacy seam is not in use");

namespace sluice_relacy {

// What a run found: Relacy's verdict, how many schedules it ran, and its report.
struct outcome {
  bool passed;
  unsigned long iterations;
  std::string report;

  // Relacy's verdict line, e.g. "DATA RACE (data race detected)"; empty when it passed.
  std::string verdict() const {
    const std::size_t start = report.find('\n') + 1;  // after the test's name
    return passed ? std::string() : report.substr(start, report.find('\n', start) - start);
  }
};

// How a body is explored: every schedule with at most `bound` preemptions (Relacy's fair
// context-bound search, exhaustive within the bound), or `iterations` random schedules.
struct exploration {
  rl::scheduler_type_e search = rl::random_scheduler_type;
  unsigned long iterations = 20'000;
  unsigned bound = 2;
};

inline exploration random_schedules(unsigned long n) { return {rl::random_scheduler_type, n, 0}; }
inline exploration every_schedule(unsigned preemptions) { return {rl::fair_context_bound_scheduler_type, 0, preemptions}; }

// Where Relacy writes its report: a temporary file, through a stream buffer that allocates
// nothing. (Relacy replaces the global operator new with one that allocates from the model while
// a simulation runs; a growing std::ostringstream then frees, in libstdc++, memory that the model
// gave it.)
class file_buffer : public std::streambuf {
 public:
  file_buffer() : file_(std::tmpfile()) {}
  ~file_buffer() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  std::string contents() {
    std::string s;
    if (file_ == nullptr) return s;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) s.push_back(static_cast<char>(c));
    return s;
  }

 private:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof() && file_ != nullptr) std::fputc(c, file_);
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return file_ == nullptr ? n : static_cast<std::streamsize>(std::fwrite(s, 1, static_cast<std::size_t>(n), file_));
  }
  std::FILE* file_;
};

template <class Test>
outcome explore(const exploration& e) {
  file_buffer report_buffer, progress_buffer;
  std::ostream report(&report_buffer), progress(&progress_buffer);
  rl::test_params p;
  p.search_type = e.search;
  if (e.search == rl::random_scheduler_type) p.iteration_count = e.iterations;
  p.context_bound = e.bound;
  p.execution_depth_limit = 200'000;  // a pool call runs hundreds of modelled operations
  p.output_stream = &report;
  p.progress_stream = &progress;
  const bool passed = rl::simulate<Test>(p);
  return {passed, static_cast<unsigned long>(p.stop_iteration), report_buffer.contents()};
}

// The lines of `file` (relative to the source root) that contain `marker`, numbered from 1.
inline std::vector<unsigned> lines_marked(const std::string& file, const std::string& marker) {
  std::ifstream in(std::string(SLUICE_SOURCE_ROOT) + "/" + file);
  std::vector<unsigned> found;
  std::string line;
  for (unsigned n = 1; std::getline(in, line); ++n) {
    if (line.find(marker) != std::string::npos) found.push_back(n);
  }
  return found;
}

// One ordering the library's comments name, found by the comment's marker on the line of its
// memory_order argument. The call it belongs to may start a few lines above (a CAS written over
// several lines), so the `span` lines above the marker count too.
struct ordering {
  const char* name;    // as the comments say it, e.g. "(1) note_done's release"
  const char* file;    // relative to the source root
  const char* marker;  // unique on the line
  unsigned span;       // lines above the marker that the call may start on
};

// Runs Test with that one ordering weakened. The site must be found exactly once, and the
// weakened operation must run; the verdict is then the check's.
template <class Test>
outcome explore_weakened(const ordering& o, const exploration& e, unsigned& weakened_operations) {
  const std::vector<unsigned> at = lines_marked(o.file, o.marker);
  weakened_operations = 0;
  if (at.size() != 1) return {true, 0, "marker found " + std::to_string(at.size()) + " times"};
  weaken = {false, o.file, at[0] - o.span, at[0], 0};
  outcome r = explore<Test>(e);
  weakened_operations = weaken.hits;
  weaken = {};
  return r;
}

// A check that must fail with `o` weakened: the weakened operation ran, and Relacy reported it.
// `check` names the check in the line printed.
template <class Test>
void expect_reported(const char* check, const ordering& o, const exploration& e) {
  unsigned weakened = 0;
  const outcome r = explore_weakened<Test>(o, e, weakened);
  std::printf("relacy: %s, %s weakened (%u operations): %s after %lu executions\n", check, o.name, weakened,
              r.passed ? "NOT REPORTED" : r.verdict().c_str(), r.iterations);
  std::fflush(stdout);
  INFO(std::string(o.name));
  CHECK(weakened > 0);
  CHECK_FALSE(r.passed);
}

// A check that must pass: one line of what Relacy explored, and its report if it failed.
inline void expect_passes(const char* what, const outcome& r) {
  std::printf("relacy: %s: %s after %lu executions\n", what, r.passed ? "passed" : "FAILED", r.iterations);
  std::fflush(stdout);
  INFO(r.report);
  CHECK(r.passed);
}

}  // namespace sluice_relacy
