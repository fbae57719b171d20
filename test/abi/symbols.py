"""Whether libsluice.so still exports every function and object that the first build of its
soname exported: a program built against earlier headers of the same soname calls them.

Usage: symbols.py LIBRARY BASELINE_DIR INCLUDE_DIR [--write]
LIBRARY is the built libsluice.so.X.Y.Z; BASELINE_DIR holds libsluice.so.X.Y.symbols, the
mangled names of what the soname exports for programs, one a line, sorted: its strong
definitions in namespace sluice (nm's T, D, B and R), and the weak ones (W, V) of the class
templates that the installed headers under INCLUDE_DIR declare `extern template` (their members,
vtables and typeinfo, which programs take from the library). A name missing from the library
fails the test. If an installed header (include/sluice) declares it, programs may call it, and
its loss breaks the ABI: that takes a new soname (the project's minor version) and a new baseline.
If only the library's own headers (lib/) declare it, no program can call it: delete its line.
Names beyond the baseline are fine (new calls). A library whose soname has no baseline fails
too, naming the command that writes one (--write). Other weak definitions are left out: the
library emits those for inline functions that a program compiles for itself, and which of them
it emits depends on the optimizer.
The names are GCC's with libstdc++ (test/abi/meson.build runs it there alone).
"""
import os
import re
import subprocess
import sys

library, baseline_dir, include_dir = sys.argv[1], sys.argv[2], sys.argv[3]
# The class templates instantiated in the library for programs, as their names appear mangled.
instantiated = set()
for folder, _, files in os.walk(include_dir):
    for name in files:
        with open(os.path.join(folder, name)) as header:
            instantiated |= {f"{len(t)}{t}" for t in re.findall(r"extern\s+template\s+class\s+(\w+)\s*<", header.read())}
soname = re.sub(r"(\.so\.\d+\.\d+)\.\d+$", r"\1", os.path.basename(library))
baseline = os.path.join(baseline_dir, soname + ".symbols")
out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
exported = sorted({f[2] for f in (line.split() for line in out.splitlines())
                   if len(f) == 3 and "6sluice" in f[2] and
                   (f[1] in "TDBR" or (f[1] in "WV" and any(t in f[2] for t in instantiated)))})

if "--write" in sys.argv[4:]:
    with open(baseline, "w") as f:
        f.write("\n".join(exported) + "\n")
    print(f"wrote {baseline}: {len(exported)} names")
    sys.exit(0)
if not os.path.exists(baseline):
    print(f"FAILED: no baseline for {soname}; a new soname's first build writes it:\n"
          f"  python3 test/abi/symbols.py {library} test/abi include --write")
    sys.exit(1)
with open(baseline) as f:
    expected = [line.strip() for line in f if line.strip()]
missing = sorted(set(expected) - set(exported))
demangled = subprocess.run(["c++filt"], input="\n".join(missing), capture_output=True, text=True).stdout.split("\n")
for name, readable in zip(missing, demangled):
    print(f"FAILED: {soname} no longer exports {name} ({readable})")
print(f"{soname}: {len(expected) - len(missing)} of the baseline's {len(expected)} names exported, "
      f"{len(set(exported) - set(expected))} new")
if missing:
    print(f"Each name above that include/sluice declares breaks the ABI: give the project a new minor\n"
          f"version (a new soname) and write its baseline (--write). One that only lib/ declares no\n"
          f"program can call: delete its line from {baseline}.")
sys.exit(1 if missing else 0)
