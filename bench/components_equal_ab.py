"""``equal`` against ``nonzero`` mode, this checkout against an older one
(imported as ``gridgraph_old``: put a folder holding that name, a link to
the other checkout, first on PYTHONPATH), in one process: wall time of
whole ``label`` calls at the strips the kernel picks (``strips=None``: the
CPUs of the affinity mask), interleaved per round (order reversed every
other round), medians; with the first-pass and second-pass phases
(``_first_passes``, ``_resolve_then_second_passes``).  Every labelling
is checked against the old checkout's.

    PYTHONPATH=/tmp/pkg-ab taskset -c 0,1 .venv/bin/python \
        bench/components_equal_ab.py 2048 4096 --repeat 7
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core.components import _cpu as new  # noqa: E402

PHASES = {}
PHASE_NAMES = ("_first_passes", "_merge_seams", "_resolve_then_second_passes")


def _timed_phase(module, tag, name):
    function = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        key = (tag, name)
        PHASES[key] = PHASES.get(key, 0.0) + time.perf_counter() - start
        return result
    setattr(module, name, timed)


def quiet(_fraction):
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--masks", nargs="+", default=["random", "fractal"])
    parser.add_argument("--connectivity", type=int, nargs="+",
                        default=[4, 8])
    parser.add_argument("--strips", type=int, default=None)
    parser.add_argument("--thread-time", action="store_true",
                        help="the calling thread's CPU time rather than "
                        "wall time (with --strips 1: less sensitive to "
                        "other load on the box)")
    args = parser.parse_args()
    clock = time.thread_time if args.thread_time else time.perf_counter
    import gridgraph_old.core.components._cpu as old
    versions = (("new", new), ("old", old))
    for tag, module in versions:
        for name in PHASE_NAMES:
            _timed_phase(module, tag, name)
    print("affinity", sorted(os.sched_getaffinity(0)), "strips",
          args.strips, "clock", clock.__name__, "load", os.getloadavg(),
          flush=True)
    rows = []
    for size in args.sizes:
        surface = fractal_surface((size, size), seed=2)
        masks = {"random": np.random.default_rng(2).random((size, size))
                 < 0.6, "fractal": surface > np.median(surface)}
        for mask_name in args.masks:
            mask = masks[mask_name].astype(np.uint8)
            for connectivity in args.connectivity:
                calls = {}
                for tag, module in versions:
                    for mode in ("nonzero", "equal"):
                        calls[(tag, mode)] = (
                            lambda module=module, mode=mode: module.label(
                                mask, None, connectivity, mode, quiet,
                                strips=args.strips)[0])
                for mode in ("nonzero", "equal"):
                    assert np.array_equal(calls[("new", mode)](),
                                          calls[("old", mode)]()), mode
                times = {key: [] for key in calls}
                phases = {key: {} for key in calls}
                for round_ in range(args.repeat):
                    order = list(calls) if round_ % 2 == 0 else \
                        list(calls)[::-1]
                    for key in order:
                        PHASES.clear()
                        start = clock()
                        calls[key]()
                        times[key].append(clock() - start)
                        for (_, phase), seconds in PHASES.items():
                            phases[key].setdefault(phase, []).append(seconds)
                med = {key: statistics.median(v) * 1e3
                       for key, v in times.items()}
                print(f"## {size}² {mask_name} {connectivity}-conn",
                      flush=True)
                for key in calls:
                    parts = " ".join(
                        f"{phase.strip('_')[:12]} "
                        f"{statistics.median(v) * 1e3:.2f}"
                        for phase, v in phases[key].items())
                    print(f"  {key[0]} {key[1]:8s} {med[key]:8.2f} ms  "
                          f"[{parts}]", flush=True)
                rows.append((size, mask_name, connectivity,
                             med[("old", "equal")], med[("new", "equal")],
                             med[("old", "nonzero")],
                             med[("new", "nonzero")]))
    print("load", os.getloadavg())
    print("\n| size | mask | conn | equal old | equal new | nonzero old |"
          " nonzero new | nz/eq old | nz/eq new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, mask_name, connectivity, eo, en, no, nn in rows:
        print(f"| {size}² | {mask_name} | {connectivity} | {eo:.2f} | "
              f"{en:.2f} | {no:.2f} | {nn:.2f} | {no / eo:.2f} | "
              f"{nn / en:.2f} |")


if __name__ == "__main__":
    main()
