"""Minimum spanning forest on the CUDA backend (simulator on CI).

How correctness is established: a literal grid solved by hand; on
hypothesis-generated rasters (<= 10 x 10, few distinct values so ties are
everywhere, NaN holes, +-inf and -0.0 cells) edges, their order and the
weights' bits identical to the CPU backend, for every weight function,
both connectivities, both key layouts (packed 64-bit keys and the
two-stage minima) and both phases (implicit grid rounds and edge-list
rounds, chosen with ``contract_below``).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gridgraph.core import minimum_spanning_tree
from gridgraph.core._common import Progress
from gridgraph.core.mst import _cpu, _cuda

SIM_SETTINGS = settings(max_examples=12, deadline=None)


def assert_same_forest(values, valid, connectivity, weight_index,
                       contract_below=_cuda.CONTRACT_BELOW):
    weight_dtype = np.float64 if values.dtype.itemsize > 4 else np.float32
    expected_edges, expected_weights = _cpu.spanning_forest(
        values, valid, connectivity, weight_index, weight_dtype, Progress())
    edges, weights = _cuda.spanning_forest(
        values, valid, connectivity, weight_index, weight_dtype, Progress(),
        contract_below=contract_below)
    assert edges.dtype == np.int64 and edges.shape == expected_edges.shape
    assert weights.dtype == expected_weights.dtype
    np.testing.assert_array_equal(edges, expected_edges)
    # bit for bit: -0 and NaN come out in the same canonical form
    np.testing.assert_array_equal(weights.view(np.uint8),
                                  expected_weights.view(np.uint8))
    return edges, weights


def test_literal_absdiff():
    grid = np.array([[1, 5],
                     [2, 3]], dtype=np.float32)
    edges, weights = _cuda.spanning_forest(grid, np.ones((2, 2), bool), 4, 3,
                                           np.float32, Progress())
    np.testing.assert_array_equal(edges, [[0, 2], [2, 3], [1, 3]])
    np.testing.assert_array_equal(weights, [1, 1, 2])


def test_literal_plateau_ties_by_low_then_high():
    # every edge weighs 7 (max): the order (weight, low, high) alone decides,
    # and Borůvka must give the lexicographically first spanning tree
    grid = np.full((2, 3), 7, dtype=np.int16)
    edges, weights = _cuda.spanning_forest(grid, np.ones((2, 3), bool), 8, 0,
                                           np.float32, Progress())
    np.testing.assert_array_equal(edges, [[0, 1], [0, 3], [0, 4], [1, 2],
                                          [1, 5]])
    assert (weights == 7).all()


def test_public_api_dispatches_to_cuda():
    grid = np.random.default_rng(5).integers(0, 3, (7, 9)).astype(np.float32)
    grid[2, 3] = np.nan
    gpu = minimum_spanning_tree(grid, connectivity=8, weight="mean",
                                backend="cuda")
    cpu = minimum_spanning_tree(grid, connectivity=8, weight="mean",
                                backend="cpu")
    np.testing.assert_array_equal(gpu.edges, cpu.edges)
    np.testing.assert_array_equal(gpu.weights, cpu.weights)
    assert gpu.trees == cpu.trees
    np.testing.assert_array_equal(gpu.parent_direction, cpu.parent_direction)


def test_no_edges():
    valid = np.array([[True, False], [False, True]])
    values = np.ones((2, 2), dtype=np.float32)
    edges, weights = _cuda.spanning_forest(values, valid, 4, 0, np.float32,
                                           Progress())
    assert edges.shape == (0, 2) and weights.shape == (0,)
    edges, weights = _cuda.spanning_forest(np.ones((0, 3)), np.ones((0, 3),
                                           bool), 4, 0, np.float64,
                                           Progress())
    assert edges.shape == (0, 2)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_special_values_inf_and_negative_zero():
    grid = np.array([[np.inf, np.inf, -0.0, 0.0],
                     [-np.inf, 1.0, -0.0, np.inf],
                     [2.0, -1.0, -1.0, np.inf]], dtype=np.float64)
    valid = np.ones(grid.shape, bool)
    for weight_index in range(4):  # absdiff/mean give NaN weights here
        assert_same_forest(grid, valid, 4, weight_index)
        assert_same_forest(grid.astype(np.float32), valid, 8, weight_index)


@st.composite
def rasters(draw):
    rows = draw(st.integers(1, 10))
    cols = draw(st.integers(1, 10))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int16]))
    values = draw(hnp.arrays(dtype, (rows, cols),
                             elements=st.sampled_from([0, 1, 2, 5])))
    valid = draw(hnp.arrays(np.bool_, (rows, cols),
                            elements=st.sampled_from([True] * 5 + [False])))
    return values, valid


@SIM_SETTINGS
@given(rasters(), st.sampled_from([4, 8]), st.integers(0, 3),
       st.sampled_from([0.0, 1 / 8, 100.0]))
def test_same_forest_as_cpu(raster, connectivity, weight_index,
                            contract_below):
    values, valid = raster
    assert_same_forest(values, valid, connectivity, weight_index,
                       contract_below)


@settings(max_examples=6, deadline=None)
@given(rasters(), st.sampled_from([4, 8]), st.integers(0, 3))
def test_two_stage_minima_match_packed_keys(monkeypatch_module, raster,
                                            connectivity, weight_index):
    # rasters of 2**30 cells and more cannot pack (weight, edge id) into
    # 64 bits; force that path on small ones
    values, valid = raster
    values = values.astype(np.float32)
    with monkeypatch_module.context() as patch:
        patch.setattr(_cuda, "packed_keys_fit", lambda n, dtype: False)
        assert_same_forest(values, valid, connectivity, weight_index, 1 / 8)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_radix_sort_matches_numpy():
    from numba import cuda

    from gridgraph.core._cuda_common import radix_sort
    rng = np.random.default_rng(7)
    keys = rng.integers(-2**62, 2**62, 100)
    keys[::7] = keys[0]  # repeats
    keys[1::5] >>= 40  # digits that vary in some keys only
    carried = rng.integers(0, 4, 100)
    # (the keys-only sort runs in every MST test above)
    sorted_keys, sorted_carried = radix_sort(
        cuda.to_device(keys), len(keys), carried=cuda.to_device(carried))
    order = np.lexsort((carried, keys))
    np.testing.assert_array_equal(sorted_keys.copy_to_host(), keys[order])
    np.testing.assert_array_equal(sorted_carried.copy_to_host(),
                                  carried[order])


def test_exclusive_scan_several_levels():
    from numba import cuda

    from gridgraph.core._cuda_common import (SCAN_ITEMS, SCAN_THREADS,
                                             exclusive_scan)
    n = SCAN_THREADS * SCAN_ITEMS * 3 + 5  # more than one chunk
    values = np.random.default_rng(8).integers(0, 100, n)
    device = cuda.to_device(values)
    exclusive_scan(device, n)
    np.testing.assert_array_equal(device.copy_to_host(),
                                  np.concatenate([[0], np.cumsum(values)[:-1]]))


# --------------------------------------------------------------------------
# The public API's CUDA path: valid cells, parent directions (Euler tour)
# and the exact total on the device (core/mst/_cuda_tree.py).  Rasters are
# sized from the kernels' constants: several flat blocks, tours many times
# longer than MAX_SEGMENT, 2**SAMPLE_BITS cells per sample on average.

from gridgraph.core._cuda_common import FLAT_THREADS  # noqa: E402
from gridgraph.core.mst import _cuda_tree  # noqa: E402

TOUR_ROWS = FLAT_THREADS // 4 + 3
TOUR_COLS = FLAT_THREADS // 2 + 5


def assert_same_result(values, connectivity, weight, nodata=None,
                       edges=True):
    gpu = minimum_spanning_tree(values, connectivity, weight, nodata,
                                backend="cuda", edges=edges)
    cpu = minimum_spanning_tree(values, connectivity, weight, nodata,
                                backend="cpu")
    assert gpu.trees == cpu.trees
    # bit for bit, -0.0 and NaN included
    assert np.float64(gpu.total_weight).tobytes() == \
        np.float64(cpu.total_weight).tobytes()
    assert gpu.parent_direction.dtype == np.float32
    np.testing.assert_array_equal(gpu.parent_direction, cpu.parent_direction)
    if edges:
        np.testing.assert_array_equal(gpu.edges, cpu.edges)
        np.testing.assert_array_equal(gpu.weights.view(np.uint8),
                                      cpu.weights.view(np.uint8))
    else:
        assert gpu.edges is None and gpu.weights is None
    return gpu


def test_tour_constants_are_crossed():
    # the rasters below have more cells than blocks of the flat kernels
    # and trees far longer than a tour segment
    assert TOUR_ROWS * TOUR_COLS > 4 * FLAT_THREADS
    assert TOUR_ROWS * TOUR_COLS > 20 * _cuda_tree.MAX_SEGMENT
    assert TOUR_ROWS * TOUR_COLS > 20 * 2 ** _cuda_tree.SAMPLE_BITS


@pytest.mark.parametrize("connectivity", [4, 8])
def test_public_directions_on_many_trees(connectivity):
    rng = np.random.default_rng(connectivity)
    values = rng.integers(0, 5, (TOUR_ROWS, TOUR_COLS)).astype(np.float32)
    # below the percolation threshold: many trees, and lone cells
    holes = 0.45 if connectivity == 4 else 0.65
    values[rng.random(values.shape) < holes] = np.nan
    result = assert_same_result(values, connectivity, "max", edges=False)
    assert result.trees > 2


def test_public_serpentine_single_path():
    # one path that winds through every row: the tour is twice the cells
    # long and its root is cell 0, far from most samples
    valid = np.zeros((TOUR_ROWS, TOUR_COLS), bool)
    valid[::2] = True
    valid[1::4, -1] = True
    valid[3::4, 0] = True
    values = np.where(valid, np.arange(valid.size).reshape(valid.shape) % 7,
                      -9).astype(np.int16)
    result = assert_same_result(values, 4, "absdiff", nodata=-9)
    assert result.trees == 1


def test_public_float64_split_keys_and_special_values(monkeypatch):
    rng = np.random.default_rng(3)
    values = rng.choice([0.0, -0.0, 1e-310, 2.5, -7.25, 1e300, np.inf,
                         -np.inf], (TOUR_ROWS, TOUR_COLS))
    for weight in ("mean", "absdiff"):  # NaN, inf and huge sums
        assert_same_result(values, 8, weight)
    # float32 weights in two-stage keys, as past 2**30 cells
    monkeypatch.setattr(_cuda, "packed_keys_fit", lambda n, dtype: False)
    assert_same_result(values.astype(np.float32), 4, "absdiff", edges=False)


@pytest.mark.parametrize("dtype, nodata", [(np.int32, 2**20),
                                           (np.float16, 1.5)])
def test_public_valid_cells_on_device(dtype, nodata):
    rng = np.random.default_rng(4)
    choices = [0, 1, 3, 1.5] + ([2**20] if dtype == np.int32 else [])
    values = rng.choice(choices, (9, 13)).astype(dtype)
    assert_same_result(values, 8, "min", nodata=nodata)


def test_public_all_invalid_and_empty():
    result = assert_same_result(np.full((3, 4), np.nan, np.float32), 4,
                                "max")
    assert result.trees == 0 and result.total_weight == 0.0
    empty = minimum_spanning_tree(np.ones((0, 5), np.float32),
                                  backend="cuda")
    assert empty.trees == 0 and empty.parent_direction.shape == (0, 5)
