"""Minimum spanning forest on the CPU backend: core-level tests (no QGIS).

How correctness is established:
1. literal grids solved by hand: every weight function and connectivity on
   a 2x2 grid, ties broken by (weight, low, high) on 3x3 plateaus, a path
   whose parent directions use all eight compass points, nodata holes and
   forests, strips, single cells, threshold segmentation;
2. oracles on hypothesis-generated and adversarial rasters (few distinct
   values, plateaus, checkerboards, staircases, spirals, +-inf, -0.0):
   exact equality, edges and weights, with a brute-force Kruskal written
   here (Python sort by (weight, low, high) and a plain union-find); total
   weight equal to scipy.sparse.csgraph.minimum_spanning_tree on a graph
   built here with strictly positive weights; on larger rasters the exact
   edge set from scipy on the edges' ranks in np.lexsort order (distinct
   weights, so scipy's tree is the unique one); tree count equal to
   scipy.ndimage.label's; every edge joins valid neighbours; parent
   directions lead every cell to its piece's lowest-index cell without a
   cycle; forest labels equal scipy's connected_components renumbered by
   first cell;
3. dtypes (Byte, Int16, Int32, Int64, Float32, Float64 and its float64
   weights), NaN cells, memmaps and strided views left unmodified, argument
   errors, progress and cancellation, and the radix sort of the tree edges
   against np.lexsort.
"""

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.sparse as sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.sparse.csgraph import connected_components as csgraph_components
from scipy.sparse.csgraph import minimum_spanning_tree as csgraph_mst

from gridgraph.core import CancelledError, InvalidInputError
from gridgraph.core._common import Progress, valid_mask
from gridgraph.core.mst import (PARENT_DEGREES, PARENT_OFFSETS, WEIGHTS,
                                _cpu, _forest_cpu, minimum_spanning_tree,
                                segment_by_threshold)
from gridgraph.tests.rasters import fractal_surface, spiral_mask

ORACLE_SETTINGS = settings(max_examples=60, deadline=None)
NAN = np.nan


def cpu_mst(values, **keywords):
    keywords.setdefault("backend", "cpu")
    return minimum_spanning_tree(values, **keywords)


def weight_dtype_of(values):
    return np.float64 if values.dtype.itemsize > 4 else np.float32


# --------------------------------------------------------------------------
# independent oracles

def grid_edges(valid, connectivity):
    """All (low, high) pairs of neighbouring valid cells, as two arrays."""
    rows, cols = valid.shape
    index = np.arange(valid.size, dtype=np.int64).reshape(rows, cols)
    steps = [(0, 1), (1, 0)] + ([(1, -1), (1, 1)] if connectivity == 8 else [])
    lows, highs = [], []
    for dr, dc in steps:
        r0, r1 = 0, rows - dr
        c0, c1 = max(0, -dc), cols - max(0, dc)
        if r1 <= r0 or c1 <= c0:
            continue
        here = (slice(r0, r1), slice(c0, c1))
        there = (slice(r0 + dr, r1 + dr), slice(c0 + dc, c1 + dc))
        both = valid[here] & valid[there]
        a, b = index[here][both], index[there][both]
        lows.append(np.minimum(a, b))
        highs.append(np.maximum(a, b))
    if not lows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(lows), np.concatenate(highs)


def edge_weights(values, low, high, weight):
    """f(v_low, v_high) in the weight dtype, numpy scalar semantics."""
    dtype = weight_dtype_of(values)
    flat = values.reshape(-1).astype(dtype)
    a, b = flat[low], flat[high]
    with np.errstate(invalid="ignore", over="ignore"):
        if weight == "max":
            return np.maximum(a, b)
        if weight == "min":
            return np.minimum(a, b)
        if weight == "mean":
            return (a + b) / dtype(2)
        return np.abs(a - b)


def kruskal(values, valid, connectivity, weight):
    """Brute-force minimum spanning forest: sort every edge by (weight, low,
    high), NaN weights last, and keep those that join two trees."""
    low, high = grid_edges(valid, connectivity)
    weights = edge_weights(values, low, high, weight)
    order = sorted(range(len(low)), key=lambda i: (
        math.isnan(weights[i]), 0.0 if math.isnan(weights[i]) else
        float(weights[i]), int(low[i]), int(high[i])))
    parent = list(range(valid.size))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    kept = []
    for i in order:
        a, b = find(int(low[i])), find(int(high[i]))
        if a != b:
            parent[max(a, b)] = min(a, b)
            kept.append(i)
    edges = np.stack([low[kept], high[kept]], axis=1).reshape(-1, 2)
    return edges, weights[kept]


def scipy_total_weight(values, valid, connectivity, weight):
    """Total weight from scipy's MST on a graph with weights + 1 (scipy drops
    zero weights); adding 1 to every edge adds k to every spanning forest."""
    low, high = grid_edges(valid, connectivity)
    weights = edge_weights(values, low, high, weight).astype(np.float64) + 1.0
    graph = sparse.coo_matrix((weights, (low, high)),
                              shape=(valid.size, valid.size)).tocsr()
    tree = csgraph_mst(graph)
    return float(tree.sum()), tree.nnz


def scipy_rank_forest(values, valid, connectivity, weight):
    """The unique forest from scipy on distinct weights: each edge's rank in
    np.lexsort order of (weight, low, high), plus one."""
    low, high = grid_edges(valid, connectivity)
    weights = edge_weights(values, low, high, weight)
    order = np.lexsort((high, low, weights))
    rank = np.empty(len(order), dtype=np.float64)
    rank[order] = np.arange(1, len(order) + 1)
    graph = sparse.coo_matrix((rank, (low, high)),
                              shape=(valid.size, valid.size)).tocsr()
    tree = csgraph_mst(graph).tocoo()
    kept = np.sort(tree.data).astype(np.int64) - 1
    chosen = order[kept]
    return np.stack([low[chosen], high[chosen]], axis=1), weights[chosen]


def structure(connectivity):
    return ndi.generate_binary_structure(2, 1 if connectivity == 4 else 2)


def check_forest_invariants(result, values, valid, connectivity, weight):
    """Properties every result must have, whatever the oracle."""
    edges, weights = result.edges, result.weights
    rows, cols = valid.shape
    assert edges.dtype == np.int64 and edges.shape == (len(weights), 2)
    assert weights.dtype == weight_dtype_of(values)
    _, pieces = ndi.label(valid, structure(connectivity))
    assert result.trees == pieces
    assert len(edges) == np.count_nonzero(valid) - pieces
    low, high = edges[:, 0], edges[:, 1]
    assert np.all(low < high)
    assert np.all(valid.reshape(-1)[low]) and np.all(valid.reshape(-1)[high])
    dr = np.abs(high // max(cols, 1) - low // max(cols, 1))
    dc = np.abs(high % max(cols, 1) - low % max(cols, 1))
    assert np.all((dr <= 1) & (dc <= 1))
    if connectivity == 4:
        assert np.all(dr + dc == 1)
    np.testing.assert_array_equal(
        weights, edge_weights(values, low, high, weight))
    # rows ascending by (weight, low, high), NaN weights last
    order = np.lexsort((high, low, weights))
    np.testing.assert_array_equal(order, np.arange(len(order)))
    assert result.total_weight == pytest.approx(
        float(np.sum(weights, dtype=np.float64)), nan_ok=True)
    check_parent_direction(result.parent_direction, edges, valid, connectivity)


def check_parent_direction(direction, edges, valid, connectivity):
    """Following the directions from every valid cell reaches its piece's
    lowest-index cell, along tree edges, without a cycle."""
    rows, cols = valid.shape
    assert direction.dtype == np.float32 and direction.shape == valid.shape
    assert np.all(np.isnan(direction[~valid]))
    assert not np.any(np.isnan(direction[valid]))
    step = {float(d): tuple(o) for o, d in zip(PARENT_OFFSETS, PARENT_DEGREES)}
    tree_edges = set(map(tuple, edges.tolist()))
    pieces, _ = ndi.label(valid, structure(connectivity))
    lowest = {}
    for cell in np.flatnonzero(valid):
        lowest.setdefault(pieces.flat[cell], int(cell))
    root_of = {}
    for cell in map(int, np.flatnonzero(valid)):
        walk = []
        on_walk = set()
        here = cell
        while here not in root_of:
            assert here not in on_walk, "parent directions form a cycle"
            walk.append(here)
            on_walk.add(here)
            r, c = divmod(here, cols)
            if direction[r, c] == 0:
                root_of[here] = here
                break
            dr, dc = step[float(direction[r, c])]
            if connectivity == 4:
                assert abs(dr) + abs(dc) == 1
            r, c = r + dr, c + dc
            assert 0 <= r < rows and 0 <= c < cols and valid[r, c]
            there = r * cols + c
            assert (min(here, there), max(here, there)) in tree_edges
            here = there
        for visited in walk:
            root_of[visited] = root_of[here]
        assert root_of[cell] == lowest[pieces.flat[cell]]
    roots = np.count_nonzero(direction[valid] == 0)
    assert roots == len(lowest)


def forest_labels_oracle(edges, valid):
    """scipy connected components of the edge graph, renumbered 1..n by each
    piece's first valid cell, 0 off the valid cells."""
    n = valid.size
    graph = sparse.coo_matrix(
        (np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, component = csgraph_components(graph, directed=False)
    labels = np.zeros(n, dtype=np.int64)
    numbers = {}
    for cell in np.flatnonzero(valid):
        labels[cell] = numbers.setdefault(component[cell], len(numbers) + 1)
    return labels.reshape(valid.shape), len(numbers)


def assert_same_forest(result, expected_edges, expected_weights):
    np.testing.assert_array_equal(result.edges, expected_edges)
    np.testing.assert_array_equal(result.weights, expected_weights)


# --------------------------------------------------------------------------
# literal grids

TWO_BY_TWO = np.array([[1, 5],
                       [2, 3]], dtype=np.float32)
# cells 0 1 / 2 3; 4-edges (0,1) 1|5, (0,2) 1|2, (1,3) 5|3, (2,3) 2|3;
# diagonals (0,3) 1|3, (1,2) 5|2.
TWO_BY_TWO_CASES = [
    # max: (0,2)=2 (2,3)=3, then (0,1)=5 and (1,3)=5 tie: lower low wins
    ("max", 4, [[0, 2], [2, 3], [0, 1]], [2, 3, 5]),
    # max, 8: (0,3)=3 comes before (2,3)=3, which then closes a cycle
    ("max", 8, [[0, 2], [0, 3], [0, 1]], [2, 3, 5]),
    ("min", 4, [[0, 1], [0, 2], [2, 3]], [1, 1, 2]),
    ("min", 8, [[0, 1], [0, 2], [0, 3]], [1, 1, 1]),
    ("mean", 4, [[0, 2], [2, 3], [0, 1]], [1.5, 2.5, 3]),
    ("mean", 8, [[0, 2], [0, 3], [0, 1]], [1.5, 2, 3]),
    ("absdiff", 4, [[0, 2], [2, 3], [1, 3]], [1, 1, 2]),
    # absdiff, 8: (0,3)=2 closes a cycle, (1,3)=2 wins over (1,2)=3
    ("absdiff", 8, [[0, 2], [2, 3], [1, 3]], [1, 1, 2]),
]


@pytest.mark.parametrize("weight, connectivity, edges, weights",
                         TWO_BY_TWO_CASES)
def test_two_by_two_every_weight(weight, connectivity, edges, weights):
    result = cpu_mst(TWO_BY_TWO, weight=weight, connectivity=connectivity)
    assert_same_forest(result, edges, np.array(weights, dtype=np.float32))
    assert result.trees == 1
    assert result.total_weight == sum(weights)
    assert result.shape == (2, 2)


def test_plateau_ties_follow_low_then_high():
    # all weights equal: Kruskal in (low, high) order keeps the top row and
    # every column, a comb
    result = cpu_mst(np.full((3, 3), 7, dtype=np.int16))
    assert_same_forest(result, [[0, 1], [0, 3], [1, 2], [1, 4], [2, 5],
                                [3, 6], [4, 7], [5, 8]], np.full(8, 7))
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, 180], [90, 90, 90], [90, 90, 90]])


def test_plateau_ties_eight_connected():
    # (0,1) (0,3) (0,4) (1,2) then (1,3) (1,4) close cycles, (1,5) joins, ...
    result = cpu_mst(np.zeros((3, 3), dtype=np.uint8), connectivity=8)
    assert_same_forest(result, [[0, 1], [0, 3], [0, 4], [1, 2], [1, 5],
                                [3, 6], [3, 7], [4, 8]], np.zeros(8))
    np.testing.assert_array_equal(
        result.parent_direction,
        [[0, 180, 180], [90, 135, 135], [90, 135, 135]])


# A peak in the middle of a ring of 1s and 2s: the eight max-weight-2 edges
# in (low, high) order are (0,1) (0,3) (1,2) (2,5) (3,6) (5,8) (6,7) (7,8),
# the last closing the ring; the peak joins through (1,4), the first of its
# four weight-9 edges.
RING = np.array([[1, 2, 1],
                 [2, 9, 2],
                 [1, 2, 1]], dtype=np.float32)


def test_ring_with_peak_tree_directions_and_segments():
    result = cpu_mst(RING)
    assert_same_forest(result, [[0, 1], [0, 3], [1, 2], [2, 5], [3, 6],
                                [5, 8], [6, 7], [1, 4]],
                       [2, 2, 2, 2, 2, 2, 2, 9])
    assert result.total_weight == 23.0
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, 180], [90, 90, 90], [90, 180, 90]])
    labels, count = segment_by_threshold(result, 2)
    np.testing.assert_array_equal(labels, [[1, 1, 1], [1, 2, 1], [1, 1, 1]])
    assert count == 2 and labels.dtype == np.int32
    labels, count = segment_by_threshold(result, 9)
    np.testing.assert_array_equal(labels, np.ones((3, 3)))
    assert count == 1
    labels, count = segment_by_threshold(result, 1.5)
    np.testing.assert_array_equal(labels, np.arange(1, 10).reshape(3, 3))
    assert count == 9


# Cell values are the positions along a path through every cell of a 4x4
# grid; with absdiff the path edges weigh 1 and every other 8-neighbour
# pair at least 2, so the path is the tree.  Its steps use all eight
# directions.
PATH = np.array([[0, 1, 2, 3],
                 [15, 11, 13, 4],
                 [10, 14, 12, 5],
                 [9, 8, 7, 6]], dtype=np.int16)


def test_path_parent_directions_use_every_compass_point():
    result = cpu_mst(PATH, connectivity=8, weight="absdiff")
    assert_same_forest(result, [[0, 1], [1, 2], [2, 3], [3, 7], [4, 9],
                                [5, 8], [5, 10], [6, 9], [6, 10], [7, 11],
                                [8, 12], [11, 15], [12, 13], [13, 14],
                                [14, 15]], np.ones(15))
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, 180, 180],
                                   [315, 225, 270, 90],
                                   [270, 45, 135, 90],
                                   [360, 360, 360, 90]])


# 0 is nodata: pieces {0,1,4}, {3,7}, {9,10}.  With 8-connectivity the
# diagonals (1,4) (weight 0, closes a cycle), (4,9) and (7,10) (weight 1)
# join them into one tree.
HOLES = np.array([[1, 1, 0, 3],
                  [1, 0, 0, 3],
                  [0, 2, 2, 0]], dtype=np.int16)


def test_nodata_holes_make_a_forest():
    result = cpu_mst(HOLES, nodata=0, weight="absdiff")
    assert_same_forest(result, [[0, 1], [0, 4], [3, 7], [9, 10]],
                       np.zeros(4))
    assert result.trees == 3
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, NAN, 0],
                                   [90, NAN, NAN, 90],
                                   [NAN, 0, 180, NAN]])
    labels, count = segment_by_threshold(result, 0)
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [1, 0, 0, 2],
                                           [0, 3, 3, 0]])
    assert count == 3


def test_nodata_holes_joined_by_diagonals():
    result = cpu_mst(HOLES, nodata=0, weight="absdiff", connectivity=8)
    assert_same_forest(result, [[0, 1], [0, 4], [3, 7], [9, 10], [4, 9],
                                [7, 10]], [0, 0, 0, 0, 1, 1])
    assert result.trees == 1
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, NAN, 270],
                                   [90, NAN, NAN, 225],
                                   [NAN, 135, 180, NAN]])
    labels, count = segment_by_threshold(result, 0.5)
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [1, 0, 0, 2],
                                           [0, 3, 3, 0]])
    assert count == 3


def test_strips_and_columns():
    strip = np.array([[3, 1, 2, 5]], dtype=np.float32)
    result = cpu_mst(strip)
    assert_same_forest(result, [[1, 2], [0, 1], [2, 3]], [2, 3, 5])
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 180, 180, 180]])
    # a column has the same row-major indices; 8-connectivity adds nothing
    result = cpu_mst(strip.T.copy(), connectivity=8)
    assert_same_forest(result, [[1, 2], [0, 1], [2, 3]], [2, 3, 5])
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0], [90], [90], [90]])


def test_two_columns_with_crossing_diagonals():
    # W = 2, where "right" (0,1) and "down-left" (1,2) both step +1 in index.
    # min weights: (0,1)=2 (0,2)=1 (0,3)=2 (1,2)=1 (1,3)=3 (2,3)=1
    grid = np.array([[2, 4],
                     [1, 3]], dtype=np.uint8)
    result = cpu_mst(grid, connectivity=8, weight="min")
    assert_same_forest(result, [[0, 2], [1, 2], [2, 3]], [1, 1, 1])
    np.testing.assert_array_equal(result.parent_direction,
                                  [[0, 225], [90, 180]])


def test_single_cell_and_empty_rasters():
    result = cpu_mst(np.array([[4.0]]))
    assert result.edges.shape == (0, 2) and result.weights.size == 0
    assert result.weights.dtype == np.float64
    assert result.trees == 1 and result.total_weight == 0.0
    np.testing.assert_array_equal(result.parent_direction, [[0]])

    result = cpu_mst(np.full((3, 4), 9, dtype=np.int16), nodata=9)
    assert result.edges.shape == (0, 2) and result.trees == 0
    assert np.all(np.isnan(result.parent_direction))
    labels, count = segment_by_threshold(result, 1.0)
    np.testing.assert_array_equal(labels, np.zeros((3, 4)))
    assert count == 0

    result = cpu_mst(np.full((2, 2), NAN, dtype=np.float32))
    assert result.edges.shape == (0, 2) and result.trees == 0

    result = cpu_mst(np.zeros((0, 5), dtype=np.float32))
    assert result.edges.shape == (0, 2) and result.trees == 0
    assert result.parent_direction.shape == (0, 5)


def test_isolated_cells_are_trees_of_their_own():
    # a checkerboard of nodata: no two valid cells are 4-neighbours
    checker = np.indices((5, 6)).sum(axis=0) % 2 == 0
    values = np.where(checker, 1.0, NAN)
    result = cpu_mst(values)
    assert result.edges.shape == (0, 2)
    assert result.trees == np.count_nonzero(checker)
    np.testing.assert_array_equal(result.parent_direction,
                                  np.where(checker, 0, NAN))
    # 8-connected they form one tree
    result = cpu_mst(values, connectivity=8)
    assert result.trees == 1
    check_forest_invariants(result, values, checker, 8, "max")


def test_weight_dtypes_follow_the_input():
    # Int32 16777217 is not a float32: cast first, then compare
    big = np.array([[16777217, 16777216, 5]], dtype=np.int32)
    result = cpu_mst(big, weight="absdiff")
    assert result.weights.dtype == np.float32
    assert_same_forest(result, [[0, 1], [1, 2]], [0, 16777211])
    # Int64 and Float64 give float64 weights and keep the difference
    for dtype in (np.int64, np.float64):
        result = cpu_mst(big.astype(dtype), weight="absdiff")
        assert result.weights.dtype == np.float64
        assert_same_forest(result, [[0, 1], [1, 2]], [1, 16777211])


def test_negative_values_and_mean_rounding():
    grid = np.array([[-3, -1],
                     [-2, 4]], dtype=np.int16)
    # mean: (0,1)=-2 (0,2)=-2.5 (1,3)=1.5 (2,3)=1
    result = cpu_mst(grid, weight="mean")
    assert_same_forest(result, [[0, 2], [0, 1], [2, 3]], [-2.5, -2, 1])
    assert result.total_weight == -3.5
    # the mean is computed in float32: a + b overflows as it does there
    pair = np.array([[3e38, 3e38]], dtype=np.float32)
    result = cpu_mst(pair, weight="mean")
    assert result.weights[0] == np.inf
    result = cpu_mst(pair.astype(np.float64), weight="mean")
    assert result.weights[0] == np.float64(np.float32(3e38))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_infinities_and_signed_zeros():
    # inf - inf and inf + -inf are NaN weights, ordered after every number
    grid = np.array([[np.inf, np.inf, -0.0],
                     [-np.inf, 0.0, 1.0]])
    for weight in WEIGHTS:
        for connectivity in (4, 8):
            result = cpu_mst(grid, weight=weight, connectivity=connectivity)
            edges, weights = kruskal(grid, np.ones(grid.shape, bool),
                                     connectivity, weight)
            assert_same_forest(result, edges, weights)
    # a NaN edge (inf - inf) can only be needed last
    result = cpu_mst(np.array([[np.inf, np.inf, 1.0]]), weight="absdiff")
    assert result.edges.tolist() == [[1, 2], [0, 1]]
    assert result.weights[0] == np.inf and np.isnan(result.weights[1])
    # -0 and +0 are equal weights: (low, high) decides, so (0,1) = +0 and
    # (0,2) = +0 come before (1,3) = -0 and (2,3) = -0
    zeros = np.array([[0.0, -0.0],
                      [-0.0, -0.0]])
    result = cpu_mst(zeros, weight="mean")
    assert_same_forest(result, [[0, 1], [0, 2], [1, 3]], [0, 0, 0])


# --------------------------------------------------------------------------
# oracles on generated rasters

@st.composite
def small_rasters(draw, max_side=9):
    """(values, nodata, valid): few distinct values so ties abound."""
    shape = draw(st.tuples(st.integers(1, max_side), st.integers(1, max_side)))
    kind = draw(st.sampled_from(["int16", "uint8", "float32", "float64"]))
    if kind.startswith("float"):
        elements = st.sampled_from([0.0, 1.0, 1.5, 2.0, -2.0, 3.0, NAN])
        nodata = draw(st.sampled_from([None, 3.0]))
    else:
        top = draw(st.integers(1, 4))
        elements = st.integers(0, top)
        nodata = draw(st.sampled_from([None, top]))
    values = draw(hnp.arrays(np.dtype(kind), shape, elements=elements))
    return values, nodata, valid_mask(values, nodata)


@ORACLE_SETTINGS
@given(small_rasters(), st.sampled_from([4, 8]), st.sampled_from(WEIGHTS))
def test_equals_brute_force_kruskal(raster, connectivity, weight):
    values, nodata, valid = raster
    result = cpu_mst(values, nodata=nodata, connectivity=connectivity,
                     weight=weight)
    edges, weights = kruskal(values, valid, connectivity, weight)
    assert_same_forest(result, edges, weights)
    check_forest_invariants(result, values, valid, connectivity, weight)


@ORACLE_SETTINGS
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 24),
                                         st.integers(1, 24)),
                  elements=st.floats(1, 1000, width=32)),
       st.floats(0, 0.5), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 8]), st.sampled_from(WEIGHTS))
def test_total_weight_equals_scipy(values, holes, seed, connectivity, weight):
    valid = np.random.default_rng(seed).random(values.shape) >= holes
    values = np.where(valid, values, NAN).astype(np.float32)
    result = cpu_mst(values, connectivity=connectivity, weight=weight)
    total, count = scipy_total_weight(values, valid, connectivity, weight)
    assert len(result.edges) == count
    assert result.total_weight + len(result.edges) == pytest.approx(
        total, rel=1e-12)


@ORACLE_SETTINGS
@given(small_rasters(max_side=12), st.sampled_from([4, 8]),
       st.sampled_from(WEIGHTS), st.floats(-3, 4))
def test_segments_equal_scipy_components_of_kept_edges(
        raster, connectivity, weight, threshold):
    values, nodata, valid = raster
    result = cpu_mst(values, nodata=nodata, connectivity=connectivity,
                     weight=weight)
    labels, count = segment_by_threshold(result, threshold)
    expected, expected_count = forest_labels_oracle(
        result.edges[result.weights <= threshold], valid)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count and labels.dtype == np.int32


def adversarial_rasters():
    """Named rasters that stress ties, long chains and deep trees."""
    rng = np.random.default_rng(7)
    rows, cols = np.indices((23, 31))
    spiral = spiral_mask(25)
    return {
        "plateau": np.ones((17, 19), dtype=np.int16),
        "checkerboard": ((rows + cols) % 2).astype(np.uint8),
        "stripes": (cols % 3).astype(np.int16),
        # every cell's lightest edge leads one way: long round-1 chains
        "staircase": (rows * 31 + cols).astype(np.float32),
        "reverse staircase": (-(rows * 31 + cols)).astype(np.float64),
        "rings": (np.maximum(abs(rows - 11), abs(cols - 15)) % 4)
        .astype(np.int16),
        "spiral": np.where(spiral, rng.integers(0, 3, spiral.shape), -1)
        .astype(np.int16),
        "sparse holes": np.where(rng.random((29, 27)) < 0.4, NAN,
                                 rng.integers(0, 5, (29, 27))),
        "fractal": fractal_surface((40, 37), seed=3),
        "rounded fractal": np.round(fractal_surface((33, 41), seed=4) / 100)
        .astype(np.uint8),
    }


@pytest.mark.parametrize("name", list(adversarial_rasters()))
@pytest.mark.parametrize("connectivity", [4, 8])
def test_adversarial_rasters_equal_kruskal(name, connectivity):
    values = adversarial_rasters()[name]
    nodata = -1 if name == "spiral" else None
    valid = valid_mask(values, nodata)
    for weight in WEIGHTS:
        result = cpu_mst(values, nodata=nodata, connectivity=connectivity,
                         weight=weight)
        edges, weights = kruskal(values, valid, connectivity, weight)
        assert_same_forest(result, edges, weights)
        check_forest_invariants(result, values, valid, connectivity, weight)


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("weight", WEIGHTS)
def test_large_rasters_equal_scipy_on_ranks(connectivity, weight):
    # big enough for several list rounds and parallel radix-sort chunks
    rng = np.random.default_rng(11)
    values = fractal_surface((300, 470), seed=5)
    values[rng.random(values.shape) < 0.05] = NAN
    valid = ~np.isnan(values)
    result = cpu_mst(values, connectivity=connectivity, weight=weight)
    edges, weights = scipy_rank_forest(values, valid, connectivity, weight)
    assert_same_forest(result, edges, weights)
    _, pieces = ndi.label(valid, structure(connectivity))
    assert result.trees == pieces
    # integer values: ties everywhere
    ties = rng.integers(0, 3, (257, 301)).astype(np.int16)
    result = cpu_mst(ties, connectivity=connectivity, weight=weight)
    edges, weights = scipy_rank_forest(ties, np.ones(ties.shape, bool),
                                       connectivity, weight)
    assert_same_forest(result, edges, weights)


@st.composite
def seeded_rasters(draw, max_side=30):
    """(values, nodata, valid): random floats or few integers, random holes."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.tuples(st.integers(1, max_side),
                           st.integers(1, max_side)))
    if draw(st.booleans()):
        values = rng.random(shape).astype(np.float32)
    else:
        values = rng.integers(0, draw(st.integers(1, 5)), shape)
        values = values.astype(np.float32)
    values[rng.random(shape) < draw(st.floats(0, 0.4))] = NAN
    return values, None, ~np.isnan(values)


@settings(max_examples=60, deadline=None)
@given(st.one_of(small_rasters(max_side=30), seeded_rasters()),
       st.sampled_from([4, 8]), st.sampled_from(WEIGHTS),
       st.sampled_from([1, 45, 1 << 22]), st.sampled_from([1, 7, 1 << 21]))
def test_chunked_parallel_paths_equal_kruskal(raster, connectivity, weight,
                                              band_cells, traversal_budget):
    # Below _PARALLEL_MIN_CELLS the kernels run on one thread in one chunk;
    # lowering it sends small rasters through the multi-threaded, chunked
    # code (list rounds, contraction, radix passes, tree masks).  Small
    # bands and traversal budgets split the grid kernels and the
    # parent-direction search into many resumed calls.
    values, nodata, valid = raster
    saved = (_cpu._PARALLEL_MIN_CELLS, _cpu._BAND_CELLS,
             _forest_cpu._PARALLEL_MIN_CELLS, _forest_cpu._TRAVERSAL_BUDGET)
    _cpu._PARALLEL_MIN_CELLS = 8
    _cpu._BAND_CELLS = band_cells
    _forest_cpu._PARALLEL_MIN_CELLS = 8
    _forest_cpu._TRAVERSAL_BUDGET = traversal_budget
    try:
        result = cpu_mst(values, nodata=nodata, connectivity=connectivity,
                         weight=weight)
    finally:
        (_cpu._PARALLEL_MIN_CELLS, _cpu._BAND_CELLS,
         _forest_cpu._PARALLEL_MIN_CELLS,
         _forest_cpu._TRAVERSAL_BUDGET) = saved
    edges, weights = kruskal(values, valid, connectivity, weight)
    assert_same_forest(result, edges, weights)
    check_parent_direction(result.parent_direction, result.edges, valid,
                           connectivity)


def test_chunked_tree_masks_report_a_bad_edge(monkeypatch):
    # 40 good edges along a strip, then one joining non-neighbours: with
    # chunks of the edge list checked in parallel, the bad one is found
    monkeypatch.setattr(_cpu, "_PARALLEL_MIN_CELLS", 8)
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 8)
    valid = np.ones((3, 41), bool)
    edges = np.array([[c, c + 1] for c in range(40)] + [[0, 2]])
    with pytest.raises(InvalidInputError, match="edge 40 joins cells 0"):
        _cpu.parent_direction(edges, valid, Progress())
    labels, count = _cpu.label_forest(edges[:40], valid)
    assert count == 1 + 2 * 41
    assert np.all(labels[0] == 1)
    np.testing.assert_array_equal(labels[1:].reshape(-1), np.arange(2, 84))


def test_large_forest_parent_directions_and_labels():
    values = fractal_surface((90, 110), seed=9)
    valid = values > 300  # many pieces of many shapes
    values[~valid] = NAN
    for connectivity in (4, 8):
        result = cpu_mst(values, connectivity=connectivity)
        check_forest_invariants(result, values, valid, connectivity, "max")
        threshold = float(np.median(result.weights))
        labels, count = segment_by_threshold(result, threshold)
        expected, expected_count = forest_labels_oracle(
            result.edges[result.weights <= threshold], valid)
        np.testing.assert_array_equal(labels, expected)
        assert count == expected_count


# --------------------------------------------------------------------------
# the radix sort of the tree edges

def sort_oracle(edge_id, weight):
    order = np.lexsort((edge_id, weight))
    return edge_id[order], weight[order]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_cells", [300, 2**40])
def test_tree_edge_sort_equals_lexsort(dtype, n_cells):
    # 2**40 cells forces 64-bit keys that do not pack: sort by id, then
    # stably by weight
    rng = np.random.default_rng(1)
    size = 200_000
    specials = np.array([0.0, -0.0, np.inf, -np.inf, NAN, -NAN, 1e-30,
                         -1e30], dtype=dtype)
    weight = np.where(rng.random(size) < 0.3, rng.choice(specials, size),
                      rng.normal(0, 1e3, size).round(1)).astype(dtype)
    edge_id = rng.integers(0, min(4 * n_cells, 2**62), size)
    expected_id, expected_weight = sort_oracle(edge_id, weight)
    reports = []
    got_id, got_weight = _cpu._sort_tree_edges(
        edge_id.copy(), weight.copy(), n_cells, Progress(reports.append))
    np.testing.assert_array_equal(got_id, expected_id)
    np.testing.assert_array_equal(got_weight, expected_weight)
    assert got_weight.dtype == dtype
    # one report per radix pass, ending at 1
    assert len(reports) >= 3 and reports == sorted(reports)
    assert reports[-1] == 1.0


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 300),
                  elements=st.floats(width=32, allow_nan=True)),
       st.integers(0, 2**32 - 1))
def test_tree_edge_sort_any_float32(weight, seed):
    edge_id = np.random.default_rng(seed).permutation(4 * 300)[:weight.size]
    expected_id, expected_weight = sort_oracle(edge_id, weight)
    got_id, got_weight = _cpu._sort_tree_edges(edge_id.copy(), weight.copy(),
                                               300)
    np.testing.assert_array_equal(got_id, expected_id)
    np.testing.assert_array_equal(got_weight, expected_weight)


# --------------------------------------------------------------------------
# sources, errors, progress

def test_input_is_not_modified_and_views_work(tmp_path):
    values = fractal_surface((30, 40), seed=2).astype(np.float64)
    values[3:6, 7:9] = NAN
    expected = cpu_mst(values, weight="mean")
    path = tmp_path / "values.f64"
    values.tofile(path)
    mapped = np.memmap(path, dtype=np.float64, mode="r", shape=values.shape)
    result = cpu_mst(mapped, weight="mean")
    assert_same_forest(result, expected.edges, expected.weights)
    np.testing.assert_array_equal(np.fromfile(path), values.reshape(-1))
    # a strided, transposed view: the same raster as its contiguous copy
    wide = np.zeros((80, 60))
    view = wide[::2, ::2]
    view[:] = values.T
    before = wide.copy()
    result = cpu_mst(view, weight="absdiff", connectivity=8)
    reference = cpu_mst(np.ascontiguousarray(view), weight="absdiff",
                        connectivity=8)
    assert_same_forest(result, reference.edges, reference.weights)
    np.testing.assert_array_equal(wide, before)


def test_kernels_leave_arrays_unmodified():
    values = np.array([[3, 1, 2], [0, 5, 4]], dtype=np.int16)
    valid = values != 0
    copies = values.copy(), valid.copy()
    edges, weights = _cpu.spanning_forest(values, valid, 8, 3, np.float32,
                                          Progress())
    edges_before = edges.copy()
    _cpu.parent_direction(edges, valid, Progress())
    _cpu.label_forest(edges, valid)
    np.testing.assert_array_equal(values, copies[0])
    np.testing.assert_array_equal(valid, copies[1])
    np.testing.assert_array_equal(edges, edges_before)


@pytest.mark.parametrize("connectivity", [0, 6, 16, "4", 4.5, None])
def test_bad_connectivity_names_the_value(connectivity):
    with pytest.raises(InvalidInputError, match=repr(connectivity)):
        cpu_mst(TWO_BY_TWO, connectivity=connectivity)


@pytest.mark.parametrize("weight", ["median", "MAX", 0, None])
def test_bad_weight_names_the_value(weight):
    with pytest.raises(InvalidInputError, match=repr(weight)):
        cpu_mst(TWO_BY_TWO, weight=weight)


def test_kernel_rejects_bad_arguments():
    valid = np.ones((2, 2), bool)
    with pytest.raises(InvalidInputError, match="6"):
        _cpu.spanning_forest(TWO_BY_TWO, valid, 6, 0, np.float32, Progress())
    with pytest.raises(InvalidInputError, match="7"):
        _cpu.spanning_forest(TWO_BY_TWO, valid, 4, 7, np.float32, Progress())
    with pytest.raises(InvalidInputError, match="shape"):
        _cpu.spanning_forest(TWO_BY_TWO, valid[:1], 4, 0, np.float32,
                             Progress())
    # an edge between cells that are not neighbours
    with pytest.raises(InvalidInputError, match="neighbour"):
        _cpu.parent_direction(np.array([[0, 8]]), np.ones((3, 3), bool),
                              Progress())
    with pytest.raises(InvalidInputError, match="neighbour"):
        _cpu.label_forest(np.array([[0, 1]]), np.array([[True, False]]))
    with pytest.raises(InvalidInputError, match="cell indices"):
        _cpu.label_forest(np.array([[0, 4]]), np.ones((2, 2), bool))


def test_progress_is_monotone_and_cancel_raises():
    values = fractal_surface((64, 64), seed=1)
    seen = []
    cpu_mst(values, progress=lambda f: seen.append(f))
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) >= 6
    with pytest.raises(CancelledError):
        cpu_mst(values, progress=lambda f: False)


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4, 5])
def test_cancel_between_phases(stop_after):
    # the kernels report between phases and rounds: refusing the n-th report
    # stops the run there
    values = fractal_surface((64, 64), seed=1)
    calls = []

    def progress(fraction):
        calls.append(fraction)
        return len(calls) < stop_after

    with pytest.raises(CancelledError):
        _cpu.spanning_forest(values, np.ones(values.shape, bool), 4, 0,
                             np.float32, Progress(progress))
    assert len(calls) == stop_after


def test_cancel_during_parent_directions():
    values = fractal_surface((32, 32), seed=1)
    with pytest.raises(CancelledError):
        cpu_mst(values, progress=lambda f: f < 0.85)



# --------------------------------------------------------------------------
# the total weight: an exact sum rounded once (independent of the order)


def test_exact_total_literals():
    # float64 addition in order gives 0.0 or 2.0 here; the exact sum is 1.0
    assert _cpu.exact_total(np.array([1e16, 1.0, -1e16])) == 1.0
    assert float(np.sum(np.array([1e16, 1.0, -1e16]))) != 1.0
    # 2**-149 (the least float32 subnormal) survives next to 2**24
    tiny = np.array([2.0**24, 2.0**-149, -2.0**24], dtype=np.float32)
    assert _cpu.exact_total(tiny) == 2.0**-149
    # 0.1f * 10 is 1.0000000149011612 exactly
    assert _cpu.exact_total(np.full(10, 0.1, dtype=np.float32)) == \
        10 * float(np.float32(0.1))
    # halfway between two doubles: round half to even
    assert _cpu.exact_total(np.array([2.0**53, 1.0])) == 2.0**53
    assert _cpu.exact_total(np.array([2.0**53 + 2, 1.0])) == 2.0**53 + 4
    assert _cpu.exact_total(np.empty(0, np.float32)) == 0.0
    for dtype in (np.float32, np.float64):
        assert math.copysign(1, _cpu.exact_total(
            np.array([-0.0, -0.0], dtype=dtype))) == -1
        assert math.copysign(1, _cpu.exact_total(
            np.array([-0.0, 0.0], dtype=dtype))) == 1
        assert math.copysign(1, _cpu.exact_total(
            np.array([-1.0, 1.0], dtype=dtype))) == 1
        assert _cpu.exact_total(np.array([np.inf, 1], dtype=dtype)) == np.inf
        assert _cpu.exact_total(np.array([-np.inf, 1], dtype=dtype)) == -np.inf
        assert np.isnan(_cpu.exact_total(np.array([np.inf, -np.inf],
                                                  dtype=dtype)))
        assert np.isnan(_cpu.exact_total(np.array([1, np.nan], dtype=dtype)))
    # a float64 sum past the largest double is an infinity, as in addition
    assert _cpu.exact_total(np.array([1.7e308, 1.7e308])) == np.inf
    assert _cpu.exact_total(np.array([-1.7e308, -1.7e308])) == -np.inf


def finite_floats(dtype):
    width = 32 if dtype == np.float32 else 64
    return hnp.arrays(dtype, st.integers(0, 200), elements=st.floats(
        allow_nan=False, allow_infinity=False, width=width))


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([np.float32, np.float64]).flatmap(finite_floats),
       st.integers(0, 2**32 - 1))
def test_exact_total_equals_fsum_in_any_order_and_split(values, seed):
    try:
        expected = math.fsum(values.astype(np.float64))
    except OverflowError:  # float64 overflow inside fsum's partials
        expected = None
    total = _cpu.exact_total(values)
    if expected is not None and math.isfinite(expected):
        assert total == expected
    shuffled = np.random.default_rng(seed).permutation(values)
    cut = len(values) // 3
    parts = _cpu.sum_parts(shuffled[:cut])
    _cpu.sum_parts(shuffled[cut:], parts)
    assert _cpu.total_from_parts(parts) == total or (
        np.isnan(total) and np.isnan(_cpu.total_from_parts(parts)))
    halves = _cpu.sum_parts(shuffled[:cut]) + _cpu.sum_parts(shuffled[cut:])
    assert _cpu.total_from_parts(halves) == _cpu.total_from_parts(parts) \
        or np.isnan(total)


def test_sum_parts_reject_other_dtypes():
    with pytest.raises(InvalidInputError, match="float32 or float64"):
        _cpu.sum_parts(np.ones(3, dtype=np.int32))
    with pytest.raises(InvalidInputError, match="do not belong"):
        _cpu.sum_parts(np.ones(3), _cpu.sum_parts(np.ones(3, np.float32)))


def test_total_weight_is_the_exact_sum_of_the_weights():
    # values over 20 decades: a sum in float64 order-dependent rounding
    rng = np.random.default_rng(4)
    values = 10.0 ** rng.uniform(-8, 12, (60, 70))
    result = cpu_mst(values, connectivity=8)
    assert result.total_weight == math.fsum(result.weights)
    result = cpu_mst(values.astype(np.float32), weight="absdiff")
    assert result.total_weight == math.fsum(result.weights.astype(np.float64))


def test_without_edge_list_in_memory():
    values = fractal_surface((40, 33), seed=2)
    values[::5, ::3] = NAN
    for connectivity in (4, 8):
        full = cpu_mst(values, connectivity=connectivity, weight="mean")
        lean = cpu_mst(values, connectivity=connectivity, weight="mean",
                       edges=False)
        assert lean.edges is None and lean.weights is None
        assert lean.total_weight == full.total_weight
        assert lean.trees == full.trees
        np.testing.assert_array_equal(lean.parent_direction,
                                      full.parent_direction)
        with pytest.raises(InvalidInputError, match="edges=True"):
            segment_by_threshold(lean, 10.0)
