"""Numba CPU kernels for connected components: two-pass labelling.

First pass (raster scan): each valid cell looks at its already-visited
neighbours (left, and the three above for 8-connectivity, following the
decision tree of Wu, Otoo & Suzuki 2009), copies a neighbour's provisional
label or creates a new one, and records label equivalences in a union-find.
Union is by minimum label, so the root of every set is the provisional label
of its component's first cell in scan order; numbering the roots in increasing
order then gives final labels 1..count in scan order of each component's first
cell.  Second pass: replace every provisional label by its final label.

The passes are run a block of rows at a time so Python can report progress
(and honour a cancel) between blocks; the union-find state carries over.
"""

import numpy as np
from numba import njit

from .._common import index_dtype

# Rows per kernel call: small enough that a block of a 4096-column raster
# takes milliseconds, so a cancel is honoured well within a second.
_ROWS_PER_CALL = 256

# Fractions of the progress bar given to the first pass and the resolve step;
# the second pass takes the rest.
_FIRST_PASS_END = 0.6
_RESOLVE_END = 0.7


def label(array, valid, connectivity, mode, progress):
    """Label the connected components of ``array`` (see the package docstring).

    Parameters
    ----------
    array : 2-D ndarray (integer or float), not modified
    valid : 2-D bool ndarray, same shape: cells that are vertices
    connectivity : {4, 8}
    mode : {"equal", "nonzero"}
        ``equal``: neighbouring valid cells with equal values are connected;
        ``nonzero``: valid non-zero cells are foreground (scipy.ndimage.label).
    progress : gridgraph.core._common.Progress

    Returns
    -------
    labels : ndarray of int32 (int64 from 2**31 - 1 cells on)
        1..count in raster scan order of each component's first cell, 0 for
        background and invalid cells.
    count : int
    """
    values = _kernel_ready(array)
    valid = np.ascontiguousarray(valid, dtype=np.bool_)
    rows, cols = values.shape
    dtype = index_dtype(values.size)
    labels = np.empty((rows, cols), dtype=dtype)
    if values.size == 0:
        progress(1.0)
        return labels, 0
    nonzero = mode == "nonzero"
    eight = connectivity == 8
    # Worst case (e.g. all values distinct) is one provisional label per cell;
    # np.empty only commits the pages that are actually used.
    parent = np.empty(values.size + 1, dtype=dtype)
    parent[0] = 0

    next_label = 1
    for row_start in range(0, rows, _ROWS_PER_CALL):
        row_stop = min(row_start + _ROWS_PER_CALL, rows)
        next_label = _first_pass(values, valid, nonzero, eight, labels, parent,
                                 row_start, row_stop, next_label)
        progress(_FIRST_PASS_END * row_stop / rows)

    count = _resolve(parent, next_label)
    progress(_RESOLVE_END)

    for row_start in range(0, rows, _ROWS_PER_CALL):
        row_stop = min(row_start + _ROWS_PER_CALL, rows)
        _second_pass(labels, parent, row_start, row_stop)
        progress(_RESOLVE_END + (1.0 - _RESOLVE_END) * row_stop / rows)
    return labels, int(count)


def _kernel_ready(array):
    """A C-contiguous, native-endian array numba can compile for (no copy
    when the input already is one; a memmap is viewed as a plain ndarray)."""
    values = np.asarray(array)
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    elif not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return np.ascontiguousarray(values)


@njit(cache=True, nogil=True, inline="always")
def _find(parent, node):
    root = node
    while parent[root] != root:
        root = parent[root]
    # path compression: point every node on the way straight at the root
    while parent[node] != root:
        following = parent[node]
        parent[node] = root
        node = following
    return root


@njit(cache=True, nogil=True, inline="always")
def _union(parent, first, second):
    """Merge the sets of two labels; the smaller root becomes the root."""
    first_root = _find(parent, first)
    second_root = _find(parent, second)
    if first_root < second_root:
        parent[second_root] = first_root
        return first_root
    parent[first_root] = second_root
    return second_root


@njit(cache=True, nogil=True, inline="always")
def _linked(values, valid, nonzero, cell_value, row, col):
    """Is the visited neighbour (row, col) in the same class as a foreground
    cell of value ``cell_value``?"""
    if not valid[row, col]:
        return False
    if nonzero:
        return values[row, col] != 0
    return values[row, col] == cell_value


@njit(cache=True, nogil=True)
def _first_pass(values, valid, nonzero, eight, labels, parent,
                row_start, row_stop, next_label):
    """Provisional labels for rows ``row_start:row_stop`` (all rows above
    already labelled); returns the next unused provisional label."""
    rows, cols = values.shape
    zero = labels.dtype.type(0)
    for row in range(row_start, row_stop):
        has_above = row > 0
        for col in range(cols):
            cell_value = values[row, col]
            if not valid[row, col] or (nonzero and cell_value == 0):
                labels[row, col] = zero
                continue
            has_left = col > 0
            has_right = col < cols - 1
            # Equality (and being foreground) is transitive, and in the
            # 8-neighbourhood the cell above touches all other visited
            # neighbours, so when it is linked nothing else can add a merge.
            if has_above and _linked(values, valid, nonzero, cell_value,
                                     row - 1, col):
                current = labels[row - 1, col]
                if not eight and has_left and _linked(
                        values, valid, nonzero, cell_value, row, col - 1):
                    left = labels[row, col - 1]
                    if left != current:
                        current = _union(parent, current, left)
                labels[row, col] = current
                continue
            if eight:
                if has_above and has_right and _linked(
                        values, valid, nonzero, cell_value, row - 1, col + 1):
                    current = labels[row - 1, col + 1]
                    # up-left and left touch each other but not up-right
                    if has_left and _linked(values, valid, nonzero, cell_value,
                                            row - 1, col - 1):
                        current = _union(parent, current,
                                         labels[row - 1, col - 1])
                    elif has_left and _linked(values, valid, nonzero,
                                              cell_value, row, col - 1):
                        current = _union(parent, current, labels[row, col - 1])
                    labels[row, col] = current
                    continue
                if has_above and has_left and _linked(
                        values, valid, nonzero, cell_value, row - 1, col - 1):
                    labels[row, col] = labels[row - 1, col - 1]
                    continue
            if has_left and _linked(values, valid, nonzero, cell_value,
                                    row, col - 1):
                labels[row, col] = labels[row, col - 1]
                continue
            labels[row, col] = next_label
            parent[next_label] = next_label
            next_label += 1
    return next_label


@njit(cache=True, nogil=True)
def _resolve(parent, next_label):
    """Turn ``parent`` into final labels: roots, in increasing provisional
    order (= scan order of first cells), get 1, 2, ...; returns the count."""
    count = 0
    for provisional in range(1, next_label):
        root = parent[provisional]
        if root == provisional:
            count += 1
            parent[provisional] = count
        else:
            # Union by minimum keeps parent < node for non-roots, and every
            # smaller entry already holds its set's final label.
            parent[provisional] = parent[root]
    return count


@njit(cache=True, nogil=True)
def _second_pass(labels, final, row_start, row_stop):
    cols = labels.shape[1]
    for row in range(row_start, row_stop):
        for col in range(cols):
            provisional = labels[row, col]
            if provisional != 0:
                labels[row, col] = final[provisional]
