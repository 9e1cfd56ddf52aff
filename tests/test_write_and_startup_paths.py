"""The end-to-end shortcuts of issue 10's qgis_process row change no result:
compression only where it pays (same values read back either way), the CUDA
driver pre-check (same answer as numba's), numba's set-up started early."""

import ctypes
import functools

import numpy as np
import pytest
from osgeo import gdal

from gridgraph.core import _common, cost_distance, io, warmup

GEOTRANSFORM = (500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0)


def _compression(path):
    dataset = gdal.Open(path)
    return dataset.GetMetadata("IMAGE_STRUCTURE").get("COMPRESSION")


def _smooth_surface(shape, seed):
    """A continuous Float64 surface with noisy mantissas, as accumulated
    costs are: DEFLATE keeps ~85-90% of its bytes."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    return (np.add.outer(np.arange(rows) * 1.7, np.arange(cols) * 2.3)
            + rng.random(shape))


@pytest.mark.parametrize("kind", ["smooth", "nan-half", "labels", "direction",
                                  "constant", "tiny", "thin"])
def test_written_values_are_the_same_compressed_or_not(tmp_path, kind):
    rng = np.random.default_rng(7)
    if kind == "smooth":
        values, expect = _smooth_surface((300, 517), 1), None
    elif kind == "nan-half":  # unreached half: compresses well
        values = _smooth_surface((300, 517), 2)
        values[:, 200:] = np.nan
        expect = "DEFLATE"
    elif kind == "labels":
        values = np.repeat(np.arange(30, dtype=np.int32), 5170).reshape(300, 517)
        expect = "DEFLATE"
    elif kind == "direction":
        values = rng.choice(np.array([0, 45, 90, 135, 180, np.nan],
                                     dtype=np.float32), size=(300, 517))
        expect = "DEFLATE"
    elif kind == "constant":
        values, expect = np.full((70, 90), 3.25), "DEFLATE"
    elif kind == "tiny":
        values, expect = rng.random((3, 2)), None
    else:  # one row, shorter than a sample tile
        values, expect = rng.random((1, 1000)), None
    path = str(tmp_path / f"{kind}.tif")
    io.write_raster(path, values, GEOTRANSFORM, "", float("nan")
                    if values.dtype.kind == "f" else 0)
    assert io.compression_pays(values) == (expect == "DEFLATE")
    assert _compression(path) == expect
    band = io.read_band(path)
    assert band.array.dtype == values.dtype
    assert band.array.tobytes() == values.tobytes()  # NaNs and signs too


def test_compression_is_judged_on_tiles_across_the_raster():
    # incompressible left part, constant right part: a sample from the
    # first tile alone would say "no"; spread over the raster it is "yes"
    values = np.full((512, 4096), 2.0)
    values[:, :600] = np.random.default_rng(3).random((512, 600))
    assert io.compression_pays(values)
    assert not io.compression_pays(values[:, :600].copy())


def test_cuda_driver_precheck_agrees_with_numba(monkeypatch):
    from numba import cuda
    assert _common.cuda_available() == bool(cuda.is_available())
    if not cuda.is_available():
        assert not _common._cuda_driver_may_load()


def test_cuda_driver_precheck_defers_to_numba_when_it_cannot_tell(monkeypatch):
    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    # the library search is asked once a process: a fresh cache here, the
    # process's own answer kept for after the test
    monkeypatch.setattr(_common, "_cuda_library_loads",
                        functools.lru_cache(maxsize=1)(
                            _common._cuda_library_loads.__wrapped__))
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.delenv("NUMBA_CUDA_DRIVER", raising=False)
    assert not _common._cuda_driver_may_load()
    assert not _common.cuda_available()
    monkeypatch.setenv("NUMBA_CUDA_DRIVER", "/somewhere/libcuda.so")
    assert _common._cuda_driver_may_load()
    monkeypatch.delenv("NUMBA_CUDA_DRIVER")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert _common._cuda_driver_may_load()
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    assert not _common._cuda_driver_may_load()
    tried = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: tried.append(name))
    _common._cuda_library_loads.cache_clear()
    assert _common._cuda_driver_may_load()
    assert _common._cuda_driver_may_load()
    assert tried == ["libcuda.so"]  # searched once


def test_numba_setup_in_background_once_and_results_unchanged():
    first = warmup.prepare_in_background()
    second = warmup.prepare_in_background()
    assert second is None
    if first is not None:
        first.join(timeout=120)
        assert not first.is_alive()
    cost = np.ones((9, 11))
    cost[4, 2:9] = np.nan
    result = cost_distance(cost, sources=np.array([[0, 0]]), connectivity=8,
                           backend="cpu", outputs=["accumulated"])
    assert result.accumulated[0, 0] == 0.0
    assert np.isnan(result.accumulated[4, 5])
    assert result.accumulated[8, 10] > 0


@pytest.mark.parametrize("layout", [["TILED=YES", "BLOCKXSIZE=32",
                                     "BLOCKYSIZE=32", "COMPRESS=DEFLATE"],
                                    ["BLOCKYSIZE=7"], ["BLOCKYSIZE=1"],
                                    ["BLOCKYSIZE=300"]])
@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.uint8])
def test_band_read_in_bands_equals_readasarray(tmp_path, monkeypatch, layout,
                                               dtype):
    rng = np.random.default_rng(13)
    values = (rng.random((203, 57)) * 200).astype(dtype)
    path = str(tmp_path / "in.tif")
    gdal_type = {np.float64: gdal.GDT_Float64, np.int16: gdal.GDT_Int16,
                 np.uint8: gdal.GDT_Byte}[dtype]
    dataset = gdal.GetDriverByName("GTiff").Create(path, 57, 203, 1,
                                                   gdal_type, layout)
    dataset.GetRasterBand(1).WriteArray(values)
    dataset = None
    # bands of a few block rows: several requests, a short last one
    monkeypatch.setattr(io, "IO_BAND_BYTES", 40 * 57)
    band = io.read_band(path)
    reopened = gdal.Open(path)  # a band does not keep its dataset alive
    expected = reopened.GetRasterBand(1).ReadAsArray()
    assert band.array.dtype == expected.dtype == dtype
    assert band.array.tobytes() == expected.tobytes() == values.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float32])
def test_raster_written_in_bands_reads_back_the_same(tmp_path, monkeypatch,
                                                     dtype):
    rng = np.random.default_rng(14)
    values = (rng.random((517, 300)) * 1000).astype(dtype)
    if dtype != np.int32:
        values[100:140, :] = np.nan
    monkeypatch.setattr(io, "IO_BAND_BYTES", 1)  # one block row a band
    path = str(tmp_path / "out.tif")
    io.write_raster(path, values, GEOTRANSFORM, "", 0)
    written = gdal.Open(path)
    assert written.GetRasterBand(1).GetBlockSize() == [256, 256]
    assert written.GetRasterBand(1).ReadAsArray().tobytes() == \
        values.tobytes()
