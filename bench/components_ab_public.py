"""The public ``connected_components`` of an older checkout
(``gridgraph_old`` on PYTHONPATH, made with ``git archive``) against this
one's, ``nonzero`` mode (or the mode given fifth), two threads, with
``backend="cpu"`` (as bench/cpu.py calls it) and with the default
``backend="auto"``; the four
in a shuffled order each round, each call right after an OpenCV Spaghetti
call (as in a benchmark against it); medians in ms.  What the public
function adds to the labelling (argument checks, backend, plan) is the
point: a call that follows other work pays each Python step 10-50 us
(bench/components_cold_glue.py).  ``fwd`` warms the old checkout up
first, ``rev`` this one (the first to allocate its kept arrays gets the
faster ones on some CPUs).  Labels of all four are checked equal.

    PYTHONPATH=/tmp/cpu-old taskset -c 0,1 .venv/bin/python \\
        bench/components_ab_public.py 2048 41 fwd fractal,random [equal]
"""
import os
import random
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core import connected_components as new  # noqa: E402
from gridgraph_old.core import connected_components as old  # noqa: E402


def main():
    import cv2
    cv2.setNumThreads(2)
    size, rounds = int(sys.argv[1]), int(sys.argv[2])
    reverse = sys.argv[3] == "rev"
    mode = sys.argv[5] if len(sys.argv) > 5 else "nonzero"
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": (surface > np.median(surface)).astype(np.uint8),
             "random": (np.random.default_rng(2).random((size, size))
                        < 0.6).astype(np.uint8)}
    for name in sys.argv[4].split(","):
        mask = masks[name]
        for conn in (8, 4):
            calls = {
                "old cpu": lambda: old(mask, conn, mode,
                                       backend="cpu").labels,
                "new cpu": lambda: new(mask, conn, mode,
                                       backend="cpu").labels,
                "old auto": lambda: old(mask, conn, mode).labels,
                "new auto": lambda: new(mask, conn, mode).labels}
            first = calls["old cpu"]().copy()
            for call in calls.values():
                assert (call() == first).all()
            for call in (list(calls.values())[::-1] if reverse
                         else calls.values()):
                call()
                call()
            times = {key: [] for key in calls}
            opencv = []
            shuffle = random.Random(0)
            for _ in range(rounds):
                order = list(calls)
                shuffle.shuffle(order)
                for key in order:
                    start = time.perf_counter()
                    cv2.connectedComponentsWithAlgorithm(
                        mask, conn, cv2.CV_32S, cv2.CCL_SPAGHETTI)
                    opencv.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    calls[key]()
                    times[key].append(time.perf_counter() - start)
            ms = {key: statistics.median(value) * 1e3
                  for key, value in times.items()}
            cv_ms = statistics.median(opencv) * 1e3
            print(f"{size} {name} {conn}-conn {mode} "
                  f"{'new-first' if reverse else 'old-first'}: "
                  + " ".join(f"{key} {value:.3f}" for key, value in ms.items())
                  + f" OpenCV {cv_ms:.3f} | new/old cpu "
                  f"{ms['new cpu'] / ms['old cpu']:.3f} auto "
                  f"{ms['new auto'] / ms['old auto']:.3f} | OpenCV/new cpu "
                  f"{cv_ms / ms['new cpu']:.2f} (old {cv_ms / ms['old cpu']:.2f})"
                  f" OpenCV/new auto {cv_ms / ms['new auto']:.2f} "
                  f"(old {cv_ms / ms['old auto']:.2f})", flush=True)


if __name__ == "__main__":
    main()
