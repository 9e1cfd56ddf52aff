"""Every CPU kernel's whole-call time under this interpreter's numba: run
it with two environments in turns to see what a numba upgrade changes.

Median of --repeat after one warm-up call; one line per kernel, prefixed
with numba's version.  Each environment wants its own NUMBA_CACHE_DIR, and
one that lacks the plugin's .venv finds the package through a folder
holding a link ``gridgraph`` -> the checkout.  The twenty-fourth session
found ``equal`` mode 4-7x slower on numba 0.68 (a run-time flag in a hot
loop); this script checks the rest (docs/benchmarks.md, twenty-fifth
session).

    mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/gridgraph
    for turn in 1 2 3; do
      NUMBA_CACHE_DIR=/tmp/nbcache60 .venv/bin/python bench/kernel_times.py
      NUMBA_CACHE_DIR=/tmp/nbcache68 PYTHONPATH=/tmp/pkg /tmp/nb68/bin/python \\
          bench/kernel_times.py
    done
"""

import argparse
import os
import statistics
import sys
import time

import numba
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core import (connected_components, cost_distance,  # noqa: E402
                            minimum_spanning_tree, segments_by_threshold)

sys.path.insert(0, HERE)  # only while the sibling module loads
from search_modes import cost_search  # noqa: E402

sys.path.remove(HERE)


def kernels(size):
    """(name, call) of each kernel on its raster of ``size``²."""
    cost = fractal_surface((size, size), seed=1).astype(np.float64)
    values = fractal_surface((size, size), seed=3)
    classes = (values // 2).astype(np.int32)
    random = (np.random.default_rng(5).random((size, size)) < 0.6).astype(
        np.uint8)
    source = [(size // 2, size // 2)]

    def costs(connectivity):
        return cost_distance(cost, source, connectivity=connectivity,
                             backend="cpu").accumulated

    def heap_search():
        with cost_search("heap"):
            return costs(8)

    def tree(connectivity, weight, edges):
        return minimum_spanning_tree(values, connectivity=connectivity,
                                     weight=weight, backend="cpu",
                                     edges=edges).total_weight

    def components(raster, connectivity, mode):
        return connected_components(raster, connectivity=connectivity,
                                    mode=mode, backend="cpu").count

    return [
        ("cost distance 8-conn (default search)", lambda: costs(8)),
        ("cost distance 8-conn (heap search)", heap_search),
        ("cost distance 4-conn (default search)", lambda: costs(4)),
        ("MST max 4-conn, no edges", lambda: tree(4, "max", False)),
        ("MST max 8-conn, edges", lambda: tree(8, "max", True)),
        ("MST absdiff 4-conn, edges", lambda: tree(4, "absdiff", True)),
        ("segments absdiff <= 2, 4-conn",
         lambda: segments_by_threshold(values, 2.0, connectivity=4,
                                       weight="absdiff")[1]),
        ("segments absdiff <= 2, 8-conn",
         lambda: segments_by_threshold(values, 2.0, connectivity=8,
                                       weight="absdiff")[1]),
        ("components nonzero 8-conn, random 0.6",
         lambda: components(random, 8, "nonzero")),
        ("components equal 4-conn, fractal classes",
         lambda: components(classes, 4, "equal")),
        ("components equal 8-conn, fractal classes",
         lambda: components(classes, 8, "equal")),
        ("components equal 4-conn, random 0.6",
         lambda: components(random, 4, "equal")),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--only", default="",
                        help="kernels whose name holds this text")
    args = parser.parse_args()
    # the default cost-distance search depends on the load
    # (costdistance._cpu.oversubscribed): print it
    print(f"numba {numba.__version__}  load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    for name, call in kernels(args.size):
        if args.only not in name:
            continue
        call()
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        print(f"numba {numba.__version__}  {args.size}²  {name:42s} "
              f"{1e3 * statistics.median(times):9.2f} ms", flush=True)


if __name__ == "__main__":
    main()
