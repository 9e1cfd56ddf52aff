"""Whole-raster passes of the habitat network, parallel over rows (numba
``prange``): the habitat mask, the patch relabelling with its checks, the
patch boundary cells that seed the cost distance, and the patch cells'
accumulated cost and allocation set once the cost distance is done.

Each pass works on a block of rows (the whole raster in memory, a strip on
the tiled path); per-row results are combined in row order, so nothing
depends on the number of threads.

Why seed the cost distance from the boundary cells only.  Every patch cell
is a source (cost 0, its patch as allocation).  A patch cell whose
movement neighbours all belong to its own patch (an *interior* cell) is
never the neighbour of a cell outside the patch, since the neighbourhoods
are symmetric.  The cost-distance fixed point of the cells outside the
interiors, ``(d, h)[c] = lexmin over neighbours n of (d[n] + w(n, c),
h[n] + 1)`` with sources at (0, 0) (``costdistance._cuda``'s docstring),
therefore involves only those cells and the boundary sources: it is the
same whether the interior cells are sources or not, and so are the
predecessors and allocations read off it.  The interior cells themselves
are then reached from their own patch's boundary (every way into a patch
passes a boundary source first), with a cost that may be above 0: they
are set to cost 0 afterwards, as sources.  Their directions are left as
the engine found them: nothing reads them (the link paths stop at the
first source they reach, a boundary cell) and they are not an output.
The gain: the engines' per-source work (source lists, sorting, the tiles
woken at the start) shrinks from the patch area to its perimeter.
"""

import numpy as np
from numba import njit, prange

from .._common import nodata_in_dtype

# Histograms of more bins than this (bins x threads) are counted by
# np.bincount in one thread instead of one histogram per thread.
PARALLEL_BINCOUNT_LIMIT = 1 << 26
# Neighbour offsets of the 4- and 8-neighbourhoods (movement and patches).
NEIGHBOURS = {4: np.array([(0, 1), (-1, 0), (0, -1), (1, 0)], np.int64),
              8: np.array([(0, 1), (-1, 0), (0, -1), (1, 0), (-1, 1),
                           (-1, -1), (1, -1), (1, 1)], np.int64)}


def _nodata_test(dtype, nodata):
    """(has_nodata, nodata as a one-element array of ``dtype``), the rule
    of ``_common.valid_mask``."""
    value = nodata_in_dtype(dtype, nodata)
    return value is not None, np.array([0 if value is None else value],
                                       dtype=dtype)


def _numba_dtype(dtype):
    """Whether the kernels below take values of ``dtype`` (numba has no
    float16 arithmetic; such rasters take the numpy path)."""
    return np.dtype(dtype).kind in "iuf" and np.dtype(dtype) != np.float16


# --------------------------------------------------------------- the mask


@njit(cache=True, nogil=True, parallel=True)
def _mask_kernel(block, has_nodata, nodata, values, use_values, out):
    rows, cols = block.shape
    for r in prange(rows):
        for c in range(cols):
            v = block[r, c]
            # v != v: NaN (never true for integers)
            if v != v or (has_nodata and v == nodata[0]):
                out[r, c] = 0
            elif use_values:
                x = np.float64(v)
                i = np.searchsorted(values, x)
                out[r, c] = 1 if i < values.size and values[i] == x else 0
            else:
                out[r, c] = 1 if v != 0 else 0


def habitat_mask(block, nodata, habitat_values, out=None):
    """uint8 mask of the habitat cells of ``block``: valid (not NaN, not
    ``nodata``) and non-zero, or whose value is in the sorted float64
    ``habitat_values`` (compared as float64, as np.isin does).  Written
    into ``out`` when given (a uint8 array shaped like ``block``)."""
    block = np.asarray(block)
    if out is None:
        out = np.empty(block.shape, dtype=np.uint8)
    if not _numba_dtype(block.dtype):
        from .._common import valid_mask
        valid = valid_mask(block, nodata)
        out[...] = valid & (block != 0 if habitat_values is None
                            else np.isin(block, habitat_values))
        return out
    has_nodata, nodata_value = _nodata_test(block.dtype, nodata)
    values = np.zeros(0) if habitat_values is None else np.ascontiguousarray(
        habitat_values, dtype=np.float64)
    _mask_kernel(block, has_nodata, nodata_value, values,
                 habitat_values is not None, out)
    return out


# ----------------------------------------------------- counting, relabelling


@njit(cache=True, nogil=True, parallel=True)
def _bincount_kernel(labels, bins, parts):
    rows = labels.shape[0]
    counts = np.zeros((parts, bins), dtype=np.int64)
    for p in prange(parts):
        for r in range(p * rows // parts, (p + 1) * rows // parts):
            for c in range(labels.shape[1]):
                counts[p, labels[r, c]] += 1
    total = np.zeros(bins, dtype=np.int64)
    for p in range(parts):
        for b in range(bins):
            total[b] += counts[p, b]
    return total


def label_counts(labels, bins):
    """Cells of each label 0..bins-1 of a 2-D block of labels."""
    from numba import get_num_threads
    parts = max(1, min(get_num_threads(), labels.shape[0]))
    if parts == 1 or bins * parts > PARALLEL_BINCOUNT_LIMIT:
        return np.bincount(np.asarray(labels).ravel(), minlength=bins)
    return _bincount_kernel(np.asarray(labels), bins, parts)


@njit(cache=True, nogil=True, parallel=True)
def _relabel_kernel(labels, renumber, resistance, has_nodata, nodata, out,
                    valid_per_row, stranded_per_row, first_stranded):
    rows, cols = labels.shape
    for r in prange(rows):
        valid_count = 0
        stranded = 0
        first = -1
        for c in range(cols):
            new = renumber[labels[r, c]]
            out[r, c] = new
            v = resistance[r, c]
            valid = not (v != v or (has_nodata and v == nodata[0]))
            if valid:
                valid_count += 1
            elif new != 0:
                stranded += 1
                if first < 0:
                    first = c
        valid_per_row[r] = valid_count
        stranded_per_row[r] = stranded
        first_stranded[r] = first


def relabel(labels, renumber, resistance, resistance_nodata, out):
    """Write ``renumber[labels]`` into ``out`` (a block of the patch raster)
    and check the resistance block beside it.  Returns (valid resistance
    cells, patch cells without a valid resistance, (row, col) in the block
    of the first of those or None)."""
    resistance = np.asarray(resistance)
    labels = np.asarray(labels)
    if not _numba_dtype(resistance.dtype):
        from .._common import valid_mask
        out[...] = renumber[labels]
        valid = valid_mask(resistance, resistance_nodata)
        stranded = (out != 0) & ~valid
        first = None
        if stranded.any():
            r, c = np.argwhere(stranded)[0]
            first = (int(r), int(c))
        return int(np.count_nonzero(valid)), int(stranded.sum()), first
    has_nodata, nodata_value = _nodata_test(resistance.dtype,
                                            resistance_nodata)
    rows = labels.shape[0]
    valid_per_row = np.empty(rows, dtype=np.int64)
    stranded_per_row = np.empty(rows, dtype=np.int64)
    first_stranded = np.empty(rows, dtype=np.int64)
    _relabel_kernel(labels, renumber, resistance, has_nodata, nodata_value,
                    out, valid_per_row, stranded_per_row, first_stranded)
    stranded = int(stranded_per_row.sum())
    first = None
    if stranded:
        r = int(np.flatnonzero(stranded_per_row)[0])
        first = (r, int(first_stranded[r]))
    return int(valid_per_row.sum()), stranded, first


# ---------------------------------------------------------- boundary cells


@njit(cache=True, nogil=True, inline="always")
def _on_boundary(patches, r, c, neighbours):
    """A patch cell with a movement neighbour (inside the block) that is
    not of its patch."""
    rows, cols = patches.shape
    p = patches[r, c]
    for i in range(neighbours.shape[0]):
        rr = r + neighbours[i, 0]
        cc = c + neighbours[i, 1]
        if 0 <= rr < rows and 0 <= cc < cols and patches[rr, cc] != p:
            return True
    return False


@njit(cache=True, nogil=True, parallel=True)
def _boundary_kernel(patches, first, last, neighbours, row0):
    cols = patches.shape[1]
    n = last - first
    counts = np.zeros(n + 1, dtype=np.int64)
    for i in prange(n):
        r = first + i
        k = 0
        for c in range(cols):
            if patches[r, c] != 0 and _on_boundary(patches, r, c, neighbours):
                k += 1
        counts[i + 1] = k
    for i in range(n):
        counts[i + 1] += counts[i]
    cells = np.empty((counts[n], 2), dtype=np.int64)
    ids = np.empty(counts[n], dtype=np.int64)
    for i in prange(n):
        r = first + i
        k = counts[i]
        for c in range(cols):
            if patches[r, c] != 0 and _on_boundary(patches, r, c, neighbours):
                cells[k, 0] = row0 + r
                cells[k, 1] = c
                ids[k] = patches[r, c]
                k += 1
    return cells, ids


def boundary_cells(patches, first, last, connectivity, row0):
    """(row, col) cells and patch ids, in scan order, of the boundary cells
    of block rows ``first..last-1`` (raster rows ``row0 + first``...).

    ``patches`` holds those rows and, where the raster has them, the row
    above and the row below, so that a cell on the block's edge sees its
    neighbours; a neighbour outside the block is outside the raster.
    """
    return _boundary_kernel(np.asarray(patches), int(first), int(last),
                            NEIGHBOURS[connectivity], int(row0))


# ------------------------------------------------------ settle patch cells


@njit(cache=True, nogil=True, parallel=True)
def _settle_kernel(patches, accumulated, allocation):
    rows, cols = patches.shape
    for r in prange(rows):
        for c in range(cols):
            p = patches[r, c]
            if p != 0:
                accumulated[r, c] = 0.0
                allocation[r, c] = p


def settle_patches(patches, accumulated, allocation):
    """Cost 0 and the own patch as allocation on every patch cell (the
    interior cells were not seeded: see the module docstring)."""
    _settle_kernel(np.asarray(patches), accumulated, allocation)
