"""The failure contract (issue 8) on the CUDA backend (the simulator on CI):
the cases whose handling passes through the kernels' path, with
BACKEND=cuda through processing.run and backend="cuda" in the core API."""

import os
import sys

import numpy as np
import pytest

import importlib.util  # noqa: E402

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)
# tests/conftest.py's writers (``conftest`` here is tests/cuda/conftest.py)
_spec = importlib.util.spec_from_file_location(
    "gridgraph_tests_conftest", os.path.join(TESTS, "conftest.py"))
_writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_writers)
cell_centre, read_raster = _writers.cell_centre, _writers.read_raster
write_geotiff, write_points = _writers.write_geotiff, _writers.write_points

from faults_helpers import CC, CD, MST, Watched  # noqa: E402

CUDA = 2  # the BACKEND option's index


@pytest.fixture
def watched(tmp_path, monkeypatch):
    return Watched(tmp_path, monkeypatch)


def test_cost_overflow_on_cuda():
    from gridgraph.core import InvalidInputError, cost_distance
    result = cost_distance(np.full((1, 2), 1e308), [(0, 0)], connectivity=4,
                           backend="cuda")
    np.testing.assert_array_equal(result.accumulated, [[0.0, 1e308]])
    with pytest.raises(InvalidInputError, match="largest float64"):
        cost_distance(np.full((3, 3), 1e308), [(0, 0)], backend="cuda")


@pytest.mark.parametrize("algorithm_id,output", [
    (CC, "OUTPUT"), (MST, "OUTPUT_DIRECTION"), (CD, "OUTPUT_ALLOCATION")])
def test_packed_raster_on_cuda_equals_the_cpu(gridgraph_provider,
                                              run_algorithm, watched,
                                              algorithm_id, output):
    from osgeo import gdal
    raw = np.random.default_rng(2).integers(0, 5, size=(9, 11)).astype(
        np.int16) * 10
    packed = watched.input("packed.tif")
    dataset = gdal.GetDriverByName("GTiff").Create(packed, 11, 9, 1,
                                                   gdal.GDT_Int16)
    dataset.SetGeoTransform((500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0))
    band = dataset.GetRasterBand(1)
    band.WriteArray(raw)
    band.SetScale(0.1)
    band.SetOffset(1.0)
    dataset = None
    point = write_points(watched.input("p.gpkg"), [cell_centre(4, 5)])
    rasters = {}
    for backend in (1, CUDA):
        result = run_algorithm(algorithm_id, {
            "INPUT": packed, "SOURCES": point, "BACKEND": backend,
            output: watched.output(f"{backend}.tif")})
        rasters[backend] = read_raster(result[output])[0]
    np.testing.assert_array_equal(rasters[CUDA], rasters[1])


def test_cancel_while_writing_on_cuda(gridgraph_provider, run_algorithm,
                                      watched,
                                      feedback_cancelled_after_a_write):
    from qgis.core import QgsProcessingException

    cost = write_geotiff(watched.input("c.tif"), np.ones((6, 7)))
    point = write_points(watched.input("p.gpkg"), [cell_centre(1, 1)])
    feedback = feedback_cancelled_after_a_write
    watched.mark()
    with pytest.raises(QgsProcessingException, match="cancelled"):
        run_algorithm(CD, {"INPUT": cost, "SOURCES": point, "BACKEND": CUDA,
                           "OUTPUT": watched.output("a.tif"),
                           "OUTPUT_DIRECTION": watched.output("b.tif")},
                      feedback)
    watched.assert_untouched()
