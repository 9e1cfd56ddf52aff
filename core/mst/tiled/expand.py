"""Round 3 of the tiled MST: the final forest per tile, its pieces rooted
across tiles, its parent directions and its sorted edges."""

from dataclasses import dataclass

import numpy as np
import numba
from numba import njit, prange

from ... import tiling
from .. import PARENT_DEGREES, PARENT_OFFSETS
from .._cpu import _edge_weight, _lighter, sum_parts, valid_cells
from .._forest_cpu import walk_tile_forest
from .forest import (_BIT_DCOL, _BIT_DROW, _low_bits_from_ids, _lowest_bit,
                     _popcount)

# --------------------------------------------------------------------------
# round 3: the final forest per tile, its roots, its sorted edges


def _final_mask(msf, window, removed_local):
    """The tile's final internal edges as low-end bits (bit k of a cell:
    the edge of rank k whose low end it is): its MSF (local ids and
    weights, or the low-end bits per cell) minus the removed ones."""
    if len(msf) == 1:
        low_bits = np.bitwise_and(msf[0], 0x0F)
    else:
        low_bits = _low_bits_from_ids(msf[0], window.rows * window.cols)
    _clear_edges(low_bits, removed_local)
    return low_bits


@njit(cache=True, nogil=True, parallel=True)
def _mask_weights(low_bits, values, rows, cols, weight_index, half):
    """Weights of the edges in a tile's low-end bits, in cell order,
    recomputed with the kernels' weight function (rows in parallel)."""
    offsets = np.zeros(rows + 1, dtype=np.int64)
    for r in prange(rows):
        count = 0
        for v in range(r * cols, (r + 1) * cols):
            count += _popcount(np.int64(low_bits[v]) & 0x0F)
        offsets[r + 1] = count
    for r in range(rows):
        offsets[r + 1] += offsets[r]
    out = np.empty(offsets[rows], dtype=values.dtype)
    for r in prange(rows):
        j = offsets[r]
        for v in range(r * cols, (r + 1) * cols):
            bits = np.int64(low_bits[v]) & 0x0F
            while bits:
                rank = _lowest_bit(bits)
                bits &= bits - 1
                high = v + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
                out[j] = _edge_weight(values[v], values[high], weight_index,
                                      half)
                j += 1
    return out


@njit(cache=True, nogil=True)
def _clear_edges(low_bits, local_id):
    for k in range(local_id.size):
        e = np.int64(local_id[k])
        low_bits[e >> 2] &= np.uint8(~(1 << (e & 3)) & 0xFF)


@dataclass
class PiecesMessage:
    """A tile's border pieces (connected parts of its final forest that
    touch the tile border): the piece number + 1 of each border cell of
    its four lines (0 on invalid cells), and each numbered piece's first
    (lowest) cell, local to the tile."""

    first_cell: np.ndarray
    top: np.ndarray
    bottom: np.ndarray
    left: np.ndarray
    right: np.ndarray


def tile_pieces(source, window, nodata, msf, removed_local):
    """Round 3a for one tile: the pieces (connected parts) of its final
    forest that touch the tile border.

    Returns a :class:`PiecesMessage`.  Pieces are numbered in scan order
    of their first cell; only border pieces get numbers here.
    """
    values = source.read(window)
    valid = valid_cells(values, nodata)
    low_bits = _final_mask(msf, window, removed_local)
    _, labels, count = walk_tile_forest(low_bits, valid.reshape(-1),
                                        window.rows, window.cols, False, True)
    labels = labels.reshape(window.rows, window.cols)
    border, first_cell = _border_pieces(labels, count,
                                        numba.get_num_threads())
    return PiecesMessage(
        first_cell=first_cell, top=border[labels[0]] + 1,
        bottom=border[labels[-1]] + 1, left=border[labels[:, 0]] + 1,
        right=border[labels[:, -1]] + 1)


@njit(cache=True, nogil=True, parallel=True)
def _border_pieces(labels, count, n_bands):
    """Number the pieces that touch the border (in label order); return
    the numbering per label (-1 elsewhere) and their first cells.
    ``count``: the number of pieces (labels 1..count).  ``n_bands`` bands
    of rows find their first cells in parallel; the lowest band that holds
    a piece gives its first cell."""
    rows, cols = labels.shape
    number = tiling.border_label_index(labels, count)
    n = 0
    for label in range(1, count + 1):
        if number[label] >= 0:
            n += 1
    n_bands = max(1, min(rows, n_bands))
    band_first = np.full((n_bands, n), -1, dtype=np.int64)
    for b in prange(n_bands):
        for r in range(rows * b // n_bands, rows * (b + 1) // n_bands):
            for c in range(cols):
                k = number[labels[r, c]]
                if k >= 0 and band_first[b, k] < 0:
                    band_first[b, k] = np.int64(r) * cols + c
    first_cell = np.full(n, -1, dtype=np.int64)
    for k in prange(n):
        for b in range(n_bands):
            if band_first[b, k] >= 0:
                first_cell[k] = band_first[b, k]
                break
    return number, first_cell


def orient_pieces(grid, pieces, kept_low, kept_high):
    """Round 3b: root every border piece.

    The border pieces and the kept separator edges form a forest; each of
    its trees is rooted at the piece holding the tree's lowest cell, and
    every other piece at the cell where its path toward that root leaves
    it.  Returns {tile: (root local cells, root degrees)} per border piece.
    """
    rows, cols = grid.shape
    size = grid.tile_size
    tiles = sorted(pieces)
    offset = {}
    total = 0
    for tile in tiles:
        offset[tile] = total
        total += pieces[tile].first_cell.size
    node_first = np.empty(total, dtype=np.int64)
    for tile in tiles:
        window = grid.window(*tile)
        first = pieces[tile].first_cell
        node_first[offset[tile]:offset[tile] + first.size] = \
            (window.row + first // window.cols) * cols + window.col \
            + first % window.cols

    # every tile's border piece numbers in one array: top, bottom, left,
    # right lines of each tile in turn
    border_offset = np.zeros(grid.count, dtype=np.int64)
    node_offset = np.zeros(grid.count, dtype=np.int64)
    lines = []
    position = 0
    for tile in tiles:
        t = grid.index(*tile)
        border_offset[t] = position
        node_offset[t] = offset[tile]
        for name in ("top", "bottom", "left", "right"):
            lines.append(getattr(pieces[tile], name).astype(np.int64))
            position += lines[-1].size
    border = np.concatenate(lines) if lines else np.empty(0, np.int64)

    def nodes_of(cells):
        r, c = cells // cols, cells % cols
        tile_row, tile_col = r // size, c // size
        t = tile_row * grid.tile_cols + tile_col
        local_r, local_c = r - tile_row * size, c - tile_col * size
        tile_rows = np.minimum(size, rows - tile_row * size)
        tile_cols = np.minimum(size, cols - tile_col * size)
        where = np.where(
            local_r == 0, local_c,
            np.where(local_r == tile_rows - 1, tile_cols + local_c,
                     np.where(local_c == 0, 2 * tile_cols + local_r,
                              2 * tile_cols + tile_rows + local_r)))
        number = border[border_offset[t] + where]
        return node_offset[t] + number - 1

    node_a = nodes_of(kept_low)
    node_b = nodes_of(kept_high)
    root_cell, root_degrees = _orient(total, node_first, node_a, node_b,
                                      kept_low, kept_high, cols,
                                      _direction_table())
    answers = {}
    for tile in tiles:
        window = grid.window(*tile)
        start, n = offset[tile], pieces[tile].first_cell.size
        cells = root_cell[start:start + n]
        local = (cells // cols - window.row) * window.cols + cells % cols \
            - window.col
        answers[tile] = (local, root_degrees[start:start + n])
    return answers


@njit(cache=True, nogil=True)
def _orient(n_nodes, node_first, node_a, node_b, cell_a, cell_b, cols, table):
    """Root each tree of the piece forest at its node with the lowest first
    cell; give every node its root cell and that cell's parent direction."""
    degree = np.zeros(n_nodes + 1, dtype=np.int64)
    for k in range(node_a.size):
        degree[node_a[k] + 1] += 1
        degree[node_b[k] + 1] += 1
    for v in range(n_nodes):
        degree[v + 1] += degree[v]
    fill = degree[:-1].copy()
    incident = np.empty(2 * node_a.size, dtype=np.int64)
    for k in range(node_a.size):
        incident[fill[node_a[k]]] = k
        fill[node_a[k]] += 1
        incident[fill[node_b[k]]] = k
        fill[node_b[k]] += 1
    # nodes in increasing first cell: the first unseen one roots its tree
    order = np.argsort(node_first)
    seen = np.zeros(n_nodes, dtype=np.bool_)
    root_cell = np.empty(n_nodes, dtype=np.int64)
    root_degrees = np.zeros(n_nodes, dtype=np.float32)
    queue = np.empty(n_nodes, dtype=np.int64)
    for i in range(n_nodes):
        start = order[i]
        if seen[start]:
            continue
        seen[start] = True
        root_cell[start] = node_first[start]
        root_degrees[start] = 0.0
        head = 0
        tail = 1
        queue[0] = start
        while head < tail:
            v = queue[head]
            head += 1
            for j in range(degree[v], degree[v + 1]):
                k = incident[j]
                if node_a[k] == v:
                    u, inside, outside = node_b[k], cell_b[k], cell_a[k]
                else:
                    u, inside, outside = node_a[k], cell_a[k], cell_b[k]
                if seen[u]:
                    continue
                seen[u] = True
                # u is entered through the edge (inside in u, outside in v)
                root_cell[u] = inside
                dr = outside // cols - inside // cols
                dc = outside % cols - inside % cols
                root_degrees[u] = table[dr + 1, dc + 1]
                queue[tail] = u
                tail += 1
    return root_cell, root_degrees


def _direction_table():
    table = np.zeros((3, 3), dtype=np.float32)
    for (dr, dc), degrees in zip(PARENT_OFFSETS, PARENT_DEGREES):
        table[dr + 1, dc + 1] = degrees
    return table


def tile_finish(source, window, shape, nodata, msf, removed_local, roots,
                own_separators, weight_index=0, weight_dtype=np.float32):
    """Round 3c for one tile (pure): its parent-direction block and its
    final edges: the tile's internal forest plus the kept separator edges
    whose low end lies in the tile.

    Returns ``(direction, run_ids, run_weights, sum_parts, count)``: the
    edges as a run sorted by (weight, edge id) (global ids) when ``msf``
    holds the sorted tile forest, else None and None (``msf`` is the
    low-end bits; their weights are recomputed from the values with
    ``weight_index`` in ``weight_dtype``); the parts of
    the exact sum of their weights and their count in both cases.
    """
    values = source.read(window)
    valid = valid_cells(values, nodata)
    rows, cols = window.rows, window.cols
    mask = _final_mask(msf, window, removed_local)
    direction = walk_tile_forest(mask, valid.reshape(-1), rows, cols, True,
                                 False, roots)[0]
    sep_w, sep_e = own_separators
    if len(msf) == 2:
        ids, weights = _surviving(msf[0], msf[1], mask, cols, window.row,
                                  window.col, shape[1])
        run_w, run_e = _merge_sorted(weights, ids, sep_w, sep_e)
        parts = sum_parts(run_w)
        return direction.reshape(rows, cols), run_e, run_w, parts, run_e.size
    typed = np.ascontiguousarray(values, dtype=weight_dtype).reshape(-1)
    weights = _mask_weights(mask, typed, rows, cols, weight_index,
                            typed.dtype.type(0.5))
    parts = sum_parts(sep_w, sum_parts(weights))
    return (direction.reshape(rows, cols), None, None, parts,
            weights.size + sep_w.size)


@njit(cache=True, nogil=True)
def _surviving(local_id, weight, mask, cols, row0, col0, raster_cols):
    """The MSF entries still in ``mask``, as global edge ids (order kept)."""
    keep = 0
    for k in range(local_id.size):
        low = np.int64(local_id[k]) >> 2
        if mask[low] & (1 << (np.int64(local_id[k]) & 3)):
            keep += 1
    ids = np.empty(keep, dtype=np.int64)
    weights = np.empty(keep, dtype=weight.dtype)
    j = 0
    for k in range(local_id.size):
        low = np.int64(local_id[k]) >> 2
        rank = np.int64(local_id[k]) & 3
        if mask[low] & (1 << rank):
            r = low // cols
            ids[j] = ((row0 + r) * raster_cols + col0 + low - r * cols) * 4 + rank
            weights[j] = weight[k]
            j += 1
    return ids, weights


@njit(cache=True, nogil=True)
def _merge_sorted(w1, e1, w2, e2):
    """Merge two lists sorted by (weight, edge id)."""
    n1 = w1.size
    n2 = w2.size
    out_w = np.empty(n1 + n2, dtype=w1.dtype)
    out_e = np.empty(n1 + n2, dtype=np.int64)
    i = 0
    j = 0
    for k in range(n1 + n2):
        if j >= n2 or (i < n1 and _lighter(w1[i], e1[i], w2[j], e2[j])):
            out_w[k] = w1[i]
            out_e[k] = e1[i]
            i += 1
        else:
            out_w[k] = w2[j]
            out_e[k] = e2[j]
            j += 1
    return out_w, out_e
