"""Components scans per thread: ours against OpenCV Spaghetti with one
thread, and against an older checkout of GridGraph, in one process.

Thread CPU time (``time.thread_time``: what a loaded machine distorts
least), interleaved per round, median of --repeat; ``_cpu.label`` with one
strip; 8-connected ``nonzero`` mode also by blocks and by cells (whichever
``BLOCKS_8`` picks on this CPU is "ours").  Every labelling is checked:
ours and the older one equal scipy's, ours equals the older one in
``equal`` mode.  "ours general": ``nonzero`` mode by the general cell
scan (``TIGHT_4``/``TIGHT_8`` off).  The older checkout is imported as ``gridgraph_old``: put a
folder holding a link ``gridgraph_old`` -> that checkout on PYTHONPATH.

    PYTHONPATH=/tmp/old .venv/bin/python bench/components_one_thread.py 2048 4096
"""

import argparse
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

from gridgraph.core.components import _cpu  # noqa: E402


def quiet(_fraction):
    return None


def ours(mask, connectivity, mode, blocks=None, tight=True):
    saved = _cpu.BLOCKS_8, _cpu.TIGHT_4, _cpu.TIGHT_8
    if blocks is not None:
        _cpu.BLOCKS_8 = blocks
    _cpu.TIGHT_4 = _cpu.TIGHT_8 = tight
    try:
        return _cpu.label(mask, None, connectivity, mode, quiet, strips=1)[0]
    finally:
        _cpu.BLOCKS_8, _cpu.TIGHT_4, _cpu.TIGHT_8 = saved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    import cv2
    cv2.setNumThreads(1)
    try:
        import gridgraph_old.core.components._cpu as old_cpu
    except ImportError:
        old_cpu = None
    print("load average at the start", os.getloadavg())
    for size in args.sizes:
        surface = fractal_surface((size, size), seed=2)
        masks = {"random 0.6": np.random.default_rng(2).random((size, size))
                 < 0.6, "fractal": surface > np.median(surface)}
        for name, mask in masks.items():
            mask = mask.astype(np.uint8)
            for connectivity in (4, 8):
                calls = {
                    "ours": lambda: ours(mask, connectivity, "nonzero"),
                    "OpenCV": lambda: cv2.connectedComponentsWithAlgorithm(
                        mask, connectivity, cv2.CV_32S,
                        cv2.CCL_SPAGHETTI)[1],
                    "ours equal": lambda: ours(mask, connectivity, "equal"),
                    # nonzero mode by the general cell scan, not its own
                    "ours general": lambda: ours(mask, connectivity,
                                                 "nonzero", False, False)}
                if old_cpu is not None:
                    calls["before"] = lambda: old_cpu.label(
                        mask, None, connectivity, "nonzero", quiet,
                        strips=1)[0]
                    calls["before equal"] = lambda: old_cpu.label(
                        mask, None, connectivity, "equal", quiet,
                        strips=1)[0]
                if connectivity == 8:
                    calls["ours blocks"] = lambda: ours(mask, 8, "nonzero",
                                                        True)
                    calls["ours cells"] = lambda: ours(mask, 8, "nonzero",
                                                       False)
                    calls["ours cells general"] = lambda: ours(
                        mask, 8, "nonzero", False, False)
                expected = ndi.label(mask, ndi.generate_binary_structure(
                    2, connectivity // 4))[0]
                for key in calls:
                    if key in ("OpenCV", "ours equal", "before equal"):
                        continue
                    assert np.array_equal(calls[key](), expected), key
                if old_cpu is not None:
                    assert np.array_equal(calls["ours equal"](),
                                          calls["before equal"]())
                times = {key: [] for key in calls}
                for round_ in range(args.repeat):
                    keys = list(calls) if round_ % 2 == 0 else \
                        list(calls)[::-1]
                    for key in keys:
                        start = time.thread_time()
                        calls[key]()
                        times[key].append(time.thread_time() - start)
                median = {key: statistics.median(value) * 1e3
                          for key, value in times.items()}
                print(f"| {size}² {name} {connectivity}-conn | "
                      + " | ".join(f"{key} {value:.1f} ms"
                                   for key, value in median.items())
                      + f" | OpenCV / ours {median['OpenCV'] / median['ours']:.2f}"
                      f" | load {os.getloadavg()[0]:.1f} |", flush=True)
    print("load average at the end", os.getloadavg())


if __name__ == "__main__":
    main()
