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


def post_processed(context, dest_id):
    """The output as QGIS loads it, after the algorithm's post-processor."""
    from qgis.core import (QgsProcessingFeedback, QgsRasterLayer,
                           QgsVectorLayer)
    processor = context.layerToLoadOnCompletionDetails(dest_id).postProcessor()
    assert processor is not None, f"no style attached to {dest_id}"
    layer = QgsRasterLayer(dest_id, "output")
    if not layer.isValid():
        layer = QgsVectorLayer(dest_id, "output", "ogr")
    assert layer.isValid(), dest_id
    processor.postProcessLayer(layer, context, QgsProcessingFeedback())
    return layer  # the renderer lives as long as its layer


def rendered_rgba(layer, row, col):
    """(r, g, b, alpha) QGIS draws for cell (row, col) of a raster layer."""
    from qgis.PyQt.QtGui import QColor
    provider = layer.dataProvider()
    block = layer.renderer().block(1, layer.extent(), provider.xSize(),
                                   provider.ySize())
    colour = QColor.fromRgba(block.color(row, col))
    return colour.red(), colour.green(), colour.blue(), colour.alpha()


def colour_names(colours):
    return [colour.name() for colour in colours]


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
    # background (0) is the output's nodata: not drawn
    assert rendered_rgba(layer, 0, 2)[3] == 0
    assert rendered_rgba(layer, 0, 0)[3] == 255


def test_labels_past_4096_stay_distinct(tmp_path):
    """4225 isolated cells, 4225 components: still one palette class per
    label (no continuous ramp), consecutive labels never share a colour."""
    from gridgraph.algorithms import styles
    values = np.zeros((130, 130), dtype=np.uint8)
    values[::2, ::2] = 1
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    results, context = run_with_loading(
        "gridgraph:connectedcomponents",
        {"INPUT": path, "MODE": 1, "OUTPUT": str(tmp_path / "labels.tif")},
        ["OUTPUT"])
    assert results["COMPONENTS"] == 65 * 65
    layer = post_processed(context, results["OUTPUT"])
    renderer = layer.renderer()
    assert renderer.type() == "paletted"
    classes = renderer.classes()
    assert [c.value for c in classes] == list(range(1, 65 * 65 + 1))
    names = colour_names(c.color for c in classes)
    assert all(a != b for a, b in zip(names, names[1:]))
    assert set(names) == set(styles.LABEL_PALETTE)


def test_labels_past_the_class_limit_cycle_in_runs(tmp_path, monkeypatch):
    """Above MAX_PALETTE_CLASSES (lowered here to 4) a discrete shader
    colours runs of consecutive labels, cycling the palette by run."""
    from qgis.core import QgsColorRampShader, QgsRasterLayer
    from gridgraph.algorithms import styles
    monkeypatch.setattr(styles, "MAX_PALETTE_CLASSES", 4)
    labels = np.arange(1, 10).reshape(3, 3)  # 9 labels: runs of 3
    path = write_geotiff(tmp_path / "l.tif", labels, data_type="Int32",
                         nodata=0)
    layer = QgsRasterLayer(path, "labels")
    styles.LabelStyle(9).postProcessLayer(layer, None, None)
    renderer = layer.renderer()
    assert renderer.type() == "singlebandpseudocolor"
    function = renderer.shader().rasterShaderFunction()
    assert function.colorRampType() == QgsColorRampShader.Discrete
    items = function.colorRampItemList()
    assert [item.value for item in items] == [3, 6, 9]
    assert colour_names(item.color for item in items) == list(
        styles.LABEL_PALETTE[:3])
    drawn = [rendered_rgba(layer, r, c) for r in range(3) for c in range(3)]
    assert drawn[0] == drawn[1] == drawn[2] != drawn[3] == drawn[5]
    assert drawn[6] == drawn[8] != drawn[5]


def cost_run(tmp_path):
    cost = np.ones((4, 5))
    cost[1, 1] = np.nan  # a barrier: unreached, NaN in every output
    cost_path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg",
                          [cell_centre(0, 0), cell_centre(3, 4)], fids=[3, 8])
    destinations = write_points(tmp_path / "d.gpkg",
                                [cell_centre(0, 4), cell_centre(3, 0),
                                 cell_centre(2, 2)])
    return run_with_loading("gridgraph:costdistance", {
        "INPUT": cost_path, "SOURCES": points, "DESTINATIONS": destinations,
        "OUTPUT": str(tmp_path / "acc.tif"),
        "OUTPUT_ALLOCATION": str(tmp_path / "alloc.tif"),
        "OUTPUT_DIRECTION": str(tmp_path / "dir.tif"),
        "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")},
        ["OUTPUT", "OUTPUT_ALLOCATION", "OUTPUT_DIRECTION", "OUTPUT_PATHS"])


def test_accumulated_cost_gets_a_perceptual_ramp_nodata_transparent(tmp_path):
    results, context = cost_run(tmp_path)
    layer = post_processed(context, results["OUTPUT"])
    ramp = layer.renderer()
    assert ramp.type() == "singlebandpseudocolor"
    # farthest cells, e.g. (0, 4), are 3 diagonal-or-straight steps away
    assert (ramp.classificationMin(), ramp.classificationMax()) == (0.0, 3.0)
    function = ramp.shader().rasterShaderFunction()
    magma = QgsStyle_ramp("Magma")
    assert function.sourceColorRamp().color1() == magma.color1()
    assert function.sourceColorRamp().color2() == magma.color2()
    assert rendered_rgba(layer, 1, 1)[3] == 0  # the barrier: transparent
    assert rendered_rgba(layer, 0, 0)[3] == 255


def QgsStyle_ramp(name):  # noqa: N802
    from qgis.core import QgsStyle
    return QgsStyle.defaultStyle().colorRamp(name)


def test_allocation_gets_a_palette(tmp_path):
    results, context = cost_run(tmp_path)
    layer = post_processed(context, results["OUTPUT_ALLOCATION"])
    palette = layer.renderer()
    assert palette.type() == "paletted"
    assert [c.value for c in palette.classes()] == [3, 8]
    assert len({c.color.name() for c in palette.classes()}) == 2


def test_directions_get_a_cyclic_ramp(tmp_path):
    from qgis.core import QgsColorRampShader
    from gridgraph.algorithms import styles
    results, context = cost_run(tmp_path)
    layer = post_processed(context, results["OUTPUT_DIRECTION"])
    renderer = layer.renderer()
    assert renderer.type() == "singlebandpseudocolor"
    assert (renderer.classificationMin(), renderer.classificationMax()) == (
        0.0, 360.0)
    function = renderer.shader().rasterShaderFunction()
    assert function.colorRampType() == QgsColorRampShader.Interpolated
    items = function.colorRampItemList()
    assert items[0].value == 0 and items[0].color.name() == \
        styles.NO_MOVE_COLOUR
    assert [item.value for item in items[1:]] == [1, 45, 90, 135, 180, 225,
                                                 270, 315, 360]
    # cyclic: 1 and 360 degrees (both nearly east) get nearly one colour
    first, last = items[1].color, items[-1].color
    assert max(abs(first.red() - last.red()), abs(first.green() - last.green()),
               abs(first.blue() - last.blue())) <= 3
    assert items[5].color.lightness() < 60  # west is dark
    # the sources (direction 0) are grey, the barrier transparent
    assert rendered_rgba(layer, 0, 0)[:3] == (128, 128, 128)
    assert rendered_rgba(layer, 1, 1)[3] == 0


def test_paths_are_graduated_by_cost(tmp_path):
    results, context = cost_run(tmp_path)
    layer = post_processed(context, results["OUTPUT_PATHS"])
    renderer = layer.renderer()
    assert renderer.type() == "graduatedSymbol"
    assert renderer.classAttribute() == "cost"
    ranges = renderer.ranges()
    assert len(ranges) >= 2
    costs = sorted(f["cost"] for f in layer.getFeatures())
    assert ranges[0].lowerValue() == pytest.approx(costs[0])
    assert ranges[-1].upperValue() == pytest.approx(costs[-1])
    assert len({r.symbol().color().name() for r in ranges}) == len(ranges)


def test_tree_edges_are_graduated_by_weight(tmp_path):
    values = np.array([[1.0, 2.0, 5.0], [4.0, 3.0, 9.0]])
    path = write_geotiff(tmp_path / "v.tif", values)
    results, context = run_with_loading("gridgraph:minimumspanningtree", {
        "INPUT": path, "OUTPUT_DIRECTION": str(tmp_path / "dir.tif"),
        "OUTPUT_LINES": str(tmp_path / "lines.gpkg")},
        ["OUTPUT_DIRECTION", "OUTPUT_LINES"])
    layer = post_processed(context, results["OUTPUT_LINES"])
    renderer = layer.renderer()
    assert renderer.type() == "graduatedSymbol"
    assert renderer.classAttribute() == "weight"
    assert len(renderer.ranges()) >= 2
    direction = post_processed(context, results["OUTPUT_DIRECTION"])
    assert direction.renderer().type() == "singlebandpseudocolor"
    assert direction.renderer().classificationMax() == 360.0


def test_polygons_are_filled_by_label_and_outlined(tmp_path):
    from qgis.core import (QgsExpressionContext, QgsExpressionContextUtils,
                           QgsSymbolLayer)
    from gridgraph.algorithms import styles
    values = np.array([[1, 1, 0, 2], [0, 0, 0, 2], [3, 0, 4, 0]])
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    results, context = run_with_loading("gridgraph:connectedcomponents", {
        "INPUT": path, "MODE": 1, "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")},
        ["OUTPUT", "OUTPUT_POLYGONS"])
    layer = post_processed(context, results["OUTPUT_POLYGONS"])
    renderer = layer.renderer()
    assert renderer.type() == "singleSymbol"
    fill = renderer.symbol().symbolLayer(0)
    assert fill.strokeColor().name() == "#323232"
    prop = fill.dataDefinedProperties().property(
        QgsSymbolLayer.PropertyFillColor)
    assert prop.isActive()
    # the fill of each feature is its label's colour in the label raster
    expression_context = QgsExpressionContext(
        QgsExpressionContextUtils.globalProjectLayerScopes(layer))
    for feature in layer.getFeatures():
        expression_context.setFeature(feature)
        colour, ok = prop.valueAsColor(expression_context)
        assert ok
        assert colour.name() == styles.label_colour(feature["label"]).name()
