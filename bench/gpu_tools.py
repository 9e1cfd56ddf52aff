"""Timing tools of the GPU benchmarks (bench/gpu.py, bench/gpu_tiled.py): wall times that
synchronise the device, a per-function clock, a sampling profiler of Python threads and a
progress callback that notes when each phase bound is passed."""

import os
import statistics
import sys
import time


def log(*parts):
    print(*parts, flush=True)


def wall(function):
    from numba import cuda
    cuda.synchronize()
    start = time.perf_counter()
    result = function()
    cuda.synchronize()
    return time.perf_counter() - start, result


def median_time(function, repeat):
    """Median wall time of ``repeat`` calls after one warm-up; (median, all, last result)."""
    _, result = wall(function)
    times = []
    for _ in range(repeat):
        elapsed, result = wall(function)
        times.append(elapsed)
    return statistics.median(times), times, result


class PhaseClock:
    """Wraps module-level functions called from Python so that each call adds its wall time
    to ``times[name]`` (kernels must be compiled before wrapping: numba resolves globals when
    it compiles)."""

    def __init__(self):
        self.times = {}
        self.saved = []

    def wrap(self, module, names):
        for name in names:
            original = getattr(module, name)

            def timed(*args, _original=original, _name=name, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.times[_name] = self.times.get(_name, 0.0) + time.perf_counter() - start
            self.saved.append((module, name, original))
            setattr(module, name, timed)

    def restore(self):
        for module, name, original in reversed(self.saved):
            setattr(module, name, original)
        self.saved = []


class ThreadSampler:
    """A sampling profiler of every Python thread (a poor man's py-spy):
    every ``interval`` seconds, the innermost frame of each busy thread that
    lies in gridgraph's core counts ``interval`` seconds for its function."""

    def __init__(self, interval=0.01):
        import threading
        self.interval = interval
        self.counts = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import threading
        me = threading.get_ident()
        while not self.stop.wait(self.interval):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = None
                while frame is not None:
                    path = frame.f_code.co_filename
                    if "/core/" in path and "gridgraph" in path or "/.dev-wt/" in path \
                            and "/core/" in path:
                        name = (f"{os.path.basename(os.path.dirname(path))}/"
                                f"{os.path.basename(path)}:{frame.f_code.co_name}")
                        break
                    frame = frame.f_back
                if name is None:
                    continue
                self.counts[name] = self.counts.get(name, 0.0) + self.interval

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def top(self, n=14):
        return dict(sorted(self.counts.items(), key=lambda kv: -kv[1])[:n])


class PhaseProgress:
    """A progress callback noting when the fraction first passes each bound."""

    def __init__(self, bounds):
        self.start = time.perf_counter()
        self.bounds = list(bounds)
        self.passed = {}

    def __call__(self, fraction):
        now = time.perf_counter() - self.start
        for bound in self.bounds:
            if fraction >= bound and bound not in self.passed:
                self.passed[bound] = now
        return True
