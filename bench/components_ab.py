"""Whole one-strip components calls of this checkout against one or two
older ones, and OpenCV Spaghetti on one thread, in one process: thread
CPU time (``time.thread_time``), interleaved per round (order reversed
every other round), median of the rounds; 2048² (or the given size)
fractal and random 0.6 masks, 4- and 8-connected, ``nonzero`` and
``equal`` mode.  ``nonzero`` labels are checked against scipy's, ``equal``
labels against the oldest checkout's.

The older checkouts are imported as ``gridgraph_old`` and (optional)
``gridgraph_mid``: put a folder holding those names (checkouts made with
``git archive``) on PYTHONPATH.

    PYTHONPATH=/tmp/cpu-old .venv/bin/python bench/components_ab.py 2048 11
"""

import os
import statistics
import sys
import time

import numpy as np
import scipy.ndimage as ndi

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
    try:
        import gridgraph_mid.core.components._cpu as mid
    except ImportError:
        mid = None
    cv2.setNumThreads(1)
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": surface > np.median(surface),
             "random 0.6": np.random.default_rng(2).random((size, size))
             < 0.6}
    versions = [("new", new)] + ([("mid", mid)] if mid else []) + [
        ("old", old)]
    print("load", os.getloadavg())
    for name, mask in masks.items():
        mask = mask.astype(np.uint8)
        for connectivity in (4, 8):
            expected = ndi.label(mask, ndi.generate_binary_structure(
                2, connectivity // 4))[0]
            calls = {}
            for tag, module in versions:
                for mode in ("nonzero", "equal"):
                    calls[f"{tag} {mode}"] = (
                        lambda module=module, mode=mode: module.label(
                            mask, None, connectivity, mode, quiet,
                            strips=1)[0])
            calls["OpenCV"] = lambda: cv2.connectedComponentsWithAlgorithm(
                mask, connectivity, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
            for key, call in calls.items():
                if "nonzero" in key:
                    assert np.array_equal(call(), expected), key
            for tag, _ in versions[:-1]:
                assert np.array_equal(calls[f"{tag} equal"](),
                                      calls["old equal"]())
            times = {key: [] for key in calls}
            for round_ in range(repeat):
                order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
                for key in order:
                    start = time.thread_time()
                    calls[key]()
                    times[key].append(time.thread_time() - start)
            median = {key: statistics.median(value) * 1e3
                      for key, value in times.items()}
            print(f"| {size}² {name} {connectivity}-conn | "
                  + " | ".join(f"{key} {value:.2f}"
                               for key, value in median.items())
                  + f" | OpenCV / new {median['OpenCV'] / median['new nonzero']:.2f}"
                  f" | load {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
