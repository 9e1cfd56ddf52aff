"""Tile-phase throughput and parallel efficiency on a local Dask cluster.

For each worker count k (``--workers 1 2``) a ``LocalCluster`` of k worker
processes with one thread each runs every operation on a synthetic fractal
DEM held in a .npy file (``bench/scale.py``'s generator; no GDAL needed):

- components: ``nonzero`` on a derived mask (DEM cells whose value mod 50
  is under 25; many components),
- mst: weight max, 8-connected, parent directions (``edges=False``);
  mst_edges: the same with the sorted edge list (a sample sort over the
  tiles' runs, core/mst/tiled/edge_list.py),
- costdistance: the DEM as friction, one source at the centre, 8-connected,
  every output (accumulated cost, direction, allocation);
- components-kept, components-s5, components-strips: components with
  round 1's labels kept on the workers, with the fifth session's switch
  left (the heap kept inside batches), or
  with each tile labelled in a strip per CPU (the kernel's threads inside a one-thread worker, as
  before the sixth session); all in ``COMPONENT_VARIANTS``, compared with
  components' outputs.

Outputs go to ``out_dir`` (.npy on the local disk every worker shares); the
outputs of every worker count are compared bit for bit with the first
count's.  Prints a Markdown table: seconds (end to end: preflight, tile
rounds, driver work, outputs), Mcells/s, speed-up and parallel efficiency
T1 / (k Tk) against the smallest worker count, and the load average seen
before and after (the box may be shared); then the seconds spent in each
tenth of every run's progress (the phases: the drivers' ``*_SPAN``
constants).  The workers' numba kernels use one thread
(``--worker-numba-threads``; the inputs are made in a process of their own,
so this one never starts numba's pool).  ``--json`` writes the rows after
each run (bench/plot.py reads them).

``--timeline`` keeps, in each components row, where the run's wall went:
the driver's steps (plan, preflight, each round from submission to its
last result, merge, sink, finish) and each round's tasks per worker from
Dask's task stream (first start, last end, busy, idle before, between and
after), printed after the row.

``--step-trace`` (cost distance) adds to each row, per ``TaskPool`` (solves,
hops visits), the latency of a step from the driver's submission to its
task's start and from the task's end to the driver having its message, and
the share of the phase the driver's main thread waited for results.

``--simulate`` runs no cluster: the drivers' own schedule on k virtual
one-thread workers (bench/virtual_cluster.py: tasks timed by their thread's
CPU time, no transfer costs), to tune the rounds on a small box;
``--round-delta`` and ``--wait-for-neighbours`` set the cost distance's
scheduling (core/costdistance/rounds.py).

    .venv/bin/python bench/dask.py --shape 2048 2048 --tile-size 256 --workers 1 2
    python3 bench/dask.py --neuse40 --tile-size 1024 --workers 1 4 8 16 \
        --workdir /tmp/gg-dask --operations costdistance
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/scale.py (it also makes gridgraph importable from a bare checkout);
# then this file's folder leaves the path: "import dask" would find it
sys.path[:] = [HERE] + [p for p in sys.path
                        if os.path.abspath(p or os.curdir) != HERE]
sys.modules.pop("dask", None)  # this file, if imported as "dask"
import dask_tile_probe  # noqa: E402
import scale  # noqa: E402
import virtual_cluster  # noqa: E402

sys.path.remove(HERE)

NEUSE40 = (17630, 12555)


def in_turn(operations, turns):
    """``operations`` ``turns`` times, every other time reversed."""
    return [operation for turn in range(turns)
            for operation in (operations if turn % 2 == 0
                              else operations[::-1])]


def make_inputs(workdir, shape):
    """The DEM and the components mask as .npy files (made once)."""
    os.makedirs(workdir, exist_ok=True)
    dem = os.path.join(workdir, f"dem-{shape[0]}x{shape[1]}.npy")
    mask = os.path.join(workdir, f"mask-{shape[0]}x{shape[1]}.npy")
    if not os.path.exists(dem):
        start = time.perf_counter()
        scale.synthetic_dem(dem, shape)
        print(f"built {dem} in {time.perf_counter() - start:.1f} s",
              flush=True)
    if not os.path.exists(mask):
        values = np.load(dem, mmap_mode="r")
        out = np.lib.format.open_memmap(mask + ".partial", "w+", np.uint8,
                                        shape)
        for top in range(0, shape[0], 1024):
            block = values[top:top + 1024]
            out[top:top + 1024] = (np.floor(block) % 50) < 25
        out.flush()
        del out
        os.replace(mask + ".partial", mask)
    return dem, mask


def run(operation, dem, mask, executor, tile_size, out_dir, backend="cpu",
        progress=None):
    from gridgraph.core import (connected_components, cost_distance,
                                minimum_spanning_tree)
    if operation.startswith("components"):
        values = np.load(mask, mmap_mode="r")
        result = connected_components(values, mode="nonzero",
                                      tile_size=tile_size, executor=executor,
                                      out_dir=out_dir, backend=backend,
                                      progress=progress)
        return {"labels": result.labels}, f"{result.count} components"
    values = np.load(dem, mmap_mode="r")
    operation = operation.split("-")[0]  # a variant runs its operation
    if operation in ("mst", "mst_edges"):
        with_edges = operation == "mst_edges"
        result = minimum_spanning_tree(values, connectivity=8, weight="max",
                                       edges=with_edges, tile_size=tile_size,
                                       executor=executor, out_dir=out_dir,
                                       backend=backend, progress=progress)
        outputs = {"parent_direction": result.parent_direction}
        if with_edges:
            outputs.update(edges=result.edges,
                           weights=result.weights.reshape(-1, 1))
        return (outputs,
                f"total {result.total_weight!r}, {result.trees} tree(s)")
    if operation == "costdistanceties":
        values = np.load(scale.integer_dem(dem), mmap_mode="r")
    centre = [(values.shape[0] // 2, values.shape[1] // 2)]
    result = cost_distance(values, centre, connectivity=8,
                           tile_size=tile_size, executor=executor,
                           out_dir=out_dir, backend=backend,
                           progress=progress)
    return ({"accumulated": result.accumulated,
             "direction": result.direction,
             "allocation": result.allocation},
            f"{result.tile_solves} tile solves, "
            f"{getattr(result, 'hops_visits', '?')} hops visits")


def local_cluster(args, workers):
    """The cluster of a run: a ``LocalCluster`` (its scheduler in this
    process, on the client's event loop), or with ``--scheduler-process``
    Dask's ``SubprocessCluster`` (the scheduler in a process of its own, as
    on a cluster a user's ``DASK_SCHEDULER`` address names); ``workers``
    one-thread worker processes either way."""
    resources = {"GPU": 1} if args.gpu_workers else None
    if args.scheduler_process:
        from distributed.deploy.subprocess import SubprocessCluster
        return SubprocessCluster(
            host="127.0.0.1", dashboard_address=None, n_workers=workers,
            threads_per_worker=1,
            worker_kwargs=dict(memory_limit=args.memory_limit,
                               resources=resources))
    from distributed import LocalCluster
    return LocalCluster(n_workers=workers, threads_per_worker=1,
                        processes=True, host="127.0.0.1",
                        dashboard_address=None,
                        memory_limit=args.memory_limit, resources=resources)


def simulate(args, shape, dem, mask):
    """The schedule of k one-thread workers on a virtual clock: modelled
    seconds, the tasks' own seconds, tile solves; outputs compared."""
    VirtualExecutor = virtual_cluster.VirtualExecutor
    virtual_waits = virtual_cluster.virtual_waits
    reference = {}
    print("| operation | workers | modelled s | task s | driver s | tasks "
          "| speed-up | efficiency | identical | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = {}
    for operation in args.operations:
        for workers in [args.workers[0]] + list(args.workers):
            warm_up = workers is args.workers[0] and operation not in base \
                and not base.get((operation, "warm"))
            base[(operation, "warm")] = True
            out_dir = os.path.join(args.workdir, f"out-{operation}")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            executor = VirtualExecutor(workers)
            marks = []

            def progress(fraction):
                executor._driver_pauses()
                marks.append((fraction, executor.clock))
                executor._driver_resumes()
                return True

            with virtual_waits(executor):
                outputs, note = run(operation, dem, mask, executor,
                                    args.tile_size, out_dir, args.backend,
                                    progress)
            if warm_up:  # compiles the kernels: not timed
                del outputs
                shutil.rmtree(out_dir, ignore_errors=True)
                continue
            digests = {name: digest(array) for name, array in outputs.items()}
            same = reference.setdefault(operation, digests) == digests
            first = base.setdefault(operation, (workers, executor.clock))
            speedup = first[1] / executor.clock
            print(f"| {operation} | {workers} | {executor.clock:.2f} | "
                  f"{executor.task_seconds:.2f} | "
                  f"{executor.driver_seconds:.2f} | {executor.tasks} | "
                  f"{speedup:.2f} | {speedup * first[0] / workers:.0%} | "
                  f"{'yes' if same else 'NO'} | {note} |", flush=True)
            if args.spans:
                print("    per tenth of progress:", " ".join(
                    f"{t:.2f}" for t in tenths(marks, executor.clock)))
            del outputs
            shutil.rmtree(out_dir, ignore_errors=True)


def settings():
    """The scheduling and writing switches of this run."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    from gridgraph.core.costdistance import rounds
    chosen = {name: getattr(rounds, name) for name in (
        "ROUND_DELTA_TILES", "WAIT_FOR_LOWER_NEIGHBOURS",
        "SETTLE_DELTA_TILES", "HOPS_DELTA_TILES",
        "HOPS_WAIT_FOR_LOWER_NEIGHBOURS", "HOPS_ONLY_FOR_TIES",
        "PREFER_FREE_WORKERS",
        "ROUND_TASKS_PER_WORKER", "HOPS_TASKS_PER_WORKER")
        if hasattr(rounds, name)}
    from gridgraph.core import tile_io
    for name in ("MAPPED_LABEL_WRITES", "KEPT_LABELS_SHARE",
                 "EXECUTOR_TILE_STRIPS", "LABEL_RUN_TILES"):
        chosen[name] = getattr(components_tiled, name)
    chosen["POPULATE_MAPPED_WRITES"] = tile_io.POPULATE_MAPPED_WRITES
    chosen["COMPILED_ROW_IO"] = tile_io.COMPILED_ROW_IO
    chosen["DASK_SUBMIT_ROUND_AT_ONCE"] = tile_tasks.DASK_SUBMIT_ROUND_AT_ONCE
    chosen["DASK_JOIN_ON_WORKER"] = tile_tasks.DASK_JOIN_ON_WORKER
    chosen["EVEN_BATCH_WAVES"] = tile_tasks.EVEN_BATCH_WAVES
    from gridgraph.core import task_pool
    chosen["PUSHED_MESSAGES"] = task_pool.PUSHED_MESSAGES
    from gridgraph.core import distributed
    chosen["PREFLIGHT_BY_RUN"] = distributed.PREFLIGHT_BY_RUN
    chosen["DASK_BATCH_INTERVAL_S"] = distributed.DASK_BATCH_INTERVAL_S
    return chosen


# Components under other switches, run on the same cluster as
# "components" (operations "components-kept", "components-s5"): their
# outputs must be identical to it.
COMPONENT_VARIANTS = {
    # round 1's labels kept on the workers (one future per batch)
    "components-kept": [("components.tiled", "KEPT_LABELS_SHARE", 1.0)],
    # the fifth session's switch left (off by default since its call; its
    # guided batches and largest tiles first were removed in the eighth):
    # the heap kept inside batches
    "components-s5": [("tile_tasks", "HEAP_KEPT_IN_BATCHES", True)],
    # the sixth session's default before: each tile labelled in strips,
    # one thread per CPU, inside every one-thread worker
    "components-strips": [("components.tiled", "EXECUTOR_TILE_STRIPS",
                           None)],
    # the label round's writes (the seventh session; each sets both
    # switches, whatever the defaults, and no huge-page advice): tile by
    # tile (the sixth session's default), in runs of adjacent tiles of a
    # tile row written through one mapping (about a batch long, whole tile
    # rows, 4 tiles), the windows' pages faulted in writable first
    # (populate) or by the copy
    "components-tiles": [("components.tiled", "LABEL_RUN_TILES", None),
                         ("tile_io", "POPULATE_MAPPED_WRITES", False),
                         ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    "components-populate": [("components.tiled", "LABEL_RUN_TILES", None),
                            ("tile_io", "POPULATE_MAPPED_WRITES", True),
                            ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    "components-runs": [("components.tiled", "LABEL_RUN_TILES", "auto"),
                        ("tile_io", "POPULATE_MAPPED_WRITES", False),
                        ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    "components-runs-populate": [
        ("components.tiled", "LABEL_RUN_TILES", "auto"),
        ("tile_io", "POPULATE_MAPPED_WRITES", True),
        ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    # the thirty-ninth session: the label runs' mappings advised
    # MADV_HUGEPAGE, their pages faulted in by the copy (not populated),
    # advised and populated, and populated without the advice (the
    # default)
    "components-huge": [("components.tiled", "LABEL_RUN_TILES", "auto"),
                        ("tile_io", "HUGE_PAGE_MAPPED_WRITES", True)],
    "components-hugepop": [("components.tiled", "LABEL_RUN_TILES", "auto"),
                           ("tile_io", "POPULATE_MAPPED_WRITES", "always"),
                           ("tile_io", "HUGE_PAGE_MAPPED_WRITES", True)],
    "components-nohuge": [("components.tiled", "LABEL_RUN_TILES", "auto"),
                          ("tile_io", "POPULATE_MAPPED_WRITES", True),
                          ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    "components-rows": [("components.tiled", "LABEL_RUN_TILES", "row"),
                        ("tile_io", "POPULATE_MAPPED_WRITES", False),
                        ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    "components-rows-populate": [
        ("components.tiled", "LABEL_RUN_TILES", "row"),
        ("tile_io", "POPULATE_MAPPED_WRITES", True),
        ("tile_io", "HUGE_PAGE_MAPPED_WRITES", False)],
    # ...or gathered into a band per run, written with pwrite (a call per
    # row of the run; one per run for whole tile rows)
    "components-rows-pwrite": [
        ("components.tiled", "LABEL_RUN_TILES", "row"),
        ("components.tiled", "MAPPED_LABEL_WRITES", False)],
    "components-runs-pwrite": [
        ("components.tiled", "LABEL_RUN_TILES", "auto"),
        ("components.tiled", "MAPPED_LABEL_WRITES", False)],
    "components-runs4-populate": [
        ("components.tiled", "LABEL_RUN_TILES", 4),
        ("tile_io", "POPULATE_MAPPED_WRITES", True)],
    # the seventh session's cut of what does not shrink with workers: each
    # round submitted at once (Dask starts each next task, no round trip
    # through the driver; its guided variants were removed in the eighth)
    "components-atonce": [("tile_tasks", "DASK_SUBMIT_ROUND_AT_ONCE", True)],
    # the seventh session's second call: its defaults then (each round at
    # once, the preflight by client.run, the label pages faulted in by
    # round 1's idle workers) against all three off (the session's
    # start) and against the page faulting off (the default since)
    # (PREFAULT_LABEL_PAGES, removed in the eighth session, was off in
    # both)
    "components-before": [
        ("tile_tasks", "DASK_SUBMIT_ROUND_AT_ONCE", False),
        ("tile_tasks", "DASK_JOIN_ON_WORKER", False),
        ("distributed", "PREFLIGHT_BY_RUN", False)],
    # the eighth session: components' merge as a task on a worker with the
    # label round submitted behind it (DASK_JOIN_ON_WORKER; measured as
    # "components" against "components-driverjoin", the default since)
    "components-workerjoin": [
        ("tile_tasks", "DASK_JOIN_ON_WORKER", True)],
    "components-driverjoin": [
        ("tile_tasks", "DASK_JOIN_ON_WORKER", False)],
    # the tenth session: the heap kept inside tile tasks (no fresh pages
    # per tile; the default since) measured as "components-heap" against
    # "components" with it off (components-fresh now); its label mappings
    # advised MADV_HUGEPAGE (-huge, -hugeheap) were no faster and were
    # removed with their switch
    "components-fresh": [("tile_tasks", "HEAP_KEPT_IN_BATCHES", False)],
    # (the eleventh session's labels file faulted in writable by 4 threads
    # of the driver while round 1 ran, DRIVER_POPULATE_THREADS,
    # components-ahead4: no faster, removed with its switch)
    "mst-fresh": [("tile_tasks", "HEAP_KEPT_IN_BATCHES", False)],
    "costdistance-fresh": [("tile_tasks", "HEAP_KEPT_IN_BATCHES", False)],
    # the fifteenth session: Dask's own message batching intervals (10 ms
    # from the client, 5 ms from the scheduler to a worker, 2 ms from a
    # worker) against none (the default since)
    "costdistance-batched": [("distributed", "DASK_BATCH_INTERVAL_S", None)],
    "components-batched": [("distributed", "DASK_BATCH_INTERVAL_S", None)],
    # the twenty-first session: round 1's batches in whole waves (4 a
    # thread, the default) against a smaller last one (before)
    "components-lastsmall": [("tile_tasks", "EVEN_BATCH_WAVES", False)],
    "mst-lastsmall": [("tile_tasks", "EVEN_BATCH_WAVES", False)],
    "costdistance-lastsmall": [("tile_tasks", "EVEN_BATCH_WAVES", False)],
    # the twenty-second session's check of the label round's start: runs
    # of 2 tiles (a third of the answers a task) against "auto" (~6.5)
    "components-runs2": [("components.tiled", "LABEL_RUN_TILES", 2)],
    # the twenty-third session: a tile's rows read (and, with pwrite,
    # written) a system call each from Python, as before, against the
    # compiled loop (tile_io.COMPILED_ROW_IO, the default since)
    "components-pyrows": [("tile_io", "COMPILED_ROW_IO", False)],
    "costdistance-pyrows": [("tile_io", "COMPILED_ROW_IO", False)],
    "mst-pyrows": [("tile_io", "COMPILED_ROW_IO", False)],
    # (the twenty-second session's merge answers of the count's width,
    # NARROW_ANSWERS, measured as "components" against "components-wide",
    # and the labels file's pages put in the page cache by the driver
    # during round 1, ZEROS_AHEAD, as "components" against
    # "components-nozeros": neither faster, both removed)
    # (the twenty-first session's label round waiting for each task's end
    # without fetching its result, DASK_RESULTS_OF_WRITERS, measured as
    # "components" against "components-fetched": the last label task's
    # end reached the driver 3-6 ms later either way, no faster; removed
    # with its switch)
    # (the twenty-first session's label runs shorter towards the end,
    # LABEL_RUN_TAIL, measured as "components" against
    # "components-eventail": the workers ran out of work within ~15 ms of
    # each other but did ~10 % more label-round work in 55 tasks instead
    # of 36, no faster; removed with its switch)
    "mst-batched": [("distributed", "DASK_BATCH_INTERVAL_S", None)],
    # the fifteenth session's scheduling variants of the cost distance:
    # the hops rounds without the wait for lower neighbours, or with twice
    # the slack (no faster; neither was a task whose state's worker is
    # busy sent to an idle worker, costdistance-move, removed with its
    # switch)
    "costdistance-hopsnowait": [
        ("costdistance.rounds", "HOPS_WAIT_FOR_LOWER_NEIGHBOURS", False)],
    "costdistance-hops4": [("costdistance.rounds", "HOPS_DELTA_TILES", 4)],
    # hops visits one a worker (the fourteenth session's two hid ~25 ms of
    # step latency; without the batching a step waits 6-13 ms, and the
    # second visit holds the first's message task behind it)
    # a TaskPool step's message split off by a second task on the worker
    # and fetched through the scheduler (the default before the fifteenth
    # session's pushed messages)
    "costdistance-split": [("task_pool", "PUSHED_MESSAGES", False)],
    "costdistance-trimmed": [("tile_tasks", "STEP_HEAP_KEPT", False)],
    # the eighteenth session: the output round's blocks written with pwrite
    # (before: MAPPED_OUTPUT_WRITES), the tile-by-tile rounds' heap set
    # back after each task (before: TASK_HEAP_KEPT), and both (the code
    # before the session)
    "costdistance-pwrite": [
        ("costdistance.rounds", "MAPPED_OUTPUT_WRITES", False)],
    "costdistance-tasktrim": [("tile_tasks", "TASK_HEAP_KEPT", False)],
    "costdistance-before": [
        ("costdistance.rounds", "MAPPED_OUTPUT_WRITES", False),
        ("tile_tasks", "TASK_HEAP_KEPT", False)],
    "components-tasktrim": [("tile_tasks", "TASK_HEAP_KEPT", False)],
    "mst-tasktrim": [("tile_tasks", "TASK_HEAP_KEPT", False)],
    # the survey round one task a tile, submitted as tasks finish (before
    # the eighteenth session's batches submitted at once)
    # (no other round of the cost distance is submitted at once)
    "costdistance-surveytiles": [
        ("costdistance.rounds", "SURVEY_BATCH", None),
        ("tile_tasks", "DASK_SUBMIT_ROUND_AT_ONCE", False)],
    "costdistance-hops1": [("costdistance.rounds", "HOPS_TASKS_PER_WORKER",
                            1)],
    # the nineteenth session: the hops rounds run whatever the trees
    # (before: HOPS_ONLY_FOR_TIES, which runs them only when a cell has two
    # tight neighbours)
    "costdistance-hopsalways": [
        ("costdistance.rounds", "HOPS_ONLY_FOR_TIES", False)],
    # the distance rounds' start slack (ROUND_DELTA_TILES, 2 by default) in
    # tile crossings, and the wait for a lower neighbour in flight
    # (WAIT_FOR_LOWER_NEIGHBOURS, off): fewer tiles solved again against
    # fewer tiles at once
    "costdistance-delta1": [("costdistance.rounds", "ROUND_DELTA_TILES", 1)],
    "costdistance-delta05": [
        ("costdistance.rounds", "ROUND_DELTA_TILES", 0.5)],
    "costdistance-wait": [
        ("costdistance.rounds", "WAIT_FOR_LOWER_NEIGHBOURS", True)],
    # the same on costs that tie everywhere (operation costdistanceties:
    # the DEM rounded down; its first pass without the hops stops at once)
    "costdistanceties-hopsalways": [
        ("costdistance.rounds", "HOPS_ONLY_FOR_TIES", False)],
    # (the fourth call's kept heap set back 1 s after a worker's last tile
    # task, HEAP_RELEASE_DELAY_S, against at each task's end,
    # components-heapeach: no faster, removed)
    # (the ninth session's label round ahead of the merge,
    # DASK_PREPARED_PER_THREAD, and its variants components-noahead and
    # components-allahead were removed with the switch: no faster at 8
    # workers, slower at 1; the thirty-seventh session's, started as round
    # 1's last wave ran, was slower on the 2-core box and was removed
    # without a device call)
    # round 1's batches' heap set back at each batch's end (before the
    # thirty-seventh session)
    "components-batchtrim": [("tile_tasks", "BATCHES_HEAP_KEPT", False)],
}


def set_switch(module, name, value):
    """``gridgraph.core.<module>.<name> = value`` in this process."""
    import importlib
    setattr(importlib.import_module("gridgraph.core." + module), name, value)


def apply_variant(operation, client, defaults={}):
    """Set the switches of ``operation``'s variant (the defaults for any
    other operation) here and on every worker (some are read there)."""
    import importlib
    chosen = {}
    for changes in COMPONENT_VARIANTS.values():
        for module, name, _ in changes:
            key = (module, name)
            defaults.setdefault(key, getattr(importlib.import_module(
                "gridgraph.core." + module), name))
            chosen[key] = defaults[key]
    for module, name, value in COMPONENT_VARIANTS.get(operation, []):
        chosen[(module, name)] = value
    for (module, name), value in chosen.items():
        set_switch(module, name, value)
        client.run(set_switch, module, name, value)


def task_stream(records, start):
    """Dask's task stream of a run, compact: per task [name, worker number,
    start s, stop s] from the run's start (name: the key's function, with
    -m / -s for the message / state splits)."""
    workers = sorted({record["worker"] for record in records})
    rows = []
    for record in records:
        key = str(record["key"])
        name = key.split("-")[0]
        if key.endswith("-message") or key.endswith("-state"):
            name += "-" + key.rsplit("-", 1)[1][0]
        for span in record["startstops"]:
            if span["action"] == "compute":
                rows.append([name, workers.index(record["worker"]),
                             round(span["start"] - start, 4),
                             round(span["stop"] - start, 4)])
    # (records of the run before, finishing as this one starts, left out)
    return sorted((row for row in rows if row[2] >= 0),
                  key=lambda row: row[2])


def transfers(records):
    """Per task name: how many of its tasks waited for data from another
    worker, and the seconds those transfers took in all (Dask's task
    stream, ``transfer`` spans)."""
    out = {}
    for record in records:
        name = str(record["key"]).split("-")[0]
        spans = [span for span in record["startstops"]
                 if span["action"] == "transfer"]
        if spans:
            count, seconds = out.get(name, (0, 0.0))
            out[name] = (count + 1, round(seconds + sum(
                span["stop"] - span["start"] for span in spans), 3))
    return out


class StepTrace:
    """``--step-trace``: where each ``TaskPool`` step's time goes (the
    cost distance's solves and hops visits).  Records when the driver
    submits each step and when ``next_done`` hands its message back, and
    how long ``next_done`` waited; matched with Dask's task stream by key,
    :func:`step_trace_summary` gives per pool the latency from submission
    to the task's start, the task's own time, the latency from its end to
    the driver having its message, and the share of the phase the
    driver's main thread spent waiting for results."""

    def __init__(self):
        self.steps = None  # key -> [pool, submitted, received]
        self.waits = None  # [pool, start, stop] of each next_done

    def install(self):
        from gridgraph.core import task_pool
        trace = self
        submit, next_done = task_pool.TaskPool.submit, \
            task_pool.TaskPool.next_done

        def traced_submit(pool, tag, function, *arguments):
            key = f"{pool.name}-{getattr(pool, '_run', '')}-" \
                f"{getattr(pool, '_serial', 0)}"
            now = time.time()
            submit(pool, tag, function, *arguments)
            if trace.steps is not None:
                trace.steps[key] = [pool.name, now, None]

        def traced_next_done(pool):
            before = {getattr(future, "key", None)
                      for future in pool.outstanding}
            start = time.time()
            result = next_done(pool)
            stop = time.time()
            if trace.steps is not None:
                trace.waits.append([pool.name, start, stop])
                after = {getattr(future, "key", None)
                         for future in pool.outstanding}
                for key in before - after:
                    key = str(key).removesuffix("-message")
                    if key in trace.steps:
                        trace.steps[key][2] = stop
            return result

        task_pool.TaskPool.submit = traced_submit
        task_pool.TaskPool.next_done = traced_next_done

    def start(self):
        self.steps, self.waits = {}, []

    def summary(self, records):
        """Per pool: medians and 90th percentiles (ms) of the three
        latencies, and the main thread's waiting share of the phase."""
        compute = {}
        for record in records:
            for span in record["startstops"]:
                if span["action"] == "compute":
                    compute[str(record["key"])] = (span["start"],
                                                   span["stop"])
        pools = {}
        for key, (pool, submitted, received) in self.steps.items():
            if key in compute and received is not None:
                start, stop = compute[key]
                pools.setdefault(pool, []).append(
                    (start - submitted, stop - start, received - stop,
                     submitted, received))
        out = {}
        for pool, rows in pools.items():
            first = min(r[3] for r in rows)
            last = max(r[4] for r in rows)
            waited = sum(b - a for name, a, b in self.waits if name == pool)
            out[pool] = dict(
                steps=len(rows), phase_s=round(last - first, 3),
                main_thread_waiting=round(waited / max(1e-9, last - first),
                                          3))
            for k, name in enumerate(("to_start", "task", "to_driver")):
                values = np.sort([1000 * r[k] for r in rows])
                out[pool][name + "_ms"] = [
                    round(float(np.median(values)), 2),
                    round(float(values[int(0.9 * (len(values) - 1))]), 2),
                    round(float(values.sum()) / 1000, 2)]
        self.steps = self.waits = None
        return out


class Timeline:
    """The driver's side of a run (``--timeline``): ``[event, start,
    stop]`` in seconds of the wall clock (``time.time()``, the clock of
    Dask's task stream) for each call of the functions it wraps:
    ``plan`` (components' tile plan: the cluster's size), ``preflight``,
    ``round <task function>`` (a round of tile tasks: ``run_tasks`` from
    submitting its first task to handing back its last result),
    ``rounds joined`` (``run_joined_rounds``: components' three rounds,
    the merge a task on a worker on Dask), ``merge`` (components' round
    2, when in the driver), ``map`` (a round's
    tasks handed to the client at once: the driver's share of their
    submission), ``sink`` (the output file made), ``finish`` (renamed into
    place, mapped) and
    ``scheduler_info`` (each ask of the scheduler for its workers)."""

    def __init__(self):
        self.events = None  # recording only while a list

    def install(self):
        from gridgraph.core import distributed, tiling
        from gridgraph.core.components import tiled
        self._wrap(tiled, "plan", "plan")
        self._wrap(distributed, "preflight", "preflight")
        self._wrap(distributed, "cluster_workers", "scheduler_info")
        from gridgraph.core import tile_tasks
        # components call both through tiling, run_joined_rounds calls
        # run_tasks in tile_tasks (the join in the driver)
        self._wrap(tile_tasks, "run_tasks", lambda function, *a, **k:
                   "round " + (getattr(function, "__name__", None) or getattr(
                       getattr(function, "func", None), "__name__", "?")))
        tiling.run_tasks = tile_tasks.run_tasks
        self._wrap(tile_tasks, "run_joined_rounds", "rounds joined")
        tiling.run_joined_rounds = tile_tasks.run_joined_rounds
        self._wrap(tiled, "merge", "merge")
        # the MST's rounds as its driver calls them
        from gridgraph.core.mst.tiled import driver as mst_driver
        for attribute in ("leaf_round", "separator_edges", "merge_hierarchy",
                          "split_removed", "pieces_round", "orient_pieces",
                          "finish_round", "edge_list_round"):
            if hasattr(mst_driver, attribute):
                self._wrap(mst_driver, attribute, "mst " + attribute)
        # cost distance's rounds, as _run calls them
        from gridgraph.core.costdistance import rounds as cd_rounds
        for attribute in ("survey_round", "_sources", "distance_rounds",
                          "hops_rounds", "label_round", "output_round"):
            if hasattr(cd_rounds, attribute):
                self._wrap(cd_rounds, attribute, "cd " + attribute)
        from distributed import Client
        self._wrap(Client, "map", "map")  # a round submitted at once
        timeline = self
        make_sink = tiling.make_sink

        def made_sink(*arguments, **keywords):
            start = time.time()
            sink = make_sink(*arguments, **keywords)
            timeline.add("sink", start, time.time())
            finish = sink.finish

            def finished():
                begin = time.time()
                result = finish()
                timeline.add("finish", begin, time.time())
                return result

            sink.finish = finished
            return sink

        tiling.make_sink = made_sink

    def add(self, name, start, stop):
        if self.events is not None:
            self.events.append([name, start, stop])

    def _wrap(self, module, attribute, name):
        function = getattr(module, attribute)
        timeline = self

        def timed(*arguments, **keywords):
            start = time.time()
            try:
                return function(*arguments, **keywords)
            finally:
                timeline.add(name if isinstance(name, str)
                             else name(*arguments, **keywords), start,
                             time.time())

        setattr(module, attribute, timed)


def timeline_summary(events, tasks, start, stop):
    """Where a run's wall went: the driver's events (from the run's
    start, ms) and per round of Dask tasks (the task stream's ``[name,
    worker, start, stop]`` rows, from the run's start) its first start,
    last end, the workers' busy share between them, each worker's first
    start and last end, and the round's idle worker-seconds split into
    before each worker's first task, between its tasks, and after its
    last.  ``tasks`` may be None (no task stream)."""
    ms = lambda t: round(1000 * t, 1)  # noqa: E731
    driver = [[name, ms(a - start), ms(b - start)] for name, a, b in events]
    rounds = {}
    for name, worker, a, b in tasks or []:
        rounds.setdefault(name, []).append((worker, a - start, b - start))
    summary = {"total_ms": ms(stop - start), "driver": driver, "rounds": {}}
    for name, rows in rounds.items():
        first = min(a for _, a, _ in rows)
        last = max(b for _, _, b in rows)
        workers = sorted({w for w, _, _ in rows})
        per = {}
        for worker in workers:
            mine = sorted((a, b) for w, a, b in rows if w == worker)
            busy = sum(b - a for a, b in mine)
            per[worker] = dict(first=ms(mine[0][0]), last=ms(mine[-1][1]),
                               busy=ms(busy), tasks=len(mine),
                               gaps=ms(mine[-1][1] - mine[0][0] - busy))
        span = last - first
        summary["rounds"][name] = dict(
            tasks=len(rows), first_start=ms(first), last_end=ms(last),
            busy_share=round(sum(b - a for _, a, b in rows)
                             / max(1e-9, span * len(workers)), 3),
            idle_before_first=ms(sum(p["first"] / 1000 - first
                                     for p in per.values())),
            idle_between=ms(sum(p["gaps"] / 1000 for p in per.values())),
            idle_after_last=ms(sum(last - p["last"] / 1000
                                   for p in per.values())),
            workers=per)
    return summary


def _scheduler_log(window, dask_scheduler=None):
    """The scheduler's transitions within ``window`` (epoch seconds):
    ``[key, start, finish, stimulus, time]``."""
    a, b = window
    return [[str(e[0]), e[1], e[2], e[4], e[5]]
            for e in list(dask_scheduler.transition_log)
            if a <= e[5] <= b and isinstance(e[0], str)]


def _worker_log(window, dask_worker=None):
    """This worker's state-machine log within ``window``: ``[key, start,
    finish, time]`` for the task transitions."""
    a, b = window
    return [[e[0], str(e[1]), str(e[2]), e[-1]]
            for e in list(dask_worker.state.log)
            if isinstance(e[0], str) and isinstance(e[-1], float)
            and a <= e[-1] <= b and len(e) >= 4]


def dask_hops(client, start, stop):
    """Where each round's messages were (``--timeline``, ms from the run's
    start), from the scheduler's transition log and the workers' logs: per
    round (task name), when the scheduler began on its graph (the
    update-graph stimulus), its first transition, when each worker got its
    first task (compute-task), started it, and the round's last task's end
    on its worker and on the scheduler; fetches between workers (flight
    to memory) as [first, last] arrivals."""
    import re
    name_of = re.compile(r"^(.*?)-(?:value-)?[0-9a-f]{12}(?:-\d{7})?$")
    ms = lambda t: round(1000 * (t - start), 1)  # noqa: E731
    window = (start - 0.01, stop + 0.01)
    rounds = {}

    def entry(key):
        match = name_of.match(key)
        name = match.group(1) if match else key
        return rounds.setdefault(name, {"got": {}, "started": {},
                                        "fetched": []})
    for key, a, b, stimulus, t in client.run_on_scheduler(_scheduler_log,
                                                         window):
        r = entry(key)
        if stimulus.startswith("update-graph-") and "graph_in" not in r:
            r["graph_in"] = ms(float(stimulus.rsplit("-", 1)[1]))
            r["first_transition"] = ms(t)
        if b == "memory" and a == "processing":
            r["last_in_scheduler"] = max(r.get("last_in_scheduler", 0),
                                         ms(t))
    for worker, log in client.run(_worker_log, window).items():
        for key, a, b, t in log:
            r = entry(key)
            if a == "compute-task":
                r["got"].setdefault(worker, ms(t))
            elif a == "ready" and b == "executing":
                r["started"].setdefault(worker, ms(t))
            elif a == "executing" and b == "memory":
                r["last_end"] = max(r.get("last_end", 0), ms(t))
            elif a == "flight" and b == "memory":
                r["fetched"].append(ms(t))
    out = {}
    for name, r in rounds.items():
        if "graph_in" not in r and not r["got"]:
            continue  # free-keys, gather-dependencies and such
        got, started = sorted(r["got"].values()), sorted(r["started"].values())
        out[name] = {k: v for k, v in dict(
            graph_in=r.get("graph_in"),
            first_transition=r.get("first_transition"),
            workers_got=[got[0], got[len(got) // 2], got[-1]] if got else None,
            workers_started=[started[0], started[len(started) // 2],
                             started[-1]] if started else None,
            last_end=r.get("last_end"),
            last_in_scheduler=r.get("last_in_scheduler"),
            fetched=[min(r["fetched"]), max(r["fetched"])]
            if r["fetched"] else None).items() if v is not None}
    return out


def print_timeline(summary):
    print(f"    timeline ({summary['total_ms']} ms): driver "
          + ", ".join(f"{n} {a}-{b}" for n, a, b in summary["driver"]))
    for name, hops in summary.get("hops", {}).items():
        print(f"      hops {name}: " + ", ".join(
            f"{k} {v}" for k, v in hops.items()), flush=True)
    for name, r in summary["rounds"].items():
        print(f"      {name}: {r['tasks']} tasks {r['first_start']}-"
              f"{r['last_end']} ms, busy {r['busy_share']:.0%}, idle ms "
              f"before/between/after {r['idle_before_first']}/"
              f"{r['idle_between']}/{r['idle_after_last']}; per worker "
              "first-last (busy): " + " ".join(
                  f"{p['first']}-{p['last']}({p['busy']})"
                  for p in r["workers"].values()), flush=True)


def pin_to_core(dask_worker=None):
    """Pin this worker process (all its threads) to one physical core, the
    worker's number modulo the cores (its first hardware thread): workers
    on distinct cores, the scheduler and the driver on what is left."""
    cores = dask_tile_probe.topology()[1]
    cpu = cores[int(dask_worker.name) % len(cores)][0]
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), {cpu})
        except OSError:  # a thread that just ended
            pass
    return cpu


def worker_usage(dask_worker=None):
    """(user s, system s, minor faults, involuntary switches) of this
    worker process so far."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime, usage.ru_stime, usage.ru_minflt,
            usage.ru_nivcsw)


def usage_delta(before, after):
    """The workers' summed CPU seconds and faults between two
    :func:`worker_usage` snapshots (``client.run`` results)."""
    totals = [sum(after[w][i] - before[w][i] for w in after)
              for i in range(4)]
    return dict(user=round(totals[0], 3), sys=round(totals[1], 3),
                minflt=int(totals[2]), nivcsw=int(totals[3]))


def run_header(args, shape):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (f"{platform.node()} ({platform.machine()}, {os.cpu_count()} "
            f"CPUs), {now:%Y-%m-%d %H:%M} UTC; raster {shape[0]} x {shape[1]} "
            f"({shape[0] * shape[1] / 1e6:.0f}M cells), tiles of "
            f"{args.tile_size}, backend {args.backend}")


def write_json(args, shape, rows):
    with open(args.json, "w") as handle:
        json.dump({"bench": "dask", "header": run_header(args, shape),
                   "shape": shape, "tile_size": args.tile_size,
                   "backend": args.backend, "rows": rows}, handle, indent=1)


def tenths(marks, total):
    """Seconds spent in each tenth of the progress, from (fraction, time)
    marks (the rounds' progress spans: see each driver's *_SPAN)."""
    edges = [0.0] * 11
    for fraction, clock in marks:
        edges[min(10, int(fraction * 10 + 1e-9))] = clock
    edges[10] = total
    for k in range(1, 11):
        edges[k] = max(edges[k], edges[k - 1])
    return [round(b - a, 3) for a, b in zip(edges, edges[1:])]


def digest(array):
    """SHA-256 of an array's bytes, read in strips."""
    hasher = hashlib.sha256()
    step = max(1, (64 << 20) // max(1, array.shape[1] * array.itemsize))
    for top in range(0, array.shape[0], step):
        hasher.update(np.ascontiguousarray(array[top:top + step]).tobytes())
    return hasher.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/gridgraph-bench-dask")
    parser.add_argument("--shape", nargs=2, type=int, default=(2048, 2048))
    parser.add_argument("--neuse40", action="store_true",
                        help="17630 x 12555 (bench/scale.py's neuse40)")
    parser.add_argument("--tile-size", type=int, default=256)
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--operations", nargs="+",
                        default=["components", "mst", "costdistance"])
    parser.add_argument("--memory-limit", default="auto",
                        help="per worker, as LocalCluster takes it")
    parser.add_argument("--backend", default="cpu",
                        choices=["cpu", "cuda", "auto"],
                        help="tile kernels (auto picks CUDA where a GPU is: "
                        "every worker process then shares it)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--turns", type=int, default=1,
                        help="run the operations this many times on each "
                        "cluster, in reverse order every other time (ABBA: "
                        "the first run on a fresh cluster is slower, so "
                        "a variant always run first would look slower)")
    parser.add_argument("--gpu-workers", action="store_true",
                        help="workers with the GPU resource (resources="
                        "{'GPU': 1}): with --backend cuda the CUDA tile "
                        "tasks run there (every worker shares this "
                        "machine's GPU)")
    parser.add_argument("--json", help="write the rows to this file (for "
                        "bench/plot.py), after each run")
    parser.add_argument("--inputs-only", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--worker-numba-threads", type=int, default=1)
    parser.add_argument("--scheduler-process", action="store_true",
                        help="the scheduler in a process of its own "
                        "(SubprocessCluster), not on this process's event "
                        "loop with the client (LocalCluster)")
    parser.add_argument("--simulate", action="store_true",
                        help="no cluster: run in this process and model k "
                        "one-thread workers on a virtual clock "
                        "(bench/virtual_cluster.py)")
    parser.add_argument("--spans", action="store_true",
                        help="with --simulate: modelled seconds per tenth "
                        "of the progress")
    parser.add_argument("--round-delta", type=float, default=None,
                        help="cost distance: the rounds' slack in tile "
                        "crossings (rounds.ROUND_DELTA_TILES)")
    parser.add_argument("--settle-delta", type=float, default=None,
                        help="cost distance: a solve's settle bound in tile "
                        "crossings (rounds.SETTLE_DELTA_TILES; 0: none)")
    parser.add_argument("--wait-for-neighbours", action="store_true",
                        help="cost distance: no tile starts beside a lower "
                        "one in flight (rounds.WAIT_FOR_LOWER_NEIGHBOURS)")
    parser.add_argument("--no-hops-wait-for-neighbours", action="store_true",
                        help="cost distance: hops visits start by key "
                        "alone (rounds.HOPS_WAIT_FOR_LOWER_NEIGHBOURS off)")
    parser.add_argument("--round-tasks-per-worker", type=int, default=None,
                        help="cost distance: solves in flight per worker "
                        "on Dask (rounds.ROUND_TASKS_PER_WORKER)")
    parser.add_argument("--hops-tasks-per-worker", type=int, default=None,
                        help="cost distance: hops visits in flight per "
                        "worker on Dask (rounds.HOPS_TASKS_PER_WORKER)")
    parser.add_argument("--no-prefer-free-workers", action="store_true",
                        help="cost distance: start tiles by key alone, "
                        "wherever their state is "
                        "(rounds.PREFER_FREE_WORKERS off)")
    parser.add_argument("--task-stream", action="store_true",
                        help="components: keep Dask's task stream of each "
                        "run in its row (per task: name, worker, start, "
                        "stop)")
    parser.add_argument("--timeline", action="store_true",
                        help="components: the run's timeline in its row "
                        "(the driver's steps and each round's tasks per "
                        "worker, from Dask's task stream; implies "
                        "--task-stream)")
    parser.add_argument("--step-trace", action="store_true",
                        help="cost distance: per TaskPool (solves, hops "
                        "visits) the latencies of a step from its "
                        "submission to its task's start and from its end "
                        "to the driver, and the driver's waiting share "
                        "(implies --task-stream)")
    parser.add_argument("--out-roots", nargs="+", default=None,
                        help="folders for the outputs, each operation run "
                        "once per folder (e.g. ext4 and tmpfs: /dev/shm); "
                        "default: --workdir")
    parser.add_argument("--pin", action="store_true",
                        help="pin each worker process to a physical core "
                        "of its own (the first hardware thread of core "
                        "'worker number mod cores'; bench/dask_tile_probe."
                        "topology)")
    parser.add_argument("--components-pwrite", action="store_true",
                        help="components: the label round writes with "
                        "pwrite (components.tiled.MAPPED_LABEL_WRITES off)")
    args = parser.parse_args()
    known = {"components", "mst", "mst_edges", "costdistance",
             "costdistanceties", *COMPONENT_VARIANTS}
    unknown = [name for name in args.operations if name not in known]
    if unknown:  # (a removed variant would run the defaults unnoticed)
        parser.error(f"unknown operations {unknown}: choose from "
                     f"{sorted(known)}")
    timeline = None
    if args.timeline:
        args.task_stream = True
        timeline = Timeline()
        timeline.install()
    trace = None
    if args.step_trace:
        args.task_stream = True
        trace = StepTrace()
        trace.install()
    from gridgraph.core.components import tiled as components_tiled
    from gridgraph.core.costdistance import rounds
    if args.components_pwrite:
        components_tiled.MAPPED_LABEL_WRITES = False
    if args.round_delta is not None:
        rounds.ROUND_DELTA_TILES = args.round_delta
    if args.settle_delta is not None:
        rounds.SETTLE_DELTA_TILES = args.settle_delta or None
    if args.wait_for_neighbours:
        rounds.WAIT_FOR_LOWER_NEIGHBOURS = True
    if args.no_hops_wait_for_neighbours:
        rounds.HOPS_WAIT_FOR_LOWER_NEIGHBOURS = False
    for name in ("round_tasks_per_worker", "hops_tasks_per_worker"):
        if getattr(args, name) is not None:
            setattr(rounds, name.upper(), getattr(args, name))
    if args.no_prefer_free_workers:
        rounds.PREFER_FREE_WORKERS = False
    shape = NEUSE40 if args.neuse40 else tuple(args.shape)
    if args.inputs_only or args.simulate:
        dem, mask = make_inputs(args.workdir, shape)
        if args.inputs_only:
            return
    else:
        # made in a process of its own (on every core): numba's threads
        # are then never started here, and this process (and the workers
        # it spawns) can run with --worker-numba-threads
        subprocess.run([sys.executable, os.path.abspath(__file__),
                        "--inputs-only", "--workdir", args.workdir, "--shape",
                        str(shape[0]), str(shape[1])], check=True)
        dem, mask = make_inputs(args.workdir, shape)
        if any(name.startswith("costdistanceties") for name in
               args.operations):
            scale.integer_dem(dem)  # made before the timed runs (once)
        # one-thread workers: numba's kernels inside a task use one thread
        # too (by default each worker process starts a pool of every core)
        os.environ["NUMBA_NUM_THREADS"] = str(args.worker_numba_threads)
    if args.simulate:
        return simulate(args, shape, dem, mask)
    from distributed import Client
    crops = []
    for path in (dem, mask):
        # named per process: two benches may share the inputs' folder
        crop = path.replace(".npy", f"-crop-{os.getpid()}.npy")
        np.save(crop, np.load(path, mmap_mode="r")[:2 * args.tile_size,
                                                   :2 * args.tile_size])
        crops.append(crop)
    cells = shape[0] * shape[1]
    rows = []
    reference = {}
    for workers in args.workers:
        load_before = os.getloadavg()[0]
        with local_cluster(args, workers) as cluster, \
                Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(workers)  # subprocesses join late
            pinned = client.run(pin_to_core) if args.pin else None
            for operation, out_root in [
                    (operation, root) for operation in in_turn(
                        args.operations, args.turns)
                    for root in (args.out_roots or [args.workdir])]:
                out_dir = os.path.join(out_root, f"out-{operation}")
                shutil.rmtree(out_dir, ignore_errors=True)
                os.makedirs(out_dir)
                apply_variant(operation, client)
                # a first run on a crop compiles the kernels on every worker
                # (the preflight's warm-up) outside the timing
                run(operation, crops[0], crops[1], client, args.tile_size,
                    out_dir, args.backend)
                shutil.rmtree(out_dir)
                os.makedirs(out_dir)
                stream = None
                if args.task_stream:
                    from distributed import get_task_stream
                    stream = get_task_stream(client=client)
                    stream.__enter__()
                usage = client.run(worker_usage)
                driver_cpu = time.process_time()
                start = time.perf_counter()
                wall_start = time.time()
                marks = []

                def progress(fraction):
                    marks.append((fraction, time.perf_counter() - start))
                    return True

                if timeline is not None:
                    timeline.events = []
                if trace is not None:
                    trace.start()
                outputs, note = run(operation, dem, mask, client,
                                    args.tile_size, out_dir, args.backend,
                                    progress)
                seconds = time.perf_counter() - start
                driver_cpu = time.process_time() - driver_cpu
                wall_stop = time.time()
                usage = usage_delta(usage, client.run(worker_usage))
                if stream is not None:
                    stream.__exit__(None, None, None)
                digests = {name: digest(array)
                           for name, array in outputs.items()}
                # a variant's outputs must be its operation's
                same = reference.setdefault(operation.split("-")[0],
                                            digests) == digests
                rows.append(dict(operation=operation, workers=workers,
                                 seconds=seconds, same=same, note=note,
                                 out_root=out_root, pinned=pinned,
                                 worker_usage=usage,
                                 driver_cpu=driver_cpu,
                                 scheduler_process=args.scheduler_process,
                                 settings=settings(),
                                 digests=digests,
                                 load=(load_before, os.getloadavg()[0]),
                                 tenths=tenths(marks, seconds)))
                if operation.startswith("components"):
                    # where the summary round ends (0.45) and the label
                    # round starts (0.5, after the merge)
                    rows[-1]["phases"] = {
                        "summary_end": min((t for f, t in marks
                                            if f >= 0.45), default=None),
                        "label_start": min((t for f, t in marks
                                            if f >= 0.5), default=None),
                        # after it: the sink's finish (a join)
                        "label_end": min((t for f, t in marks
                                          if f >= 1.0), default=None)}
                if stream is not None:
                    rows[-1]["tasks"] = task_stream(stream.data, wall_start)
                    rows[-1]["transfers"] = transfers(stream.data)
                    print("    transfers:", rows[-1]["transfers"])
                if trace is not None:
                    rows[-1]["steps"] = trace.summary(stream.data)
                    print("    steps:", rows[-1]["steps"])
                if timeline is not None:
                    rows[-1]["timeline"] = timeline_summary(
                        timeline.events, [[n, w, wall_start + a,
                                           wall_start + b] for n, w, a, b
                                          in rows[-1].get("tasks", [])],
                        wall_start, wall_stop)
                    rows[-1]["timeline"]["hops"] = dask_hops(
                        client, wall_start, wall_stop)
                    timeline.events = None
                print({k: v for k, v in rows[-1].items()
                       if k not in ("tasks", "settings", "timeline")},
                      flush=True)
                if "timeline" in rows[-1]:
                    print_timeline(rows[-1]["timeline"])
                if args.json:  # so far: a run cut short keeps its rows
                    write_json(args, shape, rows)
                del outputs
                shutil.rmtree(out_dir, ignore_errors=True)
    header = run_header(args, shape)
    print()
    print(header)
    print()
    if args.json:
        write_json(args, shape, rows)
    print("| operation | outputs in | workers | s | Mcells/s | speed-up | "
          "efficiency | identical | worker CPU s (user + sys) | "
          "driver CPU s | load avg before/after | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = {}
    for row in rows:
        first = base.setdefault((row["operation"], row["out_root"]), row)
        speedup = first["seconds"] / row["seconds"]
        efficiency = speedup * first["workers"] / row["workers"]
        used = row["worker_usage"]
        print(f"| {row['operation']} | {row['out_root']} | {row['workers']} | "
              f"{row['seconds']:.1f} | {cells / row['seconds'] / 1e6:.2f} | "
              f"{speedup:.2f} | {efficiency:.0%} | "
              f"{'yes' if row['same'] else 'NO'} | "
              f"{used['user']:.2f} + {used['sys']:.2f} | "
              f"{row.get('driver_cpu', float('nan')):.2f} | "
              f"{row['load'][0]:.1f} / {row['load'][1]:.1f} | "
              f"{row['note']} |")
    print()
    print("seconds per tenth of the progress (phases: see the drivers' "
          "*_SPAN constants):")
    for row in rows:
        print(f"- {row['operation']} x{row['workers']}: "
              + " ".join(f"{t:.1f}" for t in row["tenths"]))
    for path in crops + ([] if args.keep else [dem, mask]):
        os.remove(path)


if __name__ == "__main__":
    main()
