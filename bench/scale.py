"""Scale benchmarks of the tiled (out-of-core) path.

Builds synthetic fractal DEMs as .npy files (streamed, never whole in
memory), then runs each operation in a fresh process through
tests/rss_probe.py, which reports wall time and peak resident set (VmHWM)
above the process's resident set after a warm-up.  Prints a Markdown table;
--write appends it with the machine and date to docs/benchmarks.md.

    .venv/bin/python bench/scale.py --workdir /var/tmp/gg-scale --jobs neuse40 big
    .venv/bin/python bench/scale.py --jobs small          # a quick check

Jobs (the issue's targets):
  neuse40  17630 x 12555 = 221M cells (the thesis's 40-ft Neuse size),
           MEMORY_LIMIT_MB=4096: MST (weight max, 8-connected), components,
           cost distance.
  big      32768 x 32768 Float32 (4 GiB), MEMORY_LIMIT_MB=2048: all three.
  small    2048 x 2048 with small limits, for a smoke test.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from rasters import fractal_surface  # noqa: E402

JOBS = {
    "neuse40": ((17630, 12555), [("mst", 4096), ("components", 4096),
                                 ("costdistance", 4096)]),
    "big": ((32768, 32768), [("mst", 2048), ("components", 2048),
                             ("costdistance", 2048)]),
    "small": ((2048, 2048), [("mst", 64), ("components", 12),
                             ("costdistance", 40)]),
}


def synthetic_dem(path, shape, seed=0, strip_rows=1024):
    """A fractal DEM of any size, written strip by strip to a .npy file.

    Two octaves of spectral synthesis: a coarse surface at 1/8 resolution,
    bilinearly upsampled, plus a 2048 x 2048 periodic detail patch (FFT
    synthesis is periodic, so tiling it leaves no seams), scaled to about
    [1, 1000] metres in float32 (clipped at 1).
    """
    from gridgraph.core.tiling import NpySink, Window
    rows, cols = shape
    coarse_shape = (rows // 8 + 2, cols // 8 + 2)
    coarse = fractal_surface(coarse_shape, seed=seed, beta=3.0,
                             dtype=np.float64)
    detail = fractal_surface((2048, 2048), seed=seed + 1, beta=2.4,
                             dtype=np.float64) - 500.0
    sink = NpySink(path, shape, np.float32)
    col_pos = np.arange(cols) / 8.0
    c0 = col_pos.astype(np.int64)
    cf = col_pos - c0
    detail_cols = np.arange(cols) % 2048
    for top in range(0, rows, strip_rows):
        n = min(strip_rows, rows - top)
        row_pos = np.arange(top, top + n) / 8.0
        r0 = row_pos.astype(np.int64)
        rf = (row_pos - r0)[:, None]
        upper = coarse[r0][:, c0] * (1 - cf) + coarse[r0][:, c0 + 1] * cf
        lower = coarse[r0 + 1][:, c0] * (1 - cf) + coarse[r0 + 1][:, c0 + 1] * cf
        strip = upper * (1 - rf) + lower * rf
        strip += 0.05 * detail[(np.arange(top, top + n) % 2048)][:, detail_cols]
        # costs must be >= 0: the detail can dip a coarse low below zero
        np.maximum(strip, 1.0, out=strip)
        sink.write(Window(top, 0, n, cols), strip.astype(np.float32))
    sink.finish()
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
        if r["operation"] == "mst":
            notes.append(f"{r['edges']} edges, {r['trees']} tree(s)")
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
                        choices=sorted(JOBS))
    parser.add_argument("--operations", nargs="+",
                        default=["mst", "components", "costdistance"])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"],
                        help="kernels used per tile")
    parser.add_argument("--keep", action="store_true",
                        help="keep the rasters and outputs")
    parser.add_argument("--write", action="store_true",
                        help="append the table to docs/benchmarks.md")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results = []
    for job in args.jobs:
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
    text = table(results)
    print(text)
    if args.write:
        stamp = datetime.date.today().isoformat()
        machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GB RAM")
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as doc:
            doc.write(f"\n## Tiled path at scale ({stamp}; {machine})\n\n"
                      f"{text}\n")


if __name__ == "__main__":
    main()
