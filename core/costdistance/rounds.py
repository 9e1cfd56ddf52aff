"""The driver of the tiled cost distance: its rounds, top to bottom.

The tile protocol (the per-tile tasks live in :mod:`.tiled`):

0. :func:`survey_round` -- every tile in parallel: cost checks, band costs,
   the sources of a source raster.
1. :func:`distance_rounds` -- propagation.  A tile waits with a key, the
   least distance its band received (0 for a tile with sources).  Whenever
   a worker is free, the waiting tile with the least key is solved, if its
   key is within :data:`ROUND_DELTA_TILES` tile crossings of the least key
   waiting or being solved (Delta-stepping, Meyer & Sanders, "Delta-stepping:
   a parallelizable shortest path algorithm", 2003, with tiles for
   vertices); its band distances come back as a message and are relaxed
   into the neighbours' bands, which wakes the tiles they improve.
   Distances only decrease and every value is a path sum computed term by
   term as in memory, so the process stops at the least fixed point of
   the relaxation whatever the order or grouping of the solves: the same
   distances as one tile at a time, bit for bit.  In this process (one
   task at a time) the order is exactly the old one: least key first.
2. :func:`hops_rounds` -- the same for the steps of the least (cost, steps)
   pairs, with the distances final (a breadth-first search over tight
   moves; its unique fixed point again).  The steps only break ties
   between tight neighbours: with :data:`HOPS_ONLY_FOR_TIES` rounds 3-4
   read the trees without them first, and these rounds run only when a
   cell ties (then the tiles with ties are done again).
3. :func:`label_round` -- with several source ids: per tile, where each
   band cell's tree leaves the tile (or its id); the chains are followed
   in memory.
4. :func:`output_round` -- per tile: accumulated cost, direction,
   allocation, written by the task itself into a sink on disk.

Tile states (distance and hops, 16 bytes a cell) stay where they were
computed: as futures on the Dask workers, or in an LRU cache here spilling
to the scratch folder.  Only band messages and halos (O(tile side)) travel.
"""

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .. import distributed, tiling
from .._common import Progress, valid_mask
from ..errors import InvalidInputError
from . import FLOAT64_MAX, allocation_dtype
from . import tiled
from .sources import check_blocked_sources, check_costs, check_no_source_cells
from .tiled import (BAND_BYTES_PER_CELL, STATE_BYTES_PER_CELL,
                    TILE_BYTES_PER_CELL, HOPS_UNREACHED, band_cells)

# A round solves the waiting tiles whose key is within this many tile
# crossings (tile side x mean band cost) of the least key: more tiles per
# round keep more workers busy, at the price of tiles solved again when a
# lower distance reaches them later.  H200 host's CPUs (neuse40, tiles of
# 1024, 8 workers, 2026-11-29): 1 and 0.5 solved 3-8 % fewer tiles and
# saved no time (docs/benchmarks.md, "Nineteenth session").
ROUND_DELTA_TILES = 2
# With this on, a tile does not start while a neighbour with a lower or
# equal key is in flight (its answer would likely lower the tile's band):
# fewer solves repeated, fewer tiles started at once.  Off by default: on
# the H100 host's CPUs (neuse40, tiles of 1024, 8 one-thread workers) it
# cut the solves from 445 to 386 but the run took 51.5 s against 47.0 s
# (docs/benchmarks.md, "Dask executor"); on two H200 hosts (2026-11-29,
# "Nineteenth session") 12-15 % fewer solves, 3 % faster on one and 5 %
# slower on the other.
WAIT_FOR_LOWER_NEIGHBOURS = False
# A solve may relax only the cells whose distance is at most this many tile
# crossings above the least key waiting or in flight when it starts (its
# settle bound); the rest stay pending in its state for a later solve, so
# a tile started early settles little that a lower distance arriving later
# would make it redo.  None (the default): no bound, every solve settles
# its tile.  Measured on the H100 host's CPUs (neuse40, tiles of 1024,
# docs/benchmarks.md "Dask executor", 2026-11-24 12:13 UTC) a bound of 1
# nearly doubled the solves (513 at 1 worker, 814 at 8) and each costs
# ~0.1 s of fixed work (state copy, cost read): 261 s / 57 s (57 %) against
# 244 s / 47 s (65 %) without, so it stays off.
SETTLE_DELTA_TILES = None
# The hops rounds' slack (tile sides of hops) and waiting rule, as above.
# Waiting is on for the hops: their visits are short (a breadth-first
# search) and many (a tile is visited again whenever a neighbour lowers its
# halo), so fewer visits pay for fewer tiles in flight.  H100 host's CPUs,
# neuse40, tiles of 1024, 8 one-thread workers (2026-11-24 14:59 UTC,
# docs/benchmarks.md "Dask executor"): 779 visits, 32.6 s against 896
# visits, 37.3 s without (197.1 s at 1 worker, where it changes nothing).
HOPS_DELTA_TILES = 2
HOPS_WAIT_FOR_LOWER_NEIGHBOURS = True
# On a Dask cluster, start the least waiting tile whose state's worker has
# a thread free (or, for a first solve, on a free worker) before a lower
# one whose worker is busy: Dask runs a task where its state is, so
# starting tiles by key alone queues some on busy workers while others
# idle (work stealing moves them later, with their 16-byte-a-cell state).
# Same run as above: 37.3 s with, 41.1 s without (990 hops visits).
PREFER_FREE_WORKERS = True
# On a Dask cluster, tasks in flight per worker thread in the distance
# and the hops rounds.  Between one task's end and the next one's start on
# a worker lies Dask's latency of a step (the step's message to the
# driver, the driver's next task back to the worker): ~25 ms a step on the
# H200 host with Dask's message batching and a message task of its own
# (docs/benchmarks.md, "Fourteenth session"); with the batching off and
# the message pushed from the step's one task (distributed.
# DASK_BATCH_INTERVAL_S, task_pool.PUSHED_MESSAGES) 2 ms to the driver and
# 3-4 ms to the next task's start ("Sixteenth session").  Measured with
# the batching and the message task: a hops visit is short (~36 ms on
# neuse40's 1024 x 1024 tiles), so a second visit queued on each worker
# starts as soon as the first ends: 8 workers 20.9 -> 17.9 s, 1 worker
# 100.9 -> 93.5 s, the same outputs; with the message pushed, see
# "Sixteenth session" for one against two.  A tile solve is long (~130
# ms) and one started on staler distances is more often solved again: two
# solves a worker made 557 solves against 434 and 19.4 s at 8 workers.
ROUND_TASKS_PER_WORKER = 1
HOPS_TASKS_PER_WORKER = 2
# The hops (round 2) only break ties between tight neighbours: a cell with
# one tight neighbour (one whose distance plus the step is exactly its own)
# has it for predecessor whatever the hops.  With this on, the label and
# output rounds first read the trees without hops and count each tile's
# cells with two or more tight neighbours (on the GPU tiles too since the
# twentieth session: _cuda_tiled._count_ties); only when some tile has one
# are the hops rounds run and that tile's labels or blocks made again, as
# the in-memory CPU and the GPU searches skip their hops pass when no cell
# ties.  The same outputs either way.  Off: the hops rounds always run
# before the trees (the code before the nineteenth session).
HOPS_ONLY_FOR_TIES = True
# Progress spans of the rounds.
SURVEY_SPAN = (0.0, 0.1)
DISTANCE_SPAN = (0.1, 0.7)
HOPS_SPAN = (0.7, 0.8)
LABEL_SPAN = (0.8, 0.85)
OUTPUT_SPAN = (0.85, 1.0)
# ... and with HOPS_ONLY_FOR_TIES the label round takes the hops' span too;
# when a round's first pass stops at a tie, the hops get this share of the
# bar left in its span and the tiles done again the rest
TIES_LABEL_SPAN = (HOPS_SPAN[0], LABEL_SPAN[1])
TIES_HOPS_SHARE = 0.5
# Share of the memory budget for the tile states cached here.
STATE_CACHE_SHARE = 0.6


class StateCache:
    """Tile states: Dask futures by tile, or an LRU cache of at most
    ``capacity`` tiles whose evicted states go to the scratch folder."""

    def __init__(self, folder, capacity):
        self.scratch = tiling.ScratchStore(folder, budget_bytes=0)
        self.capacity = max(1, capacity)
        self.cached = OrderedDict()
        self.remote = {}

    def get(self, tile):
        if tile in self.remote:
            return self.remote[tile]
        if tile in self.cached:
            self.cached.move_to_end(tile)
            return self.cached[tile]
        if tile in self.scratch:
            return tuple(self.scratch.get(tile))
        return None

    def returned(self):
        """The tasks that read states without putting them back (label and
        output tasks) have all finished: nothing to do here (the GPU's
        DeviceStates may spill their tiles again)."""

    def put(self, tile, state):
        if distributed.is_future(state):
            old = self.remote.get(tile)
            self.remote[tile] = state
            if old is not None and old is not state:
                old.release()
            return
        self.cached[tile] = state
        self.cached.move_to_end(tile)
        while len(self.cached) > self.capacity:
            old, old_state = self.cached.popitem(last=False)
            self.scratch.put(old, old_state)


class Bands:
    """The driver's global band arrays: each tile's band cells back to
    back (``offset[t]:offset[t + 1]``), their costs (NaN on barriers),
    the distances received from neighbours (``incoming``), the tiles' own
    last distances (``distance``) and hops."""

    def __init__(self, grid, margin, band_costs):
        self.grid = grid
        self.margin = margin
        sizes = np.zeros(grid.count + 1, dtype=np.int64)
        for t, cost in band_costs.items():
            sizes[t + 1] = cost.size
        self.offset = np.cumsum(sizes)
        self.cost = np.empty(self.offset[-1], dtype=np.float64)
        for t, cost in band_costs.items():
            self.cost[self.of(t)] = cost
        self.incoming = np.full(self.size, np.inf)
        self.distance = np.full(self.size, np.inf)
        self.hops = np.full(self.size, HOPS_UNREACHED, np.int64)

    @property
    def size(self):
        return int(self.offset[-1])

    def of(self, t):
        """The slice of tile ``t``'s band."""
        return slice(self.offset[t], self.offset[t + 1])

    def halo(self, t, label=None, flag=None, label_mode=0):
        """The :class:`.tiled.Halo` of tile ``t``."""
        window = self.grid.window(*divmod(t, self.grid.tile_cols))
        return tiled.tile_halo(window, self.margin, self.grid, self.offset,
                               self.cost, self.distance, self.hops, label,
                               flag, label_mode)


# --------------------------------------------------------------------------
# the driver


def cost_distance_tiled(plan, sources, source_ids, source_nodata,
                        connectivity, step_lengths, max_cost, nodata,
                        out_dir, executor, progress, backend="cpu",
                        outputs=("accumulated", "direction", "allocation")):
    """The tiled path of :func:`gridgraph.core.cost_distance`.

    ``backend`` "cuda" solves the tiles on the GPU.  Returns a
    CostDistanceResult whose arrays are in memory, or read-only memmaps of
    ``out_dir/accumulated.npy``, ``direction.npy`` and ``allocation.npy``.
    """
    from . import _source_cells
    rows, cols = plan.source.shape
    out_dir = tiling.check_out_dir(out_dir, rows * cols * 20, plan.limit_bytes)
    source_raster = source_list = None
    candidate = sources if isinstance(sources, (np.ndarray, str)) else \
        np.asarray(sources)
    if isinstance(candidate, str) or (
            candidate.ndim == 2 and candidate.shape == (rows, cols) and not (
                cols == 2 and np.issubdtype(candidate.dtype, np.integer))):
        if source_ids is not None:
            raise InvalidInputError(
                "source_ids only applies to (row, col) sources; a source "
                "raster's ids are its cell values")
        source_raster = tiling.open_source(candidate)
    else:
        source_list = _source_cells(candidate, source_ids, (rows, cols))
    rasters = [plan.source] + ([source_raster] if source_raster else [])
    if distributed.is_distributed(executor):
        for raster in rasters:
            tiling.refuse_in_memory(raster)
    with distributed.tile_executor(
            executor, rasters, out_dir,
            functools.partial(warm_up, plan.source.dtype,
                              connectivity)) as executor:
        return _run(plan, source_raster, source_list, source_nodata,
                    connectivity, step_lengths, max_cost, nodata, out_dir,
                    executor, progress, backend, outputs)


def warm_up(dtype=np.float64, connectivity=8):
    """Compile the tile kernels (a Dask worker's preflight): the tiled path
    on a tiny raster of ``dtype`` with two source ids, in this process."""
    from . import cost_distance
    tiling.warm_up_row_io()  # a tile's rows read from a file raster
    cost = (1 + (np.arange(16 * 16) % 3)).reshape(16, 16).astype(dtype)
    cost_distance(cost, [(0, 0), (15, 15)], source_ids=[1, 2],
                  connectivity=connectivity, tile_size=8, backend="cpu")


def _run(plan, source_raster, source_list, source_nodata, connectivity,
         step_lengths, max_cost, nodata, out_dir, executor, progress, backend,
         outputs):
    from . import KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS, CostDistanceResult
    source = plan.source
    grid = plan.grid
    if nodata is None:
        nodata = source.nodata
    progress = progress if progress is not None else Progress()
    margin = 2 if connectivity == 16 else 1
    problem = Problem(
        source=source, grid=grid, nodata=nodata, margin=margin,
        offsets=np.ascontiguousarray(NEIGHBOUR_OFFSETS[:connectivity]),
        passed=np.ascontiguousarray(KNIGHT_PASSED_CELLS[:connectivity]),
        step_lengths=np.ascontiguousarray(step_lengths, dtype=np.float64),
        max_cost=math.inf if max_cost is None else float(max_cost),
        backend=backend, executor=executor,
        workers=tiling.executor_workers(executor)
        if executor is not None else 1)

    surveys = survey_round(problem, source_raster, source_nodata,
                           progress.span(*SURVEY_SPAN))
    cells, ids = _sources(problem, surveys, source_raster, source_list)
    _check_sums_fit(problem, surveys)
    bands = Bands(grid, margin, {t: s.band_cost
                                 for t, s in surveys.items()})
    del surveys
    tile_sources = _tile_sources(grid, cells, ids)
    distinct_ids = np.unique(ids)

    size = grid.tile_size
    cache_tiles = int((plan.limit_bytes * STATE_CACHE_SHARE
                       - bands.size * BAND_BYTES_PER_CELL
                       - TILE_BYTES_PER_CELL * size * size)
                      // (STATE_BYTES_PER_CELL * size * size))
    # made before the solves (mapped: their space reserved): a full disk
    # fails the run before the tile work, not after it
    sinks = output_sinks(problem, outputs, out_dir,
                         allocation_dtype(distinct_ids))
    with tiling.output_sinks(list(sinks.values())), \
            tiling.scratch_folder(out_dir) as folder:
        states = StateCache(folder, cache_tiles)
        if backend == "cuda" and not distributed.is_distributed(executor):
            from ._cuda_tiled import DeviceStates  # states kept on the GPU
            states = DeviceStates(states, size, problem.margin,
                                  workers=problem.workers)
        solved = distance_rounds(problem, bands, states, tile_sources,
                                 progress.span(*DISTANCE_SPAN))
        solves = problem.solves
        bands.incoming = None
        # barriers: -inf in the band distances, as inside the tiles
        bands.distance[np.isnan(bands.cost)] = -np.inf
        # with one source id the allocation is that id wherever a source
        # reaches: no tree is read
        need_trees = "direction" in outputs or (
            "allocation" in outputs and len(distinct_ids) > 1)
        trees = Trees(problem, bands, states, tile_sources, solved,
                      use_hops=not HOPS_ONLY_FOR_TIES)
        if need_trees and trees.use_hops:
            trees.run_hops(progress.span(*HOPS_SPAN))
        band_label = band_flag = None
        if len(distinct_ids) > 1 and "allocation" in outputs:
            band_label, band_flag = label_round(trees, progress)
        output_round(trees, sinks, need_trees, band_label, band_flag,
                     distinct_ids[0], progress)
        results = {name: sink.finish() for name, sink in sinks.items()}
    result = CostDistanceResult(*(results.get(name) for name in (
        "accumulated", "direction", "allocation")))
    result.tile_solves = solves
    result.hops_visits = problem.hops_visits
    return result


@dataclass
class Problem:
    """What every round needs: the cost source and grid, the moves, the
    executor (and the count of tile solves so far)."""

    source: object
    grid: object
    nodata: object
    margin: int  # band width: 1, or 2 for knight's moves
    offsets: np.ndarray  # the moves (drow, dcol)
    passed: np.ndarray  # the two cells each knight's move passes between
    step_lengths: np.ndarray
    max_cost: float
    backend: str
    executor: object
    workers: int  # tile tasks that may run at once
    solves: int = 0
    hops_visits: int = 0

    def in_flight(self, per_worker):
        """How many tasks of a round to keep in flight: ``per_worker``
        a worker on a Dask cluster (at least one), else one a worker (a
        thread or process pool starts the next task at once)."""
        if distributed.is_dask_client(self.executor):
            return self.workers * max(1, int(per_worker))
        return self.workers

    @property
    def resources(self):
        """Dask resources of the tasks that run ``backend``'s kernels."""
        return distributed.task_resources(self.backend, self.executor)

    def window(self, t):
        return self.grid.window(*divmod(int(t), self.grid.tile_cols))

    def tasks(self, function, arguments, progress, on_result, keep=False,
              until=None):
        """Run ``function`` over the argument tuples (a list, or a
        generator of ``len`` known via ``(count, generator)``); ``until``
        as in :func:`tiling.run_tasks`."""
        count = None
        if isinstance(arguments, tuple):
            count, arguments = arguments
        # with the CUDA backend on Dask, on GPU workers: the tile states
        # of the solves may live on their device
        return tiling.run_tasks(function, arguments, self.executor, progress,
                                on_result=on_result, count=count, keep=keep,
                                resources=self.resources, until=until)


# --------------------------------------------------------------------------
# round 0: survey


# Tiles per Dask task of the survey round: "auto" groups them
# (tile_tasks.BATCHES_PER_THREAD tasks per worker thread; the same calls,
# the same surveys), None one task per tile (the code before the
# eighteenth session).
SURVEY_BATCH = "auto"


def survey_round(problem, source_raster, source_nodata, progress):
    """Every tile's survey message, by tile number."""
    tiles = problem.grid.morton_order()
    # a survey is short (6-9 ms a tile of 1024 on the H200 hosts' CPUs)
    # and its arguments and message are small values: on Dask the tiles go
    # in batches (SURVEY_BATCH), the round to the scheduler at once
    surveys = tiling.run_tasks(
        tiled.survey_tile,
        [(problem.source, problem.grid.window(*tile), problem.nodata,
          problem.margin, source_raster, source_nodata) for tile in tiles],
        problem.executor, progress, batch=SURVEY_BATCH, at_once=True)
    return {problem.grid.index(*tile): s for tile, s in zip(tiles, surveys)}


def _check_sums_fit(problem, surveys):
    """Refuse float64 costs whose accumulated sums could pass the largest
    float64.  The in-memory path scales such costs and detects an overflow
    in its result; the tiles cannot see the whole result, so here the bound
    is taken up front: no accumulated cost exceeds the largest cost times
    the longest step times the number of valid cells (nor, with a maximum
    cost, that maximum plus one step).  Only costs near 1e300 reach it."""
    largest = max(s.largest for s in surveys.values())
    if not largest:
        return
    step = largest * float(np.max(problem.step_lengths))
    n_valid = sum(s.valid for s in surveys.values())
    bound = min(step * n_valid, problem.max_cost + step)
    if bound < FLOAT64_MAX / 4:
        return
    raise InvalidInputError(
        f"the cost raster's costs (up to {largest:.6g}) are too large for "
        f"the tiled path: sums along a path of its {n_valid} valid cells "
        f"could pass the largest float64 ({FLOAT64_MAX:.3g}); divide the "
        "cost raster by a constant (e.g. 1e300) and multiply the result "
        "back, set a maximum cost, or run it in memory")


def _sources(problem, surveys, source_raster, source_list):
    """Check the surveys and the sources (:mod:`.sources`, as in memory);
    return the sources' cells and ids in scan order (as the in-memory path
    lists them)."""
    negatives = [s.first_negative for s in surveys.values() if s.negative]
    check_costs(sum(s.valid for s in surveys.values()),
                sum(s.negative for s in surveys.values()),
                min(negatives, key=lambda f: (f[0], f[1]))
                if negatives else None)
    if source_raster is not None:
        order = sorted(surveys)
        cells = np.concatenate([surveys[t].source_cells for t in order])
        ids = np.concatenate([surveys[t].source_ids for t in order])
        # scan order, as np.argwhere lists them in memory
        scan = np.lexsort((cells[:, 1], cells[:, 0]))
        cells, ids = cells[scan], ids[scan]
        check_no_source_cells(len(cells))
        blocked_cells = np.concatenate([surveys[t].blocked for t in order])
        blocked_cells = blocked_cells[np.lexsort((blocked_cells[:, 1],
                                                  blocked_cells[:, 0]))]
    else:
        cells, ids = source_list
        blocked = np.zeros(len(cells), dtype=bool)
        for k, (r, c) in enumerate(cells):
            blocked[k] = not _cell_valid(problem.source, problem.nodata, r, c)
        blocked_cells = cells[blocked]
    check_blocked_sources(cells, blocked_cells)
    return cells, ids


def _cell_valid(source, nodata, row, col):
    value = source.read(tiling.Window(int(row), int(col), 1, 1))
    return bool(valid_mask(value, nodata)[0, 0])


def _tile_sources(grid, cells, ids):
    """{tile: (local cell indices, ids)} in list order."""
    size = grid.tile_size
    tile_sources = {}
    tile_of_source = (cells[:, 0] // size) * grid.tile_cols \
        + cells[:, 1] // size
    for t in np.unique(tile_of_source):
        pick = np.flatnonzero(tile_of_source == t)  # list order kept
        window = grid.window(*divmod(int(t), grid.tile_cols))
        local = (cells[pick, 0] - window.row) * window.cols \
            + cells[pick, 1] - window.col
        tile_sources[int(t)] = (local.astype(np.int64),
                                ids[pick].astype(np.int64))
    return tile_sources


NO_SOURCES = (np.empty(0, np.int64), np.empty(0, np.int64))


# --------------------------------------------------------------------------
# round 1: distances


def distance_rounds(problem, bands, states, tile_sources, progress):
    """Propagate distances until no tile waits; returns which tiles were
    reached (have a state).

    Tiles are solved as workers free up, not in lock-step rounds: the next
    tile is the waiting one with the least key (a tile is never in flight
    twice), started when its key is within the round's slack of the least
    key waiting or in flight (:func:`_next_tile`).  In this process (one
    task at a time) that is exactly one tile at a time by least key."""
    grid = problem.grid
    rows, cols = grid.shape
    n_tiles = grid.count
    dirty_key = np.full(n_tiles, np.inf)
    for t in tile_sources:
        dirty_key[t] = 0.0
    solved = np.zeros(n_tiles, dtype=bool)
    drow = problem.offsets[:, 0].copy()
    dcol = problem.offsets[:, 1].copy()
    finite = bands.cost[~np.isnan(bands.cost)]
    mean_cost = float(finite.mean()) if finite.size else 0.0
    slack = ROUND_DELTA_TILES * grid.tile_size * mean_cost
    settle = math.inf if SETTLE_DELTA_TILES is None or mean_cost <= 0 \
        else SETTLE_DELTA_TILES * grid.tile_size * mean_cost
    flight_key = np.full(n_tiles, np.inf)  # key of each tile in flight
    neighbours = tile_neighbours(grid) if WAIT_FOR_LOWER_NEIGHBOURS \
        else None
    pool = tiling.TaskPool(problem.executor, keep=True,
                           name="solve_round_tile",
                           resources=problem.resources,
                           locality=PREFER_FREE_WORKERS)
    in_flight = problem.in_flight(ROUND_TASKS_PER_WORKER)
    try:
        while True:
            while len(pool) < in_flight:
                t = _next_tile(dirty_key, flight_key, slack, len(pool) == 0,
                               neighbours, pool.can_start)
                if t < 0:
                    break
                # the settle bound: above the least key waiting or in
                # flight (this tile's included), as the start slack is
                bound = max(min(dirty_key.min(), flight_key.min())
                            + settle, dirty_key[t])
                flight_key[t], dirty_key[t] = dirty_key[t], np.inf
                local = tile_sources.get(t, NO_SOURCES)[0] \
                    if not solved[t] else NO_SOURCES[0]
                pool.submit(t, tiled.solve_round_tile, problem.source,
                            problem.window(t), problem.nodata, states.get(t),
                            local, bands.incoming[bands.of(t)].copy(),
                            problem.margin, problem.offsets,
                            problem.step_lengths, problem.max_cost,
                            problem.passed, problem.backend, bound)
            if len(pool) == 0:
                break
            t, ((band_distance, pending_key), state) = pool.next_done()
            flight_key[t] = np.inf
            states.put(t, state)
            solved[t] = True
            problem.solves += 1
            # its cells left pending wait with their least distance
            dirty_key[t] = min(dirty_key[t], pending_key)
            window = problem.window(t)
            band_r, band_c = band_cells(window.rows, window.cols,
                                        problem.margin)
            band = bands.of(t)
            # a pending band cell comes back +inf: it keeps the distance
            # it was last sent with (a path sum too) until it is settled
            band_distance = np.minimum(band_distance, bands.distance[band])
            changed = band_distance != bands.distance[band]
            bands.distance[band] = band_distance
            tiled._relax_out(
                window.row, window.col, window.rows, window.cols, band_r,
                band_c, band_distance, changed, rows, cols, grid.tile_size,
                grid.tile_cols, problem.margin, bands.offset[t], bands.offset,
                bands.cost, bands.incoming, bands.distance, drow, dcol,
                problem.passed, problem.step_lengths, problem.max_cost,
                dirty_key)
            progress(min(0.99, solved.sum() / n_tiles))
    except BaseException:
        pool.cancel()
        raise
    finally:
        pool.close()
    states.worker_of = pool.worker_of
    return solved


def _next_tile(keys, flight_key, slack, idle, neighbours=None,
               startable=None):
    """The waiting tile (finite key, not in flight) with the least (key,
    tile number) that may start, or -1.

    With ``idle`` (nothing in flight) that is the least waiting tile.  Else
    a tile may start when its key is within ``slack`` of the least key
    waiting or in flight and, given ``neighbours`` (each tile's eight
    neighbours, itself where there is none), no neighbour in flight has a
    key at or below its own: that neighbour's answer would likely lower
    the tile's band and make it solve again.  Given ``startable`` (tile ->
    whether its task would start at once: ``TaskPool.can_start``), the
    least such tile is preferred to a lower one whose worker is busy;
    without one the least tile that may start is still returned."""
    waiting = np.flatnonzero((keys < np.inf) & (flight_key == np.inf))
    if waiting.size == 0:
        return -1
    if idle:
        return int(waiting[np.argmin(keys[waiting])])  # first of equal keys
    order = waiting[np.argsort(keys[waiting], kind="stable")]
    limit = min(keys[order[0]], flight_key.min()) + slack
    first = -1
    for t in order:
        if keys[t] > limit:
            break
        if neighbours is None or not (
                flight_key[neighbours[t]] <= keys[t]).any():
            if startable is None or startable(int(t)):
                return int(t)
            if first < 0:
                first = int(t)
    return first


def tile_neighbours(grid):
    """Each tile's eight neighbours (row-major numbers; the tile itself in
    the place of a neighbour outside the grid)."""
    tile_rows, tile_cols = grid.tile_rows, grid.tile_cols
    r, c = np.divmod(np.arange(grid.count), tile_cols)
    neighbours = np.empty((grid.count, 8), np.int64)
    k = 0
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr, dc) == (0, 0):
                continue
            nr, nc = r + dr, c + dc
            inside = (0 <= nr) & (nr < tile_rows) & (0 <= nc) & (nc < tile_cols)
            neighbours[:, k] = np.where(inside, nr * tile_cols + nc,
                                        r * tile_cols + c)
            k += 1
    return neighbours


# --------------------------------------------------------------------------
# round 2: hops


@dataclass(eq=False)
class Trees:
    """What the rounds that read the trees (labels, outputs) share: the
    tiles reached and whether their hops are final yet.

    Without ``use_hops`` the hops rounds have not run: a round reads the
    trees without them first (``use_hops`` False) until a tile's cells
    tie, then runs the hops and does again the tiles it did not finish
    without a tie (:meth:`ties_first`)."""

    problem: Problem
    bands: Bands
    states: object  # StateCache (or the GPU's DeviceStates)
    tile_sources: dict
    solved: np.ndarray  # by tile: reached
    use_hops: bool

    def run_hops(self, progress):
        hops_rounds(self.problem, self.bands, self.states, self.tile_sources,
                    self.solved, progress)
        self.use_hops = True

    def ties_first(self, run, tiles, progress, span):
        """``run(tiles, progress, stop_at_tie)`` -- a round over ``tiles``
        returning each tile's tie count (-1: not run) -- in ``span`` of
        ``progress``: once without the hops, stopping at the first tile
        with a tie (the tiles in flight finish); then, if it stopped, the
        hops rounds and the round again over the tiles it did not finish
        without a tie, in the rest of the span."""
        start, stop = span
        ties = run(tiles, progress.span(start, stop), True)
        again = np.asarray(tiles)[ties != 0]
        if again.size == 0:
            return
        # its tasks all finished (run_tasks(until=...) waits for those in
        # flight): the states they read may be spilled again while the
        # hops rounds put new ones
        self.states.returned()
        # the bar stands where the first pass's finished tasks put it
        at = start + (stop - start) * np.count_nonzero(ties >= 0) / len(ties)
        middle = at + (stop - at) * TIES_HOPS_SHARE
        self.run_hops(progress.span(at, middle))
        run(again, progress.span(middle, stop), False)


def hops_rounds(problem, bands, states, tile_sources, solved, progress):
    """The hops of every reached tile, with the distances final, by the
    least hops a tile's halo received (sources' tiles first), scheduled as
    :func:`distance_rounds` schedules distances; a tile whose band hops
    dropped wakes the neighbours whose halo holds them.  Hops only drop, so
    this stops at the least fixed point: the hops of a breadth-first search
    of the tight moves, as in memory."""
    grid = problem.grid
    hop_key = np.full(grid.count, np.inf)
    visited = np.zeros(grid.count, dtype=bool)
    for t in tile_sources:
        hop_key[t] = 0.0
    hop_key[~solved] = np.inf  # never reached: nothing to do
    slack = HOPS_DELTA_TILES * grid.tile_size
    flight_key = np.full(grid.count, np.inf)
    neighbours = tile_neighbours(grid) if HOPS_WAIT_FOR_LOWER_NEIGHBOURS \
        else None
    reached = max(int(solved.sum()), 1)
    pool = tiling.TaskPool(problem.executor, keep=True, name="hops_tile",
                           resources=problem.resources,
                           locality=PREFER_FREE_WORKERS)
    # where the distance rounds left each state (a hint: TaskPool.can_start)
    pool.worker_of = dict(getattr(states, "worker_of", {}))
    in_flight = problem.in_flight(HOPS_TASKS_PER_WORKER)
    try:
        while True:
            while len(pool) < in_flight:
                t = _next_tile(hop_key, flight_key, slack, len(pool) == 0,
                               neighbours, pool.can_start)
                if t < 0:
                    break
                flight_key[t], hop_key[t] = hop_key[t], np.inf
                local = tile_sources.get(t, NO_SOURCES)[0] \
                    if not visited[t] else NO_SOURCES[0]
                visited[t] = True
                problem.hops_visits += 1
                pool.submit(t, tiled.hops_tile, problem.source,
                            problem.window(t), problem.nodata, states.get(t),
                            problem.margin, local, bands.halo(t),
                            problem.offsets, problem.passed,
                            problem.step_lengths, problem.backend)
            if len(pool) == 0:
                break
            t, (new_hops, state) = pool.next_done()
            flight_key[t] = np.inf
            states.put(t, state)
            band = bands.of(t)
            changed = new_hops != bands.hops[band]
            bands.hops[band] = new_hops
            if changed.any():
                _wake_neighbours(problem, t, problem.window(t), new_hops,
                                 changed, hop_key, solved)
            progress(min(0.99, visited.sum() / reached))
    except BaseException:
        pool.cancel()
        raise
    finally:
        pool.close()


def _wake_neighbours(problem, t, window, new_hops, changed, hop_key, solved):
    """Lower the key of the neighbouring tiles whose halo holds a band cell
    of tile ``t`` whose hops dropped."""
    grid = problem.grid
    margin = problem.margin
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    least = float(new_hops[changed].min() + 1)
    rows_changed = band_r[changed]
    cols_changed = band_c[changed]
    up = (rows_changed < margin).any()
    down = (rows_changed >= window.rows - margin).any()
    left = (cols_changed < margin).any()
    right = (cols_changed >= window.cols - margin).any()
    tr, tc = divmod(t, grid.tile_cols)
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr, dc) == (0, 0) or (dr == -1 and not up) or (
                    dr == 1 and not down) or (
                    dc == -1 and not left) or (dc == 1 and not right):
                continue
            nr, nc = tr + dr, tc + dc
            if 0 <= nr < grid.tile_rows and 0 <= nc < grid.tile_cols:
                other = nr * grid.tile_cols + nc
                if solved[other] and least < hop_key[other]:
                    hop_key[other] = least


# --------------------------------------------------------------------------
# round 3: allocation labels across tiles


def label_round(trees, progress):
    """With several source ids: each band cell's id, from where its tree
    leaves its tile (per tile, in parallel), those chains followed here.
    Returns the band labels and flags (0: resolved).  Without the hops
    (:class:`Trees`) the tiles whose cells tie are labelled again once
    they are known."""
    bands = trees.bands
    band_label = np.zeros(bands.size, np.int64)
    band_flag = np.zeros(bands.size, np.uint8)
    reached = np.flatnonzero(trees.solved)
    run = functools.partial(_band_labels, trees, band_label, band_flag)
    if trees.use_hops:
        run(reached, progress.span(*LABEL_SPAN), False)
    else:
        trees.ties_first(run, reached, progress, TIES_LABEL_SPAN)
    tiled._resolve_band_labels(band_label, band_flag)
    return band_label, band_flag


def _band_labels(trees, band_label, band_flag, tiles, progress, stop_at_tie):
    """The label tasks of ``tiles``, into the band arrays; returns their
    tie counts (all 0 with the hops known; -1 for a tile not run once
    ``stop_at_tie`` saw one)."""
    problem, bands, states = trees.problem, trees.bands, trees.states
    ties = np.full(len(tiles), -1, np.int64)
    tied = []  # a tile seen with ties

    def arguments():
        for t in tiles:
            local, local_ids = trees.tile_sources.get(int(t), NO_SOURCES)
            yield (problem.source, problem.window(t), problem.nodata,
                   states.get(int(t)), problem.margin, local, local_ids,
                   bands.halo(int(t), label_mode=1), problem.offsets,
                   problem.passed, problem.step_lengths)

    def apply(index, result):
        band = bands.of(int(tiles[index]))
        band_label[band], band_flag[band], ties[index] = result
        if ties[index] > 0:
            tied.append(index)

    problem.tasks(functools.partial(tiled.tile_band_labels,
                                    use_hops=trees.use_hops),
                  (len(tiles), arguments()), progress, apply,
                  until=(lambda: bool(tied)) if stop_at_tie else None)
    return ties


# --------------------------------------------------------------------------
# round 4: outputs


# The output round's tasks write their blocks into the output files
# through shared mappings of the files, their space reserved up front
# (tile_io.NpySink's mapped mode, as components' label round), instead of
# pwrite: buffered writes to one file take its inode's lock, so the
# workers writing one of the three outputs at once queue behind each
# other.  False: pwrite.  Workers on more than one host write with pwrite
# whatever this says (distributed.one_host).  On an H200 host's CPUs
# (neuse40, 8 workers, 2026-11-29) the output round took 2.2-2.4 s either
# way; mapped, its files are reserved when they are made (a full disk
# fails before the solves).
MAPPED_OUTPUT_WRITES = True

OUTPUT_TYPES = {"accumulated": (np.float64, np.nan),
                "direction": (np.float32, np.nan),
                "allocation": (np.int64, 0)}


def output_sinks(problem, outputs, out_dir, allocation_type=np.int64):
    """The sinks of ``outputs`` by name: ``.npy`` files in ``out_dir``
    (written through mappings with :data:`MAPPED_OUTPUT_WRITES` on one
    host), else in memory.  ``allocation_type``: the allocation raster's
    dtype (costdistance.allocation_dtype of the ids)."""
    types = dict(OUTPUT_TYPES, allocation=(allocation_type, 0))
    mapped = MAPPED_OUTPUT_WRITES and out_dir is not None and \
        distributed.one_host(problem.executor)
    sinks = {}
    # (a view: a sink failing to be made, on a full disk, aborts the ones
    # made before it)
    with tiling.output_sinks(sinks.values()):
        for name in outputs:
            sinks[name] = tiling.make_sink(out_dir, name, problem.grid.shape,
                                           *types[name], mapped=mapped)
    return sinks


def output_round(trees, sinks, need_trees, band_label, band_flag, first_id,
                 progress):
    """Every output block, written into ``sinks`` (:func:`output_sinks`):
    by the tasks themselves for sinks on disk (each writes its own
    window), else here.  Without the hops (:class:`Trees`) the blocks of
    the tiles whose cells tie are made again once they are known."""
    problem = trees.problem
    reached = np.flatnonzero(trees.solved)
    # tiles no source reaches: their blocks are the fill values
    for t in np.flatnonzero(~trees.solved):
        window = problem.window(t)
        shape = (window.rows, window.cols)
        for name, sink in sinks.items():
            dtype, fill = OUTPUT_TYPES[name]
            sink.write(window, np.full(shape, fill, dtype))
    run = functools.partial(_output_blocks, trees, sinks, need_trees,
                            band_label, band_flag, first_id)
    if trees.use_hops or not need_trees:
        run(reached, progress.span(*OUTPUT_SPAN), False)
    else:
        trees.ties_first(run, reached, progress, OUTPUT_SPAN)


def _output_blocks(trees, sinks, need_trees, band_label, band_flag,
                   first_id, tiles, progress, stop_at_tie):
    """The output tasks of ``tiles``; returns their tie counts (all 0 with
    the hops known; -1 for a tile not run once ``stop_at_tie`` saw one;
    a tile with ties writes nothing)."""
    problem, bands, states = trees.problem, trees.bands, trees.states
    outputs = tuple(sinks)
    in_task = all(isinstance(s, tiling.NpySink) for s in sinks.values())
    ties = np.full(len(tiles), -1, np.int64)
    tied = []  # a tile seen with ties

    def arguments():
        for t in tiles:
            local, local_ids = trees.tile_sources.get(int(t), NO_SOURCES)
            if not need_trees:
                halo = None
            elif band_label is not None:
                halo = bands.halo(int(t), band_label, band_flag, 2)
            else:
                halo = bands.halo(int(t))
            yield (problem.source, problem.window(t), problem.nodata,
                   states.get(int(t)), problem.margin, local, local_ids,
                   halo, problem.offsets, problem.passed,
                   problem.step_lengths, tuple(outputs),
                   None if band_label is not None else first_id)

    def write(index, result):
        # the tasks wrote their blocks (in_task) or hand them on here;
        # a tile with ties wrote nothing and is made once the hops are known
        blocks, ties[index] = (None, result) if in_task else result
        if ties[index] > 0:
            tied.append(index)
        elif blocks is not None:
            window = problem.window(tiles[index])
            for name, sink in sinks.items():
                sink.write(window, blocks[name])

    function = functools.partial(tiled.write_outputs, sinks) if in_task \
        else tiled.tile_outputs
    function = functools.partial(function, use_hops=trees.use_hops)
    problem.tasks(function, (len(tiles), arguments()), progress, write,
                  until=(lambda: bool(tied)) if stop_at_tie else None)
    return ties
