"""Cost distance on the CUDA backend (simulator on CI).

How correctness is established: a literal grid with literal distances; on
hypothesis-generated cost rasters (<= 11 x 11, so the simulator's 4 x 4
tiles put seams everywhere; barriers, zero costs, several sources with
repeated cells and shared ids, max_cost, 4/8/16-connectivity, map-unit
step lengths) accumulated costs equal to the CPU Dijkstra within 1e-9
relative with the same unreached cells; predecessors and allocation
checked by path consistency: every reached cell's predecessor is a valid
neighbour whose accumulated cost plus the step cost, computed as the CPU
does, gives the cell's cost exactly, predecessors lead to a source without
a cycle, and the allocation is that source's id.  Where the CPU and GPU
pick different predecessors, that is a tie between equally cheap paths.
"""

import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gridgraph.core import cost_distance
from gridgraph.core._common import Progress
from gridgraph.core.costdistance import NEIGHBOUR_OFFSETS, _cpu, _cuda, \
    _step_lengths
from gridgraph.tests.rasters import maze_cost

SIM_SETTINGS = settings(max_examples=15, deadline=None)


@pytest.fixture(autouse=True, scope="module")
def _fast_thread_switches():
    """The simulator runs a block's threads as Python threads while its
    block manager polls them in a busy loop; with the default 5 ms switch
    interval most of a barrier is spent waiting for the GIL.  50 us makes
    this module's tests several times faster (and interleaves the threads
    more finely); the interval is restored afterwards."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    yield
    sys.setswitchinterval(previous)


def check_paths(accumulated, predecessor, allocation, cost, valid, steps,
                cells, ids):
    """Path consistency of the GPU outputs (see the module docstring)."""
    rows, cols = accumulated.shape
    cost64 = np.asarray(cost, dtype=np.float64)
    first_id = {}
    for (r, c), source_id in zip(cells, ids):
        first_id.setdefault((int(r), int(c)), int(source_id))
    for r in range(rows):
        for c in range(cols):
            p = predecessor[r, c]
            if p == -1:
                assert np.isnan(accumulated[r, c])
                assert allocation[r, c] == 0
                continue
            assert valid[r, c]
            if p == -2:
                assert accumulated[r, c] == 0.0
                assert allocation[r, c] == first_id[(r, c)]
                continue
            dr, dc = NEIGHBOUR_OFFSETS[p]
            a = (r + dr, c + dc)
            assert 0 <= a[0] < rows and 0 <= a[1] < cols and valid[a]
            # a knight's move passes between the two cells of its 2 x 3
            # box that touch both ends; both must be valid
            if abs(dr) + abs(dc) == 3:
                for i in range(min(0, dr), max(0, dr) + 1):
                    for j in range(min(0, dc), max(0, dc) + 1):
                        if max(abs(i), abs(j)) == 1 and \
                                max(abs(dr - i), abs(dc - j)) == 1:
                            assert valid[r + i, c + j]
            step = (cost64[a] + cost64[r, c]) * (0.5 * steps[p])
            assert accumulated[r, c] == accumulated[a] + step
            assert allocation[r, c] == allocation[a]
    # no cycle: walking predecessors reaches a source within n steps
    for r in range(rows):
        for c in range(cols):
            cell, walked = (r, c), 0
            while predecessor[cell] >= 0:
                dr, dc = NEIGHBOUR_OFFSETS[predecessor[cell]]
                cell = (cell[0] + dr, cell[1] + dc)
                walked += 1
                assert walked <= rows * cols
            assert predecessor[cell] in (-1, -2)


def compare_with_cpu(cost, valid, cells, ids, connectivity, max_cost=np.inf,
                     cell_size=None):
    steps = _step_lengths(connectivity, cell_size)
    expected = _cpu.solve(cost, valid, cells, ids, connectivity, steps,
                          max_cost, Progress())
    result = _cuda.solve(cost, valid, cells, ids, connectivity, steps,
                         max_cost, Progress())
    accumulated, predecessor, allocation = result
    assert accumulated.dtype == np.float64 and predecessor.dtype == np.int8
    assert allocation.dtype == np.int64
    np.testing.assert_array_equal(np.isnan(accumulated),
                                  np.isnan(expected[0]))
    np.testing.assert_allclose(accumulated, expected[0], rtol=1e-9, atol=0)
    np.testing.assert_array_equal(predecessor == -1, expected[1] == -1)
    check_paths(accumulated, predecessor, allocation, cost, valid, steps,
                cells, ids)
    return result


def test_literal_unit_costs():
    out = _cuda.solve(np.ones((3, 4)), np.ones((3, 4), bool),
                      np.array([[0, 0]]), np.array([1]), 4,
                      _step_lengths(4, None), np.inf, Progress())
    np.testing.assert_array_equal(out[0], [[0, 1, 2, 3],
                                           [1, 2, 3, 4],
                                           [2, 3, 4, 5]])
    assert (out[2] == 1).all()


def test_literal_barrier_and_max_cost():
    cost = np.array([[1.0, np.nan, 1.0],
                     [1.0, np.nan, 1.0],
                     [1.0, 1.0, 3.0]])
    valid = ~np.isnan(cost)
    out = _cuda.solve(cost, valid, np.array([[0, 0]]), np.array([7]), 4,
                      _step_lengths(4, None), 4.5, Progress())
    expected = np.array([[0, np.nan, np.nan],
                         [1, np.nan, np.nan],
                         [2, 3, np.nan]])
    np.testing.assert_array_equal(out[0], expected)
    np.testing.assert_array_equal(out[2], [[7, 0, 0], [7, 0, 0], [7, 7, 0]])


def test_knight_moves_do_not_jump_a_wall_on_a_tile_seam():
    # one-cell NaN walls in the last column of a tile, the first column of
    # the next, and (transposed) a row: the far side stays unreached
    for wall in (3, 4, 5):
        cost = np.ones((9, 11))
        cost[:, wall] = np.nan
        for grid in (cost, cost.T.copy()):
            valid = ~np.isnan(grid)
            out = compare_with_cpu(grid, valid, np.array([[1, 1]]),
                                   np.array([1]), 16)
            far = np.isnan(out[0])
            if grid is cost:
                assert far[:, wall:].all() and not far[:, :wall].any()
            else:
                assert far[wall:].all() and not far[:wall].any()


# Corridors that enter a tile only across the corner it shares with a
# diagonal neighbour tile.  12 x 8 cells are 3 x 2 simulator tiles (4 x 4),
# and every flip keeps the tiles where they are.  The source (3, 3) sits in
# tile (0, 0), whose tiles the first round relaxes; the corridor runs down
# tile (1, 0) and crosses into tile (2, 1), which only the diagonal wake-up
# sent by tile (1, 0) ever schedules.  "#" is a barrier, "." cost 1, "H" a
# valid cell too costly to reach under max_cost (cost 1e6).
DIAGONAL_STEP = """\
########
########
########
###.####
###.####
###.####
###.####
###.####
####.###
####.###
####.###
########"""
# 16-connectivity: the knight's move (6, 3) -> (8, 4) passes between the
# valid cells (7, 3) and (7, 4); under max_cost they are never reached, so
# nothing but the change of (6, 3) (two cells from tile (1, 0)'s lower
# border: the halo of knight's moves) can wake tile (2, 1).
KNIGHT_MOVE = """\
########
########
########
###.####
###.####
###.####
###.####
###HH###
####.###
####.###
####.###
########"""
ROOT2, ROOT5 = np.sqrt(2.0), np.sqrt(5.0)
# accumulated cost of the corridor cells, hand-computed (cost 1 per cell:
# a step of length L costs L)
DIAGONAL_STEP_COSTS = {(3, 3): 0.0, (4, 3): 1.0, (5, 3): 2.0, (6, 3): 3.0,
                       (7, 3): 4.0, (8, 4): 4.0 + ROOT2,
                       (9, 4): 5.0 + ROOT2, (10, 4): 6.0 + ROOT2}
KNIGHT_MOVE_COSTS = {(3, 3): 0.0, (4, 3): 1.0, (5, 3): 2.0, (6, 3): 3.0,
                     (8, 4): 3.0 + ROOT5, (9, 4): 4.0 + ROOT5,
                     (10, 4): 5.0 + ROOT5}


def corridor_raster(picture):
    symbols = {"#": np.nan, ".": 1.0, "H": 1e6}
    return np.array([[symbols[ch] for ch in line]
                     for line in picture.splitlines()])


def literal_costs(shape, costs):
    expected = np.full(shape, np.nan)
    for cell, value in costs.items():
        expected[cell] = value
    return expected


def check_diagonal_tile_crossing(picture, costs, connectivity, max_cost):
    cost = corridor_raster(picture)
    expected = literal_costs(cost.shape, costs)
    # every flip sends the crossing toward another diagonal neighbour tile
    for axes in ((), (1,), (0,), (0, 1)):
        grid = np.flip(cost, axes).copy() if axes else cost
        want = np.flip(expected, axes) if axes else expected
        valid = ~np.isnan(grid)
        source = np.argwhere(want == 0.0)
        # a few runs: the simulator orders threads and worklists
        # differently from run to run
        for _ in range(2):
            out = compare_with_cpu(grid, valid, source, np.array([3]),
                                   connectivity, max_cost)
            np.testing.assert_array_equal(out[0], want)
            np.testing.assert_array_equal(out[2], np.where(np.isnan(want),
                                                           0, 3))


def test_diagonal_step_into_a_diagonal_neighbour_tile():
    # a tile reached only across its corner must be woken by the tile
    # diagonally before it (the simulator's 8-thread blocks once skipped
    # the ninth, lower-right wake slot)
    for connectivity in (8, 16):
        check_diagonal_tile_crossing(DIAGONAL_STEP, DIAGONAL_STEP_COSTS,
                                     connectivity, np.inf)


def test_knight_move_into_a_diagonal_neighbour_tile():
    check_diagonal_tile_crossing(KNIGHT_MOVE, KNIGHT_MOVE_COSTS, 16, 50.0)


def test_maze_long_paths_cross_every_seam():
    cost = maze_cost((11, 11), seed=2)
    valid = ~np.isnan(cost)
    cells = np.array([[0, 0], [10, 10]])
    compare_with_cpu(cost, valid, cells, np.array([1, 2]), 4)


def test_zero_costs_make_ties():
    cost = np.zeros((7, 9), dtype=np.float32)
    cost[3, 2:7] = 1
    valid = np.ones(cost.shape, bool)
    cells = np.array([[0, 0], [6, 8], [0, 0]])
    for connectivity in (4, 8, 16):
        compare_with_cpu(cost, valid, cells, np.array([4, 5, 6]),
                         connectivity)


def test_tile_schedule_does_not_change_the_result():
    # narrow buckets (many thresholds), the default, and plain rounds
    cost = maze_cost((9, 9), seed=5)
    valid = ~np.isnan(cost)
    steps = _step_lengths(8, None)
    cells, ids = np.array([[0, 0], [6, 4]]), np.array([1, 2])
    expected = _cpu.solve(cost, valid, cells, ids, 8, steps, np.inf,
                          Progress())
    for delta in (3.0, None, np.inf):
        accumulated, predecessor, allocation = _cuda.solve(
            cost, valid, cells, ids, 8, steps, np.inf, Progress(),
            delta=delta)
        np.testing.assert_allclose(accumulated, expected[0], rtol=1e-9)
        check_paths(accumulated, predecessor, allocation, cost, valid, steps,
                    cells, ids)


def test_public_api_dispatches_to_cuda():
    cost = np.random.default_rng(9).uniform(1, 3, (8, 10))
    gpu = cost_distance(cost, [(1, 1), (6, 8)], connectivity=16,
                        cell_size=(2.0, 3.0), backend="cuda")
    cpu = cost_distance(cost, [(1, 1), (6, 8)], connectivity=16,
                        cell_size=(2.0, 3.0), backend="cpu")
    np.testing.assert_allclose(gpu.accumulated, cpu.accumulated, rtol=1e-9)


@st.composite
def problems(draw):
    rows = draw(st.integers(1, 11))
    cols = draw(st.integers(1, 11))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.uint8]))
    if dtype == np.uint8:
        elements = st.integers(0, 9)
    else:
        elements = st.floats(0, 100, width=32)
    cost = draw(hnp.arrays(dtype, (rows, cols), elements=elements))
    valid = draw(hnp.arrays(np.bool_, (rows, cols),
                            elements=st.sampled_from([True] * 4 + [False])))
    flat = np.flatnonzero(valid)
    if len(flat) == 0:
        valid[0, 0] = True
        flat = np.array([0])
    picks = draw(st.lists(st.sampled_from(list(flat)), min_size=1, max_size=4))
    cells = np.array([(p // cols, p % cols) for p in picks], dtype=np.int64)
    ids = np.array(draw(st.lists(st.integers(1, 3), min_size=len(picks),
                                 max_size=len(picks))), dtype=np.int64)
    return cost, valid, cells, ids


def ci_knight_problem():
    # the input of a CI failure: knight's moves (4, 2) -> (6, 3) -> (8, 4)
    # into the lower-right diagonal tile (the lost wake-up); since knight's
    # moves need their passed cells valid, nothing is reached past (4, 2)
    cost = np.ones((9, 7), dtype=np.float32)
    cost[0, 0] = 0
    valid = np.zeros((9, 7), bool)
    valid[4, 2] = valid[6, 3] = valid[8, 4] = True
    return cost, valid, np.array([[4, 2]]), np.array([1])


@SIM_SETTINGS
@given(problems(), st.sampled_from([4, 8, 16]),
       st.sampled_from([np.inf, 40.0]),
       st.sampled_from([None, (1.0, 1.0), (2.5, 0.5)]))
@example(ci_knight_problem(), 16, np.inf, None)
def test_same_costs_as_cpu(problem, connectivity, max_cost, cell_size):
    cost, valid, cells, ids = problem
    compare_with_cpu(cost, valid, cells, ids, connectivity, max_cost,
                     cell_size)
