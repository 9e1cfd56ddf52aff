"""The three algorithms headless, through scripts/qgis-process --json (the
plugin as QGIS loads it from the profile, not the test session's provider)."""

import math

import numpy as np
import pytest

from conftest import cell_centre, read_features, read_raster, write_geotiff, \
    write_points


def test_provider_is_listed(qgis_process):
    algorithms = qgis_process.listing["providers"]["gridgraph"]["algorithms"]
    assert sorted(algorithms) == ["gridgraph:connectedcomponents",
                                  "gridgraph:costdistance",
                                  "gridgraph:habitatnetwork",
                                  "gridgraph:minimumspanningtree"]


def test_connected_components(qgis_process, tmp_path):
    values = np.array([[5, 5, 7, 7], [5, 9, 9, 7], [2, 2, 9, 0]])
    path = write_geotiff(tmp_path / "v.tif", values, nodata=0,
                         data_type="Int16")
    code, answer, text = qgis_process(
        "run", "gridgraph:connectedcomponents", "--",
        f"INPUT={path}", "MODE=0", "CONNECTIVITY=1",
        f"OUTPUT={tmp_path / 'labels.tif'}",
        f"OUTPUT_POLYGONS={tmp_path / 'polygons.gpkg'}")
    assert code == 0, text
    results = answer["results"]
    assert results["COMPONENTS"] == 4
    np.testing.assert_array_equal(read_raster(results["OUTPUT"])[0],
                                  [[1, 1, 2, 2], [1, 3, 3, 2], [4, 4, 3, 0]])
    cells = {a["label"]: a["cells"]
             for a, _ in read_features(results["OUTPUT_POLYGONS"])}
    assert cells == {1: 3, 2: 3, 3: 3, 4: 2}


def test_cost_distance(qgis_process, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.full((3, 4), 2.0))
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)], fids=[5])
    destinations = write_points(tmp_path / "d.gpkg", [cell_centre(2, 3)])
    code, answer, text = qgis_process(
        "run", "gridgraph:costdistance", "--",
        f"INPUT={cost}", f"SOURCES={sources}", f"DESTINATIONS={destinations}",
        "CONNECTIVITY=1", "MAP_UNITS=true",
        f"OUTPUT={tmp_path / 'cost_out.tif'}",
        f"OUTPUT_ALLOCATION={tmp_path / 'allocation.tif'}",
        f"OUTPUT_PATHS={tmp_path / 'paths.gpkg'}")
    assert code == 0, text
    results = answer["results"]
    accumulated = read_raster(results["OUTPUT"])[0]
    # 10 m cells of cost 2: two diagonal steps then one east
    assert accumulated[2, 3] == pytest.approx(2 * 20 * math.sqrt(2) + 20,
                                              rel=1e-12)
    np.testing.assert_array_equal(read_raster(results["OUTPUT_ALLOCATION"])[0],
                                  np.full((3, 4), 5))
    (attributes, line), = read_features(results["OUTPUT_PATHS"])
    assert attributes["destination"] == 1 and attributes["source"] == 5
    assert attributes["cost"] == pytest.approx(accumulated[2, 3], rel=1e-12)
    assert line.vertexAt(0).x() == cell_centre(2, 3)[0]
    assert (line.vertexAt(3).x(), line.vertexAt(3).y()) == cell_centre(0, 0)


def test_minimum_spanning_tree(qgis_process, tmp_path):
    values = np.array([[1, 5], [2, 3]], dtype=np.float32)
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Float32")
    code, answer, text = qgis_process(
        "run", "gridgraph:minimumspanningtree", "--",
        f"INPUT={path}", "WEIGHT=3", "THRESHOLD=1.5",
        f"OUTPUT_DIRECTION={tmp_path / 'direction.tif'}",
        f"OUTPUT_LINES={tmp_path / 'lines.gpkg'}",
        f"OUTPUT_SEGMENTS={tmp_path / 'segments.tif'}")
    assert code == 0, text
    results = answer["results"]
    assert results["TOTAL_WEIGHT"] == 4.0 and results["TREES"] == 1
    np.testing.assert_array_equal(read_raster(results["OUTPUT_DIRECTION"])[0],
                                  [[0, 270], [90, 180]])
    np.testing.assert_array_equal(read_raster(results["OUTPUT_SEGMENTS"])[0],
                                  [[1, 2], [1, 1]])
    assert len(read_features(results["OUTPUT_LINES"])) == 3


def test_error_exit_code_and_message(qgis_process, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", [[1.0, -1.0]])
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    code, _, text = qgis_process(
        "run", "gridgraph:costdistance", "--", f"INPUT={cost}",
        f"SOURCES={sources}", f"OUTPUT={tmp_path / 'o.tif'}")
    assert code != 0
    assert "negative cell" in text
    assert not (tmp_path / "o.tif").exists()


PLUGIN_LIFECYCLE = """
import os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from qgis.core import QgsApplication
application = QgsApplication([], False)
application.initQgis()
registry = QgsApplication.processingRegistry()
import gridgraph
plugin = gridgraph.classFactory(None)
plugin.initProcessing()
provider = registry.providerById("gridgraph")
print("registered", sorted(a.id() for a in provider.algorithms()))
second = gridgraph.classFactory(None)
second.initProcessing()
second.unload()
print("after second unload", registry.providerById("gridgraph") is not None)
plugin.unload()
print("after unload", registry.providerById("gridgraph") is None)
"""


def test_plugin_registers_and_unregisters_the_provider(tmp_path):
    """classFactory -> initProcessing -> unload, as QGIS drives a plugin."""
    import subprocess
    import sys

    from conftest import qgis_process_environment
    completed = subprocess.run(
        [sys.executable, "-c", PLUGIN_LIFECYCLE], capture_output=True,
        text=True, env=qgis_process_environment(), timeout=120, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert ("registered ['gridgraph:connectedcomponents', "
            "'gridgraph:costdistance', 'gridgraph:habitatnetwork', "
            "'gridgraph:minimumspanningtree']"
            in lines)
    # a second plugin instance cannot register, and its unload leaves the
    # first one's provider alone
    assert "after second unload True" in lines
    assert "after unload True" in lines
