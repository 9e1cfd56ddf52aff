"""The sequential forest walker the CPU backend used before the banded,
parallel one (gridgraph.core.mst._forest_cpu), kept as its test oracle:
one depth-first search of each piece from its lowest-index cell.  Copied
verbatim except for the chunked tree masks (one chunk here) and progress.
"""

import numpy as np
from numba import njit

from gridgraph.core._common import index_dtype
from gridgraph.core.errors import InvalidInputError
from gridgraph.core.mst import PARENT_DEGREES, PARENT_OFFSETS

_TRAVERSAL_BUDGET = 1 << 21

# Neighbour k of a cell is at PARENT_OFFSETS[k] (E, N, W, S, NE, NW, SW, SE);
# bit k of a cell's tree mask says the tree edge toward it exists.
_OPPOSITE = np.array([2, 3, 0, 1, 6, 7, 4, 5], dtype=np.int64)


@njit(cache=True, nogil=True)
def _tree_masks(edges, valid_flat, cols, chunk_masks, bad):
    """Set bit k of ``masks[v]`` for each edge from v toward neighbour k.

    ``chunk_masks`` (chunks x cells, zeros): the edge list is cut into
    chunks that each set bits in their own row, in parallel, then the rows
    are or-ed into row 0.  ``bad[t]`` gets -1, or the row of an edge of
    chunk t that does not join two valid neighbouring cells of the raster.
    """
    n_chunks, n = chunk_masks.shape
    n_edges = edges.shape[0]
    for t in range(n_chunks):
        bad[t] = -1
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            low = min(edges[i, 0], edges[i, 1])
            high = max(edges[i, 0], edges[i, 1])
            if low < 0 or high >= n:
                bad[t] = i
                break
            low_row = low // cols
            high_row = high // cols
            step_cols = (high - high_row * cols) - (low - low_row * cols)
            step_rows = high_row - low_row
            if step_rows == 0 and step_cols == 1:
                k = 0
            elif step_rows == 1 and step_cols == 0:
                k = 3
            elif step_rows == 1 and step_cols == -1:
                k = 6
            elif step_rows == 1 and step_cols == 1:
                k = 7
            else:
                bad[t] = i
                break
            if not (valid_flat[low] and valid_flat[high]):
                bad[t] = i
                break
            chunk_masks[t, low] |= np.uint8(1 << k)
            chunk_masks[t, high] |= np.uint8(1 << _OPPOSITE[k])
    if n_chunks > 1:
        for v in range(n):
            mask = chunk_masks[0, v]
            for t in range(1, n_chunks):
                mask |= chunk_masks[t, v]
            chunk_masks[0, v] = mask


@njit(cache=True, nogil=True)
def _traverse(masks, valid_flat, cols, state, budget, stack, seen, offsets,
              degrees, direction, labels):
    """Depth-first search of each piece from its lowest-index cell.

    Resumable: ``state`` = (next root candidate, stack size, pieces so far)
    persists between calls, and a call returns after about ``budget``
    cells.  Writes the degrees toward each cell's parent into ``direction``
    and the piece number into ``labels`` (either may be empty to skip it).
    """
    next_root, top, pieces = state[0], state[1], state[2]
    n = valid_flat.size
    want_direction = direction.size > 0
    want_labels = labels.size > 0
    steps = np.empty(8, dtype=np.int64)
    for k in range(8):
        steps[k] = offsets[k, 0] * cols + offsets[k, 1]
    done = 0
    while done < budget:
        if top == 0:
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
            stack[0] = next_root
            top = 1
        top -= 1
        v = stack[top]
        done += 1
        mask = masks[v]
        for k in range(8):
            if (mask & (1 << k)) == 0:
                continue
            u = v + steps[k]
            if seen[u]:
                continue
            seen[u] = True
            if want_direction:
                direction[u] = degrees[_OPPOSITE[k]]
            if want_labels:
                labels[u] = pieces
            stack[top] = u
            top += 1
    state[0], state[1], state[2] = next_root, top, pieces


def walk_forest_sequential(edges, valid, progress, want_direction, want_labels):
    valid = np.ascontiguousarray(valid, dtype=bool)
    rows, cols = valid.shape
    n = valid.size
    valid_flat = valid.reshape(-1)
    edges = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    chunk_masks = np.zeros((1, n), dtype=np.uint8)
    bad = np.empty(1, dtype=np.int64)
    _tree_masks(edges, valid_flat, max(cols, 1), chunk_masks, bad)
    masks = chunk_masks[0]
    if progress is not None:
        progress(0.1)
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
    if want_direction:
        direction = np.full(n, np.nan, dtype=np.float32)
    else:
        direction = np.empty(0, dtype=np.float32)
    labels = np.zeros(n if want_labels else 0, dtype=index_dtype(n))
    stack = np.empty(max(n, 1), dtype=index_dtype(n))
    seen = np.zeros(n, dtype=bool)
    state = np.zeros(3, dtype=np.int64)
    done = 0
    while True:
        _traverse(masks, valid_flat, max(cols, 1), state, _TRAVERSAL_BUDGET,
                  stack, seen, PARENT_OFFSETS, PARENT_DEGREES, direction,
                  labels)
        if state[0] == n and state[1] == 0:
            break
        done += _TRAVERSAL_BUDGET
        if progress is not None:
            progress(min(0.1 + 0.9 * done / max(n, 1), 0.99))
    if progress is not None:
        progress(1.0)
    if want_direction:
        direction = direction.reshape(rows, cols)
    if want_labels:
        labels = labels.reshape(rows, cols)
    return direction, labels, int(state[2])


