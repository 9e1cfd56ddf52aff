"""Block-based numba kernels for ``nonzero`` mode, 8-connected components.

The first pass labels 2 x 2 blocks of cells, not cells: the four cells of a
block touch each other in 8-connectivity, so the foreground cells of a block
belong to one component and one provisional label per block suffices
(Grana, Borghesani & Cucchiara, *Optimized Block-Based Connected Components
Labeling With Decision Trees*, IEEE TIP 2010); a quarter of the label
decisions and unions of a per-cell scan, and the block labels fit a quarter
of the memory of a label raster.  (4-connectivity keeps the per-cell scan of
``_cpu``: vertical pairs, and 2 x 2 blocks with their split diagonals, were
measured slower on the GPU machine's Xeon.)  Whether two neighbouring blocks are linked is
read off the few cells along their shared side; known links (cells already
joined when the neighbours were labelled) skip the union, as in Wu, Otoo &
Suzuki's decision tree.  No branch on the data in the scan: links are 0/1
masks, labels masked selects, and a block row's unions are listed as it is
scanned and made after it (a mispredicted branch per block cost more than
the unions).

Labels must come out numbered in raster scan order of each component's first
*cell* (scipy's numbering), and a block row covers two cell rows: the block
scan order is not the cell scan order.  Each provisional label therefore
carries a *key*, the flat index of the first foreground cell of the blocks it
stands for; unions keep the minimum label as the root (so the root is the
component's first block, and strip label ranges stay disjoint) and the
minimum key at the root, and a block that takes its left neighbour's label
lowers that label's key when its own first cell comes earlier.  Roots
created in one block row have keys in that block row, so sorting the roots by
key only reorders roots within a block row.

Strips of block rows are labelled concurrently (the caller runs the
kernels on threads; they release the GIL); each strip draws labels from the
range starting at its first block's index + 1, and the seams between strips
are merged afterwards with the same keyed union.
"""

import numpy as np
from numba import njit

from .._unionfind import find_root as _find


@njit(cache=True, nogil=True, inline="always")
def _foreground(values, valid, check_valid, row, col):
    """A valid, non-zero, non-NaN cell (``v == v`` is false for NaN only).
    Bitwise operators, not ``and``: no branch on the data."""
    value = values[row, col]
    if check_valid:
        return (value != 0) & (value == value) & valid[row, col]
    return (value != 0) & (value == value)


@njit(cache=True, nogil=True, inline="always")
def _foreground_if(values, valid, check_valid, row, col, inside):
    """:func:`_foreground`, False where ``inside`` is False (off the
    raster or the strip)."""
    if inside:
        return _foreground(values, valid, check_valid, row, col)
    return False


@njit(cache=True, nogil=True, inline="always")
def _bit(values, valid, check_valid, row, col):
    """:func:`_foreground` as 0 or 1."""
    return np.int64(_foreground(values, valid, check_valid, row, col))


@njit(cache=True, nogil=True, inline="always")
def _bit_if(values, valid, check_valid, row, col, inside):
    """:func:`_foreground_if` as 0 or 1."""
    return np.int64(_foreground_if(values, valid, check_valid, row, col,
                                   inside))


@njit(cache=True, nogil=True)
def _union_keyed(parent, key, first, second):
    """Merge two sets: the smaller root label stays root and keeps the
    smaller of the two keys; returns the root."""
    first_root = _find(parent, first)
    second_root = _find(parent, second)
    if first_root == second_root:
        return first_root
    if second_root < first_root:
        first_root, second_root = second_root, first_root
    parent[second_root] = first_root
    if key[second_root] < key[first_root]:
        key[first_root] = key[second_root]
    return first_root


@njit(cache=True, nogil=True, inline="always")
def _select(flag, if_one, if_zero):
    """``if_one`` where ``flag`` (0 or 1) is 1, else ``if_zero``, with
    masks: numba's conditional expressions compile to branches here, which
    a random raster mispredicts."""
    return if_zero ^ ((if_zero ^ if_one) & -flag)


@njit(cache=True, nogil=True, inline="always")
def _block_8(o, p, s, t, h, i, j, k, n, r, q_linked_p, r_linked_q,
             s_linked_p, s_linked_q, above_left, above, above_right, left,
             parent, key, merges, merge_count, r0, c0, cols, row_first,
             next_label):
    """The label of block X from its cells and its neighbours' (see
    :func:`first_pass_8`; every flag is 0 or 1); returns (label, next
    label, merge count, X-Q, X-R, X-S links).

    No branch on the data: the links are bitwise expressions, the label a
    chain of masked selects in which S's label (the one value carried from
    block to block) enters last, and the unions the block needs are
    written to ``merges`` (every block writes its three pairs; the count
    keeps those needed), made at the end of the block row.  Unions are
    skipped where the labels are already joined by a direct link:
    ``q_linked_p`` (Q was linked to P when Q was labelled), ``r_linked_q``,
    ``s_linked_p`` and ``s_linked_q``."""
    top_cell = o | p
    any_cell = top_cell | s | t
    link_q = top_cell & (i | j)
    link_p = o & h
    link_r = p & k
    link_s = (o | s) & (n | r)
    linked_above = link_q | link_p | link_r
    base = _select(link_q, above, _select(
        link_p, above_left, _select(link_r, above_right, next_label)))
    take_left = link_s & (1 - linked_above)
    current = _select(take_left, left, base & -any_cell)
    union_p = link_p & link_q & (1 - q_linked_p)
    union_r = link_r & ((link_q & (1 - r_linked_q)) | ((1 - link_q) & link_p))
    union_s = link_s & linked_above & (1 - (
        (s_linked_p & (link_p | (link_q & q_linked_p)))
        | (s_linked_q & (link_q | (link_p & q_linked_p)))))
    merges[merge_count, 0] = base
    merges[merge_count, 1] = above_left
    merge_count += union_p
    merges[merge_count, 0] = base
    merges[merge_count, 1] = above_right
    merge_count += union_r
    merges[merge_count, 0] = base
    merges[merge_count, 1] = left
    merge_count += union_s
    # a new label: its key is the block's first cell in scan order
    # (written always, kept only when the label is made)
    first = r0 * cols + c0 + _select(o, 0, _select(p, 1, _select(
        s, cols, cols + 1)))
    parent[next_label] = next_label
    key[next_label] = first
    next_label += any_cell & (1 - linked_above) & (1 - link_s)
    # X took S's label only: a label made in this block row is a root
    # (the row's unions come after it), and X's top cell may precede its
    # first cell
    top_first = r0 * cols + c0 + 1 - o
    lower = take_left & top_cell & np.int64(left >= row_first)
    left_key = key[left]
    key[left] = _select(lower & np.int64(top_first < left_key), top_first,
                        left_key)
    return current, next_label, merge_count, link_q, link_r, link_s


@njit(cache=True, nogil=True)
def first_pass_8(values, valid, check_valid, blocks, parent, key,
                 linked_left, top, block_row_start, block_row_stop,
                 next_label):
    """Provisional labels of 2 x 2 blocks, block rows
    ``block_row_start:block_row_stop`` of the strip whose first block row is
    ``top``; returns the next unused label.  ``linked_left`` (2 x block
    columns, the strip's own) holds, for the previous and this block row by
    parity, whether each block was linked to its left neighbour.

    Cells of the block X and its neighbours (``ra`` is the cell row above
    X's top row; P, Q, R the blocks above-left, above, above-right, S the
    block left)::

        h | i j | k        row ra   (bottom row of P | Q | R)
        n | o p            row r0   (S's right column | X)
        r | s t            row r1
    """
    rows, cols = values.shape
    block_cols = blocks.shape[1]
    # blocks whose two columns and the cell above-right lie in the raster
    inner_cols = (cols - 1) // 2
    # a block row's unions, made after it (three pairs a block at most)
    merges = np.empty((3 * block_cols + 3, 2), dtype=np.int64)
    for block_row in range(block_row_start, block_row_stop):
        r0 = 2 * block_row
        r1 = r0 + 1
        has_r1 = r1 < rows
        has_above = block_row > top
        ra = r0 - 1 if has_above else r0  # never read without has_above
        r1_read = r1 if has_r1 else r0
        row_first = next_label
        previous_flags = (block_row - 1) & 1
        flags = block_row & 1
        # sliding state: S and its right column, P and h, Q and i
        left = np.int64(0)
        merge_count = 0
        n = r = h = np.int64(0)
        s_linked_p = s_linked_q = np.int64(0)
        above_left = np.int64(0)
        i = _bit_if(values, valid, check_valid, ra, 0, has_above)
        above = np.int64(blocks[block_row - 1, 0]) if has_above \
            else np.int64(0)
        start = 0
        if has_above and has_r1:
            # the interior: no edge tests
            for block_col in range(inner_cols):
                c0 = 2 * block_col
                o = _bit(values, valid, check_valid, r0, c0)
                p = _bit(values, valid, check_valid, r0, c0 + 1)
                s = _bit(values, valid, check_valid, r1, c0)
                t = _bit(values, valid, check_valid, r1, c0 + 1)
                j = _bit(values, valid, check_valid, ra, c0 + 1)
                k = _bit(values, valid, check_valid, ra, c0 + 2)
                above_right = np.int64(blocks[block_row - 1, block_col + 1])
                (current, next_label, merge_count, link_q, link_r,
                 link_s) = _block_8(
                    o, p, s, t, h, i, j, k, n, r,
                    np.int64(linked_left[previous_flags, block_col]),
                    np.int64(linked_left[previous_flags, block_col + 1]),
                    s_linked_p, s_linked_q, above_left, above, above_right,
                    left, parent, key, merges, merge_count, r0, c0, cols,
                    row_first, next_label)
                blocks[block_row, block_col] = current
                linked_left[flags, block_col] = link_s != 0
                left = current
                s_linked_p = link_q  # X becomes S: its Q is the next P
                s_linked_q = link_r
                n = p
                r = t
                h = j
                i = k
                above_left = above
                above = above_right
            start = inner_cols
        for block_col in range(start, block_cols):
            c0 = 2 * block_col
            has_c1 = c0 + 1 < cols
            has_k = has_above & (c0 + 2 < cols)
            o = _bit(values, valid, check_valid, r0, c0)
            p = _bit_if(values, valid, check_valid, r0, c0 + 1, has_c1)
            s = _bit_if(values, valid, check_valid, r1_read, c0, has_r1)
            t = _bit_if(values, valid, check_valid, r1_read, c0 + 1,
                        has_r1 & has_c1)
            j = _bit_if(values, valid, check_valid, ra, c0 + 1,
                        has_above & has_c1)
            k = _bit_if(values, valid, check_valid, ra, c0 + 2, has_k)
            above_right = np.int64(blocks[block_row - 1, block_col + 1]) \
                if has_k else np.int64(0)
            q_linked_p = np.int64(linked_left[previous_flags, block_col]) \
                if has_above else np.int64(0)
            r_linked_q = np.int64(
                linked_left[previous_flags, block_col + 1]) \
                if has_k else np.int64(0)
            (current, next_label, merge_count, link_q, link_r,
             link_s) = _block_8(
                o, p, s, t, h, i, j, k, n, r, q_linked_p, r_linked_q,
                s_linked_p, s_linked_q, above_left, above, above_right, left,
                parent, key, merges, merge_count, r0, c0, cols, row_first,
                next_label)
            blocks[block_row, block_col] = current
            linked_left[flags, block_col] = link_s != 0
            left = current
            s_linked_p = link_q
            s_linked_q = link_r
            n = p
            r = t
            h = j
            i = k
            above_left = above
            above = above_right
        for merge_index in range(merge_count):
            _union_keyed(parent, key, merges[merge_index, 0],
                         merges[merge_index, 1])
    return next_label


@njit(cache=True, nogil=True)
def merge_seams_8(values, valid, check_valid, blocks, parent, key,
                  seam_block_rows):
    """Union the blocks linked across each strip's first block row and the
    block row above it."""
    cols = values.shape[1]
    block_cols = blocks.shape[1]
    for block_row in seam_block_rows:
        r0 = 2 * block_row
        ra = r0 - 1
        for block_col in range(block_cols):
            current = blocks[block_row, block_col]
            if current == 0:
                continue
            c0 = 2 * block_col
            c1 = c0 + 1
            o = _foreground(values, valid, check_valid, r0, c0)
            p = c1 < cols and _foreground(values, valid, check_valid, r0, c1)
            if not (o or p):
                continue
            for above_col in range(max(c0 - 1, 0), min(c1 + 2, cols)):
                if not _foreground(values, valid, check_valid, ra, above_col):
                    continue
                if (o and above_col <= c1) or (p and above_col >= c0):
                    current = _union_keyed(parent, key, current,
                                           blocks[block_row - 1,
                                                  above_col // 2])


@njit(cache=True, nogil=True)
def _sort_nearly_sorted(keys, items, start, stop):
    """Sort ``keys[start:stop]`` (distinct) and ``items`` along: insertion
    sort, which is linear on nearly sorted keys; past a budget of moves
    (an adversarial raster) it hands over to a merge sort."""
    moves = 0
    for index in range(start + 1, stop):
        current_key = keys[index]
        current_item = items[index]
        position = index
        while position > start and keys[position - 1] > current_key:
            keys[position] = keys[position - 1]
            items[position] = items[position - 1]
            position -= 1
        keys[position] = current_key
        items[position] = current_item
        moves += index - position
        if moves > 8 * (stop - start) + 64:
            order = np.argsort(keys[start:stop], kind="mergesort")
            keys[start:stop] = keys[start:stop][order]
            items[start:stop] = items[start:stop][order]
            return


@njit(cache=True, nogil=True)
def resolve(parent, key, first_labels, next_labels, cols):
    """Turn ``parent`` into the final label of every provisional label:
    roots numbered 1.. in increasing key (scan order of first cells);
    returns the count.  Strip ``s`` used labels
    ``first_labels[s]:next_labels[s]``; ``key`` is overwritten."""
    count = 0
    for strip in range(first_labels.size):
        for label in range(first_labels[strip], next_labels[strip]):
            if parent[label] == label:
                count += 1
            else:
                # parent < label, already pointing at its root
                parent[label] = parent[parent[label]]
    roots = np.empty(count, dtype=parent.dtype)
    root_keys = np.empty(count, dtype=key.dtype)
    found = 0
    for strip in range(first_labels.size):
        for label in range(first_labels[strip], next_labels[strip]):
            if parent[label] == label:
                roots[found] = label
                root_keys[found] = key[label]
                found += 1
    # Roots come in block-row order, and only within a block row (two cell
    # rows) can keys be out of order: take the roots whose first cell is in
    # the top row, then those in the bottom row, each group nearly sorted
    # already (a root's key moves only when a block to its right lowers it)
    span = 2 * cols
    sorted_roots = np.empty(count, dtype=parent.dtype)
    sorted_keys = np.empty(count, dtype=key.dtype)
    start = 0
    while start < count:
        bottom_row = (root_keys[start] // span) * span + cols
        stop = start
        while stop < count and root_keys[stop] < bottom_row + cols:
            stop += 1
        position = start
        for bottom in range(2):
            for index in range(start, stop):
                if (root_keys[index] >= bottom_row) == (bottom == 1):
                    sorted_roots[position] = roots[index]
                    sorted_keys[position] = root_keys[index]
                    position += 1
        _sort_nearly_sorted(sorted_keys, sorted_roots, start, stop)
        start = stop
    for position in range(count):
        key[sorted_roots[position]] = position + 1
    for strip in range(first_labels.size):
        for label in range(first_labels[strip], next_labels[strip]):
            parent[label] = key[parent[label]]
    parent[0] = 0
    return count


@njit(cache=True, nogil=True)
def second_pass_8(values, valid, check_valid, blocks, final, labels,
                  block_row_start, block_row_stop):
    """Final labels of the cells of block rows
    ``block_row_start:block_row_stop``: the block's label on its
    foreground cells, 0 elsewhere."""
    rows, cols = values.shape
    zero = labels.dtype.type(0)
    for block_row in range(block_row_start, block_row_stop):
        r0 = 2 * block_row
        r1 = r0 + 1
        for col in range(cols):
            label = final[blocks[block_row, col >> 1]]
            labels[r0, col] = label if _foreground(
                values, valid, check_valid, r0, col) else zero
            if r1 < rows:
                labels[r1, col] = label if _foreground(
                    values, valid, check_valid, r1, col) else zero
