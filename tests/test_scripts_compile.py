"""Every script the project ships compiles.

The bench scripts and scripts/ are not imported by the other tests, so a
syntax error in one of them (it happened: an f-string split inside a format
spec in bench/dask.py) would otherwise reach the trunk unseen.
"""

import glob
import os
import py_compile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(
    glob.glob(os.path.join(ROOT, "bench", "*.py"))
    + glob.glob(os.path.join(ROOT, "scripts", "*.py")))


def test_there_are_scripts_to_check():
    assert any(path.endswith(os.path.join("bench", "cpu.py")) for path in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_script_compiles(path, tmp_path):
    py_compile.compile(path, cfile=str(tmp_path / "out.pyc"), doraise=True)
