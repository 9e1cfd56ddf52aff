"""Numba CPU kernels of the minimum spanning forest: Borůvka on the grid graph.

Edges are never listed up front.  Round 1 works on the implicit grid: every
valid cell finds its lightest incident edge, cells hook onto the neighbour at
the other end, and the resulting trees are contracted to components.  Only the
edges that cross components are then materialised, and further Borůvka rounds
run on that shrinking list (per component lightest edge, hook, drop the edges
that became internal) until no edge crosses two components.  Only the k tree
edges are sorted at the end.

Edge identity.  An edge between cells ``low < high`` (row-major indices) is
encoded as ``edge_id = low * 4 + rank`` with rank 0 right (high = low + 1),
1 down-left (low + W - 1), 2 down (low + W) and 3 down-right (low + W + 1).
For one ``low`` the existing ranks are increasing in ``high`` (for W = 2 the
right and down-left offsets coincide but never both exist for the same
cell), so comparing ``(weight, edge_id)`` is comparing ``(weight, low,
high)``: the strict total order that makes the forest unique.  NaN weights
(from ``inf - inf`` or ``inf + -inf``) sort after every number, as in
:func:`numpy.sort`.

References: Borůvka (1926); Sousa, MST solvers for multi-core CPUs and GPUs
(2014); Vineet et al., Fast minimum spanning tree for large graphs on the GPU
(HPG 2009).
"""

import numpy as np
from numba import njit, prange

from .._common import index_dtype
from ..errors import InvalidInputError
from . import PARENT_DEGREES, PARENT_OFFSETS

# Neighbours of a cell: (row step, col step, rank of the edge, whether the
# cell itself is the edge's low end).  The first four are the 4-neighbourhood.
_NEIGHBOURS = np.array([
    (0, 1, 0, 1),     # right
    (1, 0, 2, 1),     # down
    (0, -1, 0, 0),    # left: the left cell's "right" edge
    (-1, 0, 2, 0),    # up
    (1, -1, 1, 1),    # down-left
    (1, 1, 3, 1),     # down-right
    (-1, 1, 1, 0),    # up-right: that cell's "down-left" edge
    (-1, -1, 3, 0),   # up-left
], dtype=np.int64)

# Forward neighbours (the cell is the low end): each edge seen once.
_FORWARD = np.array([(0, 1, 0), (1, 0, 2), (1, -1, 1), (1, 1, 3)],
                    dtype=np.int64)

# Cells per progress report in the traversals of parent_direction.
_TRAVERSAL_BUDGET = 1 << 22


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
def _grid_lightest_edges(values, valid, n_neighbours, weight_index, half,
                         best_weight, best_edge):
    """Lightest incident edge of every valid cell (edge -1: none)."""
    rows, cols = values.shape
    for r in prange(rows):
        for c in range(cols):
            v = r * cols + c
            best_edge[v] = -1
            if not valid[r, c]:
                continue
            a = values[r, c]
            found_weight = a
            found_edge = np.int64(-1)
            for k in range(n_neighbours):
                nr = r + _NEIGHBOURS[k, 0]
                nc = c + _NEIGHBOURS[k, 1]
                if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
                    continue
                if not valid[nr, nc]:
                    continue
                w = _edge_weight(a, values[nr, nc], weight_index, half)
                low = v if _NEIGHBOURS[k, 3] == 1 else nr * cols + nc
                e = low * 4 + _NEIGHBOURS[k, 2]
                if found_edge < 0 or _lighter(w, e, found_weight, found_edge):
                    found_weight = w
                    found_edge = e
            best_weight[v] = found_weight
            best_edge[v] = found_edge


@njit(cache=True, nogil=True, parallel=True)
def _find_roots(parent):
    """Point every entry (parent >= 0) straight at its root.

    Threads share the array: every write stores the root of the written
    entry's tree, and roots never move, so concurrent compression is safe.
    """
    for v in prange(parent.size):
        if parent[v] < 0:
            continue
        root = np.int64(v)
        while parent[root] != root:
            root = parent[root]
        x = np.int64(v)
        while parent[x] != root:
            following = parent[x]
            parent[x] = root
            x = following


@njit(cache=True, nogil=True, parallel=True)
def _hook_cells(valid_flat, best_edge, best_weight, cols, parent,
                chosen_edge, chosen_weight):
    """Borůvka hooking of round 1 on the grid.

    Each cell points at the other end of its lightest edge.  Under a strict
    total order the only cycles of that graph are mutual pairs sharing one
    edge; the lower cell of a pair becomes the root.  The lightest edges of
    the non-root cells are exactly the tree edges found this round; they
    are written to ``chosen_*``.  Returns how many.
    """
    n = parent.size
    for v in prange(n):
        e = best_edge[v]
        if not valid_flat[v]:
            parent[v] = -1
        elif e < 0:
            parent[v] = v
        else:
            low = e >> 2
            parent[v] = low if low != v else _high_end(e, cols)
    # Only the lower cell of a mutual pair writes, and it reads the higher
    # cell's entry, which nobody writes: no race.
    for v in prange(n):
        p = parent[v]
        if p > v and parent[p] == v:
            parent[v] = v
    count = 0
    for v in range(n):
        if parent[v] >= 0 and parent[v] != v:
            chosen_edge[count] = best_edge[v]
            chosen_weight[count] = best_weight[v]
            count += 1
    _find_roots(parent)
    return count


@njit(cache=True, nogil=True, parallel=True)
def _grid_cut_edges(values, valid, n_forward, weight_index, half, component,
                    label):
    """List the grid edges whose ends lie in different components.

    ``component`` holds each cell's root cell.  Roots with at least one
    crossing edge get compact labels 0..m-1 (``label`` is scratch of size
    n); components with none are finished and drop out.  Returns
    (end_a, end_b, weight, edge_id, m).
    """
    rows, cols = values.shape
    n = rows * cols
    row_counts = np.zeros(rows + 1, dtype=np.int64)
    for v in prange(n):
        label[v] = 0
    for r in prange(rows):
        count = 0
        for c in range(cols):
            if not valid[r, c]:
                continue
            v = r * cols + c
            root = component[v]
            for k in range(n_forward):
                nr = r + _FORWARD[k, 0]
                nc = c + _FORWARD[k, 1]
                if nr >= rows or nc < 0 or nc >= cols or not valid[nr, nc]:
                    continue
                other_root = component[nr * cols + nc]
                if other_root != root:
                    count += 1
                    # every writer stores the same value
                    label[root] = 1
                    label[other_root] = 1
        row_counts[r + 1] = count
    m = 0
    for v in range(n):
        if label[v] != 0:
            label[v] = m
            m += 1
        else:
            label[v] = -1
    for r in range(rows):
        row_counts[r + 1] += row_counts[r]
    total = row_counts[rows]
    end_a = np.empty(total, dtype=np.int64)
    end_b = np.empty(total, dtype=np.int64)
    weight = np.empty(total, dtype=values.dtype)
    edge_id = np.empty(total, dtype=np.int64)
    for r in prange(rows):
        j = row_counts[r]
        for c in range(cols):
            if not valid[r, c]:
                continue
            v = r * cols + c
            root = component[v]
            for k in range(n_forward):
                nr = r + _FORWARD[k, 0]
                nc = c + _FORWARD[k, 1]
                if nr >= rows or nc < 0 or nc >= cols or not valid[nr, nc]:
                    continue
                other_root = component[nr * cols + nc]
                if other_root != root:
                    end_a[j] = label[root]
                    end_b[j] = label[other_root]
                    weight[j] = _edge_weight(values[r, c], values[nr, nc],
                                             weight_index, half)
                    edge_id[j] = v * 4 + _FORWARD[k, 2]
                    j += 1
    return end_a, end_b, weight, edge_id, m


@njit(cache=True, nogil=True)
def _list_round(end_a, end_b, weight, edge_id, m, chosen_edge, chosen_weight,
                n_chosen):
    """One Borůvka round on the list of edges between m components.

    Every component has at least one edge.  Appends the tree edges found to
    ``chosen_*`` from ``n_chosen`` on, then contracts: returns the crossing
    edges relabelled to the new components (a prefix of the input arrays,
    overwritten in place), the new component count and the new n_chosen.
    """
    n_edges = end_a.size
    best = np.full(m, -1, dtype=np.int64)
    for i in range(n_edges):
        w = weight[i]
        e = edge_id[i]
        a = end_a[i]
        b = end_b[i]
        j = best[a]
        if j < 0 or _lighter(w, e, weight[j], edge_id[j]):
            best[a] = i
        j = best[b]
        if j < 0 or _lighter(w, e, weight[j], edge_id[j]):
            best[b] = i
    parent = np.empty(m, dtype=np.int64)
    for c in range(m):
        j = best[c]
        parent[c] = end_b[j] if end_a[j] == c else end_a[j]
    for c in range(m):
        p = parent[c]
        if p > c and parent[p] == c:
            parent[c] = c
    for c in range(m):
        if parent[c] != c:
            j = best[c]
            chosen_edge[n_chosen] = edge_id[j]
            chosen_weight[n_chosen] = weight[j]
            n_chosen += 1
    for c in range(m):
        root = c
        while parent[root] != root:
            root = parent[root]
        x = c
        while parent[x] != root:
            following = parent[x]
            parent[x] = root
            x = following
    # Relabel surviving roots compactly; ``best`` is reused as the map.
    for c in range(m):
        best[c] = -1
    kept = 0
    m_new = 0
    for i in range(n_edges):
        a = parent[end_a[i]]
        b = parent[end_b[i]]
        if a == b:
            continue
        la = best[a]
        if la < 0:
            la = m_new
            best[a] = la
            m_new += 1
        lb = best[b]
        if lb < 0:
            lb = m_new
            best[b] = lb
            m_new += 1
        end_a[kept] = la
        end_b[kept] = lb
        weight[kept] = weight[i]
        edge_id[kept] = edge_id[i]
        kept += 1
    return kept, m_new, n_chosen


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
    if connectivity not in (4, 8):
        raise InvalidInputError(
            f"connectivity must be 4 or 8, got {connectivity!r}")
    if weight_index not in (0, 1, 2, 3):
        raise InvalidInputError(
            f"weight index must be 0 (max), 1 (min), 2 (mean) or 3 (absdiff), "
            f"got {weight_index!r}")
    weight_dtype = np.dtype(weight_dtype).type
    values = np.ascontiguousarray(array, dtype=weight_dtype)
    valid = np.ascontiguousarray(valid, dtype=bool)
    if values.shape != valid.shape:
        raise InvalidInputError(
            f"valid mask shape {valid.shape} differs from raster shape "
            f"{values.shape}")
    rows, cols = values.shape
    n = rows * cols
    half = weight_dtype(0.5)
    progress(0.0)
    chosen_edge = np.empty(n, dtype=np.int64)
    chosen_weight = np.empty(n, dtype=weight_dtype)
    if n == 0:
        return np.empty((0, 2), dtype=np.int64), chosen_weight[:0]

    best_weight = np.empty(n, dtype=weight_dtype)
    best_edge = np.empty(n, dtype=np.int64)
    _grid_lightest_edges(values, valid, connectivity, weight_index, half,
                         best_weight, best_edge)
    progress(0.15)
    component = np.empty(n, dtype=np.int64)
    n_chosen = _hook_cells(valid.reshape(-1), best_edge, best_weight, cols,
                           component, chosen_edge, chosen_weight)
    del best_weight
    progress(0.3)
    end_a, end_b, weight, edge_id, m = _grid_cut_edges(
        values, valid, connectivity // 2, weight_index, half, component,
        best_edge)
    del component, best_edge
    progress(0.45)

    n_edges = end_a.size
    first_edges = max(n_edges, 1)
    while n_edges > 0:
        n_edges, m, n_chosen = _list_round(
            end_a[:n_edges], end_b[:n_edges], weight[:n_edges],
            edge_id[:n_edges], m, chosen_edge, chosen_weight, n_chosen)
        # the edge list shrinks by a factor per round: report its share done
        progress(0.45 + 0.35 * (1.0 - n_edges / first_edges))
    del end_a, end_b, weight, edge_id

    chosen_edge = chosen_edge[:n_chosen]
    chosen_weight = chosen_weight[:n_chosen]
    order = np.lexsort((chosen_edge, chosen_weight))
    chosen_edge = chosen_edge[order]
    chosen_weight = chosen_weight[order]
    progress(0.95)
    edges = np.empty((n_chosen, 2), dtype=np.int64)
    _edge_ends(chosen_edge, cols, edges)
    progress(1.0)
    return edges, chosen_weight


def _adjacency(edges, n_cells):
    """CSR adjacency (offsets, neighbours) of the cells joined by ``edges``."""
    edges = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    if edges.size and (edges.min() < 0 or edges.max() >= n_cells):
        raise InvalidInputError(
            f"edge ends must be cell indices in [0, {n_cells}), got "
            f"[{edges.min()}, {edges.max()}]")
    return _build_adjacency(edges, n_cells)


@njit(cache=True, nogil=True)
def _build_adjacency(edges, n_cells):
    offsets = np.zeros(n_cells + 1, dtype=np.int64)
    for i in range(edges.shape[0]):
        offsets[edges[i, 0] + 1] += 1
        offsets[edges[i, 1] + 1] += 1
    for v in range(n_cells):
        offsets[v + 1] += offsets[v]
    fill = offsets[:-1].copy()
    neighbours = np.empty(offsets[n_cells], dtype=np.int64)
    for i in range(edges.shape[0]):
        a = edges[i, 0]
        b = edges[i, 1]
        neighbours[fill[a]] = b
        fill[a] += 1
        neighbours[fill[b]] = a
        fill[b] += 1
    return offsets, neighbours


@njit(cache=True, nogil=True)
def _traverse(offsets, neighbours, valid_flat, cols, state, budget, queue,
              seen, direction_table, direction, labels):
    """Breadth-first search of each piece from its lowest-index cell.

    Resumable: ``state`` = (next root candidate, queue head, queue tail,
    pieces so far) persists between calls, and a call returns after about
    ``budget`` cells.  Writes the degrees toward each cell's parent into
    ``direction`` and the piece number into ``labels`` (either may be empty
    to skip it).  Returns -1, or the index of a cell that an edge joins to
    a non-neighbour or an invalid cell.
    """
    next_root, head, tail, pieces = state[0], state[1], state[2], state[3]
    n = valid_flat.size
    want_direction = direction.size > 0
    want_labels = labels.size > 0
    done = 0
    while done < budget:
        if head == tail:
            # scanning upward, the first unseen valid cell is the lowest
            # index of its piece: earlier cells of the piece would have
            # reached it already
            while next_root < n and (seen[next_root]
                                     or not valid_flat[next_root]):
                next_root += 1
            if next_root == n:
                break
            pieces += 1
            seen[next_root] = True
            if want_direction:
                direction[next_root] = 0.0
            if want_labels:
                labels[next_root] = pieces
            head = 0
            tail = 1
            queue[0] = next_root
        v = queue[head]
        head += 1
        done += 1
        vr = v // cols
        vc = v - vr * cols
        for j in range(offsets[v], offsets[v + 1]):
            u = neighbours[j]
            if seen[u]:
                continue
            if not valid_flat[u]:
                return u
            ur = u // cols
            uc = u - ur * cols
            dr = vr - ur
            dc = vc - uc
            if dr < -1 or dr > 1 or dc < -1 or dc > 1:
                return u
            seen[u] = True
            if want_direction:
                direction[u] = direction_table[dr + 1, dc + 1]
            if want_labels:
                labels[u] = pieces
            queue[tail] = u
            tail += 1
    state[0], state[1], state[2], state[3] = next_root, head, tail, pieces
    return -1


def _direction_table():
    table = np.zeros((3, 3), dtype=np.float32)
    for (dr, dc), degrees in zip(PARENT_OFFSETS, PARENT_DEGREES):
        table[dr + 1, dc + 1] = degrees
    return table


def _walk_forest(edges, valid, progress, want_direction, want_labels):
    valid = np.ascontiguousarray(valid, dtype=bool)
    rows, cols = valid.shape
    n = valid.size
    valid_flat = valid.reshape(-1)
    offsets, neighbours = _adjacency(edges, n)
    if want_direction:
        direction = np.full(n, np.nan, dtype=np.float32)
    else:
        direction = np.empty(0, dtype=np.float32)
    if want_labels:
        labels = np.zeros(n, dtype=index_dtype(n))
    else:
        labels = np.zeros(0, dtype=index_dtype(n))
    queue = np.empty(max(n, 1), dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    state = np.zeros(4, dtype=np.int64)
    table = _direction_table()
    done = 0
    while True:
        bad = _traverse(offsets, neighbours, valid_flat, max(cols, 1), state,
                        _TRAVERSAL_BUDGET, queue, seen, table, direction,
                        labels)
        if bad >= 0:
            raise InvalidInputError(
                f"an edge joins cell {bad} (row {bad // cols}, column "
                f"{bad % cols}) to a cell that is not its valid neighbour; "
                "edges must join neighbouring valid cells")
        if state[0] == n and state[1] == state[2]:
            break
        done += _TRAVERSAL_BUDGET
        if progress is not None:
            progress(min(done / max(n, 1), 0.99))
    if progress is not None:
        progress(1.0)
    if want_direction:
        direction = direction.reshape(rows, cols)
    if want_labels:
        labels = labels.reshape(rows, cols)
    return direction, labels, int(state[3])


def parent_direction(edges, valid, progress):
    """Direction from each valid cell toward its parent in the forest.

    The parent is the next cell on the tree path to the tree's lowest-index
    cell (its root).  Degrees counter-clockwise from east (PARENT_OFFSETS /
    PARENT_DEGREES: E 360, N 90, W 180, S 270, NE 45, NW 135, SW 225,
    SE 315); 0 at roots; NaN on invalid cells.  Returns a float32 raster
    the shape of ``valid``.
    """
    direction, _, _ = _walk_forest(edges, valid, progress, True, False)
    return direction


def label_forest(edges, valid):
    """Label the pieces of the graph of valid cells joined by ``edges``.

    Returns ``(labels, count)``: labels 1..count in scan order of each
    piece's first cell, 0 on invalid cells; int32, or int64 when the raster
    has 2**31 - 1 cells or more.
    """
    _, labels, count = _walk_forest(edges, valid, None, False, True)
    return labels, count
