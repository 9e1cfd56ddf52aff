"""The tiled cost distance in this process, phase by phase.

Runs ``cost_distance`` (8-connected, one source at the centre, the three
outputs written to .npy files) on a crop of bench/dask.py's neuse40 DEM
with tiles of each ``--tile-size``, ``--repeat`` times after a warm-up, and
prints the median seconds of the whole run and of each round (the
progress spans of ``costdistance.rounds``: survey, distances, hops,
labels, outputs), the tile solves and hops visits, and a digest of the
outputs (to compare commits: run it in a worktree of each, interleaved).

    python bench/cd_tiled_phases.py --workdir /tmp/gg-dask --size 4096 \\
        --tile-size 1024 512 --repeat 3
"""

import argparse
import hashlib
import importlib.util
import os
import shutil
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def dask_bench():
    """bench/dask.py as a module of another name ("import dask" would
    shadow Dask): its neuse40 shape and inputs, made once for both."""
    spec = importlib.util.spec_from_file_location(
        "gridgraph_bench_dask", os.path.join(HERE, "dask.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def phase_seconds(marks, spans):
    """Seconds between the first progress mark at or past each span's
    start and the first at or past its end."""
    def first_at(fraction):
        return min((t for f, t in marks if f >= fraction - 1e-12),
                   default=float("nan"))
    return {name: first_at(end) - first_at(start)
            for name, (start, end) in spans.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/gridgraph-bench-dask")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--tile-size", type=int, nargs="+", default=[1024])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from gridgraph.core import cost_distance
    from gridgraph.core.costdistance import rounds

    bench = dask_bench()
    dem, _ = bench.make_inputs(args.workdir, bench.NEUSE40)
    crop = os.path.join(args.workdir, f"dem-crop-{args.size}.npy")
    if not os.path.exists(crop):
        np.save(crop, np.load(dem, mmap_mode="r")[:args.size, :args.size])
    raster = np.load(crop, mmap_mode="r")
    source = [(args.size // 2, args.size // 2)]
    spans = dict(survey=rounds.SURVEY_SPAN, distances=rounds.DISTANCE_SPAN,
                 hops=rounds.HOPS_SPAN, labels=rounds.LABEL_SPAN,
                 outputs=rounds.OUTPUT_SPAN)
    for tile_size in args.tile_size:
        runs = []
        for turn in range(args.repeat + 1):  # the first one warms up
            out = tempfile.mkdtemp(dir=args.workdir)
            marks = []
            start = time.perf_counter()

            def progress(fraction):
                marks.append((fraction, time.perf_counter() - start))
                return True

            result = cost_distance(raster, source, tile_size=tile_size,
                                   out_dir=out, progress=progress)
            seconds = time.perf_counter() - start
            counts = (result.tile_solves, result.hops_visits)
            digest = hashlib.sha256()
            for name in ("accumulated", "direction", "allocation"):
                digest.update(np.ascontiguousarray(
                    getattr(result, name)).tobytes())
            del result
            shutil.rmtree(out)
            if turn:
                runs.append(dict(seconds=seconds,
                                 **phase_seconds(marks, spans)))
        medians = {name: float(np.median([run[name] for run in runs]))
                   for name in runs[0]}
        print(f"{args.size}^2, tiles of {tile_size}: "
              + " ".join(f"{name} {value:.2f}"
                         for name, value in medians.items())
              + f" s (median of {len(runs)}); {counts[0]} solves, "
              f"{counts[1]} hops visits; outputs "
              f"{digest.hexdigest()[:12]}", flush=True)


if __name__ == "__main__":
    main()
