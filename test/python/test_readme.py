"""The README's Python example runs as shown."""
import pathlib
import runpy
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_readmes_example_runs(tmp_path):
    example = subprocess.run([sys.executable, ROOT / "test" / "install" / "extract.py", ROOT / "README.md", "python"],
                             check=True, capture_output=True, text=True).stdout
    script = tmp_path / "example.py"
    script.write_text(example)
    runpy.run_path(str(script), run_name="__main__")
