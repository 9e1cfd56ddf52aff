"""qgis_process end to end on 4096² rasters: GridGraph against GRASS, or one
GridGraph build against another (A/B), with CPU time beside wall time.

    bench/qgis_process.py --repeat 5 --json bench/results/x.json
        our cost distance vs grass7:r.cost and our components vs
        grass7:r.clump, as bench/cpu.py --qgis runs them (same rasters,
        same checks), interleaved (ours, GRASS, ours, ...)
    bench/qgis_process.py --against CHECKOUT:HOME --repeat 5
        this checkout's build (its scripts/qgis-process, the QGIS profile
        of $HOME) against another checkout's, whose profile lives in HOME
        (its plugins/gridgraph links CHECKOUT), interleaved (A, B, A, ...);
        the outputs must hold the same values, type and nodata

Every run records its wall seconds, its CPU seconds (user + system of the
finished child, all threads) and the one-minute load average when it
finished: the 2-core box is shared, so the CPU ratio is the steadier
figure and the load says how far to trust the wall ratio.  Medians of
``--repeat`` runs after one warm-up run of each side.
"""

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import cpu  # noqa: E402  (bench/cpu.py: rasters, checks, machine())
from rasters import fractal_surface  # noqa: E402


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(checkout, home, algorithm, parameters):
    """(wall s, CPU s, load) of one qgis_process run of ``checkout``'s
    wrapper with HOME=``home`` (None: this process's)."""
    environment = dict(os.environ)
    if home is not None:
        environment["HOME"] = home
    command = [os.path.join(checkout, "scripts", "qgis-process"), "--json",
               "run", algorithm, "--"]
    command += [f"{key}={value}" for key, value in parameters.items()]
    before = children_cpu()
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True,
                               env=environment)
    wall = time.perf_counter() - start
    used = children_cpu() - before
    if completed.returncode != 0:
        raise RuntimeError(f"{algorithm} failed:\n{completed.stdout}\n"
                           f"{completed.stderr}")
    return wall, used, os.getloadavg()[0]


def interleaved(sides, repeat):
    """{name: [(wall, cpu, load), ...]} of ``repeat`` rounds over the
    sides in turn, after one warm-up round."""
    runs = {name: [] for name, _ in sides}
    for round_ in range(repeat + 1):
        for name, side in sides:
            result = side()
            if round_:
                runs[name].append(result)
    return runs


def summary(runs):
    walls = [r[0] for r in runs]
    cpus = [r[1] for r in runs]
    loads = [r[2] for r in runs]
    return {"wall_median": statistics.median(walls),
            "cpu_median": statistics.median(cpus), "walls": walls,
            "cpus": cpus, "loads": loads}


def inputs(folder, size):
    cost = fractal_surface((size, size), seed=1).astype(np.float64)
    cost_path = os.path.join(folder, f"cost{size}.tif")
    cpu.write_geotiff(cost_path, cost)
    source_path = os.path.join(folder, "source.gpkg")
    cpu.write_point(source_path, 700000.0 + 10.0 * (size // 2 + 0.5),
                    4000000.0 - 10.0 * (size // 2 + 0.5))
    classes = np.floor(fractal_surface((size, size), seed=2) / 50.0
                       ).astype(np.int16)
    classes_path = os.path.join(folder, f"classes{size}.tif")
    cpu.write_geotiff(classes_path, classes)
    return cost_path, source_path, classes_path


def ours_parameters(operation, paths, output):
    cost_path, source_path, classes_path = paths
    if operation == "costdistance":
        return "gridgraph:costdistance", {
            "INPUT": cost_path, "SOURCES": source_path, "CONNECTIVITY": 1,
            "BACKEND": 1, "OUTPUT": output}
    return "gridgraph:connectedcomponents", {
        "INPUT": classes_path, "MODE": 0, "CONNECTIVITY": 0, "BACKEND": 1,
        "OUTPUT": output}


def grass_parameters(operation, paths, output):
    cost_path, source_path, classes_path = paths
    if operation == "costdistance":
        return "grass7:r.cost", {
            "input": cost_path, "start_points": source_path, "output": output,
            "GRASS_REGION_PARAMETER": cost_path,
            "GRASS_REGION_CELLSIZE_PARAMETER": 0}
    return "grass7:r.clump", {
        "input": classes_path, "output": output, "title": "clumps",
        "threshold": 0, "GRASS_REGION_PARAMETER": classes_path,
        "GRASS_REGION_CELLSIZE_PARAMETER": 0}


def same_raster(a_path, b_path):
    """Values (bit for bit, NaN included), type, nodata, grid and CRS."""
    from osgeo import gdal
    a, b = gdal.Open(a_path), gdal.Open(b_path)
    band_a, band_b = a.GetRasterBand(1), b.GetRasterBand(1)
    nodata_a, nodata_b = band_a.GetNoDataValue(), band_b.GetNoDataValue()
    same_nodata = nodata_a == nodata_b or (
        nodata_a is not None and nodata_b is not None
        and np.isnan(nodata_a) and np.isnan(nodata_b))
    return (band_a.DataType == band_b.DataType and same_nodata
            and a.GetGeoTransform() == b.GetGeoTransform()
            and a.GetProjection() == b.GetProjection()
            and band_a.ReadAsArray().tobytes()
            == band_b.ReadAsArray().tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--operations", nargs="+",
                        default=["costdistance", "components"],
                        choices=["costdistance", "components"])
    parser.add_argument("--against", metavar="CHECKOUT:HOME",
                        help="A/B against another checkout's build")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gridgraph-qgis-bench-") as folder:
        paths = inputs(folder, args.size)
        for operation in args.operations:
            out_a = os.path.join(folder, f"{operation}-a.tif")
            out_b = os.path.join(folder, f"{operation}-b.tif")
            algorithm, parameters = ours_parameters(operation, paths, out_a)
            sides = [("this build", lambda: run(ROOT, None, algorithm,
                                                parameters))]
            if args.against:
                checkout, home = args.against.split(":", 1)
                _, parameters_b = ours_parameters(operation, paths, out_b)
                sides.append(("other build", lambda: run(
                    checkout, home, algorithm, parameters_b)))
                peer = checkout
            else:
                peer_algorithm, peer_parameters = grass_parameters(
                    operation, paths, out_b)
                sides.append(("GRASS", lambda: run(
                    ROOT, None, peer_algorithm, peer_parameters)))
                peer = peer_algorithm
            runs = interleaved(sides, args.repeat)
            if args.against:
                assert same_raster(out_a, out_b), \
                    f"{operation}: the two builds' outputs differ"
                check = "same values, type, nodata, grid, CRS"
            elif operation == "costdistance":
                a, b = cpu.read(out_a), cpu.read(out_b)
                assert np.array_equal(np.isnan(a), np.isnan(b))
                error = float(np.nanmax(np.abs(a - b) / np.maximum(
                    np.abs(b), 1e-300)))
                assert error <= 1e-9, f"r.cost differs: {error}"
                check = f"max rel. diff {error:.1e}"
            else:
                assert cpu.same_partition(cpu.read(out_a), cpu.read(out_b))
                check = "same partition"
            mine, theirs = (summary(runs[name]) for name, _ in sides)
            row = {"operation": operation, "peer": peer, "size": args.size,
                   "ours": mine, "peer_runs": theirs, "check": check,
                   "wall_ratio": theirs["wall_median"] / mine["wall_median"],
                   "cpu_ratio": theirs["cpu_median"] / mine["cpu_median"]}
            rows.append(row)
            print(f"{operation} vs {peer}: wall {mine['wall_median']:.2f} / "
                  f"{theirs['wall_median']:.2f} s ({row['wall_ratio']:.2f}x), "
                  f"CPU {mine['cpu_median']:.2f} / {theirs['cpu_median']:.2f}"
                  f" s ({row['cpu_ratio']:.2f}x), loads "
                  f"{min(mine['loads'] + theirs['loads']):.1f}-"
                  f"{max(mine['loads'] + theirs['loads']):.1f}; {check}",
                  flush=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="minutes"), "machine": cpu.machine(), "rows": rows}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
