"""The failure contract (issue 8), part 4: the core API's arguments (a
hypothesis fuzz: every call returns a valid result or raises
InvalidInputError, never another exception), cost overflow and +inf
barriers, rotated rasters with map units."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridgraph.core import (BackendUnavailableError, CancelledError,
                            InvalidInputError,
                            connected_components, cost_distance,
                            least_cost_path, minimum_spanning_tree,
                            segment_by_threshold)

def CANCEL(fraction):  # noqa: N802 - a constant callback
    return False


NASTY_NUMBERS = st.sampled_from([
    0, -1, 1, 2, 3, 4, 7, 8, 16, 2**40, -2**63, 1.5, 0.0, -0.0, 1e308,
    float("nan"), float("inf"), -float("inf"), np.int64(8), np.float32(4.0),
    True, "x", "8", None, [8], (4, 4), b"4", complex(1, 1), object()])

RASTERS = st.one_of(
    st.sampled_from([
        np.ones((3, 4)), np.arange(12).reshape(3, 4), np.zeros((1, 1)),
        np.full((2, 2), np.nan), np.array([[1.0, np.inf], [-1.0, 2.0]]),
        np.ones((0, 3)), np.ones(5), np.ones((2, 2, 2)), np.array(5.0),
        np.array([["a", "b"]]), np.ones((2, 2), dtype=complex),
        np.array([[True, False], [False, True]]), [[1, 2], [3]], "x", None,
        [[1, 2], [3, 4]], np.array([[1e308, 1e308], [1e308, 1e308]]),
        np.full((3, 3), 2**62, dtype=np.int64)]),
    st.integers(1, 5).flatmap(lambda rows: st.integers(1, 5).flatmap(
        lambda cols: st.lists(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True,
                                width=64), st.integers(-3, 3)),
            min_size=rows * cols, max_size=rows * cols).map(
                lambda cells: np.array(cells, dtype=float).reshape(
                    rows, cols)))))

COMMON = {
    "connectivity": NASTY_NUMBERS,
    "nodata": NASTY_NUMBERS,
    "backend": st.sampled_from(["cpu", "auto", "CPU", "gpu", "", 3, None]),
    "tile_size": NASTY_NUMBERS,
    "memory_limit_mb": NASTY_NUMBERS,
    "executor": st.sampled_from([None, "tcp://x:1", 3, object()]),
    "progress": st.sampled_from([None, 3, "x", lambda f: True, CANCEL]),
    "band": NASTY_NUMBERS,
    "out_dir": st.sampled_from([None, 3, "/nonexistent-gridgraph"]),
}


def keywords(names):
    return st.fixed_dictionaries({}, optional={name: COMMON[name]
                                              for name in names})


def call(function, *args, **kwargs):
    """The call's result, or None after an InvalidInputError; any other
    exception fails the test."""
    try:
        return function(*args, **kwargs)
    except InvalidInputError:
        return None
    except BackendUnavailableError:
        assert kwargs.get("backend") in ("cuda",)
        return None
    except CancelledError:  # asked for: the progress callback said stop
        assert kwargs.get("progress") is CANCEL
        return None


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=list(HealthCheck))


@FUZZ
@given(RASTERS, keywords(COMMON), st.sampled_from(
    ["equal", "nonzero", "x", 1, None, ["equal"]]))
def test_connected_components_arguments(values, options, mode):
    result = call(connected_components, values, mode=mode, **options)
    if result is not None:
        assert result.labels.shape == np.asarray(values).shape
        assert result.count == len(np.unique(result.labels[result.labels > 0]))


@FUZZ
@given(RASTERS, keywords(COMMON), st.sampled_from(
    ["max", "min", "mean", "absdiff", "sum", 0, None]))
def test_minimum_spanning_tree_arguments(values, options, weight):
    result = call(minimum_spanning_tree, values, weight=weight, **options)
    if result is not None:
        assert result.parent_direction.shape == np.asarray(values).shape
        assert len(result.edges) == len(result.weights)


SOURCES = st.sampled_from([
    [(0, 0)], [(0, 0), (1, 1)], [(9, 9)], [(-1, 0)], [(0.5, 0)],
    [(float("nan"), 0)], [(0, 0, 0)], [[0, 0], [1]], [], "x", None, 3,
    [(2**70, 0)], np.ones((3, 4), dtype=bool), [("a", "b")]])


@FUZZ
@given(RASTERS, SOURCES, keywords(COMMON), st.fixed_dictionaries({}, optional={
    "max_cost": NASTY_NUMBERS,
    "cell_size": st.sampled_from([None, (1, 1), (float("inf"), 1), (0, 1),
                                  (-2, 3), ("x", 1), 5, (1, 2, 3), "ab"]),
    "source_ids": st.sampled_from([None, [7], [1, 2], ["x"], [1.5],
                                   [float("nan")], [2**70], 3]),
    "source_nodata": NASTY_NUMBERS,
    "outputs": st.sampled_from([None, "accumulated", ["direction"], 5,
                                ["nope"], [], [None]]),
}))
def test_cost_distance_arguments(cost, sources, options, extra):
    result = call(cost_distance, cost, sources, **options, **extra)
    if result is not None and result.direction is not None:
        finite = np.argwhere(~np.isnan(result.direction))
        if len(finite):
            path = call(least_cost_path, result, *finite[0])
            assert path is not None and len(path) >= 1


@FUZZ
@given(st.one_of(NASTY_NUMBERS, st.just(None)), NASTY_NUMBERS)
def test_least_cost_path_and_segments_arguments(row, col):
    result = cost_distance(np.ones((3, 4)), [(0, 0)], backend="cpu")
    path = call(least_cost_path, result, row, col)
    if path is not None:
        assert tuple(path[-1]) == (0, 0)
    tree = minimum_spanning_tree(np.arange(12.0).reshape(3, 4),
                                 backend="cpu")
    segments = call(segment_by_threshold, tree, row)
    if segments is not None:
        assert segments[0].shape == (3, 4)
    assert call(least_cost_path, "not a result", 0, 0) is None
    assert call(segment_by_threshold, "not a result", 1.0) is None


@pytest.mark.parametrize("bad", [
    {"cell_size": (float("inf"), 1)}, {"nodata": "x"}, {"max_cost": "x"},
    {"max_cost": float("nan")}, {"tile_size": float("inf")},
    {"memory_limit_mb": "x"}, {"connectivity": float("inf")}])
def test_the_issues_examples_raise_invalid_input(bad):
    with pytest.raises(InvalidInputError):
        cost_distance(np.ones((3, 3)), [(0, 0)], backend="cpu", **bad)


# ------------------------------------------------------------ cost overflow

@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_costs_near_the_float64_limit_are_summed_without_overflow(backend):
    """(1e308 + 1e308) / 2 overflows when added first; the step costs
    1e308 exactly (computed on costs scaled by a power of two)."""
    if backend == "cuda":
        pytest.importorskip("numba.cuda")
        from gridgraph.core._common import cuda_available
        if not cuda_available():
            pytest.skip("no CUDA device nor the simulator "
                        "(NUMBA_ENABLE_CUDASIM=1)")
    result = cost_distance(np.full((1, 2), 1e308), [(0, 0)],
                           connectivity=4, backend=backend)
    np.testing.assert_array_equal(result.accumulated, [[0.0, 1e308]])
    small = cost_distance(np.full((1, 2), 3.0), [(0, 0)], connectivity=4,
                          backend=backend)
    np.testing.assert_array_equal(small.accumulated, [[0.0, 3.0]])


@pytest.mark.parametrize("cost", [np.full((1, 5), 1e308),
                                  np.full((1, 40), 1e307),
                                  np.full((4, 4), 1e308)])
def test_an_overflowing_accumulated_cost_is_an_error(cost):
    with pytest.raises(InvalidInputError, match="largest float64"):
        cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu")


def test_infinite_costs_are_barriers_not_overflow():
    cost = np.array([[1.0, np.inf, 1.0], [1.0, np.inf, 1.0]])
    result = cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu")
    assert np.isnan(result.accumulated[:, 1:]).all()
    np.testing.assert_array_equal(result.allocation[:, 1:], 0)
    assert result.accumulated[1, 0] == 1.0


def test_a_max_cost_below_the_overflow_leaves_cells_unreached_quietly():
    result = cost_distance(np.full((1, 5), 1e308), [(0, 0)], connectivity=4,
                           max_cost=1.5e308, backend="cpu")
    assert result.accumulated[0, 1] == 1e308
    assert np.isnan(result.accumulated[0, 2:]).all()


def test_overflow_through_processing(gridgraph_provider, run_algorithm,
                                     tmp_path):
    from qgis.core import QgsProcessingException

    from conftest import cell_centre, write_geotiff, write_points
    cost = write_geotiff(tmp_path / "cost.tif", np.full((3, 6), 1e308))
    point = write_points(tmp_path / "p.gpkg", [cell_centre(0, 0)])
    destination = write_points(tmp_path / "d.gpkg", [cell_centre(2, 5)])
    with pytest.raises(QgsProcessingException, match="largest float64"):
        run_algorithm("gridgraph:costdistance", {
            "INPUT": cost, "SOURCES": point, "DESTINATIONS": destination,
            "OUTPUT": str(tmp_path / "o.tif"),
            "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")})
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.endswith(".aux.xml")) == [
                      "cost.tif", "d.gpkg", "p.gpkg"]


def test_float_inputs_are_not_scaled_when_small():
    from gridgraph.core.costdistance import _overflow_exponent
    assert _overflow_exponent(1e300, np.array([1.0, math.sqrt(5)])) == 0
    assert _overflow_exponent(1e308, np.array([1.0])) > 0


@pytest.mark.parametrize("cost", [np.full((12, 12), 1e308),
                                  np.full((20, 20), 1e306)])
def test_the_tiled_path_refuses_costs_whose_sums_could_overflow(cost):
    # the tiles cannot see the whole result: the bound is taken up front
    with pytest.raises(InvalidInputError, match="too large for the tiled"):
        cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu",
                      tile_size=8)


def test_the_tiled_path_keeps_large_costs_that_cannot_overflow():
    cost = np.full((12, 12), 1e300)
    cost[5, 5] = np.inf  # a barrier, not a cost
    tiled = cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu",
                          tile_size=8)
    in_memory = cost_distance(cost, [(0, 0)], connectivity=8, backend="cpu")
    np.testing.assert_array_equal(tiled.accumulated, in_memory.accumulated)
    # a maximum cost bounds the sums: 1e306 a cell, 144 cells would not
    # fit the bound, a limit of 1.5e306 does
    limited = {tile_size: cost_distance(
        np.full((12, 12), 1e306), [(0, 0)], connectivity=4, backend="cpu",
        tile_size=tile_size, max_cost=1.5e306) for tile_size in (None, 8)}
    assert limited[8].accumulated[0, 1] == 1e306
    assert np.isnan(limited[8].accumulated[0, 2:]).all()
    np.testing.assert_array_equal(limited[8].accumulated,
                                  limited[None].accumulated)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("tile_size", [None, 8])
def test_an_empty_raster_is_not_tiled(shape, tile_size):
    """No tile of an empty raster (the fuzz's find: an IndexError in the
    MST's leaf round, a segfault in the components' kernels): the tiled
    options give the in-memory answer."""
    values = np.ones(shape)
    tree = minimum_spanning_tree(values, tile_size=tile_size)
    assert tree.parent_direction.shape == shape and len(tree.edges) == 0
    labels = connected_components(values, tile_size=tile_size)
    assert labels.labels.shape == shape and labels.count == 0
    with pytest.raises(InvalidInputError, match="no valid cell"):
        cost_distance(values, sources=np.array([[0, 0]]),
                      tile_size=tile_size)
