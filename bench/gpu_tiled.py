"""The tiled path on the GPU machine (bench/gpu.py's ``tiled`` section): CUDA backend at the
40-ft Neuse size, parity against the CPU backend, phase times and where the threads spend them."""

import json
import os
import sys
import time

import numpy as np

from gpu_tools import PhaseClock, PhaseProgress, ThreadSampler, log

HERE = os.path.dirname(os.path.abspath(__file__))


# per-tile functions of the tiled MST (mstfast): each call's wall time with --tiled-clock
MST_TILED_PHASES = {
    "gridgraph.core.mst.tiled.leaf": [
        "compress_tile_bands", "_low_bits_from_ids", "_local_ids", "valid_cells"],
    "gridgraph.core.mst.tiled.expand": [
        "_final_mask", "walk_tile_forest", "_border_pieces", "_mask_weights",
        "sum_parts", "valid_cells", "orient_pieces", "_surviving", "tile_pieces", "tile_finish"],
    "gridgraph.core.mst.tiled.driver": [
        "leaf_round", "merge_hierarchy", "separator_edges", "split_removed", "pieces_round",
        "finish_round", "leaf_tile"],
    "gridgraph.core.mst._cuda": ["spanning_forest", "forest_low_bits", "copy_to_host",
                                 "copy_to_device"],
}


def _same_outputs(a, b, names=("accumulated", "direction", "allocation")):
    """Every output of two cost distance results equal (dtype and cells, NaN equal), read
    in bands of 1024 rows."""
    for name in names:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        if x.dtype != y.dtype or x.shape != y.shape or not all(
                np.array_equal(x[r:r + 1024], y[r:r + 1024], equal_nan=True)
                for r in range(0, x.shape[0], 1024)):
            return False
    return True


NEUSE40 = (17630, 12555)


def neuse40_dem(workdir):
    """bench/scale.py's synthetic DEM at the 40-ft Neuse size in ``workdir`` (made once):
    its path."""
    sys.path.insert(0, HERE)
    import scale
    os.makedirs(workdir, exist_ok=True)
    raster = os.path.join(workdir, f"dem-{NEUSE40[0]}x{NEUSE40[1]}.npy")
    if not os.path.exists(raster):
        start = time.perf_counter()
        scale.synthetic_dem(raster, NEUSE40)
        log(f"DEM written in {time.perf_counter() - start:.1f} s")
    return raster


def _abba(workdir, variants, turns, run, label, compared, results):
    """``run(value, out_dir)`` -> ``(result, entry fields)`` for each of ``variants`` (name ->
    value, the first one first), ABBA for ``turns`` turns, each run writing into a folder of
    its own in ``workdir`` (removed after it, the first run's at the end); every run's
    ``compared`` outputs compared with the first run's.  One entry a run into ``results``."""
    import shutil
    import tempfile

    names = list(variants)
    order = [name for turn in range(turns)
             for name in (names if turn % 2 == 0 else names[::-1])]
    with tempfile.TemporaryDirectory(dir=workdir) as first_out:
        first = None
        for k, name in enumerate(order):
            out = first_out if first is None else tempfile.mkdtemp(dir=workdir)
            try:
                start = time.perf_counter()
                result, fields = run(variants[name], out)
                entry = dict(operation=f"{label}, {name} (run {k + 1})",
                             end_to_end_s=time.perf_counter() - start,
                             hops_visits=result.hops_visits, tile_solves=result.tile_solves,
                             **fields)
                if first is None:
                    first = result
                else:
                    entry["identical_to_run_1"] = _same_outputs(result, first, compared)
                    del result
            finally:
                if out != first_out:
                    shutil.rmtree(out, ignore_errors=True)
            results.append(entry)
            log(json.dumps(entry, default=float))
        del first


def _warm_up_cost_distance(dem, workdir, outputs_sets):
    """The CUDA kernels of the tiled cost distance compiled outside the timing: a small run
    for each set of outputs."""
    import tempfile

    from gridgraph.core import cost_distance
    small = np.ascontiguousarray(dem[:300, :300])
    for outputs in outputs_sets:
        with tempfile.TemporaryDirectory(dir=workdir) as out:
            cost_distance(small, [(150, 150)], 8, backend="cuda", tile_size=128,
                          out_dir=out, outputs=outputs)


def bench_tiled_hops_ab(workdir, turns, results, ties=False):
    """The tiled cost distance on the GPU at full size (as bench_tiled's timed run) with its
    trees read without the hops first (rounds.HOPS_ONLY_FOR_TIES, the default since the
    twentieth session) against the hops rounds always run (before), ABBA for ``turns`` turns:
    end-to-end seconds, phase bounds, hops visits, and every output compared with the first
    run's.  ``ties``: on the DEM rounded down to whole units (bench/scale.py's
    integer_dem), whose path sums tie everywhere: the first pass stops at once and the hops
    rounds run."""
    sys.path.insert(0, HERE)
    import scale

    from gridgraph.core import cost_distance
    from gridgraph.core.costdistance import rounds
    path = neuse40_dem(workdir)
    dem = np.load(scale.integer_dem(path) if ties else path, mmap_mode="r")
    bounds = [rounds.SURVEY_SPAN[1], rounds.DISTANCE_SPAN[1], rounds.HOPS_SPAN[1],
              rounds.LABEL_SPAN[1], 1.0]
    _warm_up_cost_distance(dem, workdir, [None])

    def run(hops_only_for_ties, out):
        rounds.HOPS_ONLY_FOR_TIES = hops_only_for_ties
        progress = PhaseProgress(bounds)
        result = cost_distance(dem, [(NEUSE40[0] // 2, NEUSE40[1] // 2)], 8, backend="cuda",
                               memory_limit_mb=4096, out_dir=out, progress=progress)
        return result, dict(phase_bounds_s={str(b): round(t, 2)
                                            for b, t in progress.passed.items()})

    default = rounds.HOPS_ONLY_FOR_TIES
    try:
        _abba(workdir, {"hops only for ties": True, "hops always (before)": False}, turns,
              run, "tiled costdistance, cuda, 17630 x 12555 (221M cells), limit 4096 MB"
              + (", DEM rounded down (ties)" if ties else ""),
              ("accumulated", "direction", "allocation"), results)
    finally:
        rounds.HOPS_ONLY_FOR_TIES = default


def bench_tiled_one_id(workdir, turns, results):
    """The tiled cost distance on the GPU at full size with one source id: all three outputs
    (trees read for the direction) against the accumulated cost and the allocation (no tree
    read: the id wherever the distance is finite), ABBA for ``turns`` turns; the accumulated
    cost and the allocation compared with the first (all-outputs) run's."""
    from gridgraph.core import cost_distance
    dem = np.load(neuse40_dem(workdir), mmap_mode="r")
    variants = {"all outputs": ("accumulated", "direction", "allocation"),
                "accumulated and allocation (no tree)": ("accumulated", "allocation")}
    _warm_up_cost_distance(dem, workdir, list(variants.values()))

    def run(outputs, out):
        return cost_distance(dem, [(NEUSE40[0] // 2, NEUSE40[1] // 2)], 8, backend="cuda",
                             memory_limit_mb=4096, out_dir=out, outputs=outputs), {}

    _abba(workdir, variants, turns, run,
          "tiled costdistance, cuda, 17630 x 12555 (221M cells), limit 4096 MB, one source id",
          ("accumulated", "allocation"), results)


def bench_tiled(workdir, operations, results, clock_mst=False, cpu_components=False):
    """The tiled path on the GPU machine at the 40-ft Neuse size (17630 x 12555, 221M cells,
    bench/scale.py's synthetic DEM, MEMORY_LIMIT_MB=4096, outputs to .npy files), CUDA
    backend, in this process: wall time, the time at each phase bound of the driver's
    progress, and where the threads spent it (sampled every 10 ms)."""
    import tempfile

    from gridgraph.core import connected_components, cost_distance, minimum_spanning_tree
    from gridgraph.core.costdistance import rounds
    shape = NEUSE40
    dem = np.load(neuse40_dem(workdir), mmap_mode="r")
    small = np.ascontiguousarray(dem[:300, :300])
    runs = {
        "costdistance": (lambda progress, out: cost_distance(
            dem, [(shape[0] // 2, shape[1] // 2)], 8, backend="cuda", memory_limit_mb=4096,
            out_dir=out, progress=progress),
            [rounds.SURVEY_SPAN[1], rounds.DISTANCE_SPAN[1], rounds.HOPS_SPAN[1],
             rounds.LABEL_SPAN[1], 1.0]),
        "components": (lambda progress, out: connected_components(
            dem, 8, "equal", backend="cuda", memory_limit_mb=4096, out_dir=out,
            progress=progress), [0.45, 0.5, 1.0]),
        "mst": (lambda progress, out: minimum_spanning_tree(
            dem, 8, "max", backend="cuda", memory_limit_mb=4096, out_dir=out,
            progress=progress, edges=False), [0.5, 0.6, 0.7, 0.85, 1.0]),
    }
    # warm-up: every kernel compiled on a small tiled run
    for operation in operations:
        with tempfile.TemporaryDirectory(dir=workdir) as out:
            function, _ = runs[operation]
            small_runs = dict(
                costdistance=lambda: cost_distance(small, [(150, 150)], 8, backend="cuda",
                                                   tile_size=128, out_dir=out),
                components=lambda: connected_components(small, 8, "equal", backend="cuda",
                                                        tile_size=128, out_dir=out),
                mst=lambda: minimum_spanning_tree(small, 8, "max", backend="cuda",
                                                  tile_size=128, out_dir=out, edges=False))
            small_runs[operation]()
    if "costdistance" in operations:
        # parity: tiled on the GPU against in memory on the CPU, odd shapes whose tiles of
        # 1024 leave partial ones, a smooth cost and integer plateaus (zero costs, ties),
        # and a 4096² crop (4 x 4 tiles)
        crop = np.ascontiguousarray(dem[1000:3501, 2000:5003], dtype=np.float32)
        square = np.ascontiguousarray(dem[5000:9096, 3000:7096], dtype=np.float32)
        sources = [(10, 10), (1200, 1500), (2400, 2990)]
        for name, cost, connectivities in (
                ("fractal", crop, (8, 16)), ("plateaus", np.floor(crop / 150), (8, 16)),
                ("fractal 4096x4096 crop", square, (8,))):
            for connectivity in connectivities:
                with tempfile.TemporaryDirectory(dir=workdir) as out:
                    gpu_tiled = cost_distance(cost, sources, connectivity, backend="cuda",
                                              tile_size=1024, out_dir=out)
                    cpu = cost_distance(cost, sources, connectivity, backend="cpu")
                    same = all(np.array_equal(np.asarray(getattr(gpu_tiled, k)),
                                              getattr(cpu, k), equal_nan=True)
                               and np.asarray(getattr(gpu_tiled, k)).dtype
                               == getattr(cpu, k).dtype
                               for k in ("accumulated", "direction", "allocation"))
                    results.append(dict(
                        operation=f"tiled cost distance on the GPU (tiles of 1024) vs in memory "
                                  f"on the CPU, {name} 2501x3003, {connectivity}-conn, 3 "
                                  "sources (parity)", identical_to_cpu=bool(same)))
                    log(json.dumps(results[-1]))
                    del gpu_tiled, cpu
    if "components" in operations:
        # parity: tiled on the GPU (labels kept on the device) against in memory on the CPU
        from gridgraph.core.components import _cuda_tiled as components_tiled
        crop = np.ascontiguousarray(dem[1000:3501, 2000:5003], dtype=np.float32)
        plateaus = np.floor(crop / 150)
        mask = (np.random.default_rng(1).random(crop.shape) < 0.6).astype(np.uint8)
        for name, values, connectivity, mode, keeps in (
                ("plateaus", plateaus, 4, "equal", (None,)),
                ("plateaus", plateaus, 8, "equal", (None, 0)),
                ("random 0/1", mask, 8, "nonzero", (None,))):
            for keep in keeps:
                components_tiled.KEEP_BYTES = keep
                with tempfile.TemporaryDirectory(dir=workdir) as out:
                    gpu_tiled = connected_components(values, connectivity, mode,
                                                     backend="cuda", tile_size=1024,
                                                     out_dir=out)
                    cpu = connected_components(values, connectivity, mode,
                                               backend="cpu")
                    same = (gpu_tiled.count == cpu.count and np.array_equal(
                        np.asarray(gpu_tiled.labels), cpu.labels))
                components_tiled.KEEP_BYTES = None
                results.append(dict(
                    operation=f"tiled components on the GPU (tiles of 1024"
                              f"{', labelled twice' if keep == 0 else ''}) vs in "
                              f"memory on the CPU, {name} 2501x3003, {connectivity}-conn, "
                              f"{mode} (parity)", identical_to_cpu=bool(same)))
                log(json.dumps(results[-1]))
                del gpu_tiled, cpu
    if "mst" in operations:
        # parity (mstfast): tiled on the GPU (tiles of 1024, partial ones at the edges)
        # against in memory on the CPU, with and without the edge list, 8- and 4-connected
        crop = np.ascontiguousarray(dem[1000:3501, 2000:5003], dtype=np.float32)
        for connectivity in (8, 4):
            cpu = minimum_spanning_tree(crop, connectivity, "max", backend="cpu")
            for keep in (False, True):
                with tempfile.TemporaryDirectory(dir=workdir) as out:
                    gpu_tiled = minimum_spanning_tree(crop, connectivity, "max", backend="cuda",
                                                      tile_size=1024, out_dir=out, edges=keep)
                    same = bool(gpu_tiled.trees == cpu.trees
                                and np.float64(gpu_tiled.total_weight).tobytes()
                                == np.float64(cpu.total_weight).tobytes()
                                and np.array_equal(np.asarray(gpu_tiled.parent_direction),
                                                   cpu.parent_direction, equal_nan=True))
                    if keep:
                        same = same and np.array_equal(np.asarray(gpu_tiled.edges), cpu.edges) \
                            and np.array_equal(np.asarray(gpu_tiled.weights).view(np.uint32),
                                               cpu.weights.view(np.uint32))
                    results.append(dict(
                        operation=f"tiled MST on the GPU (tiles of 1024) vs in memory on the "
                                  f"CPU, 2501x3003, {connectivity}-conn max, edges={keep} "
                                  "(parity)", identical_to_cpu=bool(same)))
                    log(json.dumps(results[-1]))
                    del gpu_tiled
            del cpu
    for operation in operations:
        function, bounds = runs[operation]
        with tempfile.TemporaryDirectory(dir=workdir) as out:
            progress = PhaseProgress(bounds)
            clock = PhaseClock()
            if clock_mst and operation == "mst":
                import importlib
                for module_name, names in MST_TILED_PHASES.items():
                    module = importlib.import_module(module_name)
                    clock.wrap(module, [n for n in names if hasattr(module, n)])
            try:
                with ThreadSampler() as sampler:
                    start = time.perf_counter()
                    result = function(progress, out)
                    elapsed = time.perf_counter() - start
            finally:
                clock.restore()
            entry = dict(operation=f"tiled {operation}, cuda, 17630 x 12555 (221M cells), "
                                   "limit 4096 MB", end_to_end_s=elapsed,
                         phase_bounds_s={str(b): round(t, 2)
                                         for b, t in progress.passed.items()},
                         thread_seconds=sampler.top())
            if clock.times:
                entry["function_seconds"] = {k: round(v, 3) for k, v in sorted(
                    clock.times.items(), key=lambda kv: -kv[1])}
            if operation == "mst":
                from gridgraph.core.mst import tiled as mst_tiled
                entry.update(trees=int(result.trees), total_weight=float(result.total_weight),
                             tile_size=mst_tiled.plan(dem, 1, None, 4096, None).grid.tile_size)
            if operation == "costdistance":
                entry["tile_solves"] = getattr(result, "tile_solves", None)
            if cpu_components and operation in ("components", "costdistance"):
                # the CPU backend on the same machine and raster: every core (a thread pool
                # of os.cpu_count() tile workers), outputs compared cell for cell
                from concurrent.futures import ThreadPoolExecutor
                cpu_runs = dict(
                    components=lambda out, pool: connected_components(
                        dem, 8, "equal", backend="cpu", memory_limit_mb=4096, out_dir=out,
                        executor=pool),
                    costdistance=lambda out, pool: cost_distance(
                        dem, [(shape[0] // 2, shape[1] // 2)], 8, backend="cpu",
                        memory_limit_mb=4096, out_dir=out, executor=pool))
                with tempfile.TemporaryDirectory(dir=workdir) as cpu_out, \
                        ThreadPoolExecutor(os.cpu_count()) as pool:
                    start = time.perf_counter()
                    cpu_result = cpu_runs[operation](cpu_out, pool)
                    entry["cpu_backend_s"] = time.perf_counter() - start
                    entry["cpu_backend"] = f"tiled, {os.cpu_count()} tile workers (threads)"
                    if operation == "components":
                        names = ("labels",)
                        same = cpu_result.count == result.count
                    else:
                        names = ("accumulated", "direction", "allocation")
                        same = True
                    for name in names:
                        a, b = np.asarray(getattr(cpu_result, name)), np.asarray(
                            getattr(result, name))
                        same = same and a.dtype == b.dtype and all(
                            np.array_equal(a[r:r + 1024], b[r:r + 1024], equal_nan=True)
                            for r in range(0, a.shape[0], 1024))
                    entry["identical_to_cpu_backend"] = bool(same)
                    del cpu_result
            results.append(entry)
            log(json.dumps(entry, default=float))
            del result
