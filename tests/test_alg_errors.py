"""Parameter checks (checkParameterValues, without running), bad input
errors with their messages, cancellation: and never an output file left."""

import numpy as np
import pytest
from qgis.core import QgsProcessingException

from conftest import (X0, Y0, cell_centre, feedback_cancelling_at, read_raster,
                      write_geotiff, write_points)
from gridgraph.core._common import cuda_available

pytestmark = pytest.mark.usefixtures("gridgraph_provider")
CC, CD, MST = ("gridgraph:connectedcomponents", "gridgraph:costdistance",
               "gridgraph:minimumspanningtree")
NAN = float("nan")


@pytest.fixture
def rasters(tmp_path):
    """A valid 3x4 Float64 cost raster and a point on its cell (0, 0)."""
    return {
        "cost": write_geotiff(tmp_path / "cost.tif", np.ones((3, 4))),
        "point": write_points(tmp_path / "point.gpkg", [cell_centre(0, 0)]),
    }


def assert_nothing_in(folder, keep):
    # QGIS may leave GDAL's .aux.xml statistics beside an input it opened
    keep = set(keep) | {name + ".aux.xml" for name in keep}
    written = sorted(p.name for p in folder.iterdir() if p.name not in keep)
    assert written == [], f"output files were left behind: {written}"


def run_fails(run_algorithm, algorithm_id, parameters, feedback=None):
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(algorithm_id, parameters, feedback)
    return str(error.value)


# ------------------------------------------------- checkParameterValues

def test_costdistance_needs_sources(check_parameters, rasters, tmp_path):
    ok, message = check_parameters(CD, {"INPUT": rasters["cost"],
                                        "OUTPUT": str(tmp_path / "o.tif")})
    assert not ok and "No sources" in message and "SOURCE_RASTER" in message
    ok, _ = check_parameters(CD, {"INPUT": rasters["cost"],
                                  "SOURCES": rasters["point"],
                                  "OUTPUT": str(tmp_path / "o.tif")})
    assert ok


def test_costdistance_refuses_both_kinds_of_sources(check_parameters,
                                                    rasters, tmp_path):
    ok, message = check_parameters(CD, {
        "INPUT": rasters["cost"], "SOURCES": rasters["point"],
        "SOURCE_RASTER": rasters["cost"], "OUTPUT": str(tmp_path / "o.tif")})
    assert not ok and "not both" in message


def test_costdistance_paths_need_destinations(check_parameters, rasters,
                                              tmp_path):
    ok, message = check_parameters(CD, {
        "INPUT": rasters["cost"], "SOURCES": rasters["point"],
        "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")})
    assert not ok and "DESTINATIONS" in message


def test_costdistance_needs_an_output(check_parameters, rasters):
    ok, message = check_parameters(CD, {"INPUT": rasters["cost"],
                                        "SOURCES": rasters["point"]})
    assert not ok and "No output requested" in message


def test_segments_need_a_threshold(check_parameters, rasters, tmp_path):
    parameters = {"INPUT": rasters["cost"],
                  "OUTPUT_SEGMENTS": str(tmp_path / "s.tif")}
    ok, message = check_parameters(MST, parameters)
    assert not ok and "THRESHOLD" in message
    ok, _ = check_parameters(MST, {**parameters, "THRESHOLD": 0.5})
    assert ok
    ok, _ = check_parameters(MST, {"INPUT": rasters["cost"]})
    assert ok  # no segments requested: no threshold needed


@pytest.mark.parametrize("algorithm_id", [CC, CD, MST])
def test_band_out_of_range(check_parameters, run_algorithm, rasters,
                           tmp_path, algorithm_id):
    parameters = {"INPUT": rasters["cost"], "BAND": 2,
                  "SOURCES": rasters["point"],
                  "OUTPUT": str(tmp_path / "o.tif"),
                  "OUTPUT_DIRECTION": str(tmp_path / "d.tif")}
    if algorithm_id != CD:
        del parameters["SOURCES"]
    ok, message = check_parameters(algorithm_id, parameters)
    assert not ok
    assert "Band 2 does not exist" in message and "1 to 1" in message
    message = run_fails(run_algorithm, algorithm_id, parameters)
    assert "Band 2 does not exist" in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg"})


# ------------------------------------------------------ bad input errors

def test_negative_cost(run_algorithm, rasters, tmp_path):
    cost = write_geotiff(tmp_path / "negative.tif", [[1.0, -2.0, 1.0]])
    message = run_fails(run_algorithm, CD, {
        "INPUT": cost, "SOURCES": rasters["point"],
        "OUTPUT": str(tmp_path / "o.tif")})
    assert "negative" in message and "costs must be >= 0" in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg", "negative.tif"})


@pytest.mark.parametrize("algorithm_id", [CC, CD, MST])
def test_all_nodata_band(run_algorithm, rasters, tmp_path, algorithm_id):
    empty = write_geotiff(tmp_path / "empty.tif", np.full((3, 4), -9.0),
                          nodata=-9)
    message = run_fails(run_algorithm, algorithm_id, {
        "INPUT": empty, "SOURCES": rasters["point"],
        "OUTPUT": str(tmp_path / "o.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif")}
        if algorithm_id == CD else {
        "INPUT": empty, "OUTPUT": str(tmp_path / "o.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif")})
    assert "no valid cell" in message and "nodata" in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg", "empty.tif"})


def test_source_layer_without_points(run_algorithm, rasters, tmp_path):
    empty = write_points(tmp_path / "none.gpkg", [])
    message = run_fails(run_algorithm, CD, {
        "INPUT": rasters["cost"], "SOURCES": empty,
        "OUTPUT": str(tmp_path / "o.tif")})
    assert "no point" in message
    assert not (tmp_path / "o.tif").exists()


def test_sources_outside_the_raster_are_named(run_algorithm, rasters,
                                              tmp_path):
    points = write_points(tmp_path / "out.gpkg", [
        cell_centre(0, 0), (X0 - 5.0, Y0 - 5.0), cell_centre(1, 1),
        cell_centre(0, 9)], fids=[1, 3, 4, 9])
    message = run_fails(run_algorithm, CD, {
        "INPUT": rasters["cost"], "SOURCES": points,
        "OUTPUT": str(tmp_path / "o.tif")})
    assert "2 source feature(s) lie outside" in message
    assert "feature id(s) 3, 9" in message
    assert not (tmp_path / "o.tif").exists()


@pytest.mark.parametrize("blocked_fids,expected", [
    ([5], "1 source feature(s) lie on barrier cells"),
    ([5, 6], "All source feature(s) lie on barrier cells")])
def test_sources_on_barriers_are_named(run_algorithm, tmp_path, blocked_fids,
                                       expected):
    cost = write_geotiff(tmp_path / "cost.tif", [[NAN, 1.0, NAN]])
    cells = {5: (0, 0), 6: (0, 2), 7: (0, 1)}
    fids = blocked_fids + ([7] if len(blocked_fids) == 1 else [])
    points = write_points(tmp_path / "p.gpkg",
                          [cell_centre(*cells[f]) for f in fids], fids=fids)
    message = run_fails(run_algorithm, CD, {
        "INPUT": cost, "SOURCES": points, "OUTPUT": str(tmp_path / "o.tif")})
    assert expected in message
    assert "feature id(s) " + ", ".join(map(str, blocked_fids)) in message
    assert not (tmp_path / "o.tif").exists()


def test_source_raster_on_another_grid(run_algorithm, rasters, tmp_path):
    shifted = write_geotiff(tmp_path / "shifted.tif", np.ones((3, 4)),
                            geotransform=(X0 + 5, 10.0, 0.0, Y0, 0.0, -10.0))
    message = run_fails(run_algorithm, CD, {
        "INPUT": rasters["cost"], "SOURCE_RASTER": shifted,
        "OUTPUT": str(tmp_path / "o.tif")})
    assert "not on the cost raster's grid" in message
    assert "gdal:warpreproject" in message
    assert not (tmp_path / "o.tif").exists()


def test_too_many_lines_writes_nothing(run_algorithm, rasters, tmp_path):
    message = run_fails(run_algorithm, MST, {
        "INPUT": rasters["cost"], "MAX_LINES": 10,
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif"),
        "OUTPUT_LINES": str(tmp_path / "lines.gpkg")})
    # the 12 cells of a 3x4 grid have an 11-edge spanning tree
    assert "11 lines" in message and "MAX_LINES = 10" in message
    assert "OUTPUT_DIRECTION" in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg"})
    result = run_algorithm(MST, {"INPUT": rasters["cost"], "MAX_LINES": 11,
                                 "OUTPUT_LINES": str(tmp_path / "lines.gpkg")})
    assert result["TREES"] == 1


@pytest.mark.parametrize("output", ["OUTPUT", "OUTPUT_POLYGONS"])
def test_output_folder_that_does_not_exist(run_algorithm, rasters, tmp_path,
                                           output):
    missing = tmp_path / "no" / "such" / "folder"
    parameters = {"INPUT": rasters["cost"],
                  "OUTPUT": str(tmp_path / "labels.tif"),
                  "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")}
    parameters[output] = str(missing / "out.data")
    message = run_fails(run_algorithm, CC, parameters)
    assert "does not exist" in message and str(missing) in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg"})


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is present")
def test_cuda_backend_without_a_device(run_algorithm, rasters, tmp_path):
    message = run_fails(run_algorithm, MST, {
        "INPUT": rasters["cost"], "BACKEND": 2,
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif")})
    assert "no usable CUDA device" in message and "BACKEND=auto" in message
    assert not (tmp_path / "d.tif").exists()


@pytest.mark.parametrize("algorithm_id,option,value,expected", [
    (CC, "TILE_SIZE", 12, "Tile size in cells (0 = automatic) [TILE_SIZE] "
     "must be a power of two of at least 8"),
    (CD, "TILE_SIZE", 12, "[TILE_SIZE] must be a power of two"),
    (MST, "TILE_SIZE", 12, "[TILE_SIZE] must be a power of two"),
    # nothing listens on port 9 (discard): the run fails at once
    (CC, "DASK_SCHEDULER", "tcp://127.0.0.1:9", "[DASK_SCHEDULER]: "
     "cannot reach the Dask scheduler at tcp://127.0.0.1:9")])
def test_engine_errors_name_the_parameter(run_algorithm, rasters, tmp_path,
                                          algorithm_id, option, value,
                                          expected):
    """Options the engine refuses (a tile size that is not a power of two,
    an unreachable Dask scheduler) fail naming the parameter by its
    label and id, never in the Python API's words ("executor must be
    None", "tile_size")."""
    message = run_fails(run_algorithm, algorithm_id, {
        "INPUT": rasters["cost"], option: value, "SOURCES": rasters["point"],
        "OUTPUT": str(tmp_path / "o.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif")})
    assert expected in message
    assert "executor must be" not in message and "tile_size" not in message
    assert_nothing_in(tmp_path, {"cost.tif", "point.gpkg"})


def test_tiles_give_the_in_memory_labels(run_algorithm, tmp_path):
    values = np.random.default_rng(3).integers(0, 3, size=(37, 29))
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    whole = run_algorithm(CC, {"INPUT": path,
                               "OUTPUT": str(tmp_path / "whole.tif")})
    tiled = run_algorithm(CC, {"INPUT": path, "TILE_SIZE": 8,
                               "MEMORY_LIMIT_MB": 64,
                               "OUTPUT": str(tmp_path / "tiled.tif")})
    assert tiled["COMPONENTS"] == whole["COMPONENTS"] > 1
    np.testing.assert_array_equal(read_raster(tiled["OUTPUT"])[0],
                                  read_raster(whole["OUTPUT"])[0])


# ------------------------------------------------------------- cancelling

@pytest.mark.parametrize("algorithm_id,outputs", [
    (CC, {"OUTPUT": "labels.tif", "OUTPUT_POLYGONS": "polygons.gpkg"}),
    (CD, {"OUTPUT": "cost.tif", "OUTPUT_DIRECTION": "direction.tif",
          "OUTPUT_ALLOCATION": "allocation.tif",
          "OUTPUT_PATHS": "paths.gpkg"}),
    (MST, {"OUTPUT_DIRECTION": "direction.tif", "OUTPUT_LINES": "lines.gpkg",
           "OUTPUT_SEGMENTS": "segments.tif"}),
])
def test_cancel_after_the_first_progress_report(run_algorithm, tmp_path,
                                                algorithm_id, outputs):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    values = np.random.default_rng(1).uniform(1, 5, size=(40, 50))
    raster = write_geotiff(inputs / "values.tif", values)
    point = write_points(inputs / "p.gpkg", [cell_centre(3, 3)])
    feedback, reports = feedback_cancelling_at()
    parameters = {"INPUT": raster, "SOURCES": point, "DESTINATIONS": point,
                  "THRESHOLD": 2.0}
    if algorithm_id != CD:
        del parameters["SOURCES"], parameters["DESTINATIONS"]
    parameters.update({name: str(tmp_path / file)
                       for name, file in outputs.items()})
    message = run_fails(run_algorithm, algorithm_id, parameters, feedback)
    assert "cancelled" in message
    assert reports, "the algorithm never reported progress"
    assert_nothing_in(tmp_path, {"inputs"})
