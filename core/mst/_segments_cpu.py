"""Numba CPU kernels of threshold segments: the connected pieces of the grid
graph of the edges whose weight is at or under a threshold.

These are exactly the pieces of the minimum spanning forest once its edges
heavier than the threshold are cut (cycle property: an edge of weight
<= t left out of the forest closes a cycle of edges <= t), so no tree is
needed: a two-pass union-find labelling on the grid, as for connected
components (:mod:`gridgraph.core.components._cpu`, whose strips, seam
merge and resolve this reuses), where two neighbours are linked when the
weight of their edge is <= t.  Links by weight are not transitive, so every
linked neighbour is merged (no decision tree).  Union by minimum label
makes each piece's root the provisional label of its first cell in scan
order, so the final labels are 1..n in scan order of each piece's first
cell: the numbering of :func:`gridgraph.core.segment_by_threshold`.

Several thresholds share the work: strips keep one union-find of their own
links, which grows threshold by threshold (ascending) with the links whose
weight lies between the previous threshold and this one; each threshold
then merges its seams in a copy and numbers that copy.
"""

import numpy as np
from numba import njit

from ..components._cpu import _cpu_count, _strip_count
from ..components._cpu_passes import _resolve, _union
from ..components._cpu_pool import _Serial, _wait
from ._cpu import _edge_weight

# Cells per strip per kernel call, as in the components kernels.
_CELLS_PER_CALL = 2**20


@njit(inline="always")
def _linked(x, y, weight_index, half, low, high):
    """The edge weight lies in (low, high]."""
    w = _edge_weight(x, y, weight_index, half)
    return low < w and w <= high


@njit(inline="always")
def _at_most(x, y, weight_index, half, threshold):
    return _edge_weight(x, y, weight_index, half) <= threshold


@njit(cache=True, nogil=True)
def _first_pass(values, valid, eight, weight_index, half, threshold, labels,
                parent, top, row_start, row_stop, next_label):
    """Provisional labels of rows ``row_start:row_stop`` of the strip whose
    first row is ``top``, linking neighbours whose edge weight is <=
    ``threshold``; returns the next unused provisional label."""
    cols = values.shape[1]
    for row in range(row_start, row_stop):
        has_above = row > top
        for col in range(cols):
            if not valid[row, col]:
                labels[row, col] = 0
                continue
            x = values[row, col]
            current = 0
            if col > 0 and valid[row, col - 1] and _at_most(
                    x, values[row, col - 1], weight_index, half, threshold):
                current = labels[row, col - 1]
            if has_above:
                first_col = col - 1 if eight and col > 0 else col
                last_col = col + 1 if eight and col + 1 < cols else col
                for above_col in range(first_col, last_col + 1):
                    if valid[row - 1, above_col] and _at_most(
                            x, values[row - 1, above_col], weight_index, half,
                            threshold):
                        above = labels[row - 1, above_col]
                        if current == 0:
                            current = above
                        elif above != current:
                            current = _union(parent, current, above)
            if current == 0:
                current = next_label
                parent[next_label] = next_label
                next_label += 1
            labels[row, col] = current
    return next_label


@njit(cache=True, nogil=True)
def _add_links(values, valid, eight, weight_index, half, low, high, labels,
               parent, top, row_start, row_stop):
    """Merge, in the strip's union-find, the neighbours (within the strip)
    whose edge weight lies in (low, high]."""
    cols = values.shape[1]
    for row in range(row_start, row_stop):
        has_above = row > top
        for col in range(cols):
            if not valid[row, col]:
                continue
            x = values[row, col]
            current = labels[row, col]
            if col > 0 and valid[row, col - 1] and _linked(
                    x, values[row, col - 1], weight_index, half, low, high):
                _union(parent, current, labels[row, col - 1])
            if has_above:
                first_col = col - 1 if eight and col > 0 else col
                last_col = col + 1 if eight and col + 1 < cols else col
                for above_col in range(first_col, last_col + 1):
                    if valid[row - 1, above_col] and _linked(
                            x, values[row - 1, above_col], weight_index, half,
                            low, high):
                        _union(parent, current, labels[row - 1, above_col])


@njit(cache=True, nogil=True)
def _merge_seams(values, valid, eight, weight_index, half, threshold, labels,
                 parent, seam_rows):
    """Merge the links across each strip's first row and the row above."""
    cols = values.shape[1]
    for row in seam_rows:
        for col in range(cols):
            if not valid[row, col]:
                continue
            x = values[row, col]
            first_col = col - 1 if eight and col > 0 else col
            last_col = col + 1 if eight and col + 1 < cols else col
            for above_col in range(first_col, last_col + 1):
                if valid[row - 1, above_col] and _at_most(
                        x, values[row - 1, above_col], weight_index, half,
                        threshold):
                    _union(parent, labels[row, col], labels[row - 1, above_col])


@njit(cache=True, nogil=True)
def _relabel(provisional, final, out, row_start, row_stop):
    cols = provisional.shape[1]
    for row in range(row_start, row_stop):
        for col in range(cols):
            out[row, col] = final[provisional[row, col]]


def label_thresholds(values, valid, connectivity, weight_index, thresholds,
                     progress, strips=None):
    """Threshold segments of ``values`` (weight dtype, C-contiguous) for each
    of ``thresholds`` (float64 numbers, ascending; compared as ``weight <=
    threshold`` in float64), as a list of (labels, count).

    ``strips`` fixes the number of strips (tests use it to put seams in
    small rasters); any value gives the same labels.
    """
    rows, cols = values.shape
    dtype = np.dtype(np.int32 if values.size < 2**31 - 1 else np.int64)
    half = values.dtype.type(0.5)
    eight = connectivity == 8
    if values.size == 0:
        progress(1.0)
        return [(np.zeros((rows, cols), dtype), 0) for _ in thresholds]
    strip_count = _strip_count(rows, cols) if strips is None else \
        max(1, min(int(strips), rows))
    bounds = np.linspace(0, rows, strip_count + 1).round().astype(np.int64)
    strip_starts, strip_stops = bounds[:-1], bounds[1:]
    first_labels = strip_starts * cols + 1
    next_labels = first_labels.copy()
    provisional = np.empty((rows, cols), dtype=dtype)
    parent = np.empty(values.size + 1, dtype=dtype)
    parent[0] = 0
    rows_per_call = max(1, _CELLS_PER_CALL // cols)
    longest = int((strip_stops - strip_starts).max())
    workers = min(strip_count, _cpu_count())
    n_thresholds = len(thresholds)
    results = []

    def strip_blocks(pool, block, start, stop):
        """Run block(strip, row_start, row_stop) over every strip, a call's
        rows at a time, reporting progress from start to stop."""
        for offset in range(0, longest, rows_per_call):
            _wait(pool.map(block, range(strip_count),
                           [offset] * strip_count))
            progress(start + (stop - start)
                     * min(offset + rows_per_call, longest) / longest)

    def rows_of(strip, offset):
        row_start = strip_starts[strip] + offset
        return row_start, min(row_start + rows_per_call, strip_stops[strip])

    with ThreadPool(workers) as pool:
        for i, threshold in enumerate(thresholds):
            share = 1.0 / n_thresholds
            start = i * share
            if i == 0:
                def block(strip, offset):
                    row_start, row_stop = rows_of(strip, offset)
                    if row_start < row_stop:
                        next_labels[strip] = _first_pass(
                            values, valid, eight, weight_index, half,
                            threshold, provisional, parent,
                            strip_starts[strip], row_start, row_stop,
                            next_labels[strip])
            else:
                low = thresholds[i - 1]

                def block(strip, offset):
                    row_start, row_stop = rows_of(strip, offset)
                    if row_start < row_stop:
                        _add_links(values, valid, eight, weight_index, half,
                                   low, threshold, provisional, parent,
                                   strip_starts[strip], row_start, row_stop)
            strip_blocks(pool, block, start, start + 0.5 * share)
            last = i + 1 == n_thresholds
            # the last threshold may use the strips' union-find itself
            final = parent if last else parent.copy()
            _merge_seams(values, valid, eight, weight_index, half, threshold,
                         provisional, final, strip_starts[1:])
            count = _resolve(final, first_labels, next_labels)
            labels = provisional if last else np.empty_like(provisional)

            def relabel(strip, offset):
                row_start, row_stop = rows_of(strip, offset)
                if row_start < row_stop:
                    _relabel(provisional, final, labels, row_start, row_stop)
            strip_blocks(pool, relabel, start + 0.5 * share, start + share)
            results.append((labels, int(count)))
    return results


class ThreadPool:
    """A thread pool for more than one worker, else the calling thread."""

    def __init__(self, workers):
        self._workers = workers

    def __enter__(self):
        if self._workers > 1:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(self._workers)
            return self._pool.__enter__()
        return _Serial()

    def __exit__(self, *exc_info):
        if self._workers > 1:
            return self._pool.__exit__(*exc_info)
        return False
