"""Why a components call gains less than 2x from 2 strips: per strip, per
kernel call, wall start/stop, thread CPU time, system time and minor faults
(``time.thread_time``, ``getrusage(RUSAGE_THREAD)``), and the serial phases between, at 1, 2, 4
and 8 strips (more strips than threads: each thread takes the next strip
when done); at 1 and 2 strips also with the label image and the union-find array already
faulted in (kept from an earlier call: what first touch costs); and a spin
test of independent chains (throughput-bound, unlike the dependent chain
of ``components_phases.py``) on one and two threads, which slows down on
two hardware threads of one core.

    taskset -c 0,1 python3 bench/components_scaling.py 2048 4096
"""

import argparse
import resource
import statistics
import sys
import os
import threading
import time
import types

import numpy as np
import scipy.ndimage as ndi
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.append(HERE)

from rasters import fractal_surface  # noqa: E402

from gridgraph.core.components import _cpu  # noqa: E402
from components_phases import equal_mode_expected  # noqa: E402

EVENTS = []  # (name, thread, start, stop, user, system, faults)
PHASES = ("_first_passes", "_merge_seams", "_resolve", "_second_passes",
          "_resolve_then_second_passes", "unpack_rows", "_strip_bounds")
KERNELS = ("_first_pass_nonzero_tight", "_first_pass_equal_tight",
           "_second_pass", "_resolve_range")


def _usage():
    # thread CPU time (precise) in place of the tick-counted user time
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return time.thread_time(), usage.ru_stime, usage.ru_minflt


def _traced(name, function):
    def traced(*args, **kwargs):
        user, system, faults = _usage()
        start = time.perf_counter()
        result = function(*args, **kwargs)
        stop = time.perf_counter()
        user2, system2, faults2 = _usage()
        thread = "main" if threading.current_thread() is \
            threading.main_thread() else "pool"
        top = args[7] if name.startswith("_first_pass_") else None
        EVENTS.append((name, (thread, top), start, stop,
                       user2 - user, system2 - system, faults2 - faults))
        return result
    return traced


class _KeptBuffers:
    """Stands in for ``numpy`` in ``_cpu``: ``empty`` hands back buffers
    kept from an earlier call (already faulted in) for the label image and
    the union-find array."""

    def __init__(self):
        self.kept = {}
        self.keep = False

    def __getattr__(self, name):
        return getattr(np, name)

    def empty(self, shape, dtype=float, **kwargs):
        if not self.keep:
            return np.empty(shape, dtype=dtype, **kwargs)
        key = (shape if isinstance(shape, tuple) else (shape,),
               np.dtype(dtype))
        if np.prod(key[0]) < 2**20:
            return np.empty(shape, dtype=dtype, **kwargs)
        if key not in self.kept:
            buffer = np.empty(shape, dtype=dtype, **kwargs)
            buffer.fill(0)
            self.kept[key] = buffer
        return self.kept[key]


@njit(nogil=True, cache=True)
def _spin_wide(n):
    # eight independent xorshift chains: the core's integer ports busy
    a = np.uint64(1)
    b = np.uint64(2)
    c = np.uint64(3)
    d = np.uint64(4)
    e = np.uint64(5)
    f = np.uint64(6)
    g = np.uint64(7)
    h = np.uint64(8)
    s13 = np.uint64(13)
    s7 = np.uint64(7)
    for _ in range(n):
        a ^= a << s13
        b ^= b >> s7
        c ^= c << s13
        d ^= d >> s7
        e ^= e << s13
        f ^= f >> s7
        g ^= g << s13
        h ^= h >> s7
    return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h


def spin_test(n=100_000_000, cpus=None):
    """Seconds of the wide spin on one thread and on two at once (each
    pinned to one of ``cpus`` when given)."""
    _spin_wide(1000)

    def spin(cpu):
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # this thread only
        _spin_wide(n)
    start = time.perf_counter()
    spin(None)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=spin, args=(cpu,))
               for cpu in (cpus or (None, None))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return one, time.perf_counter() - start


def quiet(_fraction):
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cases", nargs="+",
                        default=["random:8:nonzero", "random:4:nonzero",
                                 "fractal:8:nonzero"])
    parser.add_argument("--strips", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="strip counts to time (kept buffers: 1 and 2)")
    parser.add_argument("--spin-pairs", nargs="*", default=[],
                        help="CPU pairs a,b to run the wide spin on, "
                        "one thread pinned to each")
    args = parser.parse_args()
    for pair in args.spin_pairs:
        cpus = tuple(int(cpu) for cpu in pair.split(","))
        saved = os.sched_getaffinity(0)
        one, two = spin_test(cpus=cpus)
        os.sched_setaffinity(0, saved)
        print(f"wide spin on CPUs {cpus}: one thread {one:.3f} s, one on "
              f"each {two:.3f} s", flush=True)
    if not args.sizes:
        return
    one, two = spin_test()
    print(f"affinity {sorted(os.sched_getaffinity(0))}; wide spin: one "
          f"thread {one:.3f} s, two threads {two:.3f} s (two cores: ~equal;"
          f" two hardware threads of one core: ~2x)", flush=True)
    # the cell scan for 8-connected random masks, as the Xeon picks
    _cpu.BLOCKS_8 = False
    shim = _KeptBuffers()
    for name in PHASES:
        setattr(_cpu, name, _traced(name, getattr(_cpu, name)))
    for name in KERNELS:
        setattr(_cpu, name, _traced(name, getattr(_cpu, name)))
    # label() alone sees the stand-in numpy (the jitted kernels need the
    # real one): a copy of it over the module's names, np replaced
    label = types.FunctionType(_cpu.label.__code__,
                               dict(vars(_cpu), np=shim), "label",
                               _cpu.label.__defaults__)
    for size in args.sizes:
        surface = fractal_surface((size, size), seed=2)
        masks = {"random": (np.random.default_rng(2).random((size, size))
                            < 0.6).astype(np.uint8),
                 "fractal": (surface > np.median(surface)).astype(np.uint8)}
        for case in args.cases:
            mask_name, connectivity, mode = case.split(":")
            connectivity = int(connectivity)
            mask = masks[mask_name]
            structure = ndi.generate_binary_structure(2, connectivity // 4)
            expected = ndi.label(mask, structure)[0] if mode == "nonzero" \
                else equal_mode_expected(mask, structure)
            variants = [(strips, False) for strips in args.strips] + [
                (strips, True) for strips in (1, 2)]
            samples = {variant: [] for variant in variants}
            for round_ in range(args.repeat + 1):
                order = variants if round_ % 2 else variants[::-1]
                for strips, keep in order:
                    shim.keep = keep
                    EVENTS.clear()
                    start = time.perf_counter()
                    got = label(mask, None, connectivity, mode, quiet,
                                strips=strips)[0]
                    wall = time.perf_counter() - start
                    assert np.array_equal(got, expected), (strips, keep)
                    del got
                    if round_:
                        samples[(strips, keep)].append(
                            (wall, start, list(EVENTS)))
            shim.kept.clear()
            print(f"## {size}² {mask_name} {connectivity}-conn {mode}",
                  flush=True)
            for (strips, keep), runs in samples.items():
                _report(strips, keep, runs)
            if mode == "nonzero":
                _opencv(mask, connectivity, args.repeat, samples)


def _opencv(mask, connectivity, repeat, ours):
    """OpenCV Spaghetti at 1 and 2 threads (after our runs, interleaved
    between themselves), and its ratios to our runs above."""
    try:
        import cv2
    except ImportError:
        return
    times = {1: [], 2: []}
    for round_ in range(repeat + 1):
        for threads in ((1, 2) if round_ % 2 else (2, 1)):
            cv2.setNumThreads(threads)
            start = time.perf_counter()
            cv2.connectedComponentsWithAlgorithm(mask, connectivity,
                                                 cv2.CV_32S,
                                                 cv2.CCL_SPAGHETTI)
            if round_:
                times[threads].append(time.perf_counter() - start)
    for threads, values in times.items():
        peer = statistics.median(values)
        ratios = ", ".join(
            f"{strips} strips {peer / statistics.median(r[0] for r in runs):.2f}"
            for (strips, keep), runs in ours.items()
            if not keep and (strips == 1) == (threads == 1))
        print(f"OpenCV {threads} thread(s): {peer * 1e3:.2f} ms; OpenCV / "
              f"ours: {ratios}", flush=True)


def _report(strips, keep, runs):
    """Medians over the runs: the call's wall; each serial phase; per
    thread of the first and second passes: wall from the phase start to
    its last kernel call's end, the thread's user / system time and
    faults summed over its calls."""
    walls = [run[0] for run in runs]
    rows = {}
    for wall, start, events in runs:
        phase_start = {}
        row = {}
        for name, thread, t0, t1, user, system, faults in events:
            if name in PHASES:
                row[name.strip("_")] = row.get(name.strip("_"), 0) + t1 - t0
                phase_start[name] = (t0, t1)
        for phase, kernel in (("_first_passes", "_first_pass"),
                              ("_second_passes", "_second_pass"),
                              ("_resolve_then_second_passes", "_second_pass"),
                              ("_resolve_then_second_passes",
                               "_resolve_range")):
            if phase not in phase_start:
                continue
            t0, t1 = phase_start[phase]
            threads = {}
            for name, (thread, top), k0, k1, user, system, faults in events:
                if not (t0 <= k0 <= t1) or name in PHASES or \
                        not name.startswith(kernel):
                    continue
                entry = threads.setdefault(thread, [0, 0, 0, 0, 0, set()])
                entry[5].add(top)
                entry[0] = max(entry[0], k1 - t0)
                entry[1] += user
                entry[2] += system
                entry[3] += faults
                entry[4] += k1 - k0
            for thread, entry in sorted(threads.items()):
                entry[5] = len(entry[5])
                for field, value in zip(("end", "cpu", "sys", "faults",
                                         "kernel", "strips"), entry):
                    key = f"{kernel.strip('_')[:7]}[{thread}].{field}"
                    row[key] = value
        row["rest"] = wall - sum(row.get(p.strip("_"), 0) for p in PHASES)
        for key, value in row.items():
            rows.setdefault(key, []).append(value)
    parts = []
    for key, values in rows.items():
        value = statistics.median(values)
        parts.append(f"{key} {value:.0f}" if key.endswith(("faults", "strips"))
                     else
                     f"{key} {value * 1e3:.2f}")
    print(f"{strips} strip(s){', kept buffers' if keep else ''}: "
          f"{statistics.median(walls) * 1e3:.2f} ms | " + "; ".join(parts),
          flush=True)


if __name__ == "__main__":
    main()
