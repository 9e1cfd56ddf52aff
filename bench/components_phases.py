"""Where a components call spends its wall time, by phase, at one strip and
at the strips the kernel picks for the CPUs in the affinity mask (as many
threads; ``strips=None``), beside OpenCV Spaghetti at one thread and at as
many, in one process (interleaved, medians).

Phases (wall, ``time.perf_counter`` around the calls ``_cpu.label`` makes):
first passes, seam merge, root numbering (``resolve_range``, strip by
strip, the second pass of numbered strips running beside it: the two
together ``resolve_then_second_passes``), and the rest of the call
(allocation, strip set-up, thread pool).  Every labelling
is checked against scipy's (``equal`` mode: scipy's labels of the mask and
of its complement, numbered by first cell in scan order); whether OpenCV's
labels are also scipy's (scan order) is printed.  Also a spin test: a compute-bound numba loop on one and
on two threads, to tell two cores from two hardware threads of one core.

    taskset -c 0,1 python3 bench/components_phases.py 2048 4096
"""

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np
import scipy.ndimage as ndi
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core.components import _cpu  # noqa: E402

PHASES = {}
PHASE_NAMES = ("_first_passes", "_merge_seams", "_resolve", "_second_passes",
               "_resolve_then_second_passes", "_resolve_range")


def _timed_phase(module, name):
    function = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        PHASES[name] = PHASES.get(name, 0.0) + time.perf_counter() - start
        return result
    setattr(module, name, timed)


@njit(nogil=True, cache=True)
def _spin(n):
    x = np.uint64(88172645463325252)
    for _ in range(n):  # xorshift: a dependent chain of integer ops
        x ^= x << np.uint64(13)
        x ^= x >> np.uint64(7)
        x ^= x << np.uint64(17)
    return x


def spin_test(n=200_000_000):
    _spin(1000)
    start = time.perf_counter()
    _spin(n)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=_spin, args=(n,)) for _ in range(2)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    two = time.perf_counter() - start
    return one, two


def quiet(_fraction):
    return None


def equal_mode_expected(mask, structure):
    """``equal`` mode's labels of a 0/1 mask from scipy: the components of
    the ones and of the zeros, numbered 1.. by their first cell in scan
    order (scipy numbers each kind in that order, so the two lists of
    first cells are merged)."""
    ones, _ = ndi.label(mask, structure)
    zeros, _ = ndi.label(mask == 0, structure)
    firsts = []
    for labels in (ones, zeros):
        flat = labels.ravel()
        cells = np.flatnonzero(flat)
        values = flat[cells]
        # a label's first cell: where the running maximum grows
        before = np.maximum.accumulate(np.concatenate(([0], values[:-1])))
        firsts.append(cells[values > before])
    order = np.argsort(np.concatenate(firsts), kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(1, order.size + 1)
    ones_final = np.concatenate(([0], rank[:firsts[0].size]))
    zeros_final = np.concatenate(([0], rank[firsts[0].size:]))
    return np.where(mask != 0, ones_final[ones], zeros_final[zeros])


def other_scan(mask, strips):
    """8-connected ``nonzero`` labels by the scan ``BLOCKS_8`` does not
    pick on this CPU (blocks or cells)."""
    saved = _cpu.BLOCKS_8
    _cpu.BLOCKS_8 = not saved
    try:
        return _cpu.label(mask, None, 8, "nonzero", quiet, strips=strips)[0]
    finally:
        _cpu.BLOCKS_8 = saved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--masks", nargs="+", default=["random 0.6",
                                                       "fractal"])
    args = parser.parse_args()
    import cv2
    for name in PHASE_NAMES + ("_label_blocks",):
        _timed_phase(_cpu, name)
    cpus = len(os.sched_getaffinity(0))
    one, two = spin_test()
    print(f"8-connected nonzero scan on this CPU: "
          f"{'blocks' if _cpu.BLOCKS_8 else 'cells'}", flush=True)
    print(f"affinity {sorted(os.sched_getaffinity(0))}; spin: one thread "
          f"{one:.3f} s, two threads {two:.3f} s (two cores: ~equal)",
          flush=True)
    for size in args.sizes:
        surface = fractal_surface((size, size), seed=2)
        masks = {"random 0.6": np.random.default_rng(2).random((size, size))
                 < 0.6, "fractal": surface > np.median(surface)}
        for mask_name in args.masks:
            mask = masks[mask_name].astype(np.uint8)
            for connectivity in (4, 8):
                structure = ndi.generate_binary_structure(
                    2, connectivity // 4)
                expected = ndi.label(mask, structure)[0]
                expected_equal = equal_mode_expected(mask, structure)
                calls = {}
                for strips in sorted({1, cpus}):
                    # as many threads as CPUs: the strips the kernel picks
                    # (strips=None: more strips than threads)
                    chosen = 1 if strips == 1 else None
                    for mode in ("nonzero", "equal"):
                        calls[f"ours {mode} {strips}"] = (
                            lambda mode=mode, chosen=chosen: _cpu.label(
                                mask, None, connectivity, mode, quiet,
                                strips=chosen)[0])
                    if connectivity == 8:
                        # the 8-connected scan this CPU does not pick
                        other = "cells" if _cpu.BLOCKS_8 else "blocks"
                        calls[f"ours nonzero {other} {strips}"] = (
                            lambda chosen=chosen: other_scan(
                                mask, chosen))

                    def opencv(threads=strips):
                        cv2.setNumThreads(threads)
                        return cv2.connectedComponentsWithAlgorithm(
                            mask, connectivity, cv2.CV_32S,
                            cv2.CCL_SPAGHETTI)[1]
                    calls[f"OpenCV {strips}"] = opencv
                for key, call in calls.items():
                    got = call()
                    if key.startswith("OpenCV"):
                        scan_order = np.array_equal(got, expected)
                    elif "equal" in key:
                        assert np.array_equal(got, expected_equal), key
                    else:
                        assert np.array_equal(got, expected), key
                times = {key: [] for key in calls}
                phases = {key: {} for key in calls}
                for round_ in range(args.repeat):
                    order = list(calls) if round_ % 2 == 0 else \
                        list(calls)[::-1]
                    for key in order:
                        PHASES.clear()
                        start = time.perf_counter()
                        calls[key]()
                        times[key].append(time.perf_counter() - start)
                        for phase, seconds in PHASES.items():
                            phases[key].setdefault(phase, []).append(seconds)
                picked = _cpu._strip_count(size, size, _cpu.STRIPS_PER_CPU,
                                           _cpu._MIN_CELLS_PER_STRIP)
                print(f"## {size}² {mask_name} {connectivity}-conn "
                      f"(OpenCV labels in scipy's scan order: {scan_order};"
                      f" ours at {cpus} threads: {picked} strips)",
                      flush=True)
                for key in calls:
                    total = statistics.median(times[key]) * 1e3
                    parts = {phase.strip("_"): statistics.median(v) * 1e3
                             for phase, v in phases[key].items()}
                    print(f"{key}: {total:.2f} ms  " + " ".join(
                        f"{phase} {ms:.2f}" for phase, ms in parts.items()),
                        flush=True)
                for strips in sorted({1, cpus}):
                    ours = statistics.median(times[f"ours nonzero {strips}"])
                    peer = statistics.median(times[f"OpenCV {strips}"])
                    others = [key for key in times if key.startswith(
                        "ours nonzero ") and key.endswith(f" {strips}")
                        and key.split()[2] in ("blocks", "cells")]
                    equal = statistics.median(times[f"ours equal {strips}"])
                    # per labelled cell: `equal` mode labels every cell,
                    # `nonzero` mode the foreground only
                    labelled = np.count_nonzero(mask) / mask.size
                    print(f"{strips} thread(s): OpenCV / ours {peer / ours:.2f};"
                          f" equal / nonzero time {equal / ours:.2f}; "
                          f"nonzero / equal per raster cell "
                          f"{ours / equal:.2f}, per labelled cell "
                          f"{ours / labelled / equal:.2f}"
                          + "".join(
                              f"; OpenCV / {key} "
                              f"{peer / statistics.median(times[key]):.2f}"
                              for key in others),
                          flush=True)


if __name__ == "__main__":
    main()
