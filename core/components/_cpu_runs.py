"""Numba CPU kernels for connected components: rows labelled run by run
(the first pass of :mod:`._cpu` on smooth rows), and the run lists such a
row keeps in place of its provisional labels.

A row of few runs costs little to label run by run, but writing its
provisional labels cell by cell in the first pass and reading, looking up
and rewriting every one of them in the second costs about as much as the
labelling.  So a row labelled by runs keeps only its run list, in its own
row of the label image (count, then start, stop, label per run: it fits
when ``1 + 3 * runs <= cols``; else the row's labels are written), and the
second pass fills the row's final labels run by run: a write only.  The
row below, when labelled cell by cell, reads the row's labels from a
scratch row filled from the run list; a seam's two rows are unpacked
before the seams are merged (:func:`unpack_rows`).
"""

import platform

import numpy as np
from llvmlite import ir
from numba import njit
from numba import types
from numba.extending import intrinsic

from .._unionfind import merge_sets
from ._cpu_cells import select


@njit(cache=True, nogil=True, inline="always")
def label_row_runs(values, valid, check_valid, labels, parent, merges, row,
                   has_above, next_label, runs_here, runs_above,
                   above_count, bounds_here, bounds_above, nonzero,
                   eight):
    """Provisional labels of one row, a run at a time: a run (valid cells,
    non-zero in ``nonzero`` mode, of one value in ``equal`` mode) takes the
    label of the first linked run above it and merges the others; returns
    (next label, runs), the runs listed in ``runs_here`` (start, stop,
    label).  The runs above come from ``runs_above`` when the row above
    was labelled by runs (``above_count`` of them; -1: it was not), else
    from its cells, told apart by their labels: a run carries one label,
    and two neighbouring cells above with the same label are in one set
    already.

    The runs' bounds are found first, by a loop with no branch on the
    data (:func:`_run_bounds_nonzero`, :func:`_run_bounds_equal`); a
    loop that walks each run to its end mispredicts its exit once a run
    and tests every cell twice.  Below a row labelled by runs, the runs
    are linked to the runs above them: in ``nonzero`` mode on one-byte
    rasters by counting the row above's bounds before each run's ends
    (:func:`_link_runs_counted`; ``bounds_above`` holds them, as
    ``bounds_here`` gets this row's), else by one sweep over both run
    lists (:func:`_link_runs`; ``merges`` is the scratch of both).
    Nothing is written to ``labels``: the caller keeps the run list
    (:func:`keep_runs`)."""
    cols = values.shape[1]
    here = values[row]
    inside = valid[row if check_valid else 0]
    if nonzero:
        runs = _run_bounds_nonzero(here, inside, check_valid, runs_here,
                                   bounds_here)
    else:
        runs = _run_bounds_equal(here, inside, check_valid, runs_here)
    if has_above and above_count >= 0 and nonzero and here.itemsize == 1:
        next_label = _link_runs_counted(parent, merges, runs_here, runs,
                                        runs_above, bounds_above, next_label,
                                        eight)
        return next_label, runs
    if has_above and above_count >= 0:
        next_label = _link_runs(here, values[row - 1], parent, merges,
                                runs_here, runs, runs_above, above_count,
                                next_label, nonzero, eight)
        return next_label, runs
    for run in range(runs):
        start = runs_here[run, 0]
        stop = runs_here[run, 1]
        value = here[start]
        label = np.int64(0)
        first = start - 1 if eight and start > 0 else start
        last = stop + 1 if eight and stop < cols else stop
        if has_above:
            previous = np.int64(0)
            for above_col in range(first, last):
                above = np.int64(labels[row - 1, above_col])
                if above != 0 and above != previous and (
                        nonzero or values[row - 1, above_col] == value):
                    if label == 0:
                        label = above
                    else:
                        merge_sets(parent, label, above)
                previous = above
        if label == 0:
            label = next_label
            parent[next_label] = next_label
            next_label += 1
        runs_here[run, 2] = label
    return next_label, runs


@njit(cache=True, nogil=True, inline="always")
def _link_runs(here, up_values, parent, merges, runs_here, runs, runs_above,
               above_count, next_label, nonzero, eight):
    """:func:`label_row_runs` below a row labelled by runs: the ``runs``
    runs of ``runs_here`` (start, stop) get their labels from the
    ``above_count`` runs of ``runs_above`` (start, stop, label) in one
    sweep over both lists, a step a pair of runs that may touch, with no
    branch on the data but the (rare) merge: a step links the two runs
    when they touch (8-connected: diagonally too) and, in ``equal`` mode,
    their values are equal, and moves on from the run that ends first
    (both when they end together, 4-connected).  A run takes the label
    of its first linked run above, as a walk run by run would (which
    mispredicts its loops' exits and the value tests, a few times a
    run), and the pairs of labels to merge (its label and the others')
    are listed in ``merges`` (at most one a run above) and merged after
    the sweep (a branch on them, which LLVM split into three, cost more
    than the sweep: 2-core box, 2048² fractal mask, 4-connected); runs
    with none get new labels after the sweep, in order.  The order of
    the merges and which linked label a run takes change no final label:
    a set's root is its least label, its first run's new one.  Returns
    the next label.

    8-connected in ``equal`` mode, a run and the one after it may both
    touch the run above that ends where they meet (touching runs), and
    the sweep, moving on from the run above there, checks the first run
    of each step against the run above before its own: the pair it
    skipped.  In ``nonzero`` mode a row's runs never touch (a background
    cell parts them), so no run above that ends at or before a run's
    stop reaches the next run, and that check is left out."""
    # unsigned indices: no negative-index fix-up on the chain from one
    # step to the next
    run_count = np.uint64(runs)
    above_total = np.uint64(above_count)
    for run in range(run_count):
        runs_here[run, 2] = 0
    run = np.uint64(0)
    above = np.uint64(0)
    current = np.int64(0)  # the label of the run so far, 0: none yet
    entered = np.int64(0)  # the run's first step
    merge_count = np.uint64(0)
    while run < run_count and above < above_total:
        start = runs_here[run, 0]
        stop = runs_here[run, 1]
        value = here[np.uint64(start)]
        if eight and not nonzero:
            # the run above before (none before the first: read the
            # first, not linked)
            has_before = np.uint64(above > 0)
            before = above - has_before
            linked_before = entered & np.int64(has_before) & np.int64(
                start <= runs_above[before, 1]) & np.int64(
                up_values[np.uint64(runs_above[before, 0])] == value)
            current = select(linked_before,
                             runs_above[before, 2], current)
        above_start = runs_above[above, 0]
        above_stop = runs_above[above, 1]
        above_label = runs_above[above, 2]
        if eight:
            touch = np.int64(start <= above_stop) & np.int64(
                above_start <= stop)
        else:
            touch = np.int64(start < above_stop) & np.int64(
                above_start < stop)
        if nonzero:
            linked = touch
        else:
            linked = touch & np.int64(
                up_values[np.uint64(above_start)] == value)
        merges[merge_count, 0] = current
        merges[merge_count, 1] = above_label
        merge_count += np.uint64(linked & np.int64(current != 0) & np.int64(
            current != above_label))
        current = select(linked & np.int64(current == 0), above_label,
                         current)
        runs_here[run, 2] = current
        if eight:
            next_run = np.int64(above_stop > stop)
        else:
            next_run = np.int64(stop <= above_stop)
        run += np.uint64(next_run)
        above += np.uint64(above_stop <= stop)
        current &= next_run - 1
        entered = next_run
    if eight and not nonzero and above_total > 0:
        # the first run not stepped through, against the last run above
        run += np.uint64(1 - entered)
        if run < run_count:
            start = runs_here[run, 0]
            before = above_total - _ONE
            if start <= runs_above[before, 1] and \
                    up_values[np.uint64(runs_above[before, 0])] == \
                    here[np.uint64(start)]:
                runs_here[run, 2] = runs_above[before, 2]
    return _merge_then_label_new_runs(parent, merges, merge_count,
                                      runs_here, runs, next_label)


@njit(cache=True, nogil=True, inline="always")
def _link_runs_counted(parent, merges, runs_here, runs, runs_above,
                       bounds_above, next_label, eight):
    """:func:`_link_runs` in ``nonzero`` mode on one-byte rasters: each
    run finds the runs above it that it touches from the bounds of the
    row above (``bounds_above``, :func:`_run_bounds_nonzero`'s bound
    words and counts): the runs above that end before the run (their
    stops before its start, 8-connected; at or before it, 4-connected)
    and those that start before it ends (their starts at or before its
    stop, 8-connected; before it, 4-connected) are counts of bounds, as
    starts and stops alternate, and the runs between the two counts are
    its runs above.  Each run's counts are independent of the other
    runs', where the sweep's next step waits for the last one's
    comparisons (its chain of loads was the first pass's floor on
    smooth rows).  A run takes the label of its first run above and
    merges the others' (after the loop, as in :func:`_link_runs`); runs
    with none get new labels after it, in order.  Returns the next
    label."""
    merge_count = np.uint64(0)
    for run in range(runs):
        start = np.uint64(runs_here[run, 0])
        stop = np.uint64(runs_here[run, 1])
        if eight:
            before_start = start
            before_stop = stop + _ONE
        else:
            before_start = start + _ONE
            before_stop = stop
        # the runs above that stop before the run, and all that start
        # before its end: runs above first:end touch it
        first = _bounds_before(bounds_above, before_start) >> _ONE
        end = (_bounds_before(bounds_above, before_stop) + _ONE) >> _ONE
        # first <= the runs above, inside runs_above even when none touch
        label = select(np.int64(first < end), runs_above[first, 2],
                       np.int64(0))
        runs_here[run, 2] = label
        for other_run in range(first + _ONE, end):  # rare: merges
            other = runs_above[other_run, 2]
            merges[merge_count, 0] = label
            merges[merge_count, 1] = other
            merge_count += np.uint64(other != label)
    return _merge_then_label_new_runs(parent, merges, merge_count,
                                      runs_here, runs, next_label)


@njit(cache=True, nogil=True, inline="always")
def _merge_then_label_new_runs(parent, merges, merge_count, runs_here, runs,
                               next_label):
    """The end of :func:`_link_runs` and :func:`_link_runs_counted`: the
    ``merge_count`` merges listed in ``merges``, then a new label for each
    run that took none from above, in order; returns the next label."""
    for merge in range(merge_count):
        merge_sets(parent, merges[merge, 0], merges[merge, 1])
    for run in range(runs):
        if runs_here[run, 2] == 0:
            runs_here[run, 2] = next_label
            parent[next_label] = next_label
            next_label += 1
    return next_label


@njit(cache=True, nogil=True, inline="always")
def _bounds_before(bounds, col):
    """How many bounds of a row lie before column ``col`` (at most its
    columns + 1), from its bound words (``bounds[0]``, a bit a column, 64
    columns a word) and the counts before each word (``bounds[1]``)."""
    word = col >> _SIX
    below = (_ONE << (col & _LOW_SIX)) - _ONE
    return bounds[1, word] + _bit_count(bounds[0, word] & below)


@njit(cache=True, nogil=True)
def bound_words_of_runs(runs, count, bounds, cols):
    """A row's bound words and counts (:func:`_run_bounds_nonzero`'s
    ``bounds``) from its run list (``count`` runs, start and stop): for
    a row above the first of a call, whose run list was kept."""
    bounds[0, :] = 0
    for run in range(count):
        for col in (np.uint64(runs[run, 0]), np.uint64(runs[run, 1])):
            if col < np.uint64(cols):  # a stop at the row's end: no bit
                bounds[0, col >> _SIX] |= _ONE << (col & _LOW_SIX)
    counted = np.uint64(0)
    for word in range(bounds.shape[1]):
        bounds[1, word] = counted
        counted += _bit_count(bounds[0, word])


_ONE = np.uint64(1)
_BLOCK = np.uint64(64)  # cells of a block of run bounds
_SIX = np.uint64(6)  # a column's block: col >> 6
_LOW_SIX = np.uint64(63)  # its bit in the block


@njit(cache=True, nogil=True)
def _run_bounds_nonzero(here, inside, check_valid, runs, bounds_kept):
    """The foreground runs of one row (``nonzero`` mode) as (start, stop)
    in ``runs[:, 0:2]``; returns how many.

    One-byte rasters (masks) are read 64 cells at a time: a vector compare of
    64 cells makes a 64-bit block of vertex bits
    (:func:`byte_mask_intrinsics`; 2-core box, AMD EPYC, one thread, the 2048
    rows of a 2048² fractal mask: the bounds 0.398 ms with the 8-cell words'
    bits gathered by multiplies into a byte scratch row first, 0.325 ms with
    the compare; ``bench/components_bounds_ab.py``, 2026-12-03), whose bounds
    (a cell unlike the cell before it) are set bits; the cells after the last
    whole block make a last, partial block.  The blocks that hold a bound are
    listed (in ``runs[:, 2]``, free until the runs get labels) with their
    bounds, by a loop with no branch on the data, and each listed block writes
    its bounds' columns (count trailing zeros, clear the lowest bit) 8 at a
    time with no branch: bound ``k`` at ``runs[k // 2, k % 2]``, as starts and
    stops alternate, and the writes past a block's last bound are overwritten
    by the next block's (a 2048² fractal mask's listed blocks hold 1 to 9
    bounds, 4 on average: a loop over them mispredicted its exit once a
    block).  Box (Xeon), one thread, the 2048 rows of a 2048² fractal mask:
    2.6-3.0 ms when listing 8-cell words and walking them cell by cell, 1.46
    ms with blocks.  The blocks' bounds are kept in ``bounds_kept[0]`` (at
    least ``here.size // 64 + 2`` words; the words past the row's are 0, and
    the last whole block's stop at the row's end is no bit) with the count of
    bounds before each word in ``bounds_kept[1]``, for the row below
    (:func:`_link_runs_counted`).

    Cells of other rasters go one at a time with no branch on the data
    (``bounds_kept`` is not written)."""
    cols = np.uint64(here.size)
    if here.itemsize != 1:
        starts = np.uint64(0)
        stops = np.uint64(0)
        left_vertex = np.uint64(0)
        for col in range(cols):
            starts, stops, left_vertex = _bound_step_nonzero(
                here, inside, check_valid, runs, col, starts, stops,
                left_vertex)
        runs[stops, 1] = cols  # the last run's stop, when it is open
        return np.int64(starts)
    blocks = cols // _BLOCK
    listed = runs[:, 2]  # pairs: block, its bounds
    count = np.uint64(0)
    before = np.uint64(0)  # the cell before the block is a vertex
    counted = np.uint64(0)  # bounds before the block
    for block in range(blocks):
        vertices = _nonzero_bits(here, block * _BLOCK)
        if check_valid:
            vertices &= _nonzero_bits(inside, block * _BLOCK)
        bounds = vertices ^ ((vertices << _ONE) | before)
        listed[count] = block
        listed[count + _ONE] = np.int64(bounds)
        count += np.uint64(2) * np.uint64(bounds != 0)
        before = vertices >> np.uint64(63)
        bounds_kept[0, block] = bounds
        bounds_kept[1, block] = counted
        counted += _bit_count(bounds)
    kept = blocks
    first_tail = blocks * _BLOCK
    if first_tail < cols:
        # the cells after the last whole block: a partial block, whose
        # bound at the row's end (a stop, when its last cell is a vertex)
        # is a bit too
        vertices = np.uint64(0)
        for col in range(first_tail, cols):
            value = here[col]
            cell_inside = inside[col] if check_valid else value == value
            vertices |= np.uint64(cell_inside & (value != 0)) << (
                col - first_tail)
        bounds = vertices ^ ((vertices << _ONE) | before)
        listed[count] = blocks
        listed[count + _ONE] = np.int64(bounds)
        count += np.uint64(2) * np.uint64(bounds != 0)
        bounds_kept[0, blocks] = bounds
        bounds_kept[1, blocks] = counted
        counted += _bit_count(bounds)
        kept += _ONE
    for word in range(kept, bounds_kept.shape[1]):
        bounds_kept[0, word] = 0
        bounds_kept[1, word] = counted
    bound = np.uint64(0)  # bounds written
    for index in range(0, count, 2):
        first = np.uint64(listed[index]) * _BLOCK
        bounds = np.uint64(listed[index + 1])
        block_bounds = _bit_count(bounds)
        written = bound
        for _ in range(8):
            bounds = _write_bound(runs, written, first, bounds)
            written += _ONE
        while bounds != 0:  # over 8 bounds: 5 % of a fractal mask's
            bounds = _write_bound(runs, written, first, bounds)
            written += _ONE
        bound += block_bounds
    stops = bound >> _ONE
    runs[stops, 1] = cols  # the last run's stop, when it is open
    return np.int64((bound + _ONE) >> _ONE)


@njit(cache=True, nogil=True, inline="always")
def _write_bound(runs, bound, first, bounds):
    """Write the column of the lowest set bit of ``bounds`` (a block from
    column ``first``) as bound number ``bound`` (even: a start, odd: a
    stop); returns ``bounds`` without that bit."""
    runs[bound >> _ONE, bound & _ONE] = first + _trailing_zeros(bounds)
    return bounds & (bounds - _ONE)


def byte_mask_intrinsics(compare_and_bitcast):
    """Two intrinsics on 64 one-byte cells (a C-contiguous array from
    index ``first``), each a 64-bit word whose bit i is cell ``first + i``:

    - ``nonzero_bits(cells, first)``: the cell is not 0;
    - ``unequal_bits(cells, first, other)``: the cell differs from cell
      ``other + i``.

    ``compare_and_bitcast``: one ``<64 x i8>`` compare whose ``<64 x i1>``
    result is bitcast to the word (x86-64: two AVX2 compares and byte
    masks, one AVX-512 test).  Else the word is gathered from the eight
    64-bit lanes with the high-bit trick and a multiply per lane (SWAR),
    the form the bounds had before: on AArch64 LLVM lowers the bitcast to
    ~200 scalar instructions (LLVM 14, read from its assembly; not
    timed).  Bit i is cell ``first + i`` on little-endian targets (a
    big-endian one would reverse the bitcast's bits), as are all numba
    runs this plugin on (x86-64, AArch64, ppc64le)."""
    byte_cells = ir.VectorType(ir.IntType(8), 64)
    word = ir.IntType(64)
    lanes = ir.VectorType(word, 8)

    def lane_constant(value):
        return ir.Constant(lanes, [value] * 8)

    def mask(builder, cells):
        if compare_and_bitcast:
            return builder.bitcast(
                builder.icmp_unsigned("!=", cells,
                                      ir.Constant(byte_cells, None)), word)
        values = builder.bitcast(cells, lanes)
        # the high bit of each non-zero byte, then byte i's to bit 56 + i
        low_7 = lane_constant(0x7F7F7F7F7F7F7F7F)
        flags = builder.and_(
            builder.or_(builder.add(builder.and_(values, low_7), low_7),
                        values), lane_constant(0x8080808080808080))
        gathered = builder.lshr(
            builder.mul(builder.lshr(flags, lane_constant(7)),
                        lane_constant(0x0102040810204080)),
            lane_constant(56))
        return builder.bitcast(
            builder.trunc(gathered, ir.VectorType(ir.IntType(8), 8)), word)

    def cells_from(context, builder, signature, args, index):
        array = context.make_array(signature.args[0])(context, builder,
                                                       args[0])
        start = builder.gep(array.data, [index])
        return builder.load(builder.bitcast(start, byte_cells.as_pointer()),
                            align=1)

    def contiguous(cells):
        return isinstance(cells, types.Array) and cells.layout == "C"

    @intrinsic
    def nonzero_bits(typingctx, cells, first):
        if not contiguous(cells):
            return None  # the vector loads read contiguous cells

        def codegen(context, builder, signature, args):
            return mask(builder, cells_from(context, builder, signature,
                                            args, args[1]))
        return types.uint64(cells, first), codegen

    @intrinsic
    def unequal_bits(typingctx, cells, first, other):
        if not contiguous(cells):
            return None

        def codegen(context, builder, signature, args):
            return mask(builder, builder.xor(
                cells_from(context, builder, signature, args, args[1]),
                cells_from(context, builder, signature, args, args[2])))
        return types.uint64(cells, first, other), codegen

    return nonzero_bits, unequal_bits


# the compare and bitcast where it is a few instructions (x86-64)
_nonzero_bits, _unequal_bits = byte_mask_intrinsics(
    platform.machine().lower() in ("x86_64", "amd64"))


@intrinsic
def _trailing_zeros(typingctx, word):
    """Trailing zero bits of an unsigned integer (its width for 0)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))
    return word(word), codegen


@intrinsic
def _bit_count(typingctx, word):
    """Set bits of an unsigned integer."""
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return word(word), codegen


@njit(cache=True, nogil=True, inline="always")
def _bound_step_nonzero(here, inside, check_valid, runs, col, starts, stops,
                        left_vertex):
    """One cell of :func:`_run_bounds_nonzero`."""
    value = here[col]
    cell_inside = inside[col] if check_valid else value == value
    vertex = np.uint64(cell_inside & (value != 0))
    runs[starts, 0] = col
    starts += vertex & (np.uint64(1) - left_vertex)
    runs[stops, 1] = col
    stops += left_vertex & (np.uint64(1) - vertex)
    return starts, stops, vertex


@njit(cache=True, nogil=True)
def _run_bounds_equal(here, inside, check_valid, runs):
    """:func:`_run_bounds_equal_with` with ``check_valid`` a compile-time
    constant in each branch.  With it a run-time flag, numba 0.68 compiled
    the loop over 8-cell words this used then far slower (by the timings, the
    flag's test stayed in the loop and kept it from vectorizing): on the GPU
    machine's numba 0.68, `equal` mode labelled a 2048² fractal mask 6.9x
    slower than `nonzero` mode (first pass 26.7 against 1.8 ms).  The bounds
    of all its rows on the 2-core box, one thread: 11.3 ms with numba 0.68
    against 1.2 ms with numba 0.60, and 1.0 ms with numba 0.68 this way."""
    if check_valid:
        return _run_bounds_equal_with(here, inside, True, runs)
    return _run_bounds_equal_with(here, inside, False, runs)


@njit(cache=True, nogil=True, inline="always")
def _run_bounds_equal_with(here, inside, check_valid, runs):
    """:func:`_run_bounds_nonzero` for ``equal`` mode: runs of valid cells
    of one value (runs may touch, so starts and stops are counted apart;
    NaN equals nothing, as in the cell scans).  ``runs`` needs
    ``here.size + 9`` rows (the branch-free writes run up to 8 past the
    last bound).

    One-byte rasters of more than 64 cells are read 64 cells at a time,
    as in :func:`_run_bounds_nonzero`: a vector compare of each 64-cell
    block with the 64 cells one column left of it (:func:`_unequal_bits`)
    gives the cells whose value differs from their left neighbour's,
    and with a valid mask the block's valid bits
    (:func:`_nonzero_bits`) make its start bits (a valid cell whose left
    neighbour is invalid or of another value) and stop bits (the same
    with the two cells swapped).  The blocks that hold a start or a stop
    are listed, and each listed block writes its starts' columns 8 at a
    time with no branch (then its stops').  Without a valid mask every
    cell of a one-byte raster is valid, so a run ends where the next one
    starts: only the starts are written, and each stop copied from the
    next start.  (2-core box, AMD EPYC, one thread, the 2048 rows of a
    2048² fractal mask: 0.347 ms when 8-cell words' bits were gathered by
    multiplies into a byte scratch row first, 0.197 ms this way; with a
    95 % valid mask 1.770 and 0.765 ms; ``bench/components_bounds_ab.py``,
    2026-12-03.)  The cells after the last whole block,
    and every cell of other rasters, go one at a time with no branch on
    the data."""
    cols = np.uint64(here.size)
    starts = np.uint64(0)
    stops = np.uint64(0)
    left_vertex = np.uint64(0)
    left_value = here[0]
    col = np.uint64(0)
    if here.itemsize == 1 and cols > _BLOCK:
        blocks = cols // _BLOCK
        listed = runs[:, 2]  # block, its starts (and its stops)
        count = np.uint64(0)
        before_inside = np.uint64(0)  # the cell before the block is valid
        for block in range(blocks):
            first = block * _BLOCK
            if block == 0:
                # cell 0 has no left neighbour: its bit is set (cell 64,
                # which the compare reads, exists as cols > 64)
                differs = (_unequal_bits(here, _ONE, np.uint64(0))
                           << _ONE) | _ONE
            else:
                differs = _unequal_bits(here, first, first - _ONE)
            if check_valid:
                block_inside = _nonzero_bits(inside, first)
                left_inside = (block_inside << _ONE) | before_inside
                before_inside = block_inside >> np.uint64(63)
                block_starts = block_inside & (~left_inside | differs)
                block_stops = left_inside & (~block_inside | differs)
                listed[count] = block
                listed[count + _ONE] = np.int64(block_starts)
                listed[count + np.uint64(2)] = np.int64(block_stops)
                count += np.uint64(3) * np.uint64(
                    (block_starts | block_stops) != 0)
            else:
                listed[count] = block
                listed[count + _ONE] = np.int64(differs)
                count += np.uint64(2) * np.uint64(differs != 0)
        if check_valid:
            for index in range(0, count, 3):
                first = np.uint64(listed[index]) * _BLOCK
                starts = _write_bounds(runs, 0, starts, first,
                                       np.uint64(listed[index + 1]))
                stops = _write_bounds(runs, 1, stops, first,
                                      np.uint64(listed[index + 2]))
            left_vertex = before_inside
        else:
            for index in range(0, count, 2):
                starts = _write_bounds(runs, 0, starts,
                                       np.uint64(listed[index]) * _BLOCK,
                                       np.uint64(listed[index + 1]))
            # cell 0 starts a run (its bit is set), every run but the
            # last (open) stops where the next starts
            stops = starts - _ONE
            for run in range(stops):
                runs[run, 1] = runs[run + _ONE, 0]
            left_vertex = _ONE
        col = blocks * _BLOCK
        left_value = here[col - _ONE]
    for col in range(col, cols):
        starts, stops, left_vertex, left_value = _bound_step_equal(
            here, inside, check_valid, runs, col, starts, stops, left_vertex,
            left_value)
    runs[stops, 1] = cols
    return np.int64(starts)


@njit(cache=True, nogil=True, inline="always")
def _write_bounds(runs, column, written, first, bounds):
    """Write the columns of the set bits of ``bounds`` (a block from
    column ``first``) to ``runs[written:, column]``, the first 8 with no
    branch (and the rest in a loop); returns ``written`` plus the bits."""
    total = written + _bit_count(bounds)
    for _ in range(8):
        runs[written, column] = first + _trailing_zeros(bounds)
        bounds &= bounds - _ONE
        written += _ONE
    while bounds != 0:
        runs[written, column] = first + _trailing_zeros(bounds)
        bounds &= bounds - _ONE
        written += _ONE
    return total


@njit(cache=True, nogil=True, inline="always")
def _bound_step_equal(here, inside, check_valid, runs, col, starts, stops,
                      left_vertex, left_value):
    """One cell of :func:`_run_bounds_equal`."""
    value = here[col]
    vertex = np.uint64(inside[col] if check_valid else value == value)
    same = np.uint64(value == left_value)
    runs[starts, 0] = col
    starts += vertex & (np.uint64(1) - (left_vertex & same))
    runs[stops, 1] = col
    stops += left_vertex & (np.uint64(1) - (vertex & same))
    return starts, stops, vertex, value


# cells a store of :func:`_fill_segment` writes at once (64 bytes of int32
# labels: one AVX-512 store, two AVX2 ones).  2-core box (AMD EPYC,
# AVX-512), one thread, the 2048 rows of the 2048² fractal mask filled
# from their run lists, 41 interleaved rounds: 1.14 ms by 8 cells, 1.00
# ms by 16 or 32; after evicting the caches 1.51, 1.43 and 1.52 ms.
_FILL_LANES = 16


@njit(cache=True, nogil=True, inline="always")
def fill_runs(out, runs, count):
    """Write a row's labels from its run list (``count`` runs: start,
    stop, label): 0 in the gaps, each run's label along it.

    The row is a sequence of segments, gap and run in turn, each written
    by :func:`_fill_segment` left to right, so a segment's last store may
    run past its end into the next segment, which overwrites it; only
    the segments that end near the row's end stop exactly.  An exact loop
    a segment (LLVM's vector loop with a cell-by-cell remainder before
    and after it) cost 25-44 % more on a fractal mask's rows of 20-26
    runs (2-core box, 2048² and 4096², one thread, the rows' fills
    alone).  Unsigned bounds: no negative-index fix-up, so the loops
    compile to plain stores (box, 2048² all-background first pass: 3.8 ms
    with signed bounds, 0.94 ms unsigned)."""
    size = np.uint64(out.size)
    gap_start = np.uint64(0)
    for run in range(count):
        start = np.uint64(runs[run, 0])
        stop = np.uint64(runs[run, 1])
        _fill_segment(out, gap_start, start, 0, size)
        _fill_segment(out, start, stop, runs[run, 2], size)
        gap_start = stop
    _fill_segment(out, gap_start, size, 0, size)


@njit(cache=True, nogil=True, inline="always")
def _fill_segment(out, start, stop, value, size):
    """``out[start:stop] = value`` by stores of ``_FILL_LANES`` cells from
    ``start``: the last store may write up to ``_FILL_LANES - 1`` cells
    past ``stop`` (the caller writes them again after) unless that would
    pass ``size``, where the segment ends exactly."""
    lanes = np.uint64(_FILL_LANES)
    col = start
    if stop + lanes <= size:
        while col < stop:
            for lane in range(_FILL_LANES):
                out[col + np.uint64(lane)] = value
            col += lanes
        return
    while col + lanes <= stop:
        for lane in range(_FILL_LANES):
            out[col + np.uint64(lane)] = value
        col += lanes
    for col in range(col, stop):
        out[col] = value


@njit(cache=True, nogil=True, inline="always")
def keep_runs(out, runs, count):
    """Keep a row's run list in its label row ``out`` (1 + 3 * count
    values) and return True, or, when it does not fit, write the row's
    provisional labels and return False."""
    if 1 + 3 * count > out.size:
        fill_runs(out, runs, count)
        return False
    out[0] = count
    for run in range(count):
        out[1 + 3 * run] = runs[run, 0]
        out[2 + 3 * run] = runs[run, 1]
        out[3 + 3 * run] = runs[run, 2]
    return True


@njit(cache=True, nogil=True, inline="always")
def unpack_runs(row_labels, runs):
    """The run list kept in a label row (:func:`keep_runs`) into ``runs``
    (at least ``row_labels.size // 3 + 1`` rows); returns the count."""
    count = np.int64(row_labels[0])
    for run in range(count):
        runs[run, 0] = row_labels[1 + 3 * run]
        runs[run, 1] = row_labels[2 + 3 * run]
        runs[run, 2] = row_labels[3 + 3 * run]
    return count


@njit(cache=True, nogil=True)
def unpack_rows(labels, run_rows, rows):
    """Write the provisional labels of ``rows`` that keep run lists
    (``run_rows``), and mark them as written: the seam merge reads cells."""
    unpack_rows_into(labels, run_rows, rows,
                     np.empty((labels.shape[1] // 3 + 1, 3), dtype=np.int64))


@njit(cache=True, nogil=True)
def unpack_rows_into(labels, run_rows, rows, runs):
    """:func:`unpack_rows` with ``runs`` (``cols // 3 + 1`` rows of 3) as
    its scratch."""
    for row in rows:
        if run_rows[row]:
            count = unpack_runs(labels[row], runs)
            fill_runs(labels[row], runs, count)
            run_rows[row] = False
