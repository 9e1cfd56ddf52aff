"""The parallel block search of cost distance (core/costdistance/
_blocks_cpu.py) against the sequential one-heap Dijkstra it stands beside
(the oracle): accumulated cost, predecessor and allocation bit for bit.

Rasters: tie-heavy (few integer costs), zero-cost plateaus, rounding-heavy
(costs near 1e15 with small ones mixed in, so sums round), random floats,
barriers (NaN), several sources with repeated cells and shared ids, a
max_cost cut; 4-, 8- and 16-connected; block sides from 2 (every cell near
a border) to larger than the raster, so blocks and rounds meet in every
way.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core._common import Progress
from gridgraph.core.costdistance import _cpu, _step_lengths
from gridgraph.tests.rasters import fractal_surface, maze_cost


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # this file tests the small-block search; the block heaps have
    # test_costdistance_block_heaps.py
    monkeypatch.setattr(_cpu, "BLOCK_SEARCH", "small")


def solve_both(cost, sources, ids, connectivity, max_cost, side):
    valid = ~np.isnan(cost)
    step_lengths = _step_lengths(connectivity, (1.0, 1.0))
    expected = _cpu.solve(cost, valid, sources, ids, connectivity,
                          step_lengths, max_cost, Progress(), blocks=False)
    got = _cpu.solve(cost, valid, sources, ids, connectivity, step_lengths,
                     max_cost, Progress(), blocks=side)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    return expected


KINDS = ["ties", "zero plateaus", "rounding", "random", "maze"]


def make_cost(kind, shape, rng):
    if kind == "ties":
        cost = rng.integers(0, 3, shape).astype(np.float64)
    elif kind == "zero plateaus":
        cost = np.where(rng.random(shape) < 0.7, 0.0,
                        rng.integers(1, 4, shape)).astype(np.float64)
    elif kind == "rounding":
        cost = np.where(rng.random(shape) < 0.5, 1e15,
                        rng.random(shape) * 3).astype(np.float64)
    elif kind == "maze":
        return maze_cost(shape, seed=int(rng.integers(1 << 30)))
    else:
        cost = rng.random(shape)
    cost[rng.random(shape) < 0.12] = np.nan
    return cost


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (draw(st.integers(1, 26)), draw(st.integers(1, 26)))
    cost = make_cost(draw(st.sampled_from(KINDS)), shape, rng)
    valid = np.argwhere(~np.isnan(cost))
    if len(valid) == 0:
        cost[0, 0] = 1.0
        valid = np.array([[0, 0]])
    picks = rng.integers(0, len(valid), draw(st.integers(1, 4)))
    sources = valid[picks]
    ids = rng.integers(1, draw(st.sampled_from([2, 4])), len(sources))
    return cost, sources.astype(np.int64), ids.astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(cases(), st.sampled_from([4, 8, 16]), st.sampled_from([2, 3, 5, 64]),
       st.sampled_from([np.inf, 2.5]))
def test_block_search_equals_the_heap_search(case, connectivity, side,
                                             max_cost):
    cost, sources, ids = case
    solve_both(cost, sources, ids, connectivity, max_cost, side)


@pytest.mark.parametrize("connectivity", [4, 8, 16])
@pytest.mark.parametrize("side", [4, 16])
def test_fractal_with_barriers_and_three_sources(connectivity, side):
    cost = fractal_surface((61, 77), seed=4).astype(np.float64)
    cost[cost > 800] = np.nan
    valid = np.argwhere(~np.isnan(cost))
    sources = valid[[0, len(valid) // 2, len(valid) - 1]]
    solve_both(cost, sources, np.array([5, 6, 7]), connectivity, np.inf,
               side)


def test_all_zero_plateau():
    cost = np.zeros((40, 40))
    solve_both(cost, np.array([[0, 0], [39, 20]]), np.array([1, 2]), 8,
               np.inf, 8)


def test_automatic_choice_uses_blocks_above_the_minimum(monkeypatch):
    calls = []
    from gridgraph.core.costdistance import _blocks_cpu
    search = _blocks_cpu.search
    monkeypatch.setattr(_blocks_cpu, "search",
                        lambda *a, **k: calls.append(1) or search(*a, **k))
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_CELLS", 100)
    monkeypatch.setattr(_cpu, "BLOCKS_MIN_THREADS", 1)
    monkeypatch.setattr(_cpu, "OVERSUBSCRIBED_LOAD", float("inf"))
    cost = fractal_surface((20, 20), seed=1).astype(np.float64)
    step_lengths = _step_lengths(8, (1.0, 1.0))
    _cpu.solve(cost, np.ones(cost.shape, bool), np.array([[3, 4]]),
               np.array([1]), 8, step_lengths, np.inf, Progress())
    assert calls
