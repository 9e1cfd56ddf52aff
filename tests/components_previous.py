"""The per-cell first pass of core/components/_cpu.py as it was before the
branch-light rewrite (2026-11-24, third session), kept as a reference: the
tests label with it and compare the final labels, label for label, with
today's kernels on random and adversarial rasters.  It needs a ``valid``
array (the old driver built one when none was given)."""

import numpy as np
from numba import njit

from gridgraph.core.components._cpu_passes import _resolve, _second_pass, \
    _union


@njit(cache=True, nogil=True, inline="always")
def _label_rows(values, valid, labels, parent, top, row_start, row_stop,
                next_label, nonzero, eight):
    """First pass over rows ``row_start:row_stop`` of the strip whose first
    row is ``top``; ``nonzero`` and ``eight`` are compile-time constants.

    Every valid (``equal``) or foreground (``nonzero``) cell has a label
    other than 0, so a neighbour is linked exactly when its label is not 0
    and, in ``equal`` mode, its value equals the cell's.  The labels and
    values of the three cells above slide along in registers, and cells
    outside the raster or the strip are label 0.
    """
    cols = values.shape[1]
    zero_value = values.dtype.type(0)
    for row in range(row_start, row_stop):
        has_above = row > top
        above_left = 0
        above_left_value = zero_value
        above = labels[row - 1, 0] if has_above else 0
        above_value = values[row - 1, 0] if has_above else zero_value
        above_right = 0
        above_right_value = zero_value
        if has_above and cols > 1:
            above_right = labels[row - 1, 1]
            above_right_value = values[row - 1, 1]
        left = 0
        left_value = zero_value
        for col in range(cols):
            cell_value = values[row, col]
            current = 0
            if valid[row, col] and (not nonzero or cell_value != 0):
                if nonzero:
                    # foreground neighbours are exactly the labelled ones
                    above_linked = above != 0
                    left_linked = left != 0
                    above_left_linked = above_left != 0
                    above_right_linked = above_right != 0
                else:
                    above_linked = above != 0 and above_value == cell_value
                    left_linked = left != 0 and left_value == cell_value
                    above_left_linked = (above_left != 0
                                         and above_left_value == cell_value)
                    above_right_linked = (above_right != 0
                                          and above_right_value == cell_value)
                if eight:
                    # Wu et al.'s decision tree.  Links are transitive (equal
                    # values, or foreground); the cell above touches every
                    # other visited neighbour and above-left touches left, so
                    # only above-right may need a merge.
                    if above_linked:
                        current = above
                    elif above_right_linked:
                        current = above_right
                        if above_left_linked:
                            current = _union(parent, above_right, above_left)
                        elif left_linked:
                            current = _union(parent, above_right, left)
                    elif above_left_linked:
                        current = above_left
                    elif left_linked:
                        current = left
                else:
                    if above_linked:
                        current = above
                        # a linked above-left cell already joins them
                        if left_linked and left != above and \
                                not above_left_linked:
                            current = _union(parent, above, left)
                    elif left_linked:
                        current = left
                if current == 0:
                    current = next_label
                    parent[next_label] = next_label
                    next_label += 1
            labels[row, col] = current
            left = current
            left_value = cell_value
            above_left = above
            above_left_value = above_value
            above = above_right
            above_value = above_right_value
            if has_above and col + 2 < cols:
                above_right = labels[row - 1, col + 2]
                above_right_value = values[row - 1, col + 2]
            else:
                above_right = 0
    return next_label


@njit(cache=True, nogil=True)
def _first_pass_nonzero(values, valid, eight, labels, parent, top, row_start,
                        row_stop, next_label):
    """Provisional labels for rows ``row_start:row_stop`` of the strip whose
    first row is ``top`` (its rows above ``row_start`` already labelled);
    returns the next unused provisional label."""
    # one specialised loop per connectivity: no flag tests per cell
    if eight:
        return _label_rows(values, valid, labels, parent, top, row_start,
                           row_stop, next_label, True, True)
    return _label_rows(values, valid, labels, parent, top, row_start,
                       row_stop, next_label, True, False)


@njit(cache=True, nogil=True)
def _first_pass_equal(values, valid, eight, labels, parent, top, row_start,
                      row_stop, next_label):
    """As :func:`_first_pass_nonzero`, for ``equal`` mode."""
    if eight:
        return _label_rows(values, valid, labels, parent, top, row_start,
                           row_stop, next_label, False, True)
    return _label_rows(values, valid, labels, parent, top, row_start,
                       row_stop, next_label, False, False)



def previous_label(values, valid, connectivity, mode):
    """Labels and count from the previous per-cell scan, one strip."""
    values = np.ascontiguousarray(values)
    if valid is None:
        valid = ~np.isnan(values) if values.dtype.kind == "f" else \
            np.ones(values.shape, dtype=np.bool_)
    labels = np.empty(values.shape, dtype=np.int64)
    parent = np.empty(values.size + 1, dtype=np.int64)
    parent[0] = 0
    if values.size == 0:
        return labels, 0
    first_pass = _first_pass_nonzero if mode == "nonzero" else \
        _first_pass_equal
    next_label = first_pass(values, valid, connectivity == 8, labels, parent,
                            0, 0, values.shape[0], 1)
    count = _resolve(parent, np.array([1]), np.array([next_label]))
    # no row keeps a run list here
    _second_pass(labels, parent, np.zeros(values.shape[0], dtype=np.bool_),
                 0, values.shape[0])
    return labels, int(count)
