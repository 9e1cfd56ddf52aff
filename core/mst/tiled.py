"""Minimum spanning forest on the block hierarchy (out-of-core).

Haverkort's I/O-efficient grid MST (references in docs/architecture.md):

1. Leaf tiles (:func:`leaf_tile`, per tile): the in-memory kernel gives the
   tile's minimum spanning forest (MSF), kept in the scratch folder.  The
   forest is then *compressed* against the tile's boundary (the cells with
   a neighbour in another tile): dead ends -- branches with no boundary
   cell -- are dropped (Observation 3: they belong to the final forest),
   and every path whose inner vertices are non-boundary cells of degree 2 is
   replaced by one edge keyed by the path's heaviest edge (Observation 4).
   What remains has O(tile side) edges.
2. Levels (:func:`merge_hierarchy`): a block of 2 x 2 children takes their
   compressed graphs plus the separator edges between them (original grid
   edges, found from the tiles' border lines), computes their MSF
   (Kruskal; Observation 2) and compresses it against its own boundary, up
   to the block covering the raster.
3. Expansion.  Every edge is keyed by (weight, low, high) of an original
   edge -- for a contracted path, of its heaviest original edge -- so an
   edge left out of some level's MSF removes exactly that one original
   edge from the final forest, and everything else stays (a kept path keeps
   all its edges, a dropped path all but its heaviest).  The final forest
   is therefore the union of the tile forests and the separator edges,
   minus the set of removed original edges; no per-level records are
   needed to expand.  Per tile the final forest is rebuilt from scratch,
   its pieces are rooted so that every cell points toward its tree's
   lowest-index cell (the piece tree across tiles is solved in memory),
   and the edges are written as sorted runs that a k-way merge turns into
   the (weight, low, high)-ordered edge list.  Without an edge list
   (``edges=False``) a tile keeps its forest as one byte per cell, and
   round 3 only counts and sums its final edges: the total is an exact
   sum (``_cpu.sum_parts``), so the order of the tiles does not matter.

Tile tasks run through ``tiling.run_tasks``: in threads when an executor is
given (the kernels release the GIL).  With the CUDA backend one GPU solve
runs at a time (``_GPU_LOCK``) while the other threads do the CPU work
around it.

Edge keys: ``edge_id = low * 4 + rank`` (rank 0 right, 1 down-left, 2 down,
3 down-right), as in the in-memory kernel; (weight, edge_id) orders as
(weight, low, high), NaN weights last.
"""

import concurrent.futures
import functools
import os
import threading

import numpy as np
from numba import njit

from .. import distributed, tiling
from .._common import Progress, valid_mask
from . import PARENT_DEGREES, PARENT_OFFSETS, edge_list
from .._unionfind import find_root as _find
from ._cpu import _edge_weight, _lighter, sum_parts, sum_parts_size, \
    total_from_parts

# A leaf tile: values and valid mask (5), the kernel's working set (about
# 60 bytes per cell: lightest edges, components, cut edges, chosen edges),
# the local edge ids, the forest's bitmask and the typed values (~15), and
# slack for the kernel's sort.
TILE_BYTES_PER_CELL = 96
# The in-memory run: the kernel's working set plus the sorted edge list
# (20 per edge) and the parent-direction pass (adjacency and BFS, 40).
IN_MEMORY_BYTES_PER_CELL = 130
# Edges per chunk of the final k-way merge (the output is flushed to the
# sinks chunk by chunk).
MERGE_CHUNK = 8192 * 128
MERGE_RUN_BUFFER = 1 << 16
# Progress spans of the rounds (the edge list's merge takes the rest).
LEAF_SPAN = (0.0, 0.5)
HIERARCHY_SPAN = (0.5, 0.6)
PIECES_SPAN = (0.6, 0.7)
FINISH_SPAN = (0.7, 0.85)

# One CUDA solve at a time: tile threads share the device (its memory is
# sized for one tile's solve) and numba's CUDA layer is not meant to be
# driven from several threads at once; the CPU work of the other threads
# goes on meanwhile.
_GPU_LOCK = threading.Lock()


def plan(values, band, tile_size, memory_limit_mb, executor):
    """The tiled plan for these options, or None for the in-memory path."""
    # a tile's working set shares the budget with the scratch store (0.3)
    # only; the final merge buffers come after the tiles
    return tiling.plan_for(values, band, tile_size, memory_limit_mb, executor,
                           IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL,
                           tile_share=0.4)


# --------------------------------------------------------------------------
# edge keys and compression


@njit(cache=True, nogil=True, inline="always")
def _heavier(w1, e1, w2, e2):
    return _lighter(w2, e2, w1, e1)


@njit(cache=True, nogil=True)
def _compress(n_vertices, end_a, end_b, weight, edge_id, boundary):
    """Drop dead ends and contract degree-2 paths of a forest.

    Vertices are 0..n_vertices-1; ``boundary`` marks those that must stay.
    Returns (a, b, weight, edge_id) of the compressed forest: one edge per
    maximal path between kept vertices (boundary, or degree other than 2
    once dead ends are gone), keyed by the path's heaviest edge.
    """
    n_edges = end_a.size
    degree = np.zeros(n_vertices, dtype=np.int64)
    for e in range(n_edges):
        degree[end_a[e]] += 1
        degree[end_b[e]] += 1
    start = np.zeros(n_vertices + 1, dtype=np.int64)
    for v in range(n_vertices):
        start[v + 1] = start[v] + degree[v]
    fill = start[:-1].copy()
    incident = np.empty(2 * n_edges, dtype=np.int64)
    for e in range(n_edges):
        incident[fill[end_a[e]]] = e
        fill[end_a[e]] += 1
        incident[fill[end_b[e]]] = e
        fill[end_b[e]] += 1
    gone = np.zeros(n_edges, dtype=np.bool_)
    # Observation 3: strip dead ends, leaf by leaf
    stack = np.empty(n_vertices, dtype=np.int64)
    top = 0
    for v in range(n_vertices):
        if degree[v] == 1 and not boundary[v]:
            stack[top] = v
            top += 1
    while top > 0:
        top -= 1
        v = stack[top]
        if degree[v] != 1:
            continue
        for k in range(start[v], start[v + 1]):
            e = incident[k]
            if not gone[e]:
                gone[e] = True
                degree[v] = 0
                u = end_b[e] if end_a[e] == v else end_a[e]
                degree[u] -= 1
                if degree[u] == 1 and not boundary[u]:
                    stack[top] = u
                    top += 1
                break
    # Observation 4: contract paths through non-boundary degree-2 vertices
    out_a = np.empty(n_edges, dtype=np.int64)
    out_b = np.empty(n_edges, dtype=np.int64)
    out_w = np.empty(n_edges, dtype=weight.dtype)
    out_e = np.empty(n_edges, dtype=np.int64)
    walked = np.zeros(n_edges, dtype=np.bool_)
    count = 0
    for s in range(n_vertices):
        if degree[s] == 0 or (degree[s] == 2 and not boundary[s]):
            continue
        for k in range(start[s], start[s + 1]):
            e = incident[k]
            if gone[e] or walked[e]:
                continue
            walked[e] = True
            heavy_w = weight[e]
            heavy_e = edge_id[e]
            here = end_b[e] if end_a[e] == s else end_a[e]
            while degree[here] == 2 and not boundary[here]:
                for j in range(start[here], start[here + 1]):
                    f = incident[j]
                    if not gone[f] and not walked[f]:
                        break
                walked[f] = True
                if _heavier(weight[f], edge_id[f], heavy_w, heavy_e):
                    heavy_w = weight[f]
                    heavy_e = edge_id[f]
                here = end_b[f] if end_a[f] == here else end_a[f]
            out_a[count] = s
            out_b[count] = here
            out_w[count] = heavy_w
            out_e[count] = heavy_e
            count += 1
    return out_a[:count], out_b[:count], out_w[:count], out_e[:count]


@njit(cache=True, nogil=True)
def _kruskal(n_vertices, end_a, end_b, order):
    """Kruskal over edges taken in ``order``; True for the forest's edges."""
    parent = np.arange(n_vertices)
    kept = np.zeros(end_a.size, dtype=np.bool_)
    for k in range(order.size):
        e = order[k]
        ra = _find(parent, end_a[e])
        rb = _find(parent, end_b[e])
        if ra != rb:
            parent[ra] = rb
            kept[e] = True
    return kept


@njit(cache=True, nogil=True)
def _weights(a, b, weight_index, half):
    out = np.empty(a.size, dtype=a.dtype)
    for i in range(a.size):
        out[i] = _edge_weight(a[i], b[i], weight_index, half)
    return out


def _boundary_of(cells, raster_cols, row0, row1, col0, col1, shape):
    """Cells of a block [row0, row1) x [col0, col1) with a neighbour outside
    the block (inside the raster)."""
    rows = cells // raster_cols
    cols = cells % raster_cols
    return (((rows == row0) & (row0 > 0)) | ((rows == row1 - 1) & (row1 < shape[0]))
            | ((cols == col0) & (col0 > 0)) | ((cols == col1 - 1) & (col1 < shape[1])))


# --------------------------------------------------------------------------
# a tile's forest as a bitmask per cell
#
# Bit k < 4 of a cell: the edge of rank k whose low end is this cell (to the
# right, down-left, down, down-right); bit k + 4: the edge of rank k whose
# high end is this cell.  Walking a forest on the grid then touches a byte
# per cell instead of an adjacency list.

_BIT_DROW = np.array([0, 1, 1, 1, 0, -1, -1, -1], dtype=np.int64)
_BIT_DCOL = np.array([1, -1, 0, 1, -1, 1, 0, -1], dtype=np.int64)


@njit(cache=True, nogil=True)
def _forest_mask(local_id, rows, cols):
    """The bitmask of the edges with these local ids (low * 4 + rank)."""
    mask = np.zeros(rows * cols, dtype=np.uint8)
    for k in range(local_id.size):
        low = np.int64(local_id[k]) >> 2
        rank = np.int64(local_id[k]) & 3
        high = low + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
        mask[low] |= np.uint8(1 << rank)
        mask[high] |= np.uint8(1 << (rank + 4))
    return mask


@njit(cache=True, nogil=True, inline="always")
def _popcount(byte):
    byte = np.int64(byte)
    count = 0
    while byte:
        byte &= byte - 1
        count += 1
    return count


@njit(cache=True, nogil=True, inline="always")
def _lowest_bit(byte):
    byte = np.int64(byte)
    bit = 0
    while not (byte >> bit) & 1:
        bit += 1
    return bit


@njit(cache=True, nogil=True, inline="always")
def _on_boundary(r, c, rows, cols, row0, col0, raster_rows, raster_cols):
    """A tile cell with a neighbour in another tile."""
    return ((r == 0 and row0 > 0) or (c == 0 and col0 > 0)
            or (r == rows - 1 and row0 + rows < raster_rows)
            or (c == cols - 1 and col0 + cols < raster_cols))


@njit(cache=True, nogil=True)
def _compress_tile(mask, values, rows, cols, row0, col0, raster_rows,
                   raster_cols, weight_index, half):
    """:func:`_compress` for a tile's forest given as a bitmask (consumed).

    Edge keys are recomputed from the cell values with the kernel's weight
    function.  Returns (a, b, weight, edge_id) in global cells.
    """
    n = rows * cols
    # Observation 3: strip dead ends, following each chain of leaves
    for start in range(n):
        v = start
        while True:
            bits = np.int64(mask[v])
            if bits == 0 or (bits & (bits - 1)) != 0:
                break
            r = v // cols
            c = v - r * cols
            if _on_boundary(r, c, rows, cols, row0, col0, raster_rows,
                            raster_cols):
                break
            bit = _lowest_bit(bits)
            u = v + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
            mask[v] = 0
            mask[u] &= np.uint8(~(1 << (bit ^ 4)) & 0xFF)
            v = u
    # Observation 4: contract paths through non-boundary degree-2 cells
    keep = np.zeros(n, dtype=np.bool_)
    count = 0
    for v in range(n):
        bits = np.int64(mask[v])
        if bits == 0:
            continue
        r = v // cols
        c = v - r * cols
        if _popcount(bits) != 2 or _on_boundary(
                r, c, rows, cols, row0, col0, raster_rows, raster_cols):
            keep[v] = True
            count += _popcount(bits)
    out_a = np.empty(count, dtype=np.int64)
    out_b = np.empty(count, dtype=np.int64)
    out_w = np.empty(count, dtype=values.dtype)
    out_e = np.empty(count, dtype=np.int64)
    emitted = 0
    for s in range(n):
        if not keep[s]:
            continue
        while mask[s]:
            bit = _lowest_bit(mask[s])
            heavy_w = values[0]
            heavy_e = np.int64(-1)
            here = s
            while True:
                there = here + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
                mask[here] &= np.uint8(~(1 << bit) & 0xFF)
                mask[there] &= np.uint8(~(1 << (bit ^ 4)) & 0xFF)
                low = here if bit < 4 else there
                high = there if bit < 4 else here
                lr = low // cols
                global_low = (row0 + lr) * raster_cols + col0 + low - lr * cols
                e = global_low * 4 + (bit & 3)
                w = _edge_weight(values[low], values[high], weight_index, half)
                if heavy_e < 0 or _heavier(w, e, heavy_w, heavy_e):
                    heavy_w = w
                    heavy_e = e
                here = there
                if keep[here]:
                    break
                bit = _lowest_bit(mask[here])
            sr = s // cols
            hr = here // cols
            out_a[emitted] = (row0 + sr) * raster_cols + col0 + s - sr * cols
            out_b[emitted] = (row0 + hr) * raster_cols + col0 + here - hr * cols
            out_w[emitted] = heavy_w
            out_e[emitted] = heavy_e
            emitted += 1
    return out_a[:emitted], out_b[:emitted], out_w[:emitted], out_e[:emitted]


@njit(cache=True, nogil=True)
def _local_ids(edges, cols):
    """``low * 4 + rank`` of (low, high) pairs in a tile's numbering."""
    out = np.empty(edges.shape[0], dtype=np.int32)
    for k in range(edges.shape[0]):
        low = edges[k, 0]
        step = edges[k, 1] - low
        if step == 1 and low % cols != cols - 1:
            rank = 0  # for cols == 2 a down-left step is +1 too
        elif step == cols - 1:
            rank = 1
        elif step == cols:
            rank = 2
        else:
            rank = 3
        out[k] = low * 4 + rank
    return out


# --------------------------------------------------------------------------
# round 1: leaf tiles


def leaf_tile(source, window, shape, nodata, connectivity, weight_index,
              weight_dtype, backend, keep_edges=True):
    """Round 1 for one tile (pure).

    Returns ``(message, forest)``: the small message for the hierarchy
    (the compressed forest in global cells and keys, the border lines'
    values and validity, the tile's count of valid cells) and the tile's
    MSF for the scratch store: ``(local_ids, weights)`` (int32 local edge
    ids and weights in (weight, edge id) order) when ``keep_edges``, else
    ``(low_mask,)``, one uint8 per cell whose bit k is the edge of rank k
    whose low end is that cell.
    """
    if backend == "cuda":
        from . import _cuda as kernels
    else:
        from . import _cpu as kernels
    values = source.read(window)
    valid = valid_mask(values, nodata)
    if backend == "cuda":
        with _GPU_LOCK:
            edges, weights = kernels.spanning_forest(
                values, valid, connectivity, weight_index, weight_dtype,
                Progress())
    else:
        edges, weights = kernels.spanning_forest(
            values, valid, connectivity, weight_index, weight_dtype,
            Progress())
    rows, cols = window.rows, window.cols
    local_id = _local_ids(edges, cols)
    del edges
    mask = _forest_mask(local_id, rows, cols)
    n_edges = int(local_id.size)
    if keep_edges:
        forest = (local_id, weights)
    else:
        forest = (np.bitwise_and(mask, 0x0F),)
        del local_id, weights
    typed = np.ascontiguousarray(values, dtype=weight_dtype)
    a, b, w, e = _compress_tile(
        mask, typed.reshape(-1), rows, cols,
        window.row, window.col, shape[0], shape[1], weight_index,
        typed.dtype.type(0.5))
    lines = {"top": (0, slice(None)), "bottom": (-1, slice(None)),
             "left": (slice(None), 0), "right": (slice(None), -1)}
    message = {"a": a, "b": b, "w": w, "e": e,
               "valid": int(np.count_nonzero(valid)),
               "edges": n_edges}
    for name, where in lines.items():
        message[name] = np.array(typed[where])
        message[name + "_valid"] = np.array(valid[where])
    return message, forest


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
    size = grid.tile_size
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
            va, vb = msg["right"], right["left"]
            oka, okb = msg["right_valid"], right["left_valid"]
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
            va, vb = msg["bottom"], below["top"]
            oka, okb = msg["bottom_valid"], below["top_valid"]
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
                    msg["bottom"][-1:], diagonal["top"][:1],
                    msg["bottom_valid"][-1:] & diagonal["top_valid"][:1])
            anti = messages.get((tr + 1, tc - 1))
            if anti is not None:
                corner = (window.row + window.rows - 1) * cols + window.col
                add((tr, tc), (tr + 1, tc - 1), np.array([corner]),
                    np.array([corner + cols - 1]), np.array([1]),
                    msg["bottom"][:1], anti["top"][-1:],
                    msg["bottom_valid"][:1] & anti["top_valid"][-1:])
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
    empty = _empty_graph(weight_dtype)
    graphs = {tile: (msg["a"], msg["b"], msg["w"], msg["e"])
              for tile, msg in messages.items()}
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


def _empty_graph(weight_dtype):
    return (np.empty(0, np.int64), np.empty(0, np.int64),
            np.empty(0, weight_dtype), np.empty(0, np.int64))


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
    return (vertices[ca], vertices[cb], cw, ce), removed


# --------------------------------------------------------------------------
# round 3: the final forest per tile, its roots, its sorted edges


def _final_mask(msf, window, removed_local):
    """The bitmask of the tile's final internal edges: its MSF (local ids
    and weights, or the low-end bits per cell) minus the removed ones."""
    if len(msf) == 1:
        mask = _mask_from_low_bits(msf[0], window.rows, window.cols)
    else:
        mask = _forest_mask(msf[0], window.rows, window.cols)
    _clear_edges(mask, removed_local, window.cols)
    return mask


@njit(cache=True, nogil=True)
def _mask_from_low_bits(low_bits, rows, cols):
    """The full bitmask (both ends of every edge) from the low-end bits."""
    mask = low_bits.copy()
    for v in range(rows * cols):
        bits = np.int64(low_bits[v]) & 0x0F
        while bits:
            rank = _lowest_bit(bits)
            bits &= bits - 1
            high = v + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
            mask[high] |= np.uint8(1 << (rank + 4))
    return mask


@njit(cache=True, nogil=True)
def _mask_weights(mask, values, cols, weight_index, half):
    """Weights of the edges in a tile's bitmask (by their low end), in
    cell order, recomputed with the kernels' weight function."""
    count = 0
    for v in range(mask.size):
        count += _popcount(np.int64(mask[v]) & 0x0F)
    out = np.empty(count, dtype=values.dtype)
    j = 0
    for v in range(mask.size):
        bits = np.int64(mask[v]) & 0x0F
        while bits:
            rank = _lowest_bit(bits)
            bits &= bits - 1
            high = v + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
            out[j] = _edge_weight(values[v], values[high], weight_index, half)
            j += 1
    return out


@njit(cache=True, nogil=True)
def _clear_edges(mask, local_id, cols):
    for k in range(local_id.size):
        low = np.int64(local_id[k]) >> 2
        rank = np.int64(local_id[k]) & 3
        high = low + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
        mask[low] &= np.uint8(~(1 << rank) & 0xFF)
        mask[high] &= np.uint8(~(1 << (rank + 4)) & 0xFF)


@njit(cache=True, nogil=True)
def _label_mask(mask, valid, rows, cols):
    """Pieces of the forest: labels 1.. in scan order of first cells."""
    n = rows * cols
    labels = np.zeros(n, dtype=np.int32)
    queue = np.empty(max(n, 1), dtype=np.int64)
    count = 0
    for root in range(n):
        if labels[root] != 0 or not valid[root]:
            continue
        count += 1
        labels[root] = count
        head = 0
        tail = 1
        queue[0] = root
        while head < tail:
            v = queue[head]
            head += 1
            bits = np.int64(mask[v])
            while bits:
                bit = _lowest_bit(bits)
                bits &= bits - 1
                u = v + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
                if labels[u] == 0:
                    labels[u] = count
                    queue[tail] = u
                    tail += 1
    return labels.reshape(rows, cols)


def tile_pieces(source, window, nodata, msf, removed_local):
    """Round 3a for one tile: the pieces (connected parts) of its final
    forest that touch the tile border.

    Returns a dict: ``top``/``bottom``/``left``/``right`` (piece number + 1
    of each border cell, 0 for invalid cells) and ``first_cell`` (local
    index of each numbered piece's lowest cell).  Pieces are numbered in
    scan order of their first cell; only border pieces get numbers here.
    """
    values = source.read(window)
    valid = valid_mask(values, nodata)
    mask = _final_mask(msf, window, removed_local)
    labels = _label_mask(mask, valid.reshape(-1), window.rows, window.cols)
    border, first_cell = _border_pieces(labels)
    message = {"first_cell": first_cell}
    lines = {"top": (0, slice(None)), "bottom": (-1, slice(None)),
             "left": (slice(None), 0), "right": (slice(None), -1)}
    for name, where in lines.items():
        message[name] = border[labels[where]] + 1
    return message


@njit(cache=True, nogil=True)
def _border_pieces(labels):
    """Number the pieces that touch the border (in label order); return
    the numbering per label (-1 elsewhere) and their first cells."""
    rows, cols = labels.shape
    count = 0
    for r in range(rows):
        for c in range(cols):
            if labels[r, c] > count:
                count = labels[r, c]
    number = tiling.border_label_index(labels, count)
    n = 0
    for label in range(1, count + 1):
        if number[label] >= 0:
            n += 1
    first_cell = np.full(n, -1, dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            k = number[labels[r, c]]
            if k >= 0 and first_cell[k] < 0:
                first_cell[k] = r * cols + c
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
        total += pieces[tile]["first_cell"].size
    node_first = np.empty(total, dtype=np.int64)
    for tile in tiles:
        window = grid.window(*tile)
        first = pieces[tile]["first_cell"]
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
            lines.append(pieces[tile][name].astype(np.int64))
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
        start, n = offset[tile], pieces[tile]["first_cell"].size
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
    valid = valid_mask(values, nodata)
    rows, cols = window.rows, window.cols
    mask = _final_mask(msf, window, removed_local)
    direction = np.full(rows * cols, np.nan, dtype=np.float32)
    root_local, root_degrees = roots
    _walk_mask(mask, valid.reshape(-1), rows, cols, root_local, root_degrees,
               _direction_table(), direction)
    sep_w, sep_e = own_separators
    if len(msf) == 2:
        ids, weights = _surviving(msf[0], msf[1], mask, cols, window.row,
                                  window.col, shape[1])
        run_w, run_e = _merge_sorted(weights, ids, sep_w, sep_e)
        parts = sum_parts(run_w)
        return direction.reshape(rows, cols), run_e, run_w, parts, run_e.size
    typed = np.ascontiguousarray(values, dtype=weight_dtype).reshape(-1)
    weights = _mask_weights(mask, typed, cols, weight_index,
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
def _walk_mask(mask, valid, rows, cols, root_local, root_degrees, table,
               direction):
    """Breadth-first search of every piece from its root: the given roots
    first (border pieces), then each remaining piece from its first cell.
    Writes the degrees toward each cell's parent."""
    n = rows * cols
    seen = np.zeros(n, dtype=np.bool_)
    queue = np.empty(max(n, 1), dtype=np.int64)
    for k in range(root_local.size + n):
        if k < root_local.size:
            root = root_local[k]
            if seen[root]:
                continue
            direction[root] = root_degrees[k]
        else:
            root = k - root_local.size
            if seen[root] or not valid[root]:
                continue
            direction[root] = 0.0
        seen[root] = True
        head = 0
        tail = 1
        queue[0] = root
        while head < tail:
            v = queue[head]
            head += 1
            bits = np.int64(mask[v])
            while bits:
                bit = _lowest_bit(bits)
                bits &= bits - 1
                u = v + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
                if seen[u]:
                    continue
                seen[u] = True
                # u's parent is v, one step back along the bit
                direction[u] = table[1 - _BIT_DROW[bit], 1 - _BIT_DCOL[bit]]
                queue[tail] = u
                tail += 1


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


# --------------------------------------------------------------------------
# round 4: k-way merge of the sorted runs


@njit(cache=True, nogil=True)
def _sift_down(heap, size, slot, head_w, head_e):
    run = heap[slot]
    while True:
        child = 2 * slot + 1
        if child >= size:
            break
        if child + 1 < size and _lighter(head_w[heap[child + 1]],
                                         head_e[heap[child + 1]],
                                         head_w[heap[child]],
                                         head_e[heap[child]]):
            child += 1
        if not _lighter(head_w[heap[child]], head_e[heap[child]],
                        head_w[run], head_e[run]):
            break
        heap[slot] = heap[child]
        slot = child
    heap[slot] = run


@njit(cache=True, nogil=True)
def _merge_runs(buffer_w, buffer_e, position, end, heap, heap_size, out_w,
                out_e, cols, edges):
    """Pop run heads into ``out_*`` until it is full or a run's buffer is
    empty; returns (entries written, new heap size, the run needing a
    refill or -1).  ``edges`` receives (low, high) of each entry."""
    count = 0
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    while heap_size > 0 and count < out_w.size:
        r = heap[0]
        out_w[count] = head_w[r]
        e = head_e[r]
        out_e[count] = e
        low = e >> 2
        rank = e & 3
        edges[count, 0] = low
        if rank == 0:
            edges[count, 1] = low + 1
        elif rank == 1:
            edges[count, 1] = low + cols - 1
        elif rank == 2:
            edges[count, 1] = low + cols
        else:
            edges[count, 1] = low + cols + 1
        count += 1
        position[r] += 1
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
            _sift_down(heap, heap_size, 0, head_w, head_e)
        else:
            return count, heap_size, r
    return count, heap_size, -1


@njit(cache=True, nogil=True)
def _heap_remove_top(heap, heap_size, buffer_w, buffer_e, position, end):
    heap_size -= 1
    heap[0] = heap[heap_size]
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    if heap_size > 0:
        _sift_down(heap, heap_size, 0, head_w, head_e)
    return heap_size


@njit(cache=True, nogil=True)
def _heap_build(heap, heap_size, buffer_w, buffer_e, position, end):
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    for slot in range(heap_size // 2 - 1, -1, -1):
        _sift_down(heap, heap_size, slot, head_w, head_e)


class _RunReader:
    """Reads a sorted run (edge ids and weights) from the scratch store in
    buffers."""

    def __init__(self, store, key):
        self.edge = store.reader(key, 0)
        self.weight = store.reader(key, 1)
        self.size = self.edge.shape[0]
        self.done = 0

    def fill(self, buffer_w, buffer_e, row):
        n = min(buffer_w.shape[1], self.size - self.done)
        buffer_e[row, :n] = self.edge.read(self.done, self.done + n)
        buffer_w[row, :n] = self.weight.read(self.done, self.done + n)
        self.done += n
        return n

    def close(self):
        self.edge.close()
        self.weight.close()


def merge_runs(store, keys, total, weight_dtype, shape, out_dir, progress,
               budget_bytes=None):
    """Round 4: merge the sorted runs into the edge list and weights.

    Returns (edges, weights).  The run buffers and the output chunk share
    ``budget_bytes``.
    """
    edges_sink = tiling.make_sink(out_dir, "edges", (total, 2), np.int64)
    weights_sink = tiling.make_sink(out_dir, "weights", (total, 1),
                                    weight_dtype)
    readers = [_RunReader(store, key) for key in keys]
    k = len(readers)
    entry = np.dtype(weight_dtype).itemsize + 8
    run_buffer, chunk = MERGE_RUN_BUFFER, MERGE_CHUNK
    if budget_bytes is not None:
        run_buffer = int(min(run_buffer, max(
            256, budget_bytes * 0.5 // (max(k, 1) * entry))))
        chunk = int(min(chunk, max(
            1, budget_bytes * 0.3 // ((entry + 16) * 8192)) * 8192))
    buffer_w = np.empty((max(k, 1), run_buffer), dtype=weight_dtype)
    buffer_e = np.empty((max(k, 1), run_buffer), dtype=np.int64)
    position = np.zeros(max(k, 1), dtype=np.int64)
    end = np.zeros(max(k, 1), dtype=np.int64)
    heap = np.empty(max(k, 1), dtype=np.int64)
    heap_size = 0
    for r, reader in enumerate(readers):
        end[r] = reader.fill(buffer_w, buffer_e, r)
        if end[r] > 0:
            heap[heap_size] = r
            heap_size += 1
    _heap_build(heap, heap_size, buffer_w, buffer_e, position, end)
    out_w = np.empty(chunk, dtype=weight_dtype)
    out_e = np.empty(chunk, dtype=np.int64)
    out_edges = np.empty((chunk, 2), dtype=np.int64)
    filled = 0
    written = 0
    try:
        with tiling.output_sinks([edges_sink, weights_sink]):
            while heap_size > 0:
                count, heap_size, refill = _merge_runs(
                    buffer_w, buffer_e, position, end, heap, heap_size,
                    out_w[filled:], out_e[filled:], shape[1],
                    out_edges[filled:])
                filled += count
                if refill >= 0:
                    position[refill] = 0
                    end[refill] = readers[refill].fill(buffer_w, buffer_e,
                                                       refill)
                    if end[refill] == 0:
                        heap_size = _heap_remove_top(heap, heap_size, buffer_w,
                                                     buffer_e, position, end)
                    else:
                        _heap_build(heap, heap_size, buffer_w, buffer_e,
                                    position, end)
                if filled == chunk or (heap_size == 0 and filled):
                    window = tiling.Window(written, 0, filled, 2)
                    edges_sink.write(window, out_edges[:filled])
                    weights_sink.write(tiling.Window(written, 0, filled, 1),
                                       out_w[:filled, None])
                    written += filled
                    filled = 0
                    progress(written / max(total, 1))
            edges = edges_sink.finish()
            weights = weights_sink.finish()
    finally:
        for reader in readers:
            reader.close()
    return edges, weights.reshape(-1)


# --------------------------------------------------------------------------
# the driver


def minimum_spanning_tree_tiled(plan, connectivity, weight_index,
                                weight_dtype, nodata, backend, out_dir,
                                executor, progress, keep_edges=True):
    """The tiled path of :func:`gridgraph.core.minimum_spanning_tree`;
    ``keep_edges=False`` skips the edge list (edges and weights None)."""
    with distributed.tile_executor(
            executor, [plan.source], out_dir,
            functools.partial(warm_up, plan.source.dtype,
                              connectivity)) as executor:
        return _minimum_spanning_tree_tiled(
            plan, connectivity, weight_index, weight_dtype, nodata, backend,
            out_dir, executor, progress, keep_edges)


def warm_up(dtype=np.float32, connectivity=4):
    """Compile this module's tile kernels (a Dask worker's preflight): the
    tiled path on a tiny raster of ``dtype``, in this process."""
    from . import minimum_spanning_tree
    values = ((np.arange(16 * 16) * 7) % 11).reshape(16, 16).astype(dtype)
    for keep_edges in (True, False):
        minimum_spanning_tree(values, connectivity=connectivity,
                              tile_size=8, backend="cpu", edges=keep_edges)


def _minimum_spanning_tree_tiled(plan, connectivity, weight_index,
                                 weight_dtype, nodata, backend, out_dir,
                                 executor, progress, keep_edges):
    from . import MSTResult
    source = plan.source
    grid = plan.grid
    if nodata is None:
        nodata = source.nodata
    rows, cols = source.shape
    progress = progress if progress is not None else Progress()
    weight_dtype = np.dtype(weight_dtype)
    # edges (16) and weights per cell, and the parent directions (4)
    edge_bytes = 16 + weight_dtype.itemsize if keep_edges else 0
    out_dir = tiling.check_out_dir(
        out_dir, rows * cols * (4 + edge_bytes), plan.limit_bytes)
    tiles = grid.morton_order()
    windows = {tile: grid.window(*tile) for tile in tiles}

    # the tile forests (8 bytes per edge, or 1 per cell without the edge
    # list) and the sorted runs (12) stay in memory while they fit this
    # share of the budget
    store_budget = int(plan.limit_bytes * 0.3)
    with tiling.scratch_folder(out_dir) as folder:
        # forests stay on the Dask workers as futures; otherwise here
        store = tiling.TileStates(tiling.ScratchStore(folder, store_budget))
        messages = {}
        n_valid = 0

        def keep_leaf(index, result):
            message, forest = result
            tile = tiles[index]
            messages[tile] = message
            store.put(("msf", tile), forest)

        tiling.run_tasks(
            leaf_tile,
            [(source, windows[t], (rows, cols), nodata, connectivity,
              weight_index, weight_dtype, backend, keep_edges)
             for t in tiles],
            executor, progress.span(*LEAF_SPAN), on_result=keep_leaf,
            keep=True)
        n_valid = sum(m["valid"] for m in messages.values())
        separators = separator_edges(grid, messages, connectivity,
                                     weight_index, weight_dtype)
        removed = merge_hierarchy(grid, messages, separators, weight_dtype,
                                  progress.span(*HIERARCHY_SPAN), executor)
        del messages

        # the separators that stay, and the removed edges inside each tile
        if separators:
            sep_low, sep_high, sep_w, sep_e = (
                np.concatenate([s[k] for s in separators.values()])
                for k in range(4))
        else:
            sep_low = sep_high = sep_e = np.empty(0, np.int64)
            sep_w = np.empty(0, weight_dtype)
        del separators
        is_separator = np.isin(removed, sep_e)
        removed_by_tile = _group_by_tile(removed[~is_separator], grid, cols)
        keep = ~np.isin(sep_e, removed[is_separator])
        sep_low, sep_high, sep_w, sep_e = (sep_low[keep], sep_high[keep],
                                           sep_w[keep], sep_e[keep])
        del removed, is_separator

        def local_removed(tile):
            ids = removed_by_tile.get(tile)
            if ids is None:
                return np.empty(0, np.int64)
            window = windows[tile]
            low = ids >> 2
            local_low = (low // cols - window.row) * window.cols \
                + low % cols - window.col
            return np.sort(local_low * 4 + (ids & 3))

        pieces = tiling.run_tasks(
            tile_pieces,
            ((source, windows[t], nodata, store.get(("msf", t)),
              local_removed(t)) for t in tiles),
            executor, progress.span(*PIECES_SPAN), count=len(tiles))
        roots = orient_pieces(grid, dict(zip(tiles, pieces)), sep_low,
                              sep_high)
        del pieces

        owned = {}
        if sep_e.size:
            order = np.lexsort((sep_e, sep_w))
            low = sep_low[order]
            owner_index = (low // cols // grid.tile_size) * grid.tile_cols \
                + (low % cols) // grid.tile_size
            for t in np.unique(owner_index):
                pick = order[owner_index == t]
                owned[divmod(int(t), grid.tile_cols)] = (sep_w[pick],
                                                         sep_e[pick])
        empty_sep = (np.empty(0, weight_dtype), np.empty(0, np.int64))

        direction_sink = tiling.make_sink(out_dir, "parent_direction",
                                          (rows, cols), np.float32, np.nan)
        run_sizes = {}
        parts = np.zeros(sum_parts_size(weight_dtype), dtype=np.int64)
        # the edge list by a sample sort over run files when tasks run
        # elsewhere and can share the scratch folder (Dask workers: only
        # when it lies in out_dir); in this process by the k-way merge
        shared = not distributed.is_dask_client(executor) or (
            out_dir is not None and os.path.abspath(folder).startswith(
                os.path.abspath(out_dir) + os.sep))
        sample_sort = keep_edges and executor is not None and shared
        samples = {}
        with tiling.output_sinks([direction_sink]):
            def keep_run(index, result):
                tile = tiles[index]
                if sample_sort:
                    block, tile_parts, count, sample_w, sample_e = result
                    samples[tile] = (sample_w, sample_e)
                else:
                    block, run_ids, run_weights, tile_parts, count = result
                if block is not None:
                    direction_sink.write(windows[tile], block)
                store.discard(("msf", tile))
                if keep_edges and not sample_sort:
                    store.put(("run", tile), (run_ids, run_weights))
                run_sizes[tile] = count
                parts[:] += tile_parts  # integers: exact in any order

            # tasks write their own blocks (pwrite at distinct offsets)
            # when they can reach the sink (threads; processes and Dask
            # workers for a sink on disk): one thread writing every block
            # would hold up the others
            in_task = executor is None or isinstance(
                executor, concurrent.futures.ThreadPoolExecutor) or \
                isinstance(direction_sink, tiling.NpySink)
            if sample_sort:
                def finish(t):
                    return functools.partial(
                        edge_list.finish_to_files, tile_finish,
                        direction_sink if in_task else None, folder, t)
            else:
                def finish(t):
                    return functools.partial(_finish_and_write,
                                             direction_sink) \
                        if in_task else tile_finish
            tiling.run_tasks(
                _call,
                ((finish(t), source, windows[t], (rows, cols), nodata,
                  store.get(("msf", t)), local_removed(t), roots[t],
                  owned.get(t, empty_sep), weight_index, weight_dtype)
                 for t in tiles),
                executor, progress.span(FINISH_SPAN[0], FINISH_SPAN[1]
                                        if keep_edges else 1.0),
                on_result=keep_run, count=len(tiles))
            total = sum(run_sizes.values())
            edges = weights = None
            if sample_sort:
                edges, weights = edge_list.sample_sort(
                    folder, tiles, run_sizes, samples, weight_dtype,
                    (rows, cols), out_dir, executor,
                    tiling.executor_workers(executor),
                    progress.span(FINISH_SPAN[1], 1.0))
            elif keep_edges:
                edges, weights = merge_runs(
                    store, [("run", t) for t in tiles], total, weight_dtype,
                    (rows, cols), out_dir, progress.span(FINISH_SPAN[1], 1.0),
                    budget_bytes=plan.limit_bytes * 0.3)
            parent_direction = direction_sink.finish()
    progress(1.0)
    return MSTResult(edges=edges, weights=weights,
                     total_weight=total_from_parts(parts),
                     trees=n_valid - total, parent_direction=parent_direction,
                     shape=(rows, cols))


def _call(function, *arguments):
    """``function(*arguments)``: lets one task list carry a function per
    task."""
    return function(*arguments)


def _finish_and_write(sink, source, window, *arguments):
    """:func:`tile_finish`, writing the direction block to ``sink`` here
    (None in its place in the result)."""
    block, *rest = tile_finish(source, window, *arguments)
    sink.write(window, block)
    return (None, *rest)


def _group_by_tile(edge_ids, grid, cols):
    """Edge ids grouped by the tile of their low end."""
    if edge_ids.size == 0:
        return {}
    low = edge_ids >> 2
    index = (low // cols // grid.tile_size) * grid.tile_cols \
        + (low % cols) // grid.tile_size
    order = np.argsort(index, kind="stable")
    index, edge_ids = index[order], edge_ids[order]
    bounds = np.flatnonzero(np.diff(index)) + 1
    groups = {}
    for part_index, part in zip(np.split(index, bounds),
                                np.split(edge_ids, bounds)):
        groups[divmod(int(part_index[0]), grid.tile_cols)] = part
    return groups
