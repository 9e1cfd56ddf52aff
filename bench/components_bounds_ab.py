"""The run bounds of every row of a 2048² mask, this checkout against one
from before the 64-cell vector compares (6233549's parent, 670e75a,
whose bound functions still take a byte scratch row), imported as
``gridgraph_old``: ``nonzero`` and ``equal`` mode, with and without a
valid mask (95 % valid), the fractal and random 0.6 masks of
``bench/cpu.py``; thread time of one thread, 41 interleaved rounds,
medians.  Both checkouts' bounds are first checked to be identical on
3000 random rows (1-300 cells, 1-3 values, runs, valid masks).

    git archive 670e75a --prefix=gridgraph_old/ | tar -x -C /tmp/cpu-old
    PYTHONPATH=/tmp/cpu-old taskset -c 0 .venv/bin/python \\
        bench/components_bounds_ab.py
"""
import os
import sys
import time

import numpy as np
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core.components._cpu_runs import (  # noqa: E402
    _run_bounds_equal as new_equal, _run_bounds_nonzero as new_nonzero)
from gridgraph_old.core.components._cpu_runs import (  # noqa: E402
    _run_bounds_equal as old_equal, _run_bounds_nonzero as old_nonzero)


@njit(nogil=True)
def equal_old(values, valid, check_valid, runs, scratch):
    total = 0
    for row in range(values.shape[0]):
        total += old_equal(values[row], valid[row if check_valid else 0],
                           check_valid, runs, scratch)
    return total


@njit(nogil=True)
def equal_new(values, valid, check_valid, runs):
    total = 0
    for row in range(values.shape[0]):
        total += new_equal(values[row], valid[row if check_valid else 0],
                           check_valid, runs)
    return total


@njit(nogil=True)
def nonzero_old(values, valid, check_valid, runs, scratch, kept):
    total = 0
    for row in range(values.shape[0]):
        total += old_nonzero(values[row], valid[row if check_valid else 0],
                             check_valid, runs, scratch, kept)
    return total


@njit(nogil=True)
def nonzero_new(values, valid, check_valid, runs, kept):
    total = 0
    for row in range(values.shape[0]):
        total += new_nonzero(values[row], valid[row if check_valid else 0],
                             check_valid, runs, kept)
    return total


def same_bounds(rng, trials=3000):
    for trial in range(trials):
        cols = int(rng.integers(1, 300))
        values = rng.integers(0, int(rng.integers(1, 4)), cols).astype(
            np.uint8)
        if rng.random() < 0.3:
            values = np.repeat(values, rng.integers(1, 20, cols))[:cols]
        check_valid = bool(rng.random() < 0.5)
        inside = rng.random(cols) < 0.8 if check_valid else np.ones(
            1, np.bool_)
        scratch = np.empty(cols // 4 + 2, np.uint8)
        kept = np.empty((2, cols // 64 + 2), np.uint64)
        for old, new in (
                (lambda r: old_equal(values, inside, check_valid, r,
                                     scratch),
                 lambda r: new_equal(values, inside, check_valid, r)),
                (lambda r: old_nonzero(values, inside, check_valid, r,
                                       scratch, kept),
                 lambda r: new_nonzero(values, inside, check_valid, r,
                                       kept))):
            runs_old = np.full((cols + 9, 3), -1, np.int64)
            runs_new = runs_old.copy()
            count = old(runs_old)
            assert count == new(runs_new), trial
            assert np.array_equal(runs_old[:count, :2],
                                  runs_new[:count, :2]), trial
    print(f"same bounds on {trials} rows, both modes")


def thread_ms(call):
    start = time.thread_time()
    call()
    return (time.thread_time() - start) * 1e3


def main():
    rng = np.random.default_rng(1)
    same_bounds(rng)
    size, rounds = 2048, 41
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": (surface > np.median(surface)).astype(np.uint8),
             "random 0.6": (rng.random((size, size)) < 0.6).astype(
                 np.uint8)}
    runs = np.empty((size + 9, 3), np.int64)
    scratch = np.empty(size // 4 + 2, np.uint8)
    kept = np.empty((2, size // 64 + 2), np.uint64)
    for name, mask in masks.items():
        for check_valid in (False, True):
            valid = rng.random(mask.shape) < 0.95 if check_valid else \
                np.ones((1, 1), np.bool_)
            pairs = {
                "nonzero": (lambda: nonzero_old(mask, valid, check_valid,
                                                runs, scratch, kept),
                            lambda: nonzero_new(mask, valid, check_valid,
                                                runs, kept)),
                "equal": (lambda: equal_old(mask, valid, check_valid, runs,
                                            scratch),
                          lambda: equal_new(mask, valid, check_valid,
                                            runs))}
            for mode, (old, new) in pairs.items():
                assert old() == new()
                times = ([], [])
                for index in range(rounds):
                    order = (0, 1) if index % 2 == 0 else (1, 0)
                    for which in order:
                        times[which].append(thread_ms((old, new)[which]))
                print(f"{mode} {name} valid mask {check_valid}: old "
                      f"{np.median(times[0]):.3f} new "
                      f"{np.median(times[1]):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
