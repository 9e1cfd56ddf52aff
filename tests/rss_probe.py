"""Run one tiled operation on a memmapped raster and report its peak RSS.

Used by tests/test_tiled_memory.py (in a subprocess, so earlier tests do not
inflate the figures) and by bench/scale.py:

    python tests/rss_probe.py RASTER.npy OUT_DIR OPERATION:LIMIT_MB[:BACKEND] ...

with OPERATION one of components, costdistance, mst (a LIMIT_MB of 0 runs it
in memory, for comparison), and ``--warm-full`` anywhere to run each tiled
job once before measuring it (tests: numba may not have compiled yet what
it meets).  Prints one JSON line
per operation: the resident set before the run (after a warm-up that loads
every compiled kernel), the peak during it (VmHWM, reset before the run
through /proc/self/clear_refs), their difference and the seconds.
"""

import json
import os
import sys
import time

import numpy as np

# --warm-full: a tiled job runs once in full before it is measured
WARM_FULL = False


def status_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak():
    # "5" resets the peak resident set size (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def run(operation, raster, limit_mb, out_dir, backend="cpu", **options):
    from gridgraph.core import (connected_components, cost_distance,
                                minimum_spanning_tree)
    if operation == "components":
        return connected_components(raster, connectivity=8, mode="equal",
                                    memory_limit_mb=limit_mb, out_dir=out_dir,
                                    backend=backend, **options)
    if operation == "costdistance":
        rows, cols = raster.shape
        return cost_distance(raster, [(rows // 2, cols // 2)], connectivity=8,
                             memory_limit_mb=limit_mb, out_dir=out_dir,
                             backend=backend, **options)
    if operation == "mst":
        return minimum_spanning_tree(raster, connectivity=8, weight="max",
                                     memory_limit_mb=limit_mb, out_dir=out_dir,
                                     backend=backend, **options)
    raise SystemExit(f"unknown operation {operation!r}")


def measure(operation, raster, limit_mb, out_dir, backend="cpu"):
    """Peak resident set of one run, in MB above the resident set before."""
    os.makedirs(out_dir, exist_ok=True)
    warm_dir = os.path.join(out_dir, "warm-up")
    os.makedirs(warm_dir, exist_ok=True)
    if limit_mb and WARM_FULL:
        # the same run first: every kernel and array layout it meets is
        # compiled before the measured run, whatever ran before (a small
        # raster in small tiles can miss one)
        run(operation, raster, limit_mb, warm_dir, backend)
    else:
        small = np.ascontiguousarray(raster[:64, :64])
        run(operation, small, None, warm_dir, backend, tile_size=16)
        del small
    from gridgraph.core.tiling import release_free_memory
    release_free_memory()
    baseline = status_kb("VmRSS")
    reset_peak()
    start = time.perf_counter()
    result = run(operation, raster, limit_mb, out_dir, backend)
    seconds = time.perf_counter() - start
    peak = status_kb("VmHWM")
    summary = {"operation": operation, "shape": list(raster.shape),
               "limit_mb": limit_mb, "backend": backend,
               "baseline_mb": baseline / 1024,
               "peak_mb": peak / 1024, "increase_mb": (peak - baseline) / 1024,
               "seconds": seconds}
    if limit_mb:
        from gridgraph.core.components import tiled as components_tiled
        from gridgraph.core.costdistance import tiled as costdistance_tiled
        from gridgraph.core.mst import tiled as mst_tiled
        module = {"components": components_tiled,
                  "costdistance": costdistance_tiled, "mst": mst_tiled}
        plan = module[operation].plan(raster, 1, None, limit_mb, None)
        summary["tile_size"] = plan.grid.tile_size if plan else None
    if operation == "components":
        summary["count"] = result.count
        summary["tiled"] = isinstance(result.labels, np.memmap)
    elif operation == "costdistance":
        summary["tiled"] = isinstance(result.accumulated, np.memmap)
        summary["tile_solves"] = getattr(result, "tile_solves", None)
    else:
        summary["trees"] = result.trees
        summary["edges"] = int(result.edges.shape[0])
        summary["total_weight"] = result.total_weight
        summary["tiled"] = isinstance(result.edges, np.memmap)
    return summary


def main():
    global WARM_FULL
    arguments = sys.argv[1:]
    WARM_FULL = "--warm-full" in arguments
    arguments = [argument for argument in arguments
                 if argument != "--warm-full"]
    path, out_dir = arguments[:2]
    raster = np.load(path, mmap_mode="r")
    for job in arguments[2:]:
        operation, limit_mb, *backend = job.split(":")
        limit_mb = float(limit_mb)
        summary = measure(operation, raster if limit_mb else np.array(raster),
                          limit_mb or None, os.path.join(out_dir, operation),
                          backend[0] if backend else "cpu")
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
