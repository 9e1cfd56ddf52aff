"""Outputs of tiled results made without loading them: the GeoTIFF data
type of int64 rasters, component attributes and polygons, segments of a
spanning forest, each equal to the in-memory function's on the same
rasters."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from osgeo import gdal

from gridgraph.core import (CancelledError, InvalidInputError,
                            component_summary, connected_components, io,
                            minimum_spanning_tree, segment_by_threshold,
                            tiling)
from gridgraph.core.components.summary_streamed import \
    component_summary_streamed
from gridgraph.core.mst.segments_streamed import (
    default_strip_rows, segment_by_threshold_streamed)
from rasters import fractal_surface, spiral_mask

GEOTRANSFORM = (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)


def gdal_type_and_values(path):
    dataset = gdal.Open(str(path))
    band = dataset.GetRasterBand(1)
    return gdal.GetDataTypeName(band.DataType), band.ReadAsArray()


def int64_memmap(folder, array):
    path = folder / "values.npy"
    np.save(path, np.asarray(array, dtype=np.int64))
    return np.load(path, mmap_mode="r")


# --------------------------------------------------------- int64 data type

@pytest.mark.parametrize("low,high,expected", [
    (0, 0, np.int32),
    (0, 2**31 - 1, np.int32),
    (-(2**31), 5, np.int32),
    (0, 2**31, np.float64),
    (-(2**31) - 1, 0, np.float64),
    (-(2**53), 2**53, np.float64),
    (0, 2**53 + 1, np.int64),
    (-(2**63), 0, np.int64),
])
def test_int64_storage_dtype(low, high, expected):
    assert io.int64_storage_dtype(low, high) == expected


def test_int64_storage_without_gdal_int64_refuses_inexact_values(monkeypatch):
    monkeypatch.setattr(io, "GDAL_INT64", None)  # GDAL < 3.5
    assert io.int64_storage_dtype(0, 2**53) == np.float64
    with pytest.raises(InvalidInputError, match="GDAL >= 3.5"):
        io.int64_storage_dtype(0, 2**53 + 1)


@pytest.mark.parametrize("values,gdal_type", [
    ([[0, 3], [7, 2**31 - 1]], "Int32"),
    ([[0, -5], [-(2**31), 9]], "Int32"),
    ([[0, 2**31], [1, 2]], "Float64"),
    ([[-(2**40), 0], [1, 2**52 + 1]], "Float64"),
    ([[0, 2**62 + 1], [-3, 2]], "Int64"),
])
def test_streamed_int64_raster_has_the_in_memory_type(tmp_path, values,
                                                      gdal_type):
    values = np.array(values, dtype=np.int64)
    whole = io.write_raster(str(tmp_path / "whole.tif"), values,
                            GEOTRANSFORM, "", nodata=0)
    streamed = tiling.write_geotiff(int64_memmap(tmp_path, values),
                                    str(tmp_path / "streamed.tif"),
                                    GEOTRANSFORM, "", nodata=0, strip_rows=1)
    for path in (whole, streamed):
        name, read = gdal_type_and_values(path)
        assert name == gdal_type
        # exact: no wrap-around into 32 bits, no rounding in Float64
        assert [int(v) for v in read.ravel()] == values.ravel().tolist()


def test_band_writer_refuses_values_outside_its_range(tmp_path):
    writer = io.BandWriter(str(tmp_path / "out.tif"), (2, 2), np.int64,
                           value_range=(0, 10))
    assert writer.dtype == np.int32
    writer.write(0, 0, np.array([[0, 10]], dtype=np.int64))
    with pytest.raises(InvalidInputError, match="outside the declared range"):
        writer.write(1, 0, np.array([[2**31, 1]], dtype=np.int64))
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_band_writer_without_a_range_keeps_int64_exact(tmp_path):
    writer = io.BandWriter(str(tmp_path / "out.tif"), (1, 2), np.int64)
    assert writer.dtype == np.float64
    with pytest.raises(InvalidInputError):
        writer.write(0, 0, np.array([[2**53 + 1, 0]], dtype=np.int64))
    writer.abort()


# ------------------------------------------------------ component summary

def test_component_summary_streamed_literal():
    labels = np.array([[1, 1, 0],
                       [2, 0, 1],
                       [2, 3, 3]])
    values = np.array([[5, 5, 0],
                       [7, 0, 5],
                       [7, -0.0, 0.0]])
    cells, first = component_summary_streamed(labels, values, 3,
                                              strip_cells=1)
    assert cells.tolist() == [3, 2, 2]
    assert first.tolist() == [5, 7, 0]
    assert str(first[2]) == "-0.0"  # the first cell's, not any cell's


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 30), cols=st.integers(1, 30),
       seed=st.integers(0, 2**16), strip_cells=st.integers(1, 200),
       connectivity=st.sampled_from([4, 8]))
def test_component_summary_streamed_equals_in_memory(rows, cols, seed,
                                                     strip_cells,
                                                     connectivity):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, size=(rows, cols)).astype(np.float32)
    values[rng.random(values.shape) < 0.1] = np.nan
    result = connected_components(values, connectivity, "equal",
                                  backend="cpu")
    expected = component_summary(result.labels, values, result.count)
    cells, first = component_summary_streamed(
        result.labels, values, result.count, strip_cells=strip_cells)
    np.testing.assert_array_equal(cells, expected[0])
    np.testing.assert_array_equal(first, expected[1])
    assert first.dtype == expected[1].dtype


def test_component_summary_streamed_from_files(tmp_path):
    values = np.floor(fractal_surface((70, 45), seed=2) / 150)
    result = connected_components(values, 8, "equal", backend="cpu")
    labels_path = tmp_path / "labels.npy"
    np.save(labels_path, result.labels)
    values_path = str(tmp_path / "values.tif")
    io.write_raster(values_path, values, GEOTRANSFORM, "")
    cells, first = component_summary_streamed(
        np.load(labels_path, mmap_mode="r"), values_path, result.count,
        out_dir=str(tmp_path), strip_cells=100)
    assert isinstance(cells, np.memmap) and isinstance(first, np.memmap)
    expected = component_summary(result.labels, values, result.count)
    np.testing.assert_array_equal(cells, expected[0])
    np.testing.assert_array_equal(first, expected[1])
    only_cells, no_values = component_summary_streamed(
        result.labels, None, result.count, strip_cells=7)
    np.testing.assert_array_equal(only_cells, expected[0])
    assert no_values is None


def test_component_summary_streamed_cancels():
    with pytest.raises(CancelledError):
        component_summary_streamed(np.ones((4, 4), np.int32), None, 1,
                                   progress=lambda fraction: False)


# --------------------------------------------------------------- polygons

def polygons_by_label(pairs):
    grouped = {}
    for label, wkb in pairs:
        grouped.setdefault(label, []).append(wkb)
    return sorted(grouped.items())


@pytest.mark.parametrize("name,connectivity", [
    ("spiral", 4), ("spiral", 8), ("classes", 4), ("classes", 8)])
def test_polygonize_label_file_equals_in_memory(tmp_path, name,
                                                connectivity):
    if name == "spiral":
        values, mode = spiral_mask(41).astype(np.float32), "nonzero"
    else:
        values = np.floor(fractal_surface((37, 52), seed=9) / 90)
        values[::7, ::5] = np.nan
        mode = "equal"
    labels = connected_components(values, connectivity, mode,
                                  backend="cpu").labels
    geotransform = (500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0)
    labels_path = str(tmp_path / "labels.tif")
    tiling.write_geotiff(labels, labels_path, geotransform, "", nodata=0,
                         strip_rows=3)
    polygons = io.polygonize_label_file(
        labels_path, str(tmp_path / "p.gpkg"), connectivity)
    streamed = list(io.read_label_polygons(polygons))
    expected = polygons_by_label(io.polygonize_labels(
        labels, geotransform, "", connectivity))
    assert [label for label, _ in streamed] == \
        list(range(1, labels.max() + 1))
    assert streamed == expected


def test_polygonize_label_file_needs_nodata_zero(tmp_path):
    path = str(tmp_path / "labels.tif")
    io.write_raster(path, np.ones((3, 3), np.int32), GEOTRANSFORM, "")
    with pytest.raises(InvalidInputError, match="nodata"):
        io.polygonize_label_file(path, str(tmp_path / "p.gpkg"))


def test_polygonize_label_file_cancels(tmp_path):
    path = str(tmp_path / "labels.tif")
    io.write_raster(path, np.arange(1, 10, dtype=np.int32).reshape(3, 3),
                    GEOTRANSFORM, "", nodata=0)
    with pytest.raises(CancelledError):
        io.polygonize_label_file(path, str(tmp_path / "p.gpkg"),
                                 progress=lambda fraction: fraction < 0.5)


def test_move_raster_across_file_systems(tmp_path, monkeypatch):
    source = tmp_path / "made.tif"
    io.write_raster(str(source), np.ones((2, 2)), GEOTRANSFORM, "")
    content = source.read_bytes()
    real_replace = io.os.replace

    def no_rename_from_source(a, b):
        if str(a) == str(source):
            raise OSError(io.errno.EXDEV, "cross-device link")
        return real_replace(a, b)
    monkeypatch.setattr(io.os, "replace", no_rename_from_source)
    target = tmp_path / "out" / "final.tif"
    target.parent.mkdir()
    assert io.move_raster(str(source), str(target)) == str(target)
    assert target.read_bytes() == content
    assert not source.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["final.tif"]


def test_written_rasters_get_the_umask_mode(tmp_path):
    umask = os.umask(0o027)
    try:
        whole = io.write_raster(str(tmp_path / "whole.tif"), np.ones((2, 2)),
                                GEOTRANSFORM, "")
        streamed = tiling.write_geotiff(np.ones((2, 2)),
                                        str(tmp_path / "streamed.tif"))
    finally:
        os.umask(umask)
    for path in (whole, streamed):  # not mkstemp's 0600
        assert os.stat(path).st_mode & 0o777 == 0o640


# --------------------------------------------------------------- segments

@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 24), cols=st.integers(1, 24),
       seed=st.integers(0, 2**16), strip_rows=st.integers(1, 7),
       connectivity=st.sampled_from([4, 8]),
       weight=st.sampled_from(["max", "min", "mean", "absdiff"]),
       threshold=st.sampled_from([0.0, 1.0, 2.5, 4.0]))
def test_segments_streamed_equal_in_memory(rows, cols, seed, strip_rows,
                                           connectivity, weight, threshold):
    # small integer values: many tied weights, and weights equal to the
    # threshold (kept)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=(rows, cols)).astype(np.float32)
    values[rng.random(values.shape) < 0.2] = np.nan
    if np.isnan(values).all():
        values[0, 0] = 1
    tree = minimum_spanning_tree(values, connectivity, weight, backend="cpu")
    expected, count = segment_by_threshold(tree, threshold)
    labels, streamed_count = segment_by_threshold_streamed(
        tree, threshold, strip_rows=strip_rows)
    assert streamed_count == count
    assert labels.dtype == expected.dtype
    np.testing.assert_array_equal(labels, expected)


@pytest.mark.parametrize("tile_size,strip_rows", [(8, 1), (16, 5), (32, None)])
def test_segments_streamed_from_a_tiled_tree(tmp_path, tile_size,
                                             strip_rows):
    values = fractal_surface((61, 70), seed=5)
    values[::9, 3::11] = np.nan
    whole = minimum_spanning_tree(values, 8, "absdiff", backend="cpu")
    tiled_dir = tmp_path / "tiled"
    tiled_dir.mkdir()
    tiled = minimum_spanning_tree(values, 8, "absdiff", backend="cpu",
                                  tile_size=tile_size, out_dir=str(tiled_dir))
    assert isinstance(tiled.edges, np.memmap)
    for threshold in (float(np.quantile(whole.weights, 0.9)), 1e9, -1.0):
        expected, count = segment_by_threshold(whole, threshold)
        labels, streamed_count = segment_by_threshold_streamed(
            tiled, threshold, out_dir=str(tiled_dir), strip_rows=strip_rows,
            memory_limit_mb=1)
        assert isinstance(labels, np.memmap)
        assert streamed_count == count
        np.testing.assert_array_equal(labels, expected)
        del labels
    assert sorted(p.name for p in tiled_dir.iterdir()) == [
        "edges.npy", "parent_direction.npy", "segments.npy", "weights.npy"]


def test_segments_streamed_needs_the_edge_list_and_cancels():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    tree = minimum_spanning_tree(values, backend="cpu", edges=False)
    with pytest.raises(InvalidInputError, match="edges=True"):
        segment_by_threshold_streamed(tree, 1.0)
    tree = minimum_spanning_tree(values, backend="cpu")
    with pytest.raises(CancelledError):
        segment_by_threshold_streamed(tree, 1.0, strip_rows=1,
                                      progress=lambda f: f < 0.5)
    assert default_strip_rows((10**6, 1000), memory_limit_mb=100) == \
        100 * 2**20 // 4 // (40 * 1000)


def test_segments_streamed_with_few_open_files_and_small_chunks(
        monkeypatch):
    # every chunk of the edge list reaches every strip, and strip files are
    # closed and reopened for appending: the result must not change
    from gridgraph.core.mst import segments_streamed
    monkeypatch.setattr(segments_streamed, "OPEN_STRIP_FILES", 2)
    monkeypatch.setattr(segments_streamed, "MIN_EDGE_CHUNK", 7)
    monkeypatch.setattr(segments_streamed, "MAX_EDGE_CHUNK", 7)
    values = fractal_surface((23, 17), seed=8)
    tree = minimum_spanning_tree(values, 8, "max", backend="cpu")
    threshold = float(np.quantile(tree.weights, 0.8))
    expected, count = segment_by_threshold(tree, threshold)
    labels, streamed_count = segment_by_threshold_streamed(
        tree, threshold, strip_rows=2)
    assert streamed_count == count > 5
    np.testing.assert_array_equal(labels, expected)


def test_tiled_outputs_module_names_the_moved_functions():
    # callers that import from core.tiled_outputs get the functions that
    # now live in their operations' folders
    from gridgraph.core import tiled_outputs
    assert tiled_outputs.component_summary_streamed is \
        component_summary_streamed
    assert tiled_outputs.segment_by_threshold_streamed is \
        segment_by_threshold_streamed
