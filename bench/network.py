"""Habitat network benchmark: a synthetic landscape of about 10 000 habitat
patches over a fractal resistance raster, end to end through
``gridgraph.core.habitat_network`` beside the sum of the separate GridGraph
steps it is made of (connected components of the habitat, one multi-source
cost distance from every patch), timed in the same run.

No peer runs here: Graphab (Java, not packaged by Debian) and grainscape (R,
CRAN only) are not installable on this box, so the comparison is with the
steps a user would otherwise chain by hand (components -> cost distance ->
the crossing scan, graph and indices, which have no GridGraph equivalent).

Median of --repeat runs after a warm-up (numba compiles).  The graph phase
(links traced, spanning forest, components, IIC and PC) is timed from the
same runs: end to end minus the steps.  dIIC/dPC are timed separately on
the first --importance-patches patches' graph (they recompute an index per
patch).  --write appends the table to docs/benchmarks.md's habitat section.

--phases adds one more end-to-end run with a wall-time timer on each step
(the habitat steps and the engines' host and CUDA phases); --parity-size N
first checks --backend against the CPU backend on every output of an N²
landscape.

    .venv/bin/python bench/network.py --size 8192 --patches 10000 --repeat 3
    python3 bench/network.py --size 16384 --patches 10000 --repeat 1 \
        --backend cuda --importance-patches 200 --parity-size 2048 --phases
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from rasters import fractal_surface  # noqa: E402

from gridgraph.core import (connected_components, cost_distance,  # noqa: E402
                            habitat_network)
from gridgraph.core.habitat import _graph  # noqa: E402


def synthetic_landscape(size, patches, seed=0):
    """(habitat uint8, resistance float32): ``patches`` discs on a jittered
    grid (one per grid cell, never touching), over a fractal resistance of
    1..100 that is 1 on the habitat."""
    rng = np.random.default_rng(seed)
    per_side = int(round(patches ** 0.5))
    spacing = size // per_side
    habitat = np.zeros((size, size), dtype=np.uint8)
    for i in range(per_side):
        for j in range(per_side):
            radius = int(rng.integers(1, max(2, spacing // 4)))
            margin = radius + 1
            r0 = i * spacing + int(rng.integers(margin, spacing - margin))
            c0 = j * spacing + int(rng.integers(margin, spacing - margin))
            rr, cc = np.ogrid[-radius:radius + 1, -radius:radius + 1]
            disc = (rr * rr + cc * cc) <= radius * radius
            window = habitat[r0 - radius:r0 + radius + 1,
                             c0 - radius:c0 + radius + 1]
            window[disc] = 1
    resistance = 1.0 + 99.0 * (fractal_surface((size, size), seed=seed + 1)
                               - 1.0) / 999.0
    resistance = resistance.astype(np.float32)
    resistance[habitat == 1] = 1.0
    return habitat, resistance


def timed(function, repeat):
    """Median wall time of ``repeat`` calls after one warm-up, the wall
    times, the median CPU time of this process (all its threads: robust to
    other processes on a shared box) and the last result."""
    result = function()
    times, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = function()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), times, statistics.median(cpu), result


class _PhaseTimers:
    """Wraps functions (module attributes) with wall-time accumulators.
    Nested phases are listed under their callers, indented; a phase's time
    includes its nested ones."""

    def __init__(self):
        self.totals = {}
        self.calls = {}
        self.depth = {}
        self.order = []
        self.stack = []
        self.undo = []

    def wrap(self, owner, name, label=None):
        label = label or name
        function = getattr(owner, name)
        timers = self

        def timed_call(*args, **kwargs):
            if label not in timers.totals:
                timers.order.append(label)
                timers.totals[label] = 0.0
                timers.calls[label] = 0
                timers.depth[label] = len(timers.stack)
            timers.stack.append(label)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timers.totals[label] += time.perf_counter() - start
                timers.calls[label] += 1
                timers.stack.pop()

        setattr(owner, name, timed_call)
        self.undo.append((owner, name, function))

    def restore(self):
        for owner, name, function in reversed(self.undo):
            setattr(owner, name, function)
        self.undo = []

    def table(self):
        lines = ["| phase | wall | calls |", "|---|---|---|"]
        for label in self.order:
            indent = "&nbsp;&nbsp;" * self.depth[label]
            lines.append(f"| {indent}{label} | {self.totals[label]:.3f} s | "
                         f"{self.calls[label]} |")
        return "\n".join(lines)


def phase_profile(habitat, resistance, distance_p05, backend):
    """One end-to-end habitat_network run with a timer on each step (and,
    on CUDA, the cost-distance solve's own phase timers), after a warm-up
    run on a small landscape that compiles every kernel."""
    import gridgraph.core.habitat as habitat_module
    from gridgraph.core import costdistance as costdistance_module
    from gridgraph.core.habitat import _scan

    small_habitat, small_resistance = synthetic_landscape(512, 100, seed=3)
    habitat_network(small_habitat, small_resistance, connectivity=8,
                    distance_p05=distance_p05, backend=backend,
                    importance=False)
    timers = _PhaseTimers()
    solve_stats = {}
    from gridgraph.core.habitat import _raster
    timers.wrap(_raster, "habitat_mask")
    for name in ("connected_components", "_keep_large", "_seeds",
                 "cost_distance", "_settle_patches", "_links", "_network"):
        timers.wrap(habitat_module, name)
    for name in ("scan_crossings", "trace_links", "path_lengths"):
        timers.wrap(_scan, name)
    timers.wrap(_graph, "spanning_forest")
    timers.wrap(_graph, "graph_components")
    timers.wrap(_graph, "connectivity_index")
    timers.wrap(costdistance_module, "_source_cells",
                "cost_distance: _source_cells (host)")
    if backend == "cuda":
        from gridgraph.core.components import _cuda as components_cuda
        from gridgraph.core.costdistance import _cuda, _cuda_outputs
        timers.wrap(components_cuda, "label_array", "components label_array")
        timers.wrap(_cuda, "unique_sources", "unique_sources (host)")
        timers.wrap(_cuda._Grid, "tiles_around", "tiles_around (host)")
        timers.wrap(_cuda_outputs.CostScan, "solve", "CostScan.solve")
        scan_init = _cuda_outputs.CostScan.__init__

        def init_with_stats(self, array, nodata, stats=None):
            scan_init(self, array, nodata, stats=solve_stats)

        _cuda_outputs.CostScan.__init__ = init_with_stats
        timers.undo.append((_cuda_outputs.CostScan, "__init__", scan_init))
    start = time.perf_counter()
    net = habitat_network(habitat, resistance, connectivity=8,
                          distance_p05=distance_p05, backend=backend,
                          importance=False)
    total = time.perf_counter() - start
    timers.restore()
    print(f"habitat_network end to end: {total:.2f} s, {net.patch_count} "
          f"patches ({int(net.patch_cells.sum())} cells), {len(net.links)} "
          f"links, backend {backend}")
    print(timers.table())
    if solve_stats:
        print("cost distance CUDA phases (PhaseTimer, synchronised):")
        for name, value in solve_stats.items():
            print(f"  {name}: {value:.3f}" if isinstance(value, float)
                  else f"  {name}: {value}")
    return net


def parity(size, backend):
    """habitat_network with ``backend`` against the CPU backend on a
    ``size``² landscape of (size / 164)² patches, dIIC/dPC included: every
    output must be identical (links with their paths, tree, indices,
    rasters); raises otherwise."""
    from test_habitat_network import assert_same_network
    patches = max(4, (size // 164) ** 2)
    habitat, resistance = synthetic_landscape(size, patches, seed=7)
    options = dict(connectivity=8, distance_p05=50.0 * size / 1024,
                   importance=True, outputs=("patches", "accumulated",
                                             "allocation", "corridors"))
    start = time.perf_counter()
    cpu = habitat_network(habitat, resistance, backend="cpu", **options)
    cpu_time = time.perf_counter() - start
    start = time.perf_counter()
    other = habitat_network(habitat, resistance, backend=backend, **options)
    other_time = time.perf_counter() - start
    assert_same_network(cpu, other)
    print(f"parity {size}²: {backend} == cpu on every output ("
          f"{cpu.patch_count} patches, {len(cpu.links)} links, dIIC/dPC "
          f"included; first calls: cpu {cpu_time:.1f} s, {backend} "
          f"{other_time:.1f} s)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--patches", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--importance-patches", type=int, default=1000)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--phases", action="store_true",
                        help="after the table, one more end-to-end run with "
                        "a timer on each phase")
    parser.add_argument("--phases-only", action="store_true",
                        help="the phase run alone (warm-up on a small "
                        "landscape), no table")
    parser.add_argument("--parity-size", type=int, default=0,
                        help="first check --backend against the CPU backend "
                        "on a landscape of this size (every output)")
    args = parser.parse_args()

    if args.parity_size:
        parity(args.parity_size, args.backend)
    start = time.perf_counter()
    habitat, resistance = synthetic_landscape(args.size, args.patches)
    made = time.perf_counter() - start
    distance_p05 = 50.0 * args.size / 1024
    if args.phases_only:
        print(f"landscape made in {made:.1f} s", flush=True)
        phase_profile(habitat, resistance, distance_p05, args.backend)
        return

    def steps():
        components = connected_components(habitat, 8, "nonzero",
                                          backend=args.backend)
        regions = cost_distance(resistance, components.labels, 8,
                                backend=args.backend)
        return components, regions

    def end_to_end():
        return habitat_network(habitat, resistance, connectivity=8,
                               distance_p05=distance_p05,
                               backend=args.backend, importance=False)

    print(f"landscape made in {made:.1f} s", flush=True)
    step_time, step_times, step_cpu, (components, regions) = timed(
        steps, args.repeat)
    print(f"steps: {step_times}", flush=True)
    net_time, net_times, net_cpu, net = timed(end_to_end, args.repeat)
    print(f"end to end: {net_times}", flush=True)
    # the same patches and regions as the separate steps
    assert net.patch_count == components.count
    assert np.array_equal(net.allocation, regions.allocation)
    assert np.array_equal(net.accumulated, regions.accumulated,
                          equal_nan=True)
    del components, regions

    # the indices alone over the whole graph (part of "the rest")
    graph_times = {}
    for kind in ("iic", "pc"):
        start, start_cpu = time.perf_counter(), time.process_time()
        _graph.connectivity_index(
            kind, net.patch_count, net.links.from_id, net.links.to_id,
            net.links.cost, net.patch_area, net.landscape_area,
            theta=np.log(2) / distance_p05, importance=False)
        graph_times[kind] = (time.perf_counter() - start,
                             time.process_time() - start_cpu)

    # importance on the first patches' graph (the induced sub-graph), its
    # kernels compiled first on a small one
    for k in (min(20, net.patch_count),
              min(args.importance_patches, net.patch_count)):
        keep = (net.links.from_id <= k) & (net.links.to_id <= k)
        for kind in ("iic", "pc"):
            _graph.connectivity_index(
                kind, k, net.links.from_id[keep], net.links.to_id[keep],
                net.links.cost[keep], net.patch_area[:k], net.landscape_area,
                theta=np.log(2) / distance_p05) if k <= 20 else None
    start, start_cpu = time.perf_counter(), time.process_time()
    _graph.connectivity_index(
        "iic", k, net.links.from_id[keep], net.links.to_id[keep],
        net.links.cost[keep], net.patch_area[:k], net.landscape_area)
    iic_importance = time.perf_counter() - start
    iic_cpu = time.process_time() - start_cpu
    start, start_cpu = time.perf_counter(), time.process_time()
    _graph.connectivity_index(
        "pc", k, net.links.from_id[keep], net.links.to_id[keep],
        net.links.cost[keep], net.patch_area[:k], net.landscape_area,
        theta=np.log(2) / distance_p05)
    pc_importance = time.perf_counter() - start
    pc_cpu = time.process_time() - start_cpu
    load = os.getloadavg()[0]

    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, "
               f"{platform.node()}")
    date = datetime.date.today().isoformat()
    lines = [
        f"Machine: {machine}; {date}; backend {args.backend}; "
        f"{args.size}² float32 fractal resistance (1..100), "
        f"{net.patch_count} patches ({int(net.patch_cells.sum())} habitat "
        f"cells), {len(net.links)} links, 8-connected; median of "
        f"{args.repeat} after a warm-up (landscape made in {made:.1f} s); "
        f"load average {load:.1f} at the end (CPU time = this process's, "
        "all threads).",
        "",
        "| what | wall (median) | CPU time (median) | wall runs |",
        "|---|---|---|---|",
        f"| habitat_network end to end (no dIIC/dPC) | {net_time:.2f} s | "
        f"{net_cpu:.2f} s | " + ", ".join(f"{t:.2f}" for t in net_times)
        + " |",
        f"| separate steps: connected_components + cost_distance | "
        f"{step_time:.2f} s | {step_cpu:.2f} s | "
        + ", ".join(f"{t:.2f}" for t in step_times) + " |",
        f"| the rest (mask, relabel, crossing scan, paths, tree, IIC, PC) | "
        f"{net_time - step_time:.2f} s | {net_cpu - step_cpu:.2f} s | "
        "end to end minus steps |",
        f"| of which IIC over all {net.patch_count} patches | "
        f"{graph_times['iic'][0]:.2f} s | {graph_times['iic'][1]:.2f} s | "
        "one run |",
        f"| of which PC over all {net.patch_count} patches | "
        f"{graph_times['pc'][0]:.2f} s | {graph_times['pc'][1]:.2f} s | "
        "one run |",
        f"| dIIC, first {k} patches' graph ({int(keep.sum())} links) | "
        f"{iic_importance:.2f} s | {iic_cpu:.2f} s | one run |",
        f"| dPC on the same graph | {pc_importance:.2f} s | {pc_cpu:.2f} s "
        "| one run |",
    ]
    table = "\n".join(lines)
    print(table, flush=True)
    if args.json:
        import json
        with open(args.json, "w") as handle:
            json.dump({
                "bench": "network", "header": lines[0], "size": args.size,
                "backend": args.backend, "patches": int(net.patch_count),
                "links": len(net.links),
                "end_to_end_s": net_times, "end_to_end_cpu_s": net_cpu,
                "steps_s": step_times, "steps_cpu_s": step_cpu,
                "iic_s": graph_times["iic"], "pc_s": graph_times["pc"],
                "importance_patches": int(k),
                "diic_s": [iic_importance, iic_cpu],
                "dpc_s": [pc_importance, pc_cpu], "load_average": load},
                handle, indent=1)
    if args.phases:
        del net
        phase_profile(habitat, resistance, distance_p05, args.backend)
    if args.write:
        print("\n(paste the table into docs/benchmarks.md's habitat section)")


if __name__ == "__main__":
    main()
