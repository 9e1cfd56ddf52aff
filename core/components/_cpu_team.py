"""A labelling of a raster of up to ``TEAM_MAX_CELLS`` cells as one compiled
call a thread (:func:`label_as_team`), for :func:`._cpu.label`.

:func:`._cpu.label` drives the passes from Python: a kernel call a block
of rows, jobs handed to a pool thread, events between the numbering and
the second pass, progress and cancel between the calls.  For a 2048² mask
that glue is a tenth of the call and more: a call made after other work
(the benchmarks' interleaved peers, a script's previous step) finds the
interpreter's objects out of the caches, and each step of the glue costs
10-50 us where it costs 1 us warm; the pool thread sleeps between the
passes and wakes up late.  Here each thread (the calling one and
``workers - 1`` pool tasks) makes one call that runs the whole
labelling, and the threads share its steps through counters changed
atomically (:mod:`._atomics`):

1. the first pass: each thread takes the next strip not yet taken
   (``_NEXT_STRIP``) and labels it whole;
2. the thread that finishes the last strip (``_STRIPS_DONE``) writes the
   seam rows' labels, merges the seams, numbers the roots strip by strip
   and publishes each strip's numbering (``_NUMBERED``);
3. the second pass: each thread takes the next piece of rows
   (``_NEXT_PIECE``), in order from the top, waits until the piece's
   strip is numbered and writes its final labels; the calling thread
   returns once every piece is written (``_PIECES_DONE``).

A thread waits only on work another thread is doing at that moment, so
a pool thread that starts late (busy with another call) costs nothing: the
calling thread takes every strip and piece itself, and the late thread
finds nothing left to take.  A waiting thread spins a little, then sleeps
until woken (``_SPINS``): spinning alone, two processes sharing two cores
(a test run, two QGIS tasks) slowed to a crawl, each spinning thread
holding the core the thread it waited on needed.  Progress is reported
before and after, not between the passes
(the largest calls take tens of milliseconds), and a cancel is honoured
before the call starts.
"""

import numpy as np
from numba import njit

from ._atomics import FUTEX_HERE, add, load, sleep_while_equal, \
    spin_pause, store, wake_all, yield_thread
from ._cpu_passes import _first_pass_equal, _first_pass_equal_tight, \
    _first_pass_nonzero, _first_pass_nonzero_tight, _merge_seams, \
    _resolve_range, _second_pass_with
from ._cpu_pool import _pool
from ._cpu_runs import unpack_rows_into
from ._cpu_strips import _BALANCE_SAMPLE_ROWS, _balanced_bounds

# Rasters of up to this many cells are labelled by one call a thread (a
# 5792² raster takes ~25 ms on two threads of the GPU machine's Xeon);
# larger ones by the calls of :func:`._cpu.label`, with progress and cancel
# between them.  Read per call, so tests run both.
TEAM_MAX_CELLS = 2**25

# Cells of a second-pass piece: 64 rows of a 2048-column raster; many
# pieces a thread, so the threads finish within a piece of each other
_PIECE_CELLS = 2**17

# slots of the shared counters, a cache line (8 int64) apart: threads
# spinning on one do not slow the thread changing another; _SLEEPERS
# counts the threads asleep (or about to be) on a counter, so the threads
# changing counters wake them only when there are some
(_NEXT_STRIP, _STRIPS_DONE, _NUMBERED, _NEXT_PIECE, _PIECES_DONE, _COUNT,
 _FAILED, _SLEEPERS) = (8 * slot for slot in range(8))
_SHARED_SIZE = 8 * 8

# A waiting thread spins this many pauses (about 0.05-0.2 ms: a pause
# takes tens to ~140 cycles on recent x86 cores, by the vendors' manuals),
# meant to cover the waits of a call that has the cores to itself, then
# sleeps until woken (Linux futex; at most _SLEEP_NANOSECONDS a time, so a
# failed thread is seen) or, without futexes, yields its core each step:
# a thread spinning on one held by a thread of another call or process
# would take the core that thread needs.
_SPINS = 4096
_SLEEP_NANOSECONDS = 1_000_000


def label_as_team(values, valid, check_valid, nonzero, eight, tight,
                  string_stores, labels, parent, strip_count, workers,
                  progress):
    """Label ``values`` into ``labels`` (``parent`` the union-find array,
    of at least one entry a cell and one more) in ``strip_count`` strips
    of balanced first-pass cost, with ``workers`` threads; returns the
    count."""
    progress(0.0)  # a cancel asked for before the call
    rows, cols = values.shape
    key = (rows, cols, labels.dtype, strip_count, workers)
    kit = _take_kit(key)
    arguments = kit.arguments
    _prepare(values, valid, check_valid, nonzero,
             min(rows, _BALANCE_SAMPLE_ROWS), *arguments[:8], parent,
             arguments[-1])
    with _pool(workers) as pool:
        kit.futures = [pool.submit(
            _pool_member, nonzero, tight, values, valid, check_valid, eight,
            string_stores, labels, parent, arguments, member)
            for member in range(1, workers)]
        count = _run_member(nonzero, tight, values, valid, check_valid, eight,
                            string_stores, labels, parent, arguments, 0, True)
        if arguments[-1][_FAILED]:
            # a pool thread failed (the calling thread stopped waiting on
            # it, or finished without it): its error, raised here
            for future in kit.futures:
                future.result()
            raise RuntimeError("a components thread failed without an "
                               "error")
    if kit.nbytes <= _KEPT_KIT_BYTES:
        _KEPT_KIT[:] = [(key, kit)]
    progress(1.0)
    return count


class _Kit:
    """The arrays of a labelling of one shape, label type, strip count and
    thread count besides the raster, its labels and the union-find
    (``arguments``: the team's arguments after those, in :func:`_member`'s
    order), and the pool tasks of the call that used it last.  Kept for
    the next call of that kind (:data:`_KEPT_KIT`): made afresh, its dozen
    arrays cost ~0.1 ms of Python a call when the call follows other work
    (2-core box, 2026-12-03)."""

    def __init__(self, rows, cols, dtype, strip_count, workers):
        self.futures = []
        self.arguments = (
            np.zeros(rows, dtype=np.bool_),  # run_rows
            np.empty(strip_count, dtype=np.int64),  # strip_starts
            np.empty(strip_count, dtype=np.int64),  # strip_stops
            np.empty(strip_count, dtype=np.int64),  # first_labels
            np.empty(strip_count, dtype=np.int64),  # next_labels
            np.empty(2 * strip_count - 2, dtype=np.int64),  # seam pair rows
            max(1, _PIECE_CELLS // cols),  # piece_rows
            np.empty(strip_count + 1, dtype=np.int64),  # pieces_before
            # each thread's scratch rows (as _cpu._row_scratch, by thread),
            # and a row of labels 0 above every strip's first row
            np.empty((workers, cols + 1, 2), dtype=np.int64),
            np.empty((workers, 2, cols + 9, 3), dtype=np.int64),
            np.zeros(cols, dtype=dtype), np.empty((workers, cols), dtype=dtype),
            np.empty((workers, 2, 2, cols // 64 + 2), dtype=np.uint64),
            np.empty((workers, cols // 3 + 1, 3), dtype=np.int64),
            np.array([0, _SLEEP_NANOSECONDS], dtype=np.int64),  # sleep_limit
            np.zeros(_SHARED_SIZE, dtype=np.int64))  # shared
        self.nbytes = sum(getattr(array, "nbytes", 0)
                          for array in self.arguments)


# At most one kit, taken by a call and put back after it; another call
# (concurrent, or of another kind) makes its own.  A kit whose last call's
# pool tasks are still running (a late thread finding nothing left to
# take still changes the counters) is not reused: calls back to back with
# nothing between them that lets the pool thread finish (it needs the
# GIL to return) often make a new kit, as every call did before.
_KEPT_KIT = []
# ...and none over this many bytes: the scratch rows take ~100 bytes a
# column a thread (a 2048-column raster's kit of two threads ~0.3 MiB), so
# a raster of few, very long rows would keep hundreds of MiB
_KEPT_KIT_BYTES = 16 << 20


def _take_kit(key):
    """The kept kit when it is of ``key``'s kind and free, else a new one
    (a kept kit of another kind is let go)."""
    try:
        kept_key, kit = _KEPT_KIT.pop()  # atomic: one call gets it
    except IndexError:
        return _Kit(*key)
    if kept_key == key and all(future.done() for future in kit.futures):
        return kit
    return _Kit(*key)


@njit(cache=True, nogil=True)
def _prepare(values, valid, check_valid, nonzero, samples, run_rows,
             strip_starts, strip_stops, first_labels, next_labels,
             seam_pair_rows, piece_rows, pieces_before, parent, shared):
    """A call's strips (:func:`._cpu_strips._balanced_bounds`), their
    first labels, seams and second-pass pieces, and the run rows, the
    union-find's entry 0 and the counters reset, in the kit's arrays."""
    rows, cols = values.shape
    strips = strip_starts.size
    if strips > 1:
        bounds = _balanced_bounds(values, valid, check_valid, nonzero,
                                  strips, samples)
    else:
        bounds = np.array([0, rows], dtype=np.int64)
    pieces_before[0] = 0
    for strip in range(strips):
        strip_starts[strip] = bounds[strip]
        strip_stops[strip] = bounds[strip + 1]
        first_labels[strip] = bounds[strip] * cols + 1
        next_labels[strip] = first_labels[strip]
        pieces_before[strip + 1] = pieces_before[strip] + -(
            -(bounds[strip + 1] - bounds[strip]) // piece_rows)
        if strip > 0:
            seam_pair_rows[strip - 1] = bounds[strip] - 1
            seam_pair_rows[strips - 1 + strip - 1] = bounds[strip]
    run_rows[:] = False
    parent[0] = 0
    shared[:] = 0


def _pool_member(nonzero, tight, values, valid, check_valid, eight,
                 string_stores, labels, parent, arguments, member):
    try:
        _run_member(nonzero, tight, values, valid, check_valid, eight,
                    string_stores, labels, parent, arguments, member, False)
    except BaseException:
        arguments[-1][_FAILED] = 1  # the threads waiting on it stop
        raise


def _run_member(nonzero, tight, values, valid, check_valid, eight,
                string_stores, labels, parent, arguments, member,
                waits_for_all):
    """One thread's part (:func:`_member`), compiled for the mode and the
    scans: one entry each, so a call compiles only the first pass it
    runs."""
    if nonzero:
        entry = _member_nonzero_tight if tight else _member_nonzero
    else:
        entry = _member_equal_tight if tight else _member_equal
    return entry(values, valid, check_valid, eight, string_stores, labels,
                 parent, *arguments, member, waits_for_all)


# Four compiled entries, one a (mode, scans), each binding _member's two
# constants: with them as arguments every raster type would compile all four
# first passes (tests: minutes); with the arguments in one tuple each call
# would be typed in Python (+0.3 ms a 2048² call, measured).
@njit(cache=True, nogil=True)
def _member_nonzero(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all):
    return _member(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all,
        True, False)


@njit(cache=True, nogil=True)
def _member_nonzero_tight(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all):
    return _member(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all,
        True, True)


@njit(cache=True, nogil=True)
def _member_equal(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all):
    return _member(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all,
        False, False)


@njit(cache=True, nogil=True)
def _member_equal_tight(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all):
    return _member(
        values, valid, check_valid, eight, string_stores, labels, parent,
        run_rows, strip_starts, strip_stops, first_labels, next_labels,
        seam_pair_rows, piece_rows, pieces_before, merges, run_lists,
        zero_row, above_rows, bound_words, runs, sleep_limit, shared,
        member, waits_for_all,
        False, True)


@njit(cache=True, nogil=True, inline="always")
def _member(values, valid, check_valid, eight, string_stores, labels,
            parent, run_rows, strip_starts, strip_stops, first_labels,
            next_labels, seam_pair_rows, piece_rows, pieces_before, merges,
            run_lists, zero_row, above_rows, bound_words, runs, sleep_limit,
            shared, member, waits_for_all, nonzero, tight):
    """One thread's part of a labelling (see the module's docstring);
    returns the count (the calling thread, ``waits_for_all``), -1 when
    another thread failed.  ``nonzero`` and ``tight`` (the first pass's
    mode and scans, :func:`._cpu.label`) are constants."""
    strips = strip_starts.size
    while True:
        strip = add(shared, _NEXT_STRIP, 1)
        if strip >= strips:
            break
        next_labels[strip] = _first_pass(
            nonzero, tight, values, valid, check_valid, eight, labels,
            parent, run_rows, strip_starts[strip], strip_stops[strip],
            first_labels[strip], merges[member], run_lists[member], zero_row,
            above_rows[member], bound_words[member])
        if add(shared, _STRIPS_DONE, 1) == strips - 1:  # the last strip
            unpack_rows_into(labels, run_rows, seam_pair_rows, runs[member])
            _merge_seams(values, nonzero, eight, labels, parent,
                         strip_starts[1:])
            count = np.int64(0)
            for numbered in range(strips):
                count = _resolve_range(parent, first_labels[numbered],
                                       next_labels[numbered], count)
                if numbered == strips - 1:
                    shared[_COUNT] = count
                store(shared, _NUMBERED, numbered + 1)
                _wake_sleepers(shared, _NUMBERED)
    pieces = pieces_before[strips]
    strip = 0
    while True:
        piece = add(shared, _NEXT_PIECE, 1)
        if piece >= pieces:
            break
        while pieces_before[strip + 1] <= piece:
            strip += 1
        if not _wait_past(shared, _NUMBERED, strip, sleep_limit):
            return -1
        start = strip_starts[strip] + (piece - pieces_before[strip]) * \
            piece_rows
        _second_pass_with(labels, parent, run_rows, start,
                          min(start + piece_rows, strip_stops[strip]),
                          string_stores, runs[member])
        add(shared, _PIECES_DONE, 1)
        _wake_sleepers(shared, _PIECES_DONE)
    if waits_for_all and not _wait_past(shared, _PIECES_DONE, pieces - 1,
                                        sleep_limit):
        return -1
    return shared[_COUNT]


@njit(cache=True, nogil=True, inline="always")
def _wait_past(shared, slot, bound, sleep_limit):
    """Wait until ``shared[slot] > bound`` (True) or a thread failed
    (False): spin, then sleep or yield (see ``_SPINS``)."""
    steps = 0
    while True:
        value = load(shared, slot)
        if value > bound:
            return True
        if load(shared, _FAILED):
            return False
        if steps < _SPINS:
            spin_pause()
            steps += 1
        elif FUTEX_HERE:
            # announce, then look again: a thread changing the counter
            # after this look sees the announcement and wakes us
            add(shared, _SLEEPERS, 1)
            if load(shared, slot) == value:
                sleep_while_equal(shared, slot, value, sleep_limit)
            add(shared, _SLEEPERS, -1)
        else:
            yield_thread()


@njit(cache=True, nogil=True, inline="always")
def _wake_sleepers(shared, slot):
    """After changing ``shared[slot]``: wake the threads asleep on it."""
    if FUTEX_HERE and load(shared, _SLEEPERS) > 0:
        wake_all(shared, slot)


@njit(cache=True, nogil=True, inline="always")
def _first_pass(nonzero, tight, values, valid, check_valid, eight, labels,
                parent, run_rows, top, stop, first_label, merges, run_list,
                zero_row, above_row, bound_words):
    """A whole strip's first pass (:mod:`._cpu_passes`); returns its next
    unused provisional label."""
    if nonzero:
        if tight:
            return _first_pass_nonzero_tight(
                values, valid, check_valid, eight, labels, parent, run_rows,
                top, top, stop, first_label, merges, run_list, zero_row,
                above_row, bound_words)
        return _first_pass_nonzero(
            values, valid, check_valid, eight, labels, parent, run_rows, top,
            top, stop, first_label, merges, run_list, zero_row, above_row,
            bound_words)
    if tight:
        return _first_pass_equal_tight(
            values, valid, check_valid, eight, labels, parent, run_rows, top,
            top, stop, first_label, merges, run_list, zero_row, above_row,
            bound_words)
    return _first_pass_equal(
        values, valid, check_valid, eight, labels, parent, run_rows, top,
        top, stop, first_label, merges, run_list, zero_row, above_row,
        bound_words)
