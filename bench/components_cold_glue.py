"""What the Python steps of a components call cost when the call follows
other work: a few numpy and kept-array steps of ``_cpu.label``, timed warm
(one after another) and each right after an OpenCV labelling of a 2048²
mask (optionally followed by a sleep of the given seconds), medians of 41.

    taskset -c 0,1 .venv/bin/python bench/components_cold_glue.py [0.002]
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

from gridgraph.core._common import index_dtype  # noqa: E402
from gridgraph.core.components import _cpu  # noqa: E402


def main():
    import cv2
    settle = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    surface = fractal_surface((2048, 2048), seed=2)
    mask = (surface > np.median(surface)).astype(np.uint8)
    whole = np.ones((1, 1), dtype=np.bool_)
    steps = {
        "kernel_ready": lambda: _cpu._kernel_ready(mask),
        "np.ones((1, 1))": lambda: np.ones((1, 1), dtype=np.bool_),
        "index_dtype": lambda: index_dtype(mask.size),
        "kept labels": lambda: _cpu._KEPT_LABELS.empty(mask.shape, np.int32),
        "strip bounds": lambda: _cpu._strip_bounds(
            2048, 2048, 2048, None, (mask, whole, False, True)),
    }
    for step in steps.values():
        step()
    for cold in (False, True):
        times = {name: [] for name in steps}
        for _ in range(41):
            for name, step in steps.items():
                if cold:
                    cv2.connectedComponentsWithAlgorithm(
                        mask, 8, cv2.CV_32S, cv2.CCL_SPAGHETTI)
                    if settle:
                        time.sleep(settle)
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
        print(("after OpenCV: " if cold else "warm: ") + ", ".join(
            f"{name} {statistics.median(value) * 1e6:.1f} us"
            for name, value in times.items()), flush=True)


if __name__ == "__main__":
    main()
