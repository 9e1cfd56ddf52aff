"""Run rows filled by vector stores against x86 string stores
(``components._cpu.STRING_STORE_FILLS``, ``_string_stores``): whole
components calls in one process, wall time, interleaved per round (order
reversed every other round), medians; OpenCV Spaghetti beside them (at
1 or 2 threads as ours; it labels the non-zero cells whatever the mode).  The
masks of ``bench/cpu.py`` (fractal, random 0.6), 8- and 4-connected,
``nonzero`` and ``equal`` mode, in the strips the kernel picks and in one
(one thread's work).  The labels of both fills are checked to be
identical.

    taskset -c 0,1 .venv/bin/python bench/components_fill.py 2048 41
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

from gridgraph.core.components import _cpu  # noqa: E402
from gridgraph.core.components._string_stores import cpu_vendor  # noqa: E402


def quiet(_fraction):
    return None


def main():
    import cv2
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 41
    print(f"CPU vendor {cpu_vendor()}; default string-store fills: "
          f"{_cpu.STRING_STORE_FILLS}", flush=True)
    surface = fractal_surface((size, size), seed=2)
    masks = {"fractal": (surface > np.median(surface)).astype(np.uint8),
             "random 0.6": (np.random.default_rng(2).random((size, size))
                            < 0.6).astype(np.uint8)}
    for name, mask in masks.items():
        for connectivity in (8, 4):
            for mode in ("nonzero", "equal"):
                for strips in (None, 1):
                    def fill(string_stores):
                        def call():
                            _cpu.STRING_STORE_FILLS = string_stores
                            return _cpu.label(mask, None, connectivity, mode,
                                              quiet, strips)[0]
                        return call

                    def opencv():
                        cv2.setNumThreads(1 if strips == 1 else 2)
                        return cv2.connectedComponentsWithAlgorithm(
                            mask, connectivity, cv2.CV_32S,
                            cv2.CCL_SPAGHETTI)[1]
                    calls = {"vector": fill(False), "string": fill(True),
                             "OpenCV": opencv}
                    assert np.array_equal(calls["vector"]().copy(),
                                          calls["string"]()), \
                        (name, connectivity, mode, strips)
                    for call in calls.values():
                        call()
                    times = {key: [] for key in calls}
                    for index in range(rounds):
                        order = list(calls) if index % 2 == 0 \
                            else list(calls)[::-1]
                        for key in order:
                            start = time.perf_counter()
                            calls[key]()
                            times[key].append(time.perf_counter() - start)
                    ms = {key: statistics.median(value) * 1e3
                          for key, value in times.items()}
                    print(f"{size} {name} {connectivity}-conn {mode}, "
                          f"strips {strips or 'auto'}: vector "
                          f"{ms['vector']:.3f} string {ms['string']:.3f} "
                          f"({ms['string'] / ms['vector'] - 1:+.1%}) "
                          f"OpenCV {ms['OpenCV']:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
