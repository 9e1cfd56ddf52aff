"""The failure contract (issue 8), part 2: full disks (a real 2 MB tmpfs,
mounted when the tests run as root), damaged inputs and packed rasters."""

import os

import numpy as np
import pytest
from qgis.core import QgsProcessingException

from conftest import cell_centre, read_features, read_raster, write_geotiff, \
    write_points
from faults_helpers import (CC, CD, MST, Watched, entries, run_qgis_process,
                            small_disk)  # noqa: F401 - small_disk: a fixture

pytestmark = pytest.mark.usefixtures("gridgraph_provider")


@pytest.fixture
def watched(tmp_path, monkeypatch):
    return Watched(tmp_path, monkeypatch)


def fails(run_algorithm, algorithm_id, parameters):
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(algorithm_id, parameters)
    return str(error.value)


def random_cost(watched, shape, name="cost.tif", seed=4):
    values = np.random.default_rng(seed).uniform(1, 100, size=shape)
    return write_geotiff(watched.input(name), values)


# ---------------------------------------------------------------- full disk

@pytest.mark.parametrize("tile_size", [0, 128])
def test_raster_output_on_a_full_disk(run_algorithm, watched, small_disk,
                                      tile_size):
    """A Float64 output that does not fit (written whole, or streamed from
    the tiled path's memmap): a message naming the folder and the size,
    and nothing left on the small disk, nor in the other outputs' folder
    (the run's other output is not published either)."""
    cost = random_cost(watched, (700, 700))
    point = write_points(watched.input("p.gpkg"), [cell_centre(3, 3)])
    watched.mark()
    message = fails(run_algorithm, CD, {
        "INPUT": cost, "SOURCES": point, "TILE_SIZE": tile_size,
        "OUTPUT_DIRECTION": watched.output("direction.tif"),
        "OUTPUT": str(small_disk / "cost.tif")})
    assert f"the disk holding {small_disk} is full" in message
    assert "MB were needed" in message and "Traceback" not in message
    assert f"while writing {small_disk / 'cost.tif'}" in message
    assert entries(small_disk) == []
    watched.assert_untouched()


def test_vector_output_on_a_full_disk(run_algorithm, watched, small_disk):
    """40 000 tree edges do not fit in 2 MB: an error, never an empty or
    truncated GeoPackage called done."""
    values = np.random.default_rng(5).uniform(0, 1, size=(200, 200))
    raster = write_geotiff(watched.input("v.tif"), values)
    watched.mark()
    message = fails(run_algorithm, MST, {
        "INPUT": raster, "OUTPUT_LINES": str(small_disk / "lines.gpkg")})
    assert f"the disk holding {small_disk} is full" in message, message
    assert entries(small_disk) == []
    watched.assert_untouched()


@pytest.mark.parametrize("output", ["OUTPUT_LINES", "OUTPUT"])
def test_full_disk_through_qgis_process(watched, small_disk, output):
    """No traceback on stderr either (GDAL's error when the failed file is
    closed included), and a non-zero exit."""
    if output == "OUTPUT_LINES":
        values = np.random.default_rng(5).uniform(0, 1, size=(200, 200))
        raster = write_geotiff(watched.input("v.tif"), values)
        parameters = {"INPUT": raster,
                      output: str(small_disk / "lines.gpkg")}
        algorithm_id = MST
    else:
        raster = random_cost(watched, (700, 700))
        point = write_points(watched.input("p.gpkg"), [cell_centre(3, 3)])
        parameters = {"INPUT": raster, "SOURCES": point,
                      output: str(small_disk / "cost.tif")}
        algorithm_id = CD
    watched.mark()
    code, text = run_qgis_process(algorithm_id, parameters)
    assert code != 0
    assert f"the disk holding {small_disk} is full" in text
    assert "Traceback" not in text
    assert entries(small_disk) == []
    watched.assert_untouched()


def test_tiled_scratch_on_a_too_small_disk_is_refused_up_front(
        run_algorithm, watched, small_disk, monkeypatch):
    """GRIDGRAPH_SCRATCH_DIR on a disk too small for the tiled run's known
    sizes: refused before computing, naming the folder and the size."""
    monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(small_disk))
    cost = random_cost(watched, (600, 600))
    point = write_points(watched.input("p.gpkg"), [cell_centre(3, 3)])
    watched.mark()
    message = fails(run_algorithm, CD, {
        "INPUT": cost, "SOURCES": point, "TILE_SIZE": 64,
        "OUTPUT": watched.output("cost.tif")})
    assert f"the disk holding {small_disk}" in message
    assert "is too full" in message and "MB were needed" in message
    assert "GRIDGRAPH_SCRATCH_DIR" in message
    assert entries(small_disk) == []
    watched.assert_untouched()


@pytest.mark.parametrize("operation", ["components", "costdistance", "mst"])
def test_tiled_scratch_filling_up_mid_run_in_the_engine(small_disk,
                                                        operation):
    """The engine's tiled outputs and scratch on a disk that fills up
    half-way: DiskFullError naming the folder, and nothing left."""
    from gridgraph.core import (DiskFullError, connected_components,
                                cost_distance, minimum_spanning_tree)
    side = 800 if operation == "components" else 512  # int32 labels
    values = np.random.default_rng(6).uniform(1, 9, size=(side, side))
    run = {"components": lambda **k: connected_components(values, **k),
           "costdistance": lambda **k: cost_distance(values, [(0, 0)], **k),
           "mst": lambda **k: minimum_spanning_tree(values, **k)}[operation]
    with pytest.raises(DiskFullError) as error:
        run(tile_size=64, out_dir=str(small_disk), backend="cpu")
    assert f"the disk holding {small_disk}" in str(error.value)
    assert entries(small_disk) == []


# ---------------------------------------------------------- damaged input

def truncated_geotiff(watched, shape=(256, 256)):
    from osgeo import gdal
    path = watched.input("damaged.tif")
    dataset = gdal.GetDriverByName("GTiff").Create(
        path, shape[1], shape[0], 1, gdal.GDT_Float64, ["TILED=YES"])
    dataset.SetGeoTransform((500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0))
    dataset.GetRasterBand(1).WriteArray(np.ones(shape))
    dataset = None
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    return path


@pytest.mark.parametrize("tile_size", [0, 64])
@pytest.mark.parametrize("algorithm_id", [CC, MST])
def test_a_truncated_geotiff_names_file_and_band(run_algorithm, watched,
                                                 algorithm_id, tile_size):
    path = truncated_geotiff(watched)
    watched.mark()
    message = fails(run_algorithm, algorithm_id, {
        "INPUT": path, "TILE_SIZE": tile_size,
        "OUTPUT": watched.output("o.tif"),
        "OUTPUT_DIRECTION": watched.output("d.tif")})
    assert "cannot read band 1 of" in message and "damaged.tif" in message
    assert "damaged or truncated" in message
    watched.assert_untouched()


def test_a_truncated_geotiff_through_qgis_process(watched):
    path = truncated_geotiff(watched)
    watched.mark()
    code, text = run_qgis_process(CC, {"INPUT": path,
                                       "OUTPUT": watched.output("o.tif")})
    assert code != 0
    assert "cannot read band 1 of" in text and "Traceback" not in text
    watched.assert_untouched()


def test_a_truncated_file_in_the_core_api(watched):
    from gridgraph.core import RasterReadError, connected_components
    path = truncated_geotiff(watched)
    with pytest.raises(RasterReadError, match="cannot read band 1"):
        connected_components(path)
    with pytest.raises(RasterReadError, match="rows .* columns"):
        connected_components(path, tile_size=64)


# ---------------------------------------------------------- packed rasters

def packed_and_plain(watched, values, scale, offset, nodata=-32768):
    """The same values as a packed Int16 band (scale/offset) and as the
    unpacked Float64 band (NaN where the packed band has nodata)."""
    from osgeo import gdal
    raw = values
    packed = watched.input("packed.tif")
    dataset = gdal.GetDriverByName("GTiff").Create(
        packed, raw.shape[1], raw.shape[0], 1, gdal.GDT_Int16)
    dataset.SetGeoTransform((500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0))
    band = dataset.GetRasterBand(1)
    band.WriteArray(raw)
    band.SetScale(scale)
    band.SetOffset(offset)
    band.SetNoDataValue(nodata)
    dataset = None
    unpacked = raw.astype(np.float64) * scale + offset
    unpacked[raw == nodata] = np.nan
    plain = write_geotiff(watched.input("plain.tif"), unpacked)
    return packed, plain


def test_packed_band_is_unpacked_when_read(watched):
    from gridgraph.core import io
    raw = np.array([[100, 250, -32768], [0, 12345, 7]], dtype=np.int16)
    packed, _ = packed_and_plain(watched, raw, 0.01, 5.0)
    band = io.read_band(packed)
    expected = raw * 0.01 + 5.0
    expected[0, 2] = np.nan
    np.testing.assert_array_equal(band.array, expected)
    assert band.array.dtype == np.float64 and band.nodata is None
    reader = io.open_band(packed)
    np.testing.assert_array_equal(reader.read(0, 0, 2, 3), expected)
    assert reader.dtype == np.float64 and reader.nodata is None


@pytest.mark.parametrize("tile_size", [0, 8])
@pytest.mark.parametrize("algorithm_id,outputs", [
    (CC, ["OUTPUT"]), (MST, ["OUTPUT_DIRECTION", "OUTPUT_SEGMENTS"]),
    (CD, ["OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION"])])
def test_packed_raster_gives_the_unpacked_rasters_results(
        run_algorithm, watched, algorithm_id, outputs, tile_size):
    rng = np.random.default_rng(9)
    raw = rng.integers(0, 40, size=(20, 30)).astype(np.int16) * 25
    raw[rng.random(raw.shape) < 0.05] = -32768
    raw[0, 0] = 100
    packed, plain = packed_and_plain(watched, raw, 0.01, 2.0)
    point = write_points(watched.input("p.gpkg"), [cell_centre(0, 0)])
    results = {}
    for name, path in (("packed", packed), ("plain", plain)):
        parameters = {"INPUT": path, "SOURCES": point, "THRESHOLD": 2.5,
                      "MODE": 0, "TILE_SIZE": tile_size}
        parameters.update({output: watched.output(f"{name}-{output}.tif")
                           for output in outputs})
        results[name] = run_algorithm(algorithm_id, parameters)
    for output in outputs:
        np.testing.assert_array_equal(
            read_raster(results["packed"][output])[0],
            read_raster(results["plain"][output])[0])
    for key in ("COMPONENTS", "TOTAL_WEIGHT", "TREES"):
        if key in results["plain"]:
            assert results["packed"][key] == results["plain"][key]


def test_packed_costs_are_unpacked_in_paths(run_algorithm, watched):
    """Least-cost path costs come from the unpacked values (raw 100 x 0.01
    = 1 per cell), not from the raw integers."""
    raw = np.full((1, 5), 100, dtype=np.int16)
    packed, _ = packed_and_plain(watched, raw, 0.01, 0.0)
    start = write_points(watched.input("s.gpkg"), [cell_centre(0, 0)])
    end = write_points(watched.input("e.gpkg"), [cell_centre(0, 4)])
    result = run_algorithm(CD, {"INPUT": packed, "SOURCES": start,
                                "DESTINATIONS": end,
                                "OUTPUT_PATHS": watched.output("p.gpkg")})
    [(attributes, _)] = read_features(result["OUTPUT_PATHS"])
    assert attributes["cost"] == pytest.approx(4.0)
