"""A labelling as one compiled call a thread (core/components/_cpu_team.py)
and the atomics it shares its steps through (_atomics.py).

The labels themselves are checked against scipy-built oracles for both
drivers, the team's and the kernel calls', in test_components_cells.py
(``check``); here: that the counters are atomic, that a thread that
never shows up costs nothing, that a failing thread's error reaches the
caller and the threads waiting on it stop, concurrent calls, cancel and
the size limit."""

import threading

import numpy as np
import pytest
import scipy.ndimage as ndi
from numba import njit

from gridgraph.core import CancelledError
from gridgraph.core._common import Progress
from gridgraph.core.components import _atomics, _cpu, _cpu_pool, _cpu_team
from gridgraph.tests.rasters import fractal_surface


@njit(nogil=True)
def _count_up(counter, times):
    for _ in range(times):
        _atomics.add(counter, 0, 1)


@njit(nogil=True)
def _count_up_plainly(counter, times):
    # a read, then a write: not one atomic step (atomic loads and stores,
    # so the compiler cannot fold the loop into one add)
    for _ in range(times):
        _atomics.store(counter, 0, _atomics.load(counter, 0) + 1)


def _count_in_two_threads(count_up, counter, times):
    count_up(counter, 1)  # compiled before the threads start
    counter[0] = 0
    threads = [threading.Thread(target=count_up, args=(counter, times))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return int(counter[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_atomic_adds_from_threads_lose_no_update(dtype):
    # two threads add 1 two million times each: every add counts
    counter = np.zeros(1, dtype=dtype)
    assert _count_in_two_threads(_count_up, counter, 2_000_000) == 4_000_000
    # ... where a loop of reads and writes loses updates (so the threads
    # do overlap here and the check above can fail); that loop is much
    # faster, so it runs longer, and again if the threads happened not to
    # overlap
    for attempt in range(5):
        times = 10_000_000 * 2**attempt
        if _count_in_two_threads(_count_up_plainly, counter, times) < \
                2 * times:
            return
    pytest.fail("two threads never overlapped: the atomic check proved "
                "nothing")


@njit
def _add_load_store(array):
    before = _atomics.add(array, 1, 5)
    _atomics.store(array, 2, before + 100)
    return before, _atomics.load(array, 2)


def test_add_returns_the_value_before_and_loads_see_stores():
    array = np.array([0, 7, 0], dtype=np.int64)
    assert _add_load_store(array) == (7, 107)
    assert list(array) == [0, 12, 107]


@njit(nogil=True)
def _sleep(array, expected, limit):
    _atomics.sleep_while_equal(array, 0, expected, limit)


@njit(nogil=True)
def _change_and_wake(array):
    _atomics.store(array, 0, 1)
    _atomics.wake_all(array, 0)


@pytest.mark.skipif(not _atomics.FUTEX_HERE, reason="Linux futexes only")
def test_a_sleeper_wakes_on_a_change_or_its_time_limit():
    import time
    array = np.zeros(1, dtype=np.int64)
    short = np.array([0, 2_000_000], dtype=np.int64)  # 2 ms
    _sleep(array, 0, short)  # compiled
    _change_and_wake(np.zeros(1, dtype=np.int64))
    # nobody wakes it: back after its 2 ms
    start = time.perf_counter()
    _sleep(array, 0, short)
    assert 0.0015 < time.perf_counter() - start < 0.5
    # the value differs already: back at once (a 10 s limit)
    long = np.array([10, 0], dtype=np.int64)
    start = time.perf_counter()
    _sleep(array, 5, long)
    assert time.perf_counter() - start < 0.5
    # asleep with a 10 s limit, woken by another thread's change
    sleeper = threading.Thread(target=_sleep, args=(array, 0, long))
    start = time.perf_counter()
    sleeper.start()
    time.sleep(0.05)
    assert sleeper.is_alive()
    _change_and_wake(array)
    sleeper.join(5)
    assert not sleeper.is_alive()
    assert time.perf_counter() - start < 5


def _mask(rows, cols, seed):
    return (np.random.default_rng(seed).random((rows, cols)) < 0.6).astype(
        np.uint8)


def test_a_pool_thread_busy_elsewhere_costs_nothing(monkeypatch):
    """The pool's only thread is held by another task: the calling thread
    takes every strip and piece itself and returns the right labels
    without waiting for it; the late pool thread then finds nothing left
    and leaves the labels alone."""
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    values = _mask(200, 90, 1)
    expected, expected_count = ndi.label(values)
    _cpu.label(values, None, 4, "nonzero", Progress(), strips=4)  # the pool
    release = threading.Event()
    with _cpu_pool._pool(2) as pool:
        # every pool thread (an earlier test may have grown the pool)
        held = [pool.submit(release.wait, 60)
                for _ in range(pool._max_workers)]
    try:
        labels, count = _cpu.label(values, None, 4, "nonzero", Progress(),
                                   strips=4)
        assert not any(future.done() for future in held)  # did not wait
        kept = labels.copy()
    finally:
        release.set()
    for future in held:
        future.result()
    with _cpu_pool._pool(2) as pool:  # the late member has run by now
        pool.submit(lambda: None).result()
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(labels, kept)
    assert count == expected_count


def test_a_kit_is_reused_only_once_its_last_call_is_over(monkeypatch):
    """A call's arrays (strips, scratch rows, counters) are kept for the
    next call of the same kind, reset by it: right labels call after call.
    A kit whose pool task is still to run (its thread busy elsewhere) is
    not reused while that task may still change its counters."""
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    rasters = [_mask(200, 90, seed) for seed in range(5)]
    expected = [ndi.label(raster)[0] for raster in rasters]

    def label(index):
        labels, count = _cpu.label(rasters[index], None, 4, "nonzero",
                                   Progress(), strips=4)
        np.testing.assert_array_equal(labels, expected[index])
        assert count == expected[index].max()
        return labels

    def kept():
        return _cpu_team._KEPT_KIT[0][1]

    label(0)
    first = kept()
    for future in first.futures:
        future.result()
    label(1)
    assert kept() is first  # reused, its counters and run rows reset
    for future in first.futures:
        future.result()  # (a late pool task of label(1) keeps it busy)
    release = threading.Event()
    with _cpu_pool._pool(2) as pool:
        # every pool thread (an earlier test may have grown the pool)
        held = [pool.submit(release.wait, 60)
                for _ in range(pool._max_workers)]
    try:
        during = label(2).copy()  # takes the kit; its pool task waits
        assert kept() is first and not first.futures[0].done()
        later = label(3)  # the kit's task may still run: a new kit
        assert kept() is not first
    finally:
        release.set()
    for future in held:
        future.result()
    for future in first.futures + kept().futures:
        future.result()  # the late tasks found nothing left
    np.testing.assert_array_equal(during, expected[2])
    np.testing.assert_array_equal(later, expected[3])
    other = _mask(90, 200, 9)
    np.testing.assert_array_equal(
        _cpu.label(other, None, 4, "nonzero", Progress(), strips=4)[0],
        ndi.label(other)[0])
    assert kept().arguments[0].shape == (90,)  # a kit of the new shape
    monkeypatch.setattr(_cpu_team, "_KEPT_KIT_BYTES", 0)
    label(4)
    assert not _cpu_team._KEPT_KIT  # over the limit: none kept


def test_a_failing_thread_is_raised_here_and_its_waiters_stop(monkeypatch):
    """A pool thread fails holding the first strip: the calling thread
    labels the other strips, waits for the first strip's numbering, sees
    the failure and stops; the pool thread's error is raised here (no
    hang)."""
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    failed = threading.Event()
    real_member = _cpu_team._run_member

    def failing(*pool_arguments):
        shared = pool_arguments[-2][-1]  # the kit's counters
        shared[_cpu_team._NEXT_STRIP] = 1  # took strip 0, never labels it
        try:
            raise MemoryError("pool thread's strip")
        except MemoryError:
            shared[_cpu_team._FAILED] = 1
            raise
        finally:
            failed.set()

    def calling(*arguments):
        assert failed.wait(60)
        return real_member(*arguments)

    monkeypatch.setattr(_cpu_team, "_pool_member", failing)
    monkeypatch.setattr(_cpu_team, "_run_member", calling)
    with pytest.raises(MemoryError, match="pool thread's strip"):
        _cpu.label(_mask(120, 50, 2), None, 8, "nonzero", Progress(),
                   strips=3)


def test_calls_at_once_share_the_pool():
    # four Python threads label different rasters at once (each call's
    # team on the one shared pool; two shapes, so calls of one shape
    # contend for the kept kit): every result right
    rasters = [_mask(300, 200 + 7 * (index // 2), index)
               for index in range(4)]
    expected = [ndi.label(raster, np.ones((3, 3)))[0] for raster in rasters]
    got = [None] * 4

    def run(index):
        for _ in range(5):
            labels, _count = _cpu.label(rasters[index], None, 8, "nonzero",
                                        Progress(), strips=4)
            got[index] = labels.copy()
            np.testing.assert_array_equal(got[index], expected[index])

    threads = [threading.Thread(target=run, args=(index,))
               for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(4):
        np.testing.assert_array_equal(got[index], expected[index])


def test_progress_before_and_after_and_cancel_before(monkeypatch):
    values = (fractal_surface((64, 64), seed=3) > 500).astype(np.uint8)
    fractions = []
    _cpu.label(values, None, 8, "nonzero", Progress(fractions.append),
               strips=3)
    assert fractions == [0.0, 1.0]
    calls = []

    def member(*arguments):
        calls.append(1)

    monkeypatch.setattr(_cpu_team, "_run_member", member)
    with pytest.raises(CancelledError):
        _cpu.label(values, None, 8, "nonzero", Progress(lambda f: False),
                   strips=3)
    assert not calls  # cancelled before any thread started


def test_larger_rasters_go_by_kernel_calls(monkeypatch):
    # past TEAM_MAX_CELLS the kernel calls of _cpu.label run (progress
    # between the calls), with the same labels
    values = _mask(100, 64, 4)
    expected, _ = ndi.label(values)
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", values.size - 1)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 64 * 10)
    fractions = []
    labels, _ = _cpu.label(values, None, 4, "nonzero",
                           Progress(fractions.append), strips=2)
    np.testing.assert_array_equal(labels, expected)
    assert len(fractions) > 2
