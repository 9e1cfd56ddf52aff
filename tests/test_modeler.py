"""The graphical-modeler chain in tests/data/patch_distance.model3:
gridgraph:connectedcomponents labels the patches, gridgraph:costdistance
takes the labels as SOURCE_RASTER.  Run as a model through processing.run
and through qgis_process."""

import math
import os

import numpy as np
import pytest

from conftest import read_features, read_raster, write_geotiff
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


# ------------------------------------------------- every model validates

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_MODELS = sorted(
    os.path.join(folder, name)
    for top in ("tests", "docs")
    for folder, _, names in os.walk(os.path.join(ROOT, top))
    for name in names if name.endswith(".model3"))
EXAMPLE_MODEL = os.path.join(ROOT, "docs", "models", "patch_network.model3")


def test_the_example_model_is_shipped():
    assert EXAMPLE_MODEL in SHIPPED_MODELS
    assert MODEL in SHIPPED_MODELS


@pytest.mark.parametrize("path", SHIPPED_MODELS,
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_shipped_model_validates(gridgraph_provider, path):
    """What the modeler shows as red boxes: validate() lists the issues."""
    from qgis.core import QgsProcessingModelAlgorithm
    model = QgsProcessingModelAlgorithm()
    assert model.fromFile(path)
    ok, issues = model.validate()
    assert ok, issues
    assert issues == []


def test_advanced_parameters_are_optional_with_defaults(gridgraph_provider):
    """Unset advanced parameters mean their defaults, so a model saved
    before they existed (or written by a script) still validates."""
    from qgis.core import QgsApplication, QgsProcessingParameterDefinition
    registry = QgsApplication.processingRegistry()
    for name in ("connectedcomponents", "costdistance", "minimumspanningtree"):
        algorithm = registry.algorithmById("gridgraph:" + name)
        for parameter_name, default in (("BACKEND", 0), ("TILE_SIZE", 0),
                                        ("MEMORY_LIMIT_MB", 0),
                                        ("DASK_SCHEDULER", "")):
            parameter = algorithm.parameterDefinition(parameter_name)
            flags = parameter.flags()
            assert flags & QgsProcessingParameterDefinition.FlagAdvanced
            assert flags & QgsProcessingParameterDefinition.FlagOptional
            assert parameter.defaultValue() == default
        band = algorithm.parameterDefinition("BAND")
        assert not band.flags() & QgsProcessingParameterDefinition.FlagOptional
        assert band.defaultValue() == 1


def test_model_without_advanced_parameters_validates(gridgraph_provider):
    """The model file names no advanced parameter (as one saved before they
    existed); the 3.22 modeler called it invalid ("BACKEND is mandatory")."""
    with open(MODEL, encoding="utf-8") as model_file:
        text = model_file.read()
    for name in ("BACKEND", "TILE_SIZE", "MEMORY_LIMIT_MB", "DASK_SCHEDULER"):
        assert f">{name}<" not in text and f'"{name}"' not in text
    from qgis.core import QgsProcessingModelAlgorithm
    model = QgsProcessingModelAlgorithm()
    assert model.fromFile(MODEL)
    for child_id in ("components", "costdistance"):
        assert model.validateChildAlgorithm(child_id) == (True, [])


# ------------------------------------- a user's chain, visible parameters

HABITAT = np.zeros((9, 11), dtype=np.uint8)
HABITAT[0:2, 0:2] = 1
HABITAT[6:9, 8:11] = 5
HABITAT[4, 5] = 2
RUGGED = (1.0 + (np.arange(9 * 11).reshape(9, 11) * 7919 % 13)).astype(
    np.float64)
RUGGED[3, 2:7] = -1  # a short barrier wall (nodata cells)
RUGGED_NODATA = -1.0


def chain_expected():
    from gridgraph.core import minimum_spanning_tree
    labels = connected_components(HABITAT, connectivity=8, mode="nonzero",
                                  backend="cpu").labels
    distance = cost_distance(RUGGED, labels, connectivity=8,
                             nodata=RUGGED_NODATA, backend="cpu")
    tree = minimum_spanning_tree(distance.accumulated, connectivity=8,
                                 weight="max", nodata=float("nan"),
                                 backend="cpu")
    return labels, distance, tree


def example_model():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "make_example_model",
        os.path.join(ROOT, "scripts", "make_example_model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_model()


def test_example_model_file_is_the_built_chain(gridgraph_provider):
    """docs/models/patch_network.model3 is what scripts/make_example_model.py
    builds: the three children, only visible parameters set."""
    from qgis.core import QgsProcessingModelAlgorithm
    shipped = QgsProcessingModelAlgorithm()
    assert shipped.fromFile(EXAMPLE_MODEL)
    built = example_model()
    assert built.validate() == (True, [])
    children = shipped.childAlgorithms()
    assert set(children) == set(built.childAlgorithms()) == {
        "components", "costdistance", "mst"}
    advanced = {"BACKEND", "TILE_SIZE", "MEMORY_LIMIT_MB", "DASK_SCHEDULER"}
    for child_id, child in children.items():
        assert not advanced & set(child.parameterSources()), child_id
        assert (set(child.parameterSources())
                == set(built.childAlgorithms()[child_id].parameterSources()))
    source, = children["costdistance"].parameterSources()["SOURCE_RASTER"]
    assert (source.outputChildId(), source.outputName()) == (
        "components", "OUTPUT")
    source, = children["mst"].parameterSources()["INPUT"]
    assert (source.outputChildId(), source.outputName()) == (
        "costdistance", "OUTPUT")


def test_example_chain_runs_end_to_end(run_algorithm, tmp_path):
    """components -> cost distance (labels as SOURCE_RASTER) -> minimum
    spanning tree of the accumulated cost, through the shipped model file,
    equal to the engine called step by step."""
    from qgis.core import QgsProcessingModelAlgorithm
    model = QgsProcessingModelAlgorithm()
    assert model.fromFile(EXAMPLE_MODEL)
    habitat = write_geotiff(tmp_path / "habitat.tif", HABITAT,
                            data_type="Byte")
    cost = write_geotiff(tmp_path / "cost.tif", RUGGED, nodata=RUGGED_NODATA)
    outputs = {name: str(tmp_path / f"{name.replace(':', '_')}{suffix}")
               for name, suffix in (("components:labels", ".tif"),
                                    ("costdistance:accumulated", ".tif"),
                                    ("costdistance:allocation", ".tif"),
                                    ("mst:direction", ".tif"),
                                    ("mst:tree", ".gpkg"))}
    result = run_algorithm(model, {"habitat": habitat, "cost": cost,
                                   **outputs})
    labels, distance, tree = chain_expected()
    assert labels.max() == 3  # three patches
    np.testing.assert_array_equal(
        read_raster(result["components:labels"])[0], labels)
    np.testing.assert_array_equal(
        read_raster(result["costdistance:accumulated"])[0],
        distance.accumulated)
    np.testing.assert_array_equal(
        read_raster(result["costdistance:allocation"])[0],
        distance.allocation)
    np.testing.assert_array_equal(
        read_raster(result["mst:direction"])[0], tree.parent_direction)
    lines = read_features(result["mst:tree"])
    # the wall cells are unreached (NaN): not vertices of the tree
    valid = np.isfinite(distance.accumulated).sum()
    assert len(lines) == valid - tree.trees
    assert sum(attributes["weight"] for attributes, _ in lines) == \
        pytest.approx(tree.total_weight)


def test_band_left_out_means_band_one(check_parameters, tmp_path):
    """BAND is not flagged optional (no "[optional]" in the dialog), yet a
    call without it is accepted and reads band 1."""
    path = write_geotiff(tmp_path / "v.tif", PATCHES, data_type="Byte")
    ok, message = check_parameters("gridgraph:connectedcomponents", {
        "INPUT": path, "OUTPUT": str(tmp_path / "labels.tif")})
    assert ok, message
    from qgis.core import QgsApplication, QgsProcessingContext
    algorithm = QgsApplication.processingRegistry().algorithmById(
        "gridgraph:connectedcomponents")
    band = algorithm.parameterDefinition("BAND")
    context = QgsProcessingContext()
    assert band.checkValueIsAcceptable(None, context)
    assert band.clone().checkValueIsAcceptable(None, context)
    assert algorithm.parameterAsInt({}, "BAND", context) == 1
