"""The toolbox path a user takes: each algorithm's dialog
(processing.createAlgorithmDialog) filled in and run offscreen; its outputs
land in the project with their names and styles.  Cancel, pressed at
several points of a run, leaves no layer and no file."""

import os
import time

import numpy as np
import pytest

from conftest import cell_centre, write_geotiff, write_points

pytestmark = pytest.mark.usefixtures("gridgraph_provider", "dialog_iface")


@pytest.fixture
def dialog_iface(qgis_iface):
    """pytest-qgis's stand-in interface, with what the 3.22 dialog asks."""
    for name in ("browserModel", "messageBar"):
        if not hasattr(qgis_iface, name):
            setattr(qgis_iface, name, lambda: None)
    return qgis_iface


OPEN_DIALOGS = []


@pytest.fixture(autouse=True)
def close_dialogs():
    """Delete every dialog a test opened while QGIS still runs: a dialog
    left to the interpreter's exit is destroyed after QgsApplication and
    crashes the process (a segmentation fault after the last test)."""
    yield
    from qgis.PyQt import sip
    from qgis.PyQt.QtCore import QCoreApplication
    while OPEN_DIALOGS:
        dialog = OPEN_DIALOGS.pop()
        dialog.close()
        sip.delete(dialog)
    QCoreApplication.processEvents()


@pytest.fixture
def project():
    from qgis.core import QgsProject
    QgsProject.instance().clear()
    yield QgsProject.instance()
    QgsProject.instance().clear()


def wait(condition, seconds=300):
    from qgis.PyQt.QtCore import QCoreApplication
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the dialog's run did not finish"
        QCoreApplication.processEvents()
        time.sleep(0.01)


def run_dialog(algorithm_id, parameters, feedback_class=None):
    """Open the algorithm's dialog, fill it, press Run; returns
    (ok, results, dialog) once it finished (the dialog stays open)."""
    import processing
    from processing.core.ProcessingConfig import ProcessingConfig
    ProcessingConfig.setSettingValue(ProcessingConfig.KEEP_DIALOG_OPEN, True)
    dialog = processing.createAlgorithmDialog(algorithm_id, parameters)
    assert dialog is not None
    OPEN_DIALOGS.append(dialog)
    if feedback_class is not None:
        base = dialog.createFeedback
        dialog.createFeedback = lambda: feedback_class(base())
    finished = []
    dialog.algorithmFinished.connect(
        lambda ok, results: finished.append((ok, results)))
    dialog.runAlgorithm()
    # a failed or cancelled run does not emit algorithmFinished
    wait(lambda: finished or (dialog.feedback is None
                              and not dialog.mainWidget().isEnabled() is False
                              and dialog.wasExecuted()))
    ok, results = finished[0] if finished else (False, {})
    return ok, results, dialog


def layers_by_name(project):
    return {layer.name(): layer for layer in project.mapLayers().values()}


@pytest.fixture
def rasters(tmp_path):
    classes = np.array([[1, 1, 2, 2, 0], [1, 3, 3, 2, 0], [4, 4, 3, 0, 0]])
    cost = np.arange(1.0, 16.0).reshape(3, 5)
    points = write_points(tmp_path / "sources.gpkg",
                          [cell_centre(0, 0), cell_centre(2, 4)])
    return {"classes": write_geotiff(tmp_path / "classes.tif", classes,
                                     data_type="Byte", nodata=0),
            "cost": write_geotiff(tmp_path / "cost.tif", cost),
            "points": points}


def test_components_dialog(project, rasters, tmp_path):
    ok, results, _ = run_dialog("gridgraph:connectedcomponents", {
        "INPUT": rasters["classes"], "MODE": 0, "CONNECTIVITY": 0,
        "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")})
    assert ok and results["COMPONENTS"] == 4
    layers = layers_by_name(project)
    assert set(layers) >= {"Component labels", "Component polygons"}
    assert layers["Component labels"].renderer().type() == "paletted"
    assert layers["Component polygons"].renderer().type() == "singleSymbol"
    assert layers["Component polygons"].featureCount() == 4


def test_cost_distance_dialog(project, rasters, tmp_path):
    ok, results, _ = run_dialog("gridgraph:costdistance", {
        "INPUT": rasters["cost"], "SOURCES": rasters["points"],
        "DESTINATIONS": rasters["points"],
        "OUTPUT": str(tmp_path / "acc.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "dir.tif"),
        "OUTPUT_ALLOCATION": str(tmp_path / "alloc.tif"),
        "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")})
    assert ok, results
    layers = layers_by_name(project)
    renderers = {name: layers[name].renderer().type() for name in (
        "Accumulated cost", "Direction", "Allocation", "Least-cost paths")
        if name in layers}
    assert renderers == {"Accumulated cost": "singlebandpseudocolor",
                         "Direction": "singlebandpseudocolor",
                         "Allocation": "paletted",
                         "Least-cost paths": "graduatedSymbol"}, set(layers)


def test_minimum_spanning_tree_dialog(project, rasters, tmp_path):
    ok, results, _ = run_dialog("gridgraph:minimumspanningtree", {
        "INPUT": rasters["cost"], "WEIGHT": 3, "THRESHOLD": 1.5,
        "OUTPUT_DIRECTION": str(tmp_path / "dir.tif"),
        "OUTPUT_LINES": str(tmp_path / "lines.gpkg"),
        "OUTPUT_SEGMENTS": str(tmp_path / "segments.tif")})
    assert ok and results["TREES"] == 1
    layers = layers_by_name(project)
    assert layers["Parent direction"].renderer().type() == \
        "singlebandpseudocolor"
    assert layers["Tree edges"].renderer().type() == "graduatedSymbol"
    assert layers["Segments"].renderer().type() == "paletted"


class CancelAt:
    """A dialog feedback that presses Cancel at the first progress report at
    or above a level (below 100: once the run is done, a cancel is late)."""

    level = 0.0
    pressed = False

    def __new__(cls, feedback):
        def set_progress(value, original=feedback.setProgress):
            original(value)
            if cls.level <= value < 100 and not cls.pressed:
                cls.pressed = True
                feedback.cancel()
        feedback.setProgress = set_progress
        return feedback


CANCEL_CASES = {
    "connectedcomponents": ("classes", {"MODE": 0, "OUTPUT": "labels.tif",
                                        "OUTPUT_POLYGONS": "polygons.gpkg"}),
    "costdistance": ("cost", {"SOURCES": "points", "DESTINATIONS": "points",
                              "OUTPUT": "acc.tif",
                              "OUTPUT_DIRECTION": "dir.tif",
                              "OUTPUT_PATHS": "paths.gpkg"}),
    "minimumspanningtree": ("cost", {"THRESHOLD": 3.0,
                                     "OUTPUT_DIRECTION": "dir.tif",
                                     "OUTPUT_LINES": "lines.gpkg",
                                     "OUTPUT_SEGMENTS": "segments.tif"}),
}


@pytest.mark.parametrize("level", [0.0, 30.0, 70.0, 90.0])
@pytest.mark.parametrize("name", sorted(CANCEL_CASES))
def test_cancel_leaves_no_layer_and_no_file(project, rasters, tmp_path, name,
                                            level):
    raster, outputs = CANCEL_CASES[name]
    out = tmp_path / "out"
    out.mkdir()
    parameters = {"INPUT": rasters[raster]}
    for key, value in outputs.items():
        parameters[key] = (rasters[value] if value in rasters
                           else value if not isinstance(value, str)
                           else str(out / value))

    class Cancel(CancelAt):
        pass
    Cancel.level = level
    ok, _, _ = run_dialog(f"gridgraph:{name}", parameters, Cancel)
    assert Cancel.pressed, f"no progress reported from {level} % on"
    assert not ok
    assert project.mapLayers() == {}
    assert os.listdir(out) == []


PHASES = {
    "connectedcomponents": ["Reading the raster", "Labelling the components",
                            "Making the component polygons",
                            "Writing the component labels",
                            "Writing the component polygons"],
    "costdistance": ["Reading the cost raster and the sources",
                     "Computing the accumulated cost",
                     "Tracing the least-cost paths",
                     "Writing Accumulated cost", "Writing Direction",
                     "Writing the least-cost paths"],
    "minimumspanningtree": ["Reading the raster",
                            "Building the minimum spanning tree",
                            "Cutting the tree into segments",
                            "Making the tree edge lines",
                            "Writing the parent direction",
                            "Writing the segments", "Writing the tree edges"],
}


@pytest.mark.parametrize("name,phase", [
    (name, phase) for name, phases in sorted(PHASES.items())
    for phase in phases])
def test_cancel_in_each_phase_leaves_no_layer_and_no_file(
        project, rasters, tmp_path, name, phase):
    """Cancel pressed as the dialog shows a phase's text: the run stops
    there, no layer is added and the output folder stays empty."""
    raster, outputs = CANCEL_CASES[name]
    out = tmp_path / "out"
    out.mkdir()
    parameters = {"INPUT": rasters[raster]}
    for key, value in outputs.items():
        parameters[key] = (rasters[value] if value in rasters
                           else value if not isinstance(value, str)
                           else str(out / value))
    seen = []

    def cancel_in_phase(feedback):
        def set_text(text, original=feedback.setProgressText):
            seen.append(text)
            original(text)
            if text == phase:
                feedback.cancel()
        feedback.setProgressText = set_text
        return feedback

    ok, _, _ = run_dialog(f"gridgraph:{name}", parameters, cancel_in_phase)
    # it stopped in that phase, or at the first check of the next one (a
    # phase such as reading has no check of its own)
    ours = [text for text in seen if text in PHASES[name]]
    index = PHASES[name].index(phase)
    assert ours[-1] in PHASES[name][index:index + 2], seen
    assert not ok
    assert project.mapLayers() == {}
    assert os.listdir(out) == []
