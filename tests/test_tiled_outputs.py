"""Outputs of tiled results written without loading them: the GeoTIFF data
type of int64 rasters (the same in memory and streamed)."""

import numpy as np
import pytest
from osgeo import gdal

from gridgraph.core import InvalidInputError, io, tiling

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
