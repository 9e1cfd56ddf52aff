"""Cost distance on the block hierarchy (out-of-core, exact).

Haverkort's I/O-efficient SSSP (references in docs/architecture.md) keeps a
priority queue of clusters
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

from dataclasses import dataclass

import numpy as np
from numba import njit

from .. import tiling
from .._common import valid_mask
from ._blocks_cpu import _pop, _push  # the one binary heap of (key, cell)
from .sources import source_ids_of, source_raster_mask

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


@dataclass
class Survey:
    """Round 0's message of one tile: ``valid`` (count of valid cells),
    ``negative`` (count) and ``first_negative`` ((row, col, value) of the
    first in scan order, or None), ``band_cost`` (float64, NaN on
    barriers), ``largest`` (the largest finite float64 cost, else 0) and,
    for a source raster, ``source_cells`` (global (row, col)),
    ``source_ids`` and ``blocked`` (the source cells on barriers)."""

    valid: int
    negative: int
    first_negative: tuple
    band_cost: np.ndarray
    largest: float
    source_cells: np.ndarray = None
    source_ids: np.ndarray = None
    blocked: np.ndarray = None


def survey_tile(cost_source, window, nodata, margin, source_raster,
                source_nodata):
    """Per tile: cost checks, band costs and (for a source raster) sources,
    as a :class:`Survey`."""
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
    survey = Survey(valid=int(np.count_nonzero(valid)), negative=n_negative,
                    first_negative=first_negative, band_cost=band_cost,
                    largest=_largest_finite(cost, valid))
    if source_raster is not None:
        raster = source_raster.read(window)
        mask = source_raster_mask(raster, source_nodata)
        cells = np.argwhere(mask).astype(np.int64)
        ids = source_ids_of(raster[mask])
        cells[:, 0] += window.row
        cells[:, 1] += window.col
        survey.source_cells = cells
        survey.source_ids = ids
        survey.blocked = cells[~valid[cells[:, 0] - window.row,
                                      cells[:, 1] - window.col]]
    return survey


def _largest_finite(cost, valid):
    """The largest finite valid cost of a float64 tile, else 0 (costs of
    32 bits or fewer cannot add up to the float64 limit)."""
    if cost.dtype != np.float64:
        return 0.0
    with np.errstate(invalid="ignore"):
        largest = float(np.max(cost, where=valid & (cost < np.inf),
                               initial=0.0))
    return largest


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
        # copies: the task must not change its input (a retried or
        # recomputed task starts from the same state)
        distance, hops = state[0].copy(), state[1].copy()
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
        _push(heap_key, heap_cell, size, distance[cell], cell)
        size += 1
    while size > 0:
        key = heap_key[0]
        cell = heap_cell[0]
        _pop(heap_key, heap_cell, size)
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
            _push(heap_key, heap_cell, size, candidate, neighbour)
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


@dataclass
class Halo:
    """What a tile task needs from its neighbours: the ``margin``-wide ring
    of cells around the tile, in frame order (row by row, skipping the
    tile), as the driver's band arrays hold them.

    ``distance`` is -inf on barriers and outside the raster; ``hops`` and
    ``cost`` are 0 there.  ``label`` and ``flag`` (None when not needed)
    are each cell's band index with flag 1 (labels not resolved yet) or the
    resolved label and its flag.
    """

    distance: np.ndarray
    hops: np.ndarray
    cost: np.ndarray
    label: np.ndarray = None
    flag: np.ndarray = None


def tile_halo(window, margin, grid, band_offset, all_band_cost,
              band_distance, band_hops, band_label=None, band_flag=None,
              label_mode=0):
    """The :class:`Halo` of the tile at ``window`` from the global band
    arrays (in the driver): ``label_mode`` 0 leaves labels out, 1 gives
    each cell its band index (flag 1), 2 the band's label and flag."""
    rows, cols = window.rows, window.cols
    n = (rows + 2 * margin) * (cols + 2 * margin) - rows * cols
    distance = np.full(n, -np.inf)
    hops = np.zeros(n, np.int64)
    cost = np.zeros(n)
    label = np.zeros(n if label_mode else 0, np.int64)
    flag = np.zeros(n if label_mode else 0, np.uint8)
    if band_label is None:
        band_label = np.zeros(0, np.int64)
        band_flag = np.zeros(0, np.uint8)
    _gather_halo(window.row, window.col, rows, cols, margin, grid.shape[0],
                 grid.shape[1], grid.tile_size, grid.tile_cols, band_offset,
                 all_band_cost, band_distance, band_hops, band_label,
                 band_flag, distance, hops, cost, label, flag, label_mode)
    if not label_mode:
        return Halo(distance, hops, cost)
    return Halo(distance, hops, cost, label, flag)


@njit(cache=True, nogil=True)
def _gather_halo(row0, col0, rows, cols, margin, raster_rows, raster_cols,
                 tile_size, tile_cols, band_offset, all_band_cost,
                 band_distance, band_hops, band_label, band_flag,
                 halo_distance, halo_hops, halo_cost, halo_label, halo_flag,
                 label_mode):
    """Fill the halo arrays (frame order) from the global band arrays."""
    k = 0
    for fr in range(rows + 2 * margin):
        for fc in range(cols + 2 * margin):
            if margin <= fr < rows + margin and margin <= fc < cols + margin:
                continue
            row = row0 + fr - margin
            col = col0 + fc - margin
            if 0 <= row < raster_rows and 0 <= col < raster_cols:
                index = _band_index(row, col, raster_rows, raster_cols,
                                    tile_size, tile_cols, margin, band_offset)
                cost = all_band_cost[index]
                if cost == cost:  # not a barrier
                    halo_distance[k] = band_distance[index]
                    halo_hops[k] = band_hops[index]
                    halo_cost[k] = cost
                    if label_mode == 1:
                        halo_label[k] = index
                        halo_flag[k] = 1
                    elif label_mode == 2:
                        halo_label[k] = band_label[index]
                        halo_flag[k] = band_flag[index]
            k += 1


@njit(cache=True, nogil=True)
def _scatter_halo(rows, cols, margin, halo_distance, halo_hops, halo_cost,
                  halo_label, halo_flag, frame_distance, frame_hops,
                  frame_cost, frame_label, frame_flag, frame_known):
    """Put a :class:`Halo`'s arrays into the ring of a tile's frame (all
    its cells known; labels only when the halo has them)."""
    frame_cols = cols + 2 * margin
    with_labels = halo_label.size > 0
    k = 0
    for fr in range(rows + 2 * margin):
        for fc in range(frame_cols):
            if margin <= fr < rows + margin and margin <= fc < cols + margin:
                continue
            cell = fr * frame_cols + fc
            frame_distance[cell] = halo_distance[k]
            frame_hops[cell] = halo_hops[k]
            frame_cost[cell] = halo_cost[k]
            frame_known[cell] = True
            if with_labels:
                frame_label[cell] = halo_label[k]
                frame_flag[cell] = halo_flag[k]
            k += 1


def _tile_frame(cost_source, window, nodata, state, margin, halo,
                frame_label, frame_flag, frame_known):
    """A tile's (distance, hops, cost) with its ``margin``-wide halo, flat
    (new arrays: ``state`` is only read); the halo's labels go into
    ``frame_label`` and ``frame_flag`` when it has them."""
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
    frame_distance = frame_distance.reshape(-1)
    frame_hops = frame_hops.reshape(-1)
    frame_cost = frame_cost.reshape(-1)
    label = halo.label if halo.label is not None else np.zeros(0, np.int64)
    flag = halo.flag if halo.flag is not None else np.zeros(0, np.uint8)
    _scatter_halo(rows, cols, margin, halo.distance, halo.hops, halo.cost,
                  label, flag, frame_distance, frame_hops, frame_cost,
                  frame_label, frame_flag, frame_known)
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
        _push(heap_key, heap_cell, size, 0.0, cell)
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
            _push(heap_key, heap_cell, size, float(best), cell)
            size += 1
    while size > 0:
        key = heap_key[0]
        cell = heap_cell[0]
        _pop(heap_key, heap_cell, size)
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
                _push(heap_key, heap_cell, size, float(next_hops), end)
                size += 1


def hops_tile(cost_source, window, nodata, state, margin, source_local,
              halo, offsets, passed, step_lengths, backend="cpu"):
    """Phase 2 for one tile, with the distances final: lower its hops from
    ``source_local`` (its sources, on its first visit) and from the hops of
    its :class:`Halo`.  Pure: returns ``(band_hops, state)``, the new hops
    of its band cells and its new state.  ``backend`` "cuda" runs the
    search on the GPU (``_cuda.relax_frame_hops``; same final hops)."""
    rows, cols = window.rows, window.cols
    frame_cols = cols + 2 * margin
    n = (rows + 2 * margin) * frame_cols
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, halo,
        np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(n, np.bool_))
    band_r, band_c = band_cells(rows, cols, margin)
    if backend == "cuda":
        from . import _cuda
        _cuda.relax_frame_hops(frame_distance, frame_hops, frame_cost,
                               rows + 2 * margin, frame_cols, margin,
                               source_local, len(offsets), step_lengths)
    else:
        _solve_hops(frame_distance, frame_hops, frame_cost, rows, cols,
                    margin, band_r, band_c, source_local,
                    np.ascontiguousarray(offsets[:, 0]),
                    np.ascontiguousarray(offsets[:, 1]), passed,
                    step_lengths)
    hops = np.ascontiguousarray(frame_hops.reshape(
        rows + 2 * margin, frame_cols)[margin:margin + rows,
                                       margin:margin + cols]).reshape(-1)
    return hops[band_r * cols + band_c], (state[0], hops)


def tile_trees(cost_source, window, nodata, state, margin, source_local,
               source_ids, halo, offsets, passed, step_lengths):
    """Predecessor codes and allocation labels of one tile.  Pure.

    With a :class:`Halo` of label mode 1 the halo cells are labelled with
    their own band index (flag 1), so a cell whose tree leaves the tile
    gets the index of the band cell it leaves through; with mode 2 with
    the resolved band labels.  Returns (predecessor, label, flag), each
    rows x cols.
    """
    from ._cpu import canonical_predecessors, walk_to_roots
    rows, cols = window.rows, window.cols
    frame_rows, frame_cols = rows + 2 * margin, cols + 2 * margin
    n = frame_rows * frame_cols
    inner = (slice(margin, margin + rows), slice(margin, margin + cols))
    frame_label = np.zeros(n, np.int64)
    frame_flag = np.zeros(n, np.uint8)
    frame_known = np.zeros(n, np.bool_)
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, halo, frame_label,
        frame_flag, frame_known)
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
# the tile tasks of the rounds (pure; small messages out, state kept)


def solve_round_tile(cost_source, window, nodata, state, source_local, seeds,
                     margin, offsets, step_lengths, max_cost, passed,
                     backend="cpu"):
    """A propagation round's task for one tile: :func:`solve_tile`.

    Returns ``(band_distance, state)``: the distances of its band cells
    (the message the driver relaxes into the neighbours) and the new
    state (kept where it was computed)."""
    state = solve_tile(cost_source, window, nodata, state, source_local,
                       seeds, margin, offsets, step_lengths, max_cost, passed,
                       backend)
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    return state[0][band_r * window.cols + band_c], state


def tile_band_labels(cost_source, window, nodata, state, margin,
                     source_local, source_ids, halo, offsets, passed,
                     step_lengths):
    """The label pass's task for one tile (several source ids): for each
    band cell, its source id (flag 0) or the band index its tree leaves
    the tile through (flag 1), from :func:`tile_trees` with a label-mode-1
    halo.  Returns ``(band_label, band_flag)``."""
    _, label, flag = tile_trees(cost_source, window, nodata, state, margin,
                                source_local, source_ids, halo, offsets,
                                passed, step_lengths)
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    return label[band_r, band_c], flag[band_r, band_c]


def tile_outputs(cost_source, window, nodata, state, margin, source_local,
                 source_ids, halo, offsets, passed, step_lengths, outputs,
                 single_id):
    """The output pass's task for one tile: its blocks of ``outputs``
    (accumulated cost, GRASS direction, allocation) as a dict.

    ``halo`` is None when neither direction nor allocation is wanted;
    ``single_id`` is the allocation of every reached cell when there is
    only one source id (else the halo holds the resolved labels)."""
    from . import GRASS_DIRECTION_DEGREES
    shape = (window.rows, window.cols)
    distance = state[0].reshape(shape)
    if halo is None:
        return {"accumulated": np.where(np.isfinite(distance), distance,
                                        np.nan)}
    predecessor, label, _ = tile_trees(cost_source, window, nodata, state,
                                       margin, source_local, source_ids,
                                       halo, offsets, passed, step_lengths)
    reached = predecessor >= 0
    direction = np.full(shape, np.nan, np.float32)
    direction[reached] = GRASS_DIRECTION_DEGREES[predecessor[reached]]
    direction[predecessor == PREDECESSOR_SOURCE] = 0.0
    unreached = predecessor == PREDECESSOR_UNREACHED
    blocks = {"accumulated": np.where(unreached, np.nan, distance),
              "direction": direction,
              "allocation": np.where(unreached, 0, single_id
                                     if single_id is not None else label)}
    return {name: blocks[name] for name in outputs}


def write_outputs(sinks, function, cost_source, window, *arguments):
    """``function``'s blocks written to their ``sinks`` (a dict by output
    name) in the task; returns None so nothing travels back."""
    blocks = function(cost_source, window, *arguments)
    for name, sink in sinks.items():
        sink.write(window, blocks[name])
