"""The CPU cost-distance solve's memory handling (core/costdistance/_cpu.py):
the state written in one parallel pass (or by field assignment for dtypes
numba does not take), and the accumulated costs and allocation written over
the search state's own memory.  Checked against the plain numpy forms they
replace, for both index widths, and end to end against the heap search's
outputs on rasters with barriers, unreached cells and several sources."""

import numpy as np
import pytest

from gridgraph.core._common import Progress
from gridgraph.core.costdistance import _cpu, _step_lengths


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_accumulated_written_over_the_state(index):
    rng = np.random.default_rng(1)
    n = 1001
    state = np.empty(n, dtype=_cpu._state_dtype(index))
    state["accumulated"] = rng.random(n) * 100
    state["cost"] = rng.random(n)
    state["hops"] = rng.integers(0, 50, n)
    predecessor = rng.integers(-2, 8, n).astype(np.int8)
    expected = np.where(predecessor == _cpu.PREDECESSOR_UNREACHED, np.nan,
                        state["accumulated"])
    accumulated, allocation, spare = _cpu._outputs_in_state(state)
    assert np.shares_memory(accumulated, state)
    _cpu._accumulated_in_place(state, predecessor, accumulated)
    np.testing.assert_array_equal(accumulated, expected)
    _cpu._single_allocation(predecessor, 7, allocation)
    np.testing.assert_array_equal(
        allocation, np.where(predecessor == _cpu.PREDECESSOR_UNREACHED, 0, 7))
    # the accumulated costs survive the allocation written after them
    np.testing.assert_array_equal(accumulated, expected)
    assert spare.size == n


@pytest.mark.parametrize("dtype", ["<f8", ">f8", "<f4", "<u2", ">i4", "<f2"])
def test_initial_state_for_every_dtype_and_byte_order(dtype):
    rng = np.random.default_rng(2)
    cost = (rng.random((7, 9)) * 50).astype(dtype)
    valid = rng.random(cost.shape) < 0.8
    state = _cpu._initial_state(cost, valid, np.int32)
    np.testing.assert_array_equal(state["cost"],
                                  cost.astype(np.float64).ravel())
    np.testing.assert_array_equal(
        state["accumulated"], np.where(valid, np.inf, -np.inf).ravel())
    assert (state["hops"] == 1).all()
    # a strided view gives the same state
    wide = np.zeros((7, 18), dtype=dtype)
    wide[:, ::2] = cost
    strided = _cpu._initial_state(wide[:, ::2], valid, np.int32)
    np.testing.assert_array_equal(strided["cost"], state["cost"])


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_outputs_with_barriers_and_several_sources(connectivity):
    """Several sources with distinct ids (the allocation walk over the
    state's spare bytes), barriers that leave cells unreached, and one
    source cell listed twice; the heap and the block search agree."""
    rng = np.random.default_rng(connectivity)
    cost = rng.random((40, 37)) * 10
    valid = rng.random(cost.shape) < 0.85
    valid[:, 20] = False          # a wall: the right part is unreached
    cells = np.array([[3, 4], [30, 10], [12, 15], [3, 4]])
    valid[cells[:, 0], cells[:, 1]] = True
    for ids in (np.array([5, 6, 7, 8]), np.array([9, 9, 9, 9])):
        accumulated, predecessor, allocation = _cpu.solve(
            cost, valid, cells, ids, connectivity,
            _step_lengths(connectivity, None), np.inf, Progress(),
            blocks=False)
        unreached = predecessor == _cpu.PREDECESSOR_UNREACHED
        assert unreached[:, 21:].all()
        assert np.isnan(accumulated[unreached]).all()
        assert not np.isnan(accumulated[~unreached]).any()
        assert (allocation[unreached] == 0).all()
        assert set(np.unique(allocation[~unreached])) <= set(ids)
        # the first listing of a repeated source keeps its id
        assert allocation[3, 4] == ids[0]
        blocks = _cpu.solve(cost, valid, cells, ids, connectivity,
                            _step_lengths(connectivity, None), np.inf,
                            Progress(), blocks=8)
        for got, expected in zip(blocks, (accumulated, predecessor,
                                          allocation)):
            np.testing.assert_array_equal(got, expected)
