"""The passes of the components CPU labelling (:mod:`._cpu`), compiled: the
first pass over a strip's rows (:func:`_label_rows`, by runs or by cells),
the seam merge, the numbering of the roots and the second pass.  Both
drivers call them: :func:`._cpu.label`'s strips and pieces, a kernel call
each from Python, and :mod:`._cpu_team`'s one compiled call a thread."""

import numpy as np
from numba import njit

from .._unionfind import find_root as _find
from ._cpu_cells import label_row_cells, label_row_tight, select
from ._cpu_runs import bound_words_of_runs, keep_runs, fill_runs, \
    label_row_runs, unpack_runs
from ._string_stores import fill_runs_by_string_stores

# A row is labelled run by run when the row before had at most one run
# per this many cells, else cell by cell (see _label_rows).
_RUN_SCAN_MIN_CELLS_PER_RUN = 16


@njit(cache=True, nogil=True)
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
def _vertex(values, valid, check_valid, nonzero, row, col):
    """1 where a cell is labelled, else 0: valid (``valid`` when given,
    else not NaN: ``v == v``) and, in ``nonzero`` mode, non-zero."""
    value = values[row, col]
    inside = valid[row, col] if check_valid else value == value
    if nonzero:
        return np.int64(inside & (value != 0))
    return np.int64(inside)


@njit(cache=True, nogil=True, inline="always")
def _label_rows(values, valid, check_valid, labels, parent, run_rows, top,
                row_start, row_stop, next_label, merges, run_list, zero_row,
                above_row, bounds_kept, nonzero, eight, tight=False):
    """First pass over rows ``row_start:row_stop`` of the strip whose first
    row is ``top``; ``nonzero``, ``eight`` and ``tight`` (the
    cell scans of :func:`label_row_tight`) are compile-time
    constants.

    Each row is labelled cell by cell without branches on the data
    (:func:`label_row_cells`) or run by run with them
    (:func:`._cpu_runs.label_row_runs`), by how often the row before
    changed from one run to the next: a rough row costs the run scan a
    mispredicted branch per run, a smooth one costs the cell scan its
    constant work per cell.  Both read the row above's provisional
    labels and write the row's, so they mix freely; a row labelled by
    runs keeps its run list instead when it fits (``run_rows``;
    :mod:`._cpu_runs`), and a cell scan below it reads its labels from a
    scratch row filled from the list.
    """
    cols = values.shape[1]
    # merges: the row's merges, made after it (a branch per cell on
    # whether to merge costs more, mispredicted, than the merges
    # themselves); run_list: the runs of the row before and of this row,
    # by row parity (start, stop, label), when the run scan labelled
    # them; zero_row: the labels "above" a strip's first row (all 0);
    # above_row: the provisional labels of a row above that kept its run
    # list; bounds_kept: the bound words of the row before and of this
    # row, by row parity, when the run scan found them (all scratch of
    # the strip: _row_scratch)
    # runs (of cells of one component in the making) in the row before
    runs = 0
    # how many runs the row before has in run_list, -1 when it was
    # labelled by cells
    listed = -1
    if row_start > top and run_rows[row_start - 1]:
        # the strip's previous call left its last row as a run list
        listed = unpack_runs(labels[row_start - 1],
                             run_list[(row_start - 1) & 1])
        runs = listed
        if nonzero:
            bound_words_of_runs(run_list[(row_start - 1) & 1], listed,
                                bounds_kept[(row_start - 1) & 1], cols)
    for row in range(row_start, row_stop):
        has_above = row > top
        if runs * _RUN_SCAN_MIN_CELLS_PER_RUN <= cols:
            next_label, runs = label_row_runs(
                values, valid, check_valid, labels, parent, merges, row,
                has_above, next_label, run_list[row & 1],
                run_list[(row - 1) & 1] if listed >= 0 else run_list[0],
                listed, bounds_kept[row & 1],
                bounds_kept[(row - 1) & 1], nonzero, eight)
            run_rows[row] = keep_runs(labels[row], run_list[row & 1], runs)
            listed = runs
            continue
        up = zero_row
        if has_above:
            up = labels[row - 1]
            if run_rows[row - 1]:  # listed >= 0: labelled by runs
                fill_runs(above_row, run_list[(row - 1) & 1], listed)
                up = above_row
        if tight:
            next_label, runs = label_row_tight(
                values, valid, check_valid, labels, parent, merges, row,
                has_above, next_label, up, nonzero, eight)
        else:
            next_label, runs = label_row_cells(
                values, valid, check_valid, labels, parent, merges, row,
                has_above, next_label, nonzero, eight, up)
        listed = -1
    return next_label


@njit(cache=True, nogil=True)
def _first_pass_nonzero(values, valid, check_valid, eight, labels, parent,
                        run_rows, top, row_start, row_stop, next_label,
                        merges, run_list, zero_row, above_row,
                        bounds_kept):
    """Provisional labels for rows ``row_start:row_stop`` of the strip whose
    first row is ``top`` (its rows above ``row_start`` already labelled),
    or run lists for rows labelled by runs (``run_rows`` set); returns the
    next unused provisional label."""
    # one specialised loop per connectivity: no flag tests per cell
    if eight:
        return _label_rows(values, valid, check_valid, labels, parent,
                           run_rows, top, row_start, row_stop, next_label,
                           merges, run_list, zero_row, above_row,
                           bounds_kept, True, True)
    return _label_rows(values, valid, check_valid, labels, parent, run_rows,
                       top, row_start, row_stop, next_label, merges,
                       run_list, zero_row, above_row, bounds_kept,
                       True, False)


@njit(cache=True, nogil=True)
def _first_pass_nonzero_tight(values, valid, check_valid, eight, labels,
                              parent, run_rows, top, row_start, row_stop,
                              next_label, merges, run_list, zero_row,
                              above_row, bounds_kept):
    """:func:`_first_pass_nonzero` by the cell scans of
    :func:`label_row_tight`."""
    if eight:
        return _label_rows(values, valid, check_valid, labels, parent,
                           run_rows, top, row_start, row_stop, next_label,
                           merges, run_list, zero_row, above_row,
                           bounds_kept, True, True, True)
    return _label_rows(values, valid, check_valid, labels, parent, run_rows,
                       top, row_start, row_stop, next_label, merges,
                       run_list, zero_row, above_row, bounds_kept,
                       True, False, True)


@njit(cache=True, nogil=True)
def _first_pass_equal_tight(values, valid, check_valid, eight, labels,
                            parent, run_rows, top, row_start, row_stop,
                            next_label, merges, run_list, zero_row,
                            above_row, bounds_kept):
    """:func:`_first_pass_equal` by the cell scans of
    :func:`._cpu_cells.label_row_tight`."""
    if eight:
        return _label_rows(values, valid, check_valid, labels, parent,
                           run_rows, top, row_start, row_stop, next_label,
                           merges, run_list, zero_row, above_row,
                           bounds_kept, False, True, True)
    return _label_rows(values, valid, check_valid, labels, parent, run_rows,
                       top, row_start, row_stop, next_label, merges,
                       run_list, zero_row, above_row, bounds_kept,
                       False, False, True)


@njit(cache=True, nogil=True)
def _first_pass_equal(values, valid, check_valid, eight, labels, parent,
                      run_rows, top, row_start, row_stop, next_label,
                      merges, run_list, zero_row, above_row,
                      bounds_kept):
    """As :func:`_first_pass_nonzero`, for ``equal`` mode."""
    if eight:
        return _label_rows(values, valid, check_valid, labels, parent,
                           run_rows, top, row_start, row_stop, next_label,
                           merges, run_list, zero_row, above_row,
                           bounds_kept, False, True)
    return _label_rows(values, valid, check_valid, labels, parent, run_rows,
                       top, row_start, row_stop, next_label, merges,
                       run_list, zero_row, above_row, bounds_kept,
                       False, False)


@njit(cache=True, nogil=True)
def _merge_seams(values, nonzero, eight, labels, parent, seam_rows):
    """Union the labels linked across each strip's first row and the row
    above it (the links the strip-local first passes could not see).

    Along a run below a run every cell links the same pair of labels:
    a pair just merged is not merged again (each merge climbs both
    labels' paths; 2-core box, 2048² fractal mask, 8-connected, 3 seams:
    0.14 ms of a 4.2 ms call with every link merged)."""
    cols = values.shape[1]
    for row in seam_rows:
        merged_here = labels.dtype.type(0)
        merged_above = labels.dtype.type(0)
        for col in range(cols):
            here = labels[row, col]
            if here == 0:  # background or nodata
                continue
            first_col = col - 1 if eight and col > 0 else col
            last_col = col + 1 if eight and col < cols - 1 else col
            for above_col in range(first_col, last_col + 1):
                above = labels[row - 1, above_col]
                if above != 0 and above != here and (
                        nonzero
                        or values[row - 1, above_col] == values[row, col]
                ) and (here != merged_here or above != merged_above):
                    _union(parent, here, above)
                    merged_here = here
                    merged_above = above


@njit(cache=True, nogil=True)
def _resolve(parent, first_labels, next_labels):
    """Turn ``parent`` into final labels: roots, in increasing provisional
    order (= scan order of first cells), get 1, 2, ...; returns the count.
    Strip ``s`` used provisional labels ``first_labels[s]:next_labels[s]``."""
    count = np.int64(0)
    for strip in range(first_labels.size):
        count = _resolve_range(parent, first_labels[strip],
                               next_labels[strip], count)
    return count


@njit(cache=True, nogil=True)
def _resolve_range(parent, first_label, next_label, count):
    """:func:`_resolve` for the provisional labels ``first_label:next_label``
    (one strip's), every smaller label in use already numbered, the roots
    before them ``count``; returns the count after them."""
    count = np.int64(count)
    for provisional in range(np.uint64(first_label), np.uint64(next_label)):
        root = parent[provisional]
        # Union by minimum keeps parent < node for non-roots, and every
        # smaller label in use already holds its final label; a root reads
        # itself.  No branch: roots and non-roots alternate at random on
        # rough rasters (a mispredicted branch per label).
        is_root = np.int64(root == provisional)
        count += is_root
        parent[provisional] = select(is_root, count, np.int64(parent[root]))
    return count


@njit(cache=True, nogil=True)
def _second_pass(labels, final, run_rows, row_start, row_stop):
    """Final labels of rows ``row_start:row_stop``: rows that kept their
    run list (``run_rows``) are filled run by run (a write per cell, no
    read and no look-up), the others relabelled cell by cell."""
    _second_pass_with(labels, final, run_rows, row_start, row_stop, False,
                      _second_pass_scratch(labels))


@njit(cache=True, nogil=True)
def _second_pass_string_stores(labels, final, run_rows, row_start,
                               row_stop):
    """:func:`_second_pass` with the run rows filled by string stores
    (:mod:`._string_stores`, :data:`STRING_STORE_FILLS`)."""
    _second_pass_with(labels, final, run_rows, row_start, row_stop, True,
                      _second_pass_scratch(labels))


@njit(cache=True, nogil=True, inline="always")
def _second_pass_scratch(labels):
    """A run list as long as a row of ``labels`` can keep."""
    return np.empty((labels.shape[1] // 3 + 1, 3), dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _second_pass_with(labels, final, run_rows, row_start, row_stop,
                      string_stores, runs):
    for row in range(row_start, row_stop):
        cells = labels[row]
        if run_rows[row]:
            count = unpack_runs(cells, runs)
            for run in range(count):
                runs[run, 2] = final[np.uint64(runs[run, 2])]
            if string_stores:
                fill_runs_by_string_stores(cells, runs, count)
            else:
                fill_runs(cells, runs, count)
            continue
        # final[0] == 0, so background needs no branch (which random
        # masks would mispredict half the time); row views and unsigned
        # label indices: no negative-index fix-up per cell
        for col in range(cells.size):
            cells[col] = final[np.uint64(cells[col])]
