"""Whether the machine's CPUs slow each other down when busy together.

A VM's CPUs may be threads that its host runs on shared physical cores
(SMT siblings, or cores shared with other guests), and a core running alone
may clock higher than all of them busy at once.  Either caps a parallel
run's efficiency whatever the software does.  This measures, with numba
kernels compiled before forking, the seconds of three loops run by k
processes at once (started together at a barrier) against one alone:

- ``latency``: one dependent chain of xorshift steps (a core's clock;
  SMT siblings barely slow it);
- ``throughput``: eight independent chains of float multiply-adds the
  compiler vectorizes (a core's arithmetic units: SMT siblings share them,
  so a sibling busy with the same loop about halves it);
- ``stream``: copying a 64 MiB array (memory bandwidth).

Then, for ``--pairs``, the throughput loop pinned on CPU 0 and CPU j at
once, for every other CPU j: a pair that halves is two threads of one core.
Prints one JSON row per run (each process's seconds, their median against
the 1-process median) and writes them to ``--json``.

    python3 bench/cpu_sharing.py --procs 1 8 16 --pairs --json out.json
"""

import argparse
import json
import multiprocessing
import os
import statistics
import time

import numpy as np
from numba import njit

ROUNDS = 3  # the 1-process runs: the median of these


@njit(cache=False)
def latency(n):
    x = np.uint64(88172645463325252)
    for _ in range(n):
        x ^= x << np.uint64(13)
        x ^= x >> np.uint64(7)
        x ^= x << np.uint64(17)
    return x


@njit(cache=False, fastmath=True)
def throughput(n, values):
    acc = np.zeros(64, np.float64)
    for _ in range(n):
        for k in range(64):
            acc[k] = acc[k] * values[k] + 1.0
    return acc.sum()


def stream(n, source, target):
    for _ in range(n):
        np.copyto(target, source)


def _child(kind, steps, cpu, barrier, results):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    values = np.full(64, 0.999999)
    source = target = None
    if kind == "stream":
        source = np.ones(8 << 20)
        target = np.empty_like(source)
        np.copyto(target, source)  # pages faulted in before the clock
    barrier.wait()
    start = time.perf_counter()
    if kind == "latency":
        latency(steps)
    elif kind == "throughput":
        throughput(steps, values)
    else:
        stream(steps, source, target)
    results.put(time.perf_counter() - start)


def run(context, kind, steps, cpus):
    """Seconds of each of ``len(cpus)`` processes running ``kind`` at
    once (``cpus``: each one's CPU, None unpinned)."""
    barrier = context.Barrier(len(cpus))
    results = context.Queue()
    children = [context.Process(target=_child, args=(
        kind, steps, cpu, barrier, results)) for cpu in cpus]
    for child in children:
        child.start()
    seconds = sorted(results.get() for _ in children)
    for child in children:
        child.join()
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 8, 16])
    parser.add_argument("--kinds", nargs="+",
                        default=["latency", "throughput", "stream"])
    parser.add_argument("--pairs", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    # ~0.3-0.5 s a loop on a 3 GHz core
    steps = dict(latency=150_000_000, throughput=30_000_000, stream=40)
    latency(10)
    throughput(10, np.full(64, 0.5))
    context = multiprocessing.get_context("fork")
    rows = []
    cpus = sorted(os.sched_getaffinity(0))

    def record(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(dict(cpus=cpus, rows=rows), handle, indent=0)

    alone = {}
    for kind in args.kinds:
        for procs in args.procs:
            rounds = ROUNDS if procs == 1 else 1
            seconds = [s for _ in range(rounds)
                       for s in run(context, kind, steps[kind],
                                    [None] * procs)]
            median = statistics.median(seconds)
            if procs == 1:
                alone[kind] = median
            record(dict(kind=kind, procs=procs, seconds=[round(s, 4)
                                                          for s in seconds],
                        median=round(median, 4),
                        slowdown=round(median / alone[kind], 3)
                        if kind in alone else None))
    if args.pairs and len(cpus) > 1:
        if "throughput" not in alone:
            alone["throughput"] = statistics.median(
                s for _ in range(ROUNDS)
                for s in run(context, "throughput", steps["throughput"],
                             [cpus[0]]))
        for other in cpus[1:]:
            seconds = run(context, "throughput", steps["throughput"],
                          [cpus[0], other])
            record(dict(kind="pair", cpus=[cpus[0], other],
                        seconds=[round(s, 4) for s in seconds],
                        slowdown=round(max(seconds) / alone["throughput"],
                                       3)))


if __name__ == "__main__":
    main()
