"""Band geometry, the relaxation across tile borders and the halos.

A tile's *band* is its cells within ``margin`` of its border (1; 2 for
knight's moves); every edge between two tiles joins two band cells.  The
driver holds every tile's band back to back; a :class:`Halo` is the ring of
cells around a tile, gathered from those arrays for the tile tasks.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

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
    """Fill the halo arrays (frame order) from the global band arrays.

    Only the ring is visited: whole rows above and below the tile, the
    ``margin`` cells either side of it in between (a loop over the frame
    skipping the tile cost 20-50 ms a 4096² tile)."""
    frame_cols = cols + 2 * margin
    k = 0
    for fr in range(rows + 2 * margin):
        inside_rows = margin <= fr < rows + margin
        for j in range(2 * margin if inside_rows else frame_cols):
            fc = j if not inside_rows or j < margin else j + cols
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
        inside_rows = margin <= fr < rows + margin
        for j in range(2 * margin if inside_rows else frame_cols):
            fc = j if not inside_rows or j < margin else j + cols
            cell = fr * frame_cols + fc
            frame_distance[cell] = halo_distance[k]
            frame_hops[cell] = halo_hops[k]
            frame_cost[cell] = halo_cost[k]
            frame_known[cell] = True
            if with_labels:
                frame_label[cell] = halo_label[k]
                frame_flag[cell] = halo_flag[k]
            k += 1
