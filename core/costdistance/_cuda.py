"""CUDA kernels of cost distance: tile-wise relaxation with an active-tile
worklist, scheduled near-far.

The raster is cut into TILE x TILE tiles.  A round processes a list of
active tiles with one thread block each: the tile's costs and tentative
distances, with a halo of one cell (two for knight's moves), go to shared
memory; the block relaxes its cells against their neighbours (pull form:
each thread owns its cells, so only it writes them) until nothing changes
in the tile; changed cells go back to global memory, and a change within
the halo width of a tile border wakes the tile across it, lowering that
tile's key to the least changed value (the active-tile worklist of doi
10.1145/2803172).  Woken tiles are relaxed in distance buckets: a round
takes the woken tiles whose key is within the current threshold; when none
is left the threshold moves to the least waiting key plus DELTA_TILES
tiles' worth of cost (delta-stepping, Meyer & Sanders 2003; near-far,
Davidson et al. 2014), which keeps tiles from being relaxed again and
again with values that are not final yet.  The rounds end when no tile is
woken.

Exactness.  Distances only decrease, every accepted candidate is
``d[a] + (c_a + c_b) * L / 2`` evaluated exactly as the CPU Dijkstra does
(float64, with the product and sum rounded separately: no fused
multiply-add), and the loop runs to the fixed point, where every cell's
value is the least over its neighbours of that expression.  That fixed
point is the least over all paths of the step costs summed in path order,
which is what Dijkstra computes; so the distances agree with the CPU
backend (bit for bit on every benchmark raster so far).  A cell's
predecessor is the neighbour whose candidate last lowered it; a later
decrease of that neighbour either lowers the cell again or leaves the
rounded sum unchanged, so at the end following predecessors reaches a
source (values never increase along them and only strict decreases are
accepted, so they form no cycle) and the step costs add up exactly.
Allocation is then read off the predecessor trees by pointer jumping.
"""

import numpy as np
from numba import cuda

from .._common import index_dtype
from .._cuda_common import (FLAT_THREADS, SIMULATOR, PhaseTimer, add_rn,
                            block_reserve, blocks_for, check_device_memory,
                            device_scalar, mul_rn)

TILE = 4 if SIMULATOR else 32
THREADS_Y = 2 if SIMULATOR else 8
ROWS_PER_THREAD = TILE // THREADS_Y
TILE_THREADS = TILE * THREADS_Y
HALO = 2  # enough for knight's moves; one-cell moves use the inner ring
SPAN = TILE + 2 * HALO
SPAN_CELLS = SPAN * SPAN
PROGRESS_EVERY = 64  # rounds between progress reports
# Bucket width of the tile schedule, in tiles crossed at the mean cost (4
# was the fastest of 0.5-8 on a 16384² fractal on an H200).
DELTA_TILES = 4.0


@cuda.jit(cache=True)
def _init_state(cost, valid, n, dist, pred, alloc):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        if not valid[i]:
            cost[i] = np.nan  # barriers: no candidate ever uses them
        dist[i] = np.inf
        pred[i] = -1
        alloc[i] = 0


@cuda.jit(cache=True)
def _seed(cells, ids, m, dist, pred, alloc):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        cell = cells[k]
        dist[cell] = 0.0
        pred[cell] = -2
        alloc[cell] = ids[k]


@cuda.jit(cache=True)
def _relax_tiles(cost, dist, pred, rows, cols, tiles_x, tiles_y, worklist,
                 connectivity, halo, offsets, passed, half_step, max_cost,
                 wake_next, tile_key, work):
    """One round: relax each listed tile to its fixed point.

    ``passed[i]`` holds the (drow, dcol) of the two cells a knight's move i
    passes between; the move is refused when either is a barrier (NaN).

    A changed cell within ``halo`` of a border wakes the tile across it
    and lowers that tile's key (the least new value it will see) to the
    cell's value.  ``work`` counts tile visits and inner sweeps.
    """
    dist_s = cuda.shared.array(SPAN_CELLS, np.float64)
    cost_s = cuda.shared.array(SPAN_CELLS, np.float64)
    step_s = cuda.shared.array(16, np.float64)
    delta_s = cuda.shared.array(16, np.int32)
    passed_a_s = cuda.shared.array(16, np.int32)
    passed_b_s = cuda.shared.array(16, np.int32)
    wake = cuda.shared.array(9, np.float64)
    t = cuda.threadIdx.x
    tile = np.int64(worklist[cuda.blockIdx.x])
    tile_row = tile // tiles_x
    tile_col = tile - tile_row * tiles_x
    r0 = tile_row * TILE
    c0 = tile_col * TILE
    for i in range(t, connectivity, TILE_THREADS):
        step_s[i] = half_step[i]
        delta_s[i] = offsets[i, 0] * SPAN + offsets[i, 1]
        passed_a_s[i] = passed[i, 0, 0] * SPAN + passed[i, 0, 1]
        passed_b_s[i] = passed[i, 1, 0] * SPAN + passed[i, 1, 1]
    # strided: a block may have fewer than 9 threads (the simulator's has 8)
    for slot in range(t, 9, TILE_THREADS):
        wake[slot] = np.inf
    for idx in range(t, SPAN_CELLS, TILE_THREADS):
        sr = idx // SPAN
        r = r0 + sr - HALO
        c = c0 + (idx - sr * SPAN) - HALO
        if r >= 0 and r < rows and c >= 0 and c < cols:
            g = r * cols + c
            cost_s[idx] = cost[g]
            dist_s[idx] = dist[g]
        else:
            cost_s[idx] = np.nan
            dist_s[idx] = np.inf
    cuda.syncthreads()

    lx = t % TILE
    ly0 = t // TILE
    own_pred = cuda.local.array(ROWS_PER_THREAD, np.int8)
    changed = cuda.local.array(ROWS_PER_THREAD, np.int8)
    for k in range(ROWS_PER_THREAD):
        own_pred[k] = -1
        changed[k] = 0
    sweeps = 0
    while True:
        sweeps += 1
        any_change = 0
        for k in range(ROWS_PER_THREAD):
            si = (ly0 + k * THREADS_Y + HALO) * SPAN + lx + HALO
            cb = cost_s[si]
            if cb == cb:  # a valid cell of the raster
                best = dist_s[si]
                best_i = -1
                for i in range(connectivity):
                    sj = si + delta_s[i]
                    ca = cost_s[sj]
                    da = dist_s[sj]
                    # steps cost >= 0, so only a neighbour below the
                    # current value can offer a lower one
                    if ca == ca and da < best:
                        # a knight's move may not pass beside a barrier;
                        # its passed cells (one cell from either end) are
                        # in the shared tile
                        if i >= 8:
                            pa = cost_s[si + passed_a_s[i]]
                            pb = cost_s[si + passed_b_s[i]]
                            if pa != pa or pb != pb:
                                continue
                        candidate = add_rn(da, mul_rn(ca + cb, step_s[i]))
                        if candidate < best:
                            best = candidate
                            best_i = i
                if best_i >= 0 and best <= max_cost:
                    dist_s[si] = best
                    own_pred[k] = best_i
                    changed[k] = 1
                    any_change = 1
        if cuda.syncthreads_or(any_change) == 0:
            break

    for k in range(ROWS_PER_THREAD):
        if changed[k]:
            ly = ly0 + k * THREADS_Y
            g = (r0 + ly) * cols + c0 + lx
            value = dist_s[(ly + HALO) * SPAN + lx + HALO]
            dist[g] = value
            pred[g] = own_pred[k]
            up = ly < halo
            down = ly >= TILE - halo
            left = lx < halo
            right = lx >= TILE - halo
            if up:
                cuda.atomic.min(wake, 1, value)
                if left:
                    cuda.atomic.min(wake, 0, value)
                if right:
                    cuda.atomic.min(wake, 2, value)
            if down:
                cuda.atomic.min(wake, 7, value)
                if left:
                    cuda.atomic.min(wake, 6, value)
                if right:
                    cuda.atomic.min(wake, 8, value)
            if left:
                cuda.atomic.min(wake, 3, value)
            if right:
                cuda.atomic.min(wake, 5, value)
    cuda.syncthreads()
    for slot in range(t, 9, TILE_THREADS):
        if wake[slot] < np.inf:
            nr = tile_row + slot // 3 - 1
            nc = tile_col + slot % 3 - 1
            if nr >= 0 and nr < tiles_y and nc >= 0 and nc < tiles_x:
                neighbour = nr * tiles_x + nc
                cuda.atomic.min(tile_key, neighbour, wake[slot])
                wake_next[neighbour] = 1
    if t == 0:
        cuda.atomic.add(work, 0, 1)
        cuda.atomic.add(work, 1, sweeps)


@cuda.jit(cache=True)
def _collect_tiles(wake, tile_key, n_tiles, threshold, worklist, count,
                   deferred):
    """Worklist of the woken tiles whose key is at most ``threshold`` (any
    order; their flags and keys are cleared); ``deferred[0]`` becomes the
    least key of the woken tiles left for later."""
    scratch = cuda.shared.array(2, np.int64)
    least = cuda.shared.array(1, np.float64)
    if cuda.threadIdx.x == 0:
        least[0] = np.inf
    cuda.syncthreads()
    tile = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    active = 0
    if tile < n_tiles and wake[tile] != 0:
        key = tile_key[tile]
        if key <= threshold:
            wake[tile] = 0
            tile_key[tile] = np.inf
            active = 1
        else:
            cuda.atomic.min(least, 0, key)
    slot = block_reserve(active, count, scratch)
    if active:
        worklist[slot] = tile
    if cuda.threadIdx.x == 0 and least[0] < np.inf:
        cuda.atomic.min(deferred, 0, least[0])


@cuda.jit(cache=True)
def _sample(cost, n, stride, sample):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k * stride < n and k < sample.shape[0]:
        sample[k] = cost[k * stride]


@cuda.jit(cache=True)
def _finish(dist, pred, n):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and pred[i] == -1:
        dist[i] = np.nan


@cuda.jit(cache=True)
def _predecessor_cells(pred, n, cols, offsets, root):
    """root[i] = the cell i was reached from (itself for a source)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        p = pred[i]
        if p == -1:
            root[i] = -1
        elif p == -2:
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
    dtype = array.dtype
    if dtype.kind == "f" and dtype.itemsize in (4, 8) and dtype.isnative:
        target = dtype
    elif dtype.kind in "iub" and dtype.itemsize <= 2:
        target = np.dtype(np.float32)
    elif dtype.kind == "f" and dtype.itemsize < 4:
        target = np.dtype(np.float32)
    else:
        target = np.dtype(np.float64)
    return np.ascontiguousarray(array, dtype=target).reshape(-1)


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
    """GPU memory :func:`solve` needs."""
    index_size = np.dtype(index_dtype(n_cells)).itemsize
    n_tiles = n_cells // (TILE * TILE) + 1
    return n_cells * (cost_itemsize + 1 + 8 + 1 + 8 + index_size) \
        + 8 * n_tiles


def solve_device(cost, valid, rows, cols, cells, ids, connectivity,
                 step_lengths, max_cost, progress=None, stats=None,
                 delta=None):
    """Cost distance on device arrays.

    ``cost`` (float32/float64, flat, overwritten with NaN on barriers) and
    ``valid`` (uint8) hold rows * cols cells; ``cells``/``ids`` are the
    de-duplicated flat source cells and their ids (host arrays).  Returns
    device arrays (accumulated, predecessor, allocation) and the number of
    rounds.  ``stats`` (a dict) receives phase times and tile counts.
    ``delta`` is the width of the distance buckets of the tile schedule
    (None: :func:`default_delta`; inf: plain rounds over all woken tiles);
    it changes the time taken, never the result.
    """
    # the package imports this module lazily
    from . import KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS

    timer = PhaseTimer(stats)
    n = rows * cols
    grid = blocks_for(n, FLAT_THREADS)
    dist = cuda.device_array(n, dtype=np.float64)
    pred = cuda.device_array(n, dtype=np.int8)
    alloc = cuda.device_array(n, dtype=np.int64)
    _init_state[grid, FLAT_THREADS](cost, valid, n, dist, pred, alloc)
    m = len(cells)
    _seed[blocks_for(m, FLAT_THREADS), FLAT_THREADS](
        cuda.to_device(cells), cuda.to_device(ids), m, dist, pred, alloc)

    tiles_x = blocks_for(cols, TILE)
    tiles_y = blocks_for(rows, TILE)
    n_tiles = tiles_x * tiles_y
    # The seeds are written straight to global memory, so no tile has seen
    # them change: start with the sources' tiles and their neighbours.
    seed_rows = (cells // cols) // TILE
    seed_cols = (cells % cols) // TILE
    first = []
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            r = seed_rows + dr
            c = seed_cols + dc
            inside = (r >= 0) & (r < tiles_y) & (c >= 0) & (c < tiles_x)
            first.append(r[inside] * tiles_x + c[inside])
    first = np.unique(np.concatenate(first))
    wake_host = np.zeros(n_tiles, dtype=np.int32)
    wake_host[first] = 1
    key_host = np.full(n_tiles, np.inf)
    key_host[first] = 0.0
    wake = cuda.to_device(wake_host)
    tile_key = cuda.to_device(key_host)
    worklist = cuda.device_array(n_tiles, dtype=np.int32)
    count_d = cuda.to_device(np.zeros(1, dtype=np.int64))
    deferred = cuda.to_device(np.full(1, np.inf))
    work = cuda.to_device(np.zeros(2, dtype=np.int64))
    offsets = cuda.to_device(
        np.ascontiguousarray(NEIGHBOUR_OFFSETS[:connectivity]))
    passed = cuda.to_device(
        np.ascontiguousarray(KNIGHT_PASSED_CELLS[:connectivity]))
    half_step = cuda.to_device(0.5 * np.asarray(step_lengths,
                                                dtype=np.float64))
    halo = 2 if connectivity == 16 else 1
    if delta is None:
        delta = default_delta(cost, n, step_lengths)
    threshold = delta
    collect_grid = blocks_for(n_tiles, FLAT_THREADS)
    rounds = 0
    buckets = 1
    timer.mark("initialise")
    while True:
        # near-far scheduling (delta-stepping over tiles): relax the woken
        # tiles whose key is within the threshold; when none is left, move
        # the threshold to the least deferred key + delta
        count_d[0] = 0
        _collect_tiles[collect_grid, FLAT_THREADS](
            wake, tile_key, n_tiles, threshold, worklist, count_d, deferred)
        count = int(device_scalar(count_d, 0))
        if count == 0:
            least = float(device_scalar(deferred, 0))
            if least == np.inf:
                break
            deferred[0] = np.inf
            threshold = least + delta
            buckets += 1
            continue
        _relax_tiles[count, TILE_THREADS](
            cost, dist, pred, rows, cols, tiles_x, tiles_y, worklist,
            connectivity, halo, offsets, passed, half_step, max_cost, wake,
            tile_key, work)
        rounds += 1
        if progress is not None and rounds % PROGRESS_EVERY == 0:
            # no exact measure of what is left: approach 0.9 smoothly
            progress(0.9 * rounds / (rounds + tiles_x + tiles_y))
    timer.mark("relax")
    _finish[grid, FLAT_THREADS](dist, pred, n)
    distinct_ids = np.unique(ids)
    if len(distinct_ids) == 1:
        _allocate_one[grid, FLAT_THREADS](pred, n, int(distinct_ids[0]),
                                          alloc)
    else:
        root = cuda.device_array(n, dtype=index_dtype(n))
        _predecessor_cells[grid, FLAT_THREADS](pred, n, cols, offsets, root)
        changed = cuda.to_device(np.ones(1, dtype=np.int32))
        while int(device_scalar(changed, 0)):
            changed[0] = 0
            _jump_roots[grid, FLAT_THREADS](root, n, changed)
        _allocate[grid, FLAT_THREADS](root, n, alloc)
    timer.mark("allocation")
    if stats is not None:
        visits, sweeps = (int(v) for v in work.copy_to_host())
        stats.update(rounds=rounds, buckets=buckets, delta=delta,
                     tiles_relaxed=visits, tiles=n_tiles,
                     sweeps_per_visit=sweeps / max(visits, 1))
    return dist, pred, alloc, rounds


def solve(array, valid, source_cells, ids, connectivity, step_lengths,
          max_cost, progress, delta=None):
    """Accumulated cost, predecessor and allocation rasters on the GPU.

    Same contract as :func:`gridgraph.core.costdistance._cpu.solve`;
    ``delta`` as in :func:`solve_device` (any value, same result).
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
