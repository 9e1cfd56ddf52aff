"""Core-level tests of cost distance (no QGIS).

Three tiers: literal grids with hand-computed answers; oracles
(skimage ``MCP_Geometric`` and ``scipy.sparse.csgraph.dijkstra`` on a graph
built here, independently of the engine) on random and adversarial rasters;
and invariants every result must satisfy (following the direction raster
from any reached cell ends at a source, each step costs exactly the move,
the allocation is that source's id).
"""

import doctest
import math
import zlib

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.sparse.csgraph import dijkstra
from skimage.graph import MCP_Geometric

import gridgraph.core.costdistance as costdistance_module
from gridgraph.core import (CancelledError, InvalidInputError, cost_distance,
                            least_cost_path)
from gridgraph.core.costdistance import _cpu
from rasters import fractal_surface, maze_cost

NAN = np.nan
R2 = math.sqrt(2.0)
R5 = math.sqrt(5.0)

# Written out here, not imported, so the oracles do not share the engine's
# tables: (drow, dcol) of the rook, queen and knight moves.
ROOK = [(0, 1), (-1, 0), (0, -1), (1, 0)]
QUEEN = ROOK + [(-1, 1), (-1, -1), (1, -1), (1, 1)]
KNIGHT = QUEEN + [(-1, 2), (-2, 1), (-2, -1), (-1, -2),
                  (1, -2), (2, -1), (2, 1), (1, 2)]
MOVES = {4: ROOK, 8: QUEEN, 16: KNIGHT}


def passed_cells(drow, dcol):
    """Cells a move passes between: those whose centres lie half a cell from
    the midpoint of the segment joining the two end cells' centres (none for
    a rook or queen step, two beside a knight's move)."""
    middle_row, middle_col = drow / 2, dcol / 2
    return [(r, c) for r in range(-1, 2) for c in range(-1, 2)
            if math.hypot(r - middle_row, c - middle_col) == 0.5
            and abs(drow) + abs(dcol) == 3]


def grass_degrees_to_offset(degrees):
    """Offset of the next cell toward the source for a GRASS outdir value.

    GRASS r.cost measures degrees counter-clockwise from east (north is
    row - 1) and rounds knight's moves to multiples of 22.5 degrees.
    """
    table = {}
    for drow, dcol in KNIGHT:
        angle = math.degrees(math.atan2(-drow, dcol)) % 360.0
        angle = round(angle / 22.5) * 22.5 or 360.0
        table[angle] = (drow, dcol)
    return table[float(degrees)]


def cpu(cost, sources, **options):
    return cost_distance(cost, sources, backend="cpu", **options)


# ---------------------------------------------------------------------------
# Oracles
# ---------------------------------------------------------------------------

def scipy_cost_distance(cost, valid, sources, connectivity, cell_size=(1, 1)):
    """Multi-source least costs by scipy's Dijkstra on an explicit graph."""
    rows, cols = cost.shape
    xres, yres = cell_size
    index = np.arange(rows * cols).reshape(rows, cols)
    tails, heads = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    weights = [np.empty(0)]
    for drow, dcol in MOVES[connectivity]:
        r0, r1 = max(0, -drow), min(rows, rows - drow)
        c0, c1 = max(0, -dcol), min(cols, cols - dcol)
        if r0 >= r1 or c0 >= c1:
            continue
        here = (slice(r0, r1), slice(c0, c1))
        there = (slice(r0 + drow, r1 + drow), slice(c0 + dcol, c1 + dcol))
        both = valid[here] & valid[there]
        # a knight's move needs the two cells it passes between valid too
        for prow, pcol in passed_cells(drow, dcol):
            both &= valid[r0 + prow:r1 + prow, c0 + pcol:c1 + pcol]
        length = math.hypot(drow * yres, dcol * xres)
        tails.append(index[here][both])
        heads.append(index[there][both])
        weights.append((cost[here][both].astype(np.float64)
                        + cost[there][both].astype(np.float64)) / 2 * length)
    graph = scipy.sparse.csr_matrix(
        (np.concatenate(weights), (np.concatenate(tails), np.concatenate(heads))),
        shape=(rows * cols, rows * cols))  # explicit zero weights stay edges
    flat_sources = [r * cols + c for r, c in sources]
    distance = dijkstra(graph, indices=flat_sources, min_only=True)
    distance[np.isinf(distance)] = np.nan
    return distance.reshape(rows, cols)


def skimage_cost_distance(cost, valid, sources, connectivity):
    """Multi-source least costs by skimage's MCP_Geometric (4 or 8 moves)."""
    costs = np.where(valid, cost.astype(np.float64), np.inf)
    if connectivity == 8:
        mcp = MCP_Geometric(costs, fully_connected=True)
    else:
        mcp = MCP_Geometric(costs, offsets=ROOK)
    distance, _ = mcp.find_costs([tuple(s) for s in sources])
    distance = np.array(distance, dtype=np.float64)
    distance[np.isinf(distance)] = np.nan
    return distance


def assert_same_costs(result, expected):
    assert np.array_equal(np.isnan(result), np.isnan(expected)), \
        "reached cells differ from the oracle's"
    # the absolute term only matters for subnormal costs, where two
    # equal-cost paths may round one unit of 5e-324 apart
    np.testing.assert_allclose(result, expected, rtol=1e-9, atol=1e-300)


def assert_consistent(result, cost, valid, sources, ids, connectivity,
                      cell_size=(1, 1)):
    """Invariants tying accumulated, direction and allocation together."""
    accumulated, direction, allocation = (
        result.accumulated, result.direction, result.allocation)
    rows, cols = cost.shape
    xres, yres = cell_size
    reached = ~np.isnan(accumulated)
    assert np.array_equal(reached, ~np.isnan(direction))
    assert not (reached & ~valid).any(), "a barrier cell was reached"
    assert np.all(allocation[~reached] == 0)
    assert accumulated.dtype == np.float64
    # int32 when every id fits in 32 bits, on every backend (the contract)
    assert allocation.dtype == (np.int32 if all(
        -2**31 <= i < 2**31 for i in ids) else np.int64)
    assert direction.dtype == np.float32
    first_id = {}
    for (r, c), source_id in zip(sources, ids):
        first_id.setdefault((r, c), source_id)
    for (r, c), source_id in first_id.items():
        assert accumulated[r, c] == 0.0
        assert direction[r, c] == 0.0
        assert allocation[r, c] == source_id
    allowed = set(MOVES[connectivity])
    for r, c in zip(*np.nonzero(reached)):
        if direction[r, c] == 0:
            assert (r, c) in first_id, f"({r}, {c}) is marked as a source"
            continue
        drow, dcol = grass_degrees_to_offset(direction[r, c])
        assert (drow, dcol) in allowed
        nr, nc = r + drow, c + dcol
        assert 0 <= nr < rows and 0 <= nc < cols and reached[nr, nc]
        for prow, pcol in passed_cells(drow, dcol):
            assert valid[r + prow, c + pcol], \
                f"the step from ({r}, {c}) passes beside a barrier"
        step = (float(cost[r, c]) + float(cost[nr, nc])) / 2 \
            * math.hypot(drow * yres, dcol * xres)
        assert math.isclose(accumulated[r, c], accumulated[nr, nc] + step,
                            rel_tol=1e-12, abs_tol=1e-300)
    # Every chain ends at a source whose id is the allocation: walk them all,
    # memoising the root of each visited cell.
    root = {}
    for start in zip(*np.nonzero(reached)):
        chain = []
        cell = start
        while cell not in root:
            chain.append(cell)
            if direction[cell] == 0:
                root[cell] = cell
                break
            drow, dcol = grass_degrees_to_offset(direction[cell])
            cell = (cell[0] + drow, cell[1] + dcol)
            assert len(chain) <= rows * cols, "the direction raster has a cycle"
        for visited in chain:
            root[visited] = root[cell]
        assert allocation[start] == first_id[root[start]]


# ---------------------------------------------------------------------------
# Literal grids
# ---------------------------------------------------------------------------

def test_uniform_cost_four_connected_is_manhattan_distance():
    out = cpu(np.ones((3, 4)), [(0, 0)], connectivity=4)
    np.testing.assert_array_equal(out.accumulated, [[0, 1, 2, 3],
                                                    [1, 2, 3, 4],
                                                    [2, 3, 4, 5]])
    np.testing.assert_array_equal(out.allocation, np.ones((3, 4)))


def test_uniform_cost_eight_connected_uses_diagonals():
    out = cpu(np.ones((3, 4)), [(0, 0)], connectivity=8)
    np.testing.assert_allclose(out.accumulated, [
        [0, 1, 2, 3],
        [1, R2, 1 + R2, 2 + R2],
        [2, 1 + R2, 2 * R2, 1 + 2 * R2]], rtol=1e-15)


def test_step_cost_is_mean_of_both_cells_times_length():
    cost = np.array([[1.0, 3.0, 5.0],
                     [7.0, 2.0, 4.0]])
    out = cpu(cost, [(0, 0)], connectivity=8)
    # (0,1): (1+3)/2; (1,1): (1+2)/2*sqrt2 beats 2 + (3+2)/2; (0,2): 2+4;
    # (1,0): (1+7)/2 = 4 beats the diagonal detour; (1,2): via (1,1).
    d11 = 1.5 * R2
    np.testing.assert_allclose(out.accumulated, [
        [0.0, 2.0, 6.0],
        [4.0, d11, d11 + 3.0]], rtol=1e-15)


def test_wall_with_a_gap_and_nodata_barrier():
    nodata = -9999
    cost = np.ones((5, 5), dtype=np.int16)
    cost[0:4, 2] = nodata
    out = cpu(cost, [(0, 0)], connectivity=4, nodata=nodata)
    np.testing.assert_array_equal(out.accumulated, [
        [0, 1, NAN, 11, 12],
        [1, 2, NAN, 10, 11],
        [2, 3, NAN, 9, 10],
        [3, 4, NAN, 8, 9],
        [4, 5, 6, 7, 8]])
    assert np.isnan(out.direction[0:4, 2]).all()
    assert (out.allocation[0:4, 2] == 0).all()


def test_diagonal_moves_do_not_need_the_corner_cells():
    # Like GRASS r.cost and skimage MCP, a diagonal step only needs its two
    # end cells valid, so a diagonal wall of barriers leaks.
    cost = np.array([[1.0, NAN],
                     [NAN, 1.0]])
    out = cpu(cost, [(0, 0)], connectivity=8)
    np.testing.assert_allclose(out.accumulated, [[0, NAN], [NAN, R2]])
    out = cpu(cost, [(0, 0)], connectivity=4)
    np.testing.assert_array_equal(out.accumulated, [[0, NAN], [NAN, NAN]])


def test_barrier_splitting_the_raster_leaves_the_far_side_unreached():
    # A one-cell-thick wall stops every connectivity: a knight's move may
    # not jump it (it would pass between two wall cells).
    cost = np.ones((3, 5))
    cost[:, 2] = NAN
    for connectivity in (4, 8, 16):
        out = cpu(cost, [(1, 0)], connectivity=connectivity)
        corner = 2.0 if connectivity == 4 else R2
        np.testing.assert_array_equal(out.accumulated, [
            [1, corner, NAN, NAN, NAN],
            [0, 1, NAN, NAN, NAN],
            [1, corner, NAN, NAN, NAN]])
        assert (out.allocation[:, 2:] == 0).all()
        assert (out.allocation[:, :2] == 1).all()
        assert np.isnan(out.direction[:, 2:]).all()


def test_knight_moves_pass_a_wall_only_through_its_gap():
    # Column 2 is a wall with a gap at (2, 2).  Every value right of the
    # wall comes through the gap: (2,2) = 2*sqrt2 by two diagonals; the
    # knight's moves (1,1)->(2,3), (0,1)->(1,3) and (2,1)->(1,3) pass beside
    # the wall cell (1, 2) and are refused (they would give sqrt2 + sqrt5,
    # 1 + sqrt5 and sqrt5 + sqrt5).
    cost = np.ones((3, 5))
    cost[0:2, 2] = NAN
    out = cpu(cost, [(0, 0)], connectivity=16)
    np.testing.assert_allclose(out.accumulated, [
        [0, 1, NAN, 3 * R2 + 1, 4 * R2],
        [1, R2, NAN, 3 * R2, 2 * R2 + R5],
        [2, R5, 2 * R2, 2 * R2 + 1, 2 * R2 + 2]], rtol=1e-14)
    np.testing.assert_array_equal(out.direction, [
        [0, 180, NAN, 270, 225],
        [90, 135, NAN, 225, 202.5],
        [90, 112.5, 135, 180, 180]])


def test_one_barrier_cell_blocks_exactly_the_knight_moves_beside_it():
    # From the centre of a 5x5 raster with a barrier east of it, the knight's
    # moves to (1, 4) and (3, 4) pass beside the barrier and are refused;
    # the other six knight's moves, and diagonal moves past the barrier,
    # are one step each.
    cost = np.ones((5, 5))
    cost[2, 3] = NAN
    out = cpu(cost, [(2, 2)], connectivity=16)
    np.testing.assert_allclose(out.accumulated, [
        [2 * R2, R5, 2, R5, 2 * R2],
        [R5, R2, 1, R2, 1 + R2],
        [2, 1, 0, NAN, 2 * R2],
        [R5, R2, 1, R2, 1 + R2],
        [2 * R2, R5, 2, R5, 2 * R2]], rtol=1e-14)
    # (1, 4) and (3, 4) come one column on from (1, 3) and (3, 3); (2, 4)
    # diagonally from one of them, as the knight's moves from (1, 2) and
    # (3, 2) pass beside the barrier too
    assert out.direction[1, 4] == 180 and out.direction[3, 4] == 180
    assert out.direction[2, 4] in (135, 225)
    assert out.direction[0, 3] == 247.5 and out.direction[4, 3] == 112.5


def test_knight_step_needs_the_cells_it_passes_between():
    # Corner to corner of a 2x3 raster is a single knight's move, refused
    # here because it passes between two barriers.
    cost = np.array([[1.0, NAN, NAN],
                     [NAN, NAN, 3.0]])
    out = cpu(cost, [(0, 0)], connectivity=16)
    np.testing.assert_array_equal(out.accumulated, [[0, NAN, NAN],
                                                    [NAN, NAN, NAN]])
    cost = np.array([[1.0, 5.0, NAN],
                     [NAN, 7.0, 3.0]])
    out = cpu(cost, [(0, 0)], connectivity=16)
    np.testing.assert_allclose(out.accumulated, [[0, 3, NAN],
                                                 [NAN, 4 * R2, 2 * R5]],
                               rtol=1e-14)
    assert out.direction[1, 2] == 157.5


def test_max_cost_cuts_off_farther_cells():
    out = cpu(np.ones((1, 6)), [(0, 0)], connectivity=4, max_cost=3)
    np.testing.assert_array_equal(out.accumulated, [[0, 1, 2, 3, NAN, NAN]])
    np.testing.assert_array_equal(out.direction,
                                  [[0, 180, 180, 180, NAN, NAN]])
    np.testing.assert_array_equal(out.allocation, [[1, 1, 1, 1, 0, 0]])
    out = cpu(np.ones((1, 6)), [(0, 0)], connectivity=4, max_cost=2.5)
    np.testing.assert_array_equal(out.accumulated, [[0, 1, 2, NAN, NAN, NAN]])


def test_max_cost_does_not_stop_cheaper_detours():
    # The direct step to (0,1) costs 50 > max_cost, the detour 4 <= max_cost.
    cost = np.array([[1.0, 99.0, 1.0],
                     [1.0, 1.0, 1.0]])
    cost_to_right = np.array([[1.0, 1.0, 1.0]])
    out = cpu(cost, [(0, 0)], connectivity=4, max_cost=4)
    np.testing.assert_array_equal(out.accumulated, [[0, NAN, 4], [1, 2, 3]])
    out = cpu(cost_to_right, [(0, 0)], connectivity=4, max_cost=1)
    np.testing.assert_array_equal(out.accumulated, [[0, 1, NAN]])


def test_two_sources_split_the_raster_by_allocation():
    cost = np.ones((2, 6))
    out = cpu(cost, [(0, 0), (0, 5)], connectivity=4, source_ids=[10, 20])
    np.testing.assert_array_equal(out.accumulated, [[0, 1, 2, 2, 1, 0],
                                                    [1, 2, 3, 3, 2, 1]])
    np.testing.assert_array_equal(out.allocation, [[10, 10, 10, 20, 20, 20],
                                                   [10, 10, 10, 20, 20, 20]])


def test_default_source_ids_count_from_one_and_a_repeat_keeps_the_first():
    cost = np.ones((1, 6))
    out = cpu(cost, [(0, 0), (0, 5), (0, 0)], connectivity=4)
    np.testing.assert_array_equal(out.allocation, [[1, 1, 1, 2, 2, 2]])
    out = cpu(cost, [(0, 0), (0, 0)], connectivity=4, source_ids=[7, 9])
    np.testing.assert_array_equal(out.allocation, [[7, 7, 7, 7, 7, 7]])


def test_source_raster_ids_are_its_values():
    cost = np.ones((1, 6))
    sources = np.array([[5, 0, 0, 0, 0, -3]])
    out = cpu(cost, sources, connectivity=4)
    np.testing.assert_array_equal(out.accumulated, [[0, 1, 2, 2, 1, 0]])
    np.testing.assert_array_equal(out.allocation, [[5, 5, 5, -3, -3, -3]])
    mask = np.zeros((1, 6), dtype=bool)
    mask[0, 2] = True
    out = cpu(cost, mask, connectivity=4)
    np.testing.assert_array_equal(out.accumulated, [[2, 1, 0, 1, 2, 3]])
    np.testing.assert_array_equal(out.allocation, np.ones((1, 6)))


def test_sixteen_connectivity_knight_step_costs_sqrt5():
    out = cpu(np.ones((3, 3)), [(0, 0)], connectivity=16)
    np.testing.assert_allclose(out.accumulated, [
        [0, 1, 2],
        [1, R2, R5],
        [2, R5, 2 * R2]], rtol=1e-15)
    np.testing.assert_array_equal(out.direction, [
        [0, 180, 180],
        [90, 135, 157.5],
        [90, 112.5, 135]])


def test_all_sixteen_directions_in_grass_degrees():
    # From the centre of a 5x5 raster every 16-neighbour is reached by one
    # direct step (direct steps are strictly cheaper than any detour here).
    out = cpu(np.ones((5, 5)), [(2, 2)], connectivity=16)
    expected = np.array([
        [NAN, 292.5, NAN, 247.5, NAN],
        [337.5, 315, 270, 225, 202.5],
        [NAN, 360, 0, 180, NAN],
        [22.5, 45, 90, 135, 157.5],
        [NAN, 67.5, NAN, 112.5, NAN]], dtype=np.float32)
    single_steps = ~np.isnan(expected)
    np.testing.assert_array_equal(out.direction[single_steps],
                                  expected[single_steps])
    # the remaining cells are two straight or diagonal steps away
    np.testing.assert_allclose(out.accumulated[[0, 0, 2, 2, 4, 4], [0, 4, 0, 4, 0, 4]],
                               [2 * R2, 2 * R2, 2, 2, 2 * R2, 2 * R2])


def test_directions_eight_connected_point_to_the_next_cell():
    out = cpu(np.ones((3, 3)), [(1, 1)], connectivity=8)
    np.testing.assert_array_equal(out.direction, [[315, 270, 225],
                                                  [360, 0, 180],
                                                  [45, 90, 135]])
    out = cpu(np.ones((5, 1)), [(2, 0)], connectivity=4)
    np.testing.assert_array_equal(out.direction.ravel(), [270, 270, 0, 90, 90])


def test_cell_size_gives_map_units():
    out = cpu(np.ones((2, 2)), [(0, 0)], connectivity=8, cell_size=(10, 20))
    np.testing.assert_allclose(out.accumulated, [[0, 10],
                                                 [20, math.hypot(10, 20)]])
    out = cpu(np.full((3, 3), 2.0), [(0, 0)], connectivity=16,
              cell_size=(10, -20))  # a north-up geotransform has yres < 0
    assert math.isclose(out.accumulated[1, 2], 2 * math.hypot(20, 20))
    assert math.isclose(out.accumulated[2, 1], 2 * math.hypot(40, 10))


def test_least_cost_path_follows_the_corridor_back_to_the_source():
    cost = np.array([[1.0, 1.0, 1.0, 1.0],
                     [NAN, NAN, NAN, 1.0],
                     [1.0, 1.0, 1.0, 1.0]])
    out = cpu(cost, [(0, 0)], connectivity=8)
    path = least_cost_path(out, 2, 0)
    np.testing.assert_array_equal(path, [(2, 0), (2, 1), (2, 2), (1, 3),
                                         (0, 2), (0, 1), (0, 0)])
    assert math.isclose(out.accumulated[2, 0], 4 + 2 * R2)
    np.testing.assert_array_equal(least_cost_path(out, 0, 0), [(0, 0)])
    assert least_cost_path(out, 1, 0) is None
    with pytest.raises(InvalidInputError, match="outside"):
        least_cost_path(out, 3, 0)


def test_zero_costs_give_zero_distance_where_connected():
    cost = np.zeros((3, 4))
    cost[1, 1:] = NAN
    cost[2, 3] = 5.0
    out = cpu(cost, [(0, 0)], connectivity=4)
    np.testing.assert_array_equal(out.accumulated, [[0, 0, 0, 0],
                                                    [0, NAN, NAN, NAN],
                                                    [0, 0, 0, 2.5]])


def test_single_cell_raster():
    out = cpu(np.array([[7.0]]), [(0, 0)], connectivity=16)
    np.testing.assert_array_equal(out.accumulated, [[0.0]])
    np.testing.assert_array_equal(out.direction, [[0.0]])
    np.testing.assert_array_equal(out.allocation, [[1]])


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.uint32,
                                   np.float16, np.float32, np.float64,
                                   ">f8", ">i2"])
def test_integer_and_float_inputs_give_the_same_distances(dtype):
    base = np.array([[1, 4, 2, 9, 3],
                     [5, 0, 7, 1, 1],
                     [2, 3, 250, 6, 8]])
    expected = cpu(base.astype(np.float64), [(1, 1), (2, 4)]).accumulated
    out = cpu(base.astype(dtype), [(1, 1), (2, 4)])
    np.testing.assert_array_equal(out.accumulated, expected)


def test_non_contiguous_and_memmap_inputs_are_read_not_modified(tmp_path):
    cost = fractal_surface((23, 31), seed=4).astype(np.float64)
    expected = cpu(cost, [(3, 5)]).accumulated

    transposed = np.ascontiguousarray(cost.T).T  # Fortran order
    strided = np.repeat(cost, 2, axis=1)[:, ::2]
    for view in (transposed, strided):
        np.testing.assert_array_equal(cpu(view, [(3, 5)]).accumulated, expected)

    path = tmp_path / "cost.f64"
    writable = np.memmap(path, dtype=np.float64, mode="w+", shape=cost.shape)
    writable[...] = cost
    writable.flush()
    del writable
    mapped = np.memmap(path, dtype=np.float64, mode="r", shape=cost.shape)
    np.testing.assert_array_equal(cpu(mapped, [(3, 5)]).accumulated, expected)


def test_input_arrays_are_not_modified():
    cost = fractal_surface((17, 19), seed=3).astype(np.float64)
    cost[4:9, 7] = NAN
    sources = np.array([[0, 0], [16, 18]])
    cost_before, sources_before = cost.copy(), sources.copy()
    cpu(cost, sources, connectivity=16, max_cost=500.0)
    np.testing.assert_array_equal(cost, cost_before)
    np.testing.assert_array_equal(sources, sources_before)


def test_doctest_example_runs():
    failures, _ = doctest.testmod(costdistance_module, raise_on_error=False)
    assert failures == 0


# ---------------------------------------------------------------------------
# Errors, progress and cancellation
# ---------------------------------------------------------------------------

def test_negative_cost_is_an_error_naming_the_cell():
    cost = np.ones((3, 3))
    cost[1, 2] = -0.5
    with pytest.raises(InvalidInputError, match=r"negative.*row 1, column 2"):
        cpu(cost, [(0, 0)])


def test_all_nodata_raster_is_an_error():
    with pytest.raises(InvalidInputError, match="no valid cell"):
        cpu(np.full((3, 3), NAN), [(0, 0)])
    with pytest.raises(InvalidInputError, match="no valid cell"):
        cpu(np.full((2, 2), -1, dtype=np.int16), [(0, 0)], nodata=-1)


def test_missing_sources_are_an_error():
    with pytest.raises(InvalidInputError, match="no source"):
        cpu(np.ones((3, 3)), [])
    with pytest.raises(InvalidInputError, match="no source"):
        cpu(np.ones((3, 3)), np.zeros((3, 3), dtype=bool))


def test_sources_outside_the_raster_are_listed():
    with pytest.raises(InvalidInputError,
                       match=r"outside.*\(row 3, col 0\).*\(row 0, col -1\)"):
        cpu(np.ones((3, 3)), [(1, 1), (3, 0), (0, -1)])


def test_sources_on_barriers_are_listed():
    cost = np.ones((3, 3))
    cost[0, 0] = cost[2, 1] = NAN
    with pytest.raises(InvalidInputError,
                       match=r"every source.*\(row 0, col 0\), \(row 2, col 1\)"):
        cpu(cost, [(0, 0), (2, 1)])
    with pytest.raises(InvalidInputError, match=r"1 source.*\(row 2, col 1\)"):
        cpu(cost, [(1, 1), (2, 1)])


@pytest.mark.parametrize("connectivity", [0, 6, 9, 32, 8.5, "eight"])
def test_bad_connectivity_is_an_error(connectivity):
    with pytest.raises(InvalidInputError, match="connectivity"):
        cpu(np.ones((3, 3)), [(0, 0)], connectivity=connectivity)


def test_progress_false_cancels():
    with pytest.raises(CancelledError):
        cpu(np.ones((20, 20)), [(0, 0)], progress=lambda fraction: False)


def test_search_resumes_across_chunks_and_grows_its_heap(monkeypatch):
    cost = fractal_surface((61, 47), seed=9).astype(np.float64)
    cost[10:50, 20] = NAN
    sources = [(30, 5), (0, 46), (60, 0)]
    expected = cpu(cost, sources, connectivity=16)

    monkeypatch.setattr(_cpu, "POPS_PER_CHUNK", 7)
    monkeypatch.setattr(_cpu, "INITIAL_HEAP_CAPACITY", 1)
    fractions = []
    out = cpu(cost, sources, connectivity=16, progress=fractions.append)
    np.testing.assert_array_equal(out.accumulated, expected.accumulated)
    np.testing.assert_array_equal(out.allocation, expected.allocation)
    assert_consistent(out, cost, ~np.isnan(cost), sources, [1, 2, 3], 16)
    settled = int((~np.isnan(cost)).sum())
    assert len(fractions) >= settled // 7
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    calls = []

    def cancel_midway(fraction):
        calls.append(fraction)
        return fraction < 0.5

    with pytest.raises(CancelledError):
        cpu(cost, sources, connectivity=16, progress=cancel_midway)
    assert 0.5 <= calls[-1] < 0.6  # stopped within a chunk of the request


def test_64_bit_cell_indices_give_the_same_result(monkeypatch):
    # Rasters past 2**31 cells index with int64; force that path on a small one.
    cost = maze_cost((41, 37), seed=5)
    sources = [(0, 0), (40, 36), (20, 18)]
    expected = cpu(cost, sources, connectivity=8)
    monkeypatch.setattr(_cpu, "index_dtype", lambda n_cells: np.int64)
    out = cpu(cost, sources, connectivity=8)
    np.testing.assert_array_equal(out.accumulated, expected.accumulated)
    np.testing.assert_array_equal(out.direction, expected.direction)
    np.testing.assert_array_equal(out.allocation, expected.allocation)


# ---------------------------------------------------------------------------
# Oracles on random and adversarial rasters
# ---------------------------------------------------------------------------

ORACLE_SETTINGS = settings(max_examples=100, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])

cost_values = st.one_of(
    st.floats(0.0, 1000.0, allow_nan=False, width=64),
    st.sampled_from([0.0, 1.0, 2.0, 3.0]),       # plateaus and ties
    st.just(NAN),                                 # barriers
    st.floats(1e-6, 1e-3))


@st.composite
def rasters_with_sources(draw, max_side=12):
    shape = draw(st.tuples(st.integers(1, max_side), st.integers(1, max_side)))
    cost = draw(hnp.arrays(np.float64, shape, elements=cost_values))
    valid = ~np.isnan(cost)
    assume(valid.any())
    cells = np.argwhere(valid)
    picks = draw(st.lists(st.integers(0, len(cells) - 1), min_size=1, max_size=4))
    sources = [tuple(int(v) for v in cells[p]) for p in picks]
    return cost, valid, sources


@ORACLE_SETTINGS
@given(rasters_with_sources(), st.sampled_from([4, 8]))
def test_matches_skimage_mcp_geometric(case, connectivity):
    cost, valid, sources = case
    out = cpu(cost, sources, connectivity=connectivity)
    assert_same_costs(out.accumulated,
                      skimage_cost_distance(cost, valid, sources, connectivity))
    assert_consistent(out, cost, valid, sources,
                      range(1, len(sources) + 1), connectivity)


@ORACLE_SETTINGS
@given(rasters_with_sources(), st.sampled_from([4, 8, 16]),
       st.sampled_from([(1.0, 1.0), (2.5, 0.5), (30.0, 30.0)]))
def test_matches_scipy_dijkstra(case, connectivity, cell_size):
    cost, valid, sources = case
    ids = list(range(100, 100 + len(sources)))
    out = cpu(cost, sources, connectivity=connectivity, cell_size=cell_size,
              source_ids=ids)
    assert_same_costs(out.accumulated, scipy_cost_distance(
        cost, valid, sources, connectivity, cell_size))
    assert_consistent(out, cost, valid, sources, ids, connectivity, cell_size)


@ORACLE_SETTINGS
@given(rasters_with_sources(), st.sampled_from([4, 8, 16]),
       st.floats(0.01, 3000.0))
def test_max_cost_keeps_exactly_the_cells_within_it(case, connectivity, limit):
    cost, valid, sources = case
    out = cpu(cost, sources, connectivity=connectivity, max_cost=limit)
    full = scipy_cost_distance(cost, valid, sources, connectivity)
    expected = np.where(full <= limit, full, NAN)
    assert_same_costs(out.accumulated, expected)
    assert_consistent(out, cost, valid, sources,
                      range(1, len(sources) + 1), connectivity)


ADVERSARIAL = {
    "fractal": lambda shape, seed: fractal_surface(shape, seed).astype(np.float64),
    "maze": lambda shape, seed: maze_cost(shape, seed),
    "plateau": lambda shape, seed: np.ones(shape),
    "ties": lambda shape, seed: np.random.default_rng(seed).integers(
        0, 3, shape).astype(np.float64),
    "holes": lambda shape, seed: np.where(
        np.random.default_rng(seed).random(shape) < 0.35, NAN,
        np.random.default_rng(seed + 1).uniform(0, 10, shape)),
    "split": lambda shape, seed: np.where(
        np.arange(shape[1])[None, :] % 7 == 3, NAN, np.ones(shape)),
    "spikes": lambda shape, seed: np.where(
        np.random.default_rng(seed).random(shape) < 0.1, 1e6,
        np.random.default_rng(seed + 2).uniform(0, 1e-3, shape)),
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
@pytest.mark.parametrize("shape", [(1, 40), (40, 1), (31, 45), (2, 2)])
def test_adversarial_rasters_match_the_oracles(kind, shape):
    rng = np.random.default_rng(zlib.crc32(repr((kind, shape)).encode()))
    cost = ADVERSARIAL[kind](shape, int(rng.integers(1000)))
    valid = ~np.isnan(cost)
    assert valid.any()
    cells = np.argwhere(valid)
    sources = [tuple(int(v) for v in cells[i])
               for i in rng.choice(len(cells), size=min(3, len(cells)),
                                   replace=False)]
    for connectivity in (4, 8, 16):
        out = cpu(cost, sources, connectivity=connectivity)
        assert_same_costs(out.accumulated, scipy_cost_distance(
            cost, valid, sources, connectivity))
        if connectivity != 16:
            assert_same_costs(out.accumulated, skimage_cost_distance(
                cost, valid, sources, connectivity))
        assert_consistent(out, cost, valid, sources, [1, 2, 3], connectivity)
        assert_paths_cost_their_accumulated_cost(out, cost, sources,
                                                 connectivity, rng)


def assert_paths_cost_their_accumulated_cost(result, cost, sources,
                                             connectivity, rng, count=10):
    """least_cost_path from random reached cells: legal moves, ends at a
    source, and its summed step costs equal the accumulated cost."""
    reached = np.argwhere(~np.isnan(result.accumulated))
    for r, c in reached[rng.choice(len(reached), size=min(count, len(reached)),
                                   replace=False)]:
        path = least_cost_path(result, int(r), int(c))
        assert tuple(path[0]) == (r, c)
        assert tuple(path[-1]) in {tuple(s) for s in sources}
        total = 0.0
        for (r0, c0), (r1, c1) in zip(path[:-1], path[1:]):
            assert (r1 - r0, c1 - c0) in MOVES[connectivity]
            total += (cost[r0, c0] + cost[r1, c1]) / 2 * math.hypot(r1 - r0,
                                                                 c1 - c0)
        assert math.isclose(total, result.accumulated[r, c], rel_tol=1e-9,
                            abs_tol=1e-300)


def test_large_fractal_matches_mcp_geometric():
    cost = fractal_surface((257, 193), seed=11)
    out = cpu(cost, [(128, 96)], connectivity=8)
    expected = skimage_cost_distance(cost, np.ones(cost.shape, bool),
                                     [(128, 96)], 8)
    assert_same_costs(out.accumulated, expected)


# --------------------------------------------------------------------------
# ties: the canonical predecessor and allocation (tests/costdistance_reference)


@st.composite
def tie_heavy_case(draw):
    """Small costs from {0, 1, 2} (zero-cost plateaus, many equal paths),
    some barriers, up to four sources with distinct ids, one maybe listed
    twice with another id."""
    rows = draw(st.integers(2, 9))
    cols = draw(st.integers(2, 9))
    cost = draw(hnp.arrays(np.float32, (rows, cols),
                           elements=st.sampled_from([0.0, 1.0, 2.0])))
    barrier = draw(hnp.arrays(np.bool_, (rows, cols),
                              elements=st.sampled_from([False] * 4 + [True])))
    cells = draw(st.lists(st.tuples(st.integers(0, rows - 1),
                                    st.integers(0, cols - 1)),
                          min_size=1, max_size=4, unique=True))
    barrier[tuple(np.array(cells).T)] = False
    ids = list(range(11, 11 + len(cells)))
    if draw(st.booleans()):  # a repeated cell keeps its first id
        cells = cells + [cells[0]]
        ids = ids + [99]
    return cost, barrier, cells, ids


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=tie_heavy_case(), connectivity=st.sampled_from([4, 8, 16]))
def test_ties_follow_the_canonical_rule(case, connectivity):
    """Direction and allocation on exact ties are the rule's, not the
    search order's (so every backend and tile size can agree)."""
    from costdistance_reference import reference
    cost, barrier, cells, ids = case
    raster = np.where(barrier, np.nan, cost).astype(np.float32)
    result = cost_distance(raster, np.array(cells), connectivity=connectivity,
                           source_ids=np.array(ids), backend="cpu")
    sources = [(r, c, i) for (r, c), i in zip(cells, ids)]
    accumulated, predecessor, allocation = reference(
        cost, ~barrier, sources, connectivity)
    np.testing.assert_array_equal(result.accumulated, accumulated)
    expected_direction = np.full(cost.shape, np.nan, np.float32)
    reached = predecessor >= 0
    expected_direction[reached] = costdistance_module.GRASS_DIRECTION_DEGREES[
        predecessor[reached]]
    expected_direction[predecessor == -2] = 0.0
    np.testing.assert_array_equal(result.direction, expected_direction)
    np.testing.assert_array_equal(result.allocation, allocation)


def test_ties_literal_plateau():
    """A zero-cost 3 x 3 plateau fed from a source in the corner, by hand.

    All costs are 0, so every cell ties on cost and the steps decide: a
    cell's steps are its Chebyshev distance to (0, 0), and its predecessor
    is the neighbour one step closer with the lowest code in the order
    east 0, north 1, west 2, south 3, NE 4, NW 5, SW 6, SE 7.  E.g. (1, 2)
    has (1, 1) to the west (code 2) and (0, 1) to the north-west (code 5):
    west, 180 degrees; (2, 1) has (1, 1) to the north (code 1): 90.
    """
    cost = np.zeros((3, 3), np.float32)
    result = cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu")
    assert (result.accumulated == 0).all()
    expected = np.array([[0, 180, 180],
                         [90, 135, 180],
                         [90, 90, 135]], np.float32)
    np.testing.assert_array_equal(result.direction, expected)


@st.composite
def rounding_heavy_case(draw):
    """Costs mixing 1e15 with small values: past 2**53 accumulated costs
    round, so many steps add nothing and different paths round to the same
    sum (ties that exact arithmetic would not have)."""
    rows = draw(st.integers(2, 8))
    cols = draw(st.integers(2, 8))
    cost = draw(hnp.arrays(np.float64, (rows, cols), elements=st.sampled_from(
        [3e15, 1e15, 0.3, 1.0, 7.0, 0.0])))
    cells = draw(st.lists(st.tuples(st.integers(0, rows - 1),
                                    st.integers(0, cols - 1)),
                          min_size=1, max_size=3, unique=True))
    return cost, cells


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=rounding_heavy_case(), connectivity=st.sampled_from([4, 8, 16]))
def test_rounding_ties_follow_the_canonical_rule(case, connectivity):
    from costdistance_reference import reference
    cost, cells = case
    ids = np.arange(1, len(cells) + 1) * 10
    result = cost_distance(cost, np.array(cells), connectivity=connectivity,
                           source_ids=ids, backend="cpu")
    accumulated, predecessor, allocation = reference(
        cost, np.ones(cost.shape, bool),
        [(r, c, i) for (r, c), i in zip(cells, ids)], connectivity)
    np.testing.assert_array_equal(result.accumulated, accumulated)
    expected_direction = np.full(cost.shape, np.nan, np.float32)
    reached = predecessor >= 0
    expected_direction[reached] = costdistance_module.GRASS_DIRECTION_DEGREES[
        predecessor[reached]]
    expected_direction[predecessor == -2] = 0.0
    np.testing.assert_array_equal(result.direction, expected_direction)
    np.testing.assert_array_equal(result.allocation, allocation)
