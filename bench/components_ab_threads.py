"""Whole components calls of this checkout against an older one and OpenCV
Spaghetti, all on two threads, in one process: wall time, interleaved per
round (order reversed every other round), median of the rounds; the
2048² (or the given size) fractal and random 0.6 masks of
``bench/cpu.py``, 8- and 4-connected, ``nonzero`` mode (or the mode
given third; OpenCV labels the non-zero cells whatever the mode), in
the strips the kernel picks (or as many as given fourth: 1 times one
thread's work).  The
two checkouts' labels are checked to be identical.  (``components_ab.py``
times one strip's thread time instead.)

The older checkout is imported as ``gridgraph_old``: put a folder holding
that name (a checkout made with ``git archive``) on PYTHONPATH.

    PYTHONPATH=/tmp/cpu-old taskset -c 0,1 .venv/bin/python \\
        bench/components_ab_threads.py 2048 41 [equal [1]]
"""

import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core.components import _cpu as new  # noqa: E402


def quiet(_fraction):
    return None


def main():
    import cv2
    import gridgraph_old.core.components._cpu as old
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 41
    mode = sys.argv[3] if len(sys.argv) > 3 else "nonzero"
    strips = int(sys.argv[4]) if len(sys.argv) > 4 else None
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": (surface > np.median(surface)).astype(np.uint8),
             "random 0.6": (np.random.default_rng(2).random((size, size))
                            < 0.6).astype(np.uint8)}
    for name, mask in masks.items():
        for connectivity in (8, 4):
            def opencv():
                cv2.setNumThreads(2)
                return cv2.connectedComponentsWithAlgorithm(
                    mask, connectivity, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
            calls = {
                "old": lambda: old.label(mask, None, connectivity,
                                         mode, quiet, strips)[0],
                "new": lambda: new.label(mask, None, connectivity,
                                         mode, quiet, strips)[0],
                "OpenCV": opencv}
            assert np.array_equal(calls["old"]().copy(), calls["new"]()), \
                (name, connectivity)
            for call in calls.values():
                call()
            times = {key: [] for key in calls}
            for index in range(rounds):
                order = list(calls) if index % 2 == 0 else list(calls)[::-1]
                for key in order:
                    start = time.perf_counter()
                    calls[key]()
                    times[key].append(time.perf_counter() - start)
            ms = {key: statistics.median(value) * 1e3
                  for key, value in times.items()}
            print(f"{size} {name} {connectivity}-conn {mode}, "
                  f"strips {strips or 'auto'}: "
                  f"old {ms['old']:.3f} new {ms['new']:.3f} "
                  f"OpenCV {ms['OpenCV']:.3f} ms; "
                  f"OpenCV/old {ms['OpenCV'] / ms['old']:.2f} "
                  f"OpenCV/new {ms['OpenCV'] / ms['new']:.2f}", flush=True)


if __name__ == "__main__":
    main()
