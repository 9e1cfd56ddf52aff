"""Whole components calls of an older checkout (``gridgraph_old`` on
PYTHONPATH, made with ``git archive``) against this one, by one compiled
call a thread (``_cpu_team``, "team") and by kernel calls from Python
(``TEAM_MAX_CELLS`` 0, "chunked"), ``nonzero`` mode, two threads; the
three in a shuffled order each round, each call right after an OpenCV
Spaghetti call (as in a benchmark against it); medians.  Which module
allocates its kept arrays first changes random masks' times (the first
one's union-find array is the faster): ``fwd`` warms the old one up
first, ``rev`` this one.  Labels of the three are checked equal.

    PYTHONPATH=/tmp/cpu-old taskset -c 0,1 .venv/bin/python \
        bench/components_ab_team.py 2048 41 fwd fractal,random
"""
import os, sys, time, statistics, random
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from rasters import fractal_surface
from gridgraph.core.components import _cpu as new, _cpu_team
import gridgraph_old.core.components._cpu as old
import cv2
cv2.setNumThreads(2)
size = int(sys.argv[1]); rounds = int(sys.argv[2]); reverse = sys.argv[3] == "rev"
s = fractal_surface((size, size), seed=2)
masks = {"fractal": (s > np.median(s)).astype(np.uint8),
         "random": (np.random.default_rng(2).random((size, size)) < 0.6).astype(np.uint8)}
q = lambda f: None
for name in sys.argv[4].split(","):
    mask = masks[name]
    for conn in (8, 4):
        def team_with(maxc):
            def f():
                _cpu_team.TEAM_MAX_CELLS = maxc
                return new.label(mask, None, conn, "nonzero", q)[0]
            return f
        cv = lambda: cv2.connectedComponentsWithAlgorithm(mask, conn, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
        calls = {"old": lambda: old.label(mask, None, conn, "nonzero", q)[0],
                 "team": team_with(2**25), "chunked": team_with(0)}
        a = calls["old"]().copy(); b = calls["team"]().copy(); c = calls["chunked"]()
        assert (a == b).all() and (a == c).all()
        for c in (list(calls.values())[::-1] if reverse else calls.values()): c(); c()
        t = {k: [] for k in calls}; tc = []
        rng = random.Random(0)
        for r in range(rounds):
            order = list(calls); rng.shuffle(order)
            for k in order:
                x = time.perf_counter(); cv(); tc.append(time.perf_counter() - x)
                x = time.perf_counter(); calls[k](); t[k].append(time.perf_counter() - x)
        m = {k: statistics.median(v) * 1e3 for k, v in t.items()}; mc = statistics.median(tc) * 1e3
        print(f"{size} {name} {conn}-conn {'new-first' if reverse else 'old-first'}: " +
              " ".join(f"{k} {v:.3f}" for k, v in m.items()) + f" OpenCV {mc:.3f} | team/old {m['team']/m['old']:.3f} team/chunked {m['team']/m['chunked']:.3f} OpenCV/team {mc/m['team']:.2f} OpenCV/old {mc/m['old']:.2f}", flush=True)
