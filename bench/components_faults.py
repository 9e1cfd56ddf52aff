"""How much of a components call is the kernel faulting in fresh memory:
wall, user and system time and minor page faults per call
(``getrusage``, whole process), ours at as many strips as CPUs in the
affinity mask, on random 0.6 masks, 4- and 8-connected, beside a call
that writes a fresh label image and nothing else (np.empty + fill: the
floor for the output alone).  Labels checked against scipy once.

    taskset -c 0,1 python3 bench/components_faults.py 2048 4096
"""

import argparse
import os
import resource
import statistics
import time

import numpy as np
import scipy.ndimage as ndi

from gridgraph.core.components import _cpu


def quiet(_fraction):
    return None


def measured(call, repeat):
    rows = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        call()
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        rows.append((wall, after.ru_utime - before.ru_utime,
                     after.ru_stime - before.ru_stime,
                     after.ru_minflt - before.ru_minflt))
    return [statistics.median(column) for column in zip(*rows)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    for size in args.sizes:
        mask = (np.random.default_rng(2).random((size, size)) < 0.6).astype(
            np.uint8)

        def fresh_labels():
            labels = np.empty((size, size), dtype=np.int32)
            labels.fill(1)
            return labels
        calls = {"fresh label image, filled": fresh_labels}
        for connectivity in (4, 8):
            expected = ndi.label(mask, ndi.generate_binary_structure(
                2, connectivity // 4))[0]
            got = _cpu.label(mask, None, connectivity, "nonzero", quiet,
                             strips=cpus)[0]
            assert np.array_equal(got, expected)
            calls[f"ours {connectivity}-conn, {cpus} strips"] = (
                lambda connectivity=connectivity: _cpu.label(
                    mask, None, connectivity, "nonzero", quiet,
                    strips=cpus))
        for name, call in calls.items():
            wall, user, system, faults = measured(call, args.repeat)
            print(f"{size}² {name}: wall {wall * 1e3:.1f} ms, user "
                  f"{user * 1e3:.1f} ms, system {system * 1e3:.1f} ms, "
                  f"{faults:.0f} minor faults", flush=True)


if __name__ == "__main__":
    main()
