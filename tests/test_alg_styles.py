"""Outputs are styled when QGIS loads them on completion: the algorithms
attach post-processors, and the post-processors set sensible renderers."""

import numpy as np
import pytest

from conftest import cell_centre, write_geotiff, write_points

pytestmark = pytest.mark.usefixtures("gridgraph_provider")


def run_with_loading(algorithm_id, parameters, outputs):
    """processing.run with ``outputs`` marked to load on completion, as the
    toolbox does; returns (results, context)."""
    import processing
    from qgis.core import (QgsProcessingContext, QgsProcessingFeedback,
                           QgsProject)
    context = QgsProcessingContext()
    context.setProject(QgsProject.instance())
    for name in outputs:
        context.addLayerToLoadOnCompletion(
            parameters[name], QgsProcessingContext.LayerDetails(
                name, QgsProject.instance(), name))
    results = processing.run(algorithm_id, parameters, context=context,
                             feedback=QgsProcessingFeedback())
    return results, context


def post_processed(context, path):
    from qgis.core import QgsProcessingFeedback, QgsRasterLayer
    processor = context.layerToLoadOnCompletionDetails(path).postProcessor()
    assert processor is not None, f"no style attached to {path}"
    layer = QgsRasterLayer(path, "output")
    assert layer.isValid()
    processor.postProcessLayer(layer, context, QgsProcessingFeedback())
    return layer  # the renderer lives as long as its layer


def test_labels_get_one_colour_per_component(tmp_path):
    values = np.array([[1, 1, 0], [0, 0, 2], [3, 0, 2]])
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    results, context = run_with_loading(
        "gridgraph:connectedcomponents",
        {"INPUT": path, "MODE": 1, "OUTPUT": str(tmp_path / "labels.tif")},
        ["OUTPUT"])
    layer = post_processed(context, results["OUTPUT"])
    renderer = layer.renderer()
    assert renderer.type() == "paletted"
    classes = renderer.classes()
    assert [c.value for c in classes] == [1, 2, 3]
    assert len({c.color.name() for c in classes}) == 3


def test_cost_outputs_get_a_ramp_and_allocation_a_palette(tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((4, 5)))
    points = write_points(tmp_path / "s.gpkg",
                          [cell_centre(0, 0), cell_centre(3, 4)], fids=[3, 8])
    results, context = run_with_loading("gridgraph:costdistance", {
        "INPUT": cost, "SOURCES": points,
        "OUTPUT": str(tmp_path / "acc.tif"),
        "OUTPUT_ALLOCATION": str(tmp_path / "alloc.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "dir.tif")},
        ["OUTPUT", "OUTPUT_ALLOCATION", "OUTPUT_DIRECTION"])
    cost_layer = post_processed(context, results["OUTPUT"])
    ramp = cost_layer.renderer()
    assert ramp.type() == "singlebandpseudocolor"
    # farthest cells, e.g. (0, 4), are 3 diagonal-or-straight steps away
    assert (ramp.classificationMin(), ramp.classificationMax()) == (0.0, 3.0)
    allocation_layer = post_processed(context, results["OUTPUT_ALLOCATION"])
    palette = allocation_layer.renderer()
    assert palette.type() == "paletted"
    assert [c.value for c in palette.classes()] == [3, 8]
    # directions keep QGIS's default rendering
    details = context.layerToLoadOnCompletionDetails(
        results["OUTPUT_DIRECTION"])
    assert details.postProcessor() is None
