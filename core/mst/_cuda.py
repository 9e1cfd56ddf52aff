"""CUDA kernels of the minimum spanning forest: Borůvka on the implicit grid.

Edge identity and order are those of the CPU kernels (``_cpu.py``): the
edge between cells ``low < high`` has id ``low * 4 + rank`` (rank 0 right,
1 down-left, 2 down, 3 down-right), so (weight, edge id) orders like
(weight, low, high).  Weights map to integer keys that order like the
floats: +0 and -0 share key 0, negative numbers have their magnitude bits
flipped, every NaN gets the largest key (NaN sorts last).

Keys.  For float32 weights and fewer than 2**32 edge ids, one int64 holds
``weight key << 32 | edge id`` and a component's lightest edge is one
``atomic.min`` (the grid MST thesis, docs/architecture.md; weight as the most
significant field).  Otherwise (float64 weights, or rasters of 2**30 cells
and more) the minimum is taken in two stages: the least weight key, then
the least edge id among the edges of that weight.

Rounds.
1. Every valid cell's lightest incident edge, computed without atomics.
2. Hook: each component root points at the root at the other end of its
   lightest edge; under a strict total order the only cycles are mutual
   pairs, whose lower root stays a root.  The hooking edges are the tree
   edges of the round (appended to a list, one atomic per block).
3. Pointer jumping over the hooks gives every old root its new root; other
   cells reach it by path compression in the next round.
4. Further rounds on the implicit grid (per-edge atomic minima of the
   crossing edges) until few edges cross components; then the crossing
   edges are listed once and the rounds run on that shrinking list
   (Vineet et al. 2009; Sousa 2014) until no edge crosses.
5. The tree edges are radix-sorted by key and decoded into (low, high)
   and weights.

The parent directions and the exact total weight are computed on the
device too (``_cuda_tree.py``); :func:`minimum_spanning_tree` returns only
what the caller asked for.
"""

import numpy as np
from numba import cuda

from .._common import index_dtype
from .._cuda_common import (FLAT_THREADS, INT64_MAX, PhaseTimer, blocks_for,
                            block_reserve, check_device_memory,
                            copy_to_device, copy_to_host, device_scalar,
                            find_halving, find_root, float32_bits, float64_bits,
                            radix_sort, valid_cells_device)
from ..errors import InvalidInputError

NONE = INT64_MAX  # "no edge" in the best-key arrays
LOW32 = 0xFFFFFFFF
# Contract to an explicit edge list once this share of cells or fewer
# edges cross components.
CONTRACT_BELOW = 1 / 8

# (drow, dcol, rank of the edge) of the eight neighbours, in increasing
# edge id: the first four are the cell's high end, the last four its low.
_NEIGHBOURS = np.array([(-1, -1, 3), (-1, 0, 2), (-1, 1, 1), (0, -1, 0),
                        (0, 1, 0), (1, -1, 1), (1, 0, 2), (1, 1, 3)],
                       dtype=np.int64)
# (drow, dcol) of the high end of an edge of each rank, seen from the low.
_FORWARD = np.array([(0, 1), (1, -1), (1, 0), (1, 1)], dtype=np.int64)


@cuda.jit(device=True, cache=True)
def _weight(a, b, weight_index, half):
    if weight_index == 0:
        return max(a, b)
    if weight_index == 1:
        return min(a, b)
    if weight_index == 2:
        return (a + b) * half  # exactly (a + b) / 2, in the weight dtype
    return abs(a - b)


@cuda.jit(device=True, cache=True)
def _weight_key(w, weight64):
    """Signed integer that orders like the weight (see module docstring)."""
    if weight64:
        b = np.int64(float64_bits(w))
        magnitude = b & 0x7FFFFFFFFFFFFFFF
        if magnitude == 0:
            return np.int64(0)
        if magnitude > 0x7FF0000000000000:
            return np.int64(0x7FFFFFFFFFFFFFFF)
        if b < 0:
            return b ^ 0x7FFFFFFFFFFFFFFF
        return b
    b = np.int64(float32_bits(w))
    magnitude = b & 0x7FFFFFFF
    if magnitude == 0:
        return np.int64(0)
    if magnitude > 0x7F800000:
        return np.int64(0x7FFFFFFF)
    if b < 0:
        return b ^ 0x7FFFFFFF
    return b


@cuda.jit(device=True, cache=True)
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


@cuda.jit(device=True, cache=True)
def _is_best(best_key, best_id, root, key, edge_id, packed):
    if packed:
        return best_key[root] == key
    return best_key[root] == key and best_id[root] == edge_id


@cuda.jit(device=True, cache=True)
def _offer(best_key, best_id, root, key, edge_id, packed, stage):
    """Lower the root's best edge to (key, edge id) if lighter.

    Packed keys need one atomic; split keys take the weight key in stage
    1 and the edge id among the edges of the least weight in stage 2.
    """
    if packed or stage == 1:
        if key < best_key[root]:
            cuda.atomic.min(best_key, root, key)
    elif key == best_key[root] and edge_id < best_id[root]:
        cuda.atomic.min(best_id, root, edge_id)


@cuda.jit(cache=True)
def _lightest_edges(values, valid, rows, cols, eight, weight_index, half,
                    weight64, packed, neighbours, parent, best_key, best_id):
    """Round 1: every valid cell's lightest incident edge, no atomics."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v >= rows * cols:
        return
    if not valid[v]:
        parent[v] = -1
        best_key[v] = NONE
        if not packed:
            best_id[v] = NONE
        return
    parent[v] = v
    r = v // cols
    c = v - r * cols
    x = values[v]
    found_key = np.int64(NONE)
    found_id = np.int64(NONE)
    for k in range(8):
        dr = neighbours[k, 0]
        dc = neighbours[k, 1]
        if dr != 0 and dc != 0 and not eight:
            continue
        nr = r + dr
        nc = c + dc
        if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
            continue
        u = nr * cols + nc
        if not valid[u]:
            continue
        low = u if k < 4 else v
        edge_id = low * 4 + neighbours[k, 2]
        wkey = _weight_key(_weight(x, values[u], weight_index, half),
                           weight64)
        if packed:
            key = (wkey << 32) | edge_id
            if key < found_key:
                found_key = key
        elif wkey < found_key or (wkey == found_key and edge_id < found_id):
            found_key = wkey
            found_id = edge_id
    best_key[v] = found_key
    if not packed:
        best_id[v] = found_id


@cuda.jit(cache=True)
def _hook_roots(parent, best_key, best_id, n, cols, packed, hook,
                chosen_key, chosen_id, n_chosen):
    """Each root hooks onto the root across its lightest edge; the hooking
    edges are appended to the tree edges."""
    scratch = cuda.shared.array(2, np.int64)
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    append = 0
    key = np.int64(0)
    edge_id = np.int64(0)
    if v < n and parent[v] == v:
        hook[v] = v
        key = best_key[v]
        if packed:
            edge_id = key & LOW32
            found = key != NONE
        else:
            edge_id = best_id[v]
            found = edge_id != NONE
        if found:
            ra = find_root(parent, edge_id >> 2)
            rb = find_root(parent, _high_end(edge_id, cols))
            other = rb if ra == v else ra
            mutual = _is_best(best_key, best_id, other, key, edge_id, packed)
            if not (mutual and v < other):
                hook[v] = other
                append = 1
    slot = block_reserve(append, n_chosen, scratch)
    if append:
        chosen_key[slot] = key
        if not packed:
            chosen_id[slot] = edge_id


@cuda.jit(cache=True)
def _jump(parent, n, hook, packed, best_key, best_id):
    """Old roots point at their new root (pointer jumping over the hooks);
    new roots start the next round without a best edge."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v >= n or parent[v] != v:
        return
    root = v
    while True:
        h = hook[root]
        if h == root:
            break
        g = hook[h]
        if g != h:
            hook[root] = g
        root = g
    parent[v] = root
    if root == v:
        best_key[v] = NONE
        if not packed:
            best_id[v] = NONE


@cuda.jit(device=True, cache=True)
def _forward_cell(valid, rows, cols, eight, forward, r, c, rank):
    """The valid cell across forward edge ``rank`` of cell (r, c), or -1
    (off the grid, a diagonal in 4-connectivity, or nodata)."""
    if (rank & 1) and not eight:
        return np.int64(-1)
    nr = r + forward[rank, 0]
    nc = c + forward[rank, 1]
    if nr >= rows or nc < 0 or nc >= cols:
        return np.int64(-1)
    u = nr * cols + nc
    if not valid[u]:
        return np.int64(-1)
    return u


@cuda.jit(cache=True)
def _grid_offer(values, valid, rows, cols, eight, weight_index, half,
                weight64, packed, stage, forward, parent, best_key, best_id,
                n_cut):
    """Rounds 2+: offer every edge that crosses components to both roots;
    count those edges."""
    scratch = cuda.shared.array(2, np.int64)
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    cut = 0
    if v < rows * cols and valid[v]:
        rv = find_halving(parent, v)
        r = v // cols
        c = v - r * cols
        x = values[v]
        for rank in range(4):
            u = _forward_cell(valid, rows, cols, eight, forward, r, c, rank)
            if u < 0:
                continue
            ru = find_halving(parent, u)
            if ru == rv:
                continue
            cut += 1
            edge_id = v * 4 + rank
            wkey = _weight_key(_weight(x, values[u], weight_index, half),
                               weight64)
            key = (wkey << 32) | edge_id if packed else wkey
            _offer(best_key, best_id, rv, key, edge_id, packed, stage)
            _offer(best_key, best_id, ru, key, edge_id, packed, stage)
    block_reserve(cut, n_cut, scratch)


@cuda.jit(cache=True)
def _grid_cut_edges(values, valid, rows, cols, eight, weight_index, half,
                    weight64, packed, forward, parent, n_out, out_key,
                    out_id, out_a, out_b):
    """List the edges that cross components (roots as ends)."""
    scratch = cuda.shared.array(2, np.int64)
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    inside = v < rows * cols and valid[v]
    cut = 0
    r = np.int64(0)
    c = np.int64(0)
    rv = np.int64(0)
    if inside:
        rv = find_halving(parent, v)
        r = v // cols
        c = v - r * cols
        for rank in range(4):
            u = _forward_cell(valid, rows, cols, eight, forward, r, c, rank)
            if u >= 0 and find_halving(parent, u) != rv:
                cut += 1
    slot = block_reserve(cut, n_out, scratch)
    if cut > 0:
        x = values[v]
        for rank in range(4):
            u = _forward_cell(valid, rows, cols, eight, forward, r, c, rank)
            if u < 0:
                continue
            ru = find_halving(parent, u)
            if ru == rv:
                continue
            edge_id = v * 4 + rank
            wkey = _weight_key(_weight(x, values[u], weight_index, half),
                               weight64)
            out_key[slot] = (wkey << 32) | edge_id if packed else wkey
            out_id[slot] = edge_id
            out_a[slot] = rv
            out_b[slot] = ru
            slot += 1


@cuda.jit(cache=True)
def _list_contract(key_in, id_in, a_in, b_in, m, parent, packed, n_out,
                   key_out, id_out, a_out, b_out, best_key, best_id):
    """Relabel the listed edges to the current roots and keep those that
    still cross; their roots start the round without a best edge."""
    scratch = cuda.shared.array(2, np.int64)
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    keep = 0
    ra = np.int64(0)
    rb = np.int64(0)
    if e < m:
        ra = find_halving(parent, a_in[e])
        rb = find_halving(parent, b_in[e])
        if ra != rb:
            keep = 1
            best_key[ra] = NONE
            best_key[rb] = NONE
            if not packed:
                best_id[ra] = NONE
                best_id[rb] = NONE
    slot = block_reserve(keep, n_out, scratch)
    if keep:
        key_out[slot] = key_in[e]
        id_out[slot] = id_in[e]
        a_out[slot] = ra
        b_out[slot] = rb


@cuda.jit(cache=True)
def _list_offer(key, ids, a, b, m, packed, stage, best_key, best_id):
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if e < m:
        k = key[e]
        edge_id = ids[e]
        _offer(best_key, best_id, a[e], k, edge_id, packed, stage)
        _offer(best_key, best_id, b[e], k, edge_id, packed, stage)


@cuda.jit(cache=True)
def _list_hook(key, ids, a, b, m, packed, best_key, best_id, parent,
               chosen_key, chosen_id, n_chosen):
    """A root whose lightest edge this is hooks onto the other end (of a
    mutual pair, the higher root); the edge joins the tree."""
    scratch = cuda.shared.array(2, np.int64)
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    append = 0
    k = np.int64(0)
    edge_id = np.int64(0)
    if e < m:
        k = key[e]
        edge_id = ids[e]
        ra = a[e]
        rb = b[e]
        best_a = _is_best(best_key, best_id, ra, k, edge_id, packed)
        best_b = _is_best(best_key, best_id, rb, k, edge_id, packed)
        if best_a and best_b:
            if ra > rb:
                parent[ra] = rb
            else:
                parent[rb] = ra
            append = 1
        elif best_a:
            parent[ra] = rb
            append = 1
        elif best_b:
            parent[rb] = ra
            append = 1
    slot = block_reserve(append, n_chosen, scratch)
    if append:
        chosen_key[slot] = k
        if not packed:
            chosen_id[slot] = edge_id


@cuda.jit(cache=True)
def _decode(keys, ids, k, cols, packed, weight64, edges, weight_bits):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i >= k:
        return
    key = keys[i]
    if packed:
        edge_id = key & LOW32
        wkey = key >> 32
    else:
        edge_id = ids[i]
        wkey = key
    edges[2 * i] = edge_id >> 2
    edges[2 * i + 1] = _high_end(edge_id, cols)
    if wkey < 0:
        if weight64:
            wkey ^= 0x7FFFFFFFFFFFFFFF
        else:
            wkey ^= 0x7FFFFFFF
    weight_bits[i] = wkey


def packed_keys_fit(n_cells, weight_dtype):
    """Whether one int64 holds (float32 weight key, edge id)."""
    return np.dtype(weight_dtype) == np.float32 and 4 * n_cells <= LOW32


def device_bytes(n_cells, weight_dtype, contract_below=CONTRACT_BELOW):
    """GPU memory :func:`spanning_forest` needs (upper estimate)."""
    index_size = np.dtype(index_dtype(n_cells)).itemsize
    key_words = 1 if packed_keys_fit(n_cells, weight_dtype) else 2
    value_size = np.dtype(weight_dtype).itemsize
    per_cell = (value_size + 1 + 2 * index_size + 8 * key_words  # grid
                + 16 * 2 + 8  # tree edge keys/ids, sort scratch, table
                + 16 + value_size  # decoded edges and weights
                + 30)  # parent directions: masks, roots, tour, arrivals
    list_edges = int(4 * n_cells * contract_below) + 1
    return n_cells * per_cell + 2 * list_edges * (16 + 2 * 8)


def spanning_forest_device(values, valid, rows, cols, connectivity,
                           weight_index, weight_dtype, progress=None,
                           contract_below=CONTRACT_BELOW, stats=None):
    """Minimum spanning forest of flat device arrays.

    ``values`` (``weight_dtype``) and ``valid`` (uint8) hold rows * cols
    cells.  Returns device arrays (edges as k*2 int64, weights) and k.
    ``stats`` (a dict) receives phase times and round counts.
    """
    timer = PhaseTimer(stats)
    forest = _tree_edge_keys(values, valid, rows, cols, connectivity,
                             weight_index, weight_dtype, progress,
                             contract_below, stats, timer)
    del forest.parent
    return _sorted_edges(forest, cols, weight_dtype, progress, timer)


class _Forest:
    """The tree edges as sort keys (``keys``, and ``ids`` unless
    ``packed``), ``k`` of them, and the Borůvka components (``parent``)."""

    def __init__(self, keys, ids, k, parent, packed):
        self.keys = keys
        self.ids = ids
        self.k = k
        self.parent = parent
        self.packed = packed


def _tree_edge_keys(values, valid, rows, cols, connectivity, weight_index,
                    weight_dtype, progress, contract_below, stats, timer):
    n = rows * cols
    weight_dtype = np.dtype(weight_dtype)
    weight64 = weight_dtype == np.float64
    packed = packed_keys_fit(n, weight_dtype)
    half = weight_dtype.type(0.5)
    eight = connectivity == 8
    neighbours = cuda.to_device(_NEIGHBOURS)
    forward = cuda.to_device(_FORWARD)
    dtype = index_dtype(n)
    report = progress if progress is not None else (lambda fraction: None)

    parent = cuda.device_array(n, dtype=dtype)
    hook = cuda.device_array(n, dtype=dtype)
    best_key = cuda.device_array(n, dtype=np.int64)
    best_id = cuda.device_array(n if not packed else 1, dtype=np.int64)
    chosen_key = cuda.device_array(max(n, 1), dtype=np.int64)
    chosen_id = cuda.device_array(max(n, 1) if not packed else 1,
                                  dtype=np.int64)
    n_chosen = cuda.to_device(np.zeros(1, dtype=np.int64))
    n_cut = cuda.to_device(np.zeros(1, dtype=np.int64))
    grid = blocks_for(n, FLAT_THREADS)
    stages = (0,) if packed else (1, 2)

    _lightest_edges[grid, FLAT_THREADS](
        values, valid, rows, cols, eight, weight_index, half, weight64,
        packed, neighbours, parent, best_key, best_id)
    timer.mark("round 1 lightest edges")
    previous_chosen = 0
    grid_rounds = 0
    cut = 4 * n
    while True:
        _hook_roots[grid, FLAT_THREADS](parent, best_key, best_id, n, cols,
                                        packed, hook, chosen_key, chosen_id,
                                        n_chosen)
        chosen = int(device_scalar(n_chosen, 0))
        if chosen == previous_chosen:  # no component has a crossing edge
            cut = 0
            break
        previous_chosen = chosen
        report(0.6 * chosen / max(n, 1))
        _jump[grid, FLAT_THREADS](parent, n, hook, packed, best_key, best_id)
        if cut <= contract_below * n:
            break
        n_cut[0] = 0
        for stage in stages:
            _grid_offer[grid, FLAT_THREADS](
                values, valid, rows, cols, eight, weight_index, half,
                weight64, packed, stage, forward, parent, best_key, best_id,
                n_cut)
        cut = int(device_scalar(n_cut, 0)) // len(stages)
        grid_rounds += 1
        if cut == 0:
            break
    del hook
    timer.mark("grid rounds")
    list_rounds = 0
    first_m = 0

    if cut > 0:
        # cut bounds the crossing edges: components only merged since
        key_a = cuda.device_array(cut, dtype=np.int64)
        id_a = cuda.device_array(cut, dtype=np.int64)
        end_a = cuda.device_array(cut, dtype=dtype)
        end_b = cuda.device_array(cut, dtype=dtype)
        n_list = cuda.to_device(np.zeros(1, dtype=np.int64))
        _grid_cut_edges[grid, FLAT_THREADS](
            values, valid, rows, cols, eight, weight_index, half, weight64,
            packed, forward, parent, n_list, key_a, id_a, end_a, end_b)
        m = int(device_scalar(n_list, 0))
        key_b = cuda.device_array(max(m, 1), dtype=np.int64)
        id_b = cuda.device_array(max(m, 1), dtype=np.int64)
        end_c = cuda.device_array(max(m, 1), dtype=dtype)
        end_d = cuda.device_array(max(m, 1), dtype=dtype)
        first_m = max(m, 1)
        while m > 0:
            n_list[0] = 0
            list_grid = blocks_for(m, FLAT_THREADS)
            _list_contract[list_grid, FLAT_THREADS](
                key_a, id_a, end_a, end_b, m, parent, packed, n_list, key_b,
                id_b, end_c, end_d, best_key, best_id)
            m = int(device_scalar(n_list, 0))
            key_a, key_b = key_b, key_a
            id_a, id_b = id_b, id_a
            end_a, end_c = end_c, end_a
            end_b, end_d = end_d, end_b
            if m == 0:
                break
            list_grid = blocks_for(m, FLAT_THREADS)
            for stage in stages:
                _list_offer[list_grid, FLAT_THREADS](
                    key_a, id_a, end_a, end_b, m, packed, stage, best_key,
                    best_id)
            _list_hook[list_grid, FLAT_THREADS](
                key_a, id_a, end_a, end_b, m, packed, best_key, best_id,
                parent, chosen_key, chosen_id, n_chosen)
            report(0.6 + 0.2 * (1.0 - m / first_m))
            list_rounds += 1
        del key_a, key_b, id_a, id_b, end_a, end_b, end_c, end_d
    del best_key, best_id

    timer.mark("list rounds")
    k = int(device_scalar(n_chosen, 0))
    if stats is not None:
        stats.update(grid_rounds=grid_rounds + 1, list_rounds=list_rounds,
                     listed_edges=first_m, packed_keys=packed)
    return _Forest(chosen_key, None if packed else chosen_id, k, parent,
                   packed)


def _sorted_edges(forest, cols, weight_dtype, progress, timer):
    """Sort the tree edges by key and decode them: device arrays (edges as
    k*2 int64, weights) and k."""
    report = progress if progress is not None else (lambda fraction: None)
    weight_dtype = np.dtype(weight_dtype)
    weight64 = weight_dtype == np.float64
    packed = forest.packed
    k = forest.k
    if packed:
        keys, ids = radix_sort(forest.keys, k)
    else:
        keys, ids = radix_sort(forest.keys, k, carried=forest.ids)
    report(0.95)
    edges = cuda.device_array(2 * max(k, 1), dtype=np.int64)
    weights = cuda.device_array(max(k, 1), dtype=weight_dtype)
    bits = weights.view(np.int64 if weight64 else np.int32)
    if k > 0:
        _decode[blocks_for(k, FLAT_THREADS), FLAT_THREADS](
            keys, ids if ids is not None else keys, k, cols, packed,
            weight64, edges, bits)
    timer.mark("sort and decode")
    return edges, weights, k


def spanning_forest(array, valid, connectivity, weight_index, weight_dtype,
                    progress, contract_below=CONTRACT_BELOW):
    """Minimum spanning forest of the valid cells of ``array`` on the GPU.

    Same contract as :func:`gridgraph.core.mst._cpu.spanning_forest`:
    returns (edges (k, 2) int64 rows (low, high) ascending by (weight, low,
    high), weights (k,) of ``weight_dtype``).  ``contract_below`` (share of
    cells) sets when the rounds switch from the grid to an edge list; any
    value gives the same forest.
    """
    if connectivity not in (4, 8):
        raise InvalidInputError(
            f"connectivity must be 4 or 8, got {connectivity!r}")
    if weight_index not in (0, 1, 2, 3):
        raise InvalidInputError(
            f"weight index must be 0 (max), 1 (min), 2 (mean) or 3 "
            f"(absdiff), got {weight_index!r}")
    weight_dtype = np.dtype(weight_dtype)
    if weight_dtype not in (np.float32, np.float64):
        raise InvalidInputError(
            f"weight dtype must be float32 or float64, got {weight_dtype}")
    values = np.ascontiguousarray(array, dtype=weight_dtype)
    valid = np.ascontiguousarray(valid, dtype=bool)
    if values.shape != valid.shape:
        raise InvalidInputError(
            f"valid mask shape {valid.shape} differs from raster shape "
            f"{values.shape}")
    rows, cols = values.shape
    n = rows * cols
    progress(0.0)
    if n == 0:
        return np.empty((0, 2), dtype=np.int64), np.empty(0, weight_dtype)
    check_device_memory(
        device_bytes(n, weight_dtype, contract_below),
        f"the minimum spanning tree of a {rows} x {cols} raster")
    d_values = copy_to_device(values)
    d_valid = copy_to_device(valid.view(np.uint8))
    edges, weights, k = spanning_forest_device(
        d_values, d_valid, rows, cols, connectivity, weight_index,
        weight_dtype, progress.span(0.05, 0.9), contract_below)
    del d_values, d_valid
    host_edges = copy_to_host(edges, 2 * k).reshape(k, 2)
    host_weights = copy_to_host(weights, k)
    progress(1.0)
    return host_edges, host_weights


def minimum_spanning_tree(array, nodata, connectivity, weight_index,
                          weight_dtype, want_edges, progress, stats=None):
    """The in-memory CUDA run of :func:`gridgraph.core.minimum_spanning_tree`.

    Valid cells (NaN, ``nodata``), the forest, its parent directions,
    trees and exact total weight are all computed on the device; only the
    direction raster (float32) comes back, and the sorted edge list and
    weights when ``want_edges``.  Returns (edges or None, weights or None,
    total weight, trees, parent direction).  ``stats`` (a dict) receives
    phase times (each phase synchronised: for benchmarks).
    """
    from . import _cuda_tree
    weight_dtype = np.dtype(weight_dtype)
    rows, cols = array.shape
    n = rows * cols
    progress(0.0)
    if n == 0:
        return (np.empty((0, 2), dtype=np.int64) if want_edges else None,
                np.empty(0, weight_dtype) if want_edges else None, 0.0, 0,
                np.empty((rows, cols), dtype=np.float32))
    check_device_memory(
        device_bytes(n, weight_dtype),
        f"the minimum spanning tree of a {rows} x {cols} raster")
    timer = PhaseTimer(stats)
    d_values, d_valid = valid_cells_device(array, nodata, weight_dtype)
    timer.mark("to device, valid cells")
    forest = _tree_edge_keys(d_values, d_valid, rows, cols, connectivity,
                             weight_index, weight_dtype,
                             progress.span(0.0, 0.7), CONTRACT_BELOW, stats,
                             timer)
    del d_values
    total = _cuda_tree.exact_total_device(
        forest.keys, forest.k, forest.packed, weight_dtype == np.float64)
    timer.mark("exact total")
    direction, trees = _cuda_tree.parent_direction_device(
        forest.parent, d_valid, rows, cols, forest.keys, forest.ids,
        forest.k, forest.packed, timer if stats is not None else None)
    del d_valid
    forest.parent = None
    progress(0.8)
    host_direction = copy_to_host(direction).reshape(rows, cols)
    del direction
    timer.mark("direction to host")
    edges = weights = None
    if want_edges:
        d_edges, d_weights, k = _sorted_edges(forest, cols, weight_dtype,
                                              None, timer)
        edges = copy_to_host(d_edges, 2 * k).reshape(k, 2)
        weights = copy_to_host(d_weights, k)
        timer.mark("edges to host")
    progress(1.0)
    return edges, weights, total, trees, host_direction


@cuda.jit(cache=True)
def _low_bits_from_flags(flags, n, low_bits):
    """Bit k of ``low_bits[v]``: the tree edge of rank k whose low end is v
    (``flags`` holds one byte per edge id, ``low * 4 + rank``)."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v < n:
        base = v * 4
        low_bits[v] = flags[base] | (flags[base + 1] << 1) \
            | (flags[base + 2] << 2) | (flags[base + 3] << 3)


def forest_low_bits(array, valid, connectivity, weight_index, weight_dtype):
    """The minimum spanning forest of :func:`spanning_forest` as one byte
    per cell (bit k: the tree edge of rank k, 0 right, 1 down-left, 2
    down, 3 down-right, whose low end is that cell) and its edge count:
    no sort and no edge list cross to the host (the tiled MST's leaf tiles
    without an edge list).  Returns (uint8 array of rows * cols, k)."""
    from ._cuda_tree import _fill, _flag_tree_edges
    weight_dtype = np.dtype(weight_dtype)
    values = np.ascontiguousarray(array, dtype=weight_dtype)
    valid = np.ascontiguousarray(valid, dtype=bool)
    rows, cols = values.shape
    n = rows * cols
    if n == 0:
        return np.zeros(0, dtype=np.uint8), 0
    check_device_memory(
        device_bytes(n, weight_dtype),
        f"the minimum spanning tree of a {rows} x {cols} raster")
    d_values = copy_to_device(values)
    d_valid = copy_to_device(valid.view(np.uint8))
    forest = _tree_edge_keys(d_values, d_valid, rows, cols, connectivity,
                             weight_index, weight_dtype, None,
                             CONTRACT_BELOW, None, PhaseTimer(None))
    del d_values, d_valid, forest.parent
    flags = cuda.device_array(4 * n, dtype=np.uint8)
    _fill[blocks_for(4 * n, FLAT_THREADS), FLAT_THREADS](flags, 4 * n, 0)
    if forest.k > 0:
        _flag_tree_edges[blocks_for(forest.k, FLAT_THREADS), FLAT_THREADS](
            forest.keys, forest.ids if forest.ids is not None else forest.keys,
            forest.k, forest.packed, flags)
    low_bits = cuda.device_array(n, dtype=np.uint8)
    _low_bits_from_flags[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
        flags, n, low_bits)
    del flags
    return copy_to_host(low_bits), forest.k
