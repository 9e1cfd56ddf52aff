"""Cost-distance search on all cores: blocks of cells in parallel rounds.

The raster is cut into square blocks.  A round runs, in parallel, every
*active* block: the block first *pulls* from the cells just outside it (the
cells within a move's reach of its border take any better candidate
offered by their neighbours in other blocks), then runs Dijkstra inside
itself (a small heap of its own; moves that leave the block are not
taken: the block on the other side pulls them).  A block whose cells near
its border got a new cost activates the blocks around it for the next
round.  Each round spreads only keys up to a bound (near-far / delta-
stepping): cells above it stay *pending*; when a round activates no block,
every cost under the bound is final and the bound moves on by about one
block's width of travel at the mean cost.  The search ends when no cell is
pending and no border change is left to pull.

Only a block's own thread writes its cells, so no write races.  A pull may
read a neighbour's cell while that block's thread lowers it: either value
is the cost of a real path (never below the least), and a block that
changed a border cell activates its neighbours again, so they pull again.

Why the result equals the sequential Dijkstra's bit for bit: every cost is
computed by the same expression ``d[from] + (c[from] + c[to]) * 0.5 * L``
along some path, and a floating-point sum is monotone in each operand.  At
the end no move offers a better candidate (a fixed point), and every value
is a path's cost, so each cell holds the least path cost over all paths,
evaluated along the path (induction along a least path): exactly what
Dijkstra computes (the label-correcting argument of the tiled path, at
block granularity).  Hops, predecessors and allocations are then derived
from these costs by the sequential code, as before.

References: Meyer & Sanders, Delta-stepping: a parallelizable shortest path
algorithm (J. Algorithms 2003); Davidson et al., Work-efficient parallel
GPU methods for single-source shortest paths (IPDPS 2014, near-far).
"""

import numba
import numpy as np
from numba import njit, prange

# Side of a block: its records (32 bytes a cell) stay in the L2 cache.
BLOCK_SIDE = 64

# A round spreads costs up to a bound that grows by about this many blocks'
# width of travel at the mean cost per round.
ROUND_WIDTH_BLOCKS = 1.0

# Rounds between two progress reports.
_ROUNDS_PER_REPORT = 4


@njit(cache=True, nogil=True, inline="always")
def _push(heap_key, heap_cell, size, key, cell):
    slot = size
    while slot > 0:
        parent = (slot - 1) >> 1
        if heap_key[parent] <= key:
            break
        heap_key[slot] = heap_key[parent]
        heap_cell[slot] = heap_cell[parent]
        slot = parent
    heap_key[slot] = key
    heap_cell[slot] = cell
    return size + 1


@njit(cache=True, nogil=True, inline="always")
def _pop(heap_key, heap_cell, size):
    """Remove the root (read it first); returns the new size."""
    size -= 1
    key = heap_key[size]
    cell = heap_cell[size]
    slot = 0
    while True:
        child = 2 * slot + 1
        if child >= size:
            break
        if child + 1 < size and heap_key[child + 1] < heap_key[child]:
            child += 1
        if heap_key[child] >= key:
            break
        heap_key[slot] = heap_key[child]
        heap_cell[slot] = heap_cell[child]
        slot = child
    heap_key[slot] = key
    heap_cell[slot] = cell
    return size


@njit(cache=True, nogil=True, inline="always")
def _near_border(r, c, r0, r1, c0, c1, margin):
    return (r < r0 + margin or r >= r1 - margin or c < c0 + margin
            or c >= c1 - margin)


@njit(cache=True, nogil=True)
def _pull(state, rows, cols, r, c, r0, r1, c0, c1, drow, dcol,
          passed_delta_a, passed_delta_b, step_lengths, max_cost):
    """The best candidate for cell (r, c) from its neighbours outside the
    block; +inf for none."""
    cell = r * cols + c
    cell_cost = state[cell].cost
    best = np.inf
    for i in range(drow.shape[0]):
        # the move i from the neighbour to this cell
        nr = r - drow[i]
        nc = c - dcol[i]
        if not (0 <= nr < rows and 0 <= nc < cols):
            continue
        if r0 <= nr < r1 and c0 <= nc < c1:
            continue
        neighbour = nr * cols + nc
        there = state[neighbour].accumulated
        if not (there < np.inf and there > -np.inf):
            continue
        if i >= 8 and (
                state[neighbour + passed_delta_a[i]].accumulated == -np.inf
                or state[neighbour + passed_delta_b[i]].accumulated
                == -np.inf):
            continue
        # the search's expression, term for term
        candidate = there + (state[neighbour].cost + cell_cost) * 0.5 \
            * step_lengths[i]
        if candidate < best and candidate <= max_cost:
            best = candidate
    return best


@njit(cache=True, nogil=True)
def _solve_block(state, pending, rows, cols, r0, r1, c0, c1, margin, drow,
                 dcol, passed_delta_a, passed_delta_b, step_lengths, max_cost,
                 bound, pending_least, pull, sources, first_source,
                 stop_source, heap_key, heap_cell):
    """Pull into the block, then Dijkstra inside it up to ``bound``.

    ``pending[cell]`` is 1 for cells whose cost dropped since they last
    spread it; those above the bound stay pending for a later round.
    ``pending_least`` is the least pending key of the block (+inf: none):
    above the bound, the pending cells wait without being listed.  ``pull``
    says whether a neighbouring block changed its border since the last
    pull.  Returns (the least new cost of a cell within ``margin`` of the
    block border, +inf for none; pops; the least key left pending, +inf:
    none).
    """
    size = 0
    changed = np.inf
    for k in range(first_source, stop_source):
        cell = sources[k]
        r = cell // cols
        c = cell - r * cols
        pending[cell] = 1
        if _near_border(r, c, r0, r1, c0, c1, margin):
            changed = 0.0
    listed = (pending_least < np.inf and pending_least <= bound) \
        or stop_source > first_source
    if listed:
        for r in range(r0, r1):
            for c in range(c0, c1):
                cell = r * cols + c
                if pending[cell]:
                    size = _push(heap_key, heap_cell, size,
                                 state[cell].accumulated, (r << 32) | c)
    for r in range(r0, r1 if pull else r0):
        ring_row = r < r0 + margin or r >= r1 - margin
        c = c0
        while c < c1:
            if not ring_row and c == c0 + margin and c1 - margin > c:
                c = c1 - margin  # skip the inside of the row
                continue
            cell = r * cols + c
            own = state[cell].accumulated
            if own > -np.inf:
                best = _pull(state, rows, cols, r, c, r0, r1, c0, c1, drow,
                             dcol, passed_delta_a, passed_delta_b,
                             step_lengths, max_cost)
                if best < own:
                    state[cell].accumulated = best
                    pending[cell] = 1
                    size = _push(heap_key, heap_cell, size, best, (r << 32) | c)
                    changed = min(changed, best)
            c += 1
    pops = 0
    mask = (np.int64(1) << 32) - 1
    while size > 0:
        key = heap_key[0]
        if key > bound:
            break
        packed = heap_cell[0]
        size = _pop(heap_key, heap_cell, size)
        r = packed >> 32
        c = packed & mask
        cell = r * cols + c
        if key > state[cell].accumulated or not pending[cell]:
            continue  # a stale entry: the cell got cheaper since, or spread
        pending[cell] = 0
        pops += 1
        cell_cost = state[cell].cost
        for i in range(drow.shape[0]):
            nr = r + drow[i]
            nc = c + dcol[i]
            if not (r0 <= nr < r1 and c0 <= nc < c1):
                continue
            neighbour = nr * cols + nc
            if i >= 8 and (
                    state[cell + passed_delta_a[i]].accumulated == -np.inf
                    or state[cell + passed_delta_b[i]].accumulated
                    == -np.inf):
                continue
            record = state[neighbour]
            candidate = key + (cell_cost + record.cost) * 0.5 \
                * step_lengths[i]
            if candidate < record.accumulated and candidate <= max_cost:
                record.accumulated = candidate
                pending[neighbour] = 1
                size = _push(heap_key, heap_cell, size, candidate,
                             (nr << 32) | nc)
                if candidate < changed and _near_border(nr, nc, r0, r1, c0,
                                                        c1, margin):
                    changed = candidate
    # the least key left (a stale entry's key is never below it: entries
    # of spread cells are larger than the key they spread at)
    left = np.inf
    while size > 0:
        packed = heap_cell[0]
        cell = (packed >> 32) * cols + (packed & mask)
        if pending[cell] and heap_key[0] == state[cell].accumulated:
            left = heap_key[0]
            break
        size = _pop(heap_key, heap_cell, size)
    if not listed:
        left = min(left, pending_least)
    return changed, pops, left


@njit(cache=True, nogil=True, parallel=True)
def _round(state, pending, rows, cols, side, block_cols, active, n_active,
           margin, drow, dcol, passed_delta_a, passed_delta_b, step_lengths,
           max_cost, bound, sources, source_offsets, with_sources, changed,
           pending_min, pull, pops, heap_keys, heap_cells):
    for a in prange(n_active):
        b = active[a]
        br = b // block_cols
        bc = b - br * block_cols
        r0 = br * side
        c0 = bc * side
        r1 = min(rows, r0 + side)
        c1 = min(cols, c0 + side)
        # each thread reuses its own heap: no fresh pages per block
        thread = numba.get_thread_id()
        heap_key = heap_keys[thread]
        heap_cell = heap_cells[thread]
        first = source_offsets[b] if with_sources else 0
        stop = source_offsets[b + 1] if with_sources else 0
        border_min, pops[a], pending_min[b] = _solve_block(
            state, pending, rows, cols, r0, r1, c0, c1, margin, drow, dcol,
            passed_delta_a, passed_delta_b, step_lengths, max_cost, bound,
            pending_min[b], pull[b], sources, first, stop, heap_key,
            heap_cell)
        # only this block's thread writes its entry
        changed[b] = min(changed[b], border_min)


@njit(inline="always")
def _due(key, bound):
    """A key (+inf: none) at most the bound (which may be +inf)."""
    return key < np.inf and key <= bound


@njit(cache=True, nogil=True)
def _next_active(changed, pending_min, bound, block_rows, block_cols,
                 active, pull):
    """The blocks to run under ``bound``: those with a pending key at most
    the bound and those next to (or diagonal to) a block whose border got a
    cost at most the bound (whose entry in ``changed`` is then cleared:
    they pull it now, ``pull`` says which).  Returns how many (written to
    ``active``)."""
    n = 0
    for b in range(block_rows * block_cols):
        br = b // block_cols
        bc = b - br * block_cols
        near = False
        for dr in range(-1, 2):
            for dc in range(-1, 2):
                if (dr or dc) and 0 <= br + dr < block_rows \
                        and 0 <= bc + dc < block_cols \
                        and _due(changed[(br + dr) * block_cols + bc + dc],
                                 bound):
                    near = True
        pull[b] = near
        if near or _due(pending_min[b], bound):
            active[n] = b
            n += 1
    for b in range(block_rows * block_cols):
        if _due(changed[b], bound):
            changed[b] = np.inf
    return n


def search(state, rows, cols, source_index, neighbour_drow, neighbour_dcol,
           passed_delta_a, passed_delta_b, step_lengths, margin, max_cost,
           progress, side=BLOCK_SIDE):
    """Least accumulated costs into ``state['accumulated']`` (+inf where
    unreached; barriers hold -inf, other cells +inf on entry).  Returns the
    cells popped in all (a cell may be popped once per round it improves
    in)."""
    side = max(int(side), margin, 2)
    block_rows = -(-rows // side)
    block_cols = -(-cols // side)
    n_blocks = block_rows * block_cols
    sources = np.unique(np.asarray(source_index, dtype=np.int64))
    state["accumulated"][sources] = 0.0
    source_block = (sources // cols // side) * block_cols \
        + (sources % cols) // side
    order = np.argsort(source_block, kind="stable")
    sources = sources[order]
    source_offsets = np.searchsorted(source_block[order],
                                     np.arange(n_blocks + 1)).astype(np.int64)
    # the width of a round: about a block's width of travel at the mean
    # cost (any width gives the same costs; this one keeps rounds few and
    # re-spreads rare)
    costs = state["cost"]
    finite = state["accumulated"] > -np.inf
    mean_cost = float(np.mean(costs[finite])) if finite.any() else 0.0
    width = side * mean_cost * float(np.max(step_lengths)) \
        * ROUND_WIDTH_BLOCKS
    if not width > 0 or not np.isfinite(width):
        width = np.inf
    pending = np.zeros(rows * cols, dtype=np.uint8)
    active = np.empty(n_blocks, dtype=np.int64)
    first_blocks = np.unique(source_block).astype(np.int64)
    n_active = first_blocks.size
    active[:n_active] = first_blocks
    changed = np.full(n_blocks, np.inf)
    pull = np.zeros(n_blocks, dtype=np.bool_)
    pending_min = np.full(n_blocks, np.inf)
    pops = np.zeros(n_blocks, dtype=np.int64)
    # every cell of a block enters its heap once as pending, once from a
    # pull and at most once per neighbour's pop
    capacity = min(side, rows) * min(side, cols) \
        * (neighbour_drow.shape[0] + 2) + 1
    # thread ids run up to the pool's size, whatever set_num_threads says
    threads = numba.config.NUMBA_NUM_THREADS
    heap_keys = np.empty((threads, capacity), dtype=np.float64)
    heap_cells = np.empty((threads, capacity), dtype=np.int64)
    total_pops = 0
    rounds = 0
    bound = width
    while n_active > 0:
        _round(state, pending, rows, cols, side, block_cols, active,
               n_active, margin, neighbour_drow, neighbour_dcol,
               passed_delta_a, passed_delta_b, step_lengths, float(max_cost),
               bound, sources, source_offsets, rounds == 0, changed,
               pending_min, pull, pops, heap_keys, heap_cells)
        total_pops += int(pops[:n_active].sum())
        n_active = _next_active(changed, pending_min, bound, block_rows,
                                block_cols, active, pull)
        if n_active == 0:
            # every cost up to the bound is final: move the bound on
            least = min(float(pending_min.min()), float(changed.min()))
            if least == np.inf:
                break
            bound = max(bound, least) + width
            n_active = _next_active(changed, pending_min, bound, block_rows,
                                    block_cols, active, pull)
        rounds += 1
        if rounds % _ROUNDS_PER_REPORT == 0:
            # no settled count to report: the share of the raster popped,
            # capped below the end
            progress(min(0.95, total_pops / max(rows * cols, 1)))
    return total_pops
