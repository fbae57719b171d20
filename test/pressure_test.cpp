// The memory-pressure monitor (sluice/pressure.hpp, docs/pressure.md), driven by files the tests
// write in the kernel's formats: no real pressure needed.
#include "sluice/pressure.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <system_error>

#include "sluice/pool.hpp"

namespace {

using sluice::pressure;

// A fresh directory under $TMPDIR (or /tmp), removed with the files written to it at scope exit.
struct scratch {
  std::string dir;
  std::set<std::string> written;
  scratch() {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sluice-pressure-XXXXXX";
    REQUIRE(::mkdtemp(dir.data()) != nullptr);
  }
  ~scratch() {
    for (const std::string& p : written) ::unlink(p.c_str());
    ::rmdir(dir.c_str());
  }
  std::string path(const std::string& name) const { return dir + "/" + name; }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::trunc) << text;
    written.insert(p);
    return p;
  }
};

std::string psi(double some10, double full10, std::uint64_t total = 12345) {
  char text[256];
  std::snprintf(text, sizeof text,
                "some avg10=%.2f avg60=1.50 avg300=0.25 total=%llu\nfull avg10=%.2f avg60=0.75 avg300=0.10 total=%llu\n",
                some10, static_cast<unsigned long long>(total), full10, static_cast<unsigned long long>(total / 2));
  return text;
}

}  // namespace

TEST_CASE("parse_psi reads the kernel's two lines, and nothing else") {
  const auto r = sluice::parse_psi("some avg10=12.34 avg60=5.00 avg300=0.01 total=98765\n"
                                   "full avg10=3.50 avg60=1.25 avg300=0.00 total=4321\n");
  REQUIRE(r);
  CHECK(r->some_avg10 == doctest::Approx(12.34));
  CHECK(r->some_avg60 == doctest::Approx(5.0));
  CHECK(r->some_avg300 == doctest::Approx(0.01));
  CHECK(r->some_total == 98765);
  CHECK(r->full_avg10 == doctest::Approx(3.5));
  CHECK(r->full_avg60 == doctest::Approx(1.25));
  CHECK(r->full_total == 4321);
  CHECK_FALSE(r->usage);

  // "some" alone (as the cpu file of older kernels): full reads as zeros.
  const auto some_only = sluice::parse_psi("some avg10=1.00 avg60=2.00 avg300=3.00 total=4");
  REQUIRE(some_only);
  CHECK(some_only->full_avg10 == 0);
  // A key the kernel may add later is ignored; the fields in any order.
  CHECK(sluice::parse_psi("some total=1 avg300=0.00 avg60=0.00 avg10=9.99 new=7\n"));

  for (const char* bad : {"", "\n", "full avg10=1.00 avg60=0.00 avg300=0.00 total=1\n",  // no "some"
                          "some avg10=1.00 avg60=0.00 avg300=0.00\n",                      // no total
                          "some avg10=1,00 avg60=0.00 avg300=0.00 total=1\n",              // a comma
                          "some avg10=-1.00 avg60=0.00 avg300=0.00 total=1\n",             // a sign
                          "some avg10=. avg60=0.00 avg300=0.00 total=1\n",
                          "some avg10=1.00 avg60=0.00 avg300=0.00 total=18446744073709551616\n",  // 2^64
                          "some avg10=1.00 avg10=2.00 avg60=0.00 avg300=0.00 total=1\n",          // twice
                          "some avg10=1.00 avg60=0.00 avg300=0.00 total=1\nsome avg10=1.00 avg60=0.00 avg300=0.00 total=1\n",
                          "some avg10=1.00 avg60=0.00 avg300=0.00 total=1\nmany avg10=1.00\n",
                          "some avg10 avg60=0.00 avg300=0.00 total=1\n",
                          "some avg10=.5 avg60=0.00 avg300=0.00 total=1\n",                   // no digit before
                          "some avg10=5. avg60=0.00 avg300=0.00 total=1\n",                   // or after
                          "some avg10=1.000000000000000 avg60=0.00 avg300=0.00 total=1\n",    // 16 digits
                          "some avg10=1e5 avg60=0.00 avg300=0.00 total=1\n",
                          "some avg10=1.00 avg60=0.00 avg300=0.00 total=1\r\n",
                          "some\tavg10=1.00 avg60=0.00 avg300=0.00 total=1\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(sluice::parse_psi(bad));
  }
  CHECK(sluice::parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709551615\n")->some_total == UINT64_MAX);
}

TEST_CASE("a figure read equals the same figure as a threshold, every x.yy from 0 to 100") {
  // Correctly rounded: "2.31" is the double nearest 2.31, as the literal 2.31 is, so a threshold
  // of 2.35 is met by a file that says 2.35 (a sum of digit times 0.1, 0.01 read it lower).
  int wrong = 0;
  for (int hundredths = 0; hundredths <= 10000; ++hundredths) {
    char figure[16];
    std::snprintf(figure, sizeof figure, "%d.%02d", hundredths / 100, hundredths % 100);
    const auto r = sluice::parse_psi(std::string("some avg10=") + figure + " avg60=0.00 avg300=0.00 total=0\n");
    REQUIRE(r);
    const double threshold = std::strtod(figure, nullptr);  // the C locale here: a point
    if (r->some_avg10 != threshold) ++wrong;
    const sluice::pressure_monitor m({.soft_some = threshold, .hard_full = 100});
    if (hundredths > 0 && m.level_of(*r) != pressure::soft) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("poll: hard from full's avg10, soft from some's, else ok; thresholds the program's") {
  scratch s;
  const std::string path = s.write("memory", psi(0, 0));
  sluice::pressure_monitor m({.psi = path});
  CHECK(m.level() == pressure::ok);  // before a poll
  CHECK(m.poll() == pressure::ok);
  CHECK(m.reading().some_total == 12345);
  s.write("memory", psi(9.99, 0));
  CHECK(m.poll() == pressure::ok);
  s.write("memory", psi(10, 0));  // at the threshold: soft
  CHECK(m.poll() == pressure::soft);
  CHECK(m.level() == pressure::soft);
  CHECK(m.reading().some_avg10 == doctest::Approx(10));
  s.write("memory", psi(30, 10));
  CHECK(m.poll() == pressure::hard);
  s.write("memory", psi(0, 12));  // full without some (not the kernel's, but read as it says)
  CHECK(m.poll() == pressure::hard);

  sluice::pressure_monitor strict({.psi = path, .soft_some = 0.5, .hard_full = 2});
  s.write("memory", psi(1, 1));
  CHECK(strict.poll() == pressure::soft);
  CHECK(strict.level_of({.full_avg10 = 2}) == pressure::hard);
  CHECK(strict.level_of({}) == pressure::ok);
}

TEST_CASE("a cgroup's usage: memory.current against memory.max") {
  scratch s;
  const std::string psi_path = s.write("memory.pressure", psi(0, 0));
  s.write("memory.current", "800\n");
  s.write("memory.max", "1000\n");
  sluice::pressure_monitor m({.psi = psi_path, .cgroup = s.dir});
  CHECK(m.poll() == pressure::ok);
  REQUIRE(m.reading().usage);
  CHECK(*m.reading().usage == doctest::Approx(0.8));
  s.write("memory.current", "850\n");  // 0.85: soft
  CHECK(m.poll() == pressure::soft);
  s.write("memory.current", "1200\n");  // over the limit (the kernel allows a moment of it): hard
  CHECK(m.poll() == pressure::hard);
  s.write("memory.max", "max\n");  // no limit: no usage, so the PSI alone
  CHECK(m.poll() == pressure::ok);
  CHECK_FALSE(m.reading().usage);
  s.write("memory.max", "0\n");  // a limit of 0 holds nothing: full
  CHECK(m.poll() == pressure::hard);
  CHECK(*m.reading().usage == 1.0);

  sluice::pressure_monitor own({.psi = psi_path, .cgroup = s.dir, .soft_usage = 0.5, .hard_usage = 0.7});
  s.write("memory.max", "1000\n");
  s.write("memory.current", "600\n");
  CHECK(own.poll() == pressure::soft);
}

TEST_CASE("a file that cannot be read throws system_error, one not the kernel's runtime_error; the last poll stays") {
  scratch s;
  const std::string path = s.write("memory", psi(20, 0));
  sluice::pressure_monitor m({.psi = path});
  REQUIRE(m.poll() == pressure::soft);

  sluice::pressure_monitor missing({.psi = s.path("none")});
  try {
    (void)missing.poll();
    FAIL("no throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == std::errc::no_such_file_or_directory);
    CHECK(std::string(e.what()).find("none") != std::string::npos);  // names the file
  }
  CHECK(missing.level() == pressure::ok);

  s.write("memory", "not a pressure file\n");
  CHECK_THROWS_AS((void)m.poll(), std::runtime_error);
  CHECK(m.level() == pressure::soft);  // the last good poll's
  CHECK(m.reading().some_avg10 == doctest::Approx(20));

  // More than 64 KiB (no PSI or cgroup file is): not the kernel's, whatever its start says.
  s.write("memory", psi(0, 0) + std::string(70000, '\n'));
  CHECK_THROWS_AS((void)m.poll(), std::runtime_error);
  // A FIFO with no writer: the poll fails at once rather than waiting in open() for a writer.
  const std::string fifo = s.path("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  s.written.insert(fifo);
  sluice::pressure_monitor on_fifo({.psi = fifo});
  CHECK_THROWS_AS((void)on_fifo.poll(), std::runtime_error);  // nothing read: no "some" line
  // A path with a NUL: refused, not cut short at it.
  sluice::pressure_monitor nul({.psi = path + std::string(1, '\0') + "x"});
  try {
    (void)nul.poll();
    FAIL("no throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == std::errc::invalid_argument);
  }

  // A cgroup whose files are missing or odd.
  sluice::pressure_monitor no_cgroup({.psi = path, .cgroup = s.path("gone")});
  s.write("memory", psi(0, 0));
  CHECK_THROWS_AS((void)no_cgroup.poll(), std::system_error);
  s.write("memory.current", "12 bytes\n");
  s.write("memory.max", "100\n");
  sluice::pressure_monitor odd({.psi = path, .cgroup = s.dir});
  CHECK_THROWS_AS((void)odd.poll(), std::runtime_error);
  s.write("memory.current", "12\n");
  s.write("memory.max", "-1\n");
  CHECK_THROWS_AS((void)odd.poll(), std::runtime_error);
  s.write("memory.max", "100\n");
  CHECK(odd.poll() == pressure::ok);
}

TEST_CASE("thresholds clamped; NaN the default") {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const sluice::pressure_monitor m({.soft_some = nan, .hard_full = 250, .soft_usage = -3, .hard_usage = nan});
  CHECK(m.options().soft_some == 10);
  CHECK(m.options().hard_full == 100);
  CHECK(m.options().soft_usage == 0);
  CHECK(m.options().hard_usage == 0.95);
  CHECK(m.level_of({.usage = 0.0}) == pressure::soft);  // a usage threshold of 0: always soft with a limit
  CHECK(m.level_of({}) == pressure::ok);                // no usage read: the PSI alone
}

TEST_CASE("a gate and a pool follow the monitor") {
  scratch s;
  const std::string path = s.write("memory", psi(0, 0));
  sluice::pressure_monitor m({.psi = path});
  sluice::gate g{8};
  sluice::pool p{{.bound = 64}};
  for (int i = 0; i < 10; ++i) p.retire(sluice::buffer(1024));
  REQUIRE(p.retained() == 10);

  s.write("memory", psi(50, 20));  // hard: the cap steps down, the pool gives back what it holds
  for (int i = 0; i < 3; ++i) {
    const pressure level = m.poll();
    g.adjust(level, 8);
    if (level == pressure::hard) p.trim();
  }
  CHECK(g.cap() == 5);
  CHECK(p.retained() == 0);

  s.write("memory", psi(1, 0));  // ok again: the cap climbs back to its maximum, no further
  for (int i = 0; i < 5; ++i) g.adjust(m.poll(), 8);
  CHECK(g.cap() == 8);
}

TEST_CASE("this machine's own PSI file, where it has one") {
  if (::access("/proc/pressure/memory", R_OK) != 0) return;  // no PSI in this kernel (or no /proc)
  sluice::pressure_monitor m;
  const pressure level = m.poll();  // the kernel's text parses, whatever the level
  CHECK((level == pressure::ok || level == pressure::soft || level == pressure::hard));
  CHECK(m.reading().some_avg10 >= 0);
  CHECK(m.reading().some_avg10 <= 100);
}
