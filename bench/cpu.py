"""CPU benchmarks: GridGraph side by side with its peers, in one run.

In process, interleaved A/B runs (median of --repeat, --component-repeat for
the components rows against peers, after a warm-up each):
  components vs scipy.ndimage.label, OpenCV Spaghetti (as many threads as CPUs in
  the affinity mask) and cc3d; cost distance vs skimage MCP_Geometric and
  whitebox-workflows; MST (edges=False) vs scipy csgraph (with its sparse build)
  and higra; threshold segments vs scipy's labelling of the thresholded graph.
  Peers missing from the environment are skipped (`make bench` installs them
  from requirements-bench.txt).  --threads 1 2 4 ... adds a scaling table.
With --qgis, end to end through scripts/qgis-process:
  gridgraph:costdistance vs grass7:r.cost, gridgraph:connectedcomponents vs grass7:r.clump.

Every pair is checked for identical outputs before its time is reported.  The table is printed
as Markdown; --write appends it (with the machine and date) to docs/benchmarks.md.

    .venv/bin/python bench/cpu.py --sizes 2048 4096 --repeat 3 --write
    taskset -c 0,1 .venv/bin/python bench/cpu.py   # a 2-core figure
"""

import argparse
import datetime
import functools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# bench/dask.py must not shadow the dask package (xarray-spatial imports it)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(ROOT, "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core import (connected_components, cost_distance,  # noqa: E402
                            minimum_spanning_tree, segments_by_threshold)

sys.path.insert(0, HERE)  # only while the sibling module loads
from search_modes import cost_search  # noqa: E402

sys.path.remove(HERE)

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


def report(rows):
    """Print rows on stderr as they come (a run cut short keeps them)."""
    for name, peer, size, t_ours, t_peer, check, usage in rows:
        print(f"{name} | {peer} | {size} | {t_ours:.3f} | {t_peer:.3f} | "
              f"{t_peer / t_ours:.2f}x | {check} | {usage_text(usage)}",
              file=sys.stderr, flush=True)
    return rows


def usage_text(usage):
    """Our call's user and system CPU seconds; the system share of wall."""
    if not usage:
        return ""
    return (f"user {usage['user']:.3f} s, sys {usage['system']:.3f} s "
            f"({100 * usage['system'] / usage['wall']:.0f}% of wall)")


def row(name, peer, size, t_ours, t_peer, check):
    return (name, peer, size, t_ours, t_peer, check,
            dict(LAST_USAGE, wall=t_ours))


def cpu_times():
    """(user, system) CPU seconds of this process so far, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


# user and system seconds of our calls in the last ab() (medians)
LAST_USAGE = {}


def ab(ours, peer, repeat):
    """Interleaved A/B timing: one warm-up each, then ``repeat`` rounds
    alternating which goes first; returns (median ours, median peer, last
    results of both).  Our calls' user and system CPU time (getrusage,
    all threads) go to LAST_USAGE."""
    a = ours()
    b = peer()
    t_ours, t_peer, user, system = [], [], [], []
    for k in range(repeat):
        for which in ((0, 1) if k % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            if which == 0:
                # drop the previous result first: its pages go back before
                # ours are faulted in, as in a fresh call
                a = None
                user_0, system_0 = cpu_times()
                start = time.perf_counter()
                a = ours()
                t_ours.append(time.perf_counter() - start)
                user_1, system_1 = cpu_times()
                user.append(user_1 - user_0)
                system.append(system_1 - system_0)
            else:
                b = None
                start = time.perf_counter()
                b = peer()
                t_peer.append(time.perf_counter() - start)
    LAST_USAGE.update(user=statistics.median(user),
                      system=statistics.median(system))
    return statistics.median(t_ours), statistics.median(t_peer), a, b


def guarded(peer_name, function, *arguments):
    """``function(*arguments)``, or None (said on stderr) when a peer's call
    fails: an API that moved must not lose the other rows."""
    try:
        return function(*arguments)
    except AssertionError:
        raise
    except Exception as error:  # noqa: BLE001 - report and go on
        print(f"skipped {peer_name}: {type(error).__name__}: {error}",
              file=sys.stderr, flush=True)
        return None


def peer_available(module):
    try:
        __import__(module)
        return True
    except Exception:  # noqa: BLE001 - a peer that fails to import is absent
        return False


def same_labelling(a, b):
    """Same partition of the cells (numbering aside), background 0 in both."""
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    if not np.array_equal(a == 0, b == 0):
        return False
    keep = a != 0
    pairs = np.unique(np.stack([a[keep].astype(np.int64),
                                b[keep].astype(np.int64)]), axis=1)
    return (len(np.unique(pairs[0])) == pairs.shape[1]
            and len(np.unique(pairs[1])) == pairs.shape[1])


def masks(size):
    """The component benchmark masks: random density 0.6 and a fractal."""
    surface = fractal_surface((size, size), seed=2)
    return {"random 0.6": np.random.default_rng(2).random((size, size)) < 0.6,
            "fractal": surface > np.median(surface)}


def bench_components(size, repeat, threads, mask_names=None,
                     peer_names=None):
    """Components against scipy, OpenCV and cc3d (``peer_names``: parts
    of the names of those to time; our labels are checked against scipy's
    once even when scipy is not timed)."""
    from scipy import ndimage
    rows = []
    for mask_name, mask in masks(size).items():
        if mask_names and mask_name not in mask_names:
            continue
        mask_u8 = mask.astype(np.uint8)
        for connectivity in (4, 8):
            structure = ndimage.generate_binary_structure(2, connectivity // 4)

            def ours():
                return connected_components(mask_u8, connectivity=connectivity,
                                            mode="nonzero", backend="cpu").labels

            def scipy_label():
                return ndimage.label(mask, structure=structure)[0]

            peers = [("scipy.ndimage.label", scipy_label, "identical")]
            if peer_names and not any(part in "scipy.ndimage.label"
                                      for part in peer_names):
                assert np.array_equal(ours(), scipy_label()), \
                    "components differ from scipy.ndimage.label"
                peers = []
            if peer_available("cv2") and (not peer_names or any(
                    part in "OpenCV Spaghetti" for part in peer_names)):
                import cv2

                def opencv():
                    cv2.setNumThreads(threads)
                    return cv2.connectedComponentsWithAlgorithm(
                        mask_u8, connectivity, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
                peers.append((f"OpenCV Spaghetti ({threads} threads)", opencv,
                              "partition"))
            if peer_available("cc3d") and (not peer_names or any(
                    part in "cc3d" for part in peer_names)):
                import cc3d

                def cc3d_label():
                    return cc3d.connected_components(mask_u8,
                                                     connectivity=connectivity)
                peers.append(("cc3d", cc3d_label, "partition"))
            for peer_name, peer, check in peers:
                timing = guarded(peer_name, ab, ours, peer, repeat)
                if timing is None:
                    continue
                t_ours, t_peer, a, b = timing
                ok = np.array_equal(a, b) if check == "identical" \
                    else same_labelling(a, b)
                assert ok, f"components differ from {peer_name}"
                rows.append(row(f"components {connectivity}-conn, {mask_name}",
                                peer_name, size, t_ours, t_peer,
                                "labels identical" if check == "identical"
                                else "same partition"))
        # equal mode per cell against nonzero mode, same raster
        def equal(connectivity):
            return connected_components(mask_u8, connectivity=connectivity,
                                        mode="equal", backend="cpu").labels

        def nonzero(connectivity):
            return connected_components(mask_u8, connectivity=connectivity,
                                        mode="nonzero", backend="cpu").labels
        for connectivity in (4, 8):
            t_equal, t_nonzero, _, _ = ab(
                functools.partial(equal, connectivity),
                functools.partial(nonzero, connectivity), repeat)
            rows.append(row(
                f"components {connectivity}-conn equal mode, {mask_name}",
                "our nonzero mode (same raster)", size, t_equal, t_nonzero,
                "per cell: equal labels every cell"))
    return rows


def whitebox_cost_distance(cost, source, folder):
    """A callable running whitebox-workflows' cost_distance on ``cost`` (its
    numpy bridge wants a base raster read from a file: an ASCII grid)."""
    import whitebox_workflows as wbw
    wbe = wbw.WbEnvironment()
    rows, cols = cost.shape
    base_path = os.path.join(folder, f"base{rows}.asc")
    with open(base_path, "w") as out:
        out.write(f"ncols {cols}\nnrows {rows}\nxllcorner 0\nyllcorner 0\n"
                  "cellsize 1\nNODATA_value -9999\n")
        np.savetxt(out, np.zeros((rows, cols), np.uint8), fmt="%d")
    base = wbe.read_raster(base_path)
    cost_raster = wbw.Raster.from_numpy(
        cost, base, output_path=os.path.join(folder, "cost.tif"))
    seeds = np.zeros(cost.shape)
    seeds[source] = 1
    source_raster = wbw.Raster.from_numpy(
        seeds, base, output_path=os.path.join(folder, "source.tif"))

    def run():
        return wbe.cost_distance(source_raster, cost_raster)[0].to_numpy()
    return run


def xrspatial_cost_distance(cost, source):
    """A callable running xarray-spatial's cost_distance from ``source``
    over ``cost`` (unit cells; its edge cost is the mean friction of the
    two ends times the step length, as ours)."""
    import xarray as xr
    from xrspatial import cost_distance as xrs_cost_distance
    rows, cols = cost.shape
    coords = {"y": np.arange(rows, dtype=np.float64)[::-1],
              "x": np.arange(cols, dtype=np.float64)}
    seeds = np.zeros(cost.shape, np.float64)
    seeds[source] = 1
    raster = xr.DataArray(seeds, coords=coords, dims=("y", "x"))
    friction = xr.DataArray(cost, coords=coords, dims=("y", "x"))

    def run():
        return np.asarray(xrs_cost_distance(raster, friction,
                                            connectivity=8).values)
    return run


def bench_cost_distance(size, repeat, folder, peer_names=None):
    cost = fractal_surface((size, size), seed=1).astype(np.float64)
    source = (size // 2, size // 2)

    def ours():
        return cost_distance(cost, [source], connectivity=8,
                             backend="cpu").accumulated

    def mcp():
        from skimage.graph import MCP_Geometric
        return MCP_Geometric(cost, fully_connected=True).find_costs([source])[0]

    peers = [("skimage MCP_Geometric", mcp)] \
        if peer_available("skimage.graph") else []
    if peer_names and "heap" in peer_names:
        # our own sequential heap search, as a peer of the search solve
        # picks (identical rasters required)
        def heap_search():
            with cost_search("heap"):
                return ours()
        peers.append(("GridGraph heap search (one thread)", heap_search))
    if peer_available("whitebox_workflows"):
        run = guarded("whitebox-workflows", whitebox_cost_distance, cost,
                      source, folder)
        if run is not None:
            peers.append(("whitebox-workflows cost_distance", run))
    if peer_available("xrspatial"):
        peers.append(("xarray-spatial cost_distance (float32)",
                      xrspatial_cost_distance(cost, source)))
    rows = []
    for peer_name, peer in peers:
        if peer_names and not any(p in peer_name for p in peer_names):
            continue
        timing = guarded(peer_name, ab, ours, peer, repeat)
        if timing is None:
            continue
        t_ours, t_peer, a, b = timing
        b = np.asarray(b, dtype=np.float64)
        error = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
        # xarray-spatial computes and returns float32
        tolerance = 1e-4 if "float32" in peer_name else 1e-6
        if "GridGraph" in peer_name:
            tolerance = 0.0
            assert np.array_equal(a, b, equal_nan=True)
        assert error <= tolerance, \
            f"cost distance differs from {peer_name}: {error}"
        rows.append(row("cost distance 8-conn, 1 source, all outputs",
                        peer_name, size, t_ours, t_peer,
                        f"max rel. diff {error:.1e}"))
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
        return minimum_spanning_tree(values, connectivity=4, weight="max",
                                     backend="cpu", edges=False)

    def csgraph():
        return float(csgraph_mst(grid_graph_csr(values)).sum(dtype=np.float64))

    peers = [("csgraph MST + sparse build", csgraph)]
    if peer_available("higra"):
        import higra as hg

        def higra_mst():
            graph = hg.get_4_adjacency_graph(values.shape)
            weights = hg.weight_graph(graph, values, hg.WeightFunction.max)
            tree = hg.minimum_spanning_tree(graph, weights)
            return float(np.sum(tree.edge_map_weights
                                if hasattr(tree, "edge_map_weights")
                                else weights[hg.CptMinimumSpanningTree
                                             .get_edge_map(tree)],
                                dtype=np.float64))
        peers.append(("higra minimum_spanning_tree", higra_mst))
    rows = []
    for peer_name, peer in peers:
        timing = guarded(peer_name, ab, ours, peer, repeat)
        if timing is None:
            continue
        t_ours, t_peer, tree, total = timing
        assert abs(tree.total_weight - total) <= 1e-9 * total, \
            f"total weights differ from {peer_name}"
        rows.append(row("MST max 4-conn, edges=False (directions, total)",
                        peer_name, size, t_ours, t_peer,
                        f"same total weight {total:.6g}"))
    return rows


def bench_segments(size, repeat):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as csgraph_components
    values = fractal_surface((size, size), seed=3)
    threshold = 2.0

    def ours():
        return segments_by_threshold(values, threshold, connectivity=4,
                                     weight="absdiff")

    def scipy_segments():
        rows, cols = values.shape
        index = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
        low = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
        high = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
        flat = values.ravel()
        keep = np.abs(flat[low] - flat[high]) <= np.float32(threshold)
        graph = coo_matrix((np.ones(int(keep.sum()), np.int8),
                            (low[keep], high[keep])), shape=(rows * cols,) * 2)
        return csgraph_components(graph, directed=False)

    t_ours, t_peer, (labels, count), (n, component) = ab(
        ours, scipy_segments, repeat)
    assert count == n and same_labelling(labels, component + 1), \
        "segments differ from scipy's"
    return [row("threshold segments absdiff <= 2, 4-conn",
                "scipy csgraph labelling of the thresholded graph", size,
                t_ours, t_peer, "same partition")]


def thread_scaling(size, thread_counts, repeat, cost_modes=("heap", "blocks"),
                   components=True):
    """Our cost distance (heap and blocks) and components (4 and 8, both
    modes; unless ``components`` is False) at each thread count, beside
    OpenCV with as many threads (interleaved with ours).  Parity: every
    cost distance run gives the first one's rasters bit for bit, every
    labelling scipy's labels."""
    import numba
    from scipy import ndimage
    from gridgraph.core.components import _cpu as components_cpu
    if any(mode != "none" for mode in cost_modes):
        cost = fractal_surface((size, size), seed=1).astype(np.float64)
    source = (size // 2, size // 2)
    mask = masks(size)["random 0.6"]
    mask_u8 = mask.astype(np.uint8)
    expected_labels = {
        c: ndimage.label(mask, ndimage.generate_binary_structure(2, c // 4))[0]
        for c in ((4, 8) if components else ())}
    reference = None
    rows = []
    saved = components_cpu._cpu_count
    try:
        for threads in thread_counts:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            components_cpu._cpu_count = lambda: threads
            row = {"threads": threads}
            for mode in cost_modes:
                if mode == "none":
                    continue
                if mode.endswith("<=2"):  # this mode at 1 and 2 threads only
                    if threads > 2:
                        continue
                    mode = mode[:-3]
                name = f"cost distance {mode}"

                def run(mode=mode):
                    with cost_search(mode):
                        return cost_distance(cost, [source], connectivity=8,
                                             backend="cpu")
                row[name], result = timed(run, repeat)
                got = (result.accumulated, result.direction, result.allocation)
                if reference is None:
                    reference = got
                assert all(np.array_equal(x, y, equal_nan=True)
                           for x, y in zip(got, reference)), \
                    f"{name} at {threads} threads differs"
            if components and peer_available("cv2"):
                import cv2
                cv2.setNumThreads(threads)
            for connectivity in (4, 8) if components else ():

                def ours(connectivity=connectivity, mode="nonzero"):
                    return connected_components(
                        mask_u8, connectivity=connectivity, mode=mode,
                        backend="cpu").labels

                def opencv(connectivity=connectivity):
                    return cv2.connectedComponentsWithAlgorithm(
                        mask_u8, connectivity, cv2.CV_32S,
                        cv2.CCL_SPAGHETTI)[1]
                name = f"components {connectivity}-conn"
                if peer_available("cv2"):
                    # interleaved with OpenCV at as many threads
                    row[name], row[f"OpenCV Spaghetti {connectivity}-conn"], \
                        labels, peer_labels = ab(ours, opencv, repeat)
                    assert same_labelling(peer_labels,
                                          expected_labels[connectivity])
                else:
                    row[name], labels = timed(ours, repeat)
                assert np.array_equal(labels, expected_labels[connectivity]), \
                    f"components at {threads} threads differ from scipy"
                row[f"{name} equal mode"], _ = timed(
                    functools.partial(ours, mode="equal"), repeat)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        components_cpu._cpu_count = saved
    return rows


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

    t_ours, t_grass = interleaved(ours, grass, repeat)
    a, b = read(ours_path), read(grass_path)
    assert np.array_equal(np.isnan(a), np.isnan(b)), "reached cells differ from r.cost"
    error = float(np.nanmax(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
    assert error <= 1e-9, f"r.cost differs: {error}"
    rows.append(("qgis_process costdistance", "grass7:r.cost", size, t_ours, t_grass,
                 f"max rel. diff {error:.1e}", {}))

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

    t_ours, t_grass = interleaved(ours_cc, grass_cc, repeat)
    a, b = read(ours_path), read(grass_path)
    assert same_partition(a, b), "components differ from r.clump"
    rows.append(("qgis_process connectedcomponents, equal, 4-conn", "grass7:r.clump", size,
                 t_ours, t_grass, "same partition", {}))
    return rows


def interleaved(ours, peer, repeat):
    """Medians of ``repeat`` alternating runs (ours, peer, ours, ...): on a
    shared machine a burst of other work then hits both sides alike."""
    import resource

    def children_cpu():  # user + system seconds of finished children
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    t_ours, t_peer, cpu_ours, cpu_peer = [], [], [], []
    for _ in range(repeat):
        for run, times, cpus in ((ours, t_ours, cpu_ours),
                                 (peer, t_peer, cpu_peer)):
            before = children_cpu()
            times.append(run())
            cpus.append(children_cpu() - before)
    print(f"interleaved runs (wall s): ours {t_ours}, peer {t_peer}; CPU s "
          f"(user + system, all threads): ours {cpu_ours}, peer {cpu_peer}; "
          f"median CPU ratio {statistics.median(cpu_peer) / statistics.median(cpu_ours):.2f}; "
          f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return statistics.median(t_ours), statistics.median(t_peer)


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
    parser.add_argument("--component-repeat", type=int, default=31,
                        help="rounds of the components rows (milliseconds "
                        "a call: more rounds steady their medians on a "
                        "shared machine for little time)")
    parser.add_argument("--operations", nargs="+",
                        default=["components", "costdistance", "mst",
                                 "segments"])
    parser.add_argument("--threads", type=int, nargs="*", default=[],
                        help="thread counts for the scaling table (at the "
                        "largest size)")
    parser.add_argument("--masks", nargs="+",
                        help="component masks to run (default: all)")
    parser.add_argument("--component-peers", nargs="+",
                        help="components peers to time, by part of their "
                        "name: scipy, OpenCV, cc3d (default: all installed)")
    parser.add_argument("--cost-peers", nargs="+",
                        help="cost distance peers to run, by part of their "
                        "name (default: all installed)")
    parser.add_argument("--scaling-cost", nargs="+",
                        default=["heap", "blocks"],
                        help="cost distance searches in the scaling table: "
                        "heap, blocks, small-blocks, auto (the one solve "
                        "picks), none; a trailing <=2 runs one at 1 and 2 "
                        "threads only")
    parser.add_argument("--scaling-components", choices=["yes", "no"],
                        default="yes",
                        help="components and OpenCV in the scaling table")
    parser.add_argument("--qgis", action="store_true",
                        help="also time qgis_process against GRASS")
    parser.add_argument("--json", help="write the rows to this JSON file")
    parser.add_argument("--write", action="store_true",
                        help="append the table to docs/benchmarks.md")
    args = parser.parse_args()
    threads = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory(prefix="gridgraph-bench-") as folder:
        for size in args.sizes:
            if "components" in args.operations:
                rows.extend(report(bench_components(
                    size, args.component_repeat, threads, args.masks,
                    args.component_peers)))
            if "costdistance" in args.operations:
                rows.extend(report(bench_cost_distance(
                    size, args.repeat, folder, args.cost_peers)))
            if "mst" in args.operations:
                rows.extend(report(bench_mst(size, args.repeat)))
            if "segments" in args.operations:
                rows.extend(report(bench_segments(size, args.repeat)))
            if args.qgis:
                rows.extend(bench_qgis_process(size, args.repeat, folder))
            print(f"done {size}", file=sys.stderr, flush=True)
    scaling = thread_scaling(max(args.sizes), args.threads, args.repeat,
                             args.scaling_cost,
                             args.scaling_components == "yes") \
        if args.threads else []
    table = ["| operation | peer | size | GridGraph (s) | peer (s) | peer / GridGraph | check | GridGraph CPU time |",
             "|---|---|---|---|---|---|---|---|"]
    for name, peer, size, t_ours, t_peer, check, usage in rows:
        table.append(f"| {name} | {peer} | {size}² | {t_ours:.3f} | {t_peer:.3f} | "
                     f"{t_peer / t_ours:.2f}× | {check} | {usage_text(usage)} |")
    if scaling:
        keys = [k for k in scaling[0] if k != "threads"]
        table += ["", "| threads | " + " | ".join(f"{k} (s)" for k in keys)
                  + " |", "|---" * (len(keys) + 1) + "|"]
        for row in scaling:
            table.append(f"| {row['threads']} | "
                         + " | ".join(f"{row.get(k, float('nan')):.3f}"
                                      for k in keys) + " |")
    load = os.getloadavg()
    header = (f"## CPU, {datetime.date.today().isoformat()}\n\n{machine()}; "
              f"{threads} CPUs in the affinity mask; load average "
              f"{load[0]:.2f} at the end; interleaved A/B runs, median of "
              f"{args.repeat} ({args.component_repeat} for the components "
              "rows against peers) "
              "after a warm-up each; fractal rasters "
              "(tests/rasters.py).\n")
    text = header + "\n" + "\n".join(table) + "\n"
    print(text)
    if args.json:
        with open(args.json, "w") as out:
            # rows as bench/plot.py reads them; our CPU times beside
            json.dump({"rows": [r[:6] for r in rows],
                       "usage": [r[6] for r in rows], "scaling": scaling,
                       "header": header}, out, indent=1)
    if args.write:
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
