"""CPU benchmarks: GridGraph side by side with its peers, in one run.

In process (median of --repeat runs after a warm-up):
  cost distance vs skimage.graph.MCP_Geometric, components vs scipy.ndimage.label,
  MST vs scipy.sparse.csgraph.minimum_spanning_tree (counting its sparse-matrix build).
End to end through scripts/qgis-process:
  gridgraph:costdistance vs grass7:r.cost, gridgraph:connectedcomponents vs grass7:r.clump.

Every pair is checked for identical outputs before its time is reported.  The table is printed
as Markdown; --write appends it (with the machine and date) to docs/benchmarks.md.

    .venv/bin/python bench/cpu.py --sizes 2048 4096 --repeat 3 --write
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core import (connected_components, cost_distance,  # noqa: E402
                            minimum_spanning_tree)

QGIS_PROCESS = os.path.join(ROOT, "scripts", "qgis-process")


def timed(function, repeat):
    """Median wall time of ``repeat`` calls after one warm-up; returns (median, last result)."""
    result = function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_cost_distance(size, repeat):
    from skimage.graph import MCP_Geometric
    cost = fractal_surface((size, size), seed=1).astype(np.float64)
    source = (size // 2, size // 2)

    def ours():
        return cost_distance(cost, [source], connectivity=8, backend="cpu").accumulated

    def peer():
        return MCP_Geometric(cost, fully_connected=True).find_costs([source])[0]

    t_ours, a = timed(ours, repeat)
    t_peer, b = timed(peer, repeat)
    error = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
    assert error <= 1e-9, f"cost distance differs from MCP_Geometric: {error}"
    return ("cost distance, 8-conn, 1 source", "skimage MCP_Geometric", size,
            t_ours, t_peer, f"max rel. diff {error:.1e}")


def bench_components(size, repeat):
    from scipy import ndimage
    surface = fractal_surface((size, size), seed=2)
    mask = surface > np.median(surface)
    rows = []
    for connectivity, structure in ((4, ndimage.generate_binary_structure(2, 1)),
                                    (8, np.ones((3, 3), bool))):
        def ours():
            return connected_components(mask, connectivity=connectivity, mode="nonzero",
                                        backend="cpu").labels

        def peer():
            return ndimage.label(mask, structure=structure)[0]

        t_ours, a = timed(ours, repeat)
        t_peer, b = timed(peer, repeat)
        assert np.array_equal(a, b), "labels differ from scipy.ndimage.label"
        rows.append((f"components nonzero, {connectivity}-conn", "scipy.ndimage.label", size,
                     t_ours, t_peer, "labels identical"))
    return rows


def grid_graph_csr(values):
    """The 4-connected grid graph of ``values`` with weight max(a, b), as csgraph wants."""
    from scipy.sparse import coo_matrix
    rows, cols = values.shape
    index = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    low = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
    high = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
    flat = values.ravel()
    weight = np.maximum(flat[low], flat[high])
    return coo_matrix((weight, (low, high)), shape=(rows * cols,) * 2).tocsr()


def bench_mst(size, repeat):
    from scipy.sparse.csgraph import minimum_spanning_tree as csgraph_mst
    values = fractal_surface((size, size), seed=3)  # >= 1: no zero weights for csgraph

    def ours():
        return minimum_spanning_tree(values, connectivity=4, weight="max", backend="cpu")

    def peer():
        return csgraph_mst(grid_graph_csr(values))

    t_ours, tree = timed(ours, repeat)
    t_peer, reference = timed(peer, repeat)
    ours_total, peer_total = tree.total_weight, float(reference.sum(dtype=np.float64))
    assert len(tree.edges) == reference.nnz, "edge counts differ"
    assert abs(ours_total - peer_total) <= 1e-9 * peer_total, "total weights differ"
    return ("MST max, 4-conn", "csgraph MST + sparse build", size, t_ours, t_peer,
            f"same total weight ({ours_total:.6g}) and edge count")


def write_geotiff(path, array, nodata=None):
    from gridgraph.core import io
    # EPSG:32617 (UTM 17N, where the Neuse basin lies), 10 m square cells
    from osgeo import osr
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32617)
    io.write_raster(path, array, (700000.0, 10.0, 0.0, 4000000.0, 0.0, -10.0),
                    srs.ExportToWkt(), nodata)


def write_point(path, x, y):
    from osgeo import ogr, osr
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32617)
    driver = ogr.GetDriverByName("GPKG")
    data = driver.CreateDataSource(path)
    layer = data.CreateLayer("sources", srs, ogr.wkbPoint)
    feature = ogr.Feature(layer.GetLayerDefn())
    point = ogr.Geometry(ogr.wkbPoint)
    point.AddPoint_2D(x, y)
    feature.SetGeometry(point)
    layer.CreateFeature(feature)
    data = None


def run_qgis_process(algorithm, parameters):
    command = [QGIS_PROCESS, "--json", "run", algorithm, "--"]
    command += [f"{key}={value}" for key, value in parameters.items()]
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"{algorithm} failed:\n{completed.stdout}\n{completed.stderr}")
    return elapsed, json.loads(completed.stdout[completed.stdout.index("{"):])


def read(path):
    from gridgraph.core import io
    band = io.read_band(path)
    array = band.array.astype(np.float64)
    if band.nodata is not None:
        array[array == band.nodata] = np.nan
    return array


def bench_qgis_process(size, repeat, folder):
    rows = []
    cost = fractal_surface((size, size), seed=1).astype(np.float64)
    cost_path = os.path.join(folder, f"cost{size}.tif")
    write_geotiff(cost_path, cost)
    source_path = os.path.join(folder, "source.gpkg")
    # centre of cell (size/2, size/2)
    write_point(source_path, 700000.0 + 10.0 * (size // 2 + 0.5),
                4000000.0 - 10.0 * (size // 2 + 0.5))
    ours_path, grass_path = (os.path.join(folder, n) for n in ("ours.tif", "grass.tif"))

    def ours():
        return run_qgis_process("gridgraph:costdistance", {
            "INPUT": cost_path, "SOURCES": source_path, "CONNECTIVITY": 1,
            "BACKEND": 1, "OUTPUT": ours_path})[0]

    def grass():
        return run_qgis_process("grass7:r.cost", {
            "input": cost_path, "start_points": source_path, "output": grass_path,
            "GRASS_REGION_PARAMETER": cost_path, "GRASS_REGION_CELLSIZE_PARAMETER": 0})[0]

    t_ours = statistics.median([ours() for _ in range(repeat)])
    t_grass = statistics.median([grass() for _ in range(repeat)])
    a, b = read(ours_path), read(grass_path)
    assert np.array_equal(np.isnan(a), np.isnan(b)), "reached cells differ from r.cost"
    error = float(np.nanmax(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
    assert error <= 1e-9, f"r.cost differs: {error}"
    rows.append(("qgis_process costdistance", "grass7:r.cost", size, t_ours, t_grass,
                 f"max rel. diff {error:.1e}"))

    classes = np.floor(fractal_surface((size, size), seed=2) / 50.0).astype(np.int16)
    classes_path = os.path.join(folder, f"classes{size}.tif")
    write_geotiff(classes_path, classes)
    ours_path, grass_path = (os.path.join(folder, n) for n in ("cc.tif", "clump.tif"))

    def ours_cc():
        return run_qgis_process("gridgraph:connectedcomponents", {
            "INPUT": classes_path, "MODE": 0, "CONNECTIVITY": 0, "BACKEND": 1,
            "OUTPUT": ours_path})[0]

    def grass_cc():
        return run_qgis_process("grass7:r.clump", {
            "input": classes_path, "output": grass_path, "title": "clumps",
            "threshold": 0, "GRASS_REGION_PARAMETER": classes_path,
            "GRASS_REGION_CELLSIZE_PARAMETER": 0})[0]

    t_ours = statistics.median([ours_cc() for _ in range(repeat)])
    t_grass = statistics.median([grass_cc() for _ in range(repeat)])
    a, b = read(ours_path), read(grass_path)
    assert same_partition(a, b), "components differ from r.clump"
    rows.append(("qgis_process connectedcomponents, equal, 4-conn", "grass7:r.clump", size,
                 t_ours, t_grass, "same partition"))
    return rows


def same_partition(a, b):
    """True when two label rasters split the cells the same way (numbering aside)."""
    a, b = a.ravel(), b.ravel()
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    keep = ~np.isnan(a)
    pairs = np.unique(np.stack([a[keep], b[keep]]), axis=1)
    return (len(np.unique(pairs[0])) == pairs.shape[1]
            and len(np.unique(pairs[1])) == pairs.shape[1])


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-qgis", action="store_true")
    parser.add_argument("--write", action="store_true",
                        help="append the table to docs/benchmarks.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gridgraph-bench-") as folder:
        for size in args.sizes:
            rows.append(bench_cost_distance(size, args.repeat))
            rows.extend(bench_components(size, args.repeat))
            rows.append(bench_mst(size, args.repeat))
            if not args.skip_qgis:
                rows.extend(bench_qgis_process(size, args.repeat, folder))
            print(f"done {size}", file=sys.stderr, flush=True)
    table = ["| operation | peer | size | GridGraph (s) | peer (s) | peer / GridGraph | check |",
             "|---|---|---|---|---|---|---|"]
    for name, peer, size, t_ours, t_peer, check in rows:
        table.append(f"| {name} | {peer} | {size}² | {t_ours:.3f} | {t_peer:.3f} | "
                     f"{t_peer / t_ours:.2f}× | {check} |")
    header = (f"## CPU, {datetime.date.today().isoformat()}\n\n{machine()}; "
              f"median of {args.repeat} after a warm-up; fractal rasters "
              "(tests/rasters.py).\n")
    text = header + "\n" + "\n".join(table) + "\n"
    print(text)
    if args.write:
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
