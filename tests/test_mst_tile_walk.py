"""The tiled MST's per-tile work on all cores (mstfast, issue 10): the
parallel walk of a tile forest given as low-end bits (piece labels, parent
directions with given roots) against a breadth-first search in Python, the
parallel bitmask and weight helpers against their one-thread forms, and
the tiled run with many bands per tile against the in-memory run, at every
thread count."""

from collections import deque

import numba
import numpy as np
import pytest

from gridgraph.core._common import Progress

from gridgraph.core import minimum_spanning_tree
from gridgraph.core.mst import PARENT_DEGREES, PARENT_OFFSETS, _cpu
from gridgraph.core.mst import _forest_cpu
from gridgraph.core.mst.tiled import expand, forest

from rasters import fractal_surface

_RANK_STEP = ((0, 1), (1, -1), (1, 0), (1, 1))


def random_forest(rows, cols, seed, keep=0.8, holes=0.1, connectivity=8):
    """Low-end bits of a random forest on a random valid mask: the MSF of
    random values, with some of its edges dropped."""
    rng = np.random.default_rng(seed)
    values = rng.random((rows, cols)).astype(np.float32)
    valid = rng.random((rows, cols)) >= holes
    ids, _ = _cpu.unsorted_forest(values, valid, connectivity, 0, np.float32,
                                  Progress())
    ids = ids[rng.random(ids.size) < keep]
    low_bits = np.zeros(rows * cols, dtype=np.uint8)
    for e in ids:
        low_bits[e >> 2] |= np.uint8(1 << (e & 3))
    return low_bits, valid.reshape(-1), ids


def neighbours(low_bits, rows, cols):
    adjacency = [[] for _ in range(rows * cols)]
    for v in np.flatnonzero(low_bits):
        for rank in range(4):
            if low_bits[v] >> rank & 1:
                dr, dc = _RANK_STEP[rank]
                u = v + dr * cols + dc
                adjacency[v].append(u)
                adjacency[u].append(v)
    return adjacency


def reference_walk(low_bits, valid, rows, cols, roots):
    """Directions by breadth-first search: the given roots first, then each
    unseen valid cell in scan order; labels of pieces in scan order."""
    adjacency = neighbours(low_bits, rows, cols)
    table = {tuple(o): d for o, d in zip(PARENT_OFFSETS, PARENT_DEGREES)}
    direction = np.full(rows * cols, np.nan, dtype=np.float32)
    seen = np.zeros(rows * cols, dtype=bool)
    starts = [(int(c), float(d)) for c, d in zip(*roots)] + [
        (v, 0.0) for v in range(rows * cols)]
    for root, degrees in starts:
        if seen[root] or not valid[root]:
            continue
        seen[root] = True
        direction[root] = degrees
        queue = deque([root])
        while queue:
            v = queue.popleft()
            for u in adjacency[v]:
                if not seen[u]:
                    seen[u] = True
                    step = (v // cols - u // cols, v % cols - u % cols)
                    direction[u] = table[step]
                    queue.append(u)
    labels = np.zeros(rows * cols, dtype=np.int64)
    count = 0
    for v in range(rows * cols):
        if valid[v] and labels[v] == 0:
            count += 1
            labels[v] = count
            queue = deque([v])
            while queue:
                x = queue.popleft()
                for u in adjacency[x]:
                    if labels[u] == 0:
                        labels[u] = count
                        queue.append(u)
    return direction, labels, count


def some_roots(low_bits, valid, rows, cols, seed):
    """A random cell in about half the pieces, with random degrees."""
    _, labels, count = reference_walk(low_bits, valid, rows, cols,
                                      (np.empty(0, np.int64), []))
    rng = np.random.default_rng(seed)
    cells = []
    for label in range(1, count + 1):
        if rng.random() < 0.5:
            cells.append(rng.choice(np.flatnonzero(labels == label)))
    degrees = rng.choice(PARENT_DEGREES, size=len(cells)).astype(np.float32)
    return np.array(cells, dtype=np.int64), degrees


@pytest.fixture(params=[1, 2])
def threads(request, monkeypatch):
    """Every thread count, with bands in tiles of any size."""
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 1)
    previous = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield request.param
    numba.set_num_threads(previous)


@pytest.mark.parametrize("rows, cols, seed, keep, holes", [
    (37, 29, 0, 0.8, 0.1), (64, 64, 1, 1.0, 0.0), (1, 50, 2, 0.9, 0.1),
    (50, 1, 3, 0.9, 0.1), (2, 2, 4, 1.0, 0.0), (9, 120, 5, 0.6, 0.4),
    (120, 9, 6, 0.95, 0.02)])
def test_walk_tile_forest_equals_breadth_first_search(threads, rows, cols,
                                                      seed, keep, holes):
    low_bits, valid, _ = random_forest(rows, cols, seed, keep, holes)
    roots = some_roots(low_bits, valid, rows, cols, seed)
    expected, labels, count = reference_walk(low_bits, valid, rows, cols,
                                             roots)
    direction, _, _ = _forest_cpu.walk_tile_forest(
        low_bits, valid, rows, cols, True, False, roots)
    np.testing.assert_array_equal(direction, expected)
    plain, _, _ = reference_walk(low_bits, valid, rows, cols,
                                 (np.empty(0, np.int64), []))
    direction, got_labels, trees = _forest_cpu.walk_tile_forest(
        low_bits, valid, rows, cols, True, True)
    np.testing.assert_array_equal(direction, plain)
    np.testing.assert_array_equal(got_labels, labels)
    assert trees == count


@pytest.mark.parametrize("rows, cols, seed", [(31, 17, 0), (1, 40, 1),
                                              (40, 1, 2), (64, 3, 3)])
def test_bitmask_helpers_equal_one_thread_forms(threads, rows, cols, seed):
    low_bits, valid, ids = random_forest(rows, cols, seed, 0.9, 0.1)
    local_id = ids.astype(np.int32)
    np.testing.assert_array_equal(
        forest._low_bits_from_ids(local_id, rows * cols), low_bits)
    np.testing.assert_array_equal(
        forest._forest_mask(local_id, rows, cols) & 0x0F, low_bits)
    values = fractal_surface((rows, cols), seed=seed).reshape(-1)
    for weight_index in range(4):
        weights = expand._mask_weights(low_bits, values, rows, cols,
                                       weight_index, np.float32(0.5))
        expected = [_cpu._edge_weight(values[v], values[v + dr * cols + dc],
                                      weight_index, np.float32(0.5))
                    for v in range(rows * cols) for rank, (dr, dc)
                    in enumerate(_RANK_STEP) if low_bits[v] >> rank & 1]
        np.testing.assert_array_equal(
            weights, np.array(expected, dtype=np.float32))
    edges = np.array([(e >> 2, (e >> 2) + _RANK_STEP[e & 3][0] * cols
                       + _RANK_STEP[e & 3][1]) for e in ids],
                     dtype=np.int64).reshape(-1, 2)
    np.testing.assert_array_equal(forest._local_ids(edges, cols), local_id)


def rasters():
    rng = np.random.default_rng(7)
    holes = fractal_surface((150, 133), seed=2)
    holes[rng.random(holes.shape) < 0.2] = np.nan
    plateaus = np.floor(fractal_surface((97, 140), seed=3) * 4)
    plateaus[rng.random(plateaus.shape) < 0.1] = -1
    return [
        ("random", rng.random((130, 111)).astype(np.float32), None),
        ("holes", holes, None),
        ("plateaus", plateaus.astype(np.float32), -1),
        ("row", fractal_surface((1, 300), seed=4), None),
        ("column", fractal_surface((300, 1), seed=5), None),
    ]


@pytest.mark.parametrize("name, values, nodata", rasters(),
                         ids=[r[0] for r in rasters()])
@pytest.mark.parametrize("connectivity", [4, 8])
def test_tiled_with_bands_equals_in_memory(threads, name, values, nodata,
                                           connectivity):
    expected = minimum_spanning_tree(values, connectivity, "max",
                                     nodata=nodata, backend="cpu")
    for tile_size in (32, 64):
        for keep in (True, False):
            result = minimum_spanning_tree(
                values, connectivity, "max", nodata=nodata, backend="cpu",
                tile_size=tile_size, edges=keep)
            np.testing.assert_array_equal(result.parent_direction,
                                          expected.parent_direction)
            assert result.trees == expected.trees
            assert np.float64(result.total_weight).tobytes() == \
                np.float64(expected.total_weight).tobytes()
            if keep:
                np.testing.assert_array_equal(result.edges, expected.edges)
                np.testing.assert_array_equal(
                    result.weights.view(np.uint32),
                    expected.weights.view(np.uint32))


def path_set(a, b, w, e):
    return sorted((min(x, y), max(x, y), float(z), int(k))
                  for x, y, z, k in zip(a, b, w, e))


@pytest.mark.parametrize("rows, cols, seed, keep, holes", [
    (37, 29, 0, 0.8, 0.1), (64, 64, 1, 1.0, 0.0), (1, 50, 2, 0.9, 0.1),
    (50, 1, 3, 0.9, 0.1), (2, 2, 4, 1.0, 0.0), (9, 120, 5, 0.6, 0.4),
    (120, 9, 6, 0.97, 0.02), (40, 40, 7, 1.0, 0.0)])
@pytest.mark.parametrize("place", ["inner", "corner", "left", "alone"])
def test_compress_tile_bands_equals_one_thread(threads, rows, cols, seed,
                                               keep, holes, place):
    low_bits, valid, ids = random_forest(rows, cols, seed, keep, holes)
    # where the tile lies decides which of its sides are boundaries
    row0, col0, raster_rows, raster_cols = dict(
        inner=(rows, cols, 3 * rows, 3 * cols),
        corner=(0, 0, 2 * rows, 2 * cols),
        left=(rows, 0, 3 * rows, cols + 5),
        alone=(0, 0, rows, cols))[place]
    values = fractal_surface((rows, cols), seed=seed).reshape(-1)
    if seed % 2:
        values = np.floor(values * 3)  # ties
    for weight_index in (0, 3):
        full = forest._forest_mask(ids.astype(np.int32), rows, cols)
        expected = forest._compress_tile(
            full.copy(), values, rows, cols, row0, col0, raster_rows,
            raster_cols, weight_index, np.float32(0.5))
        got = forest.compress_tile_bands(
            low_bits, valid, values, rows, cols, row0, col0, raster_rows,
            raster_cols, weight_index, np.float32(0.5))
        assert got[2].dtype == expected[2].dtype
        assert path_set(*got) == path_set(*expected)
