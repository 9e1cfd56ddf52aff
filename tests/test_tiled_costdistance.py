"""Tiled cost distance: exact (bit-identical accumulated costs) for every
tile size, on mazes, plateaus, nodata and sources on tile corners; scratch
files removed on success, failure and cancel."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core import CancelledError, InvalidInputError, cost_distance
from gridgraph.core.costdistance import (GRASS_DIRECTION_DEGREES,
                                         NEIGHBOUR_OFFSETS, tiled)

from faults_helpers import small_disk  # noqa: F401 - a fixture
from rasters import fractal_surface, maze_cost

def in_memory(cost, sources, **options):
    return cost_distance(cost, sources, backend="cpu", **options)


def _neighbour_views(array, dr, dc):
    """``array`` shifted so that entry (r, c) holds array[r + dr, c + dc]
    (NaN / -1 outside), as a float64 array."""
    rows, cols = array.shape
    shifted = np.full((rows, cols), np.nan)
    r0, r1 = max(0, -dr), min(rows, rows - dr)
    c0, c1 = max(0, -dc), min(cols, cols - dc)
    shifted[r0:r1, c0:c1] = array[r0 + dr:r1 + dr, c0 + dc:c1 + dc]
    return shifted


def tight_predecessors(result, cost, connectivity):
    """Per cell, how many neighbours give exactly the cell's distance with
    the in-memory kernel's expression (more than one: a tie)."""
    half = 0.5 * np.hypot(NEIGHBOUR_OFFSETS[:connectivity, 0],
                          NEIGHBOUR_OFFSETS[:connectivity, 1])
    acc = result.accumulated
    cost = cost.astype(np.float64)
    count = np.zeros(cost.shape, dtype=np.int64)
    for i, (dr, dc) in enumerate(NEIGHBOUR_OFFSETS[:connectivity]):
        step = _neighbour_views(acc, dr, dc) + (
            _neighbour_views(cost, dr, dc) + cost) * half[i]
        count += step == acc
    return count


def assert_valid_tree(result, cost, connectivity):
    """Every direction points at a neighbour whose distance plus the step
    is exactly the cell's, with the same allocation; sources have 0."""
    half = 0.5 * np.hypot(NEIGHBOUR_OFFSETS[:connectivity, 0],
                          NEIGHBOUR_OFFSETS[:connectivity, 1])
    acc = result.accumulated
    cost = cost.astype(np.float64)
    assert np.array_equal(np.isnan(result.direction), np.isnan(acc))
    assert (result.allocation[np.isnan(acc)] == 0).all()
    assert (acc[result.direction == 0] == 0).all()
    checked = (result.direction == 0) | np.isnan(acc)
    allocation = result.allocation.astype(np.float64)
    for i, (dr, dc) in enumerate(NEIGHBOUR_OFFSETS[:connectivity]):
        here = result.direction == GRASS_DIRECTION_DEGREES[i]
        step = _neighbour_views(acc, dr, dc) + (
            _neighbour_views(cost, dr, dc) + cost) * half[i]
        assert (step[here] == acc[here]).all()
        assert (_neighbour_views(allocation, dr, dc)[here]
                == allocation[here]).all()
        checked |= here
    assert checked.all()


def assert_same(cost, sources, tile_sizes=(8, 16, 64), **options):
    """Accumulated costs, directions and allocations identical to the
    in-memory run, also where two paths cost exactly the same (both follow
    the canonical tie rule), and a valid least-cost tree."""
    connectivity = options.get("connectivity", 8)
    expected = in_memory(cost, sources, **options)
    results = []
    for tile_size in tile_sizes:
        result = cost_distance(cost, sources, backend="cpu",
                               tile_size=tile_size, **options)
        message = f"tile_size={tile_size}"
        np.testing.assert_array_equal(result.accumulated, expected.accumulated,
                                      err_msg=message)
        np.testing.assert_array_equal(result.direction, expected.direction,
                                      err_msg=message)
        np.testing.assert_array_equal(result.allocation, expected.allocation,
                                      err_msg=message)
        assert_valid_tree(result, cost, connectivity)
        results.append(result)
    return expected, results


def test_literal_uniform_cost_from_a_tile_corner():
    # 4-connected unit costs: the accumulated cost is the Manhattan distance
    # from the source at (7, 7), the last cell of the first 8 x 8 tile
    cost = np.ones((10, 10))
    result = cost_distance(cost, [(7, 7)], connectivity=4, tile_size=8,
                           backend="cpu")
    np.testing.assert_array_equal(result.accumulated[7], [7, 6, 5, 4, 3, 2, 1, 0, 1, 2])
    np.testing.assert_array_equal(result.accumulated[:, 9],
                                  [9, 8, 7, 6, 5, 4, 3, 2, 3, 4])
    rows, cols = np.indices(cost.shape)
    np.testing.assert_array_equal(result.accumulated,
                                  abs(rows - 7) + abs(cols - 7))
    assert result.direction[7, 7] == 0 and result.allocation.max() == 1


def test_literal_barrier_wall_with_a_gap_in_another_tile():
    # a NaN wall along row 8 (the first row of the second tile row) with a
    # gap at column 9: paths to the bottom rows detour through the gap
    cost = np.ones((12, 12))
    cost[8, :] = np.nan
    cost[8, 9] = 1.0
    result = cost_distance(cost, [(0, 0)], connectivity=4, tile_size=8,
                           backend="cpu")
    assert result.accumulated[7, 9] == 16
    assert result.accumulated[8, 9] == 17
    assert result.accumulated[9, 0] == 27  # 17 + 1 down + 9 left
    assert np.isnan(result.accumulated[8, 0])


@pytest.mark.parametrize("wall_column", [7, 8])
def test_literal_knight_moves_do_not_jump_a_wall_on_a_tile_border(
        wall_column):
    # A one-cell NaN wall in the last column of the first tile column (7)
    # or the first of the second (8): every knight's move over it would
    # pass between two wall cells, so nothing beyond it is reached.
    cost = np.ones((10, 12))
    cost[:, wall_column] = np.nan
    result = cost_distance(cost, [(4, 0)], connectivity=16, tile_size=8,
                           backend="cpu")
    assert np.isnan(result.accumulated[:, wall_column:]).all()
    assert (result.allocation[:, wall_column:] == 0).all()
    assert not np.isnan(result.accumulated[:, :wall_column]).any()
    # with a gap the far side is reached, through the gap only
    cost[9, wall_column] = 1.0
    result = cost_distance(cost, [(4, 0)], connectivity=16, tile_size=8,
                           backend="cpu")
    np.testing.assert_array_equal(np.isnan(result.accumulated),
                                  np.isnan(cost))
    assert_same(cost, [(4, 0)], tile_sizes=(8,), connectivity=16)


def test_knight_moves_beside_a_barrier_at_a_tile_corner():
    # One barrier cell in turn at each of the 4 x 4 cells around the corner
    # shared by four 8 x 8 tiles: the cells a knight's move passes between
    # then lie in its start tile, its end tile or a third tile.
    cost = fractal_surface((16, 16), seed=5).astype(np.float64)
    for row in range(6, 10):
        for col in range(6, 10):
            blocked = cost.copy()
            blocked[row, col] = np.nan
            for source in [(5, 5), (10, 10), (5, 10), (10, 5)]:
                assert_same(blocked, [source], tile_sizes=(8,),
                            connectivity=16)


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_source_on_tile_corners(connectivity):
    cost = fractal_surface((70, 61), seed=3).astype(np.float64)
    # sources on the corners shared by four 8-, 16- and 64-cell tiles
    for source in [(63, 63), (64, 64), (15, 16), (63, 60)]:
        if source[1] < 61:
            assert_same(cost, [source], connectivity=connectivity)


@pytest.mark.parametrize("indexed_heap", [True, False])
@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_maze_crosses_tiles_many_times(connectivity, indexed_heap,
                                       monkeypatch):
    # both tile solves (the in-memory search's indexed heap, the default,
    # and the lazy-deletion binary heap) seeded again and again from a
    # tile's last state
    from gridgraph.core.costdistance.tiled import solve
    monkeypatch.setattr(solve, "INDEXED_HEAP_SOLVE", indexed_heap)
    cost = maze_cost((61, 67), seed=2)
    expected, results = assert_same(cost, [(0, 0), (60, 66)],
                                    connectivity=connectivity)
    # the corridors leave and re-enter tiles: some tiles are solved again
    solved_8 = results[0]
    assert solved_8.tile_solves > 8 * 9


def _fixed_point(cost, valid, seeds_at, offsets, step_lengths, max_cost):
    """The least distances of one tile (4- or 8-connected: ``offsets``)
    given a distance at some cells, by Bellman-Ford relaxation with the
    search's expression term for term: the brute-force oracle of a tile
    solve."""
    rows, cols = cost.shape
    cost64 = np.where(valid, cost, 0).astype(np.float64)
    distance = np.full(cost.shape, np.inf)
    for (r, c), d in seeds_at.items():
        distance[r, c] = min(distance[r, c], d)
    distance[~valid] = -np.inf
    changed = True
    while changed:
        changed = False
        for r in range(rows):
            for c in range(cols):
                if not valid[r, c]:
                    continue
                for i, (dr, dc) in enumerate(offsets):
                    nr, nc = r - dr, c - dc  # the move from (nr, nc)
                    if not (0 <= nr < rows and 0 <= nc < cols) \
                            or not np.isfinite(distance[nr, nc]):
                        continue
                    candidate = distance[nr, nc] + (
                        cost64[nr, nc] + cost64[r, c]) * 0.5 \
                        * step_lengths[i]
                    if candidate <= max_cost and candidate < distance[r, c]:
                        distance[r, c] = candidate
                        changed = True
    return distance


# cost dtypes with their nodata: numba reads the first five as they are,
# the last three (float16, byte-swapped) are converted first
TILE_SOLVE_DTYPES = [("float64", -1), ("float32", None), ("uint8", 255),
                     ("int16", -1), ("uint64", 7), ("<f2", None),
                     (">f8", -1), (">i2", -1)]


@pytest.mark.parametrize("dtype, nodata", TILE_SOLVE_DTYPES)
@pytest.mark.parametrize("connectivity", [4, 8, 16])
@pytest.mark.parametrize("seed", range(4))
def test_indexed_and_binary_tile_solves_agree_step_by_step(
        connectivity, seed, dtype, nodata, monkeypatch):
    # one tile solved again and again with lower band distances each time:
    # the indexed-heap solve (from raw costs and the last state) and the
    # binary-heap solve give the same state after every step, and for 4
    # and 8 neighbours the brute-force fixed point of every seed so far
    from gridgraph.core.costdistance import KNIGHT_PASSED_CELLS
    from gridgraph.core.costdistance.tiled import solve
    from gridgraph.core.tiling import ArraySource, Window
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(3, 14)), int(rng.integers(3, 14))
    window = Window(0, 0, rows, cols)
    if seed % 2 or np.dtype(dtype).kind in "iu":
        cost = rng.integers(0, 4, (rows, cols)).astype(dtype)  # ties
    else:
        cost = rng.uniform(0.5, 9, (rows, cols)).astype(dtype)
    barrier = rng.random(cost.shape) < 0.2
    cost[barrier] = np.nan if nodata is None else nodata
    valid = ~barrier
    offsets = np.ascontiguousarray(NEIGHBOUR_OFFSETS[:connectivity])
    passed = np.ascontiguousarray(KNIGHT_PASSED_CELLS[:connectivity])
    step_lengths = np.hypot(offsets[:, 0], offsets[:, 1])
    max_cost = np.inf if seed < 3 else 12.0
    margin = 2 if connectivity == 16 else 1
    band_r, band_c = solve.band_cells(rows, cols, margin)
    source_local = np.flatnonzero(valid.reshape(-1))[:1].astype(np.int64)
    source = ArraySource(cost)
    states = {True: None, False: None}
    seeds_at = {divmod(int(k), cols): 0.0 for k in source_local}
    received = np.full(band_r.size, np.inf)
    for step in range(5):
        # lower distances arrive at a few band cells (none at some steps)
        pick = rng.random(band_r.size) < (0.3 if step != 2 else 0.0)
        received = np.where(pick, np.minimum(
            received, rng.uniform(0, 40, band_r.size)), received)
        for b in np.flatnonzero(pick):
            key = (int(band_r[b]), int(band_c[b]))
            seeds_at[key] = min(seeds_at.get(key, np.inf), received[b])
        for indexed in (True, False):
            monkeypatch.setattr(solve, "INDEXED_HEAP_SOLVE", indexed)
            before = states[indexed]
            kept = None if before is None else (before[0].copy(),
                                                before[1].copy())
            distance, hops, pending = solve.solve_tile(
                source, window, nodata, before,
                source_local if step == 0 else source_local[:0],
                received.copy(), margin, offsets, step_lengths, max_cost,
                passed)
            assert pending == np.inf
            if before is not None:  # the input state is left as it was
                assert np.array_equal(before[0], kept[0])
                assert np.array_equal(before[1], kept[1])
            states[indexed] = (distance, hops)
        assert np.array_equal(states[True][0], states[False][0])
        assert np.array_equal(states[True][1], states[False][1])
        if connectivity in (4, 8):
            expected = _fixed_point(cost, valid, seeds_at,
                                    offsets, step_lengths, max_cost)
            assert np.array_equal(states[True][0].reshape(rows, cols),
                                  expected)


@pytest.mark.parametrize("dtype", ["<f2", ">f8", ">i2"])
@pytest.mark.parametrize("connectivity", [8, 16])
def test_costs_numba_cannot_read(dtype, connectivity):
    # float16 and byte-swapped costs are read as float64 by the tile tasks
    # (numba takes neither): the in-memory rasters, bit for bit
    cost = (fractal_surface((37, 29), seed=6) % 7 + 1).astype(dtype)
    cost[10:14, 5:9] = -1
    assert_same(cost, [(3, 4), (30, 20)], tile_sizes=(8, 16), nodata=-1,
                connectivity=connectivity)
    # the accumulated cost alone: the distance rounds, then the outputs
    expected = in_memory(cost, [(3, 4)], nodata=-1,
                         connectivity=connectivity)
    result = cost_distance(cost, [(3, 4)], nodata=-1, backend="cpu",
                           connectivity=connectivity, tile_size=8,
                           outputs=("accumulated",))
    np.testing.assert_array_equal(result.accumulated, expected.accumulated)


def test_plateau_ties_and_zero_costs():
    plateau = np.full((40, 37), 2.0)
    expected, _ = assert_same(plateau, [(20, 20), (3, 30)], connectivity=8)
    assert (tight_predecessors(expected, plateau, 8) > 1).any()  # ties exist
    zeros = np.zeros((30, 30))
    zeros[10:20, 10:20] = 1.0
    assert_same(zeros, [(0, 0)], connectivity=8)


def test_nodata_heavy_raster_with_unreachable_pockets():
    rng = np.random.default_rng(11)
    cost = rng.uniform(1, 9, (80, 75)).astype(np.float32)
    cost[rng.random(cost.shape) < 0.45] = -1
    cost[5, 5] = 3.0
    expected, _ = assert_same(cost, [(5, 5)], nodata=-1, connectivity=8)
    assert np.isnan(expected.accumulated).sum() > (cost == -1).sum()


def test_max_cost():
    cost = fractal_surface((50, 50), seed=8).astype(np.float64) / 100
    expected, _ = assert_same(cost, [(25, 25)], max_cost=40.0,
                              connectivity=16)
    assert np.isnan(expected.accumulated).any()
    assert np.nanmax(expected.accumulated) <= 40.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 8, 16]), st.sampled_from([8, 16]),
       st.integers(1, 4), st.booleans(), st.floats(0, 0.4))
def test_random_rasters(rows, cols, seed, connectivity, tile_size, n_sources,
                        integer_costs, barrier_share):
    rng = np.random.default_rng(seed)
    if integer_costs:  # small integers: many exact ties
        cost = rng.integers(0, 4, (rows, cols)).astype(np.float64)
    else:
        cost = rng.uniform(0.1, 10, (rows, cols))
    cost[rng.random((rows, cols)) < barrier_share] = np.nan
    sources = np.column_stack([rng.integers(0, rows, n_sources),
                               rng.integers(0, cols, n_sources)])
    cost[sources[:, 0], sources[:, 1]] = rng.uniform(0.1, 10, n_sources)
    assert_same(cost, sources, tile_sizes=(tile_size,),
                connectivity=connectivity,
                source_ids=rng.permutation(n_sources) + 1)


def test_source_raster_memmap_and_out_dir(tmp_path):
    cost = fractal_surface((90, 70), seed=4).astype(np.float32)
    source_raster = np.zeros(cost.shape, dtype=np.int32)
    source_raster[10, 10] = 7
    source_raster[80, 65] = 9
    source_raster[40, 33] = -1  # source_nodata: not a source
    np.save(tmp_path / "cost.npy", cost)
    np.save(tmp_path / "sources.npy", source_raster)
    expected = in_memory(cost, source_raster, source_nodata=-1)
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(np.load(tmp_path / "cost.npy", mmap_mode="r"),
                           np.load(tmp_path / "sources.npy", mmap_mode="r"),
                           source_nodata=-1, tile_size=16, out_dir=out,
                           backend="cpu")
    assert isinstance(result.accumulated, np.memmap)
    np.testing.assert_array_equal(result.accumulated, expected.accumulated)
    np.testing.assert_array_equal(result.allocation, expected.allocation)
    assert set(np.unique(result.allocation)) == {7, 9}
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


@pytest.mark.parametrize("tile_size", [None, 8])
def test_errors_match_in_memory(tile_size):
    cost = np.ones((20, 20))
    cost[12, 3] = -2
    cost[15, 15] = -1
    with pytest.raises(InvalidInputError,
                       match=r"2 negative cell\(s\), first at row 12, column 3"):
        cost_distance(cost, [(0, 0)], tile_size=tile_size)
    cost = np.ones((20, 20))
    cost[9, 9] = np.nan
    with pytest.raises(InvalidInputError, match=r"1 source\(s\) lie on barrier"):
        cost_distance(cost, [(0, 0), (9, 9)], tile_size=tile_size)
    with pytest.raises(InvalidInputError, match="every source lies on a barrier"):
        cost_distance(cost, [(9, 9)], tile_size=tile_size)
    with pytest.raises(InvalidInputError, match="no valid cell"):
        cost_distance(np.full((9, 9), np.nan), [(0, 0)], tile_size=tile_size)


def scratch_contents(parent):
    return [os.path.join(folder, name) for folder, _, names in os.walk(parent)
            for name in names]


def test_scratch_used_and_removed_on_success_failure_and_cancel(
        tmp_path, monkeypatch):
    parent = tmp_path / "scratch"
    parent.mkdir()
    monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(parent))
    cost = maze_cost((64, 64), seed=5)
    out = tmp_path / "out"
    out.mkdir()
    # a 0.05 MB limit leaves room for one cached tile state: the others go
    # to scratch files between solves
    options = dict(connectivity=8, tile_size=16, memory_limit_mb=0.05,
                   backend="cpu")
    seen = []

    def watch(fraction):
        seen.append(len(scratch_contents(parent)))

    expected = in_memory(cost, [(0, 0)], connectivity=8)
    result = cost_distance(cost, [(0, 0)], progress=watch, out_dir=out,
                           **options)
    np.testing.assert_array_equal(result.accumulated, expected.accumulated)
    assert max(seen) > 0, "the states never went to scratch"
    assert scratch_contents(parent) == [] and os.listdir(parent) == []
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]
    out = tmp_path / "out2"
    out.mkdir()
    options["out_dir"] = out

    def cancel_midway(fraction):
        return fraction < 0.5

    def cancel_while_writing(fraction):
        return fraction < 0.9

    for cancel in (cancel_midway, cancel_while_writing):
        with pytest.raises(CancelledError):
            cost_distance(cost, [(0, 0)], progress=cancel, **options)
        assert os.listdir(parent) == []
        assert os.listdir(out) == []  # no partial outputs either

    calls = []
    original = tiled.solve_tile

    def failing_solve(*args):
        calls.append(1)
        if len(calls) == 5:
            raise MemoryError("simulated failure in a tile solve")
        return original(*args)

    monkeypatch.setattr(tiled.solve, "solve_tile", failing_solve)
    with pytest.raises(MemoryError):
        cost_distance(cost, [(0, 0)], **options)
    assert os.listdir(parent) == [] and os.listdir(out) == []


def test_band_geometry():
    for rows, cols, margin in [(8, 8, 1), (8, 8, 2), (3, 9, 2), (1, 5, 2),
                               (16, 3, 1), (2, 2, 2)]:
        band_r, band_c = tiled.band_cells(rows, cols, margin)
        r, c = np.indices((rows, cols))
        in_band = (r < margin) | (r >= rows - margin) | (c < margin) | \
            (c >= cols - margin)
        assert len(band_r) == in_band.sum()
        assert set(zip(band_r.tolist(), band_c.tolist())) == \
            set(zip(r[in_band].tolist(), c[in_band].tolist()))
        # listed in band order: the k-th cell sits at band position k
        assert [tiled._band_position(a, b, rows, cols, margin)
                for a, b in zip(band_r, band_c)] == list(range(len(band_r)))


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_ties_across_tiles_with_several_sources(connectivity):
    """Zero-cost and constant plateaus crossing many tiles, split among
    four sources (one on a tile corner, one listed twice): every cell ties
    between many predecessors, and trees leave and re-enter tiles."""
    cost = np.ones((45, 52))
    cost[5:40, 10:30] = 0.0          # a zero-cost plateau over 3 x 3 tiles
    cost[20, :45] = np.nan           # a wall with a gap
    cost[30:33, 35:50] = 2.0
    sources = np.array([(7, 7), (0, 51), (44, 0), (25, 20), (7, 7)])
    ids = np.array([5, 6, 7, 8, 9])
    expected, _ = assert_same(cost, sources, tile_sizes=(8, 16),
                              connectivity=connectivity, source_ids=ids)
    assert (tight_predecessors(expected, np.nan_to_num(cost), connectivity)
            > 1).sum() > 100
    assert set(np.unique(expected.allocation)) == {0, 5, 6, 7, 8}


def test_maze_with_integer_costs_and_ties():
    cost = maze_cost((70, 66), seed=3)
    cost = np.where(np.isfinite(cost), np.round(cost), cost)
    open_cells = np.argwhere(np.isfinite(cost))
    sources = open_cells[[0, len(open_cells) // 2, -1]]
    assert_same(cost, sources, tile_sizes=(8, 16), connectivity=8,
                source_ids=np.array([3, 1, 2]))


def tiles_with_ties(expected, cost, tile_size, connectivity=8):
    """The tile numbers (row-major) holding a cell with two or more tight
    neighbours, from the in-memory run's distances."""
    tie = tight_predecessors(expected, cost, connectivity) > 1
    rows, cols = np.nonzero(tie)
    tile_cols = -(-cost.shape[1] // tile_size)
    return set((rows // tile_size * tile_cols + cols // tile_size).tolist())


def tree_task_spy(monkeypatch, tile_size=16, tile_cols=5):
    """Record (function name, tile number (row-major), use_hops, tie count
    returned) of each output and label task (wrapping the functions the
    rounds pass to their tasks, which hand GPU states to _cuda_tiled),
    for a grid of ``tile_size`` tiles in ``tile_cols`` columns."""
    calls = []
    for name in ("tile_outputs", "tile_band_labels"):
        real = getattr(tiled, name)

        def spy(cost_source, window, *arguments, _real=real, _name=name,
                **options):
            result = _real(cost_source, window, *arguments, **options)
            calls.append((_name, window.row // tile_size * tile_cols
                          + window.col // tile_size,
                          options.get("use_hops", True), int(result[-1])))
            return result

        monkeypatch.setattr(tiled, name, spy)
    # tasks that write their blocks themselves (an out_dir) reach
    # tile_outputs through tiled.trees.write_outputs
    monkeypatch.setattr(tiled.trees, "tile_outputs", tiled.tile_outputs)
    return calls


@pytest.mark.parametrize("ids", [None, [4, 4, 4], [4, 7, 4]])
@pytest.mark.parametrize("out_dir", [False, True])
@pytest.mark.parametrize("pool", [False, True])
def test_hops_run_only_when_cells_tie(tmp_path, monkeypatch, ids, out_dir,
                                      pool):
    """Without a tie (real-valued costs) the hops rounds never run; with a
    plateau they run once the trees read without them meet a tile with a
    tie: that round stops there (in this process at that very tile; in a
    pool its tasks in flight finish), and every tile it did not finish
    without a tie is done again with the hops, no other.  The in-memory
    rasters every time (HOPS_ONLY_FOR_TIES)."""
    import concurrent.futures

    from gridgraph.core.costdistance import rounds
    rng = np.random.default_rng(11)
    smooth = rng.random((70, 66)) + 0.5
    plateau = smooth.copy()
    plateau[40:50, 10:20] = 1.0  # ties in the tiles it covers only
    sources = [(3, 4), (60, 50), (35, 33)]
    tile = 16
    reached = set(range((-(-70 // tile)) * (-(-66 // tile))))
    calls = tree_task_spy(monkeypatch)
    executor = concurrent.futures.ThreadPoolExecutor(2) if pool else None
    for cost, ties in ((smooth, False), (plateau, True)):
        expected = in_memory(cost, sources, source_ids=ids)
        tie_tiles = tiles_with_ties(expected, cost, tile)
        assert bool(tie_tiles) == ties and len(tie_tiles) < len(reached) / 2
        calls.clear()
        folder = None
        if out_dir:
            folder = tmp_path / f"out{len(tie_tiles)}"
            folder.mkdir()
        result = cost_distance(cost, sources, source_ids=ids, backend="cpu",
                               tile_size=tile, out_dir=folder,
                               executor=executor)
        for name in ("accumulated", "direction", "allocation"):
            np.testing.assert_array_equal(getattr(result, name),
                                          getattr(expected, name),
                                          err_msg=name)
        assert (result.hops_visits > 0) == bool(tie_tiles)
        # (without ids each source is its own)
        several = len(set(np.unique(expected.allocation)) - {0}) > 1
        # the round that reads the trees first: labels with several ids
        first = "tile_band_labels" if several else "tile_outputs"
        without = {t: found for name, t, use, found in calls
                   if name == first and not use}
        again = sorted(t for name, t, use, _ in calls if name == first and use)
        assert sum(name == first and not use for name, _, use, _ in calls) \
            == len(without)  # each tile once
        assert {t for t, found in without.items() if found} <= tie_tiles
        finished = {t for t, found in without.items() if not found}
        assert again == sorted(reached - finished)
        assert tie_tiles <= set(again)
        if tie_tiles and not pool:  # row-major: stopped at the first tie
            assert sorted(without) == list(range(min(tie_tiles) + 1))
        elif not tie_tiles:
            assert set(without) == reached and not again
        if several:  # the outputs, after the hops where they were run
            assert sorted(t for name, t, _, _ in calls
                          if name == "tile_outputs") == sorted(reached)
    monkeypatch.setattr(rounds, "HOPS_ONLY_FOR_TIES", False)
    calls.clear()
    result = cost_distance(smooth, sources, source_ids=ids, backend="cpu",
                           tile_size=tile, executor=executor)
    assert result.hops_visits > 0
    assert all(use for _, _, use, _ in calls)
    if executor is not None:
        executor.shutdown()


@pytest.mark.parametrize("outputs", [("accumulated", "allocation"),
                                     ("allocation",)])
@pytest.mark.parametrize("ids", [[3, 3], [3, 5]])
def test_allocation_of_one_id_reads_no_tree(monkeypatch, ids, outputs):
    """Accumulated cost and allocation without the direction: with one
    source id no tree is read (the id wherever a source reaches, 0 on
    nodata and past the maximum cost) and no hops round runs although the
    raster ties; with two the trees are read.  The in-memory rasters."""
    calls = tree_task_spy(monkeypatch)
    trees = []
    real = tiled.tile_trees
    monkeypatch.setattr(tiled.trees, "tile_trees",
                        lambda *a, **k: trees.append(1) or real(*a, **k))
    cost = np.random.default_rng(4).random((50, 45)) + 0.5
    cost[20:30, 5:15] = 1.0  # ties
    cost[5:9, 30:34] = np.nan
    sources = [(3, 4), (40, 40)]
    options = dict(source_ids=ids, max_cost=30.0)
    expected = in_memory(cost, sources, **options)
    assert tiles_with_ties(expected, cost, 16)
    assert (expected.allocation == 0).sum() > np.isnan(cost).sum()
    result = cost_distance(cost, sources, backend="cpu", tile_size=16,
                           outputs=outputs, **options)
    for name in ("accumulated", "direction", "allocation"):
        if name in outputs:
            np.testing.assert_array_equal(getattr(result, name),
                                          getattr(expected, name))
        else:
            assert getattr(result, name) is None
    one = len(set(ids)) == 1
    assert (result.hops_visits == 0) == one
    assert bool(trees) != one
    made = [t for name, t, _, _ in calls if name == "tile_outputs"]
    assert made  # the output tasks ran
    if one:  # each tile once, none with a tie to make again
        assert len(set(made)) == len(made)
        assert all(found == 0 for _, _, _, found in calls)


@pytest.mark.parametrize("ids", [[1, 1], [1, 2]])
@pytest.mark.parametrize("connectivity", [4, 16])
def test_ties_first_with_knight_moves_max_cost_and_nodata(connectivity, ids,
                                                          tmp_path):
    """The trees read without the hops, the round stopped at the first tie
    and the hops run after it: the in-memory rasters with 4- and
    16-connectivity, a maximum cost, nodata holes and a zero-cost plateau
    (ties both ways along its moves)."""
    rng = np.random.default_rng(7)
    cost = rng.random((60, 52)) + 0.5
    cost[rng.random(cost.shape) < 0.05] = np.nan
    cost[38:46, 33:43] = 0.0
    sources = [(2, 3), (50, 45)]
    options = dict(source_ids=ids, connectivity=connectivity, max_cost=20.0)
    expected = in_memory(cost, sources, **options)
    assert tiles_with_ties(expected, cost, 16, connectivity)
    assert np.isnan(expected.accumulated).sum() > np.isnan(cost).sum()
    result = cost_distance(cost, sources, backend="cpu", tile_size=16,
                           out_dir=tmp_path, **options)
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(getattr(result, name),
                                      getattr(expected, name), err_msg=name)
    assert result.hops_visits > 0


@pytest.mark.parametrize("ids", [[1, 1], [1, 2]])
def test_progress_stays_monotone_when_late_ties_run_the_hops(ids):
    """The hops and the tiles made again after the first pass of the
    output round (one id) or of the label round (two) report inside the
    spans left for them: one bar that never moves back."""
    cost = np.random.default_rng(2).random((50, 45)) + 0.5
    cost[20:30, 5:15] = 1.0
    sources = [(3, 4), (40, 40)]
    assert tiles_with_ties(in_memory(cost, sources, source_ids=ids), cost, 16)
    seen = []
    result = cost_distance(cost, sources, source_ids=ids, backend="cpu",
                           tile_size=16, progress=seen.append)
    assert result.hops_visits > 0
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("mapped", [True, False])
def test_outputs_written_through_mappings_or_pwrite(tmp_path, monkeypatch,
                                                    mapped):
    """The output round's tasks write their blocks into out_dir (in threads,
    windows not aligned to pages, several sources), and the driver the
    fill blocks of the tiles no source reaches (behind a nodata wall):
    through shared mappings of the reserved files (MAPPED_OUTPUT_WRITES)
    or with pwrite, the in-memory rasters either way, nothing else
    left."""
    import concurrent.futures

    from gridgraph.core import tile_io
    from gridgraph.core.costdistance import rounds
    monkeypatch.setattr(rounds, "MAPPED_OUTPUT_WRITES", mapped)
    modes = []
    real_sink = tile_io.NpySink.__init__

    def sink(self, *arguments, **options):
        real_sink(self, *arguments, **options)
        modes.append(self.mapped)

    monkeypatch.setattr(tile_io.NpySink, "__init__", sink)
    cost = fractal_surface((77, 91), seed=5).astype(np.float32)
    cost[:, 40] = np.nan  # a wall: the tiles from column 48 are unreached
    sources = [(3, 4), (70, 30), (40, 17)]
    expected = in_memory(cost, sources, source_ids=[5, 9, 2])
    assert np.isnan(expected.accumulated[:, 48:]).all()
    assert (expected.allocation[:, 48:] == 0).all()
    out = tmp_path / "out"
    out.mkdir()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = cost_distance(cost, sources, source_ids=[5, 9, 2],
                               backend="cpu", tile_size=16, executor=pool,
                               out_dir=out)
    assert modes == [mapped] * 3
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(np.load(out / f"{name}.npy"),
                                      getattr(expected, name), err_msg=name)
        assert isinstance(getattr(result, name), np.memmap)
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


def test_outputs_reserved_before_the_solves_on_a_full_disk(small_disk):
    """The output files are made, their space reserved (posix_fallocate),
    right after the survey: on a disk too small for them the run fails
    before any tile is solved, with the message naming the disk, the size
    and the fix, and nothing left there (never a SIGBUS in a writer)."""
    from gridgraph.core import DiskFullError
    # 20 bytes a cell in the three outputs: 3.2 MB on a 2 MB disk
    cost = fractal_surface((400, 400), seed=3).astype(np.float32)
    marks = []

    def progress(fraction):
        marks.append(fraction)
        return True

    with pytest.raises(DiskFullError) as error:
        cost_distance(cost, [(5, 5)], tile_size=64, out_dir=str(small_disk),
                      backend="cpu", progress=progress)
    message = str(error.value)
    assert f"the disk holding {small_disk} is full" in message
    assert "MB were needed" in message
    assert "free space there, or choose another folder" in message
    assert marks and max(marks) <= 0.1  # the survey's span, no solve
    assert os.listdir(small_disk) == []


@pytest.mark.parametrize("tile_size", [None, 8])
def test_outputs_subset(tile_size, tmp_path):
    """Only the requested rasters are computed and written; they equal the
    full run's."""
    cost = fractal_surface((40, 30), seed=2).astype(np.float32)
    full = in_memory(cost, [(3, 4), (30, 20)])
    for outputs in (("accumulated",), ("allocation",), ("direction",
                                                         "accumulated")):
        out = tmp_path / "_".join(outputs) / str(tile_size)
        out.mkdir(parents=True)
        result = cost_distance(cost, [(3, 4), (30, 20)], backend="cpu",
                               tile_size=tile_size, outputs=outputs,
                               out_dir=out)
        for name in ("accumulated", "direction", "allocation"):
            got = getattr(result, name)
            if name in outputs:
                np.testing.assert_array_equal(got, getattr(full, name))
            else:
                assert got is None
        if tile_size:
            assert sorted(os.listdir(out)) == sorted(f"{o}.npy"
                                                     for o in outputs)
    with pytest.raises(InvalidInputError, match="outputs must name"):
        cost_distance(cost, [(3, 4)], outputs=("distance",))


@settings(max_examples=40, deadline=None)
@given(st.integers(9, 40), st.integers(9, 40), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 8, 16]))
def test_rounding_ties_across_tiles(rows, cols, seed, connectivity):
    """Costs mixing 1e15 with small values: accumulated costs round, so
    paths through tiles solved with costs that are not final yet can round
    to the same sum as the final ones; steps must still be the in-memory
    ones (they are counted only once costs are final)."""
    rng = np.random.default_rng(seed)
    cost = rng.choice([3e15, 1e15, 0.3, 1.0, 7.0, 0.0], size=(rows, cols))
    sources = np.column_stack([rng.integers(0, rows, 3),
                               rng.integers(0, cols, 3)])
    assert_same(cost, sources, tile_sizes=(8,), connectivity=connectivity,
                source_ids=np.array([4, 5, 6]))


def test_next_tile_waits_for_a_lower_neighbour_in_flight():
    # 4 x 4 tiles; tile 0 is in flight with key 1; waiting: its neighbour 1
    # (key 2) and tile 3 (key 5, not a neighbour of tile 0)
    from gridgraph.core.costdistance import rounds
    from gridgraph.core.tiling import TileGrid
    neighbours = rounds.tile_neighbours(TileGrid((32, 32), 8))
    assert sorted(set(neighbours[0].tolist())) == [0, 1, 4, 5]
    assert sorted(neighbours[5].tolist()) == [0, 1, 2, 4, 6, 8, 9, 10]
    keys = np.full(16, np.inf)
    flight = np.full(16, np.inf)
    flight[0] = 1.0
    keys[1], keys[3] = 2.0, 5.0
    assert rounds._next_tile(keys, flight, 10.0, False, neighbours) == 3
    assert rounds._next_tile(keys, flight, 10.0, False, None) == 1
    assert rounds._next_tile(keys, flight, 2.0, False, neighbours) == -1
    # nothing in flight: the least key starts whatever its neighbours
    flight[0] = np.inf
    assert rounds._next_tile(keys, flight, 0.0, True, neighbours) == 1
    # a neighbour in flight with a higher key does not hold a tile back
    flight[0] = 3.0
    assert rounds._next_tile(keys, flight, 10.0, False, neighbours) == 1


def test_next_tile_prefers_a_tile_whose_worker_is_free():
    # waiting: tiles 1 (key 2), 3 (key 5), 6 (key 30); tile 0 in flight
    from gridgraph.core.costdistance import rounds
    keys = np.full(16, np.inf)
    flight = np.full(16, np.inf)
    flight[0] = 1.0
    keys[1], keys[3], keys[6] = 2.0, 5.0, 30.0
    # tile 1's worker busy: the next within the slack whose worker is free
    assert rounds._next_tile(keys, flight, 10.0, False, None,
                             lambda t: t != 1) == 3
    # none free within the slack: still the least tile (it queues there)
    assert rounds._next_tile(keys, flight, 10.0, False, None,
                             lambda t: t == 6) == 1
    assert rounds._next_tile(keys, flight, 10.0, False, None,
                             lambda t: False) == 1
    # nothing in flight: the least key, wherever its state is
    flight[0] = np.inf
    assert rounds._next_tile(keys, flight, 10.0, True, None,
                             lambda t: t != 1) == 1


def _settle_cases():
    rng = np.random.default_rng(5)
    ties = rng.integers(1, 3, (45, 41)).astype(np.float64)  # costs 1 and 2
    zeros = np.zeros((40, 44))
    zeros[rng.random(zeros.shape) < 0.3] = 1.0
    zeros[12:30, 20] = -1  # a wall of nodata
    plateau = np.full((36, 36), 3.0)
    return [(ties, [(0, 0), (44, 40), (22, 5)], 8),
            (zeros, [(0, 0), (39, 43)], 16),
            (plateau, [(17, 17), (2, 33)], 4)]


@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("settle", [0.05, 0.5, 1])
@pytest.mark.parametrize("pool", [False, True])
def test_settle_bound_gives_the_unbounded_solves_result(case, settle, pool,
                                                        monkeypatch):
    # a solve settles only up to its bound (the rest pending): a tiny bound
    # makes every tile come back many times; the outputs are still those of
    # the unbounded solves and of the in-memory run, bit for bit, on ties,
    # zero costs and nodata, one task at a time or four at once
    from concurrent.futures import ThreadPoolExecutor
    from gridgraph.core.costdistance import rounds
    cost, sources, connectivity = _settle_cases()[case]
    options = dict(connectivity=connectivity, nodata=-1,
                   source_ids=np.arange(1, len(sources) + 1))
    expected = in_memory(cost, sources, **options)
    monkeypatch.setattr(rounds, "SETTLE_DELTA_TILES", None)
    unbounded = cost_distance(cost, sources, backend="cpu", tile_size=8,
                              **options)
    monkeypatch.setattr(rounds, "SETTLE_DELTA_TILES", settle)
    executor = ThreadPoolExecutor(4) if pool else None
    try:
        bounded = cost_distance(cost, sources, backend="cpu", tile_size=8,
                                executor=executor, **options)
    finally:
        if executor is not None:
            executor.shutdown()
    if settle < 0.1:  # the bound did cut solves short
        assert bounded.tile_solves > unbounded.tile_solves
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(getattr(bounded, name),
                                      getattr(unbounded, name), err_msg=name)
        np.testing.assert_array_equal(getattr(bounded, name),
                                      getattr(expected, name), err_msg=name)


def test_solve_leaves_cells_above_the_bound_pending():
    # one 6 x 6 tile of unit costs, source at (0, 0), 4-connected: a bound
    # of 2.5 settles the cells at distance <= 2 (relaxed: their neighbours
    # at 3 are reached, pending), nothing further; a second solve with no
    # bound finishes it, equal to a solve with no bound at all
    from gridgraph.core.costdistance.tiled import solve as solve_module
    from gridgraph.core.costdistance import NEIGHBOUR_OFFSETS
    from gridgraph.core.tiling import Window, open_source
    cost = np.ones((6, 6))
    source = open_source(cost)
    window = Window(0, 0, 6, 6)
    offsets = np.ascontiguousarray(NEIGHBOUR_OFFSETS[:4])
    steps = np.ones(4)
    seeds = np.full(20, np.inf)  # the band receives nothing
    args = (1, offsets, steps, np.inf)
    distance, hops, key = solve_module.solve_tile(
        source, window, None, None, np.array([0]), seeds, *args, bound=2.5)
    manhattan = np.add.outer(np.arange(6.0), np.arange(6.0)).reshape(-1)
    assert key == 3.0
    np.testing.assert_array_equal(distance[manhattan <= 3],
                                  manhattan[manhattan <= 3])
    assert np.isinf(distance[manhattan > 3]).all()
    pending = hops == solve_module.HOPS_PENDING
    np.testing.assert_array_equal(pending, manhattan == 3)
    distance2, hops2, key2 = solve_module.solve_tile(
        source, window, None, (distance, hops), np.zeros(0, np.int64), seeds,
        *args)
    assert key2 == np.inf and not (hops2 == solve_module.HOPS_PENDING).any()
    np.testing.assert_array_equal(distance2, manhattan)
    full = solve_module.solve_tile(source, window, None, None, np.array([0]),
                                   seeds, *args)
    np.testing.assert_array_equal(full[0], distance2)
    np.testing.assert_array_equal(full[1], hops2)
