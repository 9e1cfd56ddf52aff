"""Numba CPU kernel of cost distance: multi-source Dijkstra on the cell grid.

The priority queue is an indexed 4-ary min-heap with decrease-key: every
reached, unsettled cell sits in the heap exactly once, ``heap_position[cell]``
says where, and a cheaper path moves it up in place.  Keys live in the heap
next to the cell index so sifting touches one contiguous array.

The search runs in bounded chunks of pops; between chunks control returns to
Python, which reports progress (and so honours a cancel) and grows the heap
when the frontier needs more room.  All search state lives in arrays, so a
chunk resumes exactly where the previous one stopped.

Preconditions (checked by :func:`gridgraph.core.cost_distance`): costs are
>= 0 on valid cells, every source is a valid cell.  Postcondition: every cell
whose least accumulated cost is <= ``max_cost`` is settled with that cost
(Dijkstra 1959), its predecessor is the neighbour it was settled from, and
its allocation is the id of the source at the root of that tree.
"""

import numpy as np
from numba import njit

from .._common import index_dtype

# heap_position values of cells that are not in the heap.
UNREACHED = -1
SETTLED = -2  # also marks barrier cells, which are never expanded

# Predecessor codes besides neighbour indices.
PREDECESSOR_UNREACHED = -1
PREDECESSOR_SOURCE = -2

HEAP_ARITY = 4

# Pops per kernel call between two progress reports: ~0.1-0.2 s on one core,
# well inside the one-second cancel budget.
POPS_PER_CHUNK = 1 << 20


def solve(array, valid, source_cells, ids, connectivity, step_lengths,
          max_cost, progress):
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

    Returns
    -------
    accumulated : float64 ndarray, NaN where unreached
    predecessor : int8 ndarray, -1 unreached, -2 source, else the index into
        ``NEIGHBOUR_OFFSETS`` of the neighbour the cell was reached from
    allocation : int64 ndarray, 0 where unreached
    """
    from . import NEIGHBOUR_OFFSETS  # the package imports this module lazily

    rows, cols = array.shape
    n_cells = rows * cols
    cost = _flat_cost(array)
    valid_flat = np.ascontiguousarray(valid).reshape(-1)
    position_dtype = index_dtype(n_cells)

    offsets = NEIGHBOUR_OFFSETS[:connectivity]
    neighbour_drow = np.ascontiguousarray(offsets[:, 0])
    neighbour_dcol = np.ascontiguousarray(offsets[:, 1])
    neighbour_delta = neighbour_drow * cols + neighbour_dcol
    # A cell reached by a step along offset i was reached from the neighbour
    # at offset -i; its predecessor code is the index of that opposite offset.
    opposite = np.empty(connectivity, dtype=np.int8)
    for i, (drow, dcol) in enumerate(offsets):
        opposite[i] = np.flatnonzero((offsets[:, 0] == -drow)
                                     & (offsets[:, 1] == -dcol))[0]
    half_step = 0.5 * np.asarray(step_lengths, dtype=np.float64)
    margin = 2 if connectivity == 16 else 1

    accumulated = np.full(n_cells, np.inf, dtype=np.float64)
    predecessor = np.full(n_cells, PREDECESSOR_UNREACHED, dtype=np.int8)
    allocation = np.zeros(n_cells, dtype=np.int64)
    heap_position = np.where(valid_flat, position_dtype(UNREACHED),
                             position_dtype(SETTLED)).astype(position_dtype)

    source_index = (source_cells[:, 0].astype(np.int64) * cols
                    + source_cells[:, 1].astype(np.int64))
    capacity = int(min(n_cells, max(len(source_index), 4 * (rows + cols), 4096))
                   ) + connectivity
    heap_key = np.empty(capacity, dtype=np.float64)
    heap_cell = np.empty(capacity, dtype=position_dtype)
    heap_size = _seed_sources(source_index, np.asarray(ids, dtype=np.int64),
                              accumulated, predecessor, allocation,
                              heap_position, heap_key, heap_cell)

    n_valid = int(np.count_nonzero(valid_flat))
    settled = 0
    progress(0.0)
    while heap_size > 0:
        if heap_size + connectivity > heap_key.shape[0]:
            heap_key, heap_cell = _grown_heap(heap_key, heap_cell, heap_size,
                                              n_cells + connectivity)
        heap_size, pops = _dijkstra_chunk(
            cost, cols, rows, accumulated, heap_position, predecessor,
            allocation, heap_key, heap_cell, heap_size, neighbour_delta,
            neighbour_drow, neighbour_dcol, half_step, opposite, margin,
            float(max_cost), POPS_PER_CHUNK)
        settled += pops
        progress(settled / n_valid)

    accumulated[predecessor == PREDECESSOR_UNREACHED] = np.nan
    shape = (rows, cols)
    return (accumulated.reshape(shape), predecessor.reshape(shape),
            allocation.reshape(shape))


def _flat_cost(array):
    """A flat native-endian float32 or float64 view (or copy) of the costs.

    Integers of up to 16 bits are exact in float32 and read as float32 to
    halve the memory traffic; wider integers become float64.  Two kernel
    specialisations cover every input dtype.
    """
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


def _grown_heap(heap_key, heap_cell, heap_size, limit):
    capacity = min(2 * heap_key.shape[0], limit)
    new_key = np.empty(capacity, dtype=heap_key.dtype)
    new_cell = np.empty(capacity, dtype=heap_cell.dtype)
    new_key[:heap_size] = heap_key[:heap_size]
    new_cell[:heap_size] = heap_cell[:heap_size]
    return new_key, new_cell


@njit(cache=True, nogil=True)
def _sift_up(heap_key, heap_cell, heap_position, slot, key, cell):
    """Place (key, cell) at ``slot`` or above, moving larger parents down."""
    while slot > 0:
        parent = (slot - 1) // HEAP_ARITY
        parent_key = heap_key[parent]
        if parent_key <= key:
            break
        parent_cell = heap_cell[parent]
        heap_key[slot] = parent_key
        heap_cell[slot] = parent_cell
        heap_position[parent_cell] = slot
        slot = parent
    heap_key[slot] = key
    heap_cell[slot] = cell
    heap_position[cell] = slot


@njit(cache=True, nogil=True)
def _sift_down(heap_key, heap_cell, heap_position, heap_size, slot, key, cell):
    """Place (key, cell) at ``slot`` or below, moving smaller children up."""
    while True:
        first_child = HEAP_ARITY * slot + 1
        if first_child >= heap_size:
            break
        last_child = min(first_child + HEAP_ARITY, heap_size)
        best_child = first_child
        best_key = heap_key[first_child]
        for child in range(first_child + 1, last_child):
            child_key = heap_key[child]
            if child_key < best_key:
                best_key = child_key
                best_child = child
        if best_key >= key:
            break
        best_cell = heap_cell[best_child]
        heap_key[slot] = best_key
        heap_cell[slot] = best_cell
        heap_position[best_cell] = slot
        slot = best_child
    heap_key[slot] = key
    heap_cell[slot] = cell
    heap_position[cell] = slot


@njit(cache=True, nogil=True)
def _seed_sources(source_index, ids, accumulated, predecessor, allocation,
                  heap_position, heap_key, heap_cell):
    heap_size = 0
    for k in range(source_index.shape[0]):
        cell = source_index[k]
        if predecessor[cell] == PREDECESSOR_SOURCE:
            continue  # a repeated source keeps its first id
        accumulated[cell] = 0.0
        predecessor[cell] = PREDECESSOR_SOURCE
        allocation[cell] = ids[k]
        # every key is 0, so appending keeps the heap order
        heap_key[heap_size] = 0.0
        heap_cell[heap_size] = cell
        heap_position[cell] = heap_size
        heap_size += 1
    return heap_size


@njit(cache=True, nogil=True)
def _dijkstra_chunk(cost, cols, rows, accumulated, heap_position, predecessor,
                    allocation, heap_key, heap_cell, heap_size,
                    neighbour_delta, neighbour_drow, neighbour_dcol, half_step,
                    opposite, margin, max_cost, max_pops):
    """Settle up to ``max_pops`` cells; return (heap_size, cells settled).

    Stops early when the heap might not hold the pushes of one more pop
    (the caller grows it and calls again).
    """
    connectivity = neighbour_delta.shape[0]
    capacity = heap_key.shape[0]
    pops = 0
    while heap_size > 0 and pops < max_pops:
        if heap_size + connectivity > capacity:
            break
        cell = np.int64(heap_cell[0])
        cell_distance = heap_key[0]
        heap_position[cell] = SETTLED
        heap_size -= 1
        if heap_size > 0:
            _sift_down(heap_key, heap_cell, heap_position, heap_size, 0,
                       heap_key[heap_size], heap_cell[heap_size])
        pops += 1

        cell_cost = np.float64(cost[cell])
        row = cell // cols
        col = cell - row * cols
        interior = (margin <= row < rows - margin
                    and margin <= col < cols - margin)
        for i in range(connectivity):
            if interior:
                neighbour = cell + neighbour_delta[i]
            else:
                neighbour_row = row + neighbour_drow[i]
                neighbour_col = col + neighbour_dcol[i]
                if not (0 <= neighbour_row < rows and 0 <= neighbour_col < cols):
                    continue
                neighbour = neighbour_row * cols + neighbour_col
            slot = heap_position[neighbour]
            if slot == SETTLED:
                continue
            candidate = cell_distance + (cell_cost + np.float64(cost[neighbour])) \
                * half_step[i]
            if candidate < accumulated[neighbour] and candidate <= max_cost:
                accumulated[neighbour] = candidate
                predecessor[neighbour] = opposite[i]
                allocation[neighbour] = allocation[cell]
                if slot == UNREACHED:
                    slot = heap_size
                    heap_size += 1
                _sift_up(heap_key, heap_cell, heap_position, slot, candidate,
                         neighbour)
    return heap_size, pops
