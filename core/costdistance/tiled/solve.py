"""Round 1 of the tiled cost distance: the tile solve (incremental
Dijkstra seeded with the tile's sources and the distances its band
received) and its task."""

import numpy as np
from numba import njit

from ..._common import index_dtype, numba_readable, valid_mask
from .. import _cpu
from .._blocks_cpu import _pop, _push  # the one binary heap of (key, cell)
from .._cpu import _sift_up
from .band import band_cells
from .budget import HOPS_PENDING, HOPS_UNREACHED

# Solve a tile with no settle bound by the in-memory search's indexed 4-ary
# heap (``_cpu.drain_heap``: decrease-key in place, one record a cell,
# prefetching) instead of _solve_tile's lazy-deletion binary heap; the
# same distances (the least fixed point; every candidate the same
# expression).  A 1024 x 1024 tile of neuse40's DEM from one source, 2-core
# box: 0.42-0.46 s with _solve_tile, the in-memory search of the same
# raster 0.15-0.18 s.
INDEXED_HEAP_SOLVE = True

# --------------------------------------------------------------------------
# round 1: the tile solve


def new_state(window):
    """The (distance, hops) of a tile no solve has touched yet."""
    n = window.rows * window.cols
    return np.full(n, np.inf), np.full(n, HOPS_UNREACHED, np.int64)


def solve_tile(cost_source, window, nodata, state, source_local, seeds,
               margin, offsets, step_lengths, max_cost, passed=None,
               backend="cpu", bound=np.inf):
    """The least distances of one tile, from its sources and the distances
    its band received.  Pure: returns ``(distance, hops, pending_key)``, the
    new state (hops untouched but for the sources' 0 and the pending marks)
    and the least distance left pending (+inf when none).

    The settle bound: only cells whose distance is at most ``bound`` are
    relaxed to their neighbours; a cell with a larger tentative distance is
    left *pending* (``HOPS_PENDING`` in its hops) and is relaxed by a later
    solve of the tile with a higher bound.  A solve that comes again after
    a lower distance reached the band then redoes only the cells up to its
    bound.  Every distance is still a path sum computed term by term and
    distances only decrease, so once no tile has pending cells or waiting
    band distances the state is the least fixed point, whatever the bounds.

    ``passed`` is ``KNIGHT_PASSED_CELLS[:connectivity]`` (the default): the
    two cells each move passes between, which must be valid.

    ``state`` is the (distance, hops) flat arrays of the previous solve, or
    None for the first (then ``source_local`` lists the tile's sources);
    ``seeds`` is the distances of the band cells as received from the
    neighbours.  Distances are +inf where unreached, -inf on barriers.
    ``backend`` "cuda" runs the relaxation on the GPU
    (:func:`gridgraph.core.costdistance._cuda.solve_seeded`), with the same
    result.
    """
    cost = cost_source.read(window)
    valid = valid_mask(cost, nodata)
    if passed is None:
        from .. import KNIGHT_PASSED_CELLS
        passed = KNIGHT_PASSED_CELLS[:len(offsets)]
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    if bound == np.inf and INDEXED_HEAP_SOLVE and backend != "cuda":
        return _solve_tile_indexed(
            cost, valid, state, window, band_r, band_c, seeds, source_local,
            offsets, passed, step_lengths, max_cost)
    if state is None:
        distance, hops = new_state(window)
    else:
        # copies: the task must not change its input (a retried or
        # recomputed task starts from the same state)
        distance, hops = state[0].copy(), state[1].copy()
    distance[~valid.reshape(-1)] = -np.inf
    seeded = _apply_seeds(distance, hops, window.cols, band_r, band_c,
                          seeds, source_local)
    seeded = _with_pending(hops, seeded, state)
    if seeded.size == 0:
        return distance, hops, np.inf
    shape = (window.rows, window.cols)
    if backend == "cuda":
        from .. import _cuda
        new_distance, new_hops = _cuda.solve_seeded(
            cost, valid, distance.reshape(shape), hops.reshape(shape), seeded,
            len(offsets), step_lengths, max_cost, phase="distance")
        # no settle bound on the GPU: every cell settled, nothing pending
        return (np.ascontiguousarray(new_distance).reshape(-1),
                np.ascontiguousarray(new_hops, dtype=np.int64).reshape(-1),
                np.inf)
    cost = np.where(valid, cost, 0).astype(np.float64).reshape(-1)
    pending_key = _solve_tile(
        cost, window.rows, window.cols, distance, hops, seeded,
        offsets[:, 0].copy(), offsets[:, 1].copy(),
        _passed_delta(passed, 0, window.cols),
        _passed_delta(passed, 1, window.cols), step_lengths, max_cost,
        float(bound))
    return distance, hops, pending_key


def _with_pending(hops, seeded, state):
    """``seeded`` and the cells a last solve left pending (their marks
    cleared in ``hops``: pushed once; those seeded again just now were
    cleared by :func:`_apply_seeds`)."""
    if state is None:
        return seeded
    pending = np.flatnonzero(hops == HOPS_PENDING)
    if pending.size == 0:
        return seeded
    hops[pending] = HOPS_UNREACHED
    return np.concatenate((seeded, pending))


def _solve_tile_indexed(cost, valid, state, window, band_r, band_c, seeds,
                        source_local, offsets, passed, step_lengths,
                        max_cost):
    """:func:`solve_tile` without a settle bound, by the in-memory search's
    indexed heap (``_cpu.drain_heap``) seeded with the tile's sources and
    the band distances that beat its own; every cell settled.  The search
    records are filled straight from the raw costs and the last state's
    distances (``state`` is only read), and the new distances copied out
    of them once: no float64 cost raster, no copy of the distances before
    the records."""
    rows, cols = window.rows, window.cols
    n_cells = rows * cols
    index = index_dtype(n_cells)
    records = np.empty(n_cells, _cpu._state_dtype(index))
    if state is None:
        previous = np.empty(0)  # every cell unreached
        hops = np.full(n_cells, HOPS_UNREACHED, np.int64)
    else:
        previous = state[0]
        hops = state[1].copy()  # the task must not change its input
    _fill_search_state(records, np.ascontiguousarray(numba_readable(cost)),
                       valid, previous)
    accumulated = records["accumulated"]
    seeded = _apply_seeds(accumulated, hops, cols, band_r, band_c, seeds,
                          source_local)
    seeded = _with_pending(hops, seeded, state)
    if seeded.size:
        connectivity = len(offsets)
        capacity = min(n_cells, max(seeded.size,
                                    _cpu.INITIAL_HEAP_CAPACITY)) \
            + connectivity + _cpu.HEAP_PADDING
        heap_key = np.full(capacity, np.inf)
        heap_cell = np.empty(capacity, dtype=index)
        heap_size = _seed_heap(seeded, records, heap_key, heap_cell)
        drow = np.ascontiguousarray(offsets[:, 0], dtype=np.int64)
        dcol = np.ascontiguousarray(offsets[:, 1], dtype=np.int64)
        _cpu.drain_heap(records, rows, cols, heap_key, heap_cell, heap_size,
                        drow * cols + dcol, drow, dcol,
                        _passed_delta(passed, 0, cols),
                        _passed_delta(passed, 1, cols),
                        np.ascontiguousarray(step_lengths, dtype=np.float64),
                        2 if connectivity == 16 else 1, max_cost,
                        _no_progress, n_cells)
    return np.ascontiguousarray(accumulated), hops, np.inf


def _no_progress(fraction):
    """A tile solve reports no progress of its own."""


@njit(cache=True, nogil=True)
def _fill_search_state(records, cost, valid, previous):
    """The search records of a tile: its costs as float64 (0 on barriers),
    its distances so far (``previous``; +inf everywhere when it is empty;
    -inf on barriers), none in the heap (position -1)."""
    rows, cols = cost.shape
    for r in range(rows):
        for c in range(cols):
            cell = r * cols + c
            record = records[cell]
            if valid[r, c]:
                record.cost = cost[r, c]
                record.accumulated = previous[cell] if previous.size \
                    else np.inf
            else:
                record.cost = 0.0
                record.accumulated = -np.inf
            record.heap_position = -1
            record.hops = 0


@njit(cache=True, nogil=True)
def _seed_heap(seeded, state, heap_key, heap_cell):
    """Push every seeded cell at its distance; return the heap's size."""
    heap_size = 0
    for k in range(seeded.size):
        cell = seeded[k]
        record = state[cell]
        if record.heap_position >= 0:
            continue  # listed twice
        slot = heap_size
        heap_size += 1
        _sift_up(heap_key, heap_cell, state, slot, record.accumulated, cell)
    return heap_size


@njit(cache=True, nogil=True)
def _apply_seeds(distance, hops, cols, band_r, band_c, seed_distance,
                 source_local):
    """Give the sources (0, 0) and every band cell whose received distance
    beats its own that distance; return the cells that changed."""
    seeded = np.empty(source_local.size + band_r.size, np.int64)
    count = 0
    for k in range(source_local.size):
        cell = source_local[k]
        if distance[cell] == 0.0 and hops[cell] == 0:
            continue  # listed twice
        distance[cell] = 0.0
        hops[cell] = 0
        seeded[count] = cell
        count += 1
    for b in range(band_r.size):
        cell = band_r[b] * cols + band_c[b]
        # barriers hold -inf: never beaten
        if seed_distance[b] < distance[cell]:
            distance[cell] = seed_distance[b]
            if hops[cell] == HOPS_PENDING:
                hops[cell] = HOPS_UNREACHED  # pushed here, once
            seeded[count] = cell
            count += 1
    return seeded[:count]


def _passed_delta(passed, which, cols):
    """Flat offsets, in a raster of ``cols`` columns, of the first or second
    cell each move passes between (0, the start cell, for one-cell steps)."""
    return np.ascontiguousarray(passed[:, which, 0] * cols
                                + passed[:, which, 1], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _pair_less(d1, h1, d2, h2):
    """(d1, h1) < (d2, h2), cost first."""
    return d1 < d2 or (d1 == d2 and h1 < h2)


@njit(cache=True, nogil=True)
def _solve_tile(cost, rows, cols, distance, hops, seeded, drow, dcol,
                passed_delta_a, passed_delta_b, step_lengths, max_cost,
                bound):
    """Incremental Dijkstra for the least distances of a tile
    (lazy-deletion binary heap), from the ``seeded`` cells, relaxing only
    cells whose distance is at most ``bound``: the others are marked
    ``HOPS_PENDING``.  Returns the least pending distance (+inf: none)."""
    connectivity = drow.size
    capacity = max(1024, 2 * seeded.size)
    heap_key = np.empty(capacity, dtype=np.float64)
    heap_cell = np.empty(capacity, dtype=np.int64)
    size = 0
    for k in range(seeded.size):
        cell = seeded[k]
        _push(heap_key, heap_cell, size, distance[cell], cell)
        size += 1
    while size > 0:
        key = heap_key[0]
        cell = heap_cell[0]
        _pop(heap_key, heap_cell, size)
        size -= 1
        if key > distance[cell]:
            continue  # a stale entry: the cell improved after this push
        if key > bound:
            # the least live entry: it and every live entry left wait for
            # a later solve (a cell's live entry is the one of its distance)
            hops[cell] = HOPS_PENDING
            for k in range(size):
                other = heap_cell[k]
                if heap_key[k] == distance[other]:
                    hops[other] = HOPS_PENDING
            return key
        row = cell // cols
        col = cell - row * cols
        cell_cost = cost[cell]
        for i in range(connectivity):
            next_row = row + drow[i]
            next_col = col + dcol[i]
            if not (0 <= next_row < rows and 0 <= next_col < cols):
                continue
            neighbour = next_row * cols + next_col
            # a knight's move may not pass beside a barrier (-inf); the two
            # cells it passes between lie in the tile with both its ends
            if i >= 8 and (distance[cell + passed_delta_a[i]] == -np.inf
                           or distance[cell + passed_delta_b[i]] == -np.inf):
                continue
            # the in-memory kernel's expression, term for term
            candidate = key + (cell_cost + cost[neighbour]) * 0.5 \
                * step_lengths[i]
            if candidate > max_cost or not candidate < distance[neighbour]:
                continue  # barriers hold -inf: never beaten
            distance[neighbour] = candidate
            if size == capacity:
                capacity *= 2
                heap_key = np.resize(heap_key, capacity)
                heap_cell = np.resize(heap_cell, capacity)
            _push(heap_key, heap_cell, size, candidate, neighbour)
            size += 1
    return np.inf


# --------------------------------------------------------------------------
# the tile tasks of the rounds (pure; small messages out, state kept)


def solve_round_tile(cost_source, window, nodata, state, source_local, seeds,
                     margin, offsets, step_lengths, max_cost, passed,
                     backend="cpu", bound=np.inf):
    """A propagation round's task for one tile: :func:`solve_tile`.

    Returns ``((band_distance, pending_key), state)``: the message -- the
    distances of its band cells (+inf where pending: a pending distance is
    relaxed into the neighbours once it is settled) and the least pending
    distance, the tile's next key -- and the new state (kept where it was
    computed)."""
    if backend == "cuda":  # the state stays on the GPU (_cuda_tiled)
        from .. import _cuda_tiled
        return _cuda_tiled.solve_round_tile(
            cost_source, window, nodata, state, source_local, seeds, margin,
            offsets, step_lengths, max_cost, passed)
    distance, hops, pending_key = solve_tile(
        cost_source, window, nodata, state, source_local, seeds, margin,
        offsets, step_lengths, max_cost, passed, backend, bound)
    band = band_cells(window.rows, window.cols, margin)
    band = band[0] * window.cols + band[1]
    band_distance = np.where(hops[band] == HOPS_PENDING, np.inf,
                             distance[band])
    return (band_distance, pending_key), (distance, hops)
