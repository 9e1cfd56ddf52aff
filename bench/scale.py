"""Scale benchmarks of the tiled (out-of-core) path.

Builds synthetic fractal DEMs as .npy files (streamed, never whole in
memory), then runs each operation in a fresh process through
tests/rss_probe.py, which reports wall time and peak resident set (VmHWM)
above the process's resident set after a warm-up.  Prints a Markdown table;
--write appends it with the machine and date to docs/benchmarks.md.

    .venv/bin/python bench/scale.py --workdir /var/tmp/gg-scale --jobs neuse40 big
    .venv/bin/python bench/scale.py --jobs small          # a quick check

Jobs (the issue's targets):
  neuse40  17630 x 12555 = 221M cells (the grid MST thesis's 40-ft Neuse size),
           MEMORY_LIMIT_MB=4096: MST (weight max, 8-connected), components,
           cost distance.
  big      32768 x 32768 Float32 (4 GiB), MEMORY_LIMIT_MB=2048: all three.
  small    2048 x 2048 with small limits, for a smoke test.
  neuse10  70520 x 50220 = 3.5G cells Float32 (the 10-ft Neuse size, a
           14 GB .npy): MST only (weight max, 8-connected, no edge list),
           tiles in a thread pool (--workers), CUDA kernels per tile with
           --backend cuda, --memory-limit-mb (default 65536).  Run in this
           process; prints the wall time, peak RSS, total weight, trees,
           the phase times and the disk used.  --scale shrinks both sides
           (--scale 0.05: 3526 x 2511, a check on a small machine);
           --phase generate / run splits building the raster (kept in
           --workdir) from the run.

    python3 bench/scale.py --jobs neuse10 --workdir /var/tmp/gg --phase generate
    python3 bench/scale.py --jobs neuse10 --workdir /var/tmp/gg --phase run \
        --backend cuda --workers 12 --memory-limit-mb 65536

Plain ``python3 bench/scale.py`` works without QGIS or GDAL: when
``gridgraph`` is not importable, the repository root is made importable
under that name (a symbolic link in a temporary folder).
"""

import argparse
import atexit
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def _import_gridgraph():
    """Make ``import gridgraph`` work from a bare checkout (the GPU machine
    has no venv link): a link named gridgraph to the repository root."""
    try:
        import gridgraph  # noqa: F401
        return
    except ImportError:
        pass
    folder = tempfile.mkdtemp(prefix="gridgraph-import-")
    os.symlink(ROOT, os.path.join(folder, "gridgraph"))
    atexit.register(shutil.rmtree, folder, True)  # the link, not ROOT
    sys.path.insert(0, folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [folder] + [p for p in [os.environ.get("PYTHONPATH")] if p])


_import_gridgraph()

from numba import njit, prange  # noqa: E402

from rasters import fractal_surface  # noqa: E402

JOBS = {
    "neuse40": ((17630, 12555), [("mst", 4096), ("components", 4096),
                                 ("costdistance", 4096)]),
    "big": ((32768, 32768), [("mst", 2048), ("components", 2048),
                             ("costdistance", 2048)]),
    "small": ((2048, 2048), [("mst", 64), ("components", 12),
                             ("costdistance", 40)]),
}
NEUSE10_SHAPE = (70520, 50220)


@njit(cache=True, nogil=True, parallel=True)
def _dem_strip(coarse, detail, top, strip):
    """Rows top.. of the DEM: the coarse surface bilinearly upsampled 8x
    plus 0.05 x the periodic detail patch, clipped at 1, in float32.  The
    float64 operations are numpy's in the same order (no fused
    multiply-add), so the cells are those of the array version."""
    rows, cols = strip.shape
    period = detail.shape[0]
    for i in prange(rows):
        row_pos = (top + i) / 8.0
        r0 = np.int64(row_pos)
        rf = row_pos - r0
        for c in range(cols):
            col_pos = c / 8.0
            c0 = np.int64(col_pos)
            cf = col_pos - c0
            upper = coarse[r0, c0] * (1 - cf) + coarse[r0, c0 + 1] * cf
            lower = coarse[r0 + 1, c0] * (1 - cf) + coarse[r0 + 1, c0 + 1] * cf
            value = upper * (1 - rf) + lower * rf
            value += 0.05 * detail[(top + i) % period, c % period]
            strip[i, c] = np.float32(max(value, 1.0))


def synthetic_dem(path, shape, seed=0, strip_rows=1024):
    """A fractal DEM of any size, written strip by strip to a .npy file.

    Two octaves of spectral synthesis: a coarse surface at 1/8 resolution,
    bilinearly upsampled, plus a 2048 x 2048 periodic detail patch (FFT
    synthesis is periodic, so tiling it leaves no seams), scaled to about
    [1, 1000] metres in float32 (clipped at 1: costs must be >= 0 and the
    detail can dip a coarse low below zero).  The strips are computed on
    all cores (numba) while the previous strip is written.
    """
    from gridgraph.core.tiling import NpySink, Window
    rows, cols = shape
    coarse_shape = (rows // 8 + 2, cols // 8 + 2)
    coarse = fractal_surface(coarse_shape, seed=seed, beta=3.0,
                             dtype=np.float64)
    detail = fractal_surface((2048, 2048), seed=seed + 1, beta=2.4,
                             dtype=np.float64) - 500.0
    sink = NpySink(path, shape, np.float32)
    buffers = [np.empty((min(strip_rows, rows), cols), np.float32)
               for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(1) as writer:
        pending = None
        for k, top in enumerate(range(0, rows, strip_rows)):
            n = min(strip_rows, rows - top)
            strip = buffers[k % 2][:n]
            _dem_strip(coarse, detail, top, strip)
            if pending is not None:
                pending.result()
            pending = writer.submit(sink.write, Window(top, 0, n, cols),
                                    strip)
        if pending is not None:
            pending.result()
    sink.finish()
    return path


def integer_dem(dem):
    """The DEM rounded down to whole units (float32, made once beside it):
    costs whose path sums tie everywhere, for the cost distance's hops
    rounds (bench/dask.py's ``costdistanceties``, bench/gpu.py's
    ``--tiled-hops-ab-ties``)."""
    path = os.path.join(os.path.dirname(dem), "int" + os.path.basename(dem))
    if not os.path.exists(path):
        values = np.load(dem, mmap_mode="r")
        out = np.lib.format.open_memmap(path + ".partial", "w+", np.float32,
                                        values.shape)
        for top in range(0, values.shape[0], 1024):
            out[top:top + 1024] = np.floor(values[top:top + 1024])
        out.flush()
        del out
        os.replace(path + ".partial", path)
    return path


def run_probe(raster_path, out_dir, operation, limit_mb, backend="cpu"):
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "rss_probe.py"),
         raster_path, out_dir, f"{operation}:{limit_mb}:{backend}"],
        capture_output=True, text=True)
    if completed.returncode != 0:
        return {"operation": operation, "limit_mb": limit_mb,
                "error": completed.stderr.strip().splitlines()[-1:],
                "process_seconds": time.perf_counter() - start}
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    summary["process_seconds"] = time.perf_counter() - start
    return summary


# --------------------------------------------------------------------------
# neuse10: the 3.5G-cell MST in this process, tiles in threads


def _status_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak_rss():
    # "5" resets the peak resident set size (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _folder_bytes(folder):
    """Bytes the files under ``folder`` occupy on disk (sparse files count
    what is allocated)."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                pass
    return total


class PhaseClock:
    """A progress callback that times the tiled MST's phases (the spans
    its driver gives each phase with ``edges=False``), prints a line every
    5 % and tracks the least free space on the working folder's disk."""

    PHASES = ((0.5, "leaf tiles (MSF, compression)"),
              (0.6, "separators and merge hierarchy"),
              (0.7, "tile pieces and their rooting"),
              (1.0, "finish tiles (directions, sums)"))

    # the tiled cost distance's spans (accumulated cost only: no hops or
    # trees passes)
    COST_DISTANCE_PHASES = ((0.1, "survey (costs, band)"),
                            (0.7, "tile solves (propagation)"),
                            (1.0, "output tiles"))

    def __init__(self, folder, phases=None):
        if phases is not None:
            self.PHASES = phases
        self.folder = folder
        self.start = time.perf_counter()
        self.reached = {}
        self.next_print = 0.05
        self.least_free = shutil.disk_usage(folder).free

    def __call__(self, fraction):
        now = time.perf_counter() - self.start
        for boundary, name in self.PHASES:
            if fraction >= boundary - 1e-9 and name not in self.reached:
                self.reached[name] = now
        if fraction >= self.next_print:
            self.least_free = min(self.least_free,
                                  shutil.disk_usage(self.folder).free)
            print(f"  {fraction:6.1%} at {now:7.1f} s, RSS "
                  f"{_status_kb('VmRSS') / 2**20:.1f} GB", file=sys.stderr,
                  flush=True)
            while self.next_print <= fraction:
                self.next_print += 0.05
        return True

    def phase_seconds(self):
        times, last = {}, 0.0
        for _, name in self.PHASES:
            if name in self.reached:
                times[name] = round(self.reached[name] - last, 2)
                last = self.reached[name]
        return times


def neuse10_shape(scale):
    """The 10-ft Neuse raster's shape, both sides times ``scale``."""
    return tuple(max(64, int(round(side * scale))) for side in NEUSE10_SHAPE)


def generate_neuse10(workdir, shape):
    raster = os.path.join(workdir, f"dem-{shape[0]}x{shape[1]}.npy")
    if os.path.exists(raster):
        print(f"kept {raster} (delete it to build it again)", file=sys.stderr)
        return raster
    need = shape[0] * shape[1] * 4 + 2**20
    free = shutil.disk_usage(workdir).free
    if free < need:
        raise SystemExit(f"{workdir} has {free / 1e9:.1f} GB free; the raster "
                         f"needs {need / 1e9:.1f} GB")
    start = time.perf_counter()
    synthetic_dem(raster, shape)
    print(f"built {raster} ({shape[0] * shape[1] * 4 / 1e9:.2f} GB) in "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return raster


def run_neuse10(raster_path, workdir, backend, workers, limit_mb,
                tile_size=None, check=False, keep=False, operation="mst"):
    """MST (weight max, 8-connected, no edge list) or cost distance (the
    DEM as friction, one source at the centre, 8-connected, accumulated
    cost only) of the raster in ``raster_path``: tiled, with a pool of
    ``workers`` threads for the per-tile tasks.  Returns the summary (also
    printed as JSON)."""
    from gridgraph.core import cost_distance, minimum_spanning_tree
    from gridgraph.core.tiling import release_free_memory
    raster = np.load(raster_path, mmap_mode="r")
    rows, cols = raster.shape
    out_dir = os.path.join(workdir, "out-neuse10")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    if operation == "mst":
        from gridgraph.core.mst import tiled
        options = dict(connectivity=8, weight="max", backend=backend,
                       edges=False)

        def solve(values, **more):
            return minimum_spanning_tree(values, **options, **more)
    else:
        from gridgraph.core.costdistance import tiled

        def solve(values, **more):
            centre = [(values.shape[0] // 2, values.shape[1] // 2)]
            return cost_distance(values, centre, connectivity=8,
                                 backend=backend, outputs=("accumulated",),
                                 **more)

    # compile (or load from numba's cache) every kernel of the run, in
    # threads as the run uses them, on a crop
    start = time.perf_counter()
    crop = np.ascontiguousarray(raster[:128, :128])
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        solve(crop, tile_size=32, executor=pool)
    warm_seconds = time.perf_counter() - start
    del crop
    print(f"warm-up (kernels compiled or loaded) {warm_seconds:.1f} s",
          file=sys.stderr, flush=True)

    release_free_memory()
    baseline_kb = _status_kb("VmRSS")
    _reset_peak_rss()
    clock = PhaseClock(workdir, None if operation == "mst"
                       else PhaseClock.COST_DISTANCE_PHASES)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        plan = tiled.plan(raster, 1, tile_size, limit_mb, pool)
        if plan is None:
            raise SystemExit(
                f"{rows} x {cols} at {limit_mb} MB runs in memory, not "
                "tiled: give --tile-size (or a smaller --memory-limit-mb)")
        print(f"tiled: {plan.grid}, {workers} threads, limit {limit_mb} MB, "
              f"backend {backend}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        clock.start = start
        result = solve(raster, memory_limit_mb=limit_mb, tile_size=tile_size,
                       executor=pool, out_dir=out_dir, progress=clock)
        seconds = time.perf_counter() - start
    peak_kb = _status_kb("VmHWM")
    summary = {
        "operation": operation, "job": "neuse10", "shape": [rows, cols],
        "backend": backend, "workers": workers, "limit_mb": limit_mb,
        "tile_size": plan.grid.tile_size, "tiles": plan.grid.count,
        "seconds": round(seconds, 2), "warm_up_seconds": round(warm_seconds, 2),
        "phase_seconds": clock.phase_seconds(),
        "baseline_mb": baseline_kb / 1024, "peak_mb": peak_kb / 1024,
        "increase_mb": (peak_kb - baseline_kb) / 1024,
        "tiled": isinstance(getattr(result, "parent_direction", None)
                            if operation == "mst" else result.accumulated,
                            np.memmap),
        "output_gb": _folder_bytes(out_dir) / 1e9,
        "workdir_gb": _folder_bytes(workdir) / 1e9,
        "least_free_disk_gb": clock.least_free / 1e9,
    }
    if operation == "mst":
        summary.update(total_weight=result.total_weight, trees=result.trees)
    else:
        summary["tile_solves"] = result.tile_solves
        # a sample of rows: reading all 28 GB back would double the I/O
        sample = np.asarray(result.accumulated[::97])
        summary["accumulated_sample_max"] = float(np.nanmax(sample))
        summary["accumulated_sample_reached"] = float(
            np.mean(np.isfinite(sample)))
    if check:
        # the in-memory CPU run on the same raster: a check for small scales
        if operation == "mst":
            expected = minimum_spanning_tree(
                np.array(raster), connectivity=8, weight="max",
                backend="cpu")
            same = (expected.total_weight == result.total_weight
                    and expected.trees == result.trees
                    and np.array_equal(expected.parent_direction,
                                       result.parent_direction))
        else:
            centre = [(rows // 2, cols // 2)]
            expected = cost_distance(np.array(raster), centre,
                                     connectivity=8, backend="cpu",
                                     outputs=("accumulated",))
            same = np.array_equal(expected.accumulated, result.accumulated,
                                  equal_nan=True)
        summary["check"] = bool(same)
        if not summary["check"]:
            print(json.dumps(summary), flush=True)
            raise SystemExit("the tiled run differs from the in-memory run")
    del result
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    print(json.dumps(summary), flush=True)
    return summary


def table(results):
    lines = ["| raster | operation | backend | limit MB | wall s "
             "| peak RSS MB (above start) "
             "| within limit +10% | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for shape, r in results:
        raster = f"{shape[0]} x {shape[1]} ({shape[0] * shape[1] / 1e6:.0f}M cells)"
        if "error" in r:
            lines.append(f"| {raster} | {r['operation']} | - | {r['limit_mb']:g} | - | - "
                         f"| - | failed: {' '.join(r['error'])} |")
            continue
        ok = r["increase_mb"] <= 1.1 * r["limit_mb"]
        notes = [f"tiles of {r.get('tile_size')}"]
        if r.get("tile_solves"):
            notes.append(f"{r['tile_solves']} tile solves")
        if r.get("workers"):
            notes.append(f"{r['workers']} threads")
        if r["operation"] == "mst" and "edges" in r:
            notes.append(f"{r['edges']} edges, {r['trees']} tree(s)")
        elif r["operation"] == "mst":
            notes.append(f"no edge list, {r['trees']} tree(s), total weight "
                         f"{r['total_weight']!r}")
        if r.get("phase_seconds"):
            notes.append("phases " + ", ".join(
                f"{name} {value:.1f} s"
                for name, value in r["phase_seconds"].items()))
        if r["operation"] == "components":
            notes.append(f"{r['count']} components")
        notes.append(f"process total {r['baseline_mb']:.0f}->{r['peak_mb']:.0f} MB")
        lines.append(f"| {raster} | {r['operation']} | {r.get('backend', 'cpu')} "
                     f"| {r['limit_mb']:g} "
                     f"| {r['seconds']:.1f} | {r['increase_mb']:.0f} "
                     f"| {'yes' if ok else 'NO'} | {'; '.join(notes)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/var/tmp/gridgraph-scale",
                        help="folder for the rasters and outputs (needs room: "
                        "the big job writes ~30 GB)")
    parser.add_argument("--jobs", nargs="+", default=["small"],
                        choices=sorted(JOBS) + ["neuse10"])
    parser.add_argument("--operations", nargs="+",
                        default=["mst", "components", "costdistance"])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"],
                        help="kernels used per tile")
    parser.add_argument("--keep", action="store_true",
                        help="keep the rasters and outputs")
    parser.add_argument("--write", action="store_true",
                        help="append the table to docs/benchmarks.md")
    parser.add_argument("--json", help="write the summaries to this file")
    neuse10 = parser.add_argument_group(
        "neuse10", "the 3.5G-cell MST (the raster is kept in --workdir)")
    neuse10.add_argument("--phase", default="all",
                         choices=["all", "generate", "run"],
                         help="build the raster, run the MST, or both")
    neuse10.add_argument("--scale", type=float, default=1.0,
                         help="multiply both sides (0.05: 3526 x 2511)")
    neuse10.add_argument("--workers", type=int, default=12,
                         help="threads running the tile tasks")
    neuse10.add_argument("--memory-limit-mb", type=float, default=65536)
    neuse10.add_argument("--tile-size", type=int, default=None,
                         help="force the tile size (default automatic)")
    neuse10.add_argument("--check", action="store_true",
                         help="compare with the in-memory CPU run (small "
                         "scales only)")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results = []
    for job in args.jobs:
        if job == "neuse10":
            shape = neuse10_shape(args.scale)
            raster = generate_neuse10(args.workdir, shape) \
                if args.phase != "run" else os.path.join(
                    args.workdir, f"dem-{shape[0]}x{shape[1]}.npy")
            if args.phase == "generate":
                continue
            if not os.path.exists(raster):
                raise SystemExit(f"no {raster}: run --phase generate first")
            for operation in args.operations:
                if operation not in ("mst", "costdistance"):
                    continue
                summary = run_neuse10(raster, args.workdir, args.backend,
                                      args.workers, args.memory_limit_mb,
                                      args.tile_size, args.check, args.keep,
                                      operation)
                results.append((shape, summary))
            continue
        shape, runs = JOBS[job]
        raster = os.path.join(args.workdir, f"dem-{shape[0]}x{shape[1]}.npy")
        if not os.path.exists(raster):
            start = time.perf_counter()
            synthetic_dem(raster, shape)
            print(f"built {raster} in {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
        for operation, limit in runs:
            if operation not in args.operations:
                continue
            out_dir = os.path.join(args.workdir, f"out-{job}")
            summary = run_probe(raster, out_dir, operation, limit,
                                args.backend)
            print(json.dumps(summary), file=sys.stderr)
            results.append((shape, summary))
            if not args.keep:
                subprocess.run(["rm", "-rf", out_dir])
        if not args.keep:
            os.remove(raster)
    if not results:
        return
    text = table(results)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"bench": "scale", "backend": args.backend,
                       "date": datetime.date.today().isoformat(),
                       "machine": f"{platform.machine()}, "
                                  f"{os.cpu_count()} CPUs",
                       "runs": [{"shape": list(shape), "summary": summary}
                                for shape, summary in results]},
                      handle, indent=1, default=str)
    if args.write:
        stamp = datetime.date.today().isoformat()
        machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GB RAM")
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as doc:
            doc.write(f"\n## Tiled path at scale ({stamp}; {machine})\n\n"
                      f"{text}\n")


if __name__ == "__main__":
    main()
