"""Peak memory of the tiled path stays under the memory limit.

A 2048 x 2048 Float32 raster (a memmap) is processed with limits that the
in-memory runs exceed at least four times (measured in the same process);
tests/rss_probe.py runs them in a subprocess and reads the peak resident
set (VmHWM, reset before each run).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rasters import fractal_surface

HERE = os.path.dirname(os.path.abspath(__file__))
# (the in-memory cost distance needs ~159 MB here since its outputs are
# written over its search state: 36 MB keeps the four-times margin; the
# in-memory components need ~48 MB since their scan builds no valid mask,
# and the tiled run ~9.4 MB at tiles of 256: 11 MB keeps both margins)
LIMITS_MB = {"components": 11, "costdistance": 36, "mst": 40}


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                    reason="needs Linux /proc to reset and read the peak RSS")
def test_peak_rss_under_the_limit(tmp_path):
    raster = fractal_surface((2048, 2048), seed=1)
    # whole metres: realistic plateaus for the components
    np.save(tmp_path / "dem.npy", np.floor(raster))
    jobs = []
    for operation, limit in LIMITS_MB.items():
        jobs += [f"{operation}:{limit}", f"{operation}:0"]
    completed = subprocess.run(
        [sys.executable, os.path.join(HERE, "rss_probe.py"), "--warm-full",
         str(tmp_path / "dem.npy"), str(tmp_path / "out")] + jobs,
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    runs = [json.loads(line) for line in completed.stdout.splitlines()]
    raster_mb = raster.nbytes / 2**20
    for tiled_run, memory_run in zip(runs[::2], runs[1::2]):
        operation = tiled_run["operation"]
        limit = LIMITS_MB[operation]
        assert tiled_run["tiled"] and not memory_run["tiled"]
        # the in-memory run also holds the raster (loaded before its
        # baseline): it needs at least 4 times the limit
        in_memory_mb = memory_run["increase_mb"] + raster_mb
        assert in_memory_mb >= 4 * limit, (operation, in_memory_mb)
        assert tiled_run["increase_mb"] <= limit, (
            f"{operation}: peak RSS rose {tiled_run['increase_mb']:.1f} MB "
            f"with a {limit} MB limit")
        if operation == "components":
            assert tiled_run["count"] == memory_run["count"]
        if operation == "mst":
            assert tiled_run["total_weight"] == memory_run["total_weight"]
            assert tiled_run["edges"] == memory_run["edges"]


HEAP_PROBE = """
import resource, sys
import numpy as np
from gridgraph.core import tile_tasks

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def churn():  # a tile's temporaries: 4 MiB arrays made and freed
    before = faults()
    for _ in range(20):
        array = np.ones(1 << 19)
        del array
    return faults() - before

if tile_tasks._MALLOPT is None:
    print("no glibc")
    sys.exit()
tile_tasks.HEAP_KEPT_IN_BATCHES = False
with tile_tasks.heap_kept_for_tiles():  # switched off: no change
    off = churn()
tile_tasks.HEAP_KEPT_IN_BATCHES = True
outside = churn()
with tile_tasks.heap_kept_for_tiles():
    inside = churn()
print(off, outside, inside, churn())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="glibc's malloc")
def test_batches_reuse_freed_tile_arrays():
    """Under Dask's worker setting (MALLOC_TRIM_THRESHOLD_=65536) every
    4 MiB array is fresh pages (~500 faults each here: 10280 for 20);
    with tile_tasks.HEAP_KEPT_IN_BATCHES (on by default) freed arrays are
    reused inside a batch (tile_tasks.heap_kept_for_tiles; 482 faults: the
    first one's), and the setting is back afterwards."""
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    answer = subprocess.run([sys.executable, "-c", HEAP_PROBE], env=env,
                            capture_output=True, text=True, check=True,
                            cwd=HERE).stdout.split()
    if answer == ["no", "glibc"]:
        pytest.skip("not glibc")
    off, outside, inside, after = map(int, answer)
    assert off > 8 * 1024  # HEAP_KEPT_IN_BATCHES off: glibc left alone
    assert outside > 8 * 1024  # 20 arrays, each faulted in anew
    assert inside < 2 * 1024  # the first array's pages, then reused
    assert after > 8 * 1024  # the worker's own setting again
