"""The banded, parallel forest walker (parent directions and piece labels of
a spanning forest) against the sequential walker it replaced
(tests/forest_oracle.py), bit for bit.

Forests come from the CPU spanning forest of hypothesis rasters with few
distinct values (ties), nodata holes and random subsets of the tree edges
(many pieces, as segments cut them), on 4- and 8-connected grids; the band
count is forced from one band to one band per row, so band borders cut the
pieces in every way a large raster would.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core import InvalidInputError
from gridgraph.core._common import Progress
from gridgraph.core.mst import _cpu, _forest_cpu
from gridgraph.tests.forest_oracle import walk_forest_sequential
from gridgraph.tests.rasters import fractal_surface


def assert_same_walk(edges, valid, bands):
    expected_direction, expected_labels, expected_trees = \
        walk_forest_sequential(edges, valid, None, True, True)
    direction, labels, trees = _forest_cpu.walk_forest(
        edges, valid, None, True, True, bands=bands)
    assert direction.dtype == np.float32
    # bit for bit, NaN included
    np.testing.assert_array_equal(direction.view(np.uint32),
                                  expected_direction.view(np.uint32))
    assert labels.dtype == expected_labels.dtype
    np.testing.assert_array_equal(labels, expected_labels)
    assert trees == expected_trees


@st.composite
def forests(draw):
    rows = draw(st.integers(1, 24))
    cols = draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = rng.integers(0, draw(st.sampled_from([1, 2, 4, 1000])),
                          (rows, cols)).astype(np.float32)
    valid = rng.random((rows, cols)) >= draw(st.sampled_from([0, 0.1, 0.4]))
    connectivity = draw(st.sampled_from([4, 8]))
    edges, _ = _cpu.spanning_forest(values, valid, connectivity,
                                    draw(st.integers(0, 3)), np.float32,
                                    Progress())
    keep = rng.random(len(edges)) < draw(st.sampled_from([1.0, 0.7, 0.2]))
    edges = edges[keep]
    if draw(st.booleans()):  # ends in either order, rows in any order
        edges = edges[rng.permutation(len(edges))]
        flip = rng.random(len(edges)) < 0.5
        edges[flip] = edges[flip][:, ::-1]
    bands = draw(st.sampled_from([1, 2, 3, 5, rows]))
    return edges, valid, bands


@settings(max_examples=80, deadline=None)
@given(forests())
def test_banded_walk_equals_sequential_walk(forest):
    assert_same_walk(*forest)


@pytest.mark.parametrize("bands", [1, 2, 7, 64])
@pytest.mark.parametrize("connectivity", [4, 8])
def test_fractal_forest_with_holes(bands, connectivity):
    # long winding tree paths that cross many band borders back and forth
    values = fractal_surface((64, 70), seed=3)
    valid = values > np.quantile(values, 0.2)
    edges, _ = _cpu.spanning_forest(values, valid, connectivity, 0,
                                    np.float32, Progress())
    assert_same_walk(edges, valid, bands)
    assert_same_walk(edges[::2], valid, bands)


def test_serpentine_tree_reroots_through_every_band():
    # one path snaking down the rows: every band piece but the first hangs
    # from the band above through the far end of its path
    rows, cols = 12, 9
    edges = []
    for r in range(rows):
        for c in range(cols - 1):
            edges.append((r * cols + c, r * cols + c + 1))
        if r + 1 < rows:
            c = cols - 1 if r % 2 == 0 else 0
            edges.append((r * cols + c, (r + 1) * cols + c))
    edges = np.array(edges)
    valid = np.ones((rows, cols), bool)
    for bands in (1, 2, 3, 4, 6, 12):
        assert_same_walk(edges, valid, bands)


def test_default_bands_on_a_raster_above_the_parallel_minimum(monkeypatch):
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 16)
    monkeypatch.setattr(_forest_cpu, "_TRAVERSAL_BUDGET", 5)
    values = fractal_surface((40, 33), seed=5)
    valid = values > np.quantile(values, 0.1)
    edges, _ = _cpu.spanning_forest(values, valid, 8, 3, np.float32,
                                    Progress())
    assert_same_walk(edges, valid, None)


def test_empty_and_edgeless_rasters():
    for shape in [(0, 0), (0, 5), (5, 0), (1, 1), (3, 4)]:
        valid = np.ones(shape, bool)
        assert_same_walk(np.empty((0, 2), np.int64), valid, 2)


def test_bad_edge_found_in_any_chunk(monkeypatch):
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 8)
    valid = np.ones((6, 41), bool)
    edges = np.array([[c, c + 1] for c in range(40)] * 3 + [[0, 2], [1, 90]])
    with pytest.raises(InvalidInputError, match="edge 120 joins cells 0"):
        _forest_cpu.walk_forest(edges, valid, None, True, False, bands=6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_total_in_parallel_chunks_equals_one_pass(monkeypatch, dtype):
    rng = np.random.default_rng(11)
    weights = (rng.standard_normal(1001) * 10.0 ** rng.integers(
        -30, 30, 1001)).astype(dtype)
    weights[::97] = -0.0
    one_pass = _cpu.exact_total(weights)
    monkeypatch.setattr(_cpu, "_PARALLEL_MIN_CELLS", 8)
    assert np.float64(_cpu.exact_total(weights)).view(np.uint64) == \
        np.float64(one_pass).view(np.uint64)
    weights[500] = np.inf
    assert _cpu.exact_total(weights) == np.inf
    assert _cpu.exact_total(-np.zeros(100, dtype)) == 0.0
    assert np.signbit(_cpu.exact_total(-np.zeros(100, dtype)))


@pytest.mark.parametrize("connectivity", [4, 8])
def test_unsorted_forest_ids_give_the_sorted_forest_and_its_walk(
        monkeypatch, connectivity):
    """``unsorted_forest`` (Borůvka's order, parallel hooking and relabelling
    in chunks) holds the same tree edges as ``spanning_forest``, and the
    walk from their ids (``walk_forest_ids``: no edge list) is the walk from
    the edge list, bit for bit, with band borders and chunks everywhere."""
    monkeypatch.setattr(_cpu, "_PARALLEL_MIN_CELLS", 8)
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 8)
    rng = np.random.default_rng(connectivity)
    values = np.round(fractal_surface((61, 47), seed=connectivity) / 100)
    valid = rng.random(values.shape) > 0.15
    edges, weights = _cpu.spanning_forest(values, valid, connectivity, 0,
                                          np.float32, Progress())
    edge_id, unsorted_weights = _cpu.unsorted_forest(
        values, valid, connectivity, 0, np.float32, Progress())
    low = edge_id >> 2
    rank = edge_id & 3
    high = low + np.array([1, values.shape[1] - 1, values.shape[1],
                           values.shape[1] + 1])[rank]
    order = np.lexsort((high, low, unsorted_weights))
    np.testing.assert_array_equal(np.stack([low, high], 1)[order], edges)
    np.testing.assert_array_equal(unsorted_weights[order], weights)
    for bands in (None, 1, 5):
        expected = _forest_cpu.walk_forest(edges, valid, None, True, True,
                                           bands=bands)
        got = _forest_cpu.walk_forest_ids(edge_id, valid, None, True, True,
                                          bands=bands)
        np.testing.assert_array_equal(got[0].view(np.uint32),
                                      expected[0].view(np.uint32))
        np.testing.assert_array_equal(got[1], expected[1])
        assert got[2] == expected[2]
