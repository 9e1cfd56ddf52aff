"""Cost distance on the CUDA backend (simulator on CI).

How correctness is established: an independent reference written here in
plain Python (it imports nothing from the project) computes the canonical
result straight from its definition:

* (d, h): a Dijkstra search on pairs (accumulated cost, steps), compared
  cost first, popping pairs in order and relaxing only from popped (final)
  pairs, with each step costing ``(c_a + c_b) * (L / 2)`` in float64 as the
  kernels do; the reference then checks that its pairs are the fixed point
  ``(d, h)[c] = lexmin over allowed n of (d[n] + w, h[n] + 1)`` (sources
  (0, 0)), which has exactly one solution;
* predecessor: the allowed neighbour index i minimising (d[n] + w, h[n], i);
  -2 at sources, -1 where unreached;
* allocation: the id of the source at the root of that tree (a source
  listed twice keeps its first id).

Accumulated cost, predecessor and allocation must equal it exactly (and
equal the CPU backend), on literal grids with literal answers, on rasters
full of exact ties (zero costs, all-equal costs, small integers; 4/8/16
connectivity, several source ids) and on random rasters (hypothesis; <= 11
x 11, so the simulator's 4 x 4 tiles put seams everywhere).
``solve_seeded`` is checked against the same search started from a given
state and seeds (a Dijkstra search of the tile from its seeds), for a
first call from the tile's own sources and a second one seeded from a
frame of cells outside the tile.
"""

import heapq
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numba import cuda

from gridgraph.core import cost_distance
from gridgraph.core._common import Progress
from gridgraph.core.costdistance import NEIGHBOUR_OFFSETS, _cpu, _cuda, \
    allocation_dtype, \
    _step_lengths
from gridgraph.core.errors import InvalidInputError
from gridgraph.tests.rasters import maze_cost

SIM_SETTINGS = settings(max_examples=12, deadline=None)

# The neighbour order of the predecessor codes (GRASS r.cost's: east,
# north, west, south, the diagonals, the knight's moves), written out here
# so that the reference depends on no project code.
OFFSETS = ((0, 1), (-1, 0), (0, -1), (1, 0),
           (-1, 1), (-1, -1), (1, -1), (1, 1),
           (-1, 2), (-2, 1), (-2, -1), (-1, -2),
           (1, -2), (2, -1), (2, 1), (1, 2))
UNREACHED_HOPS = np.iinfo(np.int64).max
ROOT2, ROOT5 = np.sqrt(2.0), np.sqrt(5.0)


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


# --------------------------------------------------------------------------
# The reference.

class Reference:
    """The canonical cost distance of one raster, in plain Python."""

    def __init__(self, cost, valid, connectivity, steps, max_cost=np.inf):
        self.cost = np.asarray(cost, dtype=np.float64).tolist()
        self.valid = np.asarray(valid, dtype=bool).tolist()
        self.rows, self.cols = np.shape(valid)
        self.moves = OFFSETS[:connectivity]
        self.half_steps = [float(0.5 * s) for s in steps]
        self.max_cost = float(max_cost)

    def _passes_between_valid(self, r, c, dr, dc):
        """A knight's move needs the two cells of its 2 x 3 box that touch
        both ends valid; a one-cell move (diagonals too) needs none."""
        if abs(dr) + abs(dc) != 3:
            return True
        for i in range(min(0, dr), max(0, dr) + 1):
            for j in range(min(0, dc), max(0, dc) + 1):
                if max(abs(i), abs(j)) == 1 and \
                        max(abs(dr - i), abs(dc - j)) == 1 and \
                        not self.valid[r + i][c + j]:
                    return False
        return True

    def neighbours(self, r, c):
        """(i, row, col) of the allowed neighbours of a valid cell, i the
        index of the offset from (r, c) to the neighbour."""
        for i, (dr, dc) in enumerate(self.moves):
            nr, nc = r + dr, c + dc
            if 0 <= nr < self.rows and 0 <= nc < self.cols and \
                    self.valid[nr][nc] and \
                    self._passes_between_valid(r, c, dr, dc):
                yield i, nr, nc

    def step(self, i, r, c, nr, nc):
        return (self.cost[r][c] + self.cost[nr][nc]) * self.half_steps[i]

    def fresh_state(self):
        d = [[np.inf] * self.cols for _ in range(self.rows)]
        h = [[UNREACHED_HOPS] * self.cols for _ in range(self.rows)]
        return d, h

    def search(self, d, h, seeds):
        """Dijkstra on pairs from the state (d, h) (lists, changed in
        place) started at ``seeds`` (cells whose pairs were just set)."""
        heap = [(d[r][c], h[r][c], r, c) for r, c in seeds]
        heapq.heapify(heap)
        while heap:
            dist, hops, r, c = heapq.heappop(heap)
            if (dist, hops) != (d[r][c], h[r][c]):
                continue  # superseded
            for i, nr, nc in self.neighbours(r, c):
                pair = (dist + self.step(i, r, c, nr, nc), hops + 1)
                if pair[0] <= self.max_cost and pair < (d[nr][nc],
                                                         h[nr][nc]):
                    d[nr][nc], h[nr][nc] = pair
                    heapq.heappush(heap, (pair[0], pair[1], nr, nc))

    def solve(self, cells):
        """Canonical (d, h) as lists, checked to be the fixed point."""
        d, h = self.fresh_state()
        sources = {(int(r), int(c)) for r, c in cells}
        for r, c in sources:
            d[r][c], h[r][c] = 0.0, 0
        self.search(d, h, sources)
        self.check_fixed_point(d, h, sources)
        return d, h

    def check_fixed_point(self, d, h, sources):
        for r in range(self.rows):
            for c in range(self.cols):
                if not self.valid[r][c]:
                    continue
                if (r, c) in sources:
                    assert (d[r][c], h[r][c]) == (0.0, 0)
                    continue
                best = min(((d[nr][nc] + self.step(i, r, c, nr, nc),
                             h[nr][nc] + 1)
                            for i, nr, nc in self.neighbours(r, c)
                            if d[nr][nc] < np.inf), default=(np.inf, 0))
                if best[0] < np.inf and best[0] <= self.max_cost:
                    assert (d[r][c], h[r][c]) == best, (r, c)
                else:
                    assert d[r][c] == np.inf, (r, c)

    def predecessors(self, d, h):
        pred = np.full((self.rows, self.cols), -1, dtype=np.int8)
        for r in range(self.rows):
            for c in range(self.cols):
                if not self.valid[r][c] or d[r][c] == np.inf:
                    continue
                if h[r][c] == 0:
                    pred[r, c] = -2
                    continue
                pred[r, c] = min(
                    (d[nr][nc] + self.step(i, r, c, nr, nc), h[nr][nc], i)
                    for i, nr, nc in self.neighbours(r, c))[2]
        return pred

    def allocation(self, pred, cells, ids):
        first_id = {}
        for (r, c), source_id in zip(cells, ids):
            first_id.setdefault((int(r), int(c)), int(source_id))
        alloc = np.zeros((self.rows, self.cols), dtype=np.int64)
        for r in range(self.rows):
            for c in range(self.cols):
                cell, walked = (r, c), 0
                while pred[cell] >= 0:
                    dr, dc = OFFSETS[pred[cell]]
                    cell = (cell[0] + dr, cell[1] + dc)
                    walked += 1
                    assert walked <= self.rows * self.cols
                if pred[cell] == -2:
                    alloc[r, c] = first_id[cell]
        return alloc


def reference_outputs(cost, valid, cells, ids, connectivity, steps,
                      max_cost=np.inf):
    """(accumulated, predecessor, allocation, hops) of the definition."""
    ref = Reference(cost, valid, connectivity, steps, max_cost)
    d, h = ref.solve(cells)
    pred = ref.predecessors(d, h)
    accumulated = np.array(d)
    accumulated[pred == -1] = np.nan
    return (accumulated, pred, ref.allocation(pred, cells, ids),
            np.array(h, dtype=np.int64))


def assert_same_state(got, expected, valid):
    distance, hops = got
    np.testing.assert_array_equal(distance[valid], expected[0][valid])
    reached = valid & (expected[0] < np.inf)
    np.testing.assert_array_equal(hops[reached], expected[1][reached])


def check_solve(cost, valid, cells, ids, connectivity, max_cost=np.inf,
                cell_size=None, delta=None, with_cpu=True):
    """The GPU outputs equal the reference's exactly (and the CPU's)."""
    steps = _step_lengths(connectivity, cell_size)
    accumulated, predecessor, allocation = _cuda.solve(
        cost, valid, cells, ids, connectivity, steps, max_cost, Progress(),
        delta=delta)
    assert accumulated.dtype == np.float64 and predecessor.dtype == np.int8
    # int32 when every id fits in 32 bits (costdistance.allocation_dtype)
    assert allocation.dtype == allocation_dtype(ids)
    expected = reference_outputs(cost, valid, cells, ids, connectivity,
                                 steps, max_cost)
    np.testing.assert_array_equal(accumulated, expected[0])
    np.testing.assert_array_equal(predecessor, expected[1])
    np.testing.assert_array_equal(allocation, expected[2])
    if with_cpu:
        cpu = _cpu.solve(cost, valid, cells, ids, connectivity, steps,
                         max_cost, Progress())
        for gpu_raster, cpu_raster in zip((accumulated, predecessor,
                                           allocation), cpu):
            np.testing.assert_array_equal(gpu_raster, cpu_raster)
    return accumulated, predecessor, allocation


def test_reference_uses_the_package_neighbour_order():
    np.testing.assert_array_equal(np.array(OFFSETS), NEIGHBOUR_OFFSETS)


# --------------------------------------------------------------------------
# Literal grids.

def test_literal_unit_costs():
    out = _cuda.solve(np.ones((3, 4)), np.ones((3, 4), bool),
                      np.array([[0, 0]]), np.array([1]), 4,
                      _step_lengths(4, None), np.inf, Progress())
    np.testing.assert_array_equal(out[0], [[0, 1, 2, 3],
                                           [1, 2, 3, 4],
                                           [2, 3, 4, 5]])
    # from the north and from the west the cost and hops are equal: the
    # lower neighbour index, north (1), wins
    np.testing.assert_array_equal(out[1], [[-2, 2, 2, 2],
                                           [1, 1, 1, 1],
                                           [1, 1, 1, 1]])
    assert (out[2] == 1).all()


def test_literal_plateau_ties_between_sources():
    # zero costs everywhere: every reached cell costs 0, so hops (the
    # number of steps) decide, then the neighbour index; sources with ids
    # 7 and 9 share the grid by hops
    cost = np.zeros((3, 5))
    out = _cuda.solve(cost, np.ones(cost.shape, bool),
                      np.array([[0, 0], [2, 4]]), np.array([7, 9]), 4,
                      _step_lengths(4, None), np.inf, Progress())
    np.testing.assert_array_equal(out[0], np.zeros((3, 5)))
    # hops from (0, 0): r + c; from (2, 4): 6 - r - c.  A cell points to
    # its neighbour with the fewest hops, the lowest index (east 0, north
    # 1, west 2, south 3) among equals: (0, 3) has 2 hops on three sides
    # and takes east; (1, 2) and (2, 1) take east too
    np.testing.assert_array_equal(out[1], [[-2, 2, 2, 0, 3],
                                           [1, 1, 0, 0, 3],
                                           [1, 0, 0, 0, -2]])
    np.testing.assert_array_equal(out[2], [[7, 7, 7, 9, 9],
                                           [7, 7, 9, 9, 9],
                                           [7, 9, 9, 9, 9]])


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
    np.testing.assert_array_equal(out[1], [[-2, -1, -1],
                                           [1, -1, -1],
                                           [1, 2, -1]])
    np.testing.assert_array_equal(out[2], [[7, 0, 0], [7, 0, 0], [7, 7, 0]])


# A value that is not final yet must not decide a cell's hops.  N is reached
# first through P at 1 + 2**-52 in 2 steps (inside the sources' 4 x 4
# simulator tile), later through a zero-cost detour over the next tile row
# and Q at exactly 1.0 in 12 steps.  C (cost 2) costs 2.0 from either value
# of N once rounded (2 + 2**-52 rounds to 2), so its pair is (2.0, 13), not
# (2.0, 3).  E ties between C (13 hops) and F (6 hops, from source T) and
# must take F.  A relaxation of pairs in one pass ("lower cost, or equal
# cost and fewer hops") keeps C at 3 hops and sends E to C and source S.
# Legend: S/T sources (cost 0, ids 1/2), z zero cost, # barrier.
INTERIM_PICTURE = """\
SPNCE###
z#Q#F###
z#z#z###
z#z#z###
z#z#z###
zzz#zzT#
########
########"""
INTERIM_COSTS = {"S": 0.0, "T": 0.0, "z": 0.0, "P": 1.0 + 2.0 ** -52,
                 "N": 0.0, "Q": 1.0, "C": 2.0, "E": 0.0, "F": 3.0,
                 "#": np.nan}


def interim_raster():
    cost = np.array([[INTERIM_COSTS[ch] for ch in line]
                     for line in INTERIM_PICTURE.splitlines()])
    cells = np.array([(0, 0), (5, 6)])
    return cost, ~np.isnan(cost), cells, np.array([1, 2])


def test_hops_ignore_values_that_are_not_final():
    cost, valid, cells, ids = interim_raster()
    steps = _step_lengths(4, None)
    distance = np.where(valid, np.inf, -np.inf)
    hops = np.full(cost.shape, UNREACHED_HOPS)
    distance[0, 0] = distance[5, 6] = 0.0
    hops[0, 0] = hops[5, 6] = 0
    out_distance, out_hops = _cuda.solve_seeded(
        cost, valid, distance, hops, np.array([0, 5 * 8 + 6]), 4, steps,
        np.inf, phase="both")
    # literal pairs along the detour, at N, C, and along T's path to E
    detour = [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (5, 1), (5, 2),
              (4, 2), (3, 2), (2, 2)]
    for k, cell in enumerate(detour):
        assert (out_distance[cell], out_hops[cell]) == (0.0, k)
    assert (out_distance[1, 2], out_hops[1, 2]) == (0.5, 11)   # Q
    assert (out_distance[0, 2], out_hops[0, 2]) == (1.0, 12)   # N
    assert (out_distance[0, 3], out_hops[0, 3]) == (2.0, 13)   # C
    assert (out_distance[0, 1], out_hops[0, 1]) == (0.5 + 2.0 ** -53, 1)
    assert (out_distance[1, 4], out_hops[1, 4]) == (1.5, 6)    # F
    assert (out_distance[0, 4], out_hops[0, 4]) == (3.0, 7)    # E
    np.testing.assert_array_equal(out_distance[~valid], -np.inf)
    accumulated, predecessor, allocation = check_solve(cost, valid, cells,
                                                       ids, 4)
    assert (accumulated[0, 4], predecessor[0, 4], allocation[0, 4]) == \
        (3.0, 3, 2)  # E: from F below (south, 3), source T (id 2)
    assert (predecessor[0, 3], allocation[0, 3]) == (2, 1)  # C: from N


# --------------------------------------------------------------------------
# Seams and the tile schedule.

def test_knight_moves_do_not_jump_a_wall_on_a_tile_seam():
    # one-cell NaN walls in the last column of a tile, the first column of
    # the next, and (transposed) a row: the far side stays unreached
    for wall in (3, 4):
        cost = np.ones((9, 11))
        cost[:, wall] = np.nan
        for grid in (cost, cost.T.copy()):
            valid = ~np.isnan(grid)
            out = check_solve(grid, valid, np.array([[1, 1]]),
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
        out = check_solve(grid, valid, source, np.array([3]), connectivity,
                          max_cost)
        np.testing.assert_array_equal(out[0], want)
        np.testing.assert_array_equal(out[2], np.where(np.isnan(want), 0, 3))


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
    check_solve(cost, valid, np.array([[0, 0], [10, 10]]), np.array([1, 2]),
                4)


def test_tile_schedule_does_not_change_the_result():
    # narrow buckets (many thresholds), the default, and plain rounds, on a
    # raster of exact ties
    cost = np.where(np.isnan(maze_cost((9, 9), seed=5)), np.nan,
                    np.arange(81).reshape(9, 9) % 3)
    valid = ~np.isnan(cost)
    cells, ids = np.array([[0, 0], [6, 4], [8, 8]]), np.array([1, 2, 3])
    for delta in (0.5, None, np.inf):
        check_solve(cost, valid, cells, ids, 8, delta=delta,
                    with_cpu=delta is None)


def test_sweep_order_does_not_change_the_result(monkeypatch):
    # consecutive rows swept down and up, or every THREADS_Y-th row; one
    # or two passes per barrier; move offsets as compiled-in constants or
    # from shared arrays.  Sized from the tile constants so that
    # paths cross tile seams both ways (4 x 3 tiles, partial ones last).
    shape = (3 * _cuda.TILE - 1, 2 * _cuda.TILE + 3)
    cost = np.where(np.isnan(maze_cost(shape, seed=6)), np.nan,
                    np.arange(shape[0] * shape[1]).reshape(shape) % 4 + 0.5)
    valid = ~np.isnan(cost)
    cells = np.array([[0, 0], [shape[0] - 1, shape[1] - 1]])
    valid[tuple(cells.T)] = True
    cost[tuple(cells.T)] = 1.0
    ids = np.array([1, 2])
    for consecutive, passes, constant in (
            (True, 1, True), (False, 1, True), (True, 2, True),
            (True, 2, False), (False, 1, False)):
        monkeypatch.setattr(_cuda, "CONSECUTIVE_ROWS", consecutive)
        monkeypatch.setattr(_cuda, "PASSES_PER_SWEEP", passes)
        monkeypatch.setattr(_cuda, "CONSTANT_STEPS", constant)
        for connectivity in (4, 8, 16):
            check_solve(cost, valid, cells, ids, connectivity,
                        with_cpu=False)


def test_hops_phase_runs_only_where_a_tie_needs_it():
    # random real costs: no cell has two tight neighbours, the hops phase
    # is skipped; unit costs: ties everywhere, it runs.  Same outputs as
    # the reference either way.
    rng = np.random.default_rng(4)
    for cost, phase in ((rng.uniform(1, 2, (9, 10)), "skipped: no tie"),
                        (np.ones((9, 10)), "run")):
        valid = np.ones(cost.shape, bool)
        cells, ids = np.array([[1, 2], [7, 7]]), np.array([1, 2])
        steps = _step_lengths(8, None)
        stats = {}
        dist, pred, alloc, _ = _cuda.solve_device(
            cuda.to_device(cost.reshape(-1)),
            cuda.to_device(valid.reshape(-1).view(np.uint8)), 9, 10,
            np.array([12, 77]), ids, 8, steps, np.inf, stats=stats)
        assert stats["hops_phase"] == phase
        expected = reference_outputs(cost, valid, cells, ids, 8, steps)
        np.testing.assert_array_equal(dist.copy_to_host().reshape(9, 10),
                                      expected[0])
        np.testing.assert_array_equal(pred.copy_to_host().reshape(9, 10),
                                      expected[1])
        np.testing.assert_array_equal(alloc.copy_to_host().reshape(9, 10),
                                      expected[2])


def test_public_api_dispatches_to_cuda():
    cost = np.random.default_rng(9).uniform(1, 3, (8, 10))
    gpu = cost_distance(cost, [(1, 1), (6, 8)], connectivity=16,
                        cell_size=(2.0, 3.0), backend="cuda")
    cpu = cost_distance(cost, [(1, 1), (6, 8)], connectivity=16,
                        cell_size=(2.0, 3.0), backend="cpu")
    np.testing.assert_array_equal(gpu.accumulated, cpu.accumulated)
    np.testing.assert_array_equal(gpu.direction, cpu.direction)
    np.testing.assert_array_equal(gpu.allocation, cpu.allocation)


def test_public_api_outputs_nodata_and_checks_on_device():
    # the public CUDA path (costdistance/_cuda_outputs.py): valid cells and
    # checks on the device, directions from the predecessors there, only
    # the asked-for outputs back.  More tiles than RELAX_BLOCKS and more
    # rounds than ROUNDS_PER_CHECK.
    from gridgraph.core.costdistance import (GRASS_DIRECTION_DEGREES,
                                             InvalidInputError)
    rows, cols = 3 * _cuda.TILE + 1, 5 * _cuda.TILE - 1
    assert (blocks(rows) * blocks(cols) > _cuda.RELAX_BLOCKS
            and rows + cols > 2 * _cuda.ROUNDS_PER_CHECK)
    rng = np.random.default_rng(12)
    cost = rng.integers(0, 4, (rows, cols)).astype(np.int16)
    cost[rng.random(cost.shape) < 0.15] = 9  # nodata: barriers
    cells = np.array([[0, 0], [rows - 1, cols - 1], [rows // 2, 3]])
    cost[tuple(cells.T)] = 1
    valid = cost != 9
    steps = _step_lengths(8, None)
    expected = reference_outputs(cost, valid, cells, np.array([4, 5, 6]), 8,
                                 steps)
    degrees = np.full(cost.shape, np.nan, np.float32)
    degrees[expected[1] >= 0] = GRASS_DIRECTION_DEGREES[
        expected[1][expected[1] >= 0]]
    degrees[expected[1] == -2] = 0
    out = cost_distance(cost, cells, 8, nodata=9, source_ids=[4, 5, 6],
                        backend="cuda")
    np.testing.assert_array_equal(out.accumulated, expected[0])
    np.testing.assert_array_equal(out.direction, degrees)
    np.testing.assert_array_equal(out.allocation, expected[2])
    assert out.direction.dtype == np.float32
    only = cost_distance(cost, cells, 8, nodata=9, source_ids=[4, 5, 6],
                         backend="cuda", outputs=("direction",))
    assert only.accumulated is None and only.allocation is None
    np.testing.assert_array_equal(only.direction, degrees)
    negative = cost.astype(np.float32)
    negative[2, 5] = -0.5
    with pytest.raises(InvalidInputError, match="1 negative cell.*row 2, "
                                                "column 5"):
        cost_distance(negative, cells, 8, nodata=9, backend="cuda")
    with pytest.raises(InvalidInputError, match="no valid cell"):
        cost_distance(np.full((3, 3), 9), [[0, 0]], nodata=9,
                      backend="cuda")
    with pytest.raises(InvalidInputError, match="barrier"):
        cost_distance(cost, [[0, 0], [1, 1]] if cost[1, 1] == 9 else
                      np.argwhere(cost == 9)[:1], 8, nodata=9,
                      backend="cuda")


def blocks(n):
    return -(-n // _cuda.TILE)


# --------------------------------------------------------------------------
# Random rasters: exact ties (plateaus) and general costs.

def draw_valid_and_sources(draw, shape, valid_odds, max_id):
    """(valid, cells, ids): a validity mask with ``valid_odds`` valid cells
    to one invalid (never all invalid), and 1-4 sources on valid cells (a
    cell may be drawn twice) with ids drawn from 1..max_id."""
    cols = shape[1]
    valid = draw(hnp.arrays(np.bool_, shape, elements=st.sampled_from(
        [True] * valid_odds + [False])))
    flat = np.flatnonzero(valid)
    if len(flat) == 0:
        valid[0, 0] = True
        flat = np.array([0])
    picks = draw(st.lists(st.sampled_from(list(flat)), min_size=1, max_size=4))
    cells = np.array([(p // cols, p % cols) for p in picks], dtype=np.int64)
    ids = np.array(draw(st.lists(st.integers(1, max_id), min_size=len(picks),
                                 max_size=len(picks))), dtype=np.int64)
    return valid, cells, ids


@st.composite
def tie_problems(draw, max_side=9):
    """Rasters made of exact ties: zero, all-equal, or a few small integer
    costs (as uint8, float32 or float64), some barriers, 1-4 sources with
    ids drawn from 1..4."""
    rows = draw(st.integers(1, max_side))
    cols = draw(st.integers(2, max_side))
    values = draw(st.sampled_from([(0,), (1,), (3,), (0, 1), (0, 1, 2),
                                   (0, 0, 0, 1), (1, 2, 4)]))
    dtype = draw(st.sampled_from([np.uint8, np.float32, np.float64]))
    cost = draw(hnp.arrays(dtype, (rows, cols),
                           elements=st.sampled_from(values)))
    return (cost,) + draw_valid_and_sources(draw, cost.shape, 6, 4)


@SIM_SETTINGS
@given(tie_problems(), st.sampled_from([4, 8, 16]))
def test_plateaus_give_the_canonical_trees(problem, connectivity):
    cost, valid, cells, ids = problem
    check_solve(cost, valid, cells, ids, connectivity)


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
    return (cost,) + draw_valid_and_sources(draw, cost.shape, 4, 3)


def ci_knight_problem():
    # the input of a CI failure: knight's moves (4, 2) -> (6, 3) -> (8, 4)
    # into the lower-right diagonal tile (the lost wake-up); since knight's
    # moves need their passed cells valid, nothing is reached past (4, 2)
    cost = np.ones((9, 7), dtype=np.float32)
    cost[0, 0] = 0
    valid = np.zeros((9, 7), bool)
    valid[4, 2] = valid[6, 3] = valid[8, 4] = True
    return cost, valid, np.array([[4, 2]]), np.array([1])


def float32_sum_problem():
    # float32 costs whose sums are not exact in float32 (1e-5 + 1): every
    # kernel must add them in float64, as the CPU does
    cost = np.full((5, 6), 1e-5, dtype=np.float32)
    cost[1:4, 2] = 1.0
    cost[2, 4] = 3.0
    return cost, np.ones(cost.shape, bool), np.array([[0, 0], [4, 5]]), \
        np.array([1, 2])


@SIM_SETTINGS
@given(problems(), st.sampled_from([4, 8, 16]),
       st.sampled_from([np.inf, 40.0]),
       st.sampled_from([None, (1.0, 1.0), (2.5, 0.5)]))
@example(ci_knight_problem(), 16, np.inf, None)
@example(float32_sum_problem(), 8, np.inf, None)
def test_random_rasters_give_the_canonical_result(problem, connectivity,
                                                  max_cost, cell_size):
    cost, valid, cells, ids = problem
    check_solve(cost, valid, cells, ids, connectivity, max_cost, cell_size)


@settings(max_examples=8, deadline=None)
@given(problems(), st.sampled_from([4, 8, 16]))
@example(float32_sum_problem(), 4)
def test_fresh_seeded_state_holds_the_canonical_pairs(problem, connectivity):
    # the hops themselves, from a first seeded call on the whole raster
    cost, valid, cells, _ = problem
    steps = _step_lengths(connectivity, None)
    d, h = Reference(cost, valid, connectivity, steps).solve(cells)
    rows, cols = valid.shape
    seeds = np.unique(cells[:, 0] * cols + cells[:, 1])
    distance = np.full((rows, cols), np.inf)
    hops = np.full((rows, cols), UNREACHED_HOPS)
    distance.flat[seeds] = 0.0
    hops.flat[seeds] = 0
    out = _cuda.solve_seeded(cost, valid, distance, hops, seeds,
                             connectivity, steps, np.inf, phase="both")
    assert_same_state(out, (np.array(d), np.array(h)), valid)


# --------------------------------------------------------------------------
# solve_seeded: the per-tile solve of the tiled path.

def seeded_reference(ref, distance, hops, seeds):
    """The reference search from a state (arrays) and flat seed cells."""
    d = distance.tolist()
    h = hops.tolist()
    ref.search(d, h, [divmod(int(s), ref.cols) for s in seeds])
    return np.array(d), np.array(h, dtype=np.int64)


def test_seeded_literal_call_keeps_hops_of_unchanged_distances():
    # A tile of two cells N (cost 0) and C (cost 2), left by an earlier
    # call at N = (1 + 2**-52, 2), C = (2.0, 3).  N is seeded with (1.0, 12)
    # from outside; C would cost 2.0 from it too (rounding), so C keeps
    # (2.0, 3): a seeded call lowers pairs, as the tiled CPU solve does.
    # Phase "hops" with the distances final recomputes hops from scratch:
    # C = (2.0, 13), the canonical pair.
    cost = np.array([[0.0, 2.0]])
    valid = np.ones((1, 2), bool)
    steps = _step_lengths(4, None)
    distance = np.array([[1.0, 2.0]])
    hops = np.array([[12, 3]])
    out = _cuda.solve_seeded(cost, valid, distance, hops, np.array([0]), 4,
                             steps, np.inf, phase="both")
    np.testing.assert_array_equal(out[0], [[1.0, 2.0]])
    np.testing.assert_array_equal(out[1], [[12, 3]])
    hops = np.array([[12, UNREACHED_HOPS]])
    out = _cuda.solve_seeded(cost, valid, distance, hops, np.array([0]), 4,
                             steps, np.inf, phase="hops")
    np.testing.assert_array_equal(out[0], [[1.0, 2.0]])
    np.testing.assert_array_equal(out[1], [[12, 13]])


@st.composite
def framed_tiles(draw):
    """A raster of a tile (2..8 x 2..8) inside a frame two cells wide, with
    sources inside and outside the tile."""
    rows = draw(st.integers(2, 8))
    cols = draw(st.integers(2, 8))
    shape = (rows + 4, cols + 4)
    exact = draw(st.booleans())
    if exact:  # integer costs: with 4-connectivity every sum is exact
        cost = draw(hnp.arrays(np.float64, shape,
                               elements=st.sampled_from([0.0, 1.0, 2.0])))
    else:
        cost = draw(hnp.arrays(np.float32, shape,
                               elements=st.floats(0, 10, width=32)))
    valid = draw(hnp.arrays(np.bool_, shape,
                            elements=st.sampled_from([True] * 6 + [False])))
    inside = np.zeros(shape, bool)
    inside[2:-2, 2:-2] = True
    flat = np.flatnonzero(valid)
    if not (valid & ~inside).any():
        valid[0, 0] = True
        flat = np.flatnonzero(valid)
    outer = [p for p in flat if not inside.flat[p]]
    inner = [p for p in flat if inside.flat[p]]
    picks = draw(st.lists(st.sampled_from(outer), min_size=1, max_size=2))
    if inner:
        picks += draw(st.lists(st.sampled_from(inner), max_size=2))
    cells = np.array([divmod(int(p), shape[1]) for p in picks])
    return cost, valid, cells, exact


@settings(max_examples=10, deadline=None)
@given(framed_tiles(), st.sampled_from([4, 8, 16]),
       st.sampled_from([np.inf, 12.0]))
def test_seeded_tile_from_its_sources_then_from_outside(problem, connectivity,
                                                        max_cost):
    cost, valid, cells, exact = problem
    steps = _step_lengths(connectivity, None)
    whole = Reference(cost, valid, connectivity, steps, max_cost)
    global_d, global_h = whole.solve(cells)
    tile = (slice(2, -2), slice(2, -2))
    tile_cost, tile_valid = cost[tile], valid[tile]
    rows, cols = tile_valid.shape
    ref = Reference(tile_cost, tile_valid, connectivity, steps, max_cost)
    distance = np.where(tile_valid, np.inf, -np.inf)
    hops = np.full((rows, cols), UNREACHED_HOPS)

    # call 1: the tile's own sources
    own = [(r - 2) * cols + c - 2 for r, c in cells
           if 2 <= r < rows + 2 and 2 <= c < cols + 2]
    distance.flat[own] = 0.0
    hops.flat[own] = 0
    expected = seeded_reference(ref, distance, hops, own)
    state = _cuda.solve_seeded(tile_cost, tile_valid, distance, hops,
                               np.array(own, dtype=np.int64), connectivity,
                               steps, max_cost, phase="both")
    assert_same_state(state, expected, tile_valid)
    np.testing.assert_array_equal(state[0][~tile_valid], -np.inf)

    # call 2: the frame's final pairs offered across the tile border (as
    # the tiled path's relaxation between tiles does); cells they beat are
    # lowered and seeded
    distance, hops = (np.array(a) for a in state)
    seeds = []
    for r in range(2, rows + 2):
        for c in range(2, cols + 2):
            if not valid[r, c]:
                continue
            offers = [(global_d[nr][nc] + whole.step(i, r, c, nr, nc),
                       global_h[nr][nc] + 1)
                      for i, nr, nc in whole.neighbours(r, c)
                      if not (2 <= nr < rows + 2 and 2 <= nc < cols + 2)
                      and global_d[nr][nc] < np.inf]
            best = min(offers, default=(np.inf, 0))
            cell = (r - 2, c - 2)
            if best[0] <= max_cost and best < (distance[cell], hops[cell]):
                distance[cell], hops[cell] = best
                seeds.append((r - 2) * cols + c - 2)
    expected = seeded_reference(ref, distance, hops, seeds)
    state = _cuda.solve_seeded(tile_cost, tile_valid, distance, hops,
                               np.array(seeds, dtype=np.int64), connectivity,
                               steps, max_cost, phase="both")
    assert_same_state(state, expected, tile_valid)
    if exact and connectivity == 4:
        # no rounding: the tile now holds the whole raster's pairs
        assert_same_state(state, (np.array(global_d)[tile],
                                  np.array(global_h)[tile]), tile_valid)


@settings(max_examples=6, deadline=None)
@given(tie_problems(max_side=8), st.sampled_from([4, 8, 16]))
def test_seeded_distance_then_hops_phases(problem, connectivity):
    # the two phases as separate calls (a tiled driver that settles all
    # distances first): distances from "distance", the default (hops
    # returned as given), then hops from the sources with the distances
    # fixed
    cost, valid, cells, _ = problem
    steps = _step_lengths(connectivity, None)
    ref = Reference(cost, valid, connectivity, steps)
    d, h = ref.solve(cells)
    rows, cols = valid.shape
    seeds = np.unique(cells[:, 0] * cols + cells[:, 1])
    distance = np.full((rows, cols), np.inf)
    hops = np.full((rows, cols), 5)
    distance.flat[seeds] = 0.0
    hops.flat[seeds] = 0
    out_distance, out_hops = _cuda.solve_seeded(
        cost, valid, distance, hops, seeds, connectivity, steps, np.inf)
    np.testing.assert_array_equal(out_distance[valid], np.array(d)[valid])
    np.testing.assert_array_equal(out_hops, hops)
    hops = np.where(out_hops == 0, 0, UNREACHED_HOPS)
    out = _cuda.solve_seeded(cost, valid, out_distance, hops, seeds,
                             connectivity, steps, np.inf, phase="hops")
    np.testing.assert_array_equal(out[0], out_distance)
    assert_same_state(out, (np.array(d), np.array(h)), valid)


def test_seeded_rejects_an_unknown_phase():
    with pytest.raises(InvalidInputError, match="phase"):
        _cuda.solve_seeded(np.ones((2, 2)), np.ones((2, 2), bool),
                           np.zeros((2, 2)), np.zeros((2, 2), np.int64),
                           np.array([0]), 4, _step_lengths(4, None), np.inf,
                           phase="pairs")


# --------------------------------------------------------------------------
# The tiled path with its tiles solved on the GPU.

def interim_raster_in_tiles_of_8():
    """The not-yet-final case of INTERIM_PICTURE across tiles of 8: S, P, N,
    C in the first tile, the zero-cost detour back to Q through the tile
    below, E and T's path to F in the tiles to the right.  A tile solved
    while N still holds 1 + 2**-52 must not fix the hops of C."""
    cost = np.full((16, 16), np.nan)
    cost[0, 4:9] = [0.0, 1.0 + 2.0 ** -52, 0.0, 2.0, 0.0]   # S P N C E
    cost[1:10, 4] = 0.0          # the detour down from S ...
    cost[9, 4:7] = 0.0           # ... across the next tile row ...
    cost[2:10, 6] = 0.0          # ... and back up to Q
    cost[1, 6] = 1.0             # Q
    cost[2:10, 8] = 0.0          # T's path up to F
    cost[9, 8:11] = 0.0          # T at (9, 10)
    cost[1, 8] = 3.0             # F
    return cost, [(0, 4), (9, 10)], [1, 2]


def check_tiled_on_gpu(cost, sources, ids, connectivity):
    in_memory = cost_distance(cost, sources, connectivity=connectivity,
                              source_ids=ids, backend="cpu")
    tiled = cost_distance(cost, sources, connectivity=connectivity,
                          source_ids=ids, backend="cuda", tile_size=8)
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(getattr(tiled, name),
                                      getattr(in_memory, name), err_msg=name)
    return tiled


def test_tiled_gpu_tiles_keep_hops_off_values_not_final():
    cost, sources, ids = interim_raster_in_tiles_of_8()
    tiled = check_tiled_on_gpu(cost, sources, ids, 4)
    # E ties between C (22 hops) and F (11 hops): south to F, source T
    assert (tiled.accumulated[0, 8], tiled.direction[0, 8],
            tiled.allocation[0, 8]) == (3.0, 270.0, 2)


@settings(max_examples=5, deadline=None)
@given(tie_problems(max_side=9), st.sampled_from([4, 8, 16]),
       st.integers(1, 3))
def test_tiled_gpu_tiles_match_in_memory(problem, connectivity, scale):
    # 8 x 8 tiles over rasters up to 18 x 27 (each cell of the drawn
    # raster repeated over a block), exact ties everywhere
    cost, valid, cells, ids = problem
    block = np.ones((scale, 2 * scale))
    cost = np.kron(np.where(valid, cost.astype(np.float64), np.nan), block)
    cells = cells * [scale, 2 * scale]
    check_tiled_on_gpu(cost, [tuple(c) for c in cells], list(ids),
                       connectivity)


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_tiled_gpu_hops_through_the_halo_and_back(connectivity):
    """The tiled hops phase on the GPU (``_cuda_tiled.hops_tile``) relaxes
    the tile's frame, halo included: zero-cost plateaus (tight moves both
    ways, cycles) and barrier walls that leave tile cells joined only
    through a neighbouring tile; rasters sized from the tile constants so
    frames cross the GPU's own tiles.  Same rasters as in memory."""
    side = 2 * _cuda.TILE  # the tiled path's tile: 8 on the simulator
    shape = (2 * side + 3, 3 * side - 1)
    rng = np.random.default_rng(connectivity)
    cost = rng.integers(0, 3, shape).astype(np.float64)  # zeros: plateaus
    cost[:side - 1, side - 1] = np.nan  # a wall ending in the tile below
    cost[side + 2:, 2 * side] = np.nan
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1), (side, side + 1)]
    for cell in sources:
        cost[cell] = 1.0
    check_tiled_on_gpu(cost, sources, [1, 2, 3], connectivity)


@pytest.mark.parametrize("ids,dtype", [((5, -7), np.int32),
                                       ((2**31 - 1, 1), np.int32),
                                       ((5, 2**40), np.int64)])
def test_allocation_dtype_is_int32_when_the_ids_fit(ids, dtype):
    """Allocation is int32 when every source id fits in 32 bits, else int64,
    on the CPU and CUDA backends, in memory and tiled, with the same ids."""
    rng = np.random.default_rng(3)
    cost = rng.random((2 * _cuda.TILE + 3, 3 * _cuda.TILE + 1)) + 0.5
    cost[rng.random(cost.shape) < 0.1] = np.nan
    cost[1, 1] = cost[-2, -2] = 1.0
    sources = [(1, 1), (cost.shape[0] - 2, cost.shape[1] - 2)]
    runs = [cost_distance(cost, sources, 8, backend=backend, source_ids=ids,
                          tile_size=tile_size)
            for backend in ("cpu", "cuda") for tile_size in (None, 8)]
    for run in runs:
        assert run.allocation.dtype == dtype
        np.testing.assert_array_equal(run.allocation, runs[0].allocation)
    assert set(np.unique(runs[0].allocation).tolist()) == {0, *ids}


@pytest.mark.parametrize("case", ["1e308 pair", "1e308 row", "1e307 row",
                                  "1e308 square", "max cost", "1e300 random",
                                  "inf barriers", "plain float64"])
def test_float64_costs_on_the_device_as_on_the_cpu(case):
    """float64 costs go to the device once (CostScan: the largest cost, the
    power-of-two scaling and the overflow check's first test there): the
    same rasters as the CPU backend, or the same overflow error."""
    rng = np.random.default_rng(8)
    max_cost = None
    shape = (2 * _cuda.TILE + 1, 3 * _cuda.TILE - 1)
    cost = {"1e308 pair": np.full((1, 2), 1e308),
            "1e308 row": np.full((1, 5), 1e308),
            "1e307 row": np.full((1, 40), 1e307),
            "1e308 square": np.full((4, 4), 1e308),
            "max cost": np.full((1, 5), 1e308),
            "1e300 random": rng.random(shape) * 1e300,
            "inf barriers": np.where(rng.random(shape) < 0.2, np.inf,
                                     rng.random(shape) * 1e307),
            "plain float64": rng.random(shape) + 0.25}[case]
    if case == "max cost":
        max_cost = 1.5e308
    cost[0, 0] = 1.0
    outcomes = []
    for backend in ("cpu", "cuda"):
        try:
            result = cost_distance(cost, [(0, 0)], 8, max_cost=max_cost,
                                   backend=backend)
            outcomes.append((result.accumulated, result.direction,
                             result.allocation))
        except InvalidInputError as error:
            outcomes.append(str(error))
    if isinstance(outcomes[0], str):
        assert "largest float64" in outcomes[0]
        assert outcomes[1] == outcomes[0]
        return
    for got, expected in zip(outcomes[1], outcomes[0]):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
