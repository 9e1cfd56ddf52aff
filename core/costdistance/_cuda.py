"""CUDA kernels of cost distance: tile-wise relaxation with an active-tile
worklist, scheduled near-far, in two phases (distances, then hops).

The raster is cut into TILE x TILE tiles.  A round processes a list of
active tiles with one thread block each: the tile's values, with a halo of
one cell (two for knight's moves), go to shared memory; the block relaxes
its cells against their neighbours (pull form: each thread owns its cells,
so only it writes them) until nothing changes in the tile; changed cells go
back to global memory, and a change within the halo width of a tile border
wakes the tile across it, lowering that tile's key to the least changed
distance (the active-tile worklist of doi 10.1145/2803172).  Woken tiles
are relaxed in distance buckets: a round takes the woken tiles whose key is
within the current threshold; when none is left the threshold moves to the
least waiting key plus DELTA_TILES tiles' worth of cost (delta-stepping,
Meyer & Sanders 2003; near-far, Davidson et al. 2014), which keeps tiles
from being relaxed again and again with values that are not final yet.  The
rounds end when no tile is woken.  The schedule's state (threshold, bucket
moves, the end) lives on the device: the host queues rounds and reads it
once per ROUNDS_PER_CHECK rounds, not once a round.

Exactness.  Every cell gets the pair (d, h), the unique fixed point of
``(d, h)[c] = lexmin over allowed neighbours n of (d[n] + w(n, c), h[n] + 1)``
with sources at (0, 0), compared cost first; ``w(n, c)`` is
``(c_n + c_c) * L / 2`` evaluated exactly as the CPU does (float64, product
and sum rounded separately: no fused multiply-add).  The distance part is
the least accumulated cost, and h is the least number of steps among the
neighbours that give it.

1. Distances.  Only strict decreases of d are accepted and the rounds run
   to the fixed point of ``d[c] = min over n of d[n] + w(n, c)``; values
   only decrease and rounding is monotone, so that fixed point is the least
   accumulated cost in any order: Dijkstra's, bit for bit.
2. Hops, with the distances fixed.  Neighbour n is *tight* for c when
   ``d[n] + w(n, c) == d[c]`` (one bit per neighbour, computed once), and
   h is relaxed by ``h[c] = min(h[c], h[n] + 1)`` over tight neighbours
   from h = 0 at the sources: a breadth-first distance on the tight graph,
   again the same in any order.  Hops only break ties between tight
   neighbours, so :func:`solve_device` skips this phase when no cell has
   two (costs without exact ties: most real-valued rasters).

Why not relax the pairs in one pass, accepting ``d' < d or (d' == d and
h' < h)``?  Rounding can make a cell's value depend on a neighbour's value
that was not final yet: if n first holds d' > d[n] with few hops and
``d' + w == d[n] + w`` after rounding, c takes (d[c], few + 1) and keeps it
after n drops to (d[n], many), though the fixed point is (d[c], many + 1);
which value a cell keeps would depend on the order of the relaxation.
Dijkstra (the CPU backend) never relaxes from a value that is not final,
so it reaches the fixed point; phase 2 relaxes only once d is final.

A reached non-source cell's predecessor code is then computed from the
final (d, h) alone, one thread per cell: the allowed neighbour index i
minimising (d[n] + w(n, c), h[n], i); sources (h == 0) get -2, unreached
cells -1.  Hops fall by one along it, so the trees have no cycle, and the
allocation (the id of the root source) is read off them by pointer jumping.

:func:`solve_seeded` runs either phase (or both) on a tile of the tiled
path from a previous state and a list of lowered (seed) cells.  For the
reason above, canonical hops across tiles need every tile's distances final
first: the tiled driver runs phase 1 over all tiles, then phase 2.

The tile kernels are in ``_cuda_tiles``; this module holds the host side
(the launch loop of the schedule, the solves) and the per-cell kernels.
Shared memory per block (TILE 32): phase 1 about 21 KB (costs and
distances of the 36 x 36 span); with the move offsets compiled in
(CONSTANT_STEPS) the compiler gives the distance kernel 89 registers a
thread (H100, numba-cuda 0.30.4, 2026-11-24), 2 blocks of 256 threads an
SM; capped at DISTANCE_REGISTERS = 64 (3 blocks) it ran 0.423 s against
0.473 s uncapped and 0.607 s with shared offsets, in one run (16384²
fractal, one source, device only).
"""

import numpy as np
from numba import cuda

from .._common import as_progress, index_dtype
from ..errors import InvalidInputError
from .._cuda_common import (FLAT_THREADS, SIMULATOR, PhaseTimer, add_rn,
                            blocks_for, check_device_memory, device_scalar,
                            mul_rn)
# the tile kernels and their geometry (re-exported: tests and the tiled
# driver read TILE here)
from ._cuda_tiles import (BUCKETS, DELTA, DONE, LISTED, ROUNDS, TILE,
                          TILE_THREADS, _advance, _collect_tiles,
                          _relax_distance_tiles, _relax_hops_tiles)

# Rounds queued between two reads of the schedule's state (each read is a
# host round trip; rounds queued after the end find no tile and do nothing).
ROUNDS_PER_CHECK = 2 if SIMULATOR else 24
# Distance sweeps: each thread relaxes ROWS_PER_THREAD consecutive rows of
# its column, downward then upward on alternate sweeps (True), or every
# THREADS_Y-th row (False).  Either gives the same distances (the fixed
# point does not depend on the order); the number of sweeps differs.
CONSECUTIVE_ROWS = True
# Passes of a thread over its rows between two block-wide barriers (a
# sweep); any number gives the same distances.  Two, down then up (H100,
# one run, 16384² / 4096² fractal: 0.597 / 0.083 s device with 6.5 sweeps
# a visit, against 0.641 / 0.100 s with one pass and 11.9 sweeps).
PASSES_PER_SWEEP = 2
# The distance kernel's move offsets as compiled-in constants with its
# loops unrolled (True), or read from shared arrays; same distances.
CONSTANT_STEPS = True
# bench/gpu.py times each of these in one run (set_variant).
BENCH_VARIANTS = ("shared offsets", "constant offsets")


def set_variant(variant):
    """For bench/gpu.py: pick the distance kernel's variant by name (None:
    the default)."""
    global CONSTANT_STEPS
    CONSTANT_STEPS = variant != "shared offsets"


# Blocks of a relaxation launch: they take the listed tiles in turn.
RELAX_BLOCKS = 4 if SIMULATOR else 2048
# Bucket width of the tile schedule, in tiles crossed at the mean cost (4
# was the fastest of 0.5-8 on a 16384² fractal on an H200).
DELTA_TILES = 4.0
# Predecessor codes besides neighbour indices (as in the CPU kernel).
PREDECESSOR_UNREACHED = -1
PREDECESSOR_SOURCE = -2
# Fraction of the progress bar given to the distance phase.
DISTANCE_SHARE = 0.7
# Bucket width of the hops phase, as a multiple of the distance phase's:
# with the distances final, plain rounds over every woken tile beat
# buckets (16384² fractal, one source, H100: hops phase 0.42 s in 534
# rounds; 0.82 s in 1064 rounds with the distance phase's buckets).
HOPS_DELTA_SCALE = np.inf


@cuda.jit(cache=True)
def _init_state(cost, valid, n, unset, dist, hops, alloc):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        if not valid[i]:
            cost[i] = np.nan  # barriers: no candidate ever uses them
        dist[i] = np.inf
        hops[i] = unset
        alloc[i] = 0


@cuda.jit(cache=True)
def _seed(cells, ids, m, dist, hops, alloc):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        cell = cells[k]
        dist[cell] = 0.0
        hops[cell] = 0
        alloc[cell] = ids[k]


@cuda.jit(cache=True)
def _mark_barriers(cost, valid, n, dist):
    """Barriers get a NaN cost; a NaN distance on a valid cell (unreached
    written as NaN) becomes +inf, which the relaxation can lower."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        if not valid[i]:
            cost[i] = np.nan
        elif dist[i] != dist[i]:
            dist[i] = np.inf


@cuda.jit(device=True, inline=True)
def _step_from(cost, dist, rows, cols, row, col, i, offsets, passed,
               half_step, cb, own):
    """(neighbour, d[n] + w(n, c)) for the neighbour n at offset i of cell
    (row, col), whose cost is ``cb`` and distance ``own``; neighbour -1 when
    n is outside, a barrier, farther than ``own`` or a knight's move passes
    beside a barrier.  Float64 sums, as in the relaxation (the costs may be
    float32)."""
    nr = row + offsets[i, 0]
    nc = col + offsets[i, 1]
    if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
        return -1, np.inf
    neighbour = nr * cols + nc
    ca = np.float64(cost[neighbour])
    da = dist[neighbour]
    if ca != ca or not da <= own:
        return -1, np.inf
    # a knight's passed cells lie in the raster with its target
    if i >= 8:
        pa = cost[(row + passed[i, 0, 0]) * cols + col + passed[i, 0, 1]]
        pb = cost[(row + passed[i, 1, 0]) * cols + col + passed[i, 1, 1]]
        if pa != pa or pb != pb:
            return -1, np.inf
    return neighbour, add_rn(da, mul_rn(ca + cb, half_step[i]))


@cuda.jit(cache=True)
def _tight_masks(cost, dist, rows, cols, connectivity, offsets, passed,
                 half_step, mask):
    """mask[c] bit i: the allowed neighbour at offset i gives c its final
    distance exactly (``d[n] + w(n, c) == d[c]``); 0 where unreached."""
    cell = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if cell < rows * cols:
        bits = 0
        # float64 sums, as in the relaxation (the costs may be float32)
        cb = np.float64(cost[cell])
        own = dist[cell]
        if cb == cb and own < np.inf:
            row = cell // cols
            col = cell - row * cols
            for i in range(connectivity):
                neighbour, candidate = _step_from(cost, dist, rows, cols, row,
                                                  col, i, offsets, passed,
                                                  half_step, cb, own)
                if neighbour >= 0 and candidate == own:
                    bits |= 1 << i
        mask[cell] = bits


@cuda.jit(cache=True)
def _find_ties(mask, hops, n, found):
    """found[0] = 1 when a non-source cell has two tight neighbours or
    more (unreached cells have none)."""
    cell = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if cell < n:
        bits = np.int32(mask[cell])
        if bits & (bits - 1) != 0 and hops[cell] != 0:
            found[0] = 1


@cuda.jit(cache=True)
def _sample(cost, n, stride, sample):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k * stride < n and k < sample.shape[0]:
        sample[k] = cost[k * stride]


@cuda.jit(cache=True)
def _predecessors(cost, dist, hops, rows, cols, connectivity, offsets, passed,
                  half_step, pred):
    """Canonical predecessor codes from the final (d, h): the allowed
    neighbour index i minimising (d[n] + w(n, c), h[n], i); -2 at sources
    (h == 0), -1 where unreached.  At the fixed point the least candidate
    is d[c], so neighbours with d[n] > d[c] are skipped unread."""
    cell = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if cell < rows * cols:
        code = PREDECESSOR_UNREACHED
        # float64 sums, as in the relaxation (the costs may be float32)
        cb = np.float64(cost[cell])
        own = dist[cell]
        if cb == cb and own < np.inf:
            if hops[cell] == 0:
                code = PREDECESSOR_SOURCE
            else:
                row = cell // cols
                col = cell - row * cols
                best = np.inf
                best_hops = hops[cell]
                for i in range(connectivity):
                    neighbour, candidate = _step_from(
                        cost, dist, rows, cols, row, col, i, offsets, passed,
                        half_step, cb, own)
                    if neighbour < 0:
                        continue
                    there = hops[neighbour]
                    # i ascends: a full tie keeps the lower index
                    if candidate < best or (candidate == best
                                            and there < best_hops):
                        best = candidate
                        best_hops = there
                        code = i
        pred[cell] = code


@cuda.jit(cache=True)
def _finish(dist, pred, n):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and pred[i] == PREDECESSOR_UNREACHED:
        dist[i] = np.nan


@cuda.jit(cache=True)
def _predecessor_cells(pred, n, cols, offsets, root):
    """root[i] = the cell i was reached from (itself for a source)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        p = pred[i]
        if p == PREDECESSOR_UNREACHED:
            root[i] = -1
        elif p == PREDECESSOR_SOURCE:
            root[i] = i
        else:
            root[i] = i + offsets[p, 0] * cols + offsets[p, 1]


@cuda.jit(cache=True)
def _jump_roots(root, n, changed):
    """root[i] = root[root[i]]; concurrent updates only ever store an
    ancestor, so a reader sees an old or a newer ancestor."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        x = root[i]
        if x >= 0:
            y = root[x]
            if y != x:
                root[i] = y
                changed[0] = 1


@cuda.jit(cache=True)
def _allocate(root, n, alloc):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        x = root[i]
        if x >= 0 and x != i:
            alloc[i] = alloc[x]


@cuda.jit(cache=True)
def _allocate_one(pred, n, source_id, alloc):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and pred[i] >= 0:
        alloc[i] = source_id


def flat_cost(array):
    """Costs as the CPU kernel reads them: float32 for float32 input and
    integers of up to 16 bits (exact), float64 otherwise; flat."""
    array = np.asarray(array)
    return np.ascontiguousarray(array, dtype=cost_dtype(array.dtype)
                                ).reshape(-1)


def cost_dtype(dtype):
    """The dtype :func:`flat_cost` gives costs of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return np.dtype(dtype.type)  # native byte order
    if dtype.kind in "iub" and dtype.itemsize <= 2:
        return np.dtype(np.float32)
    if dtype.kind == "f" and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def unique_sources(source_cells, ids, cols):
    """Flat source cells without repeats; a repeated cell keeps the id of
    its first listing (as on the CPU)."""
    flat = (np.asarray(source_cells[:, 0], dtype=np.int64) * cols
            + np.asarray(source_cells[:, 1], dtype=np.int64))
    flat_unique, first = np.unique(flat, return_index=True)
    return flat_unique, np.asarray(ids, dtype=np.int64)[first]


def default_delta(cost, n, step_lengths):
    """Bucket width of the tile schedule: the cost of crossing about
    DELTA_TILES tiles at the raster's mean cost (estimated from a sample of
    at most 2**16 cells)."""
    stride = max(1, n // 65536)
    picked = blocks_for(n, stride)
    sample = cuda.device_array(picked, dtype=np.float64)
    _sample[blocks_for(picked, FLAT_THREADS), FLAT_THREADS](cost, n, stride,
                                                           sample)
    sample = sample.copy_to_host()
    sample = sample[~np.isnan(sample)]
    typical = float(sample.mean()) if len(sample) else 0.0
    if not typical > 0:
        return np.inf
    return DELTA_TILES * TILE * typical * float(np.min(step_lengths))


def device_bytes(n_cells, cost_itemsize):
    """GPU memory :func:`solve` needs: cost, valid, distance, hops, tight
    mask, predecessor, allocation, roots and the tile arrays."""
    index_size = np.dtype(index_dtype(n_cells)).itemsize
    n_tiles = n_cells // (TILE * TILE) + 1
    return n_cells * (cost_itemsize + 1 + 8 + index_size + 2 + 1 + 8
                      + index_size) + 32 * n_tiles


class _Grid:
    """Launch geometry and the per-raster constants of the relaxation."""

    def __init__(self, rows, cols, connectivity, step_lengths):
        # the package imports this module lazily
        from . import KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS

        self.rows = rows
        self.cols = cols
        self.n = rows * cols
        self.flat = blocks_for(self.n, FLAT_THREADS)
        self.connectivity = connectivity
        self.tiles_x = blocks_for(cols, TILE)
        self.tiles_y = blocks_for(rows, TILE)
        self.n_tiles = self.tiles_x * self.tiles_y
        self.halo = 2 if connectivity == 16 else 1
        self.offsets = cuda.to_device(
            np.ascontiguousarray(NEIGHBOUR_OFFSETS[:connectivity]))
        self.passed = cuda.to_device(
            np.ascontiguousarray(KNIGHT_PASSED_CELLS[:connectivity]))
        self.half_step = cuda.to_device(
            0.5 * np.asarray(step_lengths, dtype=np.float64))

    def tiles_around(self, cells, keys):
        """Wake flags and keys of the tiles holding ``cells`` and of their
        eight neighbours (a cell on a border has neighbours across it),
        each keyed by the least of ``keys`` among the cells it is near."""
        # the least key of each tile's own cells first (one pass over the
        # cells), then spread to the 3 x 3 tiles around on the tile grid:
        # the same minima as a pass over the cells per neighbour, which
        # took 4.3 s for 16.3M sources at 16384² (habitat network, H100)
        cells = np.asarray(cells, dtype=np.int64)
        tiles = ((cells // self.cols) // TILE * self.tiles_x
                 + (cells % self.cols) // TILE)
        own_key = np.full(self.n_tiles, np.inf)
        np.minimum.at(own_key, tiles, keys)
        own = np.zeros(self.n_tiles, dtype=bool)
        own[tiles] = True
        shape = (self.tiles_y, self.tiles_x)
        own_key, own = own_key.reshape(shape), own.reshape(shape)
        wake = np.zeros(shape, dtype=np.int32)
        tile_key = np.full(shape, np.inf)
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                # tile (r + dr, c + dc) is near the cells of tile (r, c)
                near = (slice(max(0, dr), self.tiles_y + min(0, dr)),
                        slice(max(0, dc), self.tiles_x + min(0, dc)))
                of = (slice(max(0, -dr), self.tiles_y - max(0, dr)),
                      slice(max(0, -dc), self.tiles_x - max(0, dc)))
                wake[near] |= own[of]
                np.minimum(tile_key[near], own_key[of], out=tile_key[near])
        return wake.reshape(-1), tile_key.reshape(-1)


def _near_far(launch, wake, tile_key, n_tiles, delta, progress):
    """Relax woken tiles in distance buckets until none is woken.

    ``launch(worklist, listed, blocks)`` relaxes the ``listed[0]`` tiles
    of the worklist (device arrays) with ``blocks`` blocks and wakes tiles
    through ``wake``/``tile_key``.  The schedule (threshold, bucket moves,
    the end) lives on the device: the host queues ROUNDS_PER_CHECK rounds
    of three launches and reads one flag, instead of a copy per round.
    Returns (rounds, buckets).  The bucket width ``delta`` changes the time
    taken, never the result.
    """
    worklist = cuda.device_array(max(n_tiles, 1), dtype=np.int32)
    counters = cuda.to_device(np.array([0, 0, 1, 0], dtype=np.int64))
    schedule = cuda.to_device(np.array([delta, np.inf, delta]))
    collect_grid = blocks_for(n_tiles, FLAT_THREADS)
    listed = counters[LISTED:LISTED + 1]
    blocks = max(1, min(n_tiles, RELAX_BLOCKS))
    checks = 0
    while True:
        # near-far scheduling (delta-stepping over tiles): relax the woken
        # tiles whose key is within the threshold; when none is left, move
        # the threshold to the least deferred key + delta
        for _ in range(ROUNDS_PER_CHECK):
            _collect_tiles[collect_grid, FLAT_THREADS](
                wake, tile_key, n_tiles, schedule, worklist, counters)
            launch(worklist, listed, blocks)
            _advance[1, 1](schedule, counters)
        checks += 1
        state = counters.copy_to_host()
        if state[DONE]:
            break
        if progress is not None:
            # no exact measure of what is left: approach 1 smoothly
            progress(state[ROUNDS] / (state[ROUNDS] + n_tiles ** 0.5))
    return int(state[ROUNDS]), int(state[BUCKETS])


def _relax_distances(grid, cost, dist, hops, reset_hops, unset, max_cost,
                     wake, tile_key, delta, progress, stats,
                     track_changed=False):
    """Phase 1 to the fixed point; returns (the least changed distance per
    tile: a device array, +inf where nothing changed, all +inf unless
    ``track_changed``; the rounds)."""
    changed_key = cuda.to_device(np.full(grid.n_tiles, np.inf))
    work = cuda.to_device(np.zeros(2, dtype=np.int64))

    def launch(worklist, listed, blocks):
        _relax_distance_tiles[blocks, TILE_THREADS](
            cost, dist, hops, reset_hops, unset, grid.rows, grid.cols,
            grid.tiles_x, grid.tiles_y, worklist, listed, grid.connectivity,
            grid.halo, grid.offsets, grid.passed, grid.half_step, max_cost,
            wake, tile_key, changed_key, track_changed, work,
            CONSECUTIVE_ROWS, PASSES_PER_SWEEP, CONSTANT_STEPS)

    rounds, buckets = _near_far(launch, wake, tile_key, grid.n_tiles, delta,
                                progress)
    if stats is not None:
        visits, sweeps = (int(v) for v in work.copy_to_host())
        stats.update(rounds=rounds, buckets=buckets, delta=delta,
                     tiles_relaxed=visits, tiles=grid.n_tiles,
                     sweeps_per_visit=sweeps / max(visits, 1))
    return changed_key, rounds


def _tight(grid, cost, dist):
    """The tight-neighbour masks of every cell (device array)."""
    mask = cuda.device_array(grid.n, dtype=np.uint16)
    _tight_masks[grid.flat, FLAT_THREADS](
        cost, dist, grid.rows, grid.cols, grid.connectivity, grid.offsets,
        grid.passed, grid.half_step, mask)
    return mask


def _any_tie(grid, mask, hops):
    """Whether some reached non-source cell has two tight neighbours or
    more (only then can hops change a predecessor)."""
    found = cuda.to_device(np.zeros(1, dtype=np.int32))
    _find_ties[grid.flat, FLAT_THREADS](mask, hops, grid.n, found)
    return bool(device_scalar(found, 0))


def _relax_hops(grid, mask, dist, hops, unset, wake, tile_key, delta,
                progress, stats):
    """Phase 2 to the fixed point (distances final, ``mask`` from
    :func:`_tight`)."""
    work = cuda.to_device(np.zeros(2, dtype=np.int64))

    def launch(worklist, listed, blocks):
        _relax_hops_tiles[blocks, TILE_THREADS](
            mask, dist, hops, unset, grid.rows, grid.cols, grid.tiles_x,
            grid.tiles_y, worklist, listed, grid.connectivity, grid.halo,
            grid.offsets, wake, tile_key, work)

    rounds, buckets = _near_far(launch, wake, tile_key, grid.n_tiles, delta,
                                progress)
    if stats is not None:
        visits, sweeps = (int(v) for v in work.copy_to_host())
        stats.update(hops_rounds=rounds, hops_buckets=buckets,
                     hops_tiles_relaxed=visits,
                     hops_sweeps_per_visit=sweeps / max(visits, 1))
    return rounds


def _spans(progress):
    """Progress reporters of the two phases (None without progress)."""
    if progress is None:
        return None, None
    progress = as_progress(progress)
    return (progress.span(0.0, DISTANCE_SHARE),
            progress.span(DISTANCE_SHARE, 1.0))


def solve_device(cost, valid, rows, cols, cells, ids, connectivity,
                 step_lengths, max_cost, progress=None, stats=None,
                 delta=None):
    """Cost distance on device arrays.

    ``cost`` (float32/float64, flat, overwritten with NaN on barriers) and
    ``valid`` (uint8) hold rows * cols cells; ``cells``/``ids`` are the
    de-duplicated flat source cells and their ids (host arrays).  Returns
    device arrays (accumulated, predecessor, allocation) and the number of
    rounds of both phases.  ``stats`` (a dict) receives phase times and tile
    counts.  ``delta`` is the width of the distance buckets of the tile
    schedule (None: :func:`default_delta`; inf: plain rounds over all woken
    tiles); it changes the time taken, never the result.
    """
    timer = PhaseTimer(stats)
    grid = _Grid(rows, cols, connectivity, step_lengths)
    n = grid.n
    hops_dtype = index_dtype(n)
    # hops < n: a breadth-first distance on the tight graph
    unset = np.iinfo(hops_dtype).max
    dist = cuda.device_array(n, dtype=np.float64)
    hops = cuda.device_array(n, dtype=hops_dtype)
    from . import allocation_dtype  # the package imports this lazily
    alloc = cuda.device_array(n, dtype=allocation_dtype(ids))
    _init_state[grid.flat, FLAT_THREADS](cost, valid, n, unset, dist, hops,
                                         alloc)
    m = len(cells)
    _seed[blocks_for(m, FLAT_THREADS), FLAT_THREADS](
        cuda.to_device(cells), cuda.to_device(ids), m, dist, hops, alloc)
    if delta is None:
        delta = default_delta(cost, n, step_lengths)
    # The seeds are written straight to global memory, so no tile has seen
    # them change: start with the sources' tiles and their neighbours.
    zero = np.zeros(m)
    distance_progress, hops_progress = _spans(progress)
    timer.mark("initialise")
    wake, tile_key = (cuda.to_device(a)
                      for a in grid.tiles_around(cells, zero))
    # every hop is unset until phase 2: nothing to reset
    _, rounds = _relax_distances(grid, cost, dist, hops, False, unset,
                                 float(max_cost), wake, tile_key, delta,
                                 distance_progress, stats)
    timer.mark("relax")
    mask = _tight(grid, cost, dist)
    # Hops only break ties between tight neighbours: without a tie every
    # predecessor is the one tight neighbour, whatever the hops.
    needs_hops = _any_tie(grid, mask, hops)
    if needs_hops:
        wake, tile_key = (cuda.to_device(a)
                          for a in grid.tiles_around(cells, zero))
        rounds += _relax_hops(grid, mask, dist, hops, unset, wake, tile_key,
                              delta * HOPS_DELTA_SCALE, hops_progress, stats)
    del mask
    if stats is not None:
        stats["hops_phase"] = "run" if needs_hops else "skipped: no tie"
    timer.mark("hops")
    pred = cuda.device_array(n, dtype=np.int8)
    _predecessors[grid.flat, FLAT_THREADS](
        cost, dist, hops, rows, cols, connectivity, grid.offsets, grid.passed,
        grid.half_step, pred)
    _finish[grid.flat, FLAT_THREADS](dist, pred, n)
    timer.mark("predecessor")
    distinct_ids = np.unique(ids)
    if len(distinct_ids) == 1:
        _allocate_one[grid.flat, FLAT_THREADS](pred, n, int(distinct_ids[0]),
                                               alloc)
    else:
        root = cuda.device_array(n, dtype=index_dtype(n))
        _predecessor_cells[grid.flat, FLAT_THREADS](pred, n, cols,
                                                    grid.offsets, root)
        changed = cuda.to_device(np.ones(1, dtype=np.int32))
        while int(device_scalar(changed, 0)):
            changed[0] = 0
            _jump_roots[grid.flat, FLAT_THREADS](root, n, changed)
        _allocate[grid.flat, FLAT_THREADS](root, n, alloc)
    timer.mark("allocation")
    return dist, pred, alloc, rounds


def solve(array, valid, source_cells, ids, connectivity, step_lengths,
          max_cost, progress, delta=None):
    """Accumulated cost, predecessor and allocation rasters on the GPU.

    Same contract as :func:`gridgraph.core.costdistance._cpu.solve`, with
    the same result on every input (ties included); ``delta`` as in
    :func:`solve_device` (any value, same result).
    """
    rows, cols = array.shape
    n = rows * cols
    cost = flat_cost(array)
    check_device_memory(device_bytes(n, cost.dtype.itemsize),
                        f"cost distance on a {rows} x {cols} raster")
    progress(0.0)
    cells, cell_ids = unique_sources(np.asarray(source_cells), ids, cols)
    d_cost = cuda.to_device(cost)
    d_valid = cuda.to_device(
        np.ascontiguousarray(valid, dtype=np.bool_).reshape(-1).view(np.uint8))
    dist, pred, alloc, _ = solve_device(
        d_cost, d_valid, rows, cols, cells, cell_ids, connectivity,
        step_lengths, float(max_cost), progress.span(0.05, 0.95),
        delta=delta)
    del d_cost, d_valid
    shape = (rows, cols)
    result = (dist.copy_to_host().reshape(shape),
              pred.copy_to_host().reshape(shape),
              alloc.copy_to_host().reshape(shape))
    progress(1.0)
    return result


SEEDED_PHASES = ("both", "distance", "hops")


def solve_seeded(cost, valid, distance, hops, seeds, connectivity,
                 step_lengths, max_cost, progress=None, phase="distance",
                 delta=None, stats=None):
    """Relax a tile's (distance, hops) state on the GPU after some of its
    cells were lowered; the per-tile solve of the tiled path.

    Parameters
    ----------
    cost : 2-D ndarray
        Friction, any dtype the CPU kernel reads (barrier cells may hold
        anything: ``valid`` decides).
    valid : 2-D bool ndarray
        False on barriers.
    distance : 2-D float64 ndarray
        The tile's current distances: +inf where unreached; barriers may
        hold anything (they are returned unchanged).
    hops : 2-D int64 ndarray
        The tile's current hops (ignored where the distance is +inf).
    seeds : 1-D int64 ndarray
        Flat cells the caller has just lowered: sources at (0, 0), or cells
        that received a better value from outside the tile.  Their tiles on
        the GPU (and the neighbouring ones) are woken with the seed's
        distance as key.
    connectivity, step_lengths, max_cost
        As in :func:`solve`.
    progress : callable, optional
        As in :func:`gridgraph.core.cost_distance`.
    phase : {"distance", "hops", "both"}
        "distance" (the default; the tiled path's first phase): distances
        only, hops returned as given.  "hops" (its second phase): the
        distances are final and not changed; hops are relaxed over the
        moves that give a cell its distance exactly, from the seeds, whose
        hops were lowered.  "both": distances, then hops, with the hops of
        every cell whose distance dropped computed afresh.
    delta, stats
        As in :func:`solve_device`.

    Returns
    -------
    distance : float64 ndarray, hops : int64 ndarray
        New arrays shaped like ``cost``.

    The state is assumed consistent away from the seeds: as left by an
    earlier call (or +inf everywhere).  Then "both" gives what a Dijkstra
    search of the tile from the seeds gives, relaxing pairs
    ``(d[n] + w, h[n] + 1)`` only from cells whose distance is final:
    every distance is the least over paths from the seeds and the old
    state, and the hops of a cell the least over the neighbours that give
    it its distance.  Across tiles this is not enough for canonical hops:
    a tile solved while a neighbour's distances are not final yet keeps
    hops that rounding made depend on them (the module docstring says how),
    so a tiled driver settles every distance first ("distance"), then the
    hops ("hops").
    """
    if phase not in SEEDED_PHASES:
        raise InvalidInputError(
            f"phase must be one of {SEEDED_PHASES}, got {phase!r}")
    shape = np.shape(cost)
    rows, cols = shape
    n = rows * cols
    flat = flat_cost(cost)
    distance = np.array(distance, dtype=np.float64).reshape(-1)
    hops = np.array(hops, dtype=np.int64).reshape(-1)
    seeds = np.unique(np.asarray(seeds, dtype=np.int64))
    if n == 0 or len(seeds) == 0:
        return distance.reshape(shape), hops.reshape(shape)
    check_device_memory(n * (flat.dtype.itemsize + 1 + 8 + 8 + 2)
                        + 32 * (n // (TILE * TILE) + 1),
                        f"a {rows} x {cols} tile of the tiled cost distance")
    grid = _Grid(rows, cols, connectivity, step_lengths)
    unset = np.iinfo(np.int64).max
    d_cost = cuda.to_device(flat)
    d_valid = cuda.to_device(
        np.ascontiguousarray(valid, dtype=np.bool_).reshape(-1).view(np.uint8))
    d_dist = cuda.to_device(distance)
    d_hops = cuda.to_device(hops)
    _mark_barriers[grid.flat, FLAT_THREADS](d_cost, d_valid, n, d_dist)
    del d_valid
    if delta is None:
        delta = default_delta(d_cost, n, step_lengths)
    seed_keys = distance[seeds]
    distance_progress, hops_progress = _spans(progress)
    if phase == "hops":
        hops_progress = as_progress(progress) if progress is not None \
            else None
    if phase in ("both", "distance"):
        wake, tile_key = (cuda.to_device(a) for a in
                          grid.tiles_around(seeds, seed_keys))
        changed_key, _ = _relax_distances(
            grid, d_cost, d_dist, d_hops, phase == "both", unset,
            float(max_cost), wake, tile_key, delta, distance_progress, stats,
            track_changed=phase == "both")
    if phase in ("both", "hops"):
        wake_host, key_host = grid.tiles_around(seeds, seed_keys)
        if phase == "both":
            # tiles whose distances dropped hold cells with unset hops
            touched_key = changed_key.copy_to_host()
            touched = touched_key < np.inf
            wake_host[touched] = 1
            key_host = np.minimum(key_host, touched_key)
        _relax_hops(grid, _tight(grid, d_cost, d_dist), d_dist, d_hops, unset,
                    cuda.to_device(wake_host), cuda.to_device(key_host),
                    delta * HOPS_DELTA_SCALE, hops_progress, stats)
    return (d_dist.copy_to_host().reshape(shape),
            d_hops.copy_to_host().reshape(shape))
