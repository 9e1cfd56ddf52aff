"""Cost distance on the block hierarchy (out-of-core, exact).

The thesis's I/O-efficient SSSP (ch. 4) keeps a priority queue of clusters
keyed by the smallest tentative distance on their boundary.  This module
does the same at tile granularity:

0. Survey (per tile, pure): read the tile, check its costs, list its
   sources, and keep the costs of its *band* -- the cells within ``margin``
   of the tile border (1 cell; 2 for knight's moves, which reach two cells
   away).  Every edge between two tiles joins two band cells, and the two
   cells a knight's move between tiles passes between (both must be valid)
   are band cells too.
1. Propagation: a tile with sources, or whose band received a better
   distance from a neighbour, is queued with the smallest such distance as
   its key.  The tile with the smallest key is solved by Dijkstra inside
   the tile, seeded with its sources and with the distances its band
   received (:func:`_solve_tile`; a re-solve starts from the tile's previous
   distances and only re-settles cells that improve).  The distances of its
   band cells are then relaxed across every edge into the neighbouring
   tiles' bands (:func:`_relax_out`), queueing the tiles that improve.
   Distances only decrease, so this label-correcting process stops, and it
   stops at the least fixed point: exactly Dijkstra's distances, computed
   with the same floating-point expression along the same paths, so equal
   to the in-memory run bit for bit.
   The tiles' states are pairs (distance, hops): the least (cost, steps)
   over all paths, compared cost first.  Hops grow by one per step, so the
   pairs are the unique fixed point of the relaxation whatever the order of
   the solves; they equal the in-memory run's.
2. Trees (per tile): each cell's predecessor is read off the final pairs
   of the tile and a halo of neighbours taken from the band arrays, by the
   in-memory rule (:func:`gridgraph.core.costdistance._cpu.
   canonical_predecessors`), so directions match the in-memory run on
   exact ties too.  With several source ids a first pass labels each band
   cell with its source id or with the band cell its tree leaves the tile
   through; those chains are followed in memory (:func:`
   _resolve_band_labels`), and the output pass labels every cell.
3. Output (per tile): accumulated cost, GRASS direction and allocation.

Tile states (distance and hops: 16 bytes per cell) live in
an LRU cache sized from the memory limit; evicted states go to the scratch
folder and come back when the tile is solved again.
"""

import heapq
import math
from collections import OrderedDict

import numpy as np
from numba import njit

from .. import tiling
from .._common import Progress, valid_mask
from ..errors import InvalidInputError

PREDECESSOR_UNREACHED = -1
PREDECESSOR_SOURCE = -2
HOPS_UNREACHED = np.iinfo(np.int64).max

# A tile's state: distance and hops.
STATE_BYTES_PER_CELL = 16
# The larger of one tile solve -- costs (8), state (16), valid mask (1),
# heap (up to ~16 per cell on a dense frontier, counted as 8) -- and one
# output pass: the frame (distance, hops, cost, label: 32; flag, known,
# predecessor: 3), the three output blocks (20) and a temporary (8).
TILE_BYTES_PER_CELL = 64
# The in-memory run: the search record (32), predecessor (1), the
# accumulated and allocation outputs (16), direction (4).
IN_MEMORY_BYTES_PER_CELL = 53
# Bytes per band cell of the global arrays (costs, incoming and outgoing
# distance and hops; labels and flags when there are several source ids).
BAND_BYTES_PER_CELL = 49


def plan(values, band, tile_size, memory_limit_mb, executor):
    """The tiled plan for these options, or None for the in-memory path."""
    return tiling.plan_for(values, band, tile_size, memory_limit_mb, executor,
                           IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL)


# --------------------------------------------------------------------------
# band geometry


@njit(cache=True, nogil=True, inline="always")
def _band_position(r, c, rows, cols, margin):
    """Position of tile cell (r, c) in the tile's band, -1 when inside.

    Band order: the top ``margin`` rows, the bottom ``margin`` rows, then
    for each middle row its left and right ``margin`` cells.
    """
    top = min(margin, rows)
    bottom = max(rows - margin, top)
    if r < top:
        return r * cols + c
    if r >= bottom:
        return (top + r - bottom) * cols + c
    left = min(margin, cols)
    right = max(cols - margin, left)
    base = (top + rows - bottom) * cols + (r - top) * (left + cols - right)
    if c < left:
        return base + c
    if c >= right:
        return base + left + c - right
    return -1


@njit(cache=True, nogil=True)
def band_cells(rows, cols, margin):
    """(row, col) of every band cell of a rows x cols tile, in band order."""
    top = min(margin, rows)
    bottom = max(rows - margin, top)
    left = min(margin, cols)
    right = max(cols - margin, left)
    size = (top + rows - bottom) * cols + (bottom - top) * (left + cols - right)
    band_r = np.empty(size, dtype=np.int64)
    band_c = np.empty(size, dtype=np.int64)
    p = 0
    for r in list(range(top)) + list(range(bottom, rows)):
        for c in range(cols):
            band_r[p] = r
            band_c[p] = c
            p += 1
    for r in range(top, bottom):
        for c in list(range(left)) + list(range(right, cols)):
            band_r[p] = r
            band_c[p] = c
            p += 1
    return band_r, band_c


# --------------------------------------------------------------------------
# round 0: survey


def survey_tile(cost_source, window, nodata, margin, source_raster,
                source_nodata):
    """Per tile: cost checks, band costs and (for a source raster) sources.

    Returns a dict: ``valid`` (count of valid cells), ``negative`` (count)
    and ``first_negative`` ((row, col, value) of the first in scan order, or
    None), ``band_cost`` (float64, NaN on barriers) and, when
    ``source_raster`` is given, ``source_cells`` (global (row, col)) and
    ``source_ids``.
    """
    cost = cost_source.read(window)
    valid = valid_mask(cost, nodata)
    negative = valid & (cost < 0)
    n_negative = int(np.count_nonzero(negative))
    first_negative = None
    if n_negative:
        r, c = np.argwhere(negative)[0]
        first_negative = (window.row + int(r), window.col + int(c),
                          cost[r, c])
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    band_cost = np.where(valid[band_r, band_c],
                         cost[band_r, band_c].astype(np.float64), np.nan)
    message = {"valid": int(np.count_nonzero(valid)), "negative": n_negative,
               "first_negative": first_negative, "band_cost": band_cost}
    if source_raster is not None:
        raster = source_raster.read(window)
        mask = raster != 0
        if np.issubdtype(raster.dtype, np.floating):
            mask &= ~np.isnan(raster)
        if source_nodata is not None:
            mask &= valid_mask(raster, source_nodata)
        cells = np.argwhere(mask).astype(np.int64)
        values = raster[mask]
        ids = values.astype(np.int64) if values.dtype != bool else \
            np.ones(len(values), np.int64)
        cells[:, 0] += window.row
        cells[:, 1] += window.col
        message["source_cells"] = cells
        message["source_ids"] = ids
        message["blocked"] = cells[~valid[cells[:, 0] - window.row,
                                          cells[:, 1] - window.col]]
    return message


# --------------------------------------------------------------------------
# round 1: the tile solve


def new_state(window):
    """The (distance, hops) of a tile no solve has touched yet."""
    n = window.rows * window.cols
    return np.full(n, np.inf), np.full(n, HOPS_UNREACHED, np.int64)


def solve_tile(cost_source, window, nodata, state, source_local, seeds,
               margin, offsets, step_lengths, max_cost, passed=None,
               backend="cpu"):
    """The least distances of one tile, from its sources and the distances
    its band received.  Pure: returns the new state (hops untouched but for
    the sources' 0).

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
    if state is None:
        distance, hops = new_state(window)
    else:
        distance, hops = state
    distance[~valid.reshape(-1)] = -np.inf
    if passed is None:
        from . import KNIGHT_PASSED_CELLS
        passed = KNIGHT_PASSED_CELLS[:len(offsets)]
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    seeded = _apply_seeds(distance, hops, window.cols, band_r, band_c,
                          seeds, source_local)
    if seeded.size == 0:
        return distance, hops
    shape = (window.rows, window.cols)
    if backend == "cuda":
        from . import _cuda
        new_distance, new_hops = _cuda.solve_seeded(
            cost, valid, distance.reshape(shape), hops.reshape(shape), seeded,
            len(offsets), step_lengths, max_cost, phase="distance")
        return (np.ascontiguousarray(new_distance).reshape(-1),
                np.ascontiguousarray(new_hops, dtype=np.int64).reshape(-1))
    cost = np.where(valid, cost, 0).astype(np.float64).reshape(-1)
    _solve_tile(cost, window.rows, window.cols, distance, hops, seeded,
                offsets[:, 0].copy(), offsets[:, 1].copy(),
                _passed_delta(passed, 0, window.cols),
                _passed_delta(passed, 1, window.cols), step_lengths,
                max_cost)
    return distance, hops


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
            seeded[count] = cell
            count += 1
    return seeded[:count]


def _passed_delta(passed, which, cols):
    """Flat offsets, in a raster of ``cols`` columns, of the first or second
    cell each move passes between (0, the start cell, for one-cell steps)."""
    return np.ascontiguousarray(passed[:, which, 0] * cols
                                + passed[:, which, 1], dtype=np.int64)


@njit(cache=True, nogil=True)
def _heap_push(heap_key, heap_cell, size, key, cell):
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


@njit(cache=True, nogil=True)
def _heap_pop(heap_key, heap_cell, size):
    """Remove the root of a heap of ``size`` entries (size >= 1)."""
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


@njit(cache=True, nogil=True, inline="always")
def _pair_less(d1, h1, d2, h2):
    """(d1, h1) < (d2, h2), cost first."""
    return d1 < d2 or (d1 == d2 and h1 < h2)


@njit(cache=True, nogil=True)
def _solve_tile(cost, rows, cols, distance, hops, seeded, drow, dcol,
                passed_delta_a, passed_delta_b, step_lengths, max_cost):
    """Incremental Dijkstra for the least distances of a tile
    (lazy-deletion binary heap), from the ``seeded`` cells."""
    connectivity = drow.size
    capacity = max(1024, 2 * seeded.size)
    heap_key = np.empty(capacity, dtype=np.float64)
    heap_cell = np.empty(capacity, dtype=np.int64)
    size = 0
    for k in range(seeded.size):
        cell = seeded[k]
        _heap_push(heap_key, heap_cell, size, distance[cell], cell)
        size += 1
    while size > 0:
        key = heap_key[0]
        cell = heap_cell[0]
        _heap_pop(heap_key, heap_cell, size)
        size -= 1
        if key > distance[cell]:
            continue  # a stale entry: the cell improved after this push
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
            _heap_push(heap_key, heap_cell, size, candidate, neighbour)
            size += 1


# --------------------------------------------------------------------------
# round 1: relaxation across tile borders


@njit(cache=True, nogil=True)
def _relax_out(row0, col0, rows, cols, band_r, band_c, band_distance,
               changed, raster_rows, raster_cols, tile_size, tile_cols,
               margin, own, band_offset, all_band_cost, in_distance,
               out_distance, drow, dcol, passed, step_lengths, max_cost,
               dirty_key):
    """Relax every edge from a changed band cell of a tile (whose band
    starts at ``own``) into another tile; lower ``dirty_key`` of the tiles
    whose solve it would change.

    ``passed[i]`` holds the (drow, dcol) of the two cells move i passes
    between.  For a move across a tile border they may lie in either tile
    (or a third one at a corner), but always in the outer ring of that
    tile's band: each is next to a border the move crosses."""
    for b in range(band_r.size):
        if not changed[b]:
            continue
        d = band_distance[b]
        if not (d < np.inf and d > -np.inf):
            continue
        row = row0 + band_r[b]
        col = col0 + band_c[b]
        cell_cost = all_band_cost[own + b]
        for i in range(drow.size):
            next_row = row + drow[i]
            next_col = col + dcol[i]
            if not (0 <= next_row < raster_rows and 0 <= next_col < raster_cols):
                continue
            if row0 <= next_row < row0 + rows and col0 <= next_col < col0 + cols:
                continue
            index = _band_index(next_row, next_col, raster_rows, raster_cols,
                                tile_size, tile_cols, margin, band_offset)
            next_cost = all_band_cost[index]
            if next_cost != next_cost:
                continue  # barrier
            # costs are >= 0, so ">= 0.0" is false exactly on NaN barriers
            if i >= 8 and not (
                    all_band_cost[_band_index(
                        row + passed[i, 0, 0], col + passed[i, 0, 1],
                        raster_rows, raster_cols, tile_size, tile_cols,
                        margin, band_offset)] >= 0.0
                    and all_band_cost[_band_index(
                        row + passed[i, 1, 0], col + passed[i, 1, 1],
                        raster_rows, raster_cols, tile_size, tile_cols,
                        margin, band_offset)] >= 0.0):
                continue  # a knight's move passing beside a barrier
            candidate = d + (cell_cost + next_cost) * 0.5 * step_lengths[i]
            if candidate > max_cost or not candidate < in_distance[index]:
                continue
            in_distance[index] = candidate
            if candidate < out_distance[index]:
                other = (next_row // tile_size) * tile_cols \
                    + next_col // tile_size
                if candidate < dirty_key[other]:
                    dirty_key[other] = candidate


@njit(cache=True, nogil=True, inline="always")
def _band_index(row, col, raster_rows, raster_cols, tile_size, tile_cols,
                margin, band_offset):
    """Index of band cell (row, col) of the raster in the global band
    arrays."""
    tile_row = row // tile_size
    tile_col = col // tile_size
    position = _band_position(row - tile_row * tile_size,
                              col - tile_col * tile_size,
                              min(tile_size, raster_rows - tile_row * tile_size),
                              min(tile_size, raster_cols - tile_col * tile_size),
                              margin)
    return band_offset[tile_row * tile_cols + tile_col] + position


# --------------------------------------------------------------------------
# round 2: predecessors and allocation per tile


@njit(cache=True, nogil=True)
def _frame_halo(row0, col0, rows, cols, margin, raster_rows, raster_cols,
                tile_size, tile_cols, band_offset, all_band_cost,
                band_distance, band_hops, band_label, band_flag,
                frame_distance, frame_hops, frame_cost, frame_label,
                frame_flag, frame_known, label_mode):
    """Fill the ``margin``-wide halo of a tile's frame from the global band
    arrays: distance (-inf on barriers and outside the raster), hops, cost
    and, known, the label: none (``label_mode`` 0), the band index itself
    with flag 1 (1), or the band's label and flag (2)."""
    frame_cols = cols + 2 * margin
    for fr in range(rows + 2 * margin):
        for fc in range(frame_cols):
            if margin <= fr < rows + margin and margin <= fc < cols + margin:
                continue
            cell = fr * frame_cols + fc
            frame_known[cell] = True
            row = row0 + fr - margin
            col = col0 + fc - margin
            if not (0 <= row < raster_rows and 0 <= col < raster_cols):
                frame_distance[cell] = -np.inf
                continue
            index = _band_index(row, col, raster_rows, raster_cols,
                                tile_size, tile_cols, margin, band_offset)
            cost = all_band_cost[index]
            if cost != cost:
                frame_distance[cell] = -np.inf
                continue
            frame_distance[cell] = band_distance[index]
            frame_hops[cell] = band_hops[index]
            frame_cost[cell] = cost
            if label_mode == 1:
                frame_label[cell] = index
                frame_flag[cell] = 1
            elif label_mode == 2:
                frame_label[cell] = band_label[index]
                frame_flag[cell] = band_flag[index]


def _tile_frame(cost_source, window, nodata, state, margin, grid,
                band_offset, all_band_cost, band_distance, band_hops,
                band_label, band_flag, frame_label, frame_flag, frame_known,
                label_mode):
    """A tile's (distance, hops, cost) with a ``margin``-wide halo from the
    band arrays, flat; the halo's labels as ``_frame_halo`` fills them."""
    rows, cols = window.rows, window.cols
    frame_rows, frame_cols = rows + 2 * margin, cols + 2 * margin
    inner = (slice(margin, margin + rows), slice(margin, margin + cols))
    frame_distance = np.empty((frame_rows, frame_cols))
    frame_hops = np.zeros((frame_rows, frame_cols), np.int64)
    frame_cost = np.zeros((frame_rows, frame_cols))
    cost = cost_source.read(window)
    valid = valid_mask(cost, nodata)
    frame_cost[inner] = np.where(valid, cost, 0)
    distance, hops = state
    frame_distance[inner] = np.where(valid, distance.reshape(rows, cols),
                                     -np.inf)
    frame_hops[inner] = hops.reshape(rows, cols)
    if band_label is None:
        band_label = np.zeros(0, np.int64)
        band_flag = np.zeros(0, np.uint8)
    frame_distance = frame_distance.reshape(-1)
    frame_hops = frame_hops.reshape(-1)
    frame_cost = frame_cost.reshape(-1)
    _frame_halo(window.row, window.col, rows, cols, margin, grid.shape[0],
                grid.shape[1], grid.tile_size, grid.tile_cols, band_offset,
                all_band_cost, band_distance, band_hops, band_label,
                band_flag, frame_distance, frame_hops, frame_cost,
                frame_label, frame_flag, frame_known, label_mode)
    return frame_distance, frame_hops, frame_cost


@njit(cache=True, nogil=True, inline="always")
def _tight(frame_distance, frame_cost, start, end, base, i, frame_cols,
           passed, step_lengths):
    """True when the move from frame cell ``start`` to its neighbour
    ``end`` gives ``end`` its distance exactly (both reached, the move
    allowed).  ``i`` is the offset from ``base`` (one of the two) to the
    other, so the cells a knight's move passes between are ``base +
    passed[i]``."""
    d_start = frame_distance[start]
    d_end = frame_distance[end]
    if not (d_start > -np.inf and d_start < np.inf
            and d_end > -np.inf and d_end < np.inf and d_start <= d_end):
        return False
    if i >= 8 and (
            frame_distance[base + passed[i, 0, 0] * frame_cols
                           + passed[i, 0, 1]] == -np.inf
            or frame_distance[base + passed[i, 1, 0] * frame_cols
                              + passed[i, 1, 1]] == -np.inf):
        return False
    # the search's expression, term for term
    return d_start + (frame_cost[start] + frame_cost[end]) * 0.5 \
        * step_lengths[i] == d_end


@njit(cache=True, nogil=True)
def _solve_hops(frame_distance, frame_hops, frame_cost, rows, cols, margin,
                band_r, band_c, source_local, drow, dcol, passed,
                step_lengths):
    """Least hops of a tile's cells over *tight* moves (those that give the
    end its final distance exactly), from its sources and the hops of the
    halo: a breadth-first distance on the tight graph, so the same in any
    order.  Works on the frame in place; the halo is read only."""
    frame_cols = cols + 2 * margin
    connectivity = drow.size
    capacity = max(1024, 2 * (band_r.size + source_local.size))
    heap_key = np.empty(capacity, dtype=np.float64)
    heap_cell = np.empty(capacity, dtype=np.int64)
    size = 0
    for k in range(source_local.size):
        local_row = source_local[k] // cols
        cell = (local_row + margin) * frame_cols \
            + source_local[k] - local_row * cols + margin
        frame_hops[cell] = 0
        _heap_push(heap_key, heap_cell, size, 0.0, cell)
        size += 1
    for b in range(band_r.size):
        row = band_r[b] + margin
        col = band_c[b] + margin
        cell = row * frame_cols + col
        best = frame_hops[cell]
        for i in range(connectivity):
            from_row = row + drow[i]
            from_col = col + dcol[i]
            if margin <= from_row < rows + margin and \
                    margin <= from_col < cols + margin:
                continue  # inside: the search below covers it
            start = from_row * frame_cols + from_col
            if frame_hops[start] < best - 1 and _tight(
                    frame_distance, frame_cost, start, cell, cell, i,
                    frame_cols, passed, step_lengths):
                best = frame_hops[start] + 1
        if best < frame_hops[cell]:
            frame_hops[cell] = best
            if size == capacity:
                capacity *= 2
                heap_key = np.resize(heap_key, capacity)
                heap_cell = np.resize(heap_cell, capacity)
            _heap_push(heap_key, heap_cell, size, float(best), cell)
            size += 1
    while size > 0:
        key = heap_key[0]
        cell = heap_cell[0]
        _heap_pop(heap_key, heap_cell, size)
        size -= 1
        if key > frame_hops[cell]:
            continue
        row = cell // frame_cols
        col = cell - row * frame_cols
        next_hops = frame_hops[cell] + 1
        for i in range(connectivity):
            to_row = row + drow[i]
            to_col = col + dcol[i]
            if not (margin <= to_row < rows + margin
                    and margin <= to_col < cols + margin):
                continue
            end = to_row * frame_cols + to_col
            if next_hops < frame_hops[end] and _tight(
                    frame_distance, frame_cost, cell, end, cell, i,
                    frame_cols, passed, step_lengths):
                frame_hops[end] = next_hops
                if size == capacity:
                    capacity *= 2
                    heap_key = np.resize(heap_key, capacity)
                    heap_cell = np.resize(heap_cell, capacity)
                _heap_push(heap_key, heap_cell, size, float(next_hops), end)
                size += 1


def hops_tile(cost_source, window, nodata, state, margin, source_local,
              grid, band_offset, all_band_cost, band_distance, band_hops,
              offsets, passed, step_lengths):
    """Phase 2 for one tile, with the distances final: lower its hops from
    ``source_local`` (its sources, on its first visit) and from the hops of
    its halo.  Pure: returns the new state."""
    rows, cols = window.rows, window.cols
    frame_cols = cols + 2 * margin
    n = (rows + 2 * margin) * frame_cols
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, grid, band_offset,
        all_band_cost, band_distance, band_hops, None, None,
        np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(n, np.bool_),
        0)
    band_r, band_c = band_cells(rows, cols, margin)
    _solve_hops(frame_distance, frame_hops, frame_cost, rows, cols, margin,
                band_r, band_c, source_local,
                np.ascontiguousarray(offsets[:, 0]),
                np.ascontiguousarray(offsets[:, 1]), passed, step_lengths)
    hops = frame_hops.reshape(rows + 2 * margin, frame_cols)[
        margin:margin + rows, margin:margin + cols]
    return state[0], np.ascontiguousarray(hops).reshape(-1)


def tile_trees(cost_source, window, nodata, state, margin, source_local,
               source_ids, grid, band_offset, all_band_cost, band_distance,
               band_hops, band_label, band_flag, offsets, passed,
               step_lengths):
    """Predecessor codes and allocation labels of one tile.  Pure.

    With ``band_label`` None the halo cells are labelled with their own
    band index (flag 1), so a cell whose tree leaves the tile gets the
    index of the band cell it leaves through; otherwise with the resolved
    band labels.  Returns (predecessor, label, flag), each rows x cols.
    """
    from ._cpu import canonical_predecessors, walk_to_roots
    rows, cols = window.rows, window.cols
    frame_rows, frame_cols = rows + 2 * margin, cols + 2 * margin
    n = frame_rows * frame_cols
    inner = (slice(margin, margin + rows), slice(margin, margin + cols))
    frame_label = np.zeros(n, np.int64)
    frame_flag = np.zeros(n, np.uint8)
    frame_known = np.zeros(n, np.bool_)
    resolved = band_label is not None
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, grid, band_offset,
        all_band_cost, band_distance, band_hops, band_label, band_flag,
        frame_label, frame_flag, frame_known, 2 if resolved else 1)
    predecessor = np.full(n, -1, np.int8)
    drow = np.ascontiguousarray(offsets[:, 0])
    dcol = np.ascontiguousarray(offsets[:, 1])
    canonical_predecessors(frame_distance, frame_hops, frame_cost,
                           frame_rows, frame_cols, margin, margin + rows,
                           margin, margin + cols, drow, dcol,
                           np.ascontiguousarray(passed[:, 0, 0]),
                           np.ascontiguousarray(passed[:, 0, 1]),
                           np.ascontiguousarray(passed[:, 1, 0]),
                           np.ascontiguousarray(passed[:, 1, 1]),
                           step_lengths, predecessor)
    if source_local.size:
        local_rows, local_cols = np.divmod(source_local, cols)
        framed = (local_rows + margin) * frame_cols + local_cols + margin
        # the first listing written last wins
        frame_label[framed[::-1]] = source_ids[::-1]
        frame_flag[framed] = 0
        frame_known[framed] = True
    walk_to_roots(predecessor, frame_cols, drow, dcol, frame_label,
                  frame_flag, frame_known)
    shape = (frame_rows, frame_cols)
    return (predecessor.reshape(shape)[inner], frame_label.reshape(shape)[inner],
            frame_flag.reshape(shape)[inner])


@njit(cache=True, nogil=True)
def _resolve_band_labels(label, flag):
    """Follow band-index labels (flag 1) to the id they lead to, in
    place.  Paths end at an id: each step moves to a strictly smaller
    (cost, hops) pair."""
    for start in range(label.shape[0]):
        if flag[start] != 1:
            continue
        cell = start
        while flag[cell] == 1:
            cell = label[cell]
        root = label[cell]
        cell = start
        while flag[cell] == 1:
            following = label[cell]
            label[cell] = root
            flag[cell] = 0
            cell = following


# --------------------------------------------------------------------------
# the driver


class _StateCache:
    """Tile states in an LRU cache of at most ``capacity`` tiles; evicted
    states are written to the scratch folder."""

    def __init__(self, folder, capacity):
        self.scratch = tiling.ScratchStore(folder, budget_bytes=0)
        self.capacity = max(1, capacity)
        self.cached = OrderedDict()

    def get(self, tile):
        if tile in self.cached:
            self.cached.move_to_end(tile)
            return self.cached[tile]
        if tile in self.scratch:
            return tuple(self.scratch.get(tile))
        return None

    def put(self, tile, state):
        self.cached[tile] = state
        self.cached.move_to_end(tile)
        while len(self.cached) > self.capacity:
            old, old_state = self.cached.popitem(last=False)
            self.scratch.put(old, old_state)


def cost_distance_tiled(plan, sources, source_ids, source_nodata,
                        connectivity, step_lengths, max_cost, nodata,
                        out_dir, executor, progress, backend="cpu",
                        outputs=("accumulated", "direction", "allocation")):
    """The tiled path of :func:`gridgraph.core.cost_distance`.

    ``backend`` "cuda" solves the tiles on the GPU.  Returns a
    CostDistanceResult whose arrays are in memory, or read-only memmaps of ``out_dir/accumulated.npy``, ``direction.npy`` and
    ``allocation.npy``.
    """
    from . import (KNIGHT_PASSED_CELLS, NEIGHBOUR_OFFSETS, CostDistanceResult,
                   GRASS_DIRECTION_DEGREES, _describe_cells, _source_cells)
    source = plan.source
    grid = plan.grid
    if nodata is None:
        nodata = source.nodata
    rows, cols = source.shape
    progress = progress if progress is not None else Progress()
    out_dir = tiling.check_out_dir(out_dir, rows * cols * 20, plan.limit_bytes)
    margin = 2 if connectivity == 16 else 1

    source_raster = None
    source_list = None
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

    tiles = grid.morton_order()
    surveys = tiling.run_tasks(
        survey_tile,
        [(source, grid.window(*tile), nodata, margin, source_raster,
          source_nodata) for tile in tiles],
        executor, progress.span(0.0, 0.1))
    survey = dict(zip(tiles, surveys))
    if sum(s["valid"] for s in surveys) == 0:
        raise InvalidInputError(
            "the cost raster has no valid cell (every cell is nodata or NaN): "
            "check the band and its nodata value")
    negatives = [s["first_negative"] for s in surveys if s["negative"]]
    if negatives:
        count = sum(s["negative"] for s in surveys)
        row, col, value = min(negatives, key=lambda f: (f[0], f[1]))
        raise InvalidInputError(
            f"the cost raster has {count} negative cell(s), "
            f"first at row {row}, column {col} (value {value}): "
            "costs must be >= 0; set them to nodata to make barriers, or "
            "shift/rescale the raster")
    if source_raster is not None:
        order = sorted(tiles)
        cells = np.concatenate([survey[t]["source_cells"] for t in order])
        ids = np.concatenate([survey[t]["source_ids"] for t in order])
        # scan order, as np.argwhere lists them in memory
        scan = np.lexsort((cells[:, 1], cells[:, 0]))
        cells, ids = cells[scan], ids[scan]
        if len(cells) == 0:
            raise InvalidInputError(
                "the source raster has no source cell (no valid non-zero "
                "cell): give sources as non-zero cells of the raster")
        blocked_cells = np.concatenate([survey[t]["blocked"] for t in order])
        blocked_cells = blocked_cells[np.lexsort((blocked_cells[:, 1],
                                                  blocked_cells[:, 0]))]
    else:
        cells, ids = source_list
        blocked = np.zeros(len(cells), dtype=bool)
        for k, (r, c) in enumerate(cells):
            blocked[k] = not _cell_valid(source, nodata, r, c)
        blocked_cells = cells[blocked]
    if len(blocked_cells) == len(cells):
        raise InvalidInputError(
            "every source lies on a barrier (nodata or NaN cost) cell: "
            + _describe_cells(blocked_cells)
            + "; move the sources onto cells with a valid cost")
    if len(blocked_cells):
        raise InvalidInputError(
            f"{len(blocked_cells)} source(s) lie on barrier (nodata or NaN "
            "cost) cells: " + _describe_cells(blocked_cells)
            + "; move them onto cells with a valid cost or remove them")

    offsets = np.ascontiguousarray(NEIGHBOUR_OFFSETS[:connectivity])
    drow = offsets[:, 0].copy()
    dcol = offsets[:, 1].copy()
    passed = np.ascontiguousarray(KNIGHT_PASSED_CELLS[:connectivity])
    step_lengths = np.ascontiguousarray(step_lengths, dtype=np.float64)
    max_cost = math.inf if max_cost is None else float(max_cost)

    n_tiles = grid.count
    index_of = {tile: grid.index(*tile) for tile in tiles}
    band_offset = np.zeros(n_tiles + 1, dtype=np.int64)
    for tile in tiles:
        band_offset[index_of[tile] + 1] = survey[tile]["band_cost"].size
    band_offset = np.cumsum(band_offset)
    all_band_cost = np.empty(band_offset[-1], dtype=np.float64)
    for tile in tiles:
        t = index_of[tile]
        all_band_cost[band_offset[t]:band_offset[t + 1]] = \
            survey[tile]["band_cost"]
    del surveys, survey
    total_band = int(band_offset[-1])
    in_distance = np.full(total_band, np.inf)
    out_distance = np.full(total_band, np.inf)
    dirty_key = np.full(n_tiles, np.inf)

    size = grid.tile_size
    tile_sources = {}
    tile_of_source = (cells[:, 0] // size) * grid.tile_cols + cells[:, 1] // size
    for t in np.unique(tile_of_source):
        pick = np.flatnonzero(tile_of_source == t)  # list order kept
        tr, tc = divmod(int(t), grid.tile_cols)
        window = grid.window(tr, tc)
        local = (cells[pick, 0] - window.row) * window.cols \
            + cells[pick, 1] - window.col
        tile_sources[int(t)] = (local.astype(np.int64), ids[pick].astype(np.int64))
        dirty_key[int(t)] = 0.0

    state_bytes = STATE_BYTES_PER_CELL * size * size
    global_bytes = total_band * BAND_BYTES_PER_CELL
    cache_tiles = int((plan.limit_bytes * 0.6 - global_bytes
                       - TILE_BYTES_PER_CELL * size * size) // state_bytes)
    no_sources = (np.empty(0, np.int64), np.empty(0, np.int64))
    distinct_ids = np.unique(ids)

    with tiling.scratch_folder(out_dir) as folder:
        cache = _StateCache(folder, cache_tiles)
        queue = [(0.0, t) for t in tile_sources]
        heapq.heapify(queue)
        solved = np.zeros(n_tiles, dtype=bool)
        propagate = progress.span(0.1, 0.7)
        solves = 0
        while queue:
            key, t = heapq.heappop(queue)
            if key != dirty_key[t]:
                continue  # stale: solved since, or queued again lower
            dirty_key[t] = np.inf
            tr, tc = divmod(t, grid.tile_cols)
            window = grid.window(tr, tc)
            band = slice(band_offset[t], band_offset[t + 1])
            state = cache.get(t)
            local = tile_sources.get(t, no_sources)[0] if state is None \
                else no_sources[0]
            state = solve_tile(source, window, nodata, state, local,
                               in_distance[band], margin,
                               offsets, step_lengths, max_cost, passed,
                               backend)
            cache.put(t, state)
            solves += 1
            band_r, band_c = band_cells(window.rows, window.cols, margin)
            flat = band_r * window.cols + band_c
            new_distance = state[0][flat]
            changed = new_distance != out_distance[band]
            out_distance[band] = new_distance
            before = dirty_key.copy()
            _relax_out(window.row, window.col, window.rows, window.cols,
                       band_r, band_c, new_distance, changed, rows, cols,
                       size, grid.tile_cols, margin, band_offset[t],
                       band_offset, all_band_cost, in_distance,
                       out_distance, drow, dcol, passed, step_lengths,
                       max_cost, dirty_key)
            for other in np.flatnonzero(dirty_key < before):
                heapq.heappush(queue, (float(dirty_key[other]), int(other)))
            solved[t] = True
            propagate(min(0.99, solved.sum() / n_tiles))
        del in_distance

        # barriers: -inf in the band distances, as inside the tiles
        out_distance[np.isnan(all_band_cost)] = -np.inf
        need_trees = "direction" in outputs or "allocation" in outputs
        out_hops = np.full(total_band, HOPS_UNREACHED, np.int64)
        if need_trees:
            _propagate_hops(source, grid, tiles, index_of, cache,
                            tile_sources, nodata, margin, band_offset,
                            all_band_cost, out_distance, out_hops, offsets,
                            passed, step_lengths, progress.span(0.7, 0.8))

        def trees(tile, band_label=None, band_flag=None):
            t = index_of[tile]
            window = grid.window(*tile)
            local, local_ids = tile_sources.get(t, no_sources)
            return tile_trees(source, window, nodata, cache.get(t), margin,
                              local, local_ids, grid, band_offset,
                              all_band_cost, out_distance, out_hops,
                              band_label, band_flag, offsets, passed,
                              step_lengths)

        band_label = band_flag = None
        if len(distinct_ids) > 1 and "allocation" in outputs:
            # where each band cell's tree leaves its tile (or its source
            # id), then those chains followed across tiles to an id
            band_label = np.zeros(total_band, np.int64)
            band_flag = np.zeros(total_band, np.uint8)
            label_pass = progress.span(0.8, 0.85)
            for k, tile in enumerate(tiles):
                t = index_of[tile]
                if cache.get(t) is not None:
                    window = grid.window(*tile)
                    _, label, flag = trees(tile)
                    band_r, band_c = band_cells(window.rows, window.cols,
                                                margin)
                    band = slice(band_offset[t], band_offset[t + 1])
                    band_label[band] = label[band_r, band_c]
                    band_flag[band] = flag[band_r, band_c]
                label_pass((k + 1) / len(tiles))
            _resolve_band_labels(band_label, band_flag)

        sink_types = {"accumulated": (np.float64, np.nan),
                      "direction": (np.float32, np.nan),
                      "allocation": (np.int64, 0)}
        sinks = {name: tiling.make_sink(out_dir, name, (rows, cols),
                                        *sink_types[name])
                 for name in outputs}
        finish = progress.span(0.85, 1.0)
        with tiling.output_sinks(list(sinks.values())):
            for k, tile in enumerate(tiles):
                t = index_of[tile]
                window = grid.window(*tile)
                state = cache.get(t)
                shape = (window.rows, window.cols)
                if state is None:
                    blocks = {
                        "accumulated": np.full(shape, np.nan),
                        "direction": np.full(shape, np.nan, np.float32),
                        "allocation": np.zeros(shape, np.int64)}
                elif not need_trees:
                    distance = state[0].reshape(shape)
                    blocks = {"accumulated": np.where(
                        np.isfinite(distance), distance, np.nan)}
                else:
                    predecessor, label, _ = trees(tile, band_label, band_flag)
                    reached = predecessor >= 0
                    direction = np.full(shape, np.nan, np.float32)
                    direction[reached] = GRASS_DIRECTION_DEGREES[
                        predecessor[reached]]
                    direction[predecessor == PREDECESSOR_SOURCE] = 0.0
                    unreached = predecessor == PREDECESSOR_UNREACHED
                    blocks = {
                        "accumulated": np.where(unreached, np.nan,
                                                state[0].reshape(shape)),
                        "direction": direction,
                        "allocation": np.where(
                            unreached, 0,
                            distinct_ids[0] if band_label is None else label)}
                for name, sink in sinks.items():
                    sink.write(window, blocks[name])
                finish((k + 1) / len(tiles))
            results = {name: sink.finish() for name, sink in sinks.items()}
    result = CostDistanceResult(*(results.get(name) for name in (
        "accumulated", "direction", "allocation")))
    result.tile_solves = solves
    return result


def _propagate_hops(source, grid, tiles, index_of, cache, tile_sources,
                    nodata, margin, band_offset, all_band_cost, out_distance,
                    out_hops, offsets, passed, step_lengths, progress):
    """Phase 2: the hops of every tile, with the distances final.

    Tiles are taken by the least hops their halo received (sources' tiles
    first); a tile whose band hops dropped wakes the neighbours whose halo
    holds them.  Hops only drop, so this stops, at the least fixed point:
    the hops of a breadth-first search of the tight moves, as in memory.
    """
    tile_cols = grid.tile_cols
    hop_key = np.full(grid.count, np.inf)
    visited = np.zeros(grid.count, dtype=bool)
    for t in tile_sources:
        hop_key[t] = 0.0
    queue = [(0.0, t) for t in tile_sources]
    heapq.heapify(queue)
    no_sources = np.empty(0, np.int64)
    done = 0
    while queue:
        key, t = heapq.heappop(queue)
        if key != hop_key[t]:
            continue
        hop_key[t] = np.inf
        state = cache.get(t)
        if state is None:
            continue  # never reached
        tr, tc = divmod(t, tile_cols)
        window = grid.window(tr, tc)
        local = tile_sources[t][0] if t in tile_sources and not visited[t] \
            else no_sources
        if not visited[t]:
            visited[t] = True
            done += 1
        state = hops_tile(source, window, nodata, state, margin, local, grid,
                          band_offset, all_band_cost, out_distance, out_hops,
                          offsets, passed, step_lengths)
        cache.put(t, state)
        band_r, band_c = band_cells(window.rows, window.cols, margin)
        band = slice(band_offset[t], band_offset[t + 1])
        new_hops = state[1][band_r * window.cols + band_c]
        changed = new_hops != out_hops[band]
        out_hops[band] = new_hops
        if changed.any():
            least = float(new_hops[changed].min() + 1)
            rows_changed = band_r[changed]
            cols_changed = band_c[changed]
            up = (rows_changed < margin).any()
            down = (rows_changed >= window.rows - margin).any()
            left = (cols_changed < margin).any()
            right = (cols_changed >= window.cols - margin).any()
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    if (dr, dc) == (0, 0) or (dr == -1 and not up) or (
                            dr == 1 and not down) or (
                            dc == -1 and not left) or (dc == 1 and not right):
                        continue
                    nr, nc = tr + dr, tc + dc
                    if 0 <= nr < grid.tile_rows and 0 <= nc < tile_cols:
                        other = nr * tile_cols + nc
                        if least < hop_key[other]:
                            hop_key[other] = least
                            heapq.heappush(queue, (least, other))
        progress(min(0.99, done / grid.count))


def _cell_valid(source, nodata, row, col):
    value = source.read(tiling.Window(int(row), int(col), 1, 1))
    return bool(valid_mask(value, nodata)[0, 0])
