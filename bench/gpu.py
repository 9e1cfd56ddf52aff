"""GPU benchmark of the CUDA backend, with parity checks against the CPU backend.

One run on the GPU machine checks and times every operation:

* connected components: density-0.6 random mask, 4- and 8-connected, ``nonzero`` mode, plus
  ``equal`` mode on a few-valued raster; labels identical to the CPU backend (full size); timed
  against cupyx.scipy.ndimage.label in the same run;
* minimum spanning tree: fractal float32 surface, 4- and 8-connected, ``max`` weight; edges and
  weights identical to the CPU backend (at --parity-size);
* cost distance: fractal cost, one source in the centre, 8-connected; accumulated cost,
  predecessors and allocation identical to the CPU backend (canonical ties), and
  path-consistent (at --parity-size); CPU time at --parity-size (and at full size with
  --cpu-full); plus integer-plateau rasters (exact ties everywhere; zero-cost regions on a
  small one) with three source ids at 4/8/16-connectivity, identical to the CPU, and the tiled
  path's per-tile solve (``solve_seeded``) from the sources, identical to the in-memory
  distances.

End to end through the public API (``*_e2e`` sections): ``minimum_spanning_tree``,
``cost_distance`` and ``connected_components`` with ``backend="cuda"`` and ``"cpu"`` in the same
run, numpy in and numpy out, every output identical (MST edges, weights, parent directions, trees,
total weight; cost distance costs, directions, allocation; labels and their dtype), parity at
--parity-size and on odd shapes, times and phases at --size; ``transfers`` measures the copy
bandwidths (device to device: the floor used for the table; host to device; device to host into
fresh, touched and pinned memory).

Times: "device" = inputs already on the GPU, outputs left there (median of --repeat runs after a
warm-up, wall clock after synchronising); "end to end" = numpy in, numpy out (one run; the
``*_e2e`` sections: median after a warm-up);
"first call" = the first call in a fresh process (kernel compilation, or loading numba's cache).
Each device time is also given as a multiple of its memory-bandwidth floor: the bytes the
operation must at least read and write once, divided by --bandwidth (4.25 TB/s, the H200's
device-to-device copy).

    python bench/gpu.py --size 16384 --parity-size 4096 --json out.json --markdown out.md
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core._common import Progress  # noqa: E402
from gpu_tiled import bench_tiled, bench_tiled_hops_ab, bench_tiled_one_id  # noqa: E402
from gpu_tools import PhaseClock, log, median_time, wall  # noqa: E402

warnings.filterwarnings("ignore", message=".*[Gg]rid size.*")
warnings.filterwarnings("ignore", message=".*under-utilization.*")


def gpu_fractal(size, seed):
    """tests/rasters.fractal_surface synthesised with cupy's FFT (same recipe, GPU rounding)."""
    import cupy
    rng = np.random.default_rng(seed)
    fy = cupy.fft.fftfreq(size)[:, None]
    fx = cupy.fft.rfftfreq(size)[None, :]
    radius = cupy.hypot(fy, fx)
    radius[0, 0] = 1.0
    amplitude = radius ** -1.5
    amplitude[0, 0] = 0.0
    phase = cupy.asarray(rng.uniform(0, 2 * np.pi, size=amplitude.shape))
    surface = cupy.fft.irfft2(amplitude * cupy.exp(1j * phase), s=(size, size))
    low, high = float(surface.min()), float(surface.max())
    out = (1.0 + 999.0 * (surface - low) / (high - low)).astype(cupy.float32)
    del surface, phase, amplitude, radius
    return out


def first_call_times():
    """Each operation's first call in a fresh process (compile or cache load)."""
    code = r"""
import json, time, numpy as np, warnings
warnings.filterwarnings("ignore")
from gridgraph.core._common import Progress
from gridgraph.core.components import _cuda as cc
from gridgraph.core.mst import _cuda as mst
from gridgraph.core.costdistance import _cuda as cd, _step_lengths
out = {}
grid = (np.arange(256 * 256).reshape(256, 256) % 7).astype(np.uint8)
valid = np.ones(grid.shape, bool)
t = time.perf_counter(); cc.label(grid, valid, 4, "nonzero", Progress())
out["components"] = time.perf_counter() - t
t = time.perf_counter(); mst.spanning_forest(grid.astype(np.float32), valid, 4, 0, np.float32, Progress())
out["mst"] = time.perf_counter() - t
t = time.perf_counter()
cd.solve(grid.astype(np.float32) + 1, valid, np.array([[5, 5]]), np.array([1]), 8, _step_lengths(8, None), np.inf, Progress())
out["costdistance"] = time.perf_counter() - t
print(json.dumps(out))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ))
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_cost_paths(accumulated, predecessor, allocation, cost, steps, sample, rng):
    """Path consistency on ``sample`` random reached cells and along their paths' first steps."""
    from gridgraph.core.costdistance import NEIGHBOUR_OFFSETS
    rows, cols = accumulated.shape
    reached = np.flatnonzero(predecessor.reshape(-1) >= 0)
    picks = rng.choice(reached, size=min(sample, len(reached)), replace=False)
    r, c = picks // cols, picks % cols
    p = predecessor[r, c].astype(np.int64)
    ar, ac = r + NEIGHBOUR_OFFSETS[p, 0], c + NEIGHBOUR_OFFSETS[p, 1]
    step = (cost[ar, ac].astype(np.float64) + cost[r, c].astype(np.float64)) * (0.5 * steps[p])
    consistent = np.all(accumulated[r, c] == accumulated[ar, ac] + step)
    same_source = np.all(allocation[r, c] == allocation[ar, ac])
    return bool(consistent and same_source)


def bench_components(size, repeat, bandwidth, results):
    import cupy
    import cupyx.scipy.ndimage as cndi
    from numba import cuda

    from gridgraph.core.components import _cpu, _cuda
    rng = np.random.default_rng(0)
    mask = (rng.random((size, size), dtype=np.float32) < 0.6).view(np.uint8)
    valid = np.ones(mask.shape, bool)
    d_mask = cuda.to_device(mask.reshape(-1))
    d_valid = cuda.to_device(valid.reshape(-1).view(np.uint8))
    c_mask = cupy.asarray(d_mask).reshape(size, size)
    for connectivity in (4, 8):
        name = f"components {connectivity}-conn, density 0.6, {size}²"
        stats = {}
        _cuda.label_device(d_mask, d_valid, size, size, connectivity, True)  # warm-up
        _cuda.label_device(d_mask, d_valid, size, size, connectivity, True, stats=stats)
        device, times, (d_labels, count) = median_time(
            lambda: _cuda.label_device(d_mask, d_valid, size, size, connectivity, True), repeat)
        structure = cupy.ones((3, 3)) if connectivity == 8 else None
        peer, _, (c_labels, peer_count) = median_time(
            lambda: cndi.label(c_mask, structure=structure), repeat)
        end_to_end, (labels, _) = wall(
            lambda: _cuda.label(mask, valid, connectivity, "nonzero", Progress()))
        cpu_time, (cpu_labels, cpu_count) = wall(
            lambda: _cpu.label(mask, valid, connectivity, "nonzero", Progress()))
        same = bool(cpu_count == count == peer_count and np.array_equal(labels, cpu_labels))
        floor = size * size * (1 + 4) / bandwidth  # read the mask, write int32 labels
        results.append(dict(
            operation=name, device_s=device, device_runs=times, end_to_end_s=end_to_end,
            cpu_s=cpu_time, peer="cupyx.scipy.ndimage.label", peer_s=peer,
            ratio_to_peer=device / peer, floor_s=floor, times_floor=device / floor,
            components=int(count), identical_to_cpu=same, phases=stats))
        log(json.dumps(results[-1], default=float))
        del d_labels, c_labels
    # ``equal`` mode on a few-valued raster, checked against the CPU backend
    values = rng.integers(0, 4, (size // 4, size // 4)).astype(np.int16)
    valid = np.ones(values.shape, bool)
    end_to_end, (labels, count) = wall(lambda: _cuda.label(values, valid, 8, "equal", Progress()))
    cpu_time, (cpu_labels, cpu_count) = wall(
        lambda: _cpu.label(values, valid, 8, "equal", Progress()))
    results.append(dict(
        operation=f"components 8-conn equal mode, 4 values, {size // 4}²",
        end_to_end_s=end_to_end, cpu_s=cpu_time, components=int(count),
        identical_to_cpu=bool(count == cpu_count and np.array_equal(labels, cpu_labels))))
    log(json.dumps(results[-1], default=float))


def bench_mst(size, parity_size, repeat, bandwidth, results):
    from numba import cuda

    from gridgraph.core.mst import _cpu, _cuda
    # parity at parity_size, with the CPU backend, every connectivity and weight
    small = fractal_surface((parity_size, parity_size), seed=3)
    small_valid = np.ones(small.shape, bool)
    small_valid[::97, ::89] = False
    for connectivity in (4, 8):
        for weight_index in (0, 3):
            gpu_time, (edges, weights) = wall(lambda: _cuda.spanning_forest(
                small, small_valid, connectivity, weight_index, np.float32, Progress()))
            cpu_time, (cpu_edges, cpu_weights) = wall(lambda: _cpu.spanning_forest(
                small, small_valid, connectivity, weight_index, np.float32, Progress()))
            same = bool(np.array_equal(edges, cpu_edges)
                        and np.array_equal(weights.view(np.uint32),
                                           cpu_weights.view(np.uint32)))
            results.append(dict(
                operation=f"mst {connectivity}-conn {['max', 'min', 'mean', 'absdiff'][weight_index]}"
                          f" float32 fractal {parity_size}² (parity)",
                end_to_end_s=gpu_time, cpu_s=cpu_time, edges=len(edges),
                identical_to_cpu=same))
            log(json.dumps(results[-1], default=float))
    # integer plateaus: ties everywhere
    plateau = (small // 50).astype(np.int16)
    for connectivity in (4, 8):
        edges, weights = _cuda.spanning_forest(plateau, small_valid, connectivity, 0,
                                               np.float32, Progress())
        cpu_edges, cpu_weights = _cpu.spanning_forest(plateau, small_valid, connectivity, 0,
                                                      np.float32, Progress())
        results.append(dict(
            operation=f"mst {connectivity}-conn max int16 plateaus {parity_size}² (parity)",
            edges=len(edges), identical_to_cpu=bool(np.array_equal(edges, cpu_edges)
                                                    and np.array_equal(weights, cpu_weights))))
        log(json.dumps(results[-1], default=float))
    del small, plateau

    d_values = cuda.as_cuda_array(gpu_fractal(size, 4).reshape(-1))
    d_valid = cuda.to_device(np.ones(size * size, np.uint8))
    for connectivity in (4, 8):
        stats = {}
        _cuda.spanning_forest_device(d_values, d_valid, size, size, connectivity, 0,
                                     np.float32, stats=stats)
        device, times, (d_edges, d_weights, k) = median_time(
            lambda: _cuda.spanning_forest_device(d_values, d_valid, size, size, connectivity,
                                                 0, np.float32), repeat)
        n_edges = (2 if connectivity == 4 else 4) * size * size
        # read the values once, write k edges (2 x int64) and weights (float32)
        floor = (size * size * 4 + k * (16 + 4)) / bandwidth
        results.append(dict(
            operation=f"mst {connectivity}-conn max float32 fractal {size}² ({n_edges / 1e6:.0f}M edges)",
            device_s=device, device_runs=times, floor_s=floor, times_floor=device / floor,
            edges=int(k), phases=stats))
        log(json.dumps(results[-1], default=float))
        del d_edges, d_weights
    del d_values, d_valid


def bench_transfers(results, size_bytes=1 << 30):
    """The copy bandwidths that bound every end-to-end time: device to device (the kernels'
    floor), host to device from ordinary (pageable) memory, and device to host into fresh
    pageable memory (page faults included), into touched pageable memory, and into pinned
    memory."""
    import cupy
    from numba import cuda
    n = size_bytes // 4
    device = cupy.arange(n, dtype=cupy.float32)
    copy = cupy.empty_like(device)
    copy[...] = device
    cuda.synchronize()
    d2d, _, _ = median_time(lambda: copy.__setitem__(Ellipsis, device), 5)
    host = np.random.default_rng(0).random(n, dtype=np.float32)
    h2d, _, d_host = median_time(lambda: cuda.to_device(host), 3)
    del d_host
    d_array = cuda.as_cuda_array(device)
    fresh, _, _ = median_time(lambda: d_array.copy_to_host(), 3)
    touched = np.ones(n, dtype=np.float32)
    into_touched, _, _ = median_time(lambda: d_array.copy_to_host(touched), 3)
    pinned = cuda.pinned_array(n, dtype=np.float32)
    into_pinned, _, _ = median_time(lambda: d_array.copy_to_host(pinned), 3)
    alloc_pinned, _, _ = median_time(lambda: cuda.pinned_array(n, dtype=np.float32), 2)
    entry = dict(operation=f"copies of {size_bytes / 2**30:.0f} GiB",
                 d2d_bytes_per_s=2 * size_bytes / d2d, h2d_pageable_bytes_per_s=size_bytes / h2d,
                 d2h_fresh_bytes_per_s=size_bytes / fresh,
                 d2h_touched_bytes_per_s=size_bytes / into_touched,
                 d2h_pinned_bytes_per_s=size_bytes / into_pinned,
                 pinned_alloc_s=alloc_pinned)
    results.append(entry)
    log(json.dumps(entry, default=float))
    del device, copy, pinned
    return entry


def bench_mst_end_to_end(size, parity_size, repeat, results):
    """The public API, numpy in and numpy out: every output (parent directions, total weight,
    trees, and the edge list when asked) identical to the CPU backend at parity_size and on odd
    shapes with nodata; end-to-end times at ``size`` for the CUDA and CPU backends, and the
    CUDA run's phases."""
    from gridgraph.core import minimum_spanning_tree
    from gridgraph.core.mst import _cuda

    def same(a, b, edges=True):
        ok = (a.trees == b.trees
              and np.float64(a.total_weight).tobytes() == np.float64(b.total_weight).tobytes()
              and np.array_equal(a.parent_direction, b.parent_direction, equal_nan=True))
        if edges:
            ok = ok and np.array_equal(a.edges, b.edges) and np.array_equal(
                a.weights.view(np.uint8), b.weights.view(np.uint8))
        return bool(ok)

    rng = np.random.default_rng(21)
    small = fractal_surface((parity_size, parity_size), seed=3)
    small[::97, ::89] = np.nan
    cases = [(f"fractal {parity_size}², NaN holes", small, None)]
    plateau = (small // 50).astype(np.float32)
    plateau[np.isnan(small)] = -1
    cases.append((f"plateaus {parity_size}², nodata -1", plateau, -1))
    for shape in ((1000, 777), (37, 4099), (4099, 37)):
        odd = rng.integers(0, 6, shape).astype(np.int16)
        odd[rng.random(shape) < 0.3] = 9  # many trees
        cases.append((f"int16 {shape[0]}x{shape[1]}, 30% nodata", odd, 9))
    for name, values, nodata in cases:
        for connectivity in (4, 8):
            for weight in ("max", "absdiff"):
                gpu = minimum_spanning_tree(values, connectivity, weight, nodata, backend="cuda")
                cpu = minimum_spanning_tree(values, connectivity, weight, nodata, backend="cpu")
                lean = minimum_spanning_tree(values, connectivity, weight, nodata,
                                             backend="cuda", edges=False)
                results.append(dict(
                    operation=f"mst public API {connectivity}-conn {weight}, {name} (parity)",
                    trees=gpu.trees, identical_to_cpu=same(gpu, cpu) and same(lean, cpu, False)))
                log(json.dumps(results[-1], default=float))
    del small, plateau, cases

    values = gpu_fractal(size, 4).get()
    for connectivity in (4, 8):
        for want_edges in (False, True):
            run = lambda: minimum_spanning_tree(values, connectivity, "max",  # noqa: E731
                                                backend="cuda", edges=want_edges)
            end_to_end, times, gpu = median_time(run, max(2, repeat // 2))
            stats = {}
            _cuda.minimum_spanning_tree(values, None, connectivity, 0, np.float32, want_edges,
                                        Progress(), stats=stats)
            entry = dict(operation=f"mst {connectivity}-conn max, edges={want_edges}, fractal "
                                   f"{size}², numpy in/out (public API)",
                         end_to_end_s=end_to_end, end_to_end_runs=times, phases=stats)
            if connectivity == 4 and not want_edges:
                cpu_time, cpu = wall(lambda: minimum_spanning_tree(
                    values, connectivity, "max", backend="cpu", edges=False))
                entry["cpu_s"] = cpu_time
                entry["identical_to_cpu"] = same(gpu, cpu, False)
                del cpu
            results.append(entry)
            log(json.dumps(results[-1], default=float))
            del gpu
    del values


def bench_components_end_to_end(size, repeat, results):
    """The public API, numpy in and numpy out, CUDA and CPU backends in the same run, labels
    identical; the CUDA run's phases."""
    from gridgraph.core import connected_components
    from gridgraph.core.components import _cuda
    rng = np.random.default_rng(0)
    mask = (rng.random((size, size), dtype=np.float32) < 0.6).view(np.uint8)
    for connectivity in (4, 8):
        run = lambda: connected_components(mask, connectivity, "nonzero",  # noqa: E731
                                           backend="cuda")
        end_to_end, times, gpu = median_time(run, repeat)
        stats = {}
        _cuda.label_array(mask, None, connectivity, "nonzero", Progress(), stats=stats)
        cpu_time, cpu = wall(lambda: connected_components(mask, connectivity, "nonzero",
                                                          backend="cpu"))
        results.append(dict(
            operation=f"components {connectivity}-conn, density 0.6, {size}², numpy in/out "
                      "(public API)",
            end_to_end_s=end_to_end, end_to_end_runs=times, cpu_s=cpu_time, phases=stats,
            labels_dtype=str(gpu.labels.dtype),
            identical_to_cpu=bool(gpu.count == cpu.count
                                  and gpu.labels.dtype == cpu.labels.dtype
                                  and np.array_equal(gpu.labels, cpu.labels))))
        log(json.dumps(results[-1], default=float))
        del gpu, cpu


def bench_cost_distance_end_to_end(size, parity_size, repeat, results, cpu_full):
    """The public API, numpy in and numpy out, all three outputs: identical to the CPU backend
    (costs bit for bit, directions, allocation) at parity_size and on odd shapes with barriers
    and ties; end-to-end times at ``size`` (CPU backend too with --cpu-full) and the CUDA run's
    phases."""
    from gridgraph.core import cost_distance
    from gridgraph.core.costdistance import _cuda_outputs

    def same(a, b):
        return bool(all(np.array_equal(x, y, equal_nan=True) and x.dtype == y.dtype
                        for x, y in zip((a.accumulated, a.direction, a.allocation),
                                        (b.accumulated, b.direction, b.allocation))))

    rng = np.random.default_rng(17)
    cases = []
    fractal = fractal_surface((parity_size, parity_size), seed=1)
    cases.append((f"fractal {parity_size}², 1 source", fractal,
                  np.array([[parity_size // 2, parity_size // 2]]), None))
    plateau = (fractal // 250 + 1).astype(np.uint8)
    plateau[::61, ::53] = 0
    cases.append((f"integer plateaus 1-5 {parity_size}², nodata 0, 3 sources", plateau,
                  np.array([[parity_size // 4, parity_size // 4], [parity_size // 2, 3],
                            [parity_size - 5, parity_size // 3]]), 0))
    for shape in ((1000, 777), (37, 4099)):
        odd = rng.integers(1, 4, shape).astype(np.float32)
        odd[rng.random(shape) < 0.15] = np.nan
        cells = np.argwhere(~np.isnan(odd))[rng.integers(0, 1000, 3)]
        cases.append((f"float32 {shape[0]}x{shape[1]}, 15% NaN, 3 sources, ties", odd, cells,
                      None))
    for name, cost, sources, nodata in cases:
        for connectivity in (4, 8, 16):
            gpu_time, gpu = wall(lambda: cost_distance(cost, sources, connectivity,
                                                       nodata=nodata, backend="cuda"))
            cpu_time, cpu = wall(lambda: cost_distance(cost, sources, connectivity,
                                                       nodata=nodata, backend="cpu"))
            results.append(dict(
                operation=f"cost distance public API {connectivity}-conn, {name} (parity)",
                end_to_end_s=gpu_time, cpu_s=cpu_time, identical_to_cpu=same(gpu, cpu)))
            log(json.dumps(results[-1], default=float))
    del cases, fractal, plateau

    cost = gpu_fractal(size, 1).get()
    source = np.array([[size // 2, size // 2]])
    run = lambda: cost_distance(cost, source, 8, backend="cuda")  # noqa: E731
    end_to_end, times, gpu = median_time(run, max(2, repeat // 2))
    stats = {}
    scan = _cuda_outputs.CostScan(cost, None, stats=stats)
    from gridgraph.core.costdistance import _step_lengths
    scan.solve(source, np.array([1]), 8, _step_lengths(8, None), np.inf,
               ("accumulated", "direction", "allocation"), Progress())
    entry = dict(operation=f"cost distance 8-conn, 1 source, fractal {size}², all outputs, "
                           "numpy in/out (public API)",
                 end_to_end_s=end_to_end, end_to_end_runs=times, phases=stats)
    if cpu_full:
        cpu_time, cpu = wall(lambda: cost_distance(cost, source, 8, backend="cpu"))
        entry["cpu_s"] = cpu_time
        entry["identical_to_cpu"] = same(gpu, cpu)
        del cpu
    results.append(entry)
    log(json.dumps(results[-1], default=float))


def bench_cost_distance(size, parity_size, repeat, bandwidth, cpu_full, results,
                        delta_multipliers=()):
    from numba import cuda

    from gridgraph.core.costdistance import _cpu, _cuda, _step_lengths
    steps = _step_lengths(8, None)
    rng = np.random.default_rng(5)
    for side, with_cpu in ((parity_size, True), (size, cpu_full)):
        if side == parity_size:
            cost = fractal_surface((side, side), seed=1)
        else:
            cost = gpu_fractal(side, 1).get()
        valid = np.ones(cost.shape, bool)
        source = np.array([[side // 2, side // 2]])
        ids = np.array([1])
        d_cost = cuda.to_device(cost.reshape(-1))
        d_valid = cuda.to_device(valid.reshape(-1).view(np.uint8))
        cells = source[:, 0] * side + source[:, 1]
        stats = {}

        def device_run(stats=None, delta=None):
            scratch = cuda.device_array_like(d_cost)
            scratch.copy_to_device(d_cost)
            return _cuda.solve_device(scratch, d_valid, side, side, cells, ids, 8, steps,
                                      np.inf, stats=stats, delta=delta)

        device_run()  # warm-up
        device_run(stats)
        sweep = {}
        for multiplier in delta_multipliers:
            delta = stats["delta"] * multiplier / _cuda.DELTA_TILES
            sweep_stats = {}
            elapsed, _ = wall(lambda: device_run(sweep_stats, delta))
            sweep[f"{multiplier} tiles"] = dict(
                s=elapsed, rounds=sweep_stats["rounds"], buckets=sweep_stats["buckets"],
                tiles_relaxed=sweep_stats["tiles_relaxed"],
                sweeps_per_visit=sweep_stats["sweeps_per_visit"])
            log("delta", multiplier, json.dumps(sweep[f"{multiplier} tiles"]))
        device, times, _ = median_time(device_run, repeat if side == parity_size else
                                       max(2, repeat // 2))
        # the other sweep order (same distances, other sweep counts)
        _cuda.CONSECUTIVE_ROWS = not _cuda.CONSECUTIVE_ROWS
        other_stats = {}
        device_run(other_stats)
        other, _, (other_dist, _, _, _) = median_time(device_run, 2)
        other_dist = other_dist.copy_to_host()
        _cuda.CONSECUTIVE_ROWS = not _cuda.CONSECUTIVE_ROWS
        dist_now = device_run()[0].copy_to_host()
        same_order_free = bool(np.array_equal(other_dist, dist_now, equal_nan=True))
        sweep_order = dict(consecutive_rows_default=_cuda.CONSECUTIVE_ROWS,
                           other_order_device_s=other,
                           other_order_sweeps_per_visit=other_stats["sweeps_per_visit"],
                           other_order_tiles_relaxed=other_stats["tiles_relaxed"],
                           same_distances=same_order_free)
        # the other number of passes over a thread's rows per block-wide barrier
        default_passes = _cuda.PASSES_PER_SWEEP
        _cuda.PASSES_PER_SWEEP = 3 - default_passes
        passes_stats = {}
        device_run(passes_stats)
        two, _, (two_dist, _, _, _) = median_time(device_run, 2)
        _cuda.PASSES_PER_SWEEP = default_passes
        sweep_order.update(default_passes=default_passes, other_passes_device_s=two,
                           other_passes_sweeps_per_visit=passes_stats["sweeps_per_visit"],
                           other_passes_same_distances=bool(np.array_equal(
                               two_dist.copy_to_host(), dist_now, equal_nan=True)))
        log("sweep order", json.dumps(sweep_order, default=float))
        del other_dist, dist_now, two_dist
        end_to_end, gpu_out = wall(lambda: _cuda.solve(
            cost, valid, source, ids, 8, steps, np.inf, Progress()))
        entry = dict(operation=f"cost distance 8-conn, 1 source, fractal {side}²",
                     device_s=device, device_runs=times, end_to_end_s=end_to_end, phases=stats,
                     delta_sweep=sweep, sweep_order=sweep_order)
        # read the costs, write float64 costs, int8 predecessors and the allocation
        entry["floor_s"] = side * side * (4 + 8 + 1 + gpu_out[2].dtype.itemsize) / bandwidth
        entry["times_floor"] = device / entry["floor_s"]
        entry["path_consistent"] = check_cost_paths(*gpu_out, cost, steps, 200000, rng)
        if with_cpu:
            cpu_time, cpu_out = wall(lambda: _cpu.solve(
                cost, valid, source, ids, 8, steps, np.inf, Progress()))
            entry["cpu_s"] = cpu_time
            entry["speedup_vs_cpu_device"] = cpu_time / device
            entry["speedup_vs_cpu_end_to_end"] = cpu_time / end_to_end
            reached = ~np.isnan(cpu_out[0])
            entry["same_reached"] = bool(np.array_equal(reached, ~np.isnan(gpu_out[0])))
            relative = np.abs(gpu_out[0][reached] - cpu_out[0][reached]) / np.maximum(
                np.abs(cpu_out[0][reached]), 1e-300)
            entry["max_relative_difference"] = float(relative.max(initial=0.0))
            entry["bit_identical_cells"] = float(np.mean(gpu_out[0][reached] == cpu_out[0][reached]))
            entry["same_predecessor_share"] = float(np.mean(gpu_out[1] == cpu_out[1]))
            entry["identical_to_cpu"] = identical_cost_outputs(gpu_out, cpu_out)
            del cpu_out
        results.append(entry)
        log(json.dumps(results[-1], default=float))
        del gpu_out, d_cost, d_valid
    bench_cost_distance_ties(parity_size, results)


MST_CPU_PHASES = {
    "gridgraph.core.mst": ["valid_mask"],
    "gridgraph.core.mst._cpu": [
        "_grid_lightest_edges", "_hook_cells", "_contract_cells", "_grid_cut_edges",
        "_list_rounds", "_list_lightest", "_list_hook", "_list_contract", "_sort_tree_edges",
        "_edge_ends", "parent_direction", "exact_total", "spanning_forest",
        "unsorted_forest", "_rounds_lightest", "_rounds_hook", "_rounds_contract",
        "_forest_direction", "valid_cells"],
    "gridgraph.core.mst._list_cpu": [
        "_list_lightest", "_lightest_by_ranges", "_list_hook", "_list_contract"],
    "gridgraph.core.mst._forest_cpu": [
        "_check_edges", "_edge_planes", "_masks_from_planes", "_search_bands",
        "_join_pieces", "_reroot", "_directions", "_planes_from_ids"],
}


def bench_mst_cpu(size, repeat, results, before=False):
    """The CPU backend's MST (public API, edges=False) at ``size`` on every core: wall time,
    the time of each phase (its functions wrapped with a clock), and the outputs identical
    to the CUDA backend's (directions, total weight bits, trees).  ``before`` (mstfast):
    also the kernels as they were before int32 ids, the all-cores valid mask and the list
    scratch by component ranges (``_cpu._INT32_EDGE_IDS = 0``, numpy's valid mask,
    ``_cpu._LIST_LABEL_RANGES = False``), runs alternating in this process."""
    import importlib

    import numba

    from gridgraph.core import minimum_spanning_tree
    from gridgraph.core._common import valid_mask
    from gridgraph.core.mst import _cpu as mst_cpu
    values = gpu_fractal(size, 4).get()
    small = values[:700, :900].copy()
    for connectivity in (4, 8):  # compile every kernel before the clocks wrap them
        minimum_spanning_tree(small, connectivity, "max", backend="cpu", edges=False)
        minimum_spanning_tree(small, connectivity, "max", backend="cpu", edges=True)
    if before:  # and the kernels as before (int64 ids, the list scratch per component)
        saved = mst_cpu._INT32_EDGE_IDS, mst_cpu._LIST_LABEL_RANGES
        mst_cpu._INT32_EDGE_IDS, mst_cpu._LIST_LABEL_RANGES = 0, False
        try:
            minimum_spanning_tree(small, 4, "max", backend="cpu", edges=False)
        finally:
            mst_cpu._INT32_EDGE_IDS, mst_cpu._LIST_LABEL_RANGES = saved
    for connectivity in (4,):
        clock = PhaseClock()
        for module_name, names in MST_CPU_PHASES.items():
            module = importlib.import_module(module_name)
            clock.wrap(module, [n for n in names if hasattr(module, n)])
        runs = []
        old_runs = []
        compact_ids, fast_valid = mst_cpu._INT32_EDGE_IDS, mst_cpu.valid_cells
        ranges = mst_cpu._LIST_LABEL_RANGES

        def numpy_valid(array, nodata):
            start = time.perf_counter()
            try:
                return valid_mask(array, nodata)
            finally:
                clock.times["valid_mask"] = time.perf_counter() - start
        try:
            for _ in range(max(1, repeat)):
                for variant, kept in (((True, runs), (False, old_runs)) if before
                                      else ((True, runs),)):
                    if not variant:
                        mst_cpu._INT32_EDGE_IDS, mst_cpu.valid_cells = 0, numpy_valid
                        mst_cpu._LIST_LABEL_RANGES = False
                    clock.times = {}
                    try:
                        elapsed, out = wall(lambda: minimum_spanning_tree(
                            values, connectivity, "max", backend="cpu", edges=False))
                    finally:
                        mst_cpu._INT32_EDGE_IDS, mst_cpu.valid_cells = compact_ids, fast_valid
                        mst_cpu._LIST_LABEL_RANGES = ranges
                    kept.append(dict(s=elapsed, phases=dict(clock.times)))
                    log("mst cpu run" if variant else "mst cpu run (before)",
                        json.dumps(kept[-1], default=float))
                    if variant:
                        cpu = out
                    else:
                        old_same = bool(out.trees == cpu.trees and np.array_equal(
                            out.parent_direction, cpu.parent_direction, equal_nan=True)
                            and np.float64(out.total_weight).tobytes()
                            == np.float64(cpu.total_weight).tobytes())
                    del out
        finally:
            clock.restore()
        if old_runs:
            old_best = sorted(old_runs, key=lambda r: r["s"])[len(old_runs) // 2]
            results.append(dict(
                operation=f"mst CPU backend {connectivity}-conn, before (int64 ids, numpy "
                          f"valid mask, list scratch per component), same process",
                cpu_s=old_best["s"],
                cpu_runs=[r["s"] for r in old_runs], phases=old_best["phases"],
                identical_to_new=old_same))
            log(json.dumps(results[-1], default=float))
        gpu = minimum_spanning_tree(values, connectivity, "max", backend="cuda", edges=False)
        same = bool(gpu.trees == cpu.trees and np.float64(gpu.total_weight).tobytes()
                    == np.float64(cpu.total_weight).tobytes()
                    and np.array_equal(gpu.parent_direction, cpu.parent_direction,
                                       equal_nan=True))
        best = sorted(runs, key=lambda r: r["s"])[len(runs) // 2]
        results.append(dict(
            operation=f"mst CPU backend {connectivity}-conn max, edges=False, fractal {size}², "
                      f"{numba.get_num_threads()} threads (public API)",
            cpu_s=best["s"], cpu_runs=[r["s"] for r in runs], phases=best["phases"],
            trees=int(cpu.trees), total_weight=float(cpu.total_weight),
            identical_to_cuda=same))
        log(json.dumps(results[-1], default=float))
        del gpu, cpu
    del values


def bench_cost_distance_device(size, repeat, bandwidth, results):
    """Cost distance on the device only (inputs there, outputs left there) at ``size``:
    median time, the phases and schedule counts, and the floor: the bytes the relaxation must
    move at least (read the costs, write the float64 distances, the int8 predecessors and the
    allocation once) over the device-to-device copy bandwidth measured in the run."""
    from numba import cuda

    from gridgraph.core.costdistance import _cuda, _step_lengths
    steps = _step_lengths(8, None)
    cost = gpu_fractal(size, 1)
    d_cost = cuda.as_cuda_array(cost.reshape(-1))
    d_valid = cuda.to_device(np.ones(size * size, np.uint8))
    cells = np.array([(size // 2) * size + size // 2])
    ids = np.array([1])
    reference = None
    for variant in getattr(_cuda, "BENCH_VARIANTS", [None]):
        if variant is not None:
            _cuda.set_variant(variant)

        def device_run(stats=None):
            scratch = cuda.device_array(size * size, np.float32)
            scratch.copy_to_device(d_cost)
            return _cuda.solve_device(scratch, d_valid, size, size, cells, ids, 8, steps,
                                      np.inf, stats=stats)

        device_run()  # warm-up (compiles)
        stats = {}
        device_run(stats)
        device, times, out = median_time(device_run, repeat)
        dist = out[0].copy_to_host()
        if reference is None:
            reference = dist
        same = bool(np.array_equal(dist, reference, equal_nan=True))
        alloc_bytes = np.dtype(out[2].dtype).itemsize
        floor = size * size * (4 + 8 + 1 + alloc_bytes) / bandwidth
        results.append(dict(
            operation=f"cost distance device only, 8-conn, 1 source, fractal {size}², "
                      f"variant {variant}",
            device_s=device, device_runs=times, phases=stats, floor_s=floor,
            times_floor=device / floor, same_distances_as_first_variant=same))
        log(json.dumps(results[-1], default=float))
        del out, dist
    if hasattr(_cuda, "set_variant"):
        _cuda.set_variant(None)
    resources = {}
    for name in ("_relax_distance_tiles", "_relax_hops_tiles"):
        kernel = getattr(_cuda, name, None)
        if kernel is None:
            continue
        try:
            def by_signature(value):
                return {str(k): v for k, v in value.items()} if isinstance(value, dict) \
                    else value
            resources[name] = dict(
                registers=by_signature(kernel.get_regs_per_thread()),
                shared_bytes=by_signature(kernel.get_shared_mem_per_block()))
        except Exception as exc:  # numba-cuda versions differ here
            resources[name] = repr(exc)
    log("kernel resources", json.dumps(resources, default=str))
    results.append(dict(operation="cost distance kernel resources", resources=resources))


def identical_cost_outputs(gpu_out, cpu_out):
    """Accumulated cost (bit for bit, NaN where unreached), predecessors and allocation."""
    return bool(np.array_equal(gpu_out[0], cpu_out[0], equal_nan=True)
                and np.array_equal(gpu_out[1], cpu_out[1])
                and np.array_equal(gpu_out[2], cpu_out[2]))


def bench_cost_distance_ties(side, results, zero_side=192):
    """Exact ties everywhere: integer plateaus (costs 1..5) at ``side``², and zero-cost regions
    (costs 0..4) at ``zero_side``² (small: a CPU Dijkstra keyed by cost alone can re-settle
    zero-cost plateaus many times).  The canonical predecessors and allocation must be the
    CPU's; and the tiled path's per-tile solve from the sources must give the in-memory
    distances."""
    from gridgraph.core.costdistance import _cpu, _cuda, _step_lengths
    for n, offset in ((side, 1), (zero_side, 0)):
        cost = (fractal_surface((n, n), seed=7) // 250 + offset).astype(np.uint8)
        valid = np.ones(cost.shape, bool)
        valid[::61, ::53] = False
        source = np.array([[n // 4, n // 4], [n // 2, 3 * n // 4], [3 * n // 4, n // 3]])
        ids = np.array([1, 2, 3])
        for connectivity in (4, 8, 16):
            steps = _step_lengths(connectivity, None)
            stats = {}
            gpu_time, gpu_out = wall(lambda: _cuda.solve(cost, valid, source, ids, connectivity,
                                                         steps, np.inf, Progress()))
            cpu_time, cpu_out = wall(lambda: _cpu.solve(cost, valid, source, ids, connectivity,
                                                        steps, np.inf, Progress()))
            entry = dict(operation=f"cost distance {connectivity}-conn, integer plateaus "
                                   f"{offset}-{offset + 4}, 3 source ids, {n}² (parity)",
                         end_to_end_s=gpu_time, cpu_s=cpu_time,
                         identical_to_cpu=identical_cost_outputs(gpu_out, cpu_out),
                         path_consistent=check_cost_paths(*gpu_out, cost, steps, 100000,
                                                          np.random.default_rng(3)))
            if connectivity == 8:
                seeds = source[:, 0] * n + source[:, 1]
                distance = np.where(valid, np.inf, -np.inf)
                hops = np.full(cost.shape, np.iinfo(np.int64).max)
                distance.flat[seeds] = 0.0
                hops.flat[seeds] = 0
                seeded_time, (seeded_distance, _) = wall(lambda: _cuda.solve_seeded(
                    cost, valid, distance, hops, seeds, connectivity, steps, np.inf,
                    stats=stats))
                entry["seeded_s"] = seeded_time
                entry["seeded_identical_distances"] = bool(np.array_equal(
                    seeded_distance[valid], np.where(np.isnan(gpu_out[0]), np.inf,
                                                     gpu_out[0])[valid]))
                entry["seeded_phases"] = stats
                entry["identical_to_cpu"] &= entry["seeded_identical_distances"]
            results.append(entry)
            log(json.dumps(results[-1], default=float))
            del gpu_out, cpu_out


def bench_odd_shapes(results):
    """Parity on rasters whose sides are no multiple of the tile sizes (partial tiles, seams
    everywhere), with nodata, ties and several sources; no timing."""
    from gridgraph.core.components import _cpu as cc_cpu, _cuda as cc_cuda
    from gridgraph.core.costdistance import _cpu as cd_cpu, _cuda as cd_cuda, _step_lengths
    from gridgraph.core.mst import _cpu as mst_cpu, _cuda as mst_cuda
    rng = np.random.default_rng(11)
    for shape in ((1000, 777), (513, 1029), (37, 4099)):
        valid = rng.random(shape) > 0.1
        values = rng.integers(0, 3, shape).astype(np.int16)
        same = True
        for connectivity in (4, 8):
            for mode in ("equal", "nonzero"):
                a = cc_cpu.label(values, valid, connectivity, mode, Progress())
                b = cc_cuda.label(values, valid, connectivity, mode, Progress())
                same &= bool(a[1] == b[1] and np.array_equal(a[0], b[0]))
        results.append(dict(operation=f"components {shape[0]}x{shape[1]}, 4/8-conn, "
                                      "equal/nonzero, 10% nodata (parity)",
                            identical_to_cpu=same))
        log(json.dumps(results[-1]))
        same = True
        surface = (rng.integers(0, 6, shape)).astype(np.float32)
        for connectivity in (4, 8):
            for weight_index in (0, 2, 3):
                a = mst_cpu.spanning_forest(surface, valid, connectivity, weight_index,
                                            np.float32, Progress())
                b = mst_cuda.spanning_forest(surface, valid, connectivity, weight_index,
                                             np.float32, Progress())
                same &= bool(np.array_equal(a[0], b[0])
                             and np.array_equal(a[1].view(np.uint32), b[1].view(np.uint32)))
        results.append(dict(operation=f"mst {shape[0]}x{shape[1]}, 4/8-conn, max/mean/absdiff, "
                                      "6 values, 10% nodata (parity)",
                            identical_to_cpu=same))
        log(json.dumps(results[-1]))
        cost = rng.uniform(0, 10, shape).astype(np.float32)
        cost[~valid] = np.nan
        cells = np.argwhere(valid)[rng.integers(0, valid.sum(), 3)]
        ids = np.array([1, 2, 3])
        worst, reached_same, consistent, identical = 0.0, True, True, True
        for connectivity in (4, 8, 16):
            steps = _step_lengths(connectivity, None)
            for max_cost in (np.inf, 2000.0):
                a = cd_cpu.solve(cost, valid, cells, ids, connectivity, steps, max_cost,
                                 Progress())
                b = cd_cuda.solve(cost, valid, cells, ids, connectivity, steps, max_cost,
                                  Progress())
                reached = ~np.isnan(a[0])
                reached_same &= bool(np.array_equal(reached, ~np.isnan(b[0])))
                relative = np.abs(a[0][reached] - b[0][reached]) / np.maximum(
                    np.abs(a[0][reached]), 1e-300)
                worst = max(worst, float(relative.max(initial=0.0)))
                consistent &= check_cost_paths(*b, np.nan_to_num(cost), steps, 100000, rng)
                identical &= identical_cost_outputs(b, a)
        results.append(dict(operation=f"cost distance {shape[0]}x{shape[1]}, 4/8/16-conn, "
                                      "3 sources, barriers, max_cost (parity)",
                            same_reached=reached_same, max_relative_difference=worst,
                            bit_identical_cells=float("nan"), path_consistent=consistent,
                            identical_to_cpu=identical))
        log(json.dumps(results[-1]))


def markdown(results, header):
    lines = [header, "",
             "| operation | device | floor (× floor) | peer / CPU | end to end | check |",
             "|---|---|---|---|---|---|"]
    for r in results:
        device = f"{r['device_s'] * 1e3:.1f} ms" if "device_s" in r else "–"
        floor = (f"{r['floor_s'] * 1e3:.2f} ms ({r['times_floor']:.0f}×)"
                 if "floor_s" in r else "–")
        if "peer_s" in r:
            peer = (f"{r['peer']}: {r['peer_s'] * 1e3:.1f} ms (ours {r['ratio_to_peer']:.2f}×); "
                    f"CPU backend {r['cpu_s']:.2f} s")
        elif "cpu_s" in r and "device_s" in r:
            peer = f"CPU backend {r['cpu_s']:.2f} s ({r['cpu_s'] / r['device_s']:.0f}× device)"
        elif "cpu_s" in r:
            peer = f"CPU backend {r['cpu_s']:.2f} s"
        else:
            peer = "–"
        end = f"{r['end_to_end_s']:.2f} s" if "end_to_end_s" in r else "–"
        checks = []
        if "identical_to_cpu" in r:
            checks.append("identical to CPU" if r["identical_to_cpu"] else "DIFFERS FROM CPU")
        if "identical_to_run_1" in r:
            checks.append("identical to run 1" if r["identical_to_run_1"]
                          else "DIFFERS FROM RUN 1")
        if "hops_visits" in r:
            checks.append(f"{r['hops_visits']} hops visits, {r['tile_solves']} tile solves")
        if "max_relative_difference" in r:
            text = f"max rel. diff {r['max_relative_difference']:.1e}"
            if r.get("bit_identical_cells") == r.get("bit_identical_cells"):  # not NaN
                text += f", {r['bit_identical_cells'] * 100:.2f}% bit-identical"
            if "same_reached" in r and not r["same_reached"]:
                text += ", REACHED CELLS DIFFER"
            checks.append(text)
        if "path_consistent" in r:
            checks.append("paths consistent" if r["path_consistent"] else "PATHS INCONSISTENT")
        lines.append(f"| {r['operation']} | {device} | {floor} | {peer} | {end} | "
                     f"{'; '.join(checks) or '–'} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--parity-size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bandwidth", type=float, default=4.25e12,
                        help="bytes/s of a device-to-device copy (floor)")
    parser.add_argument("--cpu-full", action="store_true",
                        help="also time the CPU cost distance at --size (public API)")
    parser.add_argument("--only", nargs="*",
                        default=["transfers", "odd", "components", "components_e2e",
                                 "mst", "mst_e2e", "costdistance", "costdistance_e2e"])
    parser.add_argument("--deltas", nargs="*", type=float, default=[],
                        help="also time cost distance with these bucket widths (tiles crossed)")
    parser.add_argument("--no-first-call", action="store_true")
    parser.add_argument("--workdir", default="/var/tmp/gridgraph-gpu",
                        help="folder of the tiled section's raster and outputs")
    parser.add_argument("--tiled-operations", nargs="*",
                        default=["components", "costdistance", "mst"])
    parser.add_argument("--mst-cpu-before", action="store_true",
                        help="mst_cpu also runs the kernels as before mstfast's changes")
    parser.add_argument("--tiled-cpu", action="store_true",
                        help="also time the CPU backend (all cores) on the tiled operations at full size "
                             "and compare every output cell")
    parser.add_argument("--tiled-hops-ab", type=int, default=0, metavar="TURNS",
                        help="after the tiled section: the full-size tiled cost distance with "
                             "the trees read without the hops first against the hops always "
                             "run, ABBA for TURNS turns (bench/gpu_tiled.py)")
    parser.add_argument("--tiled-hops-ab-ties", action="store_true",
                        help="--tiled-hops-ab on the DEM rounded down (ties everywhere)")
    parser.add_argument("--tiled-clock", action="store_true",
                        help="time each per-tile function of the tiled MST (mstfast)")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()

    import numba
    from numba import cuda
    device = cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else device.name
    header = (f"GPU benchmark, {name}, {datetime.date.today().isoformat()}: python "
              f"{platform.python_version()}, numba {numba.__version__}, numpy {np.__version__}, "
              f"{os.cpu_count()} CPU cores for the CPU backend; floor = bytes / "
              f"{args.bandwidth / 1e12:.2f} TB/s")
    log(header)
    results = []
    results_first = {}
    try:
        if args.no_first_call:
            raise RuntimeError("skipped (--no-first-call)")
        # the first process compiles every kernel and fills numba's cache; the second loads it
        cold = first_call_times()
        log("first call in a fresh process, empty cache:", json.dumps(cold))
        warm = first_call_times()
        log("first call in a fresh process, cached kernels:", json.dumps(warm))
        results_first = dict(first_call_s=dict(cold=cold, cached=warm))
    except RuntimeError as exc:
        log("first-call measurement failed:", exc)
        results_first = {}
    sections = dict(
        transfers=lambda: bench_transfers(results),
        mst_e2e=lambda: bench_mst_end_to_end(args.size, args.parity_size, args.repeat,
                                             results),
        components_e2e=lambda: bench_components_end_to_end(args.size, args.repeat, results),
        costdistance_e2e=lambda: bench_cost_distance_end_to_end(
            args.size, args.parity_size, args.repeat, results, args.cpu_full),
        odd=lambda: bench_odd_shapes(results),
        components=lambda: bench_components(args.size, args.repeat, args.bandwidth, results),
        mst=lambda: bench_mst(args.size, args.parity_size, args.repeat, args.bandwidth,
                              results),
        mst_cpu=lambda: bench_mst_cpu(args.size, args.repeat, results, args.mst_cpu_before),
        tiled=lambda: bench_tiled(args.workdir, args.tiled_operations, results,
                                  args.tiled_clock, args.tiled_cpu),
        tiled_hops_ab=lambda: bench_tiled_hops_ab(args.workdir, args.tiled_hops_ab, results,
                                                  args.tiled_hops_ab_ties),
        tiled_one_id=lambda: bench_tiled_one_id(args.workdir, max(args.tiled_hops_ab, 1),
                                                results),
        cd_device=lambda: bench_cost_distance_device(args.size, args.repeat, args.bandwidth,
                                                     results),
        costdistance=lambda: bench_cost_distance(args.size, args.parity_size, args.repeat,
                                                 args.bandwidth, False, results,
                                                 args.deltas))
    if "transfers" in args.only:
        # the floor's bandwidth: this device's own device-to-device copy
        measured = bench_transfers(results)
        given = f"{args.bandwidth / 1e12:.2f} TB/s"
        args.bandwidth = measured["d2d_bytes_per_s"]
        log(f"floor bandwidth: {args.bandwidth / 1e12:.2f} TB/s (measured)")
        header = header.replace(given, f"{args.bandwidth / 1e12:.2f} TB/s (measured in the run)")
    for section in args.only:
        if section == "transfers":
            continue
        try:
            sections[section]()
        except Exception as exc:  # report and go on with the other sections
            import traceback
            traceback.print_exc()
            results.append(dict(operation=f"{section}: FAILED {type(exc).__name__}: {exc}"))
    table = markdown(results, header)
    if results_first:
        for label, key in (("empty numba cache: compiles the kernels", "cold"),
                           ("kernels loaded from numba's cache", "cached")):
            table += (f"\nFirst call in a fresh process on a 256² raster, {label}: "
                      + ", ".join(f"{k} {v:.2f} s" for k, v in
                                  results_first["first_call_s"][key].items()) + "\n")
    log(table)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(dict(header=header, results=results, **results_first), handle, indent=1,
                      default=float)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(table)


if __name__ == "__main__":
    main()
