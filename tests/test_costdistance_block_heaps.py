"""The block search with per-block heaps (core/costdistance/_blocks_heaps.py)
against the sequential one-heap Dijkstra (the oracle the other suites hold
to scikit-image, scipy and the brute-force reference): accumulated cost,
predecessor and allocation bit for bit, at every numba thread count.

Rasters: tie-heavy (few integer costs), zero-cost plateaus, rounding-heavy,
random floats, mazes, barriers (NaN), several sources with repeated cells
and shared ids, a max_cost cut, odd shapes; 4-, 8- and 16-connected; block
sides from 4 (every cell near a border, a pull in every round) to larger
than the raster; round widths from a fraction of a cell to infinite.
"""

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core._common import Progress
from gridgraph.core.costdistance import _blocks_heaps, _cpu, _step_lengths
from gridgraph.tests.costdistance_reference import reference
from gridgraph.tests.rasters import fractal_surface
from gridgraph.tests.test_costdistance_blocks import cases, make_cost


def sequential(cost, sources, ids, connectivity, max_cost=np.inf):
    step_lengths = _step_lengths(connectivity, (1.0, 1.0))
    return _cpu.solve(cost, ~np.isnan(cost), sources, ids, connectivity,
                      step_lengths, max_cost, Progress(), blocks=False)


def block_heaps(cost, sources, ids, connectivity, side, max_cost=np.inf):
    step_lengths = _step_lengths(connectivity, (1.0, 1.0))
    return _cpu.solve(cost, ~np.isnan(cost), sources, ids, connectivity,
                      step_lengths, max_cost, Progress(), blocks=side)


def assert_identical(got, expected):
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.fixture(autouse=True)
def heaps_search(monkeypatch):
    monkeypatch.setattr(_cpu, "BLOCK_SEARCH", "heaps")


@settings(max_examples=80, deadline=None)
@given(cases(), st.sampled_from([4, 8, 16]), st.sampled_from([4, 5, 7, 64]),
       st.sampled_from([np.inf, 2.5]), st.sampled_from([0.3, 1.0, 32.0]))
def test_block_heaps_equal_the_heap_search(case, connectivity, side,
                                           max_cost, width):
    cost, sources, ids = case
    expected = sequential(cost, sources, ids, connectivity, max_cost)
    saved = _blocks_heaps.ROUND_WIDTH_CELLS
    _blocks_heaps.ROUND_WIDTH_CELLS = width
    try:
        got = block_heaps(cost, sources, ids, connectivity, side, max_cost)
    finally:
        _blocks_heaps.ROUND_WIDTH_CELLS = saved
    assert_identical(got, expected)


def thread_counts():
    return range(1, numba.config.NUMBA_NUM_THREADS + 1)


@pytest.mark.parametrize("kind", ["ties", "zero plateaus", "rounding",
                                  "random", "maze"])
@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_every_thread_count_gives_the_sequential_rasters(kind, connectivity):
    """An odd-shaped raster of many blocks, barriers, eleven sources (two
    on one cell, ids shared), on 1..N numba threads."""
    rng = np.random.default_rng(connectivity * 7 + len(kind))
    cost = make_cost(kind, (83, 61), rng)
    valid = np.argwhere(~np.isnan(cost))
    sources = valid[rng.integers(0, len(valid), 10)]
    sources = np.vstack([sources, sources[:1]]).astype(np.int64)
    ids = rng.integers(1, 4, len(sources)).astype(np.int64)
    expected = sequential(cost, sources, ids, connectivity)
    saved = numba.get_num_threads()
    try:
        for threads in thread_counts():
            numba.set_num_threads(threads)
            for side in (4, 9, 16):
                assert_identical(
                    block_heaps(cost, sources, ids, connectivity, side),
                    expected)
    finally:
        numba.set_num_threads(saved)


def test_all_zero_plateau_and_one_source_per_block():
    cost = np.zeros((40, 40))
    sources = np.array([[r, c] for r in range(2, 40, 8)
                        for c in range(3, 40, 8)], dtype=np.int64)
    ids = np.arange(1, len(sources) + 1, dtype=np.int64)
    for threads in thread_counts():
        numba.set_num_threads(threads)
        assert_identical(block_heaps(cost, sources, ids, 8, 8),
                         sequential(cost, sources, ids, 8))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_block_heaps_match_the_brute_force_reference(connectivity):
    rng = np.random.default_rng(connectivity)
    cost = rng.integers(0, 3, (13, 17)).astype(np.float64)
    cost[rng.random(cost.shape) < 0.15] = np.nan
    cost[0, 0] = cost[12, 16] = 1.0
    sources = np.array([[0, 0], [12, 16]], dtype=np.int64)
    accumulated, predecessor, allocation = block_heaps(
        cost, sources, np.array([1, 2]), connectivity, 4)
    expected = reference(cost, ~np.isnan(cost),
                         [(0, 0, 1), (12, 16, 2)], connectivity)
    np.testing.assert_array_equal(accumulated, expected[0])
    np.testing.assert_array_equal(predecessor, expected[1])
    np.testing.assert_array_equal(allocation, expected[2])


def test_64_bit_cell_indices(monkeypatch):
    cost = fractal_surface((37, 29), seed=3).astype(np.float64)
    cost[10:12, 3:25] = np.nan
    sources = np.array([[0, 0], [36, 28]], dtype=np.int64)
    expected = block_heaps(cost, sources, np.array([1, 2]), 8, 8)
    monkeypatch.setattr(_cpu, "index_dtype", lambda n_cells: np.int64)
    assert_identical(block_heaps(cost, sources, np.array([1, 2]), 8, 8),
                     expected)


def test_automatic_choice_uses_the_block_heaps(monkeypatch):
    calls = []
    search = _blocks_heaps.search
    monkeypatch.setattr(_blocks_heaps, "search",
                        lambda *a, **k: calls.append(a[-1]) or search(*a, **k))
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_CELLS", 100)
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_THREADS", 1)
    monkeypatch.setattr(_cpu, "OVERSUBSCRIBED_LOAD", float("inf"))
    cost = fractal_surface((20, 20), seed=1).astype(np.float64)
    step_lengths = _step_lengths(8, (1.0, 1.0))
    _cpu.solve(cost, np.ones(cost.shape, bool), np.array([[3, 4]]),
               np.array([1]), 8, step_lengths, np.inf, Progress())
    assert calls == [_blocks_heaps.block_side(20, 20,
                                              numba.get_num_threads())]


def test_block_side_gives_several_blocks_a_thread():
    assert _blocks_heaps.block_side(4096, 4096, 2) == 1024
    assert _blocks_heaps.block_side(4096, 4096, 16) == 256
    assert _blocks_heaps.block_side(100, 100, 2) == \
        _blocks_heaps.MIN_BLOCK_SIDE
    assert _blocks_heaps.block_side(1 << 16, 1 << 16, 1) == \
        _blocks_heaps.MAX_BLOCK_SIDE


def test_cancel_between_rounds_stops_the_search():
    cost = fractal_surface((64, 64), seed=2).astype(np.float64)
    step_lengths = _step_lengths(8, (1.0, 1.0))
    reports = []

    def progress(fraction):
        reports.append(fraction)
        return len(reports) < 2

    from gridgraph.core._common import as_progress
    from gridgraph.core.errors import CancelledError
    saved = _blocks_heaps.ROUND_WIDTH_CELLS
    _blocks_heaps.ROUND_WIDTH_CELLS = 0.5  # many rounds
    try:
        with pytest.raises(CancelledError):
            _cpu.solve(cost, np.ones(cost.shape, bool), np.array([[0, 0]]),
                       np.array([1]), 8, step_lengths, np.inf,
                       as_progress(progress), blocks=4)
    finally:
        _blocks_heaps.ROUND_WIDTH_CELLS = saved


@pytest.mark.parametrize("load, expected_blocks", [(0.5, True), (3.9, True),
                                                   (4.0, False), (9.0, False)])
def test_an_oversubscribed_machine_gets_the_heap_search(monkeypatch, load,
                                                        expected_blocks):
    """Twice as many runnable tasks as CPUs (load average over the CPUs of
    the affinity mask, here 2): the heap search, whose one thread waits on
    no barrier; the rasters are the same either way."""
    import os
    calls = []
    search = _blocks_heaps.search
    monkeypatch.setattr(_blocks_heaps, "search",
                        lambda *a, **k: calls.append(1) or search(*a, **k))
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_CELLS", 100)
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_THREADS", 1)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1},
                        raising=False)
    cost = fractal_surface((20, 20), seed=1).astype(np.float64)
    got = _cpu.solve(cost, np.ones(cost.shape, bool), np.array([[3, 4]]),
                     np.array([1]), 8, _step_lengths(8, (1.0, 1.0)), np.inf,
                     Progress())
    assert bool(calls) == expected_blocks
    assert_identical(got, sequential(cost, np.array([[3, 4]]),
                                     np.array([1]), 8))


def test_no_load_average_means_not_oversubscribed(monkeypatch):
    import os

    def missing():
        raise OSError("no load average")
    monkeypatch.setattr(os, "getloadavg", missing)
    assert not _cpu.oversubscribed()
