"""Numba CPU kernels for connected components: rows labelled cell by cell
(the first pass of :mod:`._cpu` on rough rows).

A cell takes a provisional label from its visited neighbours (left, and
the three above for 8-connectivity: Wu, Otoo & Suzuki's decision tree)
with no branch on the data: links are 0/1 masks and labels masked selects
(:func:`select`), and the row's merges are listed as it is scanned and
made after it.  :func:`label_row_tight` runs the scans written for one
case (``_split_row_nonzero_4``, ``_8``, and ``_split_row_equal_4``,
``_8`` without a valid mask, in two passes, the first vectorized:
:func:`_scan_row_split`; ``_scan_row_equal_4``, ``_8`` with one),
:func:`label_row_cells` the general one.
"""

import numpy as np
from numba import njit

from .._unionfind import merge_sets


@njit(cache=True, nogil=True, inline="always")
def select(flag, if_one, if_zero):
    """``if_one`` where ``flag`` (0 or 1) is 1, else ``if_zero``, with
    masks: numba's conditional expressions compile to branches here, which
    a random raster mispredicts."""
    return if_zero ^ ((if_zero ^ if_one) & -flag)


@njit(cache=True, nogil=True, inline="always")
def _cell_label(vertex, above_linked, above_left_linked, above_right_linked,
                left_linked, above, above_left, above_right, left, parent,
                next_label, eight):
    """A cell's provisional label from its visited neighbours' links (0 or
    1) and labels (Wu et al.'s decision tree, as masks); returns (label,
    next label, merge, first, second): when ``merge`` is 1, the sets of
    labels ``first`` and ``second`` must be joined.

    The left neighbour's label is the one value carried from cell to cell,
    so it enters last, through one select: everything else is known
    before it.  Links are transitive (equal values, or foreground), so one
    merge at most: 4-connected, above with left unless the above-left cell
    joins them; 8-connected, above-right with above-left or left unless
    the cell above (which touches all three) is linked."""
    if eight:
        linked_above = above_linked | above_right_linked | above_left_linked
        base = select(above_linked, above, select(
            above_right_linked, above_right,
            select(above_left_linked, above_left, next_label)))
        take_left = vertex & left_linked & (1 - linked_above)
        merge = vertex & (1 - above_linked) & above_right_linked & (
            above_left_linked | left_linked)
        first = above_right
        second = select(above_left_linked, above_left, left)
        new = vertex & (1 - linked_above) & (1 - left_linked)
    else:
        base = select(above_linked, above, next_label)
        take_left = vertex & left_linked & (1 - above_linked)
        merge = vertex & above_linked & left_linked & (1 - above_left_linked)
        first = above
        second = left
        new = vertex & (1 - above_linked) & (1 - left_linked)
    current = select(take_left, left, base & -vertex)
    return current, next_label + new, merge, first, second


@njit(cache=True, nogil=True, inline="always")
def label_row_cells(values, valid, check_valid, labels, parent, merges, row,
                     has_above, next_label, nonzero, eight, up):
    """Provisional labels of one row, cell by cell with no branch on the
    data; returns (next label, runs).

    Every labelled cell has a label other than 0, so a neighbour above is
    linked exactly when its label is not 0 and, in ``equal`` mode, its
    value equals the cell's (``nonzero`` mode reads no values of the row
    above); the left neighbour's link comes from its value alone.  The
    row and the row above are 1-D views (the first row of a strip reads
    ``zero_row``, all label 0, above it), the labels and values of the
    cells above-left and above slide along in registers, and the last
    column is its own step (no cell above-right): the loop has no branch
    but its own, few live values, and indices that need no negative-index
    fix-up.  The row's merges are made after it: the decisions read links
    and labels, never roots.
    """
    cols = values.shape[1]
    here = values[row]
    inside = valid[row if check_valid else 0]
    out = labels[row]
    up_values = values[row - 1] if has_above else here
    zero_value = values.dtype.type(0)
    above_left = np.int64(0)
    above_left_value = zero_value
    above = np.int64(up[0])
    above_value = up_values[0]
    left = np.int64(0)
    left_vertex = np.int64(0)
    left_value = zero_value
    merge_count = np.uint64(0)
    runs = np.int64(0)
    row_first_label = next_label
    for col in range(cols - 1):
        above_right = np.int64(up[col + 1])
        above_right_value = up_values[col + 1] if not nonzero else \
            zero_value
        left, left_vertex, left_value, next_label, merge_count, runs = \
            _cell_step(here, inside, out, parent, merges, col, above_left,
                       above_left_value, above, above_value, above_right,
                       above_right_value, left, left_vertex, left_value,
                       next_label, merge_count, runs, check_valid, nonzero,
                       eight)
        above_left = above
        above_left_value = above_value
        above = above_right
        above_value = above_right_value
    left, left_vertex, left_value, next_label, merge_count, runs = \
        _cell_step(here, inside, out, parent, merges, cols - 1, above_left,
                   above_left_value, above, above_value, np.int64(0),
                   zero_value, left, left_vertex, left_value, next_label,
                   merge_count, runs, check_valid, nonzero, eight)
    # the row's new labels are roots until its merges: nothing reads
    # ``parent`` while the row is scanned, so they are written here, not
    # a (wasted) store per cell
    for new_label in range(np.uint64(row_first_label), np.uint64(next_label)):
        parent[new_label] = new_label
    for merge_index in range(merge_count):
        merge_sets(parent, merges[merge_index, 0], merges[merge_index, 1])
    return next_label, runs


@njit(cache=True, nogil=True, inline="always")
def label_row_tight(values, valid, check_valid, labels, parent, merges,
                     row, has_above, next_label, up, nonzero, eight):
    """:func:`label_row_cells` by the scans written for one case
    (:func:`_split_row_nonzero_4`, ``_8``, :func:`_split_row_equal_4`,
    ``_8`` without a valid mask, else :func:`_scan_row_equal_4`, ``_8``;
    ``nonzero`` and ``eight`` are compile-time constants), then
    the row's new roots and merges (of the labels above and left of each
    listed cell; 8-connected, above-right and above-left, or left when
    above-left is not linked)."""
    out = labels[row]
    row_first_label = next_label
    merge_cols = merges.reshape(merges.size)
    here = values[row]
    # above a strip's first row: labels 0, so its values are never
    # compared
    up_values = values[row - 1] if has_above else here
    if nonzero:
        # in two passes (_scan_row_split): the valid row, or None (no
        # mask: a type, so the scan is compiled without the test)
        scan = _split_row_nonzero_8 if eight else _split_row_nonzero_4
        if check_valid:
            next_label, merge_count, runs = scan(
                here, up_values, valid[row], up, out, merge_cols,
                next_label)
        else:
            next_label, merge_count, runs = scan(
                here, up_values, None, up, out, merge_cols, next_label)
    elif not check_valid:
        scan = _split_row_equal_8 if eight else _split_row_equal_4
        next_label, merge_count, runs = scan(
            here, up_values, None, up, out, merge_cols, next_label)
    else:
        scan = _scan_row_equal_8 if eight else _scan_row_equal_4
        next_label, merge_count, runs = scan(
            here, up_values, valid[row if check_valid else 0], check_valid,
            up, out, merge_cols, next_label)
    for new_label in range(np.uint64(row_first_label), np.uint64(next_label)):
        parent[new_label] = new_label
    for merge_index in range(merge_count):
        col = np.uint64(merge_cols[merge_index])
        if eight:
            # above-right with above-left when that one is linked (in
            # ``equal`` mode: labelled and of this cell's value), else
            # left; by a select: as two branches, a random 0.6 mask's
            # merges in ``equal`` mode mispredicted them (its 2048 rows,
            # one thread, 2-core box: the scan and merges 12.6 -> 11.2
            # ms, the scan alone 5.7 ms)
            first = np.int64(up[col + np.uint64(1)])
            above_left = np.int64(up[col - np.uint64(1)])
            linked = above_left != 0
            if not nonzero:
                linked &= up_values[col - np.uint64(1)] == here[col]
            second = select(np.int64(linked), above_left,
                            np.int64(out[col - np.uint64(1)]))
        else:
            first = np.int64(up[col])
            second = np.int64(out[col - np.uint64(1)])
        merge_sets(parent, first, second)
    return next_label, runs


@njit(cache=True, nogil=True)
def _scan_row_equal_4(here, up_values, inside, check_valid, up, out,
                      merge_cols, next_label):
    """Provisional labels ``out`` of one row, 4-connected ``equal`` mode,
    cell by cell in one pass (used with a valid mask, where it is the
    faster: 16.5-20.1 against 20.0-22.1 ms the rows of a 2048² raster, 80 %
    valid, one thread, 2-core box, 2026-12-02; without one
    :func:`_scan_row_split` now is, 9.8 against 13.2 ms), under
    the row labelled ``up``; returns (next label, merge count, runs), the
    columns of the cells whose above and left labels must be merged
    listed in ``merge_cols``.  Its own function, not inlined: the
    register allocator then sees only this loop's few live values.  The
    left label enters last through one select.  Every valid cell is
    a vertex, linked to a labelled neighbour of equal value.  A cell
    merges above and left when both are linked and above-left is not;
    the above-left link carried along was taken against the left cell's
    value, which equals this cell's whenever left is linked."""
    above_left_linked = np.int64(0)
    left = np.int64(0)
    left_vertex = np.int64(0)
    left_value = here[0]
    merge_count = np.uint64(0)
    runs = np.int64(0)
    for col in range(np.uint64(here.size)):
        value = here[col]
        vertex = np.int64(inside[col] if check_valid else value == value)
        above = np.int64(up[col])
        above_linked = np.int64((above != 0) & (up_values[col] == value))
        left_linked = left_vertex & np.int64(left_value == value)
        start = vertex & (1 - left_linked)
        runs += start
        take_above = vertex & above_linked
        base = select(take_above, above, next_label & -vertex)
        take_left = (vertex & left_linked) & (1 - above_linked)
        current = select(take_left, left, base)
        next_label += start & (1 - above_linked)
        merge_cols[merge_count] = col
        merge_count += np.uint64(take_above & left_linked &
                                 (1 - above_left_linked))
        out[col] = current
        above_left_linked = above_linked
        left = current
        left_vertex = vertex
        left_value = value
    return next_label, merge_count, runs


@njit(cache=True, nogil=True)
def _scan_row_equal_8(here, up_values, inside, check_valid, up, out,
                      merge_cols, next_label):
    """:func:`_scan_row_equal_4`, 8-connected (used with a valid mask:
    :func:`_split_row_equal_8` was slower there, 2-core box, 2048², 80 %
    valid: 20.8 against 23.1 ms uint8, 23.1 against 26.8 ms float32): the
    labels and values above-left and above slide along in registers, the
    last column (no cell above-right) is its own step.  A cell merges
    above-right with above-left (or left) when above is not linked (Wu et
    al.'s decision tree)."""
    cols = np.uint64(here.size)
    above_left = np.int64(0)
    above_left_value = up_values[0]  # not read while above_left is 0
    above = np.int64(up[0])
    above_value = up_values[0]
    left = np.int64(0)
    left_vertex = np.int64(0)
    left_value = here[0]
    merge_count = np.uint64(0)
    runs = np.int64(0)
    for col in range(cols - np.uint64(1)):
        above_right = np.int64(up[col + np.uint64(1)])
        above_right_value = up_values[col + np.uint64(1)]
        (left, left_vertex, left_value, next_label, merge_count,
         runs) = _step_equal_8(here, inside, check_valid, out, merge_cols,
                               col, above_left, above_left_value, above,
                               above_value, above_right, above_right_value,
                               left, left_vertex, left_value, next_label,
                               merge_count, runs)
        above_left = above
        above_left_value = above_value
        above = above_right
        above_value = above_right_value
    (left, left_vertex, left_value, next_label, merge_count,
     runs) = _step_equal_8(here, inside, check_valid, out, merge_cols,
                           cols - np.uint64(1), above_left, above_left_value,
                           above, above_value, np.int64(0), above_value,
                           left, left_vertex, left_value, next_label,
                           merge_count, runs)
    return next_label, merge_count, runs


@njit(cache=True, nogil=True, inline="always")
def _step_equal_8(here, inside, check_valid, out, merge_cols, col,
                  above_left, above_left_value, above, above_value,
                  above_right, above_right_value, left, left_vertex,
                  left_value, next_label, merge_count, runs):
    """One cell of :func:`_scan_row_equal_8`."""
    value = here[col]
    vertex = np.int64(inside[col] if check_valid else value == value)
    above_linked = np.int64((above != 0) & (above_value == value))
    above_left_linked = np.int64((above_left != 0) &
                                 (above_left_value == value))
    above_right_linked = np.int64((above_right != 0) &
                                  (above_right_value == value))
    left_linked = left_vertex & np.int64(left_value == value)
    linked_above = above_linked | above_right_linked | above_left_linked
    runs += vertex & (1 - left_linked)
    base = select(above_linked, above, select(
        above_right_linked, above_right,
        select(above_left_linked, above_left, next_label))) & -vertex
    take_left = vertex & left_linked & (1 - linked_above)
    current = select(take_left, left, base)
    next_label += vertex & (1 - linked_above) & (1 - left_linked)
    merge_cols[merge_count] = col
    merge_count += np.uint64(vertex & (1 - above_linked) & above_right_linked
                             & (above_left_linked | left_linked))
    out[col] = current
    return current, vertex, value, next_label, merge_count, runs


@njit(cache=True, nogil=True, inline="always")
def _cell_step(here, inside, out, parent, merges, col, above_left,
               above_left_value, above, above_value, above_right,
               above_right_value, left, left_vertex, left_value, next_label,
               merge_count, runs, check_valid, nonzero, eight):
    """One cell of :func:`label_row_cells`; returns its (label, vertex,
    value) for the next cell's left, and the next label, merge count and
    runs."""
    cell_value = here[col]
    cell_inside = inside[col] if check_valid else cell_value == cell_value
    if nonzero:
        vertex = np.int64(cell_inside & (cell_value != 0))
        # foreground neighbours are exactly the labelled ones
        above_linked = np.int64(above != 0)
        above_left_linked = np.int64(above_left != 0)
        above_right_linked = np.int64(above_right != 0)
        left_linked = left_vertex
    else:
        vertex = np.int64(cell_inside)
        above_linked = np.int64((above != 0) & (above_value == cell_value))
        above_left_linked = np.int64(
            (above_left != 0) & (above_left_value == cell_value))
        above_right_linked = np.int64(
            (above_right != 0) & (above_right_value == cell_value))
        left_linked = left_vertex & np.int64(left_value == cell_value)
    runs += vertex & (1 - left_linked)
    current, next_label, merge, first, second = _cell_label(
        vertex, above_linked, above_left_linked, above_right_linked,
        left_linked, above, above_left, above_right, left, parent,
        next_label, eight)
    # every cell writes its pair; a merge keeps it
    merges[merge_count, 0] = first
    merges[merge_count, 1] = second
    merge_count += np.uint64(merge)
    out[col] = current
    return current, vertex, cell_value, next_label, merge_count, runs


@njit(cache=True, nogil=True, inline="always")
def _links_above(here, up_values, inside, up, out, flags, col, above_left,
                 above, above_right, above_left_value, above_value,
                 above_right_value, left_inside, left_value, nonzero, eight):
    """Pass 1 of :func:`_scan_row_split` for the cell ``col``: what its
    neighbours above and left give it, from data alone.  Writes
    ``out[col]``: the label of its first linked neighbour above (above,
    above-right, above-left: Wu et al.'s order); for a vertex with none,
    -2 when it is linked to its left neighbour (it takes that one's label
    in pass 2) and -1 when not (a new label); 0 for a cell that is not a
    vertex.  And ``flags[col]``: 1 when the cell merges (8-connected:
    above-right with above-left or left, above not linked; 4-connected:
    above with left, above-left not linked).  Returns 1 when the cell
    starts a run (a vertex not linked to its left neighbour)."""
    value = here[col]
    cell_inside = inside[col] if inside is not None else value == value
    if nonzero:
        vertex = np.int64(cell_inside & (value != 0))
        above_linked = np.int64(above != 0)
        above_right_linked = np.int64(above_right != 0)
        above_left_linked = np.int64(above_left != 0)
        left_linked = np.int64(left_inside & (left_value != 0))
    else:
        vertex = np.int64(cell_inside)
        above_linked = np.int64((above != 0) & (above_value == value))
        above_right_linked = np.int64((above_right != 0)
                                      & (above_right_value == value))
        above_left_linked = np.int64((above_left != 0)
                                     & (above_left_value == value))
        left_linked = np.int64(left_inside & (left_value == value))
    if eight:
        base = select(above_linked, above, select(
            above_right_linked, above_right,
            select(above_left_linked, above_left, np.int64(0))))
        merge = vertex & (1 - above_linked) & above_right_linked & (
            above_left_linked | left_linked)
    else:
        base = above & -above_linked
        merge = vertex & above_linked & left_linked & (1 - above_left_linked)
    code = select(np.int64(base != 0), base, np.int64(-1) - left_linked)
    out[col] = code & -vertex
    flags[col] = merge
    return vertex & (1 - left_linked)


@njit(cache=True, nogil=True, inline="always")
def _scan_row_split(here, up_values, inside, up, out, merge_cols,
                    next_label, nonzero, eight):
    """Provisional labels ``out`` of one row under the row labelled ``up``
    (values ``up_values``, read in ``equal`` mode), ``inside`` its valid
    cells or None (then every cell but NaN); returns (next label, merge
    count, runs), the columns of the cells that merge listed in
    ``merge_cols`` (its second half holds the flags of pass 1).

    Two passes over the row.  Pass 1 (:func:`_links_above`) finds each
    cell's label from above, or whether it takes its left neighbour's or
    a new one, whether it merges, and counts the runs: it carries no
    value from cell to cell, so LLVM vectorizes it (AVX2 on both CPUs
    measured).  Pass 2 carries the left label along: two selects and an
    add a cell, and the merge list.  Pass 1 once left the left link to
    pass 2 (one code, -1, for both cases; the link a flag bit in
    ``equal`` mode; the runs counted in pass 2): the scan of a 2048²
    random 0.6 mask's rows took 7.9 / 10.4 ms (``nonzero`` / ``equal``,
    8-connected, one thread) against 6.0 / 6.6 ms now on the 2-core box
    (Zen 4, 2026-12-02).  The one-pass scans
    did all of it with the left label carried through every cell's
    decision: 65 instructions and 14 stack accesses a cell on the 2-core
    box (LLVM unrolled the loop 8 times and spilled), 14.3-14.7 ms a
    2048² random 0.6 mask 8-connected on one thread, against 7.9-8.0 ms
    for the first two-pass scan (4-connected 9.1 -> 7.4 ms; ``equal``
    mode 8-connected 14.7 -> 10.6 ms; Zen 3, 2026-11-25); labels and
    merge lists identical.  A run-time ``check_valid``
    test in pass 1 kept LLVM from vectorizing it, hence ``inside`` None
    (a type: the test goes at compile time)."""
    cols = np.uint64(here.size)
    one = np.uint64(1)
    zero = np.int64(0)
    flags = merge_cols[cols + one:]
    last = cols - one
    runs = zero
    if cols == one:
        runs += _links_above(here, up_values, inside, up, out, flags,
                             np.uint64(0), zero, np.int64(up[0]), zero,
                             up_values[0], up_values[0], up_values[0], False,
                             here[0], nonzero, eight)
    else:
        # the first and last columns peeled: no cell left, no cell
        # above-right
        runs += _links_above(here, up_values, inside, up, out, flags,
                             np.uint64(0), zero, np.int64(up[0]),
                             np.int64(up[1]), up_values[0], up_values[0],
                             up_values[1], False, here[0], nonzero, eight)
        for col in range(one, last):
            before = col - one
            runs += _links_above(here, up_values, inside, up, out, flags,
                                 col, np.int64(up[before]), np.int64(up[col]),
                                 np.int64(up[col + one]), up_values[before],
                                 up_values[col], up_values[col + one],
                                 inside[before] if inside is not None
                                 else here[before] == here[before],
                                 here[before], nonzero, eight)
        before = last - one
        runs += _links_above(here, up_values, inside, up, out, flags, last,
                             np.int64(up[before]), np.int64(up[last]), zero,
                             up_values[before], up_values[last],
                             up_values[last],
                             inside[before] if inside is not None
                             else here[before] == here[before], here[before],
                             nonzero, eight)
    left = zero
    merge_count = np.uint64(0)
    for col in range(cols):
        code = np.int64(out[col])
        new = np.int64(code == -1)
        current = select(np.int64(code == -2), left,
                         select(new, next_label, code))
        next_label += new
        out[col] = current
        merge_cols[merge_count] = col
        merge_count += np.uint64(flags[col])
        left = current
    return next_label, merge_count, runs


@njit(cache=True, nogil=True)
def _split_row_nonzero_8(here, up_values, inside, up, out, merge_cols,
                         next_label):
    """:func:`_scan_row_split`, ``nonzero`` mode, 8-connected."""
    return _scan_row_split(here, up_values, inside, up, out, merge_cols,
                           next_label, True, True)


@njit(cache=True, nogil=True)
def _split_row_nonzero_4(here, up_values, inside, up, out, merge_cols,
                         next_label):
    """:func:`_scan_row_split`, ``nonzero`` mode, 4-connected."""
    return _scan_row_split(here, up_values, inside, up, out, merge_cols,
                           next_label, True, False)


@njit(cache=True, nogil=True)
def _split_row_equal_8(here, up_values, inside, up, out, merge_cols,
                       next_label):
    """:func:`_scan_row_split`, ``equal`` mode, 8-connected."""
    return _scan_row_split(here, up_values, inside, up, out, merge_cols,
                           next_label, False, True)


@njit(cache=True, nogil=True)
def _split_row_equal_4(here, up_values, inside, up, out, merge_cols,
                       next_label):
    """:func:`_scan_row_split`, ``equal`` mode, 4-connected (without a
    valid mask: with one, the one-pass :func:`_scan_row_equal_4` is the
    faster; without, this one, 9.8 against 13.2 ms the rows of a 2048²
    random 0.6 mask on one thread of the 2-core box, 2026-12-02)."""
    return _scan_row_split(here, up_values, inside, up, out, merge_cols,
                           next_label, False, False)
