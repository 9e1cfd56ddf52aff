"""The failure contract (issue 8), part 1: what is refused before computing,
and outputs published together or not at all.

Every test asserts the message, that the inputs' bytes are unchanged, and
that the outputs folder and the scratch folder hold nothing new afterwards
(tests/faults_helpers.Watched).  See also test_faults_disk.py (full disks,
damaged and packed inputs), test_faults_signals.py (SIGTERM, SIGKILL,
threads) and test_faults_api.py (the core API's arguments, cost overflow,
rotated rasters).
"""

import os

import numpy as np
import pytest
from qgis.core import QgsProcessingException

from conftest import cell_centre, read_raster, write_geotiff, write_points
from faults_helpers import CC, CD, MST, Watched, run_qgis_process

pytestmark = pytest.mark.usefixtures("gridgraph_provider")


@pytest.fixture
def watched(tmp_path, monkeypatch):
    folders = Watched(tmp_path, monkeypatch)
    values = np.random.default_rng(8).uniform(1, 5, size=(12, 10))
    folders.cost = write_geotiff(folders.input("cost.tif"), values)
    folders.point = write_points(folders.input("point.gpkg"),
                                 [cell_centre(2, 3)])
    folders.sources = write_geotiff(folders.input("sources.tif"),
                                    (values > 4.5).astype(float))
    return folders


def fails(run_algorithm, algorithm_id, parameters, feedback=None):
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(algorithm_id, parameters, feedback)
    return str(error.value)


# --------------------------------------------- an output is one of the inputs

@pytest.mark.parametrize("algorithm_id,output,input_name", [
    (CC, "OUTPUT", "INPUT"), (MST, "OUTPUT_DIRECTION", "INPUT"),
    (MST, "OUTPUT_SEGMENTS", "INPUT"), (CD, "OUTPUT", "INPUT"),
    (CD, "OUTPUT_ALLOCATION", "SOURCE_RASTER")])
def test_output_equal_to_an_input_raster_is_refused(
        run_algorithm, check_parameters, watched, algorithm_id, output,
        input_name):
    parameters = {"INPUT": watched.cost, "THRESHOLD": 2.0}
    if algorithm_id == CD:
        parameters["SOURCE_RASTER"] = watched.sources
    target = watched.cost if input_name == "INPUT" else watched.sources
    # the same file through another spelling of its path
    parameters[output] = os.path.join(os.path.dirname(target), ".",
                                      os.path.basename(target))
    watched.mark()
    ok, message = check_parameters(algorithm_id, parameters)
    assert not ok
    assert f"[{output}] is the same file as" in message
    assert f"[{input_name}]" in message and "choose another output" in message
    assert message in fails(run_algorithm, algorithm_id, parameters)
    watched.assert_untouched()


@pytest.mark.parametrize("input_name", ["SOURCES", "DESTINATIONS"])
def test_paths_output_equal_to_a_point_layer_is_refused(
        run_algorithm, watched, input_name):
    parameters = {"INPUT": watched.cost, "SOURCES": watched.point,
                  "DESTINATIONS": watched.point,
                  "OUTPUT_PATHS": watched.point + "|layername=points"}
    watched.mark()
    message = fails(run_algorithm, CD, parameters)
    assert "[OUTPUT_PATHS] is the same file as" in message
    assert "[SOURCES]" in message or "[DESTINATIONS]" in message
    watched.assert_untouched()


def test_output_equal_to_input_through_qgis_process(watched):
    watched.mark()
    code, text = run_qgis_process(CC, {"INPUT": watched.cost,
                                       "OUTPUT": watched.cost})
    assert code != 0
    assert "[OUTPUT] is the same file as" in text and "[INPUT]" in text
    assert "Traceback" not in text
    watched.assert_untouched()


def test_two_outputs_on_one_file_are_refused(run_algorithm, watched):
    same = watched.output("both.tif")
    watched.mark()
    message = fails(run_algorithm, CD, {
        "INPUT": watched.cost, "SOURCES": watched.point, "OUTPUT": same,
        "OUTPUT_ALLOCATION": same})
    assert "[OUTPUT] and " in message
    assert "[OUTPUT_ALLOCATION] are the same file" in message
    assert "its own file" in message
    watched.assert_untouched()


def test_a_folder_as_output_is_refused(run_algorithm, watched):
    folder = watched.outputs / "existing"
    folder.mkdir()
    watched.mark()
    message = fails(run_algorithm, MST, {"INPUT": watched.cost,
                                         "OUTPUT_DIRECTION": str(folder)})
    assert "[OUTPUT_DIRECTION]: " in message
    assert "is a folder" in message and "output.tif" in message
    watched.assert_untouched()


@pytest.mark.parametrize("extension", [".asc", ".png", ".jpg"])
def test_a_format_that_cannot_hold_float64_is_refused(
        run_algorithm, check_parameters, watched, extension):
    parameters = {"INPUT": watched.cost, "SOURCES": watched.point,
                  "OUTPUT": watched.output("cost" + extension)}
    watched.mark()
    ok, message = check_parameters(CD, parameters)
    assert not ok
    assert "[OUTPUT]: " in message
    assert "cannot hold Float64" in message and ".tif" in message
    fails(run_algorithm, CD, parameters)
    watched.assert_untouched()


def test_a_format_gdal_only_copies_into_is_written(run_algorithm, watched):
    """AAIGrid (.asc) takes Int32 labels: written (through a copy), with
    its .prj sidecar, and no temporary file left."""
    labels = watched.output("labels.asc")
    result = run_algorithm(CC, {"INPUT": watched.sources, "MODE": 1,
                                "OUTPUT": labels})
    assert result["OUTPUT"] == labels
    written = read_raster(labels)[0]
    assert written.max() == result["COMPONENTS"] > 0
    assert not [n for n in os.listdir(watched.outputs)
                if n.startswith(".gridgraph")]


@pytest.mark.parametrize("algorithm_id,name,value,expected", [
    (MST, "THRESHOLD", "nan", "must be a finite number"),
    (MST, "THRESHOLD", float("inf"), "must be a finite number"),
    (CD, "MAX_COST", float("nan"), "must be a finite number"),
    (CC, "TILE_SIZE", 24, "must be a power of two"),
    (CC, "TILE_SIZE", 64, "is larger than the raster"),
    (CD, "TILE_SIZE", 1024, "which one tile of 16 already covers"),
])
def test_nonsense_numbers_are_refused(run_algorithm, check_parameters,
                                      watched, algorithm_id, name, value,
                                      expected):
    parameters = {"INPUT": watched.cost, "SOURCES": watched.point,
                  "THRESHOLD": 1.0, "OUTPUT_SEGMENTS": watched.output("s.tif"),
                  "OUTPUT": watched.output("o.tif"), name: value}
    if algorithm_id != CD:
        del parameters["SOURCES"]
    watched.mark()
    ok, message = check_parameters(algorithm_id, parameters)
    assert not ok and expected in message and f"[{name}]" in message
    fails(run_algorithm, algorithm_id, parameters)
    watched.assert_untouched()


# ------------------------------------------ all outputs or none, and cancel

def old_outputs(watched, names):
    """Existing outputs (with stale .aux.xml statistics) a run replaces."""
    paths = {}
    for name, file in names.items():
        path = watched.output(file)
        if file.endswith(".tif"):
            write_geotiff(path, np.full((2, 2), 7.0))
            with open(path + ".aux.xml", "w") as handle:
                handle.write("<PAMDataset>stale</PAMDataset>")
        else:
            write_points(path, [cell_centre(0, 0)])
        paths[name] = path
    return paths


@pytest.mark.parametrize("algorithm_id,names", [
    (CC, {"OUTPUT": "labels.tif", "OUTPUT_POLYGONS": "polygons.gpkg"}),
    (CD, {"OUTPUT": "cost.tif", "OUTPUT_DIRECTION": "direction.tif",
          "OUTPUT_ALLOCATION": "allocation.tif",
          "OUTPUT_PATHS": "paths.gpkg"}),
    (MST, {"OUTPUT_DIRECTION": "direction.tif", "OUTPUT_LINES": "lines.gpkg",
           "OUTPUT_SEGMENTS": "segments.tif"}),
])
@pytest.mark.parametrize("tiled", [False, True])
def test_cancel_while_writing_outputs_replaces_nothing(
        run_algorithm, watched, monkeypatch, feedback_cancelled_after_a_write,
        algorithm_id, names, tiled):
    """A cancel after the first output was written: the run reports the
    cancel and every old output is still there, byte for byte."""
    from gridgraph.algorithms.base import GridGraphAlgorithm
    parameters = {"INPUT": watched.cost, "SOURCES": watched.point,
                  "DESTINATIONS": watched.point, "THRESHOLD": 2.0,
                  "TILE_SIZE": 8 if tiled else 0,
                  **old_outputs(watched, names)}
    if algorithm_id != CD:
        del parameters["SOURCES"], parameters["DESTINATIONS"]
    feedback = feedback_cancelled_after_a_write
    monkeypatch.setattr(GridGraphAlgorithm, "moveRaster",
                        lambda self, outputs, source, path: (
                            feedback.cancel(), self.checkCanceled(feedback)))
    watched.mark()
    message = fails(run_algorithm, algorithm_id, parameters, feedback)
    assert "cancelled" in message and "no output was written" in message
    watched.assert_untouched()


def test_a_successful_run_removes_stale_statistics(run_algorithm, watched):
    paths = old_outputs(watched, {"OUTPUT": "labels.tif"})
    run_algorithm(CC, {"INPUT": watched.cost, **paths})
    assert not os.path.exists(paths["OUTPUT"] + ".aux.xml")
    assert read_raster(paths["OUTPUT"])[0].shape == (12, 10)
    assert sorted(os.listdir(watched.outputs)) == ["labels.tif"]
    assert os.listdir(watched.scratch) == []


def test_a_refused_sink_write_fails_naming_the_output(run_algorithm,
                                                      watched, monkeypatch):
    """addFeatures returning False (QGIS's sign of a failed write) is an
    error naming the output and QGIS's reason, never an empty layer."""
    from qgis.core import QgsFeatureSink

    class Refusing:
        def __init__(self, sink):
            self.sink = sink

        def addFeatures(self, features, flags=QgsFeatureSink.FastInsert):  # noqa: N802
            return False

        def lastError(self):  # noqa: N802
            return "simulated provider failure"

        def flushBuffer(self):  # noqa: N802
            return True
    from gridgraph.algorithms import outputs
    make = outputs.CheckedSink.__init__

    def refusing_init(self, sink, *args, **kwargs):
        make(self, Refusing(sink), *args, **kwargs)
    monkeypatch.setattr(outputs.CheckedSink, "__init__", refusing_init)
    parameters = {"INPUT": watched.cost,
                  **old_outputs(watched, {"OUTPUT_DIRECTION": "d.tif",
                                          "OUTPUT_LINES": "lines.gpkg"})}
    watched.mark()
    message = fails(run_algorithm, MST, parameters)
    assert "[OUTPUT_LINES]" in message
    assert "simulated provider failure" in message
    watched.assert_untouched()


def test_an_output_written_in_full_through_qgis_process(watched, tmp_path):
    """The outputs of a qgis_process run land under their names, nothing
    else is left in the outputs folder or the temporary folder."""
    temporary = tmp_path / "tmpdir"
    temporary.mkdir()
    code, text = run_qgis_process(CD, {
        "INPUT": watched.cost, "SOURCES": watched.point,
        "DESTINATIONS": watched.point, "OUTPUT": watched.output("c.tif"),
        "OUTPUT_PATHS": watched.output("paths.gpkg")},
        environment={"TMPDIR": str(temporary),
                     "GRIDGRAPH_SCRATCH_DIR": ""})
    assert code == 0, text
    assert sorted(os.listdir(watched.outputs)) == ["c.tif", "paths.gpkg"]
    leftovers = [n for n in os.listdir(temporary)
                 if not n.startswith("processing_")]
    assert leftovers == [], leftovers


# ------------------------------------------------ rotated rasters, messages

def rotated_geotransform(degrees, shear=0.0):
    angle = np.radians(degrees)
    return (500000.0, 10 * np.cos(angle), 10 * np.sin(angle) + shear,
            5000000.0, 10 * np.sin(angle), -10 * np.cos(angle))


def cell_point(geotransform, row, col):
    from osgeo import gdal
    return gdal.ApplyGeoTransform(geotransform, col + 0.5, row + 0.5)


def test_map_units_on_a_rotated_raster_use_the_true_cell_size(
        run_algorithm, watched):
    """A grid rotated by 30 degrees with 10 m cells: steps of 10 m and
    10 m x sqrt(2), exactly the north-up grid's costs."""
    results = {}
    for degrees in (0, 30):
        geotransform = rotated_geotransform(degrees)
        cost = write_geotiff(watched.input(f"cost{degrees}.tif"),
                             np.ones((4, 5)), geotransform=geotransform)
        point = write_points(watched.input(f"p{degrees}.gpkg"),
                             [cell_point(geotransform, 0, 0)])
        result = run_algorithm(CD, {
            "INPUT": cost, "SOURCES": point, "MAP_UNITS": True,
            "OUTPUT": watched.output(f"c{degrees}.tif")})
        results[degrees] = read_raster(result["OUTPUT"])[0]
    np.testing.assert_allclose(results[30], results[0], rtol=1e-12)
    assert results[30][0, 1] == pytest.approx(10.0)
    assert results[30][1, 1] == pytest.approx(10 * np.sqrt(2))


def test_map_units_on_a_sheared_raster_are_refused(run_algorithm, watched):
    geotransform = rotated_geotransform(0, shear=3.0)
    cost = write_geotiff(watched.input("sheared.tif"), np.ones((4, 5)),
                         geotransform=geotransform)
    point = write_points(watched.input("p.gpkg"),
                         [cell_point(geotransform, 1, 1)])
    watched.mark()
    message = fails(run_algorithm, CD, {
        "INPUT": cost, "SOURCES": point, "MAP_UNITS": True,
        "OUTPUT": watched.output("c.tif")})
    assert "sheared grid" in message and "[MAP_UNITS]" in message
    watched.assert_untouched()


def test_sources_outside_the_raster_name_both_crs(run_algorithm, watched):
    """Projected coordinates in a layer declared EPSG:4326 (a GeoJSON's
    usual mistake): the message names both CRSs and the likely cause."""
    x, y = cell_centre(2, 3)
    point = write_points(watched.input("wrong.gpkg"), [(x / 1e4, y / 1e5)],
                         crs="EPSG:4326")
    watched.mark()
    message = fails(run_algorithm, CD, {"INPUT": watched.cost,
                                        "SOURCES": point,
                                        "OUTPUT": watched.output("c.tif")})
    assert "outside the cost raster" in message
    assert "EPSG:4326" in message and "EPSG:32633" in message
    assert "assign the right CRS" in message
    watched.assert_untouched()
