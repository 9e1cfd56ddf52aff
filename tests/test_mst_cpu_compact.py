"""The CPU MST kernels with int32 per-cell arrays and the list rounds'
scratch by component ranges (mstfast, issue 10) against the int64 ones,
the full scratch and Kruskal, and the all-cores valid mask against
``valid_mask``: random values, plateaus (ties), NaN holes, nodata, odd
shapes, one row or column, at every thread count and through the chunked
parallel paths."""

import numba
import numpy as np
import pytest

from gridgraph.core._common import valid_mask
from gridgraph.core.mst import _cpu, _forest_cpu

from rasters import fractal_surface
from test_mst import (assert_same_forest, check_parent_direction, cpu_mst,
                      kruskal)


def rasters():
    rng = np.random.default_rng(11)
    holes = fractal_surface((41, 37), seed=1)
    holes[rng.random(holes.shape) < 0.25] = np.nan
    plateaus = np.floor(fractal_surface((33, 50), seed=2) * 3)
    return [("random", rng.random((29, 31)).astype(np.float32)),
            ("holes", holes), ("plateaus", plateaus.astype(np.float32)),
            ("row", fractal_surface((1, 70), seed=3)),
            ("column", fractal_surface((70, 1), seed=4)),
            ("two", np.array([[1.0, 1.0]], dtype=np.float32))]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ids, ranges", [("int32", True), ("int64", False),
                                         ("int32", False), ("int64", True)])
@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("name, values", rasters(),
                         ids=[r[0] for r in rasters()])
def test_compact_and_wide_ids_equal_kruskal(monkeypatch, threads, ids,
                                            ranges, connectivity, name,
                                            values):
    monkeypatch.setattr(_cpu, "_PARALLEL_MIN_CELLS", 8)
    monkeypatch.setattr(_cpu, "_BAND_CELLS", 45)
    monkeypatch.setattr(_forest_cpu, "_PARALLEL_MIN_CELLS", 8)
    if ids == "int64":
        monkeypatch.setattr(_cpu, "_INT32_EDGE_IDS", 0)
    # the list rounds' scratch by component ranges, or per component
    monkeypatch.setattr(_cpu, "_LIST_LABEL_RANGES", ranges)
    previous = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        valid = ~np.isnan(values)
        for weight in ("max", "absdiff"):
            result = cpu_mst(values, connectivity=connectivity,
                             weight=weight)
            edges, weights = kruskal(values, valid, connectivity, weight)
            assert_same_forest(result, edges, weights)
            check_parent_direction(result.parent_direction, result.edges,
                                   valid, connectivity)
    finally:
        numba.set_num_threads(previous)


@pytest.mark.parametrize("dtype, nodata", [
    (np.float32, None), (np.float32, -1.0), (np.float64, 0.0),
    (np.int16, -9999), (np.uint8, 255), (np.int32, 2.5), (np.uint8, 300),
    (np.float32, float("nan")), (np.float16, 1.0), (">i2", 2),
    (np.longdouble, -1.0)])
def test_valid_cells_equal_valid_mask(monkeypatch, dtype, nodata):
    monkeypatch.setattr(_cpu, "_PARALLEL_MIN_CELLS", 8)
    rng = np.random.default_rng(5)
    values = (rng.integers(-3, 4, (23, 17)) * 1).astype(dtype)
    dtype = values.dtype
    if np.issubdtype(dtype, np.floating):
        values[rng.random(values.shape) < 0.2] = np.nan
        values[0, :3] = -0.0
    if nodata is not None and np.isfinite(nodata) and float(nodata) == \
            int(nodata) and np.can_cast(np.min_scalar_type(int(nodata)),
                                        dtype):
        values[rng.random(values.shape) < 0.2] = nodata
    for array in (values, values[:, ::2], values[:1], values[:, :1]):
        np.testing.assert_array_equal(_cpu.valid_cells(array, nodata),
                                      valid_mask(array, nodata))


def test_float16_and_swapped_bytes_rasters_run_as_float32():
    from gridgraph.core import minimum_spanning_tree
    # small integers: exact in float16
    values = np.floor(fractal_surface((19, 23), seed=6) / 250)
    values[2, 3] = np.nan
    expected = minimum_spanning_tree(values.astype(np.float32), backend="cpu")
    for raster in (values.astype(np.float16), values.astype(">f4")):
        result = minimum_spanning_tree(raster, backend="cpu")
        np.testing.assert_array_equal(result.edges, expected.edges)
        np.testing.assert_array_equal(result.parent_direction,
                                      expected.parent_direction)
        assert result.total_weight == expected.total_weight
