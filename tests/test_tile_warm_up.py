"""A Dask worker's preflight warms its kernels up (the operations'
``warm_up``), so that no tile task compiles: a kernel left cold compiles
inside a timed task on every worker at once (the MST's hierarchy cost
1.6-2.4 s a worker that way, docs/benchmarks.md, Dask, eleventh session).

tests/tile_warm_up_probe.py runs each warm-up in a fresh process, then a
tiled run with many tiles, both modes or outputs, hierarchy levels and
seams, through a pool writing into a folder, and lists what the run still
compiled."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("operation, dtype, connectivity", [
    ("components", "uint8", 4), ("components", "float32", 8),
    ("mst", "float32", 8), ("mst", "float64", 4), ("mst", "int16", 8),
    ("costdistance", "float32", 8), ("costdistance", "float64", 16)])
def test_tile_tasks_compile_nothing_after_the_warm_up(operation, dtype,
                                                      connectivity):
    completed = subprocess.run(
        [sys.executable, os.path.join(HERE, "tile_warm_up_probe.py"),
         operation, dtype, str(connectivity)],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    compiled = json.loads(completed.stdout.splitlines()[-1])
    assert compiled == {}, (
        f"{operation}'s warm_up({dtype}, {connectivity}) leaves these "
        f"kernels to the tile tasks: {compiled}")
