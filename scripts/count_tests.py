"""Sums the test cases that ran in the given Meson build folders and prints 'N passed, N failed'.

A doctest executable counts its own test cases; any other test counts as one (one declared
should_fail passes when it fails: Meson's EXPECTEDFAIL). A build folder
without a test log (its build failed) counts as one failure, so that it cannot pass silently. A
test that skips itself (exit status 77: python_seed without the seeds beside the checkout, dist
and python_wheel outside a git checkout) counts neither way; a line before the last names them.
"""
import json
import re
import sys

DOCTEST = re.compile(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed")

passed = failed = 0
skipped = []
for build in sys.argv[1:]:
    try:
        with open(f"{build}/meson-logs/testlog.json") as log:
            entries = [json.loads(line) for line in log if line.strip()]
    except FileNotFoundError:
        failed += 1
        continue
    for entry in entries:
        if entry["result"] == "SKIP":
            skipped.append(f"{entry['name']} ({build})")
            continue
        ok = entry["result"] in ("OK", "EXPECTEDFAIL")  # a should_fail test that failed as it must
        m = DOCTEST.search(entry.get("stdout", ""))
        if m and ok:
            passed += int(m.group(2))
            failed += int(m.group(3))
        elif m:
            passed += int(m.group(2))
            failed += max(int(m.group(3)), 1)
        else:
            passed += ok
            failed += not ok

if skipped:
    print(f"skipped, not counted: {', '.join(skipped)}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
