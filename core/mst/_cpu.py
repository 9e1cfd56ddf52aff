"""Numba CPU kernels of the minimum spanning forest: Borůvka on grid graphs.

Edges are never listed up front.  Round 1 works on the implicit grid: every
valid cell finds its lightest incident edge, cells hook onto the neighbour at
the other end, and the resulting trees are contracted to components.  Only the
edges that cross components are then materialised, and further Borůvka rounds
run on that shrinking list (per component lightest edge, hook, drop the edges
that became internal, list one edge per run of parallel edges) until no edge
crosses two components.  Only the k tree edges are sorted at the end, by an
LSD radix sort of packed (weight, edge id) keys (``_sort_cpu``); the exact
total weight is ``_exact_sum``'s.

Edge identity.  An edge between cells ``low < high`` (row-major indices) is
encoded as ``edge_id = low * 4 + rank`` with rank 0 right (high = low + 1),
1 down-left (low + W - 1), 2 down (low + W) and 3 down-right (low + W + 1).
For one ``low`` the existing ranks are increasing in ``high`` (for W = 2 the
right and down-left offsets coincide but never both exist for the same
cell), so comparing ``(weight, edge_id)`` is comparing ``(weight, low,
high)``: the strict total order that makes the forest unique.  NaN weights
(from ``inf - inf`` or ``inf + -inf``) sort after every number, as in
:func:`numpy.sort`, and -0 equals +0.

References: Borůvka (1926); Sousa, MST solvers for multi-core CPUs and GPUs
(2014); Vineet et al., Fast minimum spanning tree for large graphs on the GPU
(HPG 2009).
"""

from contextlib import contextmanager

import numba
import numpy as np
from numba import njit, prange

from .._common import index_dtype, nodata_in_dtype, valid_mask
from ..errors import InvalidInputError
# the sort of the tree edges and the exact total live in modules of their
# own; their names stay importable from here
from ._exact_sum import (exact_total, sum_parts,  # noqa: F401
                         sum_parts_size, total_from_parts)
from ._sort_cpu import _sort_tree_edges  # noqa: F401

# Cells per kernel call between progress reports: a fraction of a second
# on the 2-core test machine.
_BAND_CELLS = 1 << 22

# Round 1's per-cell arrays (lightest edge ids, components) are int32 while
# every edge id (< 4 * cells) fits: half the memory traffic of int64.
# Tests lower it to run the int64 kernels on small rasters.
_INT32_EDGE_IDS = 2**31 - 1

# The list rounds' per-chunk scratch covers only the range of components a
# chunk's edges touch (False: every component, as before; for benchmarks
# and tests).
_LIST_LABEL_RANGES = True

# Below this many cells the kernels run on one thread: waking the worker
# threads costs more than they save, and far more on a busy machine.
_PARALLEL_MIN_CELLS = 1 << 16



@contextmanager
def _threads_for(n_items):
    """Run the numba kernels inside on one thread for small inputs."""
    if n_items >= _PARALLEL_MIN_CELLS:
        yield
        return
    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


@njit(cache=True, nogil=True, parallel=True)
def _valid_cells(values, has_nodata, nodata, valid):
    rows, cols = values.shape
    for r in prange(rows):
        for c in range(cols):
            x = values[r, c]
            valid[r, c] = x == x and not (has_nodata and x == nodata)


# Raster dtypes the valid-cell kernel takes (native byte order); others
# (float16, long double, swapped bytes) go through numpy.
_KERNEL_DTYPES = frozenset(np.dtype(t) for t in (
    np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
    np.uint64, np.float32, np.float64))


def valid_cells(array, nodata):
    """:func:`gridgraph.core._common.valid_mask` of a 2-D raster on all
    cores: not NaN and not equal to ``nodata``."""
    if array.dtype not in _KERNEL_DTYPES or array.ndim != 2:
        return valid_mask(array, nodata)
    value = nodata_in_dtype(array.dtype, nodata)
    valid = np.empty(array.shape, dtype=bool)
    if valid.size == 0:
        return valid
    with _threads_for(valid.size):
        _valid_cells(array, value is not None,
                     array.dtype.type(0) if value is None else value, valid)
    return valid


@njit(inline="always")
def _edge_weight(a, b, weight_index, half):
    if weight_index == 0:
        return max(a, b)
    if weight_index == 1:
        return min(a, b)
    if weight_index == 2:
        return (a + b) * half  # exactly (a + b) / 2, in the weight dtype
    return abs(a - b)


@njit(inline="always")
def _lighter(w1, e1, w2, e2):
    """(w1, e1) < (w2, e2) in the total order, NaN weights last."""
    if w1 < w2:
        return True
    if w1 > w2:
        return False
    if w1 == w2:
        return e1 < e2
    if w1 != w1:
        return w2 != w2 and e1 < e2
    return True


@njit(inline="always")
def _take(w, e, found_weight, found_edge):
    """Keep the lighter of the best edge so far and a candidate whose edge
    id is larger than the best's (so equal weights keep the best)."""
    if found_edge < 0 or w < found_weight or (
            found_weight != found_weight and w == w):
        return w, e
    return found_weight, found_edge


@njit(inline="always")
def _high_end(edge_id, cols):
    low = edge_id >> 2
    rank = edge_id & 3
    if rank == 0:
        return low + 1
    if rank == 1:
        return low + cols - 1
    if rank == 2:
        return low + cols
    return low + cols + 1


@njit(cache=True, nogil=True, parallel=True)
def _grid_lightest_edges(first_row, stop_row, values, valid, eight,
                         weight_index, half, best_weight, best_edge):
    """Lightest incident edge of every valid cell (edge -1: none), for the
    rows first_row..stop_row - 1 (as every grid kernel here).

    Neighbours are visited in increasing edge id (up-left, up, up-right,
    left, right, down-left, down, down-right: ids 4v-4W-1, 4v-4W+2,
    4v-4W+5, 4v-4, 4v, 4v+1, 4v+2, 4v+3), so a later candidate wins only
    with a strictly smaller weight.  For W <= 2 the pairs that would break
    this order (up-right/left, up-left/up-right) never both exist.
    """
    rows, cols = values.shape
    for band_row in prange(first_row, stop_row):
        r = np.int64(band_row)
        for c in range(cols):
            v = np.int64(r) * cols + c
            if not valid[r, c]:
                best_edge[v] = -1
                continue
            x = values[r, c]
            fw = x
            fe = np.int64(-1)
            if r > 0:
                up = v - cols
                if eight and c > 0 and valid[r - 1, c - 1]:
                    fw, fe = _take(
                        _edge_weight(x, values[r - 1, c - 1], weight_index,
                                     half), (up - 1) * 4 + 3, fw, fe)
                if valid[r - 1, c]:
                    fw, fe = _take(
                        _edge_weight(x, values[r - 1, c], weight_index, half),
                        up * 4 + 2, fw, fe)
                if eight and c + 1 < cols and valid[r - 1, c + 1]:
                    fw, fe = _take(
                        _edge_weight(x, values[r - 1, c + 1], weight_index,
                                     half), (up + 1) * 4 + 1, fw, fe)
            if c > 0 and valid[r, c - 1]:
                fw, fe = _take(
                    _edge_weight(x, values[r, c - 1], weight_index, half),
                    (v - 1) * 4, fw, fe)
            if c + 1 < cols and valid[r, c + 1]:
                fw, fe = _take(
                    _edge_weight(x, values[r, c + 1], weight_index, half),
                    v * 4, fw, fe)
            if r + 1 < rows:
                if eight and c > 0 and valid[r + 1, c - 1]:
                    fw, fe = _take(
                        _edge_weight(x, values[r + 1, c - 1], weight_index,
                                     half), v * 4 + 1, fw, fe)
                if valid[r + 1, c]:
                    fw, fe = _take(
                        _edge_weight(x, values[r + 1, c], weight_index, half),
                        v * 4 + 2, fw, fe)
                if eight and c + 1 < cols and valid[r + 1, c + 1]:
                    fw, fe = _take(
                        _edge_weight(x, values[r + 1, c + 1], weight_index,
                                     half), v * 4 + 3, fw, fe)
            best_weight[v] = fw
            best_edge[v] = fe


@njit(inline="always")
def _find_root(parent, v):
    """Root of ``v``'s tree; compresses the path behind it.

    Threads may share ``parent``: every write stores the root of the
    written entry's tree and roots never move, so concurrent compression is
    safe.
    """
    root = v
    while parent[root] != root:
        root = parent[root]
    while parent[v] != root:
        following = parent[v]
        parent[v] = root
        v = following
    return root


@njit(cache=True, nogil=True, parallel=True)
def _hook_cells(first_row, stop_row, valid, best_edge, parent, root_offsets,
                tree_offsets):
    """Borůvka hooking of round 1 on the grid.

    Each cell points at the other end of its lightest edge.  Under a strict
    total order the only cycles of that graph are mutual pairs sharing one
    edge; the lower cell of such a pair becomes a root, as do cells with no
    edge.  ``parent`` gets -1 on invalid cells; ``*_offsets[r + 1]`` the
    number of roots and of hooked cells (tree edges) in row r.
    """
    rows, cols = valid.shape
    for band_row in prange(first_row, stop_row):
        r = np.int64(band_row)
        roots = 0
        hooked = 0
        for c in range(cols):
            v = np.int64(r) * cols + c
            if not valid[r, c]:
                parent[v] = -1
                continue
            e = best_edge[v]
            if e < 0:
                parent[v] = v
                roots += 1
                continue
            low = e >> 2
            p = low if low != v else _high_end(e, cols)
            if p > v and best_edge[p] == e:
                parent[v] = v
                roots += 1
            else:
                parent[v] = p
                hooked += 1
        root_offsets[r + 1] = roots
        tree_offsets[r + 1] = hooked


@njit(inline="always")
def _neighbour_root(parent, valid, r, c):
    """Root of cell (r, c), -1 if it is invalid."""
    if not valid[r, c]:
        return np.int64(-1)
    return _find_root(parent, np.int64(r) * valid.shape[1] + c)


@njit(inline="always")
def _next_run(root, other, last_low, last_high):
    """For a crossing edge between components ``root`` and ``other``:
    (whether it starts a new run, the pair as (low, high)).

    Consecutive crossing edges between the same two components form a
    run.  Any other edge of a run closes a cycle with the run's lightest
    edge (through the two components) and is the heaviest on it, so it is
    in no minimum spanning forest: a run is listed as its lightest edge.
    Runs are common where a boundary between two components follows a row.
    """
    low = min(root, other)
    high = max(root, other)
    return low != last_low or high != last_high, low, high


@njit(inline="always")
def _count_run(other, root, count, last_low, last_high):
    """Count the edge to component ``other`` (-1: no edge) if it crosses
    and starts a run."""
    if other < 0 or other == root:
        return count, last_low, last_high
    new_run, last_low, last_high = _next_run(root, other, last_low,
                                             last_high)
    return count + new_run, last_low, last_high


@njit(inline="always")
def _write_run(root, other, w, e, j, last_low, last_high, root_label,
               label_a, label_b, weight, edge_id):
    """List the edge (weight w, id e) to component ``other`` if it crosses:
    as a new entry j when it starts a run, else over entry j - 1 when it is
    lighter.  Returns the new (j, last_low, last_high)."""
    if other == root:
        return j, last_low, last_high
    new_run, last_low, last_high = _next_run(root, other, last_low,
                                             last_high)
    if new_run:
        j += 1
    elif not _lighter(w, e, weight[j - 1], edge_id[j - 1]):
        return j, last_low, last_high
    label_a[j - 1] = root_label[root]
    label_b[j - 1] = root_label[other]
    weight[j - 1] = w
    edge_id[j - 1] = e
    return j, last_low, last_high


@njit(cache=True, nogil=True, parallel=True)
def _contract_cells(first_row, stop_row, valid, eight, best_edge, best_weight,
                    parent,
                    root_offsets, tree_offsets, root_label, chosen_edge,
                    chosen_weight, cut_offsets):
    """Contract the trees of round 1 and count the edges that cross them.

    ``*_offsets`` are exclusive prefix sums by row.  Roots get compact
    labels 0..m-1 in ``root_label`` in scan order; the lightest edges of
    hooked cells, the tree edges of round 1, go to ``chosen_*``; ``parent``
    ends pointing at each valid cell's root; ``cut_offsets[r + 1]`` gets
    the number of crossing edges whose low end lies in row r.
    """
    rows, cols = valid.shape
    for band_row in prange(first_row, stop_row):
        r = np.int64(band_row)
        next_root = root_offsets[r]
        next_tree = tree_offsets[r]
        cut = 0
        last_low = np.int64(-1)
        last_high = np.int64(-1)
        has_next_row = r + 1 < rows
        for c in range(cols):
            v = np.int64(r) * cols + c
            p = parent[v]
            if p < 0:
                continue
            # roots never change, so this test is safe while other rows
            # compress paths through this row
            if p == v:
                root_label[v] = next_root
                next_root += 1
                root = v
            else:
                chosen_edge[next_tree] = best_edge[v]
                chosen_weight[next_tree] = best_weight[v]
                next_tree += 1
                root = _find_root(parent, v)
            # the neighbours in the order _grid_cut_edges lists them
            if c + 1 < cols:
                cut, last_low, last_high = _count_run(
                    _neighbour_root(parent, valid, r, c + 1), root, cut,
                    last_low, last_high)
            if has_next_row:
                if eight and c > 0:
                    cut, last_low, last_high = _count_run(
                        _neighbour_root(parent, valid, r + 1, c - 1), root,
                        cut, last_low, last_high)
                cut, last_low, last_high = _count_run(
                    _neighbour_root(parent, valid, r + 1, c), root, cut,
                    last_low, last_high)
                if eight and c + 1 < cols:
                    cut, last_low, last_high = _count_run(
                        _neighbour_root(parent, valid, r + 1, c + 1), root,
                        cut, last_low, last_high)
        cut_offsets[r + 1] = cut


@njit(cache=True, nogil=True, parallel=True)
def _grid_cut_edges(first_row, stop_row, values, valid, eight, weight_index,
                    half, component,
                    root_label, cut_offsets, label_a, label_b, weight,
                    edge_id):
    """Write the grid edges whose ends lie in different components (rows
    first_row..stop_row - 1).

    ``component`` holds each valid cell's root, ``root_label`` the roots'
    compact labels; row r's edges go from ``cut_offsets[r]`` on, one per
    run of edges between the same two components (see :func:`_next_run`),
    as counted by :func:`_contract_cells`.
    """
    rows, cols = values.shape
    for band_row in prange(first_row, stop_row):
        r = np.int64(band_row)
        j = cut_offsets[r]
        last_low = np.int64(-1)
        last_high = np.int64(-1)
        has_next_row = r + 1 < rows
        for c in range(cols):
            if not valid[r, c]:
                continue
            v = np.int64(r) * cols + c
            root = component[v]
            x = values[r, c]
            # right, down-left, down, down-right: increasing edge ids
            if c + 1 < cols and valid[r, c + 1]:
                j, last_low, last_high = _write_run(
                    root, component[v + 1],
                    _edge_weight(x, values[r, c + 1], weight_index, half),
                    v * 4, j, last_low, last_high, root_label, label_a,
                    label_b, weight, edge_id)
            if not has_next_row:
                continue
            if eight and c > 0 and valid[r + 1, c - 1]:
                j, last_low, last_high = _write_run(
                    root, component[v + cols - 1],
                    _edge_weight(x, values[r + 1, c - 1], weight_index, half),
                    v * 4 + 1, j, last_low, last_high, root_label, label_a,
                    label_b, weight, edge_id)
            if valid[r + 1, c]:
                j, last_low, last_high = _write_run(
                    root, component[v + cols],
                    _edge_weight(x, values[r + 1, c], weight_index, half),
                    v * 4 + 2, j, last_low, last_high, root_label, label_a,
                    label_b, weight, edge_id)
            if eight and c + 1 < cols and valid[r + 1, c + 1]:
                j, last_low, last_high = _write_run(
                    root, component[v + cols + 1],
                    _edge_weight(x, values[r + 1, c + 1], weight_index, half),
                    v * 4 + 3, j, last_low, last_high, root_label, label_a,
                    label_b, weight, edge_id)


@njit(cache=True, nogil=True, parallel=True)
def _edge_ends(edge_id, cols, edges):
    for i in prange(edge_id.size):
        e = edge_id[i]
        edges[i, 0] = e >> 2
        edges[i, 1] = _high_end(e, cols)


def spanning_forest(array, valid, connectivity, weight_index, weight_dtype,
                    progress):
    """Minimum spanning forest of the valid cells of ``array``.

    Parameters
    ----------
    array : 2-D ndarray (any numeric dtype, may be a memmap; not modified)
    valid : 2-D bool ndarray, the vertices
    connectivity : {4, 8}
    weight_index : int
        0 max, 1 min, 2 mean ``(a + b) / 2``, 3 absdiff ``|a - b|``.
    weight_dtype : np.float32 or np.float64
        Cell values are cast to it and weights computed in it.
    progress : gridgraph.core._common.Progress

    Returns
    -------
    edges : (k, 2) ndarray of int64
        Rows (low, high) of row-major cell indices, ascending by
        (weight, low, high); k = valid cells - connected pieces.
    weights : (k,) ndarray of ``weight_dtype``
    """
    edge_id, weight = unsorted_forest(array, valid, connectivity,
                                      weight_index, weight_dtype,
                                      progress.span(0.0, 0.75))
    with _threads_for(np.size(valid)):
        # the output array holds the sort keys first
        edges = np.empty((edge_id.size, 2), dtype=np.int64)
        edge_id, weight = _sort_tree_edges(
            edge_id, weight, np.size(valid), progress.span(0.75, 0.95),
            edges.reshape(-1).view(np.uint64))
        progress(0.95)
        _edge_ends(edge_id, np.shape(valid)[1], edges)
    progress(1.0)
    return edges, weight


def unsorted_forest(array, valid, connectivity, weight_index, weight_dtype,
                    progress):
    """The tree edges of :func:`spanning_forest` as (edge_id, weights), in
    no particular order (the order of the Borůvka rounds): edge ids
    ``low * 4 + rank`` (module docstring), int64; no sort and no edge
    list, for callers that need only the set (parent directions, the exact
    total, the count)."""
    if connectivity not in (4, 8):
        raise InvalidInputError(
            f"connectivity must be 4 or 8, got {connectivity!r}")
    if weight_index not in (0, 1, 2, 3):
        raise InvalidInputError(
            f"weight index must be 0 (max), 1 (min), 2 (mean) or 3 (absdiff), "
            f"got {weight_index!r}")
    weight_dtype = np.dtype(weight_dtype).type
    if weight_dtype not in (np.float32, np.float64):
        raise InvalidInputError(
            f"weight dtype must be float32 or float64, got {weight_dtype}")
    with _threads_for(np.size(valid)):
        return _unsorted_forest(array, valid, connectivity, weight_index,
                                weight_dtype, progress)


def _unsorted_forest(array, valid, connectivity, weight_index, weight_dtype,
                     progress):
    values = np.ascontiguousarray(array, dtype=weight_dtype)
    valid = np.ascontiguousarray(valid, dtype=bool)
    if values.shape != valid.shape:
        raise InvalidInputError(
            f"valid mask shape {valid.shape} differs from raster shape "
            f"{values.shape}")
    n_cells = values.size
    eight = connectivity == 8
    half = weight_dtype(0.5)
    progress(0.0)
    if n_cells == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, weight_dtype)

    # Page faults on fresh memory are costly (most on virtual machines), so
    # two arenas are reused: [lightest edge | its weight] then the list of
    # crossing edges; [root | root label] then the list's second buffer.
    label_dtype = np.dtype(index_dtype(n_cells))
    compact = 4 * n_cells + 4 <= _INT32_EDGE_IDS
    edge_dtype = np.int32 if compact else np.int64
    cell_dtype = np.int32 if compact else np.int64
    weight_size = np.dtype(weight_dtype).itemsize
    first_arena = np.empty(n_cells * (8 + weight_size), dtype=np.uint8)
    second_arena = np.empty(n_cells * (8 + label_dtype.itemsize),
                            dtype=np.uint8)

    # Round 1 on the implicit grid.
    best_edge, best_weight = _carve(first_arena, n_cells,
                                    (edge_dtype, weight_dtype))
    _by_bands(_grid_lightest_edges, progress.span(0.0, 0.13), values, valid,
              eight, weight_index, half, best_weight, best_edge)
    rows = values.shape[0]
    component, root_label = _carve(second_arena, n_cells,
                                   (cell_dtype, label_dtype))
    root_offsets = np.zeros(rows + 1, dtype=np.int64)
    tree_offsets = np.zeros(rows + 1, dtype=np.int64)
    _by_bands(_hook_cells, progress.span(0.13, 0.27), valid, best_edge,
              component, root_offsets, tree_offsets)
    np.cumsum(root_offsets, out=root_offsets)
    np.cumsum(tree_offsets, out=tree_offsets)
    # at most one tree edge per valid cell; the output is a prefix of these
    n_valid = int(root_offsets[-1] + tree_offsets[-1])
    chosen_edge = np.empty(n_valid, dtype=np.int64)
    chosen_weight = np.empty(n_valid, dtype=weight_dtype)
    cut_offsets = np.zeros(rows + 1, dtype=np.int64)
    _by_bands(_contract_cells, progress.span(0.27, 0.4), valid, eight,
              best_edge, best_weight, component, root_offsets, tree_offsets,
              root_label, chosen_edge, chosen_weight, cut_offsets)
    del best_weight, best_edge
    np.cumsum(cut_offsets, out=cut_offsets)
    m = int(root_offsets[-1])
    n_chosen = int(tree_offsets[-1])
    n_edges = int(cut_offsets[-1])
    list_dtypes = (label_dtype, label_dtype, weight_dtype, np.int64)
    end_a, end_b, weight, edge_id = _carve(first_arena, n_edges, list_dtypes)
    _by_bands(_grid_cut_edges, progress.span(0.4, 0.6), values, valid,
              eight, weight_index, half, component, root_label, cut_offsets,
              end_a, end_b, weight, edge_id)
    del component, root_label, first_arena

    # Further rounds on the shrinking list of crossing edges.
    spare = _carve(second_arena, n_edges, list_dtypes)
    del second_arena
    n_chosen = _list_rounds(end_a, end_b, weight, edge_id, spare, m,
                            chosen_edge, chosen_weight, n_chosen,
                            progress.span(0.6, 1.0))
    del end_a, end_b, weight, edge_id, spare
    progress(1.0)
    return chosen_edge[:n_chosen], chosen_weight[:n_chosen]


def _by_bands(kernel, progress, raster, *arguments):
    """Run a row-parallel grid kernel on bands of rows, reporting progress
    after each so that a cancel is heard within a fraction of a second."""
    rows, cols = raster.shape
    band = max(1, _BAND_CELLS // max(cols, 1))
    for first_row in range(0, rows, band):
        stop_row = min(rows, first_row + band)
        kernel(first_row, stop_row, raster, *arguments)
        progress(stop_row / rows)
    progress(1.0)


def _carve(arena, count, dtypes):
    """Consecutive arrays of ``count`` items of each dtype: views of the
    uint8 ``arena`` where they fit, else of one fresh buffer."""
    sizes = [count * np.dtype(dtype).itemsize for dtype in dtypes]
    # every array starts on an 8-byte boundary
    padded = [-(-size // 8) * 8 for size in sizes]
    if sum(padded) > arena.size:
        arena = np.empty(sum(padded), dtype=np.uint8)
    arrays = []
    offset = 0
    for dtype, size, step in zip(dtypes, sizes, padded):
        arrays.append(arena[offset:offset + size].view(dtype))
        offset += step
    return tuple(arrays)


def parent_direction(edges, valid, progress):
    """See :func:`gridgraph.core.mst._forest_cpu.parent_direction`."""
    from ._forest_cpu import parent_direction as on_all_cores
    return on_all_cores(edges, valid, progress)


def forest_direction(edge_id, valid, progress):
    """:func:`parent_direction` of the tree edges given by their ids, in
    any order (as :func:`unsorted_forest` returns them)."""
    from ._forest_cpu import walk_forest_ids
    direction, _, _ = walk_forest_ids(edge_id, valid, progress, True, False)
    return direction


def label_forest(edges, valid):
    """See :func:`gridgraph.core.mst._forest_cpu.label_forest`."""
    from ._forest_cpu import label_forest as on_all_cores
    return on_all_cores(edges, valid)


# the list rounds live in a module of their own; it takes this module's
# helpers, so it is imported once they exist
from ._list_cpu import (_list_contract, _list_hook, _list_lightest,  # noqa: E402,F401
                        _list_rounds)
