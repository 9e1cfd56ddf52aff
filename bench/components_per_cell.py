"""Wall time per cell, system time and minor page faults of whole
``nonzero`` calls on random 0.6 masks at 2048² and 4096², 4- and
8-connected, cell scans (``BLOCKS_8`` off), 1 and 2 strips, median of 5
(``getrusage`` of the whole process): is a 4096² call slower per cell
than a 2048² one, and is it fresh memory?

    taskset -c 0,1 .venv/bin/python bench/components_per_cell.py
"""

import resource
import statistics
import time

import numpy as np

from gridgraph.core.components import _cpu


def quiet(_fraction):
    return None


def main():
    _cpu.BLOCKS_8 = False
    for size in (2048, 4096):
        mask = (np.random.default_rng(2).random((size, size)) < 0.6).astype(
            np.uint8)
        for connectivity in (4, 8):
            for strips in (1, 2):
                wall, system, faults = [], [], []
                for _ in range(5):
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    start = time.perf_counter()
                    _cpu.label(mask, None, connectivity, "nonzero", quiet,
                               strips=strips)
                    wall.append(time.perf_counter() - start)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    system.append(after.ru_stime - before.ru_stime)
                    faults.append(after.ru_minflt - before.ru_minflt)
                median = statistics.median(wall)
                print(f"{size} {connectivity} strips {strips} wall "
                      f"{median * 1e3:.1f} ms, "
                      f"{median / size / size * 1e9:.2f} ns/cell, sys "
                      f"{statistics.median(system) * 1e3:.1f} ms, faults "
                      f"{statistics.median(faults):.0f}", flush=True)


if __name__ == "__main__":
    main()
