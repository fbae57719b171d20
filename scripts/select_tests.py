"""Picks a mode's tests from a configured Meson build folder, for scripts/test.sh.

Usage: select_tests.py BUILD SUITES [SKIP]
SUITES and SKIP are comma-separated: the suites to run (test/meson.build gives each test one),
and tests to leave out of them by name. Prints two lines: the tests' names, then the Ninja
targets they need, so that a mode builds only what it runs. meson test runs the tests in the
order named: those that run alone (is_parallel : false) first, one by one, then the others side
by side, the costliest (the highest priority in their meson.build) first, so that the last to
start are short and the side-by-side runs end together.
"""
import json
import os
import subprocess
import sys

build, suites = sys.argv[1], set(sys.argv[2].split(","))
skip = set(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else set()


def introspect(what):
    out = subprocess.run(["meson", "introspect", f"--{what}", build], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


# Meson names a suite "<project>:<suite>" as well as "<suite>"; the project's own name alone is
# every test's.
tests = [t for t in introspect("tests")
         if t["name"] not in skip and suites & {s.split(":")[-1] for s in t["suite"]}]
tests.sort(key=lambda t: (t["is_parallel"], -t["priority"]))  # stable: else as defined
files = {t["id"]: t["filename"] for t in introspect("targets")}
targets = sorted({f for t in tests for d in t["depends"] for f in files.get(d, [])})
prefix = os.path.realpath(build) + "/"
print(" ".join(t["name"] for t in tests))
print(" ".join(f[len(prefix):] if f.startswith(prefix) else f for f in targets))
