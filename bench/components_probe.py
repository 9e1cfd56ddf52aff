"""Where a 2048² fractal mask's 8-connected ``nonzero`` labelling goes, in
one process (the row of issue 13's OpenCV table closest to 1.5x on the GPU
machine's Xeon):

- whole calls, interleaved (order reversed every other round), medians and
  quartiles: ours with the strips the kernel picks, with 2 strips and with
  one (one thread), ``equal`` mode, OpenCV Spaghetti at 2 and 1 threads
  (``cv2.setNumThreads`` before each call: switching its thread count
  slows OpenCV here, so ``bench/cpu.py``'s OpenCV column is the fair one);
- a timeline of the default call (medians over the rounds, ms): before the
  first pass, the first pass's wall and its jobs' summed time, the gap to
  the second pass, the second pass's wall and its jobs' time, the rest;
- one thread's first-pass pieces (thread time): the run bounds of every
  row, the bounds and the run lists kept, the whole first pass.

    taskset -c 0,1 python3 bench/components_probe.py 2048 41
"""
import sys, time, statistics, threading, os
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from rasters import fractal_surface
import cv2
from numba import njit
from gridgraph.core.components import _cpu, _cpu_pool
from gridgraph.core.components._cpu_runs import _run_bounds_nonzero, keep_runs
q = lambda f: None
size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 41
s = fractal_surface((size, size), seed=2); m = (s > np.median(s)).astype(np.uint8)
rows, cols = m.shape
def cv(threads):
    cv2.setNumThreads(threads)
    return cv2.connectedComponentsWithAlgorithm(m, 8, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
calls = {"ours auto": lambda: _cpu.label(m, None, 8, "nonzero", q)[0],
         "ours 2 strips": lambda: _cpu.label(m, None, 8, "nonzero", q, strips=2)[0],
         "ours 1 strip": lambda: _cpu.label(m, None, 8, "nonzero", q, strips=1)[0],
         "ours equal auto": lambda: _cpu.label(m, None, 8, "equal", q)[0],
         "OpenCV 2": lambda: cv(2), "OpenCV 1": lambda: cv(1)}
for c in calls.values(): c(); c()
t = {k: [] for k in calls}
for r in range(rounds):
    for k in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
        t0 = time.perf_counter(); calls[k](); t[k].append(time.perf_counter() - t0)
for k, v in t.items():
    print(f"{k}: median {statistics.median(v)*1e3:.2f} ms  (q1 {np.percentile(v,25)*1e3:.2f} q3 {np.percentile(v,75)*1e3:.2f})")
print("OpenCV 2 / ours auto %.2f, / ours 2 strips %.2f" % (statistics.median(t["OpenCV 2"]) / statistics.median(t["ours auto"]), statistics.median(t["OpenCV 2"]) / statistics.median(t["ours 2 strips"])))
# timeline of the default call
events = []
orig = _cpu_pool._run_jobs
def run_jobs(pool, jobs, progress, low, high, workers, lead=None, waits=None):
    def wrap(call, tag):
        def w():
            a = time.perf_counter(); call(); events.append((tag, threading.get_ident(), a, time.perf_counter()))
        return w
    jobs = [[wrap(c, f"{low:.1f}") for c in cs] for cs in jobs]
    a = time.perf_counter()
    r = orig(pool, jobs, progress, low, high, workers, lead, waits)
    events.append((f"run{low:.1f}", 0, a, time.perf_counter()))
    return r
_cpu._run_jobs = run_jobs
summary = {k: [] for k in ("total", "pre", "first wall", "first work", "gap", "second wall", "second work", "post")}
for i in range(rounds):
    events.clear()
    a = time.perf_counter(); _cpu.label(m, None, 8, "nonzero", q); b = time.perf_counter()
    r0 = [e for e in events if e[0] == "run0.0"][0]; r1 = [e for e in events if e[0] == "run0.7"][0]
    summary["total"].append(b - a); summary["pre"].append(r0[2] - a)
    summary["first wall"].append(r0[3] - r0[2]); summary["gap"].append(r1[2] - r0[3])
    summary["second wall"].append(r1[3] - r1[2]); summary["post"].append(b - r1[3])
    summary["first work"].append(sum(e[3] - e[2] for e in events if e[0] == "0.0"))
    summary["second work"].append(sum(e[3] - e[2] for e in events if e[0] == "0.7"))
print("timeline medians (ms): " + ", ".join(f"{k} {statistics.median(v)*1e3:.3f}" for k, v in summary.items()))
_cpu._run_jobs = orig
# one-thread first-pass pieces
@njit(nogil=True)
def bounds_all(m, buf, bk, labels, keep):
    inside = np.ones(1, np.bool_); t = 0
    for r in range(m.shape[0]):
        n = _run_bounds_nonzero(m[r], inside, False, buf, bk)
        if keep:
            keep_runs(labels[r], buf, n)
        t += n
    return t
labels = np.empty((rows, cols), np.int32); parent = np.empty(rows * cols + 1, np.int32)
run_rows = np.zeros(rows, np.bool_); sc = _cpu._row_scratch(cols, np.int32)
buf = np.empty((cols + 9, 3), np.int64); bk = np.empty((2, cols // 64 + 2), np.uint64); mask = np.ones((1, 1), np.bool_)
def tm(f, n=41):
    f(); ts = []
    for i in range(n):
        a = time.thread_time(); f(); ts.append(time.thread_time() - a)
    return statistics.median(ts) * 1e3
print("one thread (thread time, ms): bounds %.3f, bounds+keep %.3f, first pass %.3f" % (
    tm(lambda: bounds_all(m, buf, bk, labels, False)), tm(lambda: bounds_all(m, buf, bk, labels, True)),
    tm(lambda: _cpu._first_pass_nonzero_tight(m, mask, False, True, labels, parent, run_rows, 0, 0, rows, 1, *sc))))
