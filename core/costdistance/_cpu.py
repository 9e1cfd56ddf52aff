"""Numba CPU kernel of cost distance: multi-source Dijkstra on the cell grid.

The priority queue is an indexed 4-ary min-heap with decrease-key: every
reached, unsettled cell sits in the heap exactly once, its record's
``heap_position`` says where, and a cheaper path moves it up in place.  A cell
is in the heap exactly when its tentative cost is finite and it has not been
popped (in a tile solve of the tiled path, which starts from the tile's last
distances: when its heap position is not -1 and it has not been popped).
Keys are stored in the heap (beside each entry's cell index), so sifting
compares within the small heap arrays and never reads the raster.

At 4096 x 4096 the search is bound by memory latency: a popped cell's
neighbourhood was last touched when it was pushed, long before.  So per-cell
search state is one record (tentative cost, cost, heap position, hops), and
relaxing a neighbour touches one cache line instead of one per array (about
30 % faster than separate arrays); and right after a pop the
neighbourhood of the new heap root, the likely next cell, is prefetched while
the current cell is relaxed (about 20 % more).

The search runs in bounded chunks of pops; between chunks control returns to
Python, which reports progress (and so honours a cancel) and grows the heap
when the frontier needs more room.  All search state lives in arrays, so a
chunk resumes exactly where the previous one stopped.

Ties.  Each cell gets the pair (accumulated cost, hops), the fixed point
of ``(d, h)[c] = min over neighbours n of (d[n] + step(n, c), h[n] + 1)``
compared cost first: d from the search above, then h by a breadth-first
search over the moves that give a cell its final cost exactly
(:func:`_tight_steps`).  Both are the same whatever the order, so the
CUDA and tiled backends, which reach them in other orders, agree with this
one.  The predecessor of a cell
is then read off the final pairs (:func:`canonical_predecessors`: the
neighbour minimising (d[n] + step, h[n], neighbour index)), never from the
order in which cells were settled, and the allocation is the id of the
source at the root of that tree (:func:`root_allocation`).

Preconditions (checked by :func:`gridgraph.core.cost_distance`): costs are
>= 0 on valid cells, every source is a valid cell.  Postcondition: every cell
whose least accumulated cost is <= ``max_cost`` is settled with that cost
(Dijkstra 1959).
"""

import os

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .._common import index_dtype, numba_can_read

# Predecessor codes besides neighbour indices.
PREDECESSOR_UNREACHED = -1
PREDECESSOR_SOURCE = -2

HEAP_ARITY = 4  # _pop_min compares exactly four children per level
# +inf slots kept past the last heap entry, so every node has HEAP_ARITY
# children to compare.
HEAP_PADDING = HEAP_ARITY

# Heap slots allocated up front; the heap doubles when the frontier outgrows
# them (one source on a 4096 x 4096 fractal raster peaks near 16 000).
INITIAL_HEAP_CAPACITY = 1 << 16

# Pops per kernel call between two progress reports: ~20 ms on an idle core
# and ~0.2 s on a heavily shared one, so a cancel lands well inside one
# second; the call itself costs microseconds.
POPS_PER_CHUNK = 1 << 17

# From this many cells on, and with at least BLOCKS_MIN_THREADS threads, the
# search runs on blocks of cells in parallel (_blocks_heaps).  One thread
# spends about 1.05x the heap search's CPU time on its large blocks (4096²
# fractal, 2026-11-24), so two threads pay where the cores are free.
BLOCKS_MIN_CELLS = 1 << 20

BLOCKS_MIN_THREADS = 2

# ... unless the machine is this many times oversubscribed (one-minute load
# average over the CPUs this process may use): the block search's rounds
# end at a barrier, and a thread descheduled by other processes holds up
# the round.  2-core EPYC box, 4096² fractal, 2 threads: load 5-8, the
# blocks took 1.4x the heap search's wall time; load 1-3, 0.6-0.76x.
OVERSUBSCRIBED_LOAD = 2.0

# The block search: "heaps" (large blocks keeping their heaps between
# rounds, _blocks_heaps) or "small" (64² blocks re-listed each round,
# _blocks_cpu).  Both give the heap search's rasters bit for bit.
BLOCK_SEARCH = "heaps"


def _state_dtype(index):
    # accumulated: +inf not reached yet, -inf barrier (no candidate is ever
    # smaller, so barriers need no test of their own); cost: the friction as
    # float64; heap_position: valid only while the cell is in the heap
    # (then the queue of the steps search; a tile solve sets -1 where a
    # finite cost is not in the heap); hops: the cell's steps.
    return np.dtype([("accumulated", np.float64), ("cost", np.float64),
                     ("heap_position", index), ("hops", index)])


def solve(array, valid, source_cells, ids, connectivity, step_lengths,
          max_cost, progress, blocks=None, predecessors=True):
    """Accumulated cost, predecessor and allocation rasters (Dijkstra).

    Parameters
    ----------
    array : 2-D ndarray
        Cost per cell, any numeric dtype (read as float64, never modified).
    valid : 2-D bool ndarray
        False on barrier cells.
    source_cells : (k, 2) int64 ndarray
        (row, col) of the sources, all valid; a repeated cell keeps the id
        of its first listing.
    ids : (k,) int64 ndarray
        Allocation id of each source.
    connectivity : {4, 8, 16}
    step_lengths : (connectivity,) float64 ndarray
        Length of a step toward ``NEIGHBOUR_OFFSETS[i]``.
    max_cost : float
        Cells whose accumulated cost would exceed it stay unreached.
    progress : gridgraph.core._common.Progress
        Called with the settled fraction between chunks.
    blocks : bool or int, optional
        True: search blocks of cells in parallel rounds
        (:mod:`._blocks_cpu`), an int: of that side; False: one heap on one
        thread.  None picks the blocks from ``BLOCKS_MIN_CELLS`` cells on
        when numba has ``BLOCKS_MIN_THREADS`` threads or more and the
        machine is not oversubscribed (:func:`oversubscribed`).  Every choice
        gives the same rasters bit for bit.
    predecessors : bool, optional
        False: only the accumulated costs are wanted; the predecessor pass
        is skipped and the predecessor and allocation returned are None
        (the costs are the same bit for bit).

    Returns
    -------
    accumulated : float64 ndarray, NaN where unreached
    predecessor : int8 ndarray, -1 unreached, -2 source, else the index into
        ``NEIGHBOUR_OFFSETS`` of the neighbour the cell was reached from
    allocation : int64 ndarray, 0 where unreached
    """
    # the package imports this module lazily
    from . import KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS

    rows, cols = array.shape
    n_cells = rows * cols
    index = index_dtype(max(n_cells, len(source_cells)))

    offsets = NEIGHBOUR_OFFSETS[:connectivity]
    neighbour_drow = np.ascontiguousarray(offsets[:, 0])
    neighbour_dcol = np.ascontiguousarray(offsets[:, 1])
    neighbour_delta = neighbour_drow * cols + neighbour_dcol
    passed = KNIGHT_PASSED_CELLS[:connectivity]
    passed_delta_a = np.ascontiguousarray(passed[:, 0, 0] * cols
                                          + passed[:, 0, 1])
    passed_delta_b = np.ascontiguousarray(passed[:, 1, 0] * cols
                                          + passed[:, 1, 1])
    step_lengths = np.ascontiguousarray(step_lengths, dtype=np.float64)
    margin = 2 if connectivity == 16 else 1

    state = _initial_state(array, valid, index)

    source_index = (source_cells[:, 0].astype(np.int64) * cols
                    + source_cells[:, 1].astype(np.int64))
    progress(0.0)
    if blocks is None:
        blocks = n_cells >= BLOCKS_MIN_CELLS \
            and numba.get_num_threads() >= BLOCKS_MIN_THREADS \
            and not oversubscribed()
    if blocks and BLOCK_SEARCH == "heaps":
        from . import _blocks_heaps
        side = _blocks_heaps.block_side(rows, cols, numba.get_num_threads()) \
            if blocks is True else int(blocks)
        _blocks_heaps.search(state, rows, cols, source_index, neighbour_drow,
                             neighbour_dcol, neighbour_delta, passed_delta_a,
                             passed_delta_b, step_lengths, margin, max_cost,
                             progress, side)
    elif blocks:
        from . import _blocks_cpu
        side = _blocks_cpu.BLOCK_SIDE if blocks is True else int(blocks)
        _blocks_cpu.search(state, rows, cols, source_index, neighbour_drow,
                           neighbour_dcol, passed_delta_a, passed_delta_b,
                           step_lengths, margin, max_cost, progress, side)
    else:
        _heap_search(state, rows, cols, valid, source_index, connectivity,
                     neighbour_delta, neighbour_drow, neighbour_dcol,
                     passed_delta_a, passed_delta_b, step_lengths, margin,
                     max_cost, progress)

    if not predecessors:
        # unreached (+inf) and barriers (-inf) are NaN, as where the
        # predecessor pass finds no predecessor
        accumulated = _outputs_in_state(state)[0]
        _accumulated_only_in_place(state, accumulated)
        return accumulated.reshape(rows, cols), None, None
    distance = state["accumulated"]
    hops = state["hops"]
    cost = state["cost"]
    # sources: hops 0, every other cell 1 from the fill (the only hops
    # read when no cell has two tight neighbours; then the predecessor is
    # the tight one, hops or not)
    hops[source_index] = 0
    predecessor = np.empty(n_cells, dtype=np.int8)
    passed_cells = tuple(np.ascontiguousarray(passed[:, a, b])
                         for a in (0, 1) for b in (0, 1))
    ties = canonical_predecessors(
        distance, hops, cost, rows, cols, 0, rows, 0, cols, neighbour_drow,
        neighbour_dcol, *passed_cells, step_lengths, predecessor, False)
    if ties:
        # steps, with the costs final; the heap positions hold its queue
        _tight_steps(state, rows, cols, source_index, neighbour_delta,
                     neighbour_drow, neighbour_dcol, passed_delta_a,
                     passed_delta_b, step_lengths, margin)
        canonical_predecessors(
            distance, hops, cost, rows, cols, 0, rows, 0, cols,
            neighbour_drow, neighbour_dcol, *passed_cells, step_lengths,
            predecessor)
    del distance, hops, cost
    # The outputs take the search state's memory (already in RAM) instead of
    # fresh pages: the accumulated costs its first 8 bytes a cell, the
    # allocation the next 8 (the state holds 24 or 32 bytes a cell).
    accumulated, allocation, spare = _outputs_in_state(state)
    _accumulated_in_place(state, predecessor, accumulated)
    del state
    ids = np.asarray(ids, dtype=np.int64)
    if len(np.unique(ids)) == 1:
        _single_allocation(predecessor, ids[0], allocation)
    else:
        root_allocation(predecessor, rows, cols, neighbour_drow,
                        neighbour_dcol, source_index, ids, allocation,
                        spare.view(np.bool_))
    shape = (rows, cols)
    return (accumulated.reshape(shape), predecessor.reshape(shape),
            allocation.reshape(shape))


def oversubscribed():
    """Whether the one-minute load average is at least
    ``OVERSUBSCRIBED_LOAD`` times the CPUs this process may run on (False
    where the system does not say).  Only the speed depends on it: both
    searches give the same rasters."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = os.cpu_count() or 1
    return load >= OVERSUBSCRIBED_LOAD * max(cpus, 1)


def _initial_state(array, valid, index):
    """The search state of every cell, flat: cost as float64, accumulated
    +inf (-inf on barriers), hops 1 (the searches leave them alone; the
    predecessor pass reads them), in one pass."""
    rows, cols = array.shape
    state = np.empty(rows * cols, dtype=_state_dtype(index))
    if numba_can_read(array.dtype):
        _fill_state(state, array, np.ascontiguousarray(valid, np.bool_))
        return state
    # other dtypes and byte orders: field assignment converts them without
    # a float64 copy of the whole raster
    grid = state.reshape(rows, cols)
    grid["cost"] = array
    grid["accumulated"] = np.where(valid, np.inf, -np.inf)
    grid["hops"] = 1
    return state


@njit(cache=True, nogil=True)
def _fill_state(state, array, valid):
    # One thread: compiled per cost dtype, and a threaded version would
    # compile again per dtype on a user's first large raster (the warm-up
    # runs tiny ones); the pass is memory-bound anyway.
    rows, cols = array.shape
    for row in range(rows):
        for col in range(cols):
            record = state[row * cols + col]
            record.cost = np.float64(array[row, col])
            record.accumulated = np.inf if valid[row, col] else -np.inf
            record.hops = 1


def directions_in_degrees(predecessor, degrees):
    """GRASS direction degrees of predecessor codes (float32, NaN where
    unreached, 0 at sources): ``degrees[code]`` for a neighbour index."""
    direction = np.empty(predecessor.shape, dtype=np.float32)
    _degrees_of_codes(predecessor.reshape(-1), degrees.astype(np.float32),
                      direction.reshape(-1))
    return direction


@njit(cache=True, nogil=True)
def _degrees_of_codes(predecessor, degrees, direction):
    # one pass, no boolean masks or gathered temporaries
    for cell in range(predecessor.shape[0]):
        code = predecessor[cell]
        if code >= 0:
            direction[cell] = degrees[code]
        elif code == PREDECESSOR_SOURCE:
            direction[cell] = 0.0
        else:
            direction[cell] = np.nan


def _outputs_in_state(state):
    """Flat float64, int64 and uint8 views of the state's memory, at bytes
    [0, 8n), [8n, 16n) and [16n, 17n) of its n cells."""
    n = state.shape[0]
    memory = state.view(np.uint8)
    return (memory[:8 * n].view(np.float64),
            memory[8 * n:16 * n].view(np.int64), memory[16 * n:17 * n])


@njit(cache=True, nogil=True)
def _accumulated_in_place(state, predecessor, accumulated):
    """``accumulated[k]`` = the state's accumulated cost of cell k, NaN where
    unreached, where ``accumulated`` overlays the state itself.

    Writing cell k's 8 bytes overwrites the record of cell
    8k / itemsize < k (k > 0), read already when the cells go in increasing
    order; so one thread, in order (a sequential pass, memory-bound).
    """
    for cell in range(state.shape[0]):
        value = state[cell].accumulated
        if predecessor[cell] == PREDECESSOR_UNREACHED:
            value = np.nan
        accumulated[cell] = value


@njit(cache=True, nogil=True)
def _accumulated_only_in_place(state, accumulated):
    """As :func:`_accumulated_in_place`, NaN where the cost is not finite
    (unreached: +inf; barriers: -inf)."""
    for cell in range(state.shape[0]):
        value = state[cell].accumulated
        if not (value < np.inf and value > -np.inf):
            value = np.nan
        accumulated[cell] = value


@njit(cache=True, nogil=True)
def _single_allocation(predecessor, source_id, allocation):
    for cell in range(predecessor.shape[0]):
        allocation[cell] = 0 if predecessor[cell] == PREDECESSOR_UNREACHED \
            else source_id


def _heap_search(state, rows, cols, valid, source_index, connectivity,
                 neighbour_delta, neighbour_drow, neighbour_dcol,
                 passed_delta_a, passed_delta_b, step_lengths, margin,
                 max_cost, progress):
    """Dijkstra with one indexed heap, in chunks of pops between progress
    reports."""
    n_cells = rows * cols
    index = state.dtype["hops"]
    capacity = min(n_cells, max(len(source_index), INITIAL_HEAP_CAPACITY)) \
        + connectivity + HEAP_PADDING
    heap_key = np.full(capacity, np.inf)
    heap_cell = np.empty(capacity, dtype=index)
    heap_size = _seed_sources(source_index, state, heap_key, heap_cell)
    drain_heap(state, rows, cols, heap_key, heap_cell, heap_size,
               neighbour_delta, neighbour_drow, neighbour_dcol,
               passed_delta_a, passed_delta_b, step_lengths, margin,
               max_cost, progress, max(int(np.count_nonzero(valid)), 1))


def drain_heap(state, rows, cols, heap_key, heap_cell, heap_size,
               neighbour_delta, neighbour_drow, neighbour_dcol,
               passed_delta_a, passed_delta_b, step_lengths, margin,
               max_cost, progress, n_valid):
    """Dijkstra from a seeded heap until it is empty, in chunks of pops
    between progress reports (the share of ``n_valid`` cells settled).
    Also the tiled path's tile solve (``tiled.solve``), whose heap holds
    the cells its band and sources lowered."""
    n_cells = rows * cols
    connectivity = neighbour_delta.shape[0]
    settled = 0
    while heap_size > 0:
        if heap_size + connectivity + HEAP_PADDING > heap_key.shape[0]:
            heap_key, heap_cell = _grown_heap(
                heap_key, heap_cell, heap_size,
                n_cells + connectivity + HEAP_PADDING)
        heap_size, pops = _dijkstra_chunk(
            state, rows, cols, heap_key, heap_cell, heap_size,
            neighbour_delta, neighbour_drow, neighbour_dcol, passed_delta_a,
            passed_delta_b, step_lengths, margin, float(max_cost),
            POPS_PER_CHUNK)
        settled += pops
        progress(min(settled / n_valid, 1.0))


@njit(cache=True, nogil=True, inline="always")
def _neighbour_at(cell, row, col, i, interior, rows, cols, neighbour_delta,
                  neighbour_drow, neighbour_dcol):
    """The cell at offset i of ``cell`` (at row, col), -1 outside the
    raster; ``interior`` cells (at least the move's reach from every
    border) skip the bounds test."""
    if interior:
        return cell + neighbour_delta[i]
    neighbour_row = row + neighbour_drow[i]
    neighbour_col = col + neighbour_dcol[i]
    if not (0 <= neighbour_row < rows and 0 <= neighbour_col < cols):
        return -1
    return neighbour_row * cols + neighbour_col


@njit(cache=True, nogil=True)
def _tight_steps(state, rows, cols, source_index, neighbour_delta,
                 neighbour_drow, neighbour_dcol, passed_delta_a,
                 passed_delta_b, step_lengths, margin):
    """Steps of every reached cell, with the costs final: a breadth-first
    search from the sources over *tight* moves (those giving the end its
    cost exactly, by the search's expression), so the least steps among
    the neighbours that give a cell its cost.  -1 where unreached.

    Counting steps in the cost search itself (relaxing pairs) would
    re-settle cells again and again on zero-cost plateaus, where every pop
    has the same cost; a breadth-first search is linear.
    """
    n = rows * cols
    for cell in range(n):
        state[cell].hops = -1
    tail = 0
    for k in range(source_index.shape[0]):
        cell = source_index[k]
        if state[cell].hops == 0:
            continue  # listed twice
        state[cell].hops = 0
        state[tail].heap_position = cell
        tail += 1
    head = 0
    connectivity = neighbour_delta.shape[0]
    while head < tail:
        cell = np.int64(state[head].heap_position)
        head += 1
        cell_distance = state[cell].accumulated
        cell_cost = state[cell].cost
        next_hops = state[cell].hops + 1
        row = cell // cols
        col = cell - row * cols
        interior = (margin <= row < rows - margin
                    and margin <= col < cols - margin)
        for i in range(connectivity):
            neighbour = _neighbour_at(cell, row, col, i, interior, rows, cols,
                                      neighbour_delta, neighbour_drow,
                                      neighbour_dcol)
            if neighbour < 0:
                continue
            record = state[neighbour]
            there = record.accumulated
            if record.hops != -1 or not (there < np.inf and there > -np.inf):
                continue
            if i >= 8 and (
                    state[cell + passed_delta_a[i]].accumulated == -np.inf
                    or state[cell + passed_delta_b[i]].accumulated == -np.inf):
                continue
            # the search's expression, term for term
            if cell_distance + (cell_cost + record.cost) * 0.5 \
                    * step_lengths[i] == there:
                record.hops = next_hops
                state[tail].heap_position = neighbour
                tail += 1


@njit(cache=True, nogil=True, parallel=True)
def canonical_predecessors(distance, hops, cost, rows, cols, row_start,
                           row_stop, col_start, col_stop, drow, dcol,
                           passed_a_row, passed_a_col, passed_b_row,
                           passed_b_col, step_lengths, predecessor,
                           use_hops=True):
    """Predecessor codes from the final (distance, hops) of every cell.

    The arrays are flat over a ``rows`` x ``cols`` frame (the raster, or a
    tile with a halo of neighbours); codes are written for the cells of
    rows [row_start, row_stop) and columns [col_start, col_stop) only.
    ``distance`` is +inf where unreached and -inf on barriers.  A cell's
    predecessor is the allowed neighbour minimising (its distance plus the
    step, its hops, its index in NEIGHBOUR_OFFSETS): the same cell for any
    search order, so every backend and tile size gives the same trees.
    Sources have hops 0 (code -2), unreached cells -1.

    With ``use_hops`` False only ``hops == 0`` (the sources) is read, and
    the result is canonical only where a cell has one tight neighbour (one
    whose distance plus the step is exactly the cell's).  Returns the
    number of cells with two or more; when it is not 0 the caller computes
    the hops and calls again with ``use_hops`` True.
    """
    ties = 0
    for row in prange(row_start, row_stop):
        for col in range(col_start, col_stop):
            cell = row * cols + col
            own = distance[cell]
            if not (own < np.inf and own > -np.inf):
                predecessor[cell] = PREDECESSOR_UNREACHED
                continue
            own_hops = hops[cell]
            if own_hops == 0:
                predecessor[cell] = PREDECESSOR_SOURCE
                continue
            best = np.inf
            best_hops = own_hops
            best_i = -1
            tight = 0
            for i in range(drow.shape[0]):
                next_row = row + drow[i]
                next_col = col + dcol[i]
                if not (0 <= next_row < rows and 0 <= next_col < cols):
                    continue
                neighbour = next_row * cols + next_col
                there = distance[neighbour]
                if not (there <= own and there > -np.inf) or (
                        use_hops and hops[neighbour] >= own_hops):
                    continue
                if i >= 8 and (
                        distance[(row + passed_a_row[i]) * cols + col
                                 + passed_a_col[i]] == -np.inf
                        or distance[(row + passed_b_row[i]) * cols + col
                                    + passed_b_col[i]] == -np.inf):
                    continue
                # the search's expression, term for term
                candidate = there + (cost[neighbour] + cost[cell]) \
                    * 0.5 * step_lengths[i]
                if candidate == own:
                    tight += 1
                if not use_hops:
                    if candidate < best:
                        best = candidate
                        best_i = i
                elif candidate < best or (candidate == best
                                          and hops[neighbour] < best_hops):
                    best = candidate
                    best_hops = hops[neighbour]
                    best_i = i
            predecessor[cell] = best_i
            if tight > 1:
                ties += 1
    return ties


def root_allocation(predecessor, rows, cols, drow, dcol, source_index, ids,
                    allocation=None, known=None):
    """Id of the source at the root of each cell's predecessor tree.

    A source listed twice keeps the id of its first listing; 0 where
    unreached.  ``allocation`` (int64) and ``known`` (bool), flat arrays of
    the cells, may be given to be written (the result is ``allocation``).
    """
    n = rows * cols
    if allocation is None:
        allocation = np.empty(n, dtype=np.int64)
    if known is None:
        known = np.empty(n, dtype=np.bool_)
    allocation[:] = 0
    known[:] = False
    # the first listing written last wins
    allocation[source_index[::-1]] = ids[::-1]
    known[source_index] = True
    walk_to_roots(predecessor, cols, drow, dcol, allocation,
                  np.zeros(0, np.uint8), known)
    return allocation


@njit(cache=True, nogil=True)
def walk_to_roots(predecessor, cols, drow, dcol, label, flag, known):
    """Give every cell the ``label`` (and ``flag``, when it has one per
    cell) of the first ``known`` cell on its predecessor path.

    Flat arrays over a frame of ``cols`` columns; a path must reach a known
    cell without leaving the frame (cells whose predecessor lies outside it
    are known).  Each path is walked twice at most (once to find the first
    known cell, once to write its label), so the pass is linear.
    """
    has_flag = flag.shape[0] > 0
    for start in range(predecessor.shape[0]):
        if known[start] or predecessor[start] < 0:
            continue
        cell = start
        while not known[cell]:
            code = predecessor[cell]
            if code < 0:
                break  # unreachable for a consistent state
            cell = cell + drow[code] * cols + dcol[code]
        root = cell
        cell = start
        while not known[cell]:
            label[cell] = label[root]
            if has_flag:
                flag[cell] = flag[root]
            known[cell] = True
            code = predecessor[cell]
            if code < 0:
                break
            cell = cell + drow[code] * cols + dcol[code]


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the CPU to start loading ``array[index]`` into cache.

    Only a hint (LLVM ``llvm.prefetch``): it never faults, so ``index`` may
    lie outside the array, and it changes no value.
    """
    signature = types.void(array, index)

    def codegen(context, builder, sig, args):
        array_type = sig.args[0]
        array_value = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type,
                                           array_value, [args[1]],
                                           wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        int32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32]),
            "llvm.prefetch.p0i8")
        # read access, high temporal locality, data cache
        builder.call(function, [builder.bitcast(pointer, byte_pointer),
                                int32(0), int32(3), int32(1)])
        return context.get_dummy_value()

    return signature, codegen


@njit(cache=True, nogil=True, inline="always")
def _prefetch_neighbourhood(state, cell, cols, margin):
    """Start loading the state records ``cell``'s moves will read.

    Called with the cell the heap will pop next while the current one is
    relaxed, so its neighbours' records are in cache when it is popped.  The
    rows above and below at ``margin`` columns either side cover the 3 x 3
    (or 5 x 5) block a cache line or two at a time; knight's moves
    (``margin == 2``) also reach two rows away.
    """
    _prefetch(state, cell - cols - margin)
    _prefetch(state, cell - cols + margin)
    _prefetch(state, cell - margin)
    _prefetch(state, cell + margin)
    _prefetch(state, cell + cols - margin)
    _prefetch(state, cell + cols + margin)
    if margin == 2:
        _prefetch(state, cell - 2 * cols - 2)
        _prefetch(state, cell - 2 * cols + 2)
        _prefetch(state, cell + 2 * cols - 2)
        _prefetch(state, cell + 2 * cols + 2)


def _grown_heap(heap_key, heap_cell, heap_size, limit):
    capacity = min(2 * heap_key.shape[0], limit)
    new_key = np.full(capacity, np.inf)
    new_cell = np.empty(capacity, dtype=heap_cell.dtype)
    new_key[:heap_size] = heap_key[:heap_size]
    new_cell[:heap_size] = heap_cell[:heap_size]
    return new_key, new_cell


@njit(cache=True, nogil=True)
def _seed_sources(source_index, state, heap_key, heap_cell):
    heap_size = 0
    for k in range(source_index.shape[0]):
        cell = source_index[k]
        record = state[cell]
        if record.accumulated == 0.0:
            continue  # listed twice
        record.accumulated = 0.0
        record.heap_position = heap_size
        # every key is 0, so appending keeps the heap order
        heap_key[heap_size] = 0.0
        heap_cell[heap_size] = cell
        heap_size += 1
    return heap_size


@njit(cache=True, nogil=True, inline="always")
def _sift_up(heap_key, heap_cell, state, slot, key, cell):
    """Place (key, cell) at ``slot`` or above, moving larger parents down."""
    while slot > 0:
        parent = (slot - 1) // HEAP_ARITY
        parent_key = heap_key[parent]
        if parent_key <= key:
            break
        parent_cell = heap_cell[parent]
        heap_key[slot] = parent_key
        heap_cell[slot] = parent_cell
        state[parent_cell].heap_position = slot
        slot = parent
    heap_key[slot] = key
    heap_cell[slot] = cell
    state[cell].heap_position = slot


@njit(cache=True, nogil=True, inline="always")
def _pop_min(heap_key, heap_cell, state, heap_size):
    """Remove the root; return the new heap size.

    Bottom-up deletion (Wegener 1993): the hole at the root sinks along the
    smaller children to a leaf without comparing against the displaced last
    element, which then sifts up from there (rarely far, as it is large).
    Slots past the end hold +inf so a node always has four children to
    compare, and the choice among them compiles to selects, not branches.
    """
    heap_size -= 1
    last_key = heap_key[heap_size]
    last_cell = heap_cell[heap_size]
    heap_key[heap_size] = np.inf
    if heap_size == 0:
        return heap_size
    hole = 0
    while True:
        first_child = HEAP_ARITY * hole + 1
        if first_child >= heap_size:
            break
        key0 = heap_key[first_child]
        key1 = heap_key[first_child + 1]
        key2 = heap_key[first_child + 2]
        key3 = heap_key[first_child + 3]
        child01 = first_child + np.int64(key1 < key0)
        key01 = min(key0, key1)
        child23 = first_child + 2 + np.int64(key3 < key2)
        key23 = min(key2, key3)
        best_child = child23 if key23 < key01 else child01
        best_cell = heap_cell[best_child]
        heap_key[hole] = min(key01, key23)
        heap_cell[hole] = best_cell
        state[best_cell].heap_position = hole
        hole = best_child
    _sift_up(heap_key, heap_cell, state, hole, last_key, last_cell)
    return heap_size


@njit(cache=True, nogil=True)
def _dijkstra_chunk(state, rows, cols, heap_key, heap_cell, heap_size,
                    neighbour_delta, neighbour_drow, neighbour_dcol,
                    passed_delta_a, passed_delta_b, step_lengths, margin,
                    max_cost, max_pops):
    """Pop up to ``max_pops`` cells; return (heap_size, pops).

    ``passed_delta_a/b[i]`` are the flat offsets of the two cells a knight's
    move i (i >= 8) passes between; the move is skipped when either is a
    barrier.

    Stops early when the heap might not hold the pushes of one more pop
    (the caller grows it and calls again).
    """
    connectivity = neighbour_delta.shape[0]
    capacity = heap_key.shape[0]
    pops = 0
    while heap_size > 0 and pops < max_pops:
        if heap_size + connectivity + HEAP_PADDING > capacity:
            break
        cell = np.int64(heap_cell[0])
        cell_distance = heap_key[0]
        heap_size = _pop_min(heap_key, heap_cell, state, heap_size)
        pops += 1
        if heap_size > 0:
            _prefetch_neighbourhood(state, np.int64(heap_cell[0]), cols,
                                    margin)

        cell_cost = state[cell].cost
        row = cell // cols
        col = cell - row * cols
        interior = (margin <= row < rows - margin
                    and margin <= col < cols - margin)
        for i in range(connectivity):
            neighbour = _neighbour_at(cell, row, col, i, interior, rows, cols,
                                      neighbour_delta, neighbour_drow,
                                      neighbour_dcol)
            if neighbour < 0:
                continue
            # a knight's move may not pass beside a barrier; its two passed
            # cells lie in the raster whenever its target does
            if i >= 8 and (
                    state[cell + passed_delta_a[i]].accumulated == -np.inf
                    or state[cell + passed_delta_b[i]].accumulated == -np.inf):
                continue
            record = state[neighbour]
            # Settled neighbours need no distance test: keys leave the heap
            # in non-decreasing order and steps cost >= 0, so the candidate
            # is never below their final cost.  Barriers hold -inf.
            # ((a + b) * 0.5) * L, in this order, rounds like skimage's and
            # GRASS's (a + b) / 2 * L down to subnormal costs
            candidate = cell_distance \
                + (cell_cost + record.cost) * 0.5 * step_lengths[i]
            previous = record.accumulated
            if candidate < previous:
                if candidate <= max_cost:
                    record.accumulated = candidate
                    # not in the heap: never reached, or (a tile solve
                    # seeded with its last state) reached by an earlier
                    # solve, its heap position -1
                    if previous == np.inf or record.heap_position < 0:
                        slot = heap_size
                        heap_size += 1
                        heap_key[heap_size + HEAP_PADDING - 1] = np.inf
                    else:
                        slot = np.int64(record.heap_position)
                    _sift_up(heap_key, heap_cell, state, slot, candidate,
                             neighbour)
    return heap_size, pops
