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


def test_warm_up_without_a_writable_temporary_folder(monkeypatch):
    """The warm-up's scratch folder is an optimisation: a worker whose
    temporary folder cannot be made, or fills up, still passes it."""
    import tempfile

    import numpy as np

    from gridgraph.core import tile_io
    from gridgraph.core.components import tiled as components_tiled
    from gridgraph.core.errors import DiskFullError
    from gridgraph.core.mst import tiled as mst_tiled

    def refused(*arguments, **keywords):
        raise PermissionError(13, "Permission denied", "/tmp")

    with monkeypatch.context() as patch:
        patch.setattr(tempfile, "mkdtemp", refused)
        components_tiled.warm_up(np.float32)
        mst_tiled.warm_up(np.float32, 8)

    def full(self, *arguments, **keywords):
        raise DiskFullError("the folder /tmp is full")

    made = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*arguments, **keywords):
        made.append(real_mkdtemp(*arguments, **keywords))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(tile_io.NpySink, "__init__", full)
    components_tiled.warm_up(np.float32)
    assert made and not any(os.path.exists(folder) for folder in made)


def test_a_warm_up_error_other_than_the_folders_is_raised(monkeypatch):
    from gridgraph.core import tiling

    with pytest.raises(ValueError):
        with tiling.as_tile_tasks():
            raise ValueError("a bug, not the temporary folder")
