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
the unions).  The row scan is its own function on 1-D row views with
unsigned indices (as ``_cpu``'s cell scans; box, 2048² random mask, one
thread: first pass 14.5 -> 12.9 ms, second pass 2.75 -> 2.30 ms against the
previous 2-D-indexed scan).

Labels must come out numbered in raster scan order of each component's first
*cell* (scipy's numbering), and a block row covers two cell rows: the block
scan order is not the cell scan order.  Each provisional label therefore
carries a *key*, the flat index of the first foreground cell of the blocks it
stands for; unions keep the minimum label as the root (so the root is the
component's first block, and strip label ranges stay disjoint) and the
minimum key at the root.  Only one case moves a key outside a union: a
label made by a block with bottom cells only, carried to the right by left
links alone to a block with a top cell (that cell comes first in scan
order).  The scan carries a flag for it and lists the block with the row's
unions, so no key is read or written per block but the new label's.  Roots
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
from ._cpu_cells import select as _select


@njit(cache=True, nogil=True, inline="always")
def _foreground(values, valid, check_valid, row, col):
    """A valid, non-zero, non-NaN cell (``v == v`` is false for NaN only).
    Bitwise operators, not ``and``: no branch on the data."""
    value = values[row, col]
    if check_valid:
        return (value != 0) & (value == value) & valid[row, col]
    return (value != 0) & (value == value)


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
def _cell(row, inside, check_valid, col):
    """1 where the cell ``col`` of a row (a 1-D view) is foreground: valid
    (``inside`` when ``check_valid``, else not NaN) and non-zero."""
    value = row[col]
    cell_inside = inside[col] if check_valid else value == value
    return np.int64(cell_inside & (value != 0))


@njit(cache=True, nogil=True, inline="always")
def _block_step(o, p, s, t, h, i, j, k, n, r, q_linked_p, r_linked_q,
                s_linked_p, s_linked_q, above_left, above, above_right, left,
                left_bottom_only, next_label):
    """Block X from its cells and its neighbours' (see :func:`first_pass_8`;
    every flag is 0 or 1); returns (label, next label, X-Q, X-R, X-S links,
    bottom-only flag, merge code).

    No branch on the data: links are bitwise expressions, the label a chain
    of masked selects in which S's label (the one value carried from block
    to block) enters last.  The merge code's bits say which unions the
    block needs (1: with P, 2: with R, 4: with S) and, bit 8, that X took
    S's label by the left link alone and brings the first top-row cell to
    a label made this block row by a block with bottom cells only
    (``left_bottom_only``): its key must move up to X's top cell.  Unions
    are skipped where the labels are already joined by a direct link:
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
    new = any_cell & (1 - linked_above) & (1 - link_s)
    union_p = link_p & link_q & (1 - q_linked_p)
    union_r = link_r & ((link_q & (1 - r_linked_q)) | ((1 - link_q) & link_p))
    union_s = link_s & linked_above & (1 - (
        (s_linked_p & (link_p | (link_q & q_linked_p)))
        | (s_linked_q & (link_q | (link_p & q_linked_p)))))
    lower = take_left & top_cell & left_bottom_only
    bottom_only = (new | (take_left & left_bottom_only)) & (1 - top_cell)
    code = union_p | (union_r << 1) | (union_s << 2) | (lower << 3)
    return (current, next_label + new, link_q, link_r, link_s, bottom_only,
            code)


@njit(cache=True, nogil=True)
def _scan_block_row_8(up_cells, top, bottom, up_inside, top_inside,
                      bottom_inside, check_valid, up, up_links, out, links,
                      merges, key, first_cell, next_label):
    """Provisional labels ``out`` of one block row (cell rows ``top`` and
    ``bottom``, 1-D views, under the cell row ``up_cells`` and the block
    row labelled ``up``, whose blocks' left links are ``up_links``); writes
    this row's left links to ``links`` and each block's key (its first
    cell's flat index, ``first_cell`` being the top row's first) at
    ``key[next_label]`` (kept where the block makes a label).  Returns
    (next label, merge count): ``merges`` lists ``16 * block + code`` for
    the blocks whose code (:func:`_block_step`) is not 0.

    Its own function (not inlined) on row views with unsigned indices, the
    cells and labels of P, Q and S sliding along in registers, the blocks
    without an above-right cell (the last one or two) peeled: as the cell
    scans of ``_cpu``.  A missing row above or below is a row of zeros.
    """
    cols = np.uint64(top.size)
    block_cols = np.uint64(out.size)
    one = np.uint64(1)
    two = np.uint64(2)
    # blocks whose cell above-right (column c0 + 2) lies in the raster
    inner = (cols - one) >> one
    zero = np.int64(0)
    # h, i, n, r, P's and Q's labels, Q-P link, S's label, S-P and S-Q
    # links, S's bottom-only flag, merge count, next label
    state = (zero, _cell(up_cells, up_inside, check_valid, np.uint64(0)),
             zero, zero, zero, np.int64(up[0]), zero, zero, zero, zero, zero,
             np.uint64(0), next_label)
    for block in range(inner):
        c0 = two * block
        state = _scan_step(
            block, _cell(top, top_inside, check_valid, c0),
            _cell(top, top_inside, check_valid, c0 + one),
            _cell(bottom, bottom_inside, check_valid, c0),
            _cell(bottom, bottom_inside, check_valid, c0 + one),
            _cell(up_cells, up_inside, check_valid, c0 + one),
            _cell(up_cells, up_inside, check_valid, c0 + two),
            np.int64(up[block + one]), np.int64(up_links[block + one]),
            state, out, links, merges, key, first_cell, cols)
    for block in range(inner, block_cols):
        c0 = two * block
        has_c1 = c0 + one < cols
        has_k = c0 + two < cols
        state = _scan_step(
            block, _cell(top, top_inside, check_valid, c0),
            _cell(top, top_inside, check_valid, c0 + one) if has_c1 else zero,
            _cell(bottom, bottom_inside, check_valid, c0),
            _cell(bottom, bottom_inside, check_valid, c0 + one) if has_c1
            else zero,
            _cell(up_cells, up_inside, check_valid, c0 + one) if has_c1
            else zero,
            _cell(up_cells, up_inside, check_valid, c0 + two) if has_k
            else zero,
            np.int64(up[block + one]) if has_k else zero,
            np.int64(up_links[block + one]) if has_k else zero,
            state, out, links, merges, key, first_cell, cols)
    return state[12], state[11]


@njit(cache=True, nogil=True, inline="always")
def _scan_step(block, o, p, s, t, j, k, above_right, r_linked_q, state, out,
               links, merges, key, first_cell, cols):
    """One block of :func:`_scan_block_row_8` from its cells, the cells
    j and k above it and R's label and left link; writes its label, left
    link, key and merge entry, and returns the state slid one block
    along."""
    (h, i, n, r, above_left, above, q_linked_p, left, s_linked_p,
     s_linked_q, left_bottom_only, merge_count, next_label) = state
    # written always, kept where the block makes a label
    key[next_label] = first_cell + np.int64(2 * block) + _select(
        o, 0, _select(p, 1, _select(s, np.int64(cols), np.int64(cols) + 1)))
    (current, next_label, link_q, link_r, link_s, left_bottom_only,
     code) = _block_step(o, p, s, t, h, i, j, k, n, r, q_linked_p,
                         r_linked_q, s_linked_p, s_linked_q, above_left,
                         above, above_right, left, left_bottom_only,
                         next_label)
    out[block] = current
    links[block] = link_s
    merges[merge_count] = np.int64(block << np.uint64(4)) | code
    merge_count += np.uint64(code != 0)
    # X becomes S (its Q is the next P, its R the next Q), Q becomes P,
    # R becomes Q
    return (j, k, p, t, above, above_right, r_linked_q, current, link_q,
            link_r, left_bottom_only, merge_count, next_label)


@njit(cache=True, nogil=True)
def first_pass_8(values, valid, check_valid, blocks, parent, key,
                 linked_left, top, block_row_start, block_row_stop,
                 next_label):
    """Provisional labels of 2 x 2 blocks, block rows
    ``block_row_start:block_row_stop`` of the strip whose first block row is
    ``top``; returns the next unused label.  ``linked_left`` (2 x block
    columns, the strip's own) holds, for the previous and this block row by
    parity, whether each block was linked to its left neighbour.

    Cells of the block X and its neighbours (the cell row above X's top
    row; P, Q, R the blocks above-left, above, above-right, S the block
    left)::

        h | i j | k        row above   (bottom row of P | Q | R)
        n | o p            top row     (S's right column | X)
        r | s t            bottom row

    Each block row is scanned by :func:`_scan_block_row_8`; its new labels
    are made roots and its unions made after it, in the order the blocks
    listed them: a label made by a block with bottom cells only has that
    cell as its key until a block that took the label by the left link
    alone brings a top cell (then the key moves up, before any union of the
    label: a block with bottom cells only links nothing above).
    """
    rows, cols = values.shape
    block_cols = blocks.shape[1]
    merges = np.empty(block_cols, dtype=np.int64)
    zero_cells = np.zeros(cols, dtype=values.dtype)
    zero_labels = np.zeros(block_cols, dtype=blocks.dtype)
    zero_links = np.zeros(block_cols, dtype=linked_left.dtype)
    for block_row in range(block_row_start, block_row_stop):
        r0 = 2 * block_row
        r1 = r0 + 1
        has_above = block_row > top
        top_cells = values[r0]
        top_inside = valid[r0 if check_valid else 0]
        bottom_cells = values[r1] if r1 < rows else zero_cells
        bottom_inside = valid[r1 if check_valid and r1 < rows else 0]
        up_cells = values[r0 - 1] if has_above else zero_cells
        up_inside = valid[r0 - 1 if check_valid and has_above else 0]
        up = blocks[block_row - 1] if has_above else zero_labels
        up_links = linked_left[(block_row - 1) & 1] if has_above \
            else zero_links
        out = blocks[block_row]
        row_first = next_label
        next_label, merge_count = _scan_block_row_8(
            up_cells, top_cells, bottom_cells, up_inside, top_inside,
            bottom_inside, check_valid, up, up_links, out,
            linked_left[block_row & 1], merges, key, r0 * cols, next_label)
        for label in range(np.uint64(row_first), np.uint64(next_label)):
            parent[label] = label
        for index in range(merge_count):
            entry = merges[index]
            block = np.uint64(entry >> 4)
            code = entry & 15
            current = out[block]
            if code & 8:
                # X took S's label: move its key up to X's first top cell
                key[current] = r0 * cols + 2 * np.int64(block) + 1 - _cell(
                    top_cells, top_inside, check_valid, 2 * block)
            if code & 1:
                current = _union_keyed(parent, key, current,
                                       up[block - np.uint64(1)])
            if code & 2:
                current = _union_keyed(parent, key, current,
                                       up[block + np.uint64(1)])
            if code & 4:
                _union_keyed(parent, key, current, out[block - np.uint64(1)])
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
    foreground cells, 0 elsewhere (a mask, no branch)."""
    rows, cols = values.shape
    zero_cells = np.zeros(cols, dtype=values.dtype)
    spare = np.empty(cols, dtype=labels.dtype)
    for block_row in range(block_row_start, block_row_stop):
        r0 = 2 * block_row
        r1 = r0 + 1
        has_r1 = r1 < rows
        _fill_block_row(values[r0], valid[r0 if check_valid else 0],
                        values[r1] if has_r1 else zero_cells,
                        valid[r1 if check_valid and has_r1 else 0],
                        check_valid, blocks[block_row], final, labels[r0],
                        labels[r1] if has_r1 else spare)


@njit(cache=True, nogil=True)
def _fill_block_row(top, top_inside, bottom, bottom_inside, check_valid,
                    block_labels, final, top_out, bottom_out):
    """The two cell rows of one block row (1-D views, unsigned indices, a
    label looked up once per block; the last column of an odd width
    peeled)."""
    cols = np.uint64(top.size)
    one = np.uint64(1)
    for block in range(cols >> one):
        label = np.int64(final[np.uint64(block_labels[block])])
        c0 = block << one
        top_out[c0] = label & -_cell(top, top_inside, check_valid, c0)
        top_out[c0 + one] = label & -_cell(top, top_inside, check_valid,
                                           c0 + one)
        bottom_out[c0] = label & -_cell(bottom, bottom_inside, check_valid,
                                        c0)
        bottom_out[c0 + one] = label & -_cell(bottom, bottom_inside,
                                              check_valid, c0 + one)
    if cols & one:
        c0 = cols - one
        label = np.int64(final[np.uint64(block_labels[c0 >> one])])
        top_out[c0] = label & -_cell(top, top_inside, check_valid, c0)
        bottom_out[c0] = label & -_cell(bottom, bottom_inside, check_valid,
                                        c0)
