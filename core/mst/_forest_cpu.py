"""Parent directions and piece labels of a spanning forest, on all cores.

Given the tree edges of a forest on the grid (rows ``(low, high)`` of
row-major cell indices), every tree is rooted at its lowest-index cell and
each cell gets the direction toward its parent (the next cell on the tree
path to the root); :func:`label_forest` numbers the trees in scan order of
their roots.  The parent of a cell does not depend on the order of any
search, only on the root, so the result is the same bit for bit whatever
the number of threads.

How it runs in parallel.  The rows are cut into bands.  Each band searches
its own part of the forest depth-first (edges inside the band only, in
parallel with the other bands), from its lowest unseen cell on: every band
*piece* is rooted at its lowest cell, and each cell records the direction
toward its piece parent.  Pieces are numbered band by band in scan order of
their roots, so a lower piece number means a lower root cell.  The tree
edges that cross band borders join pieces into the trees of the whole
forest; a sequential search over that small graph of pieces, started from
each tree's lowest-numbered piece, finds through which edge every other
piece hangs from its tree.  Such a piece is re-rooted at that edge's end by
reversing the directions on its path from there to its band root (pieces
are disjoint, so these paths add up to at most the cell count, and the
bands re-root in parallel).
"""

import numba
import numpy as np
from numba import njit, prange

from .._common import index_dtype
from ..errors import InvalidInputError
from . import PARENT_DEGREES, PARENT_OFFSETS

# Cells each band searches per kernel call between progress reports.
_TRAVERSAL_BUDGET = 1 << 21

# Below this many cells one band (one thread) does it all; tests lower it.
_PARALLEL_MIN_CELLS = 1 << 16

# Bands per thread: more bands balance uneven forests better and cost more
# border pieces (a few per column of each border).
_BANDS_PER_THREAD = 4

# Neighbour k of a cell is at PARENT_OFFSETS[k] (E, N, W, S, NE, NW, SW, SE);
# bit k of a cell's tree mask says the tree edge toward it exists.
_OPPOSITE = np.array([2, 3, 0, 1, 6, 7, 4, 5], dtype=np.int64)
# Direction codes of cells: 0..7 toward the parent, or one of these.
_ROOT = 8
_NOT_VALID = 255
# The plane of an edge from its low end (0 right, 1 down-left, 2 down,
# 3 down-right), by the direction k from low to high (E 0, S 3, SW 6, SE 7).
_PLANE_OF = np.array([0, -1, -1, 2, -1, -1, 1, 3], dtype=np.int64)


@njit(cache=True, nogil=True, parallel=True)
def _edge_planes(edges, valid_flat, cols, planes, bad):
    """``planes[p, low] = 1`` for each edge from ``low`` in plane p.

    Every (low, plane) pair is one edge, so chunks of the edge list write
    distinct bytes and run in parallel.  ``bad[t]`` gets -1, or the row of
    an edge of chunk t that does not join two valid neighbouring cells.
    """
    n = valid_flat.size
    n_chunks = bad.size
    n_edges = edges.shape[0]
    # the column of a cell without an integer division (slow, and one per
    # edge): a float64 quotient is exact or one off below 2**52 cells
    inverse_cols = 1.0 / cols
    for t in prange(n_chunks):
        bad[t] = -1
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            low = min(edges[i, 0], edges[i, 1])
            high = max(edges[i, 0], edges[i, 1])
            if low < 0 or high >= n:
                bad[t] = i
                break
            row = np.int64(low * inverse_cols)
            col = low - row * cols
            if col < 0:
                col += cols
            elif col >= cols:
                col -= cols
            step = high - low
            if step == 1 and col + 1 < cols:
                plane = 0
            elif step == cols - 1 and col > 0:
                plane = 1
            elif step == cols:
                plane = 2
            elif step == cols + 1 and col + 1 < cols:
                plane = 3
            else:
                bad[t] = i
                break
            if not (valid_flat[low] and valid_flat[high]):
                bad[t] = i
                break
            planes[plane, low] = 1


@njit(cache=True, nogil=True, parallel=True)
def _masks_from_planes(planes, rows, cols, masks):
    """Bit k of ``masks[v]``: the tree edge from v toward neighbour k."""
    for r in prange(rows):
        for c in range(cols):
            v = np.int64(r) * cols + c
            mask = planes[0, v] | (planes[2, v] << 3) | (planes[1, v] << 6) \
                | (planes[3, v] << 7)
            if c > 0:
                mask |= planes[0, v - 1] << 2
            if r > 0:
                up = v - cols
                mask |= planes[2, up] << 1
                if c + 1 < cols:
                    mask |= planes[1, up + 1] << 4
                if c > 0:
                    mask |= planes[3, up - 1] << 5
            masks[v] = mask


@njit(cache=True, nogil=True, parallel=True)
def _masks_from_low_bits(low_bits, rows, cols, masks):
    """:func:`_masks_from_planes` from one byte per cell whose bit p is the
    edge of plane p from that cell (the tiled MST's forest bitmask; its
    bits 4-7 are ignored)."""
    for r in prange(rows):
        for c in range(cols):
            v = np.int64(r) * cols + c
            bits = np.int64(low_bits[v])
            mask = (bits & 1) | (((bits >> 2) & 1) << 3) \
                | (((bits >> 1) & 1) << 6) | (((bits >> 3) & 1) << 7)
            if c > 0:
                mask |= (np.int64(low_bits[v - 1]) & 1) << 2
            if r > 0:
                up = v - cols
                mask |= ((np.int64(low_bits[up]) >> 2) & 1) << 1
                if c + 1 < cols:
                    mask |= ((np.int64(low_bits[up + 1]) >> 1) & 1) << 4
                if c > 0:
                    mask |= ((np.int64(low_bits[up - 1]) >> 3) & 1) << 5
            masks[v] = mask


@njit(cache=True, nogil=True, parallel=True)
def _search_bands(masks, valid_flat, band_cells, steps, state, budget, stack,
                  piece, code):
    """Depth-first search of each band's pieces, bands in parallel.

    Band b holds cells ``band_cells[b]:band_cells[b + 1]`` and uses that
    slice of ``stack``.  Resumable: ``state[b]`` = (next root candidate,
    stack size, pieces so far) persists between calls, and each band
    returns after about ``budget`` cells.  ``piece`` (zeros on entry) gets
    each cell's piece number within its band (1, 2, ...), ``code`` the
    direction code toward its piece parent.
    """
    n_bands = band_cells.size - 1
    for b in prange(n_bands):
        first = band_cells[b]
        stop = band_cells[b + 1]
        next_root = state[b, 0]
        top = state[b, 1]
        pieces = state[b, 2]
        done = 0
        while done < budget:
            if top == 0:
                # scanning upward, the first unseen valid cell is the lowest
                # of its piece: earlier cells would have reached it
                while next_root < stop and (piece[next_root] != 0
                                            or not valid_flat[next_root]):
                    next_root += 1
                if next_root == stop:
                    break
                pieces += 1
                piece[next_root] = pieces
                code[next_root] = _ROOT
                stack[first] = next_root
                top = 1
            top -= 1
            v = stack[first + top]
            done += 1
            mask = masks[v]
            for k in range(8):
                if (mask & (1 << k)) == 0:
                    continue
                u = v + steps[k]
                if u < first or u >= stop or piece[u] != 0:
                    continue
                piece[u] = pieces
                code[u] = _OPPOSITE[k]
                stack[first + top] = u
                top += 1
        state[b, 0] = next_root
        state[b, 1] = top
        state[b, 2] = pieces


@njit(cache=True, nogil=True)
def _join_pieces(masks, band_cells, cols, steps, piece, piece_offset):
    """Hang the band pieces together along the tree edges across band
    borders.

    Returns, per piece (global number = ``piece_offset[band] + piece - 1``):
    its tree's lowest-numbered piece, and for the others the cell through
    which it hangs from its tree (-1 for none) with the direction code
    from there across the border.
    """
    n_pieces = piece_offset[-1]
    n_bands = band_cells.size - 1
    # the border edges, from the last row of band b into band b + 1
    n_border = 0
    for b in range(n_bands - 1):
        for v in range(band_cells[b + 1] - cols, band_cells[b + 1]):
            for k in (3, 6, 7):
                if masks[v] & (1 << k):
                    n_border += 1
    piece_a = np.empty(n_border, dtype=np.int64)
    piece_b = np.empty(n_border, dtype=np.int64)
    cell_a = np.empty(n_border, dtype=np.int64)
    direction_ab = np.empty(n_border, dtype=np.int64)
    degree = np.zeros(n_pieces + 1, dtype=np.int64)
    j = 0
    for b in range(n_bands - 1):
        for v in range(band_cells[b + 1] - cols, band_cells[b + 1]):
            for k in (3, 6, 7):
                if masks[v] & (1 << k):
                    u = v + steps[k]
                    piece_a[j] = piece_offset[b] + piece[v] - 1
                    piece_b[j] = piece_offset[b + 1] + piece[u] - 1
                    cell_a[j] = v
                    direction_ab[j] = k
                    degree[piece_a[j] + 1] += 1
                    degree[piece_b[j] + 1] += 1
                    j += 1
    for p in range(n_pieces):
        degree[p + 1] += degree[p]
    # adjacency: border edge j seen from piece a is 2j, from piece b 2j + 1
    adjacent = np.empty(2 * n_border, dtype=np.int64)
    fill = degree[:-1].copy()
    for j in range(n_border):
        adjacent[fill[piece_a[j]]] = 2 * j
        fill[piece_a[j]] += 1
        adjacent[fill[piece_b[j]]] = 2 * j + 1
        fill[piece_b[j]] += 1
    root_piece = np.arange(n_pieces)
    entry_cell = np.full(n_pieces, -1, dtype=np.int64)
    entry_code = np.zeros(n_pieces, dtype=np.uint8)
    seen = np.zeros(n_pieces, dtype=np.bool_)
    stack = np.empty(max(n_pieces, 1), dtype=np.int64)
    for p in range(n_pieces):
        if seen[p] or degree[p] == degree[p + 1]:
            continue
        seen[p] = True
        stack[0] = p
        top = 1
        while top > 0:
            top -= 1
            q = stack[top]
            for i in range(degree[q], degree[q + 1]):
                j = adjacent[i] >> 1
                if adjacent[i] & 1:  # q holds the high end: go up
                    other = piece_a[j]
                    cell = cell_a[j]
                    code = direction_ab[j]
                else:
                    other = piece_b[j]
                    cell = cell_a[j] + steps[direction_ab[j]]
                    code = _OPPOSITE[direction_ab[j]]
                if seen[other]:
                    continue
                seen[other] = True
                root_piece[other] = p
                entry_cell[other] = cell
                entry_code[other] = code
                stack[top] = other
                top += 1
    return root_piece, entry_cell, entry_code


@njit(cache=True, nogil=True, parallel=True)
def _reroot(piece_offset, entry_cell, entry_code, steps, code):
    """Re-root each piece that hangs from another at its entry cell: the
    directions on the path from there to its band root turn around."""
    n_bands = piece_offset.size - 1
    for b in prange(n_bands):
        for p in range(piece_offset[b], piece_offset[b + 1]):
            x = entry_cell[p]
            if x < 0:
                continue
            _turn_path(code, x, np.int64(entry_code[p]), steps)


@njit(cache=True, nogil=True, parallel=True)
def _reroot_at(cells, steps, code):
    """Re-root the tree of each of ``cells`` (one cell per tree) there: the
    directions on the path from it to its root turn around."""
    for i in prange(cells.size):
        _turn_path(code, np.int64(cells[i]), np.int64(_ROOT), steps)


@njit(cache=True, nogil=True, inline="always")
def _turn_path(code, x, toward, steps):
    """Point x at ``toward`` and turn the directions on the path from x to
    its root around (the root then points back along it)."""
    while True:
        old = np.int64(code[x])
        code[x] = toward
        if old == _ROOT:
            break
        toward = _OPPOSITE[old]
        x += steps[old]


@njit(cache=True, nogil=True, parallel=True)
def _directions(code, degrees, direction):
    for v in prange(code.size):
        c = code[v]
        if c == _NOT_VALID:
            direction[v] = np.nan
        elif c == _ROOT:
            direction[v] = 0.0
        else:
            direction[v] = degrees[c]


@njit(cache=True, nogil=True, parallel=True)
def _labels(band_cells, piece, piece_offset, tree_number, labels):
    for b in prange(band_cells.size - 1):
        for v in range(band_cells[b], band_cells[b + 1]):
            p = piece[v]
            labels[v] = 0 if p == 0 else tree_number[piece_offset[b] + p - 1]


def _band_rows(rows, n_cells, bands):
    if bands is None:
        bands = 1 if n_cells < _PARALLEL_MIN_CELLS else \
            _BANDS_PER_THREAD * numba.get_num_threads()
    bands = max(1, min(int(bands), rows))
    return np.linspace(0, rows, bands + 1).round().astype(np.int64)


def _check_edges(edges, valid_flat, cols, n_bands):
    """The edges as planes of bytes (see :func:`_edge_planes`); raises on an
    edge that does not join valid neighbours, naming the first such."""
    n = valid_flat.size
    n_chunks = max(1, min(n_bands, len(edges) // _PARALLEL_MIN_CELLS))
    planes = np.zeros((4, n), dtype=np.uint8)
    bad = np.empty(n_chunks, dtype=np.int64)
    _edge_planes(edges, valid_flat, cols, planes, bad)
    if bad.max() >= 0:
        bad = int(bad[bad >= 0].min())
        low, high = sorted(int(x) for x in edges[bad])
        if low < 0 or high >= n:
            raise InvalidInputError(
                f"edge {bad} joins cells {low} and {high}: edge ends must be "
                f"cell indices in [0, {n})")
        raise InvalidInputError(
            f"edge {bad} joins cells {low} (row {low // cols}, column "
            f"{low % cols}) and {high} (row {high // cols}, column "
            f"{high % cols}), which are not valid neighbours; edges must "
            "join neighbouring valid cells")
    return planes


def walk_forest(edges, valid, progress, want_direction, want_labels,
                bands=None):
    """(direction, labels, trees) of the forest ``edges`` on ``valid``.

    ``direction`` (float32, the shape of ``valid``) and ``labels``
    (index dtype) are None unless wanted; ``bands`` fixes the number of
    bands (tests use it to put borders in small rasters).
    """
    edges = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    return _walk_forest(
        lambda valid_flat, cols, n_bands: _check_edges(edges, valid_flat,
                                                       cols, n_bands),
        valid, progress, want_direction, want_labels, bands)


def walk_forest_ids(edge_id, valid, progress, want_direction, want_labels,
                    bands=None):
    """:func:`walk_forest` of the tree edges given by their ids (``low * 4
    + plane``, as ``_cpu.unsorted_forest`` returns them, in any order):
    no edge list to build or check.  The ids must be distinct edges
    between valid cells."""
    edge_id = np.ascontiguousarray(edge_id, dtype=np.int64).reshape(-1)

    def planes_of(valid_flat, cols, n_bands):
        planes = np.zeros((4, valid_flat.size), dtype=np.uint8)
        _planes_from_ids(edge_id, planes)
        return planes

    return _walk_forest(planes_of, valid, progress, want_direction,
                        want_labels, bands)


@njit(cache=True, nogil=True, parallel=True)
def _planes_from_ids(edge_id, planes):
    """``planes[id & 3, id >> 2] = 1``: an edge id is its low cell and
    plane (distinct edges write distinct bytes)."""
    for i in prange(edge_id.size):
        e = edge_id[i]
        planes[e & 3, e >> 2] = 1


def _walk_forest(planes_of, valid, progress, want_direction, want_labels,
                 bands):
    valid = np.ascontiguousarray(valid, dtype=bool)
    rows, cols = valid.shape
    n = valid.size
    valid_flat = valid.reshape(-1)
    band_rows = _band_rows(rows, n, bands)
    n_bands = band_rows.size - 1
    previous_threads = numba.get_num_threads()
    if n_bands == 1:
        numba.set_num_threads(1)
    try:
        planes = planes_of(valid_flat, max(cols, 1), n_bands)
        direction, labels, trees = _walk(
            planes, valid_flat, rows, max(cols, 1), band_rows, progress,
            want_direction, want_labels)
    finally:
        numba.set_num_threads(previous_threads)
    if direction is not None:
        direction = direction.reshape(valid.shape)
    if labels is not None:
        labels = labels.reshape(valid.shape)
    return direction, labels, trees


def walk_tile_forest(low_bits, valid_flat, rows, cols, want_direction,
                     want_labels, roots=None):
    """:func:`walk_forest` of a forest given as one byte per cell whose bit
    p is the edge of plane p (0 right, 1 down-left, 2 down, 3 down-right)
    from that cell (bits 4-7 ignored): the tiled MST's tile forests.

    ``roots`` (cells, degrees), at most one cell per tree: those trees are
    rooted there instead of at their lowest cell, and those cells get
    these degrees instead of 0 (a tile piece whose parent lies in another
    tile).  Returns (direction, labels, trees), flat.
    """
    n = valid_flat.size
    band_rows = _band_rows(rows, n, None)
    previous_threads = numba.get_num_threads()
    if band_rows.size == 2:
        numba.set_num_threads(1)
    try:
        if n == 0:
            return _walk(None, valid_flat, rows, cols, band_rows, None,
                         want_direction, want_labels)
        masks = np.empty(n, dtype=np.uint8)
        _masks_from_low_bits(low_bits, rows, cols, masks)
        return _walk_masks(masks, valid_flat, rows, cols, band_rows, None,
                           want_direction, want_labels, roots)
    finally:
        numba.set_num_threads(previous_threads)


def _walk(planes, valid_flat, rows, cols, band_rows, progress, want_direction,
          want_labels):
    n = valid_flat.size
    if n == 0:
        return (np.empty(0, np.float32) if want_direction else None,
                np.empty(0, index_dtype(0)) if want_labels else None, 0)
    masks = np.empty(n, dtype=np.uint8)
    _masks_from_planes(planes, rows, cols, masks)
    del planes
    return _walk_masks(masks, valid_flat, rows, cols, band_rows, progress,
                       want_direction, want_labels)


def tile_forest_codes(low_bits, valid_flat, rows, cols):
    """The forest of :func:`walk_tile_forest` rooted at each tree's lowest
    cell: (code, masks, steps): per cell the direction code toward its
    parent (0..7, neighbour k at ``steps[k]``; ``ROOT`` at roots,
    ``NOT_VALID`` on invalid cells) and its bits of tree edges toward
    each neighbour k."""
    n = valid_flat.size
    band_rows = _band_rows(rows, n, None)
    previous_threads = numba.get_num_threads()
    if band_rows.size == 2:
        numba.set_num_threads(1)
    try:
        masks = np.empty(n, dtype=np.uint8)
        if n:
            _masks_from_low_bits(low_bits, rows, cols, masks)
        code, steps = _walk_masks(masks, valid_flat, rows, cols, band_rows,
                                  None, False, False, want_codes=True)
    finally:
        numba.set_num_threads(previous_threads)
    return code, masks, steps


ROOT = _ROOT
NOT_VALID = _NOT_VALID
OPPOSITE = _OPPOSITE


def _walk_masks(masks, valid_flat, rows, cols, band_rows, progress,
                want_direction, want_labels, roots=None, want_codes=False):
    n = valid_flat.size
    n_bands = band_rows.size - 1
    if progress is not None:
        progress(0.1)
    steps = (PARENT_OFFSETS[:, 0] * cols + PARENT_OFFSETS[:, 1]).astype(
        np.int64)
    band_cells = band_rows * cols if n else np.zeros_like(band_rows)
    state = np.zeros((n_bands, 3), dtype=np.int64)
    state[:, 0] = band_cells[:-1]
    piece = np.zeros(n, dtype=index_dtype(n))
    code = np.full(n, _NOT_VALID, dtype=np.uint8)
    stack = np.empty(max(n, 1), dtype=index_dtype(n))
    done = 0
    while True:
        _search_bands(masks, valid_flat, band_cells, steps, state,
                      _TRAVERSAL_BUDGET, stack, piece, code)
        if np.all(state[:, 0] == band_cells[1:]) and not state[:, 1].any():
            break
        done += _TRAVERSAL_BUDGET * n_bands
        if progress is not None:
            progress(min(0.1 + 0.8 * done / max(n, 1), 0.9))
    del stack
    piece_offset = np.zeros(n_bands + 1, dtype=np.int64)
    np.cumsum(state[:, 2], out=piece_offset[1:])
    root_piece, entry_cell, entry_code = _join_pieces(
        masks, band_cells, cols, steps, piece, piece_offset)
    del masks
    if want_codes:
        _reroot(piece_offset, entry_cell, entry_code, steps, code)
        return code, steps
    trees = int(np.count_nonzero(root_piece == np.arange(root_piece.size)))
    direction = labels = None
    if want_direction:
        _reroot(piece_offset, entry_cell, entry_code, steps, code)
        if roots is not None:
            _reroot_at(np.ascontiguousarray(roots[0], dtype=np.int64), steps,
                       code)
        direction = np.empty(n, dtype=np.float32)
        _directions(code, PARENT_DEGREES, direction)
        if roots is not None:
            direction[roots[0]] = roots[1]
    if want_labels:
        is_root = root_piece == np.arange(root_piece.size)
        tree_number = np.cumsum(is_root, dtype=np.int64)[root_piece]
        labels = np.empty(n, dtype=index_dtype(n))
        _labels(band_cells, piece, piece_offset, tree_number, labels)
    if progress is not None:
        progress(1.0)
    return direction, labels, trees


def parent_direction(edges, valid, progress, bands=None):
    """Direction from each valid cell toward its parent in the forest.

    The parent is the next cell on the tree path to the tree's lowest-index
    cell (its root).  Degrees counter-clockwise from east (PARENT_OFFSETS /
    PARENT_DEGREES: E 360, N 90, W 180, S 270, NE 45, NW 135, SW 225,
    SE 315); 0 at roots; NaN on invalid cells.  Returns a float32 raster
    the shape of ``valid``.
    """
    direction, _, _ = walk_forest(edges, valid, progress, True, False, bands)
    return direction


def label_forest(edges, valid, bands=None):
    """Label the pieces of the graph of valid cells joined by ``edges``.

    Returns ``(labels, count)``: labels 1..count in scan order of each
    piece's first cell, 0 on invalid cells; int32, or int64 when the raster
    has 2**31 - 1 cells or more.
    """
    _, labels, count = walk_forest(edges, valid, None, False, True, bands)
    return labels, count
