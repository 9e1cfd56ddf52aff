"""``equal`` mode against the two ``nonzero`` labellings it stands for: on
a 0/1 mask, ``equal`` labels the components of the ones and of the zeros,
as ``nonzero`` mode on the mask and on its inverse together do.  Public
calls, ``backend="cpu"``, a numpy call between calls (as in a script),
medians in ms; the ratio is ``equal`` ÷ (``nonzero`` + ``nonzero`` of the
inverse).

    taskset -c 0,1 .venv/bin/python bench/components_equal_halves.py 2048 31
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

from gridgraph.core import connected_components  # noqa: E402


def main():
    size, rounds = int(sys.argv[1]), int(sys.argv[2])
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": (surface > np.median(surface)).astype(np.uint8),
             "random 0.6": (np.random.default_rng(2).random((size, size))
                            < 0.6).astype(np.uint8)}
    for name, mask in masks.items():
        inverse = (1 - mask).astype(np.uint8)
        for conn in (8, 4):
            calls = {
                "equal": lambda: connected_components(
                    mask, conn, "equal", backend="cpu"),
                "nonzero": lambda: connected_components(
                    mask, conn, "nonzero", backend="cpu"),
                "nonzero of the inverse": lambda: connected_components(
                    inverse, conn, "nonzero", backend="cpu")}
            equal = calls["equal"]()
            ones = calls["nonzero"]()
            zeros = calls["nonzero of the inverse"]()
            # the same components: on the ones (zeros), equal's labels and
            # nonzero's pair one to one, and the counts add up
            assert equal.count == ones.count + zeros.count
            for half, inside in ((ones, mask == 1), (zeros, mask == 0)):
                pairs = np.unique(equal.labels[inside].astype(np.int64)
                                  * (half.count + 1)
                                  + half.labels[inside])
                assert pairs.size == half.count == np.unique(
                    equal.labels[inside]).size
            for call in calls.values():
                call()
            times = {key: [] for key in calls}
            for _ in range(rounds):
                for key, call in calls.items():
                    mask.sum()
                    start = time.perf_counter()
                    call()
                    times[key].append(time.perf_counter() - start)
            ms = {key: statistics.median(value) * 1e3
                  for key, value in times.items()}
            print(f"{size}² {name} {conn}-conn: "
                  + ", ".join(f"{key} {value:.3f}" for key, value in ms.items())
                  + f" | equal ÷ (both nonzero) "
                  f"{ms['equal'] / (ms['nonzero'] + ms['nonzero of the inverse']):.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
