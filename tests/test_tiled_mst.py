"""Tiled minimum spanning forest (Haverkort's block hierarchy): the same
edges, order, weights, total, tree count and parent directions as the
in-memory run for every tile size, with and without the edge list
(``edges=False``), in-process and in threads (CPU kernels, and a CUDA
stand-in that checks one GPU solve at a time); literal grids, scipy
totals, spirals, plateaus, nodata; the compression step on a hand-made
forest."""

import concurrent.futures
import math
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.csgraph
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core import CancelledError, minimum_spanning_tree
from gridgraph.core.mst import tiled

from rasters import fractal_surface, spiral_mask


def assert_same(result, expected):
    np.testing.assert_array_equal(result.edges, expected.edges)
    assert result.weights.dtype == expected.weights.dtype
    np.testing.assert_array_equal(result.weights, expected.weights)
    assert result.total_weight == expected.total_weight
    assert result.trees == expected.trees
    np.testing.assert_array_equal(result.parent_direction,
                                  expected.parent_direction)
    assert tuple(result.shape) == tuple(expected.shape)


def assert_same_without_edges(result, expected):
    """An ``edges=False`` result against a full one."""
    assert result.edges is None and result.weights is None
    assert result.total_weight == expected.total_weight or (
        math.isnan(result.total_weight) and math.isnan(expected.total_weight))
    assert result.trees == expected.trees
    np.testing.assert_array_equal(result.parent_direction,
                                  expected.parent_direction)


def check(values, tile_sizes=(8, 16, 64), **options):
    """Every tile size, with and without the edge list, equals the
    in-memory run."""
    expected = minimum_spanning_tree(values, backend="cpu", **options)
    for tile_size in tile_sizes:
        result = minimum_spanning_tree(values, backend="cpu",
                                       tile_size=tile_size, **options)
        assert_same(result, expected)
        lean = minimum_spanning_tree(values, backend="cpu",
                                     tile_size=tile_size, edges=False,
                                     **options)
        assert_same_without_edges(lean, expected)
    return expected


def test_literal_two_rows_across_a_seam():
    # row 0 holds 0..9, row 1 holds 10..19; weight "max" makes every row-0
    # edge lighter than any other, and each tie at weight 10 + c between the
    # vertical edge (c, 10 + c) and the row-1 edge (9 + c, 10 + c) goes to
    # the vertical edge (its low end is smaller).  Tiles of 8 cut at col 8.
    values = np.arange(20, dtype=np.float32).reshape(2, 10)
    result = minimum_spanning_tree(values, connectivity=4, weight="max",
                                   tile_size=8, backend="cpu")
    expected_edges = [[c, c + 1] for c in range(9)] + \
        [[c, c + 10] for c in range(10)]
    np.testing.assert_array_equal(result.edges, expected_edges)
    np.testing.assert_array_equal(result.weights, list(range(1, 20)))
    assert result.total_weight == sum(range(1, 20))
    assert result.trees == 1
    # every cell points toward cell 0: row 0 west, row 1 north
    expected_direction = np.array([[0] + [180] * 9, [90] * 10],
                                  dtype=np.float32)
    np.testing.assert_array_equal(result.parent_direction, expected_direction)


def test_literal_forest_with_nodata_column_on_the_seam():
    # column 8 (the first column of the second tile) is nodata: two trees
    values = np.ones((3, 12), dtype=np.float32)
    values[:, 8] = np.nan
    result = minimum_spanning_tree(values, connectivity=8, weight="min",
                                   tile_size=8, backend="cpu")
    assert result.trees == 2
    assert len(result.edges) == 3 * 11 - 2
    assert result.parent_direction[0, 9] == 0  # root of the right tree
    assert np.isnan(result.parent_direction[:, 8]).all()
    assert_same(result, minimum_spanning_tree(values, connectivity=8,
                                              weight="min", backend="cpu"))


def test_compress_drops_dead_ends_and_contracts_paths():
    # boundary vertices 0 and 4; path 0-1-2-3-4 with a dead-end branch
    # 2-5-6 and an isolated edge 7-8 (no boundary vertex)
    a = np.array([0, 1, 2, 3, 2, 5, 7])
    b = np.array([1, 2, 3, 4, 5, 6, 8])
    w = np.array([1, 9, 3, 9, 5, 5, 1], dtype=np.float32)
    e = np.array([10, 20, 30, 40, 50, 60, 70])
    boundary = np.zeros(9, dtype=bool)
    boundary[[0, 4]] = True
    ca, cb, cw, ce = tiled._compress(9, a, b, w, e, boundary)
    assert len(ca) == 1
    assert {int(ca[0]), int(cb[0])} == {0, 4}
    # two edges of weight 9: the heavier key is the larger edge id
    assert cw[0] == 9 and ce[0] == 40
    # a branch vertex of degree 3 stays when its branch reaches a boundary
    boundary[6] = True
    ca, cb, cw, ce = tiled._compress(9, a, b, w, e, boundary)
    assert sorted(zip(ca.tolist(), cb.tolist())) == [(0, 2), (2, 4), (2, 6)]
    assert sorted(ce.tolist()) == [20, 40, 60]


@pytest.mark.parametrize("weight", ["max", "min", "mean", "absdiff"])
@pytest.mark.parametrize("connectivity", [4, 8])
def test_fractal_sizes_not_multiples(weight, connectivity):
    values = fractal_surface((75, 50), seed=6)
    check(values, weight=weight, connectivity=connectivity)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 8]), st.sampled_from(["max", "min", "mean", "absdiff"]),
       st.sampled_from([8, 16]), st.booleans(), st.floats(0, 0.5))
def test_random_rasters(rows, cols, seed, connectivity, weight, tile_size,
                        integers, nodata_share):
    rng = np.random.default_rng(seed)
    if integers:  # few distinct values: ties everywhere
        values = rng.integers(0, 4, (rows, cols)).astype(np.float32)
    else:
        values = rng.random((rows, cols)).astype(np.float32)
    values[rng.random((rows, cols)) < nodata_share] = np.nan
    check(values, tile_sizes=(tile_size,), connectivity=connectivity,
          weight=weight)


def test_total_weight_matches_scipy():
    values = fractal_surface((60, 45), seed=12).astype(np.float64)
    rows, cols = values.shape
    result = minimum_spanning_tree(values, connectivity=8, weight="max",
                                   tile_size=16, backend="cpu")
    index = np.arange(values.size).reshape(values.shape)
    heads, tails = [], []
    for dr, dc in [(0, 1), (1, 0), (1, 1), (1, -1)]:
        r0, r1 = 0, rows - dr
        c0, c1 = max(0, -dc), cols - max(0, dc)
        heads.append(index[r0:r1, c0:c1].ravel())
        tails.append(index[r0 + dr:r1 + dr, c0 + dc:c1 + dc].ravel())
    heads, tails = np.concatenate(heads), np.concatenate(tails)
    weights = np.maximum(values.ravel()[heads], values.ravel()[tails])
    graph = scipy.sparse.coo_matrix((weights, (heads, tails)),
                                    shape=(values.size, values.size))
    tree = scipy.sparse.csgraph.minimum_spanning_tree(graph.tocsr())
    assert tree.nnz == len(result.edges)
    assert result.total_weight == pytest.approx(tree.sum(), rel=1e-12)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_spiral_path_through_many_tiles(connectivity):
    mask = spiral_mask(100)
    values = np.where(mask, fractal_surface(mask.shape, seed=1), np.nan)
    expected = check(values.astype(np.float32), connectivity=connectivity)
    assert expected.trees == 1


def test_plateau_ties_and_nodata_heavy():
    plateau = np.full((50, 45), 7, dtype=np.int16)
    check(plateau, connectivity=8, weight="max")
    rng = np.random.default_rng(3)
    sparse = rng.integers(1, 5, (70, 66)).astype(np.int32)
    sparse[rng.random(sparse.shape) < 0.6] = -1
    expected = check(sparse, connectivity=4, weight="absdiff", nodata=-1)
    assert expected.trees > 100


def test_small_merge_buffers(monkeypatch):
    # runs refilled many times and output flushed in several chunks
    from gridgraph.core.mst.tiled import merge_runs
    monkeypatch.setattr(merge_runs, "MERGE_CHUNK", 8192 * 2)
    monkeypatch.setattr(merge_runs, "MERGE_RUN_BUFFER", 100)
    values = fractal_surface((200, 190), seed=9)
    check(values, tile_sizes=(32,), connectivity=8, weight="mean")


def test_out_dir_memmap_source_float64_and_executor(tmp_path):
    values = fractal_surface((90, 70), seed=4).astype(np.float64)
    np.save(tmp_path / "values.npy", values)
    expected = minimum_spanning_tree(values, connectivity=8, backend="cpu")
    assert expected.weights.dtype == np.float64
    out = tmp_path / "out"
    out.mkdir()
    result = minimum_spanning_tree(np.load(tmp_path / "values.npy",
                                           mmap_mode="r"),
                                   connectivity=8, tile_size=16, out_dir=out,
                                   backend="cpu")
    assert isinstance(result.edges, np.memmap)
    assert_same(result, expected)
    assert sorted(os.listdir(out)) == ["edges.npy", "parent_direction.npy",
                                       "weights.npy"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = minimum_spanning_tree(values, connectivity=8, tile_size=16,
                                         executor=pool, backend="cpu")
    assert_same(threaded, expected)


def test_scratch_on_disk_removed_after_success_failure_and_cancel(
        tmp_path, monkeypatch):
    parent = tmp_path / "scratch"
    parent.mkdir()
    monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(parent))
    values = fractal_surface((96, 96), seed=2)
    expected = minimum_spanning_tree(values, connectivity=8, backend="cpu")
    seen = []

    def watch(fraction):
        seen.append(sum(len(files) for _, _, files in os.walk(parent)))

    # 0.2 MB: the scratch store's share is too small to keep the tile
    # forests in memory, so they go to files
    result = minimum_spanning_tree(values, connectivity=8, tile_size=16,
                                   memory_limit_mb=0.2, out_dir=tmp_path,
                                   progress=watch, backend="cpu")
    assert_same(result, expected)
    assert max(seen) > 0
    assert os.listdir(parent) == []

    out = tmp_path / "cancelled"
    out.mkdir()
    for stop_at in (0.3, 0.65, 0.9):
        with pytest.raises(CancelledError):
            minimum_spanning_tree(values, tile_size=16, memory_limit_mb=0.2,
                                  out_dir=out, backend="cpu",
                                  progress=lambda f, s=stop_at: f < s)
        assert os.listdir(parent) == [] and os.listdir(out) == []

    original = tiled.tile_finish
    calls = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("simulated disk failure")
        return original(*args)

    monkeypatch.setattr(tiled.driver, "tile_finish", failing)
    with pytest.raises(OSError):
        minimum_spanning_tree(values, tile_size=16, memory_limit_mb=0.2,
                              out_dir=out, backend="cpu")
    assert os.listdir(parent) == [] and os.listdir(out) == []


# --------------------------------------------------------------------------
# without the edge list; threads; the GPU lock


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("weight", ["max", "mean", "absdiff"])
def test_without_edges_fractal_and_nodata_heavy(connectivity, weight):
    fractal = fractal_surface((75, 61), seed=8)
    holes = fractal.copy()
    holes[np.random.default_rng(5).random(holes.shape) < 0.55] = np.nan
    for values in (fractal, holes):
        expected = minimum_spanning_tree(values, connectivity=connectivity,
                                         weight=weight, backend="cpu")
        # the total is the exact sum of the weights, rounded once
        assert expected.total_weight == math.fsum(
            expected.weights.astype(np.float64))
        assert_same_without_edges(
            minimum_spanning_tree(values, connectivity=connectivity,
                                  weight=weight, backend="cpu", edges=False),
            expected)
        for tile_size in (8, 16, 32, 128):
            lean = minimum_spanning_tree(values, connectivity=connectivity,
                                         weight=weight, backend="cpu",
                                         tile_size=tile_size, edges=False)
            assert_same_without_edges(lean, expected)
    assert expected.trees > 50  # the nodata-heavy raster is a forest


def test_without_edges_total_over_many_decades_and_float64():
    # weights over 20 decades: an order-dependent float64 sum would differ
    # between the in-memory order and the tiles' order
    rng = np.random.default_rng(11)
    values = 10.0 ** rng.uniform(-8, 12, (70, 90))
    expected = minimum_spanning_tree(values, connectivity=8, backend="cpu")
    assert expected.weights.dtype == np.float64
    assert expected.total_weight == math.fsum(expected.weights)
    for tile_size in (8, 32):
        assert_same(minimum_spanning_tree(values, connectivity=8,
                                          backend="cpu", tile_size=tile_size),
                    expected)
        assert_same_without_edges(
            minimum_spanning_tree(values, connectivity=8, backend="cpu",
                                  tile_size=tile_size, edges=False),
            expected)


def test_without_edges_out_dir_holds_only_the_directions(tmp_path):
    values = fractal_surface((90, 70), seed=4)
    expected = minimum_spanning_tree(values, connectivity=8, backend="cpu")
    np.save(tmp_path / "values.npy", values)
    out = tmp_path / "out"
    out.mkdir()
    # 0.2 MB: the tile forests (one byte per cell) spill to scratch files
    lean = minimum_spanning_tree(
        np.load(tmp_path / "values.npy", mmap_mode="r"), connectivity=8,
        tile_size=16, out_dir=out, memory_limit_mb=0.2, backend="cpu",
        edges=False)
    assert isinstance(lean.parent_direction, np.memmap)
    assert_same_without_edges(lean, expected)
    assert os.listdir(out) == ["parent_direction.npy"]
    # threads write their own direction blocks; processes hand them back
    # to this process, which writes them
    spawn = multiprocessing.get_context("spawn")
    for pool in (concurrent.futures.ThreadPoolExecutor(3),
                 concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn)):
        with pool:
            lean = minimum_spanning_tree(
                np.load(tmp_path / "values.npy", mmap_mode="r"),
                connectivity=8, tile_size=16, out_dir=out, backend="cpu",
                executor=pool, edges=False)
        assert_same_without_edges(lean, expected)


@pytest.mark.parametrize("workers", [2, 3])
def test_threads_equal_in_process(workers):
    values = fractal_surface((130, 115), seed=21)
    values[np.random.default_rng(2).random(values.shape) < 0.2] = np.nan
    for connectivity, weight in ((8, "max"), (4, "absdiff")):
        expected = minimum_spanning_tree(values, connectivity=connectivity,
                                         weight=weight, backend="cpu")
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for tile_size in (16, 32):
                assert_same(minimum_spanning_tree(
                    values, connectivity=connectivity, weight=weight,
                    backend="cpu", tile_size=tile_size, executor=pool),
                    expected)
                assert_same_without_edges(minimum_spanning_tree(
                    values, connectivity=connectivity, weight=weight,
                    backend="cpu", tile_size=tile_size, executor=pool,
                    edges=False), expected)


def test_auto_tile_size_shrinks_with_workers():
    # the per-tile working sets of all workers share the tile budget
    from gridgraph.core import tiling
    shape = (20000, 20000)
    sizes = []
    for workers in (1, 4, 16):
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            grid = tiling.plan(shape, None, 1024,
                               tiled.IN_MEMORY_BYTES_PER_CELL,
                               tiled.TILE_BYTES_PER_CELL, pool, 0.4)
        sizes.append(grid.tile_size)
        assert grid.tile_size ** 2 * tiled.TILE_BYTES_PER_CELL * workers \
            <= 0.4 * 1024 * 2**20
    assert sizes[0] > sizes[1] > sizes[2]


class FakeCudaForest:
    """Stands in for ``_cuda.spanning_forest`` (no GPU here): the CPU
    kernel, slowed down, recording how many calls overlap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.calls = 0

    def __call__(self, *args):
        from gridgraph.core.mst import _cpu
        with self.lock:
            self.inside += 1
            self.calls += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            time.sleep(0.01)
            return _cpu.spanning_forest(*args)
        finally:
            with self.lock:
                self.inside -= 1

    def low_bits(self, values, valid, connectivity, weight_index,
                 weight_dtype):
        """Stands in for ``_cuda.forest_low_bits`` (the leaves without an
        edge list): the edges of the stand-in forest as low-end bits."""
        from gridgraph.core._common import Progress
        edges, _ = self(values, valid, connectivity, weight_index,
                        weight_dtype, Progress())
        cols = values.shape[1]
        low_bits = np.zeros(values.size, dtype=np.uint8)
        step = edges[:, 1] - edges[:, 0]
        rank = np.where((step == 1) & (edges[:, 0] % cols != cols - 1), 0,
                        np.where(step == cols - 1, 1,
                                 np.where(step == cols, 2, 3)))
        np.bitwise_or.at(low_bits, edges[:, 0], (1 << rank).astype(np.uint8))
        return low_bits, len(edges)


def test_cuda_tiles_in_threads_one_gpu_solve_at_a_time(monkeypatch):
    from gridgraph.core.mst import _cuda
    fake = FakeCudaForest()
    monkeypatch.setattr(_cuda, "spanning_forest", fake)
    monkeypatch.setattr(_cuda, "forest_low_bits", fake.low_bits)
    # record overlap of whole leaf tasks too: the CPU work runs in parallel
    original_leaf = tiled.leaf_tile
    running = {"now": 0, "most": 0}
    guard = threading.Lock()

    def leaf(*args):
        with guard:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        try:
            return original_leaf(*args)
        finally:
            with guard:
                running["now"] -= 1

    monkeypatch.setattr(tiled.driver, "leaf_tile", leaf)
    values = fractal_surface((96, 80), seed=13)
    expected = minimum_spanning_tree(values, connectivity=8, backend="cpu")
    for keep_edges in (True, False):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            plan = tiled.plan(values, 1, 16, None, pool)
            result = tiled.minimum_spanning_tree_tiled(
                plan, 8, 0, np.float32, None, "cuda", None, pool, None,
                keep_edges=keep_edges)
        if keep_edges:
            assert_same(result, expected)
        else:
            assert_same_without_edges(result, expected)
    assert fake.calls == 2 * 6 * 5
    assert fake.most_inside == 1
    assert running["most"] > 1


def test_removed_separators_split_without_isin():
    """split_removed's helpers: membership in a sorted array as np.isin
    (duplicates included), and an edge key crossing tiles exactly when its
    two ends (low + [1, cols - 1, cols, cols + 1][rank]) lie in two."""
    from gridgraph.core import tiling
    from gridgraph.core.mst.tiled.driver import _crosses_tiles, _in_sorted
    rng = np.random.default_rng(3)
    for _ in range(300):
        values = rng.integers(0, 50, rng.integers(0, 40))
        sorted_values = np.sort(rng.integers(0, 50, rng.integers(0, 40)))
        assert np.array_equal(_in_sorted(values, sorted_values),
                              np.isin(values, sorted_values))
    rows, cols, tile = 23, 17, 5
    grid = tiling.TileGrid((rows, cols), tile)
    keys, crosses = [], []
    for r in range(rows):
        for c in range(cols):
            for rank, (dr, dc) in enumerate([(0, 1), (1, -1), (1, 0),
                                             (1, 1)]):
                r2, c2 = r + dr, c + dc
                if 0 <= r2 < rows and 0 <= c2 < cols:
                    keys.append((r * cols + c) * 4 + rank)
                    crosses.append((r // tile, c // tile)
                                   != (r2 // tile, c2 // tile))
    assert np.array_equal(_crosses_tiles(np.array(keys), grid, cols),
                          np.array(crosses))
