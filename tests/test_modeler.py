"""The graphical-modeler chain in tests/data/patch_distance.model3:
gridgraph:connectedcomponents labels the patches, gridgraph:costdistance
takes the labels as SOURCE_RASTER.  Run as a model through processing.run
and through qgis_process."""

import math
import os

import numpy as np
import pytest

from conftest import read_raster, write_geotiff
from gridgraph.core import connected_components, cost_distance

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                     "patch_distance.model3")
R2 = math.sqrt(2.0)

# Two patches: cells (0,0)+(1,1) touch diagonally (one 8-connected patch,
# label 1); the block at the bottom right is label 2.
PATCHES = np.array([[3, 0, 0, 0, 0, 0],
                    [0, 1, 0, 0, 0, 0],
                    [0, 0, 0, 0, 0, 0],
                    [0, 0, 0, 0, 4, 4],
                    [0, 0, 0, 0, 4, 4]], dtype=np.uint8)
COST = np.ones(PATCHES.shape)


@pytest.fixture
def inputs(tmp_path):
    return {"patches": write_geotiff(tmp_path / "patches.tif", PATCHES,
                                     data_type="Byte"),
            "cost": write_geotiff(tmp_path / "cost.tif", COST)}


def expected_outputs():
    labels = connected_components(PATCHES, connectivity=8, mode="nonzero",
                                  backend="cpu").labels
    return labels, cost_distance(COST, labels, connectivity=8, backend="cpu")


def check_outputs(labels_path, accumulated_path, allocation_path):
    labels, reference = expected_outputs()
    np.testing.assert_array_equal(read_raster(labels_path)[0], labels)
    accumulated = read_raster(accumulated_path)[0]
    allocation = read_raster(allocation_path)[0]
    np.testing.assert_array_equal(accumulated, reference.accumulated)
    np.testing.assert_array_equal(allocation, reference.allocation)
    # literal spot checks: patch cells cost 0 and keep their label; (2,2) is
    # one diagonal from patch 1 and two steps from patch 2's corner (3,4)
    assert accumulated[0, 0] == accumulated[3, 4] == 0
    assert allocation[1, 1] == 1 and allocation[4, 5] == 2
    assert accumulated[2, 2] == pytest.approx(R2) and allocation[2, 2] == 1
    assert accumulated[1, 5] == pytest.approx(2.0) and allocation[1, 5] == 2


def test_model_file_chains_the_two_algorithms(gridgraph_provider):
    from qgis.core import QgsProcessingModelAlgorithm
    model = QgsProcessingModelAlgorithm()
    assert model.fromFile(MODEL)
    children = model.childAlgorithms()
    assert {c.algorithmId() for c in children.values()} == {
        "gridgraph:connectedcomponents", "gridgraph:costdistance"}
    source, = children["costdistance"].parameterSources()["SOURCE_RASTER"]
    assert (source.outputChildId(), source.outputName()) == \
        ("components", "OUTPUT")


def test_model_through_processing_run(run_algorithm, inputs, tmp_path):
    from qgis.core import QgsProcessingContext, QgsProcessingModelAlgorithm
    model = QgsProcessingModelAlgorithm()
    assert model.fromFile(MODEL)
    ok, message = model.checkParameterValues(
        {**inputs, "components:labels": "TEMPORARY_OUTPUT",
         "costdistance:accumulated": "TEMPORARY_OUTPUT",
         "costdistance:allocation": "TEMPORARY_OUTPUT"},
        QgsProcessingContext())
    assert ok, message
    result = run_algorithm(model, {
        **inputs,
        "components:labels": str(tmp_path / "labels.tif"),
        "costdistance:accumulated": str(tmp_path / "accumulated.tif"),
        "costdistance:allocation": str(tmp_path / "allocation.tif")})
    check_outputs(result["components:labels"],
                  result["costdistance:accumulated"],
                  result["costdistance:allocation"])


def test_model_through_qgis_process(qgis_process, inputs, tmp_path):
    code, answer, text = qgis_process(
        "run", MODEL, "--",
        f"patches={inputs['patches']}", f"cost={inputs['cost']}",
        f"components:labels={tmp_path / 'labels.tif'}",
        f"costdistance:accumulated={tmp_path / 'accumulated.tif'}",
        f"costdistance:allocation={tmp_path / 'allocation.tif'}")
    assert code == 0, text
    results = answer["results"]
    check_outputs(results["components:labels"],
                  results["costdistance:accumulated"],
                  results["costdistance:allocation"])
