"""Wall time per cell, system time and minor page faults of whole
``nonzero`` calls on random 0.6 masks at 2048² and 4096², 4- and
8-connected, cell scans (``BLOCKS_8`` off), 1 and 2 strips, median of 5:
is a 4096² call slower per cell than a 2048² one, and is it fresh memory?

    taskset -c 0,1 .venv/bin/python bench/components_per_cell.py
"""
import sys, time, statistics, resource, numpy as np
from gridgraph.core.components import _cpu
_cpu.BLOCKS_8 = False
q = lambda f: None
for size in (2048, 4096):
    m = (np.random.default_rng(2).random((size, size)) < 0.6).astype(np.uint8)
    for c in (4, 8):
        for strips in (1, 2):
            t = []; st = []; fl = []
            for r in range(5):
                b = resource.getrusage(resource.RUSAGE_SELF)
                a = time.perf_counter(); _cpu.label(m, None, c, "nonzero", q, strips=strips); t.append(time.perf_counter() - a)
                e = resource.getrusage(resource.RUSAGE_SELF)
                st.append(e.ru_stime - b.ru_stime); fl.append(e.ru_minflt - b.ru_minflt)
            w = statistics.median(t)
            print(size, c, "strips", strips, f"wall {w*1e3:.1f} ms, {w/size/size*1e9:.2f} ns/cell, sys {statistics.median(st)*1e3:.1f} ms, faults {statistics.median(fl):.0f}", flush=True)
