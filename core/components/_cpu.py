"""Numba CPU kernels for connected components: two-pass labelling.

First pass (raster scan): each valid cell looks at its already-visited
neighbours (left, and the three above for 8-connectivity, following the
decision tree of Wu, Otoo & Suzuki 2009), copies a neighbour's provisional
label or creates a new one, and records label equivalences in a union-find.
Union is by minimum label, so the root of every set is the provisional label
of its component's first cell in scan order; numbering the roots in increasing
order then gives final labels 1..count in scan order of each component's first
cell.  Second pass: replace every provisional label by its final label (rows
labelled run by run keep a run list instead of provisional labels and are
filled run by run: ``_cpu_runs``).  Rough rows are labelled cell by cell
(``_cpu_cells``), smooth ones run by run (``_cpu_runs``); 8-connected
``nonzero`` mode by 2 x 2 blocks (``_cpu_blocks``) when ``BLOCKS_8`` is
set (off: the cell scan is the faster on the CPUs measured).

Large rasters are cut into horizontal strips labelled concurrently (the
kernels release the GIL; plain Python threads, so no numba threading layer is
involved and concurrent QGIS tasks are safe).  Strip ``s`` draws provisional
labels from its own range starting at ``first_row * cols + 1``, so labels still
grow with scan order across strips and the minimum-label invariant holds; the
strips' seams are then merged in the same union-find.  The strips (and the
pieces of the second pass) are shared among the calling thread and tasks on a
process-wide pool, each thread taking the next strip when done with one; a
strip's blocks of rows run in order with no barrier between them, and the
calling thread reports progress (and honours a cancel, which stops every
thread at its next block) between its own blocks.  Rasters of up to
``_cpu_team.TEAM_MAX_CELLS`` cells skip that glue: each thread makes one
compiled call that runs every pass (``_cpu_team``); the passes themselves
are in ``_cpu_passes``.
"""

import functools
import os
import threading

import numpy as np
from numba import njit

from .._common import index_dtype
from ..kept_output import KeptOutput
from . import _cpu_blocks, _cpu_team
# the passes (tests patch the names here, where label() looks them up)
from ._cpu_passes import _RUN_SCAN_MIN_CELLS_PER_RUN, _first_pass_equal, \
    _first_pass_equal_tight, _first_pass_nonzero, _first_pass_nonzero_tight, \
    _merge_seams, _resolve, _resolve_range, _second_pass, \
    _second_pass_string_stores, _vertex  # noqa: F401
# _POOL, _Serial and _wait are also the threshold segments' (core/mst)
from ._cpu_pool import _POOL, _Serial, _pool, _run_jobs, _wait  # noqa: F401
from ._cpu_runs import unpack_rows
from ._cpu_strips import _BALANCE_SAMPLE_ROWS, _balanced_bounds
from ._string_stores import fast_here

# Cells per strip per kernel call: a few milliseconds of work, so a cancel is
# honoured well within a second (256 rows of a 4096-column raster).
_CELLS_PER_CALL = 2**20

# Below this many cells (or rows per strip) threads cost more than they save
# (a 1024 x 1024 raster takes about 10 ms on one core, and the tiled path
# already runs its tiles in parallel).
_MIN_CELLS_FOR_STRIPS = 2**20
_MIN_ROWS_PER_STRIP = 64

# 8-connected nonzero mode by 2 x 2 blocks (_cpu_blocks) on rough masks
# instead of the cell scan; read per call, so tests run both scans.  Off:
# the two-pass cell scan (_cpu_cells._scan_row_split) is faster on both
# CPUs measured.  Whole call, one thread, 2048² random 0.6 mask: Intel
# Xeon (Sapphire Rapids) of the GPU machine, cells 23.9 ms against blocks
# 41.6 ms (OpenCV 51.0); AMD Zen 3 of the 2-core box, cells 12.6-18.4 ms
# against blocks 16.5-19.0 ms, 4096² 55.3 against 70.6 ms (2026-11-25).
# Before the two-pass scan, blocks were the faster on Zen 3 (14 against
# 19 ms a first pass) and picked there.  The box's Zen 4 (since
# 2026-11-30), two threads, 2048² / 4096²: cells 8.2 / 32.4 ms against
# blocks 12.9 / 48.3 ms (2026-12-02).
BLOCKS_8 = False

# rows labelled cell by cell by their own scans (_cpu_cells.label_row_tight:
# the two-pass _split_row_* scans, or _scan_row_equal_4 / _8 with a valid
# mask) rather than the general one: TIGHT_4 for 4-connectivity, TIGHT_8
# for 8, both modes; read per call, so tests run both
TIGHT_4 = True
TIGHT_8 = True

# Run rows filled by x86 string stores (``rep stos``, _string_stores) in
# the second pass, rather than vector stores: on Intel CPUs only.  Whole
# labellings of the 2048² fractal mask, 8-connected, two threads, on three
# hosts of the GPU machine's Xeon: -14 to -18 %, +3.2 %, -0.6 % (random
# masks -0.9 to +2.3 %); on the 2-core box's AMD EPYC +30 %
# (docs/benchmarks.md, thirtieth session).  Read per call, so tests run
# both.
STRING_STORE_FILLS = fast_here()

# Strips a CPU (strips=None): more strips than threads, each thread taking
# the next strip when done with one, so a thread slowed by its core's
# neighbours takes fewer strips (as OpenCV's parallel labelling, 4 stripes
# a thread); but no strip under _MIN_CELLS_PER_STRIP cells (with one a CPU
# at least): each strip past the first costs a seam merge (serial, about
# 0.1 ms a 4096-column seam on the Xeon) and its own first row of new
# labels.  GPU machine's Xeon, 2 cores: a core's thread CPU time for the
# same work varied 1.5x between the two cores and between calls (`equal`
# 8-conn 4096², equal halves: 75 and 115 ms); 2 against 8 strips, 4096²
# random 81.9 -> 75.4 ms (8-conn), 72.9 -> 66.6 (4-conn), 124.8 -> 109.4
# (`equal` 8-conn); 2048² 2 / 4 / 8 strips 23.0 / 23.5 / 24.8 ms (8-conn),
# fractal 5.6 / 5.9 / 7.1 (those with a fresh union-find array a call).
STRIPS_PER_CPU = 4
_MIN_CELLS_PER_STRIP = 2**20
# the second pass's rows are cut in at least this many pieces a thread
_SECOND_PASS_PIECES_PER_WORKER = 4

# Fractions of the progress bar at the end of the first pass and of the
# seam merge + resolve step; the second pass takes the rest.
_FIRST_PASS_END = 0.6
_RESOLVE_END = 0.7


def label(array, valid, connectivity, mode, progress, strips=None):
    """Label the connected components of ``array``.

    Parameters
    ----------
    array : 2-D ndarray (integer or float; a memmap is fine), not modified
    valid : 2-D bool ndarray, same shape, or None
        Cells that are vertices; None: every cell but NaN ones.
    connectivity : {4, 8}
    mode : {"equal", "nonzero"}
        ``equal``: neighbouring valid cells with equal values are connected
        (GRASS r.clump); ``nonzero``: valid non-zero cells are foreground and
        the result is that of ``scipy.ndimage.label``.
    progress : gridgraph.core._common.Progress
        Called between blocks of rows; raises CancelledError on cancel.
    strips : int, optional
        Number of horizontal strips, labelled concurrently by up to one
        thread per CPU; None picks ``STRIPS_PER_CPU`` per CPU for large
        rasters.  Any value gives the same labels (tests use it to put
        seams in small rasters).

    Returns
    -------
    labels : ndarray of int32 (int64 from 2**31 - 1 cells on)
        1..count in raster scan order of each component's first cell, 0 for
        background and invalid cells.
    count : int
    """
    values = _kernel_ready(array)
    rows, cols = values.shape
    if valid is not None:
        valid = np.ascontiguousarray(valid, dtype=np.bool_)
        if valid.shape != values.shape:
            raise ValueError(f"valid mask shape {valid.shape} differs from "
                             f"the raster shape {values.shape}")
    check_valid = valid is not None
    mask = valid if check_valid else _ALL_VALID
    if mode == "nonzero" and connectivity == 8 and BLOCKS_8 and not _smooth(
            values, mask, check_valid):
        # 2 x 2 blocks (in 4-connectivity a block's cells need not touch);
        # on smooth rasters the run scan below is faster
        return _label_blocks(values, valid, progress, strips)
    # when None, NaN cells are the only invalid ones: the kernels skip them
    valid = mask
    dtype = index_dtype(values.size)
    labels = _KEPT_LABELS.empty((rows, cols), dtype)
    if values.size == 0:
        progress(1.0)
        return labels, 0
    nonzero = mode == "nonzero"
    eight = connectivity == 8
    # Worst case (e.g. all values distinct) is one provisional label per
    # cell; only the pages of the label ranges in use are committed, and
    # kept for the next call (_union_find_buffer).
    parent = _union_find_buffer(values.size + 1, dtype)
    tight = TIGHT_8 if eight else TIGHT_4
    strip_count = _strip_count(rows, cols, STRIPS_PER_CPU,
                               _MIN_CELLS_PER_STRIP) if strips is None \
        else max(1, min(int(strips), rows))
    workers = min(strip_count, _cpu_count())
    if values.size <= _cpu_team.TEAM_MAX_CELLS:
        count = _cpu_team.label_as_team(
            values, valid, check_valid, nonzero, eight, tight,
            STRING_STORE_FILLS, labels, parent, strip_count, workers,
            progress)
        _keep_union_find_buffer(parent)
        return labels, int(count)

    # strips of equal estimated cost: a fractal mask's rows differ by
    # their runs (4096²: 60 % more runs in its top half)
    strip_starts, strip_stops = _strip_bounds(
        rows, rows, cols, strip_count, (values, valid, check_valid, nonzero))
    parent[0] = 0
    # rows labelled by runs that keep their run list in their label row
    # (``_cpu_runs``): the second pass fills them run by run
    run_rows = np.zeros(rows, dtype=np.bool_)
    first_labels = strip_starts * cols + 1
    next_labels = first_labels.copy()
    rows_per_call = max(1, _CELLS_PER_CALL // cols)
    # each strip's scratch rows, made here once rather than in each kernel
    # call: a pool thread's allocator handed back and faulted in afresh
    # ~300 KB a call (Xeon, 4096²: ~530 faults a call on the pool thread)
    scratch = [_row_scratch(cols, dtype) for _ in range(strip_starts.size)]
    first_pass = _first_pass_equal_tight if tight else _first_pass_equal
    if nonzero:
        first_pass = _first_pass_nonzero_tight if tight \
            else _first_pass_nonzero
    second_pass = _second_pass_string_stores if STRING_STORE_FILLS \
        else _second_pass

    with _pool(workers) as pool:

        def first_pass_rows(strip, top, row_start, row_stop):
            next_labels[strip] = first_pass(
                values, valid, check_valid, eight, labels, parent, run_rows,
                top, row_start, row_stop, next_labels[strip],
                *scratch[strip])

        _first_passes(pool, strip_starts, strip_stops, rows_per_call,
                      first_pass_rows, progress, workers)
        seam_rows = strip_starts[1:]
        unpack_rows(labels, run_rows, np.concatenate((seam_rows - 1,
                                                      seam_rows)))
        _merge_seams(values, nonzero, eight, labels, parent, seam_rows)
        count = _resolve_then_second_passes(
            pool, workers, strip_starts, strip_stops, first_labels,
            next_labels, parent, rows_per_call,
            lambda start, stop: second_pass(labels, parent, run_rows, start,
                                            stop), progress)
    _keep_union_find_buffer(parent)
    return labels, int(count)


def _resolve_then_second_passes(pool, workers, strip_starts, strip_stops,
                                first_labels, next_labels, parent, per_call,
                                run, progress):
    """Number the roots (:func:`_resolve_range`, serial: each label's
    final number follows from the smaller ones') strip by strip on the
    calling thread, while the pool threads run the second pass
    (``run(start, stop)``) over the rows of the strips already numbered: a
    strip's cells hold only provisional labels of its own range.  The
    calling thread then joins the second pass.  Returns the count."""
    strip_count = strip_starts.size
    jobs = []
    strip_of_job = []
    # pieces a strip: at least _SECOND_PASS_PIECES_PER_WORKER a thread
    pieces = -(-workers * _SECOND_PASS_PIECES_PER_WORKER // strip_count)
    for strip in range(strip_count):
        top, stop = int(strip_starts[strip]), int(strip_stops[strip])
        piece = max(1, min(per_call, -(-(stop - top) // pieces)))
        for start in range(top, stop, piece):
            jobs.append([functools.partial(run, start, min(start + piece,
                                                           stop))])
            strip_of_job.append(strip)
    numbered = [threading.Event() for _ in range(strip_count)]
    count = [0]

    def number_strips():
        for strip in range(strip_count):
            count[0] = _resolve_range(parent, first_labels[strip],
                                      next_labels[strip], count[0])
            numbered[strip].set()
            progress(_FIRST_PASS_END + (_RESOLVE_END - _FIRST_PASS_END)
                     * (strip + 1) / strip_count)

    _run_jobs(pool, jobs, progress, _RESOLVE_END, 1.0, workers,
              lead=number_strips,
              waits=[numbered[strip] for strip in strip_of_job])
    return count[0]


def _row_scratch(cols, dtype):
    """The scratch rows of one strip's first pass (:func:`_label_rows`):
    merges, the run lists of two rows (:func:`._cpu_runs._run_bounds_nonzero`
    and :func:`._cpu_runs._run_bounds_equal` need ``cols + 9`` rows), a
    row of labels 0 (above a strip's first row), a row of labels unpacked
    from a run list and the bound words and counts of two rows (by row
    parity, :func:`._cpu_runs._run_bounds_nonzero`)."""
    return (np.empty((cols + 1, 2), dtype=np.int64),
            np.empty((2, cols + 9, 3), dtype=np.int64),
            np.zeros(cols, dtype=dtype), np.empty(cols, dtype=dtype),
            np.empty((2, 2, cols // 64 + 2), dtype=np.uint64))


# the valid mask of a raster whose cells are all valid but NaN ones (the
# kernels read it only when told to check validity): one for every call
_ALL_VALID = np.ones((1, 1), dtype=np.bool_)

# union-find arrays kept between calls (at most one, and none larger than
# _KEPT_UNION_FIND_ENTRIES): a fresh one costs its first-touch page faults,
# one 2 MiB huge page zeroed per strip's label range at least (each strip
# draws labels from its own range, a strip's cells apart)
_KEPT_UNION_FIND = []
_KEPT_UNION_FIND_LOCK = threading.Lock()
_KEPT_UNION_FIND_ENTRIES = 2**25


# the last labels array, reused by the next call of its shape once its
# caller has let it go (every cell is written, as into np.empty).  2-core
# box, two threads, 4096², each result dropped before the next call, 21
# interleaved rounds against the code before (dc82e0b; the run rows'
# fill changed in the same commit, 1-5 % of a call): fractal mask
# 19.5-20.0 -> 12.4-12.6 ms (nonzero), 21.8-23.7 -> 15.0-17.6 (equal);
# random 0.6 53.9-54.4 -> 48.5-48.9 (nonzero), 70.2-74.5 -> 58.9-71.5
# (equal); no page faults a call against ~545 (2026-12-02).  At 2048²
# (16 MiB) glibc already hands the freed array back unfaulted.
_KEPT_LABELS = KeptOutput(max_bytes=2**27)


def _union_find_buffer(size, dtype):
    """An uninitialised array of ``size`` labels of ``dtype``: the kept
    one when it is large enough and of that type (no concurrent call gets
    it too), else a new one."""
    with _KEPT_UNION_FIND_LOCK:
        if _KEPT_UNION_FIND and _KEPT_UNION_FIND[0].dtype == dtype and \
                _KEPT_UNION_FIND[0].size >= size:
            return _KEPT_UNION_FIND.pop()[:size]
    return np.empty(size, dtype=dtype)


def _keep_union_find_buffer(parent):
    """Keep ``parent`` (or the array it views) for the next call, in place
    of a smaller kept one; arrays over ``_KEPT_UNION_FIND_ENTRIES`` labels
    are let go (their touched pages would stay committed)."""
    whole = parent if parent.base is None else parent.base
    if whole.size > _KEPT_UNION_FIND_ENTRIES:
        return
    with _KEPT_UNION_FIND_LOCK:
        if not _KEPT_UNION_FIND or _KEPT_UNION_FIND[0].size <= whole.size:
            _KEPT_UNION_FIND[:] = [whole]


def _label_blocks(values, valid, progress, strips):
    """``nonzero`` mode, 8-connected: label 2 x 2 blocks of cells
    (``_cpu_blocks``), in concurrent strips of block rows, then write the
    cells' labels."""
    rows, cols = values.shape
    dtype = index_dtype(values.size)
    # every cell is written by the second pass: no zero-fill
    labels = _KEPT_LABELS.empty((rows, cols), dtype)
    if values.size == 0:
        progress(1.0)
        return labels, 0
    check_valid = valid is not None
    if valid is None:
        valid = np.ones((1, 1), dtype=np.bool_)  # never read
    first_pass, merge_seams, second_pass = (
        _cpu_blocks.first_pass_8, _cpu_blocks.merge_seams_8,
        _cpu_blocks.second_pass_8)
    block_rows = (rows + 1) // 2
    block_cols = (cols + 1) // 2
    blocks = np.empty((block_rows, block_cols), dtype=dtype)

    strip_starts, strip_stops = _strip_bounds(block_rows, rows, cols, strips)
    first_labels = strip_starts * block_cols + 1
    next_labels = first_labels.copy()
    # at most one label per block; np.empty commits only the pages of the
    # label ranges in use
    parent = np.empty(blocks.size + 1, dtype=dtype)
    key = np.empty(blocks.size + 1, dtype=dtype)
    parent[0] = key[0] = 0
    # per strip: was each block of the previous / this block row linked to
    # its left neighbour (first_pass_8 skips unions with it)
    linked_left = np.empty((strip_starts.size, 2, block_cols),
                           dtype=np.uint8)
    block_rows_per_call = max(1, _CELLS_PER_CALL // (2 * cols))
    workers = min(strip_starts.size, _cpu_count())

    with _pool(workers) as pool:

        def first_pass_block_rows(strip, top, start, stop):
            next_labels[strip] = first_pass(
                values, valid, check_valid, blocks, parent, key,
                linked_left[strip], top, start, stop, next_labels[strip])

        _first_passes(pool, strip_starts, strip_stops, block_rows_per_call,
                      first_pass_block_rows, progress, workers)
        merge_seams(values, valid, check_valid, blocks, parent, key,
                    strip_starts[1:])
        count = _cpu_blocks.resolve(parent, key, first_labels, next_labels,
                                    cols)
        progress(_RESOLVE_END)
        _second_passes(
            pool, block_rows, block_rows_per_call, workers,
            lambda start, stop: second_pass(values, valid, check_valid,
                                            blocks, parent, labels, start,
                                            stop), progress)
    return labels, int(count)


def _smooth(values, valid, check_valid):
    """Whether foreground runs are long in ``nonzero`` mode: at most one
    run per ``_RUN_SCAN_MIN_CELLS_PER_RUN`` cells on up to 64 rows spread
    over the raster."""
    rows, cols = values.shape
    if values.size == 0:
        return False
    sample = np.unique(np.linspace(0, rows - 1, min(rows, 64)).astype(
        np.int64))
    runs = _count_runs(values, valid, check_valid, sample)
    return runs * _RUN_SCAN_MIN_CELLS_PER_RUN <= sample.size * cols


@njit(cache=True, nogil=True)
def _count_runs(values, valid, check_valid, sample_rows):
    """Foreground runs (``nonzero`` mode) in the rows ``sample_rows``."""
    runs = 0
    for row in sample_rows:
        previous = np.int64(0)
        for col in range(values.shape[1]):
            vertex = _vertex(values, valid, check_valid, True, row, col)
            runs += vertex & (1 - previous)
            previous = vertex
    return runs


def _strip_bounds(units, rows, cols, strips, balance=None):
    """First and stop unit (row or block row) of each strip: one strip per
    CPU for large rasters, or ``strips`` (at most one per unit).  With
    ``balance`` = (values, valid, check_valid, nonzero), rows of cells,
    the strips get equal shares of the estimated first-pass cost
    (:func:`_balanced_bounds`) rather than of the rows."""
    strip_count = _strip_count(rows, cols, STRIPS_PER_CPU,
                               _MIN_CELLS_PER_STRIP) if strips is None \
        else max(1, min(int(strips), units))
    if balance is not None and strip_count > 1:
        bounds = _balanced_bounds(*balance, strip_count,
                                  min(units, _BALANCE_SAMPLE_ROWS))
    else:
        bounds = np.linspace(0, units, strip_count + 1).round().astype(
            np.int64)
    return bounds[:-1], bounds[1:]


def _first_passes(pool, strip_starts, strip_stops, per_call, run, progress,
                  workers):
    """``run(strip, top, start, stop)`` over every strip, ``per_call``
    units at a time, the strips shared among ``workers`` threads (each
    takes the next strip when done with one: :func:`_run_jobs`), progress
    reported between the calling thread's calls.  A strip's calls run in
    order on one thread with no barrier between them (on a virtual machine
    every barrier costs the wake-up of sleeping threads)."""
    jobs = []
    for strip in range(strip_starts.size):
        top = int(strip_starts[strip])
        stop = int(strip_stops[strip])
        jobs.append([functools.partial(run, strip, top, start,
                                       min(start + per_call, stop))
                     for start in range(top, stop, per_call)])
    _run_jobs(pool, jobs, progress, 0.0, _FIRST_PASS_END, workers)


def _second_passes(pool, units, per_call, workers, run, progress):
    """``run(start, stop)`` over ``units`` in pieces of at most
    ``per_call`` units and at least ``_SECOND_PASS_PIECES_PER_WORKER`` a
    worker, shared among ``workers`` threads as they come free, progress
    reported between the calling thread's pieces."""
    piece = max(1, min(per_call, -(-units // max(
        1, workers * _SECOND_PASS_PIECES_PER_WORKER))))
    jobs = [[functools.partial(run, start, min(start + piece, units))]
            for start in range(0, units, piece)]
    _run_jobs(pool, jobs, progress, _RESOLVE_END, 1.0, workers)


def _strip_count(rows, cols, per_cpu=1, min_cells=0):
    """Strips for a ``rows`` x ``cols`` raster: one for small rasters,
    else ``per_cpu`` a CPU but none under ``min_cells`` cells (one a CPU
    at least), and at most one per ``_MIN_ROWS_PER_STRIP`` rows."""
    if rows * cols < _MIN_CELLS_FOR_STRIPS:
        return 1
    cpus = _cpu_count()
    wanted = max(cpus, min(cpus * per_cpu, rows * cols // max(1, min_cells)))
    return max(1, min(wanted, rows // _MIN_ROWS_PER_STRIP))


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _kernel_ready(array):
    """A C-contiguous, native-endian array numba can compile for (no copy
    when the input already is one; a memmap is viewed as a plain ndarray)."""
    values = np.asarray(array)
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    elif not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return np.ascontiguousarray(values)
