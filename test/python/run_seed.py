"""Runs a seed's Python tests unchanged: the text after the seed file's first line (which names
the file it came from) is written to a scratch folder, and pytest runs it there with the
arguments given. Exits 77 (skipped) where the seed file is not.

    run_seed.py SEED_FILE PYTEST_ARGUMENT...
"""
import pathlib
import subprocess
import sys
import tempfile

seed = pathlib.Path(sys.argv[1])
if not seed.is_file():
    print(f"{seed}: not here: skipped")
    sys.exit(77)
name, text = seed.read_text().split("\n", 1)
with tempfile.TemporaryDirectory() as scratch:
    pathlib.Path(scratch, pathlib.Path(name.strip()).name).write_text(text)
    sys.exit(subprocess.call([sys.executable, *sys.argv[2:], scratch]))
