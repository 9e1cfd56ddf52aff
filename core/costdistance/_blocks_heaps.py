"""Cost-distance search on all cores: large blocks with heaps of their own.

The schedule is :mod:`._blocks_cpu`'s (rounds in parallel over the active
blocks; a block pulls the better candidates its neighbours offer across its
border, then runs Dijkstra inside itself up to a bound; the bound moves on
when a round changes nothing at or under it; the costs equal the
sequential Dijkstra's bit for bit, by the fixed-point argument given
there).  What differs is what a block keeps between rounds:

- each block keeps its indexed 4-ary heap (the sequential search's,
  :func:`._cpu._sift_up` / :func:`._cpu._pop_min`, decrease-key in place)
  from round to round, in its own slice of one pool, so a round never
  re-lists the block's pending cells (the small-block search scans every
  cell of a block each time it runs a bound that reaches its pending
  keys) and a cell never has two entries;
- blocks are large (a few per thread), so few cells lie on a border, and
  the bound's step is a fixed width of travel independent of the block
  side, so few cells are settled twice (only those a neighbour's pull
  improves after they spread).

A cell's heap position lives in its state record; it is trusted only when
the slot it names, inside the block's heap, holds that cell, so no pass
clears the positions first.

References: Meyer & Sanders, Delta-stepping: a parallelizable shortest path
algorithm (J. Algorithms 2003); Davidson et al., Work-efficient parallel
GPU methods for single-source shortest paths (IPDPS 2014, near-far).
"""

import numba
import numpy as np
from numba import njit, prange

from ._blocks_cpu import _near_border, _pull
from ._cpu import HEAP_PADDING, _pop_min, _prefetch_neighbourhood, _sift_up

# Side of a block: large, so few cells lie on borders (and are settled
# again when a neighbour's pull improves them: 1 % more pops at 512, 3 % at
# 256, 6 % at 128 on a 4096² fractal raster), yet several blocks a thread
# so the band of each round is spread over the threads.
MIN_BLOCK_SIDE = 128
MAX_BLOCK_SIDE = 1024
BLOCKS_PER_THREAD = 8

# The bound moves on by this many cells' width of travel at the mean cost
# (any width gives the same costs).  Narrow steps mean many rounds, each
# pulling the rings that face changed neighbours: one thread, 4096²
# fractal, one source, 1024² blocks: 4 cells 1556 rounds and 3x the CPU
# time, 16 cells 396 rounds, 64 cells 102 rounds, 256 cells 30 rounds and
# about the same time as 64; wide steps leave fewer blocks busy early on.
ROUND_WIDTH_CELLS = 64.0

# Rounds between two progress reports.
_ROUNDS_PER_REPORT = 8


def block_side(rows, cols, threads):
    """The block side for a raster and thread count: the power of two
    giving about ``BLOCKS_PER_THREAD`` blocks a thread, within
    [MIN_BLOCK_SIDE, MAX_BLOCK_SIDE]."""
    target = np.sqrt(rows * cols / (BLOCKS_PER_THREAD * max(threads, 1)))
    side = MIN_BLOCK_SIDE
    while side * 2 <= min(target, MAX_BLOCK_SIDE):
        side *= 2
    return side


@njit(cache=True, nogil=True, inline="always")
def _lower(state, heap_key, heap_cell, size, cell, key):
    """Give ``cell`` the smaller cost ``key``: a decrease-key when it is in
    the block's heap, else a push; returns the new size."""
    state[cell].accumulated = key
    slot = np.int64(state[cell].heap_position)
    if not (0 <= slot < size and heap_cell[slot] == cell):
        slot = size
        size += 1
        heap_key[size + HEAP_PADDING - 1] = np.inf
    _sift_up(heap_key, heap_cell, state, slot, key, cell)
    return size


@njit(cache=True, nogil=True)
def _solve_block(state, rows, cols, r0, r1, c0, c1, margin, drow, dcol,
                 neighbour_delta, passed_delta_a, passed_delta_b,
                 step_lengths, max_cost, bound, pull, heap_key, heap_cell,
                 size):
    """Pull into the block (the ring parts of the ``pull`` mask), then
    Dijkstra inside it while
    its least key is at most ``bound``.  Returns (the new heap size, the
    least new cost of a cell within ``margin`` of the block border (+inf:
    none), pops)."""
    changed = np.inf
    # the ring's parts facing the neighbours that changed (_SIDES)
    top = min(r0 + margin, r1)
    bottom = max(r1 - margin, r0)
    left = min(c0 + margin, c1)
    right = max(c1 - margin, c0)
    for part in range(8):
        if not (pull >> part) & 1:
            continue
        if part == 0:
            ra, rb, ca, cb = r0, top, c0, c1
        elif part == 1:
            ra, rb, ca, cb = bottom, r1, c0, c1
        elif part == 2:
            ra, rb, ca, cb = r0, r1, c0, left
        elif part == 3:
            ra, rb, ca, cb = r0, r1, right, c1
        elif part == 4:
            ra, rb, ca, cb = r0, top, c0, left
        elif part == 5:
            ra, rb, ca, cb = r0, top, right, c1
        elif part == 6:
            ra, rb, ca, cb = bottom, r1, c0, left
        else:
            ra, rb, ca, cb = bottom, r1, right, c1
        for r in range(ra, rb):
            for c in range(ca, cb):
                cell = r * cols + c
                own = state[cell].accumulated
                if own > -np.inf:
                    best = _pull(state, rows, cols, r, c, r0, r1, c0, c1,
                                 drow, dcol, passed_delta_a, passed_delta_b,
                                 step_lengths, max_cost)
                    if best < own:
                        size = _lower(state, heap_key, heap_cell, size, cell,
                                      best)
                        changed = min(changed, best)
    pops = 0
    connectivity = drow.shape[0]
    while size > 0:
        key = heap_key[0]
        if key > bound:
            break
        cell = np.int64(heap_cell[0])
        size = _pop_min(heap_key, heap_cell, state, size)
        pops += 1
        if size > 0:
            # the likely next cell's neighbourhood, as the sequential
            # search does
            _prefetch_neighbourhood(state, np.int64(heap_cell[0]), cols,
                                    margin)
        r = cell // cols
        c = cell - r * cols
        interior = (r0 + margin <= r < r1 - margin
                    and c0 + margin <= c < c1 - margin)
        cell_cost = state[cell].cost
        for i in range(connectivity):
            nr = r + drow[i]
            nc = c + dcol[i]
            if interior:
                neighbour = cell + neighbour_delta[i]
            else:
                if not (r0 <= nr < r1 and c0 <= nc < c1):
                    continue  # the block on the other side pulls it
                neighbour = nr * cols + nc
            if i >= 8 and (
                    state[cell + passed_delta_a[i]].accumulated == -np.inf
                    or state[cell + passed_delta_b[i]].accumulated
                    == -np.inf):
                continue
            record = state[neighbour]
            # the sequential search's expression, term for term
            candidate = key + (cell_cost + record.cost) * 0.5 \
                * step_lengths[i]
            if candidate < record.accumulated and candidate <= max_cost:
                size = _lower(state, heap_key, heap_cell, size, neighbour,
                              candidate)
                if candidate < changed and _near_border(
                        nr, nc, r0, r1, c0, c1, margin):
                    changed = candidate
    return size, changed, pops


# The neighbours of a block, as (row, column) offsets in blocks, in the
# order of the bits of its ``pull`` mask: bit k set when neighbour k
# changed a cell near its border (then the block's ring part facing it is
# pulled: a side's margin rows or columns, or a corner's margin square).
_SIDES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1],
                   [-1, -1], [-1, 1], [1, -1], [1, 1]], dtype=np.int64)


@njit(cache=True, nogil=True)
def _next_active(changed, pending_min, bound, block_rows, block_cols,
                 active, pull):
    """The blocks to run under ``bound``: those with a pending key at most
    the bound and those beside a block whose border got a cost at most the
    bound (whose entry in ``changed`` is then cleared; ``pull`` gets the
    mask of the neighbours to pull from).  Returns how many (written to
    ``active``)."""
    n = 0
    for b in range(block_rows * block_cols):
        br = b // block_cols
        bc = b - br * block_cols
        mask = 0
        for k in range(8):
            nr = br + _SIDES[k, 0]
            nc = bc + _SIDES[k, 1]
            if 0 <= nr < block_rows and 0 <= nc < block_cols:
                key = changed[nr * block_cols + nc]
                if key < np.inf and key <= bound:
                    mask |= 1 << k
        pull[b] = mask
        key = pending_min[b]
        if mask or (key < np.inf and key <= bound):
            active[n] = b
            n += 1
    for b in range(block_rows * block_cols):
        if changed[b] < np.inf and changed[b] <= bound:
            changed[b] = np.inf
    return n


@njit(cache=True, nogil=True, parallel=True)
def _round(state, rows, cols, side, block_cols, active, n_active, margin,
           drow, dcol, neighbour_delta, passed_delta_a, passed_delta_b,
           step_lengths, max_cost, bound, changed, pending_min, pull, pops,
           heap_key, heap_cell, heap_base, heap_size):
    for a in prange(n_active):
        b = active[a]
        br = b // block_cols
        bc = b - br * block_cols
        r0 = br * side
        c0 = bc * side
        r1 = min(rows, r0 + side)
        c1 = min(cols, c0 + side)
        base = heap_base[b]
        stop = heap_base[b + 1]
        size, border_min, pops[a] = _solve_block(
            state, rows, cols, r0, r1, c0, c1, margin, drow, dcol,
            neighbour_delta, passed_delta_a, passed_delta_b, step_lengths,
            max_cost, bound, pull[b], heap_key[base:stop],
            heap_cell[base:stop], heap_size[b])
        heap_size[b] = size
        pending_min[b] = heap_key[base] if size > 0 else np.inf
        # only this block's thread writes its entries
        changed[b] = min(changed[b], border_min)


@njit(cache=True, nogil=True)
def _seed(state, sources, rows, cols, side, block_cols, margin, heap_key,
          heap_cell, heap_base, heap_size, pending_min, changed):
    """Sources at cost 0 in their blocks' heaps (a repeated cell once)."""
    for k in range(sources.shape[0]):
        cell = sources[k]
        if state[cell].accumulated == 0.0:
            continue
        r = cell // cols
        c = cell - r * cols
        br = r // side
        bc = c // side
        b = br * block_cols + bc
        base = heap_base[b]
        stop = heap_base[b + 1]
        heap_size[b] = _lower(state, heap_key[base:stop], heap_cell[base:stop],
                              heap_size[b], cell, 0.0)
        pending_min[b] = 0.0
        r0 = br * side
        c0 = bc * side
        if _near_border(r, c, r0, min(rows, r0 + side), c0,
                        min(cols, c0 + side), margin):
            changed[b] = 0.0


# Cells the mean cost is taken over (a regular sample: the width only
# paces the rounds, and the whole raster's mean cost a serial pass and a
# copy of the costs: 0.06-0.09 s at 4096²).
_MEAN_SAMPLE = 1 << 16


def _mean_valid_cost(state):
    """The mean cost of the valid cells, over a regular sample of them
    (all of them when the sample holds none); 0 when there are none."""
    for sample in (state[::max(1, state.shape[0] // _MEAN_SAMPLE)], state):
        valid = sample["accumulated"] > -np.inf
        if valid.any():
            return float(np.mean(sample["cost"][valid]))
    return 0.0


def search(state, rows, cols, source_index, neighbour_drow, neighbour_dcol,
           neighbour_delta, passed_delta_a, passed_delta_b, step_lengths,
           margin, max_cost, progress, side=MAX_BLOCK_SIDE,
           width_cells=None):
    """Least accumulated costs into ``state['accumulated']`` (+inf where
    unreached; barriers hold -inf, other cells +inf on entry).  Returns the
    cells popped in all (a cell is popped again when a pull improves it
    after it spread)."""
    side = max(int(side), 2 * margin, 2)
    block_rows = -(-rows // side)
    block_cols = -(-cols // side)
    n_blocks = block_rows * block_cols
    # block b's heap: slots [heap_base[b], heap_base[b + 1]) of the pool,
    # one per cell and the padding (np.empty: only the pages a heap
    # reaches are ever touched)
    block_r = np.minimum(side, rows - np.arange(block_rows) * side)
    block_c = np.minimum(side, cols - np.arange(block_cols) * side)
    cells = (block_r[:, None] * block_c[None, :]).ravel()
    heap_base = np.zeros(n_blocks + 1, dtype=np.int64)
    np.cumsum(cells + HEAP_PADDING + 1, out=heap_base[1:])
    heap_key = np.empty(int(heap_base[-1]), dtype=np.float64)
    heap_cell = np.empty(int(heap_base[-1]), dtype=state.dtype["hops"])
    for b in range(n_blocks):
        heap_key[heap_base[b]:heap_base[b] + HEAP_PADDING + 1] = np.inf
    heap_size = np.zeros(n_blocks, dtype=np.int64)
    changed = np.full(n_blocks, np.inf)
    pending_min = np.full(n_blocks, np.inf)
    pull = np.zeros(n_blocks, dtype=np.uint8)
    pops = np.zeros(n_blocks, dtype=np.int64)
    active = np.empty(n_blocks, dtype=np.int64)
    _seed(state, np.asarray(source_index, dtype=np.int64), rows, cols, side,
          block_cols, margin, heap_key, heap_cell, heap_base, heap_size,
          pending_min, changed)
    mean_cost = _mean_valid_cost(state)
    if width_cells is None:
        width_cells = ROUND_WIDTH_CELLS
    width = width_cells * mean_cost * float(np.max(step_lengths))
    if not width > 0 or not np.isfinite(width):
        width = np.inf
    bound = width
    n_active = _next_active(changed, pending_min, bound, block_rows,
                            block_cols, active, pull)
    total_pops = 0
    rounds = 0
    max_cost = float(max_cost)
    while True:
        if n_active == 0:
            # every cost up to the bound is final: move the bound on
            least = min(float(pending_min.min()), float(changed.min()))
            if least == np.inf:
                break
            bound = max(bound, least) + width
            n_active = _next_active(changed, pending_min, bound, block_rows,
                                    block_cols, active, pull)
            continue
        # blocks one at a time to whichever thread is free: the band of a
        # round crosses blocks very unequally
        saved = numba.set_parallel_chunksize(1)
        try:
            _round(state, rows, cols, side, block_cols, active, n_active,
                   margin, neighbour_drow, neighbour_dcol, neighbour_delta,
                   passed_delta_a, passed_delta_b, step_lengths, max_cost,
                   bound, changed, pending_min, pull, pops, heap_key,
                   heap_cell, heap_base, heap_size)
        finally:
            numba.set_parallel_chunksize(saved)
        total_pops += int(pops[:n_active].sum())
        n_active = _next_active(changed, pending_min, bound, block_rows,
                                block_cols, active, pull)
        rounds += 1
        if rounds % _ROUNDS_PER_REPORT == 0:
            progress(min(0.95, total_pops / max(rows * cols, 1)))
    return total_pops
