"""Components on a local Dask cluster under scheduling variants (kept
labels on/off, tasks in flight per thread), each run twice on one cluster:
which change made the 8-worker run slower (docs/benchmarks.md, "Dask
executor").  Inputs as bench/dask.py makes them.

    python3 bench/dask_variants.py --neuse40 --workers 8
"""

import argparse
import os
import shutil
import sys
import time

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "bench_dask", os.path.join(HERE, "dask.py"))
bench_dask = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_dask)  # bench/dask.py (not the dask package)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--neuse40", action="store_true")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--tile-size", type=int, default=1024)
    parser.add_argument("--workdir", default="/tmp/gg-dask")
    args = parser.parse_args()
    shape = bench_dask.NEUSE40 if args.neuse40 else (4096, 4096)
    import subprocess
    subprocess.run([sys.executable, os.path.join(HERE, "dask.py"),
                    "--inputs-only", "--workdir", args.workdir, "--shape",
                    str(shape[0]), str(shape[1])], check=True)
    dem, mask = bench_dask.make_inputs(args.workdir, shape)
    os.environ["NUMBA_NUM_THREADS"] = "1"
    from distributed import Client, LocalCluster

    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled
    out = os.path.join(args.workdir, "out-variants")
    with LocalCluster(n_workers=args.workers, threads_per_worker=1,
                      processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        # the first run compiles the kernels on the workers: not a variant
        for k, (share, depth) in enumerate([(0.0, 2), (0.25, 4), (0.0, 2),
                                            (0.25, 2), (0.0, 4)]):
            tiled.KEPT_LABELS_SHARE = share
            tile_tasks.DASK_IN_FLIGHT_PER_THREAD = depth
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            start = time.perf_counter()
            _, note = bench_dask.run("components", dem, mask, client,
                                     args.tile_size, out)
            print("warm-up " if k == 0 else "", f"kept labels {'on ' if share else 'off'} in flight "
                  f"{depth}/thread: {time.perf_counter() - start:.2f} s "
                  f"({note})", flush=True)


if __name__ == "__main__":
    main()
