"""Round 2 of the tiled MST: separator edges and the merge hierarchy."""

import numpy as np

from ... import tiling
from ..._common import Progress
from .forest import (Graph, _boundary_of, _compress, _kruskal, _weights,
                     empty_graph)

# --------------------------------------------------------------------------
# round 2: separators and the hierarchy


def _pair_level(tile_a, tile_b):
    """Level of the smallest block holding both tiles, and that block."""
    h = 0
    (ra, ca), (rb, cb) = tile_a, tile_b
    while (ra >> h, ca >> h) != (rb >> h, cb >> h):
        h += 1
    return h, (ra >> h, ca >> h)


def separator_edges(grid, messages, connectivity, weight_index, weight_dtype):
    """Every grid edge between two tiles, grouped by the block where the
    two tiles first meet: {(level, block_row, block_col): (a, b, w, e)}."""
    rows, cols = grid.shape
    half = np.dtype(weight_dtype).type(0.5)
    eight = connectivity == 8
    groups = {}

    def add(tile_a, tile_b, low, high, rank, va, vb, ok):
        if not ok.any():
            return
        low, high, rank, va, vb = low[ok], high[ok], rank[ok], va[ok], vb[ok]
        w = _weights(va, vb, weight_index, half)
        key = _pair_level(tile_a, tile_b)
        groups.setdefault(key, []).append((low, high, w, low * 4 + rank))

    for (tr, tc), msg in messages.items():
        window = grid.window(tr, tc)
        right = messages.get((tr, tc + 1))
        if right is not None:
            i = np.arange(window.rows, dtype=np.int64)
            a_cells = (window.row + i) * cols + window.col + window.cols - 1
            b_cells = a_cells + 1
            va, vb = msg.right, right.left
            oka, okb = msg.right_valid, right.left_valid
            add((tr, tc), (tr, tc + 1), a_cells, b_cells, np.zeros_like(i),
                va, vb, oka & okb)
            if eight and window.rows > 1:
                # a cell and the next tile's cell one row down (rank 3) ...
                add((tr, tc), (tr, tc + 1), a_cells[:-1], b_cells[1:],
                    np.full(i.size - 1, 3), va[:-1], vb[1:],
                    oka[:-1] & okb[1:])
                # ... and one row up: that cell is the low end (rank 1)
                add((tr, tc), (tr, tc + 1), b_cells[:-1], a_cells[1:],
                    np.full(i.size - 1, 1), vb[:-1], va[1:],
                    okb[:-1] & oka[1:])
        below = messages.get((tr + 1, tc))
        if below is not None:
            j = np.arange(window.cols, dtype=np.int64)
            a_cells = (window.row + window.rows - 1) * cols + window.col + j
            b_cells = a_cells + cols
            va, vb = msg.bottom, below.top
            oka, okb = msg.bottom_valid, below.top_valid
            add((tr, tc), (tr + 1, tc), a_cells, b_cells, np.full(j.size, 2),
                va, vb, oka & okb)
            if eight and window.cols > 1:
                add((tr, tc), (tr + 1, tc), a_cells[:-1], b_cells[1:],
                    np.full(j.size - 1, 3), va[:-1], vb[1:],
                    oka[:-1] & okb[1:])
                add((tr, tc), (tr + 1, tc), a_cells[1:], b_cells[:-1],
                    np.full(j.size - 1, 1), va[1:], vb[:-1],
                    oka[1:] & okb[:-1])
        if eight:
            diagonal = messages.get((tr + 1, tc + 1))
            if diagonal is not None:
                corner = (window.row + window.rows - 1) * cols \
                    + window.col + window.cols - 1
                add((tr, tc), (tr + 1, tc + 1), np.array([corner]),
                    np.array([corner + cols + 1]), np.array([3]),
                    msg.bottom[-1:], diagonal.top[:1],
                    msg.bottom_valid[-1:] & diagonal.top_valid[:1])
            anti = messages.get((tr + 1, tc - 1))
            if anti is not None:
                corner = (window.row + window.rows - 1) * cols + window.col
                add((tr, tc), (tr + 1, tc - 1), np.array([corner]),
                    np.array([corner + cols - 1]), np.array([1]),
                    msg.bottom[:1], anti.top[-1:],
                    msg.bottom_valid[:1] & anti.top_valid[-1:])
    result = {}
    for key, parts in groups.items():
        result[key] = tuple(np.concatenate([p[k] for p in parts])
                            for k in range(4))
    return result


def merge_hierarchy(grid, messages, separators, weight_dtype, progress=None,
                    executor=None):
    """Round 2: MSF level by level; returns the removed original edge ids
    (sorted).

    The blocks of one level are independent 2 x 2 merges
    (:func:`merge_block`), run as tasks on ``executor``; each level takes
    the compressed graphs the level below returned.
    """
    top = grid.levels
    progress = progress if progress is not None else Progress()
    empty = empty_graph(weight_dtype)
    graphs = {tile: msg.graph for tile, msg in messages.items()}
    removed = []
    total_blocks = sum(-(-grid.tile_rows // (1 << h))
                       * -(-grid.tile_cols // (1 << h))
                       for h in range(1, top + 1)) or 1
    blocks_done = 0
    for h in range(1, top + 1):
        blocks = [(by, bx) for by in range(-(-grid.tile_rows // (1 << h)))
                  for bx in range(-(-grid.tile_cols // (1 << h)))]
        tasks = []
        for by, bx in blocks:
            parts = [graphs.get((2 * by + dy, 2 * bx + dx), empty)
                     for dy in (0, 1) for dx in (0, 1)]
            parts.append(separators.get((h, (by, bx)), empty))
            tasks.append((h, by, bx, parts, top, grid.tile_size, grid.shape,
                          weight_dtype))
        level = {}

        def keep(index, result):
            graph, level_removed = result
            if graph is not None:
                level[blocks[index]] = graph
            if level_removed is not None:
                removed.append(level_removed)

        tiling.run_tasks(merge_block, tasks, executor if len(tasks) > 1
                         else None,
                         progress.span(blocks_done / total_blocks,
                                       (blocks_done + len(tasks))
                                       / total_blocks),
                         on_result=keep)
        blocks_done += len(tasks)
        graphs = level
    if not removed:
        return np.empty(0, np.int64)
    return np.sort(np.concatenate(removed))


def merge_block(h, block_row, block_col, parts, top, tile_size, shape,
                weight_dtype):
    """One block of level ``h`` (pure): the MSF (Kruskal) of its four
    children's compressed graphs and the separator edges between them
    (``parts``: five (a, b, w, e) tuples), compressed against the block's
    boundary.

    Returns ``(graph, removed)``: the compressed graph (None when empty or
    at the top level) and the original edge ids left out of the MSF (None
    when the block has no edge).
    """
    rows, cols = shape
    a, b, w, e = (np.concatenate([p[k] for p in parts]) for k in range(4))
    if a.size == 0:
        return None, None
    vertices, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    local_a, local_b = inverse[:a.size], inverse[a.size:]
    order = np.lexsort((e, w))
    kept = _kruskal(vertices.size, local_a, local_b, order)
    removed = e[~kept]
    if h == top:
        return None, removed
    span = tile_size << h
    row0, col0 = block_row * span, block_col * span
    boundary = _boundary_of(vertices, cols, row0, min(row0 + span, rows),
                            col0, min(col0 + span, cols), shape)
    ca, cb, cw, ce = _compress(vertices.size, local_a[kept], local_b[kept],
                               w[kept], e[kept], boundary)
    return Graph(vertices[ca], vertices[cb], cw, ce), removed
