"""Threshold segments straight from the raster (segments_by_threshold)
against the segments cut from the minimum spanning forest
(segment_by_threshold of minimum_spanning_tree): the same labels, numbered
the same way, bit for bit, and against scipy's connected components of the
thresholded edge graph.

Rasters: hypothesis rasters with few distinct values (ties), NaN and nodata
holes, +-inf and -0.0, integer and float64 inputs; thresholds at, between
and beyond the weights (including +-inf and numbers past float32's
range, which numpy compares in float64); lists of thresholds in any order
with repeats; strips forced so that seams cut small rasters.
"""

import numpy as np
import pytest
import scipy.sparse as sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.sparse.csgraph import connected_components

from gridgraph.core import (CancelledError, InvalidInputError,
                            minimum_spanning_tree, segment_by_threshold,
                            segments_by_threshold)
from gridgraph.core._common import Progress, valid_mask
from gridgraph.core.mst import WEIGHTS
from gridgraph.core.mst._segments_cpu import label_thresholds
from gridgraph.core.mst.segments import comparison_threshold
from gridgraph.tests.rasters import fractal_surface

NAN = np.nan
INF = np.inf


@st.composite
def rasters(draw, max_side=14):
    shape = draw(st.tuples(st.integers(1, max_side),
                           st.integers(1, max_side)))
    kind = draw(st.sampled_from(["int16", "uint8", "float32", "float64"]))
    if kind.startswith("float"):
        elements = st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, -2.0, 3.0,
                                    0.125, 0.375, NAN, INF, -INF])
        nodata = draw(st.sampled_from([None, 3.0]))
    else:
        top = draw(st.integers(1, 4))
        elements = st.integers(0, top)
        nodata = draw(st.sampled_from([None, top]))
    values = draw(hnp.arrays(np.dtype(kind), shape, elements=elements))
    return values, nodata


THRESHOLDS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 0.1, 2.0, 3.0, -2.0,
                              INF, -INF, 1e40, -1e40, 3.4028235e38])


def from_tree(values, nodata, connectivity, weight, threshold):
    tree = minimum_spanning_tree(values, connectivity=connectivity,
                                 weight=weight, nodata=nodata, backend="cpu")
    return segment_by_threshold(tree, threshold)


def assert_same(got, expected):
    labels, count = got
    expected_labels, expected_count = expected
    assert labels.dtype == expected_labels.dtype
    np.testing.assert_array_equal(labels, expected_labels)
    assert count == expected_count


@settings(max_examples=80, deadline=None)
@given(rasters(), st.sampled_from([4, 8]), st.sampled_from(WEIGHTS),
       THRESHOLDS)
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_equal_segments_from_the_tree(raster, connectivity, weight,
                                      threshold):
    values, nodata = raster
    got = segments_by_threshold(values, threshold, connectivity=connectivity,
                                weight=weight, nodata=nodata)
    assert_same(got, from_tree(values, nodata, connectivity, weight,
                               threshold))


@settings(max_examples=40, deadline=None)
@given(rasters(), st.sampled_from([4, 8]), st.sampled_from(WEIGHTS),
       st.lists(THRESHOLDS, min_size=1, max_size=5))
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_list_of_thresholds_equals_one_at_a_time(raster, connectivity,
                                                   weight, thresholds):
    values, nodata = raster
    results = segments_by_threshold(values, thresholds,
                                    connectivity=connectivity, weight=weight,
                                    nodata=nodata)
    assert len(results) == len(thresholds)
    for threshold, got in zip(thresholds, results):
        assert_same(got, from_tree(values, nodata, connectivity, weight,
                                   threshold))
    arrays = [labels for labels, _ in results]
    assert len({id(a) for a in arrays}) == len(arrays)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 30),
       st.sampled_from([4, 8]), st.sampled_from(WEIGHTS),
       st.lists(st.floats(0, 1), min_size=1, max_size=4),
       st.sampled_from([1, 2, 3, 7, 30]))
def test_strips_and_seams_equal_scipy(seed, rows, cols, connectivity, weight,
                                      thresholds, strips):
    rng = np.random.default_rng(seed)
    values = rng.random((rows, cols)).astype(np.float32)
    values[rng.random((rows, cols)) < 0.15] = NAN
    valid = ~np.isnan(values)
    ordered = sorted(set(comparison_threshold(t, np.float32)
                         for t in thresholds))
    results = label_thresholds(values, valid, connectivity,
                               WEIGHTS.index(weight), ordered, Progress(),
                               strips=strips)
    for threshold, (labels, count) in zip(ordered, results):
        expected, expected_count = scipy_segments(values, valid, connectivity,
                                                  weight, threshold)
        np.testing.assert_array_equal(labels, expected)
        assert count == expected_count


def scipy_segments(values, valid, connectivity, weight, threshold):
    """Components of the graph of edges with weight <= threshold (float64
    comparison of float32 weights), renumbered by first cell."""
    rows, cols = values.shape
    index = np.arange(values.size).reshape(rows, cols)
    offsets = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if connectivity == 8
                                  else [])
    low, high = [], []
    for dr, dc in offsets:
        a = index[:rows - dr, max(0, -dc):cols - max(0, dc)]
        b = index[dr:, max(0, dc):cols - max(0, -dc)]
        x = values.reshape(-1)[a.ravel()]
        y = values.reshape(-1)[b.ravel()]
        w = {"max": np.maximum(x, y), "min": np.minimum(x, y),
             "mean": (x + y) * np.float32(0.5),
             "absdiff": np.abs(x - y)}[weight]
        keep = (valid.reshape(-1)[a.ravel()] & valid.reshape(-1)[b.ravel()]
                & (w.astype(np.float64) <= threshold))
        low.append(a.ravel()[keep])
        high.append(b.ravel()[keep])
    low, high = np.concatenate(low), np.concatenate(high)
    n = values.size
    graph = sparse.coo_matrix((np.ones(len(low)), (low, high)), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    labels = np.zeros(n, dtype=np.int32)
    number = {}
    for cell in np.flatnonzero(valid.reshape(-1)):
        labels[cell] = number.setdefault(component[cell], len(number) + 1)
    return labels.reshape(rows, cols), len(number)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_fractal_raster_many_thresholds(connectivity):
    values = fractal_surface((70, 90), seed=2)
    values[values > 900] = NAN
    thresholds = [1.0, 5.0, 20.0, 0.5, 5.0]
    results = segments_by_threshold(values, thresholds, weight="absdiff",
                                    connectivity=connectivity)
    tree = minimum_spanning_tree(values, weight="absdiff",
                                 connectivity=connectivity, backend="cpu")
    for threshold, got in zip(thresholds, results):
        assert_same(got, segment_by_threshold(tree, threshold))


def test_thresholds_past_float32_compare_as_numpy_does():
    # float32 weights: 1e40 is compared in float64 (inf > 1e40), inf in
    # float32 (inf <= inf); 0.1 is rounded to float32 first
    values = np.array([[INF, INF, 0.1, 0.0]], dtype=np.float32)
    assert segments_by_threshold(values, 1e40, weight="min")[1] == 2
    assert segments_by_threshold(values, INF, weight="min")[1] == 1
    assert segments_by_threshold(values, 0.1, weight="max")[1] == 3
    assert comparison_threshold(0.1, np.float32) == float(np.float32(0.1))
    assert comparison_threshold(0.1, np.float64) == 0.1


def test_nodata_path_and_dtypes():
    values = np.array([[5, 5, 7], [7, 9, 9]], dtype=np.int16)
    labels, count = segments_by_threshold(values, 0, nodata=7,
                                          weight="absdiff")
    np.testing.assert_array_equal(labels, [[1, 1, 0], [0, 2, 2]])
    assert labels.dtype == np.int32 and count == 2
    labels, count = segments_by_threshold(np.zeros((0, 3)), 1.0)
    assert labels.shape == (0, 3) and count == 0


def test_bad_arguments_name_the_problem():
    values = np.ones((2, 2), np.float32)
    with pytest.raises(InvalidInputError, match="'median'"):
        segments_by_threshold(values, 1.0, weight="median")
    with pytest.raises(InvalidInputError, match="6"):
        segments_by_threshold(values, 1.0, connectivity=6)
    with pytest.raises(InvalidInputError, match="at least one"):
        segments_by_threshold(values, [])
    with pytest.raises(InvalidInputError, match="'a'"):
        segments_by_threshold(values, ["a"])
    with pytest.raises(InvalidInputError, match="threshold.*nan"):
        segments_by_threshold(values, [1.0, NAN])


def test_cancel_raises():
    with pytest.raises(CancelledError):
        segments_by_threshold(fractal_surface((32, 32)), 3.0,
                              progress=lambda f: False)


def test_nan_threshold_is_refused_by_every_segmenting_function():
    from gridgraph.core.tiled_outputs import segment_by_threshold_streamed
    values = np.ones((3, 3), np.float32)
    tree = minimum_spanning_tree(values, backend="cpu")
    for segment in (lambda: segments_by_threshold(values, NAN),
                    lambda: segment_by_threshold(tree, NAN),
                    lambda: segment_by_threshold_streamed(tree, NAN)):
        with pytest.raises(InvalidInputError, match="threshold.*nan"):
            segment()
