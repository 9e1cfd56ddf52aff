"""CUDA kernels of cost distance's tile relaxation (the host side, the
schedule's launch loop and the per-cell kernels are in ``_cuda``, whose
docstring describes the method): one thread block per listed tile, the
tile and its halo in shared memory, relaxed to its fixed point; changed
cells near a border wake the tiles across it; the schedule's collect and
advance kernels."""

import numpy as np
from numba import cuda

from .._cuda_common import SIMULATOR, add_rn, block_reserve, mul_rn

TILE = 4 if SIMULATOR else 32
THREADS_Y = 2 if SIMULATOR else 8
ROWS_PER_THREAD = TILE // THREADS_Y
TILE_THREADS = TILE * THREADS_Y
HALO = 2  # enough for knight's moves; one-cell moves use the inner ring
SPAN = TILE + 2 * HALO
SPAN_CELLS = SPAN * SPAN
# The schedule on the device: float64 [threshold, deferred, delta] and
# int64 counters [listed tiles, rounds, buckets, done].
THRESHOLD, DEFERRED, DELTA = 0, 1, 2
LISTED, ROUNDS, BUCKETS, DONE = 0, 1, 2, 3
# Wake slots of a tile: its 3 x 3 neighbourhood in row-major order; the
# centre slot collects the least changed distance of the tile itself.
CENTRE_SLOT = 4


@cuda.jit(device=True, cache=True)
def _note_change(wake, ly, lx, halo, value):
    """Lower the wake slots a changed cell at (ly, lx) of the tile concerns:
    the tiles across every border within ``halo`` of it, and the centre."""
    up = ly < halo
    down = ly >= TILE - halo
    left = lx < halo
    right = lx >= TILE - halo
    cuda.atomic.min(wake, CENTRE_SLOT, value)
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


@cuda.jit(device=True, cache=True)
def _send_wakes(wake, tile_row, tile_col, tiles_x, tiles_y, wake_next,
                tile_key):
    """Wake the neighbour tiles whose slot holds a changed distance, with
    that distance as their key (call after a barrier)."""
    # strided: a block may have fewer than 9 threads (the simulator's has 8)
    for slot in range(cuda.threadIdx.x, 9, TILE_THREADS):
        if slot != CENTRE_SLOT and wake[slot] < np.inf:
            nr = tile_row + slot // 3 - 1
            nc = tile_col + slot % 3 - 1
            if nr >= 0 and nr < tiles_y and nc >= 0 and nc < tiles_x:
                neighbour = nr * tiles_x + nc
                cuda.atomic.min(tile_key, neighbour, wake[slot])
                wake_next[neighbour] = 1


@cuda.jit(device=True, cache=True)
def _tile_row(ly0, k, consecutive):
    """Row of a tile a thread of row group ly0 relaxes k-th: rows ly0 * R
    to ly0 * R + R - 1 (``consecutive``: a value travels R rows down, or
    up, in one sweep), else every THREADS_Y-th row from ly0."""
    if consecutive:
        return ly0 * ROWS_PER_THREAD + k
    return ly0 + k * THREADS_Y


def _span_steps():
    """Shared-memory offsets of the 16 moves from a span cell, and of the
    two cells each knight's move passes between: constants compiled into
    the distance kernel (with its loops unrolled) instead of shared
    arrays."""
    from . import KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS
    steps = NEIGHBOUR_OFFSETS[:, 0] * SPAN + NEIGHBOUR_OFFSETS[:, 1]
    passed = KNIGHT_PASSED_CELLS[:, :, 0] * SPAN + KNIGHT_PASSED_CELLS[:, :, 1]
    return (steps.astype(np.int32), passed[:, 0].astype(np.int32),
            passed[:, 1].astype(np.int32))


SPAN_STEPS, SPAN_PASSED_A, SPAN_PASSED_B = _span_steps()


@cuda.jit(device=True, inline=True)
def _relax_cell(cost_s, dist_s, si, connectivity, delta_s, passed_a_s,
                passed_b_s, step_s, max_cost, constant_steps):
    """Lower the distance of the span cell ``si`` from its neighbours' (pull
    form: only the cell's owner writes it); 1 when it dropped.  With
    ``constant_steps`` the moves' offsets are the compiled-in SPAN_*
    constants (loops unrolled), else the shared arrays ``delta_s`` and
    ``passed_*_s``; the same candidates either way."""
    cb = cost_s[si]
    if cb != cb:  # a barrier, or outside the raster
        return 0
    best = dist_s[si]
    improved = False
    if constant_steps:
        for i in range(8):
            if i < connectivity:
                sj = si + SPAN_STEPS[i]
                ca = cost_s[sj]
                da = dist_s[sj]
                # steps cost >= 0: only a lower neighbour can offer less
                if ca == ca and da < best:
                    candidate = add_rn(da, mul_rn(ca + cb, step_s[i]))
                    if candidate < best:
                        best = candidate
                        improved = True
        if connectivity == 16:
            for i in range(8, 16):
                sj = si + SPAN_STEPS[i]
                ca = cost_s[sj]
                da = dist_s[sj]
                if ca == ca and da < best:
                    # a knight's move may not pass beside a barrier
                    pa = cost_s[si + SPAN_PASSED_A[i]]
                    pb = cost_s[si + SPAN_PASSED_B[i]]
                    if pa == pa and pb == pb:
                        candidate = add_rn(da, mul_rn(ca + cb, step_s[i]))
                        if candidate < best:
                            best = candidate
                            improved = True
    else:
        for i in range(connectivity):
            sj = si + delta_s[i]
            ca = cost_s[sj]
            da = dist_s[sj]
            # steps cost >= 0, so only a neighbour below the current value
            # can offer a lower one
            if ca == ca and da < best:
                # a knight's move may not pass beside a barrier; its passed
                # cells (one cell from either end) are in the shared tile
                if i >= 8:
                    pa = cost_s[si + passed_a_s[i]]
                    pb = cost_s[si + passed_b_s[i]]
                    if pa != pa or pb != pb:
                        continue
                candidate = add_rn(da, mul_rn(ca + cb, step_s[i]))
                if candidate < best:
                    best = candidate
                    improved = True
    if improved and best <= max_cost:
        dist_s[si] = best
        return 1
    return 0


# Registers a thread of the distance kernel may use: 64 lets 3 blocks of
# 256 threads share an SM (the compiler's own choice, 89, lets 2): 0.423
# against 0.473 s, 16384² fractal, one source, H100, 2026-11-24, the same
# distances.  (The simulator takes no such option.)
DISTANCE_REGISTERS = 64
_REGISTER_CAP = {} if SIMULATOR else {"max_registers": DISTANCE_REGISTERS}


@cuda.jit(cache=True, **_REGISTER_CAP)
def _relax_distance_tiles(cost, dist, hops, reset_hops, unset, rows, cols,
                          tiles_x, tiles_y, worklist, listed, connectivity,
                          halo, offsets, passed, half_step, max_cost,
                          wake_next, tile_key, changed_key, track_changed,
                          work, consecutive, passes, constant_steps):
    """Phase 1, one round: relax the distances of each of the ``listed[0]``
    tiles of ``worklist`` to its fixed point (a fixed grid of blocks takes
    the tiles in turn, so the host need not know how many there are).

    Thread (a, g) of a block relaxes, in a sweep, the cells of column a in
    its group g of rows (``consecutive``: ROWS_PER_THREAD rows in a row,
    else every THREADS_Y-th), ``passes`` times over them, down then up.
    Any order gives the same fixed point; a sweep in which no cell changes
    ends the visit.  (Every second sweep along rows instead, so that a
    value crosses the tile sideways faster, took more sweeps a visit: 7.9
    against 6.5, 0.654 against 0.568 s at 16384², H100, 2026-11-24.)
    ``constant_steps``: see :func:`_relax_cell`.

    ``passed[i]`` holds the (drow, dcol) of the two cells a knight's move i
    passes between; the move is refused when either is a barrier (NaN).

    A changed cell within ``halo`` of a border wakes the tile across it
    and lowers that tile's key (the least new value it will see) to the
    cell's value; with ``track_changed``, ``changed_key[tile]`` gets the
    least changed value of the tile itself.  With ``reset_hops`` a changed
    cell's hops become ``unset`` (phase 2 computes them again).  ``work``
    counts tile visits and inner sweeps.
    """
    dist_s = cuda.shared.array(SPAN_CELLS, np.float64)
    cost_s = cuda.shared.array(SPAN_CELLS, np.float64)
    step_s = cuda.shared.array(16, np.float64)
    delta_s = cuda.shared.array(16, np.int32)
    passed_a_s = cuda.shared.array(16, np.int32)
    passed_b_s = cuda.shared.array(16, np.int32)
    wake = cuda.shared.array(9, np.float64)
    t = cuda.threadIdx.x
    for i in range(t, connectivity, TILE_THREADS):
        step_s[i] = half_step[i]
        delta_s[i] = offsets[i, 0] * SPAN + offsets[i, 1]
        passed_a_s[i] = passed[i, 0, 0] * SPAN + passed[i, 0, 1]
        passed_b_s[i] = passed[i, 1, 0] * SPAN + passed[i, 1, 1]
    lane = t % TILE
    group = t // TILE
    n_listed = listed[0]
    w = np.int64(cuda.blockIdx.x)
    while w < n_listed:
        tile = np.int64(worklist[w])
        tile_row = tile // tiles_x
        tile_col = tile - tile_row * tiles_x
        r0 = tile_row * TILE
        c0 = tile_col * TILE
        for slot in range(t, 9, TILE_THREADS):
            wake[slot] = np.inf
        for idx in range(t, SPAN_CELLS, TILE_THREADS):
            sr = idx // SPAN
            sc = idx - sr * SPAN
            r = r0 + sr - HALO
            c = c0 + sc - HALO
            if r >= 0 and r < rows and c >= 0 and c < cols:
                g = r * cols + c
                cost_s[idx] = cost[g]
                dist_s[idx] = dist[g]
            else:
                cost_s[idx] = np.nan
                dist_s[idx] = np.inf
        cuda.syncthreads()

        sweeps = 0
        while True:
            sweeps += 1
            any_change = 0
            for j in range(ROWS_PER_THREAD * passes):
                k = j % ROWS_PER_THREAD
                if consecutive and ((sweeps + j // ROWS_PER_THREAD) & 1) == 0:
                    k = ROWS_PER_THREAD - 1 - k  # upward on alternate passes
                si = (_tile_row(group, k, consecutive) + HALO) * SPAN \
                    + lane + HALO
                any_change |= _relax_cell(cost_s, dist_s, si, connectivity,
                                          delta_s, passed_a_s, passed_b_s,
                                          step_s, max_cost, constant_steps)
            if cuda.syncthreads_or(any_change) == 0:
                break

        # write back the cells that dropped (coalesced: lanes along rows)
        # and the least of them near each border
        least = np.inf
        least_up = np.inf
        least_down = np.inf
        c = c0 + lane
        for k in range(ROWS_PER_THREAD):
            ly = _tile_row(group, k, consecutive)
            r = r0 + ly
            if r < rows and c < cols:
                g = r * cols + c
                value = dist_s[(ly + HALO) * SPAN + lane + HALO]
                if value < dist[g]:
                    dist[g] = value
                    if reset_hops:
                        hops[g] = unset
                    least = min(least, value)
                    if ly < halo:
                        least_up = min(least_up, value)
                    if ly >= TILE - halo:
                        least_down = min(least_down, value)
        if least < np.inf:
            if track_changed:
                cuda.atomic.min(wake, CENTRE_SLOT, least)
            if least_up < np.inf:
                cuda.atomic.min(wake, 1, least_up)
            if least_down < np.inf:
                cuda.atomic.min(wake, 7, least_down)
            if lane < halo:
                cuda.atomic.min(wake, 3, least)
                if least_up < np.inf:
                    cuda.atomic.min(wake, 0, least_up)
                if least_down < np.inf:
                    cuda.atomic.min(wake, 6, least_down)
            if lane >= TILE - halo:
                cuda.atomic.min(wake, 5, least)
                if least_up < np.inf:
                    cuda.atomic.min(wake, 2, least_up)
                if least_down < np.inf:
                    cuda.atomic.min(wake, 8, least_down)
        cuda.syncthreads()
        _send_wakes(wake, tile_row, tile_col, tiles_x, tiles_y, wake_next,
                    tile_key)
        if t == 0:
            if track_changed and wake[CENTRE_SLOT] < np.inf:
                cuda.atomic.min(changed_key, tile, wake[CENTRE_SLOT])
            cuda.atomic.add(work, 0, 1)
            cuda.atomic.add(work, 1, sweeps)
        cuda.syncthreads()  # the shared arrays are reused for the next tile
        w += cuda.gridDim.x


@cuda.jit(cache=True)
def _relax_hops_tiles(mask, dist, hops, unset, rows, cols, tiles_x, tiles_y,
                      worklist, listed, connectivity, halo, offsets,
                      wake_next, tile_key, work):
    """Phase 2, one round: with the distances final, relax the hops of each
    of the ``listed[0]`` tiles of ``worklist`` over its tight neighbours
    (``mask``) to the fixed point ``h[c] = min(h[c], h[n] + 1)``.
    Wake-ups as in phase 1, keyed by the changed cell's distance."""
    hops_s = cuda.shared.array(SPAN_CELLS, np.int64)
    delta_s = cuda.shared.array(16, np.int32)
    wake = cuda.shared.array(9, np.float64)
    t = cuda.threadIdx.x
    own_mask = cuda.local.array(ROWS_PER_THREAD, np.int32)
    changed = cuda.local.array(ROWS_PER_THREAD, np.int8)
    for i in range(t, connectivity, TILE_THREADS):
        delta_s[i] = offsets[i, 0] * SPAN + offsets[i, 1]
    n_listed = listed[0]
    w = np.int64(cuda.blockIdx.x)
    while w < n_listed:
        tile = np.int64(worklist[w])
        tile_row = tile // tiles_x
        tile_col = tile - tile_row * tiles_x
        r0 = tile_row * TILE
        c0 = tile_col * TILE
        for slot in range(t, 9, TILE_THREADS):
            wake[slot] = np.inf
        for idx in range(t, SPAN_CELLS, TILE_THREADS):
            sr = idx // SPAN
            r = r0 + sr - HALO
            c = c0 + (idx - sr * SPAN) - HALO
            if r >= 0 and r < rows and c >= 0 and c < cols:
                hops_s[idx] = hops[r * cols + c]
            else:
                hops_s[idx] = unset

        lx = t % TILE
        ly0 = t // TILE
        for k in range(ROWS_PER_THREAD):
            r = r0 + ly0 + k * THREADS_Y
            c = c0 + lx
            own_mask[k] = 0
            if r < rows and c < cols:
                own_mask[k] = mask[r * cols + c]
            changed[k] = 0
        cuda.syncthreads()

        sweeps = 0
        while True:
            sweeps += 1
            any_change = 0
            for k in range(ROWS_PER_THREAD):
                bits = own_mask[k]
                if bits != 0:
                    si = (ly0 + k * THREADS_Y + HALO) * SPAN + lx + HALO
                    best = hops_s[si]
                    improved = False
                    for i in range(connectivity):
                        if (bits >> i) & 1:
                            there = hops_s[si + delta_s[i]]
                            if there < best - 1:
                                best = there + 1
                                improved = True
                    if improved:
                        hops_s[si] = best
                        changed[k] = 1
                        any_change = 1
            if cuda.syncthreads_or(any_change) == 0:
                break

        for k in range(ROWS_PER_THREAD):
            if changed[k]:
                ly = ly0 + k * THREADS_Y
                g = (r0 + ly) * cols + c0 + lx
                hops[g] = hops_s[(ly + HALO) * SPAN + lx + HALO]
                _note_change(wake, ly, lx, halo, dist[g])
        cuda.syncthreads()
        _send_wakes(wake, tile_row, tile_col, tiles_x, tiles_y, wake_next,
                    tile_key)
        if t == 0:
            cuda.atomic.add(work, 0, 1)
            cuda.atomic.add(work, 1, sweeps)
        cuda.syncthreads()  # the shared arrays are reused for the next tile
        w += cuda.gridDim.x


@cuda.jit(cache=True)
def _collect_tiles(wake, tile_key, n_tiles, schedule, worklist, counters):
    """Worklist of the woken tiles whose key is at most the threshold (any
    order; their flags and keys are cleared), their number in
    ``counters[LISTED]``; ``schedule[DEFERRED]`` becomes the least key of
    the woken tiles left for later."""
    scratch = cuda.shared.array(2, np.int64)
    least = cuda.shared.array(1, np.float64)
    if cuda.threadIdx.x == 0:
        least[0] = np.inf
    cuda.syncthreads()
    threshold = schedule[THRESHOLD]
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
    slot = block_reserve(active, counters[LISTED:LISTED + 1], scratch)
    if active:
        worklist[slot] = tile
    if cuda.threadIdx.x == 0 and least[0] < np.inf:
        cuda.atomic.min(schedule, DEFERRED, least[0])


@cuda.jit(cache=True)
def _advance(schedule, counters):
    """After a round (one thread): with no tile listed, move the threshold
    to the least deferred key + delta (a new bucket), or note that the
    schedule is done; then empty the list for the next round."""
    if counters[LISTED] == 0:
        if schedule[DEFERRED] == np.inf:
            counters[DONE] = 1
        else:
            schedule[THRESHOLD] = schedule[DEFERRED] + schedule[DELTA]
            schedule[DEFERRED] = np.inf
            counters[BUCKETS] += 1
    else:
        counters[ROUNDS] += 1
    counters[LISTED] = 0


