"""Render the pictures of the help pages (docs/images/*.png) from the demo
data, with the styles the plugin gives its outputs (QGIS offscreen).

    .venv/bin/python scripts/make_help_pictures.py [--size 128]

The inputs are scripts/demo.py's: a fractal DEM in UTM 33N with 30 m
cells, its 100 m elevation classes, three sources and five destinations.
Each algorithm runs through processing.run; every output is loaded, styled
by the algorithm's own post-processor, and drawn by QgsMapRendererSequentialJob
into one panel of a picture per algorithm.
"""

import argparse
import os
import shutil
import sys
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from osgeo import gdal  # noqa: E402
from qgis.core import (QgsApplication, QgsFillSymbol, QgsMapRendererSequentialJob,  # noqa: E402
                       QgsMapSettings, QgsMarkerSymbol, QgsProcessingContext,
                       QgsProcessingFeedback, QgsProject, QgsRasterLayer,
                       QgsRectangle, QgsSingleSymbolRenderer, QgsVectorLayer)
from qgis.PyQt.QtCore import QRectF, QSize, Qt  # noqa: E402
from qgis.PyQt.QtGui import QColor, QFont, QImage, QPainter  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "docs", "images")
PANEL = 360  # pixels per panel side
TITLE = 28  # pixels of title above a panel
THRESHOLD = 25.0  # MST segments: cut steps of more than 25 m


def load_demo_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "demo", os.path.join(ROOT, "scripts", "demo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo_inputs(folder, size, seed=7):
    """scripts/demo.py's inputs, written into ``folder``."""
    demo = load_demo_module()
    dem = demo.fractal_surface((size, size), seed=seed)
    paths = {
        "dem": demo.write_geotiff(os.path.join(folder, "dem.tif"), dem,
                                  gdal.GDT_Float32),
        "classes": demo.write_geotiff(os.path.join(folder, "classes.tif"),
                                      (dem // 100).astype(np.uint8),
                                      gdal.GDT_Byte)}
    step = size // 4
    paths["sources"] = demo.write_points(
        os.path.join(folder, "sources.gpkg"),
        [(step, step), (3 * step, 2 * step), (step, 3 * step)], "sources")
    paths["destinations"] = demo.write_points(
        os.path.join(folder, "destinations.gpkg"),
        [(size - 1, 0), (0, size - 1), (size - 1, size - 1), (size // 2, 0),
         (0, size // 2)], "destinations")
    return paths


def run(algorithm_id, parameters, load):
    """processing.run with the ``load`` outputs styled as the toolbox would
    style them; returns {output name: styled layer}."""
    import processing
    context = QgsProcessingContext()
    context.setProject(QgsProject.instance())
    for name in load:
        context.addLayerToLoadOnCompletion(
            parameters[name], QgsProcessingContext.LayerDetails(
                name, QgsProject.instance(), name))
    results = processing.run(algorithm_id, parameters, context=context,
                             feedback=QgsProcessingFeedback())
    layers = {}
    for name in load:
        dest_id = results[name]
        layer = QgsRasterLayer(dest_id, name)
        if not layer.isValid():
            layer = QgsVectorLayer(dest_id, name, "ogr")
        processor = context.layerToLoadOnCompletionDetails(
            parameters[name]).postProcessor()
        if processor is not None:
            processor.postProcessLayer(layer, context, QgsProcessingFeedback())
        layers[name] = layer
    return results, layers


def points_layer(path, colour):
    layer = QgsVectorLayer(path, os.path.basename(path), "ogr")
    layer.setRenderer(QgsSingleSymbolRenderer(QgsMarkerSymbol.createSimple({
        "name": "circle", "color": colour, "outline_color": "white",
        "size": "3.2"})))
    return layer


def outline_layer(layer):
    """``layer``'s polygons as outlines only (drawn over a raster)."""
    outlines = layer.clone()
    outlines.setRenderer(QgsSingleSymbolRenderer(QgsFillSymbol.createSimple({
        "style": "no", "outline_color": "#202020", "outline_width": "0.2"})))
    return outlines


def render(layers, extent):
    """The ``layers`` (top first) drawn over ``extent`` into a QImage."""
    settings = QgsMapSettings()
    settings.setLayers(layers)
    settings.setBackgroundColor(QColor("white"))
    settings.setOutputSize(QSize(PANEL, PANEL))
    settings.setDestinationCrs(layers[-1].crs())
    settings.setExtent(extent)
    job = QgsMapRendererSequentialJob(settings)
    job.start()
    job.waitForFinished()
    return job.renderedImage()


def compose(path, panels):
    """Panels [(title, QImage)] side by side, titled, saved as PNG."""
    image = QImage(PANEL * len(panels) + 8 * (len(panels) - 1),
                   PANEL + TITLE, QImage.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    font = QFont()
    font.setPixelSize(15)
    painter.setFont(font)
    for index, (title, panel) in enumerate(panels):
        left = index * (PANEL + 8)
        painter.drawText(QRectF(left, 0, PANEL, TITLE),
                         Qt.AlignCenter, title)
        painter.drawImage(left, TITLE, panel)
    painter.end()
    assert image.save(path), path
    print(path)


def zoom(extent, fraction, centre=(0.5, 0.5)):
    """The part ``fraction`` wide of ``extent`` around ``centre``."""
    width, height = extent.width() * fraction, extent.height() * fraction
    x = extent.xMinimum() + extent.width() * centre[0]
    y = extent.yMaximum() - extent.height() * centre[1]
    return QgsRectangle(x - width / 2, y - height / 2, x + width / 2,
                        y + height / 2)


def pictures(folder, size):
    paths = demo_inputs(folder, size)

    def out(name):
        return os.path.join(folder, name)

    dem = QgsRasterLayer(paths["dem"], "dem")
    extent = dem.extent()

    _, layers = run("gridgraph:connectedcomponents", {
        "INPUT": paths["classes"], "MODE": 0, "CONNECTIVITY": 1,
        "OUTPUT": out("clumps.tif"), "OUTPUT_POLYGONS": out("clumps.gpkg")},
        ["OUTPUT", "OUTPUT_POLYGONS"])
    classes = QgsRasterLayer(paths["classes"], "classes")
    compose(os.path.join(IMAGES, "connectedcomponents.png"), [
        ("Input: elevation classes", render([classes], extent)),
        ("Component labels", render([layers["OUTPUT"]], extent)),
        ("Component polygons (detail)",
         render([layers["OUTPUT_POLYGONS"]], zoom(extent, 0.35)))])

    _, layers = run("gridgraph:costdistance", {
        "INPUT": paths["dem"], "SOURCES": paths["sources"],
        "DESTINATIONS": paths["destinations"], "CONNECTIVITY": 2,
        "MAP_UNITS": True, "OUTPUT": out("accumulated.tif"),
        "OUTPUT_DIRECTION": out("direction.tif"),
        "OUTPUT_ALLOCATION": out("allocation.tif"),
        "OUTPUT_PATHS": out("paths.gpkg")},
        ["OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION", "OUTPUT_PATHS"])
    sources = points_layer(paths["sources"], "#00c0ff")
    destinations = points_layer(paths["destinations"], "#ff3030")
    compose(os.path.join(IMAGES, "costdistance.png"), [
        ("Accumulated cost and least-cost paths",
         render([sources, destinations, layers["OUTPUT_PATHS"],
                 layers["OUTPUT"]], extent)),
        ("Direction (degrees, cyclic)",
         render([sources, layers["OUTPUT_DIRECTION"]], extent)),
        ("Allocation (nearest source)",
         render([sources, layers["OUTPUT_ALLOCATION"]], extent))])

    _, layers = run("gridgraph:minimumspanningtree", {
        "INPUT": paths["dem"], "WEIGHT": 3, "CONNECTIVITY": 0,
        "THRESHOLD": THRESHOLD, "OUTPUT_DIRECTION": out("mst_direction.tif"),
        "OUTPUT_LINES": out("mst_edges.gpkg"),
        "OUTPUT_SEGMENTS": out("mst_segments.tif")},
        ["OUTPUT_DIRECTION", "OUTPUT_LINES", "OUTPUT_SEGMENTS"])
    compose(os.path.join(IMAGES, "minimumspanningtree.png"), [
        ("Input: elevation", render([dem], extent)),
        (f"Segments (threshold {THRESHOLD:g} m)", render([layers["OUTPUT_SEGMENTS"]],
                                             extent)),
        ("Tree edges by weight (detail)",
         render([layers["OUTPUT_LINES"]], zoom(extent, 0.2)))])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128,
                        help="raster side in cells (default 128)")
    options = parser.parse_args()
    application = QgsApplication([], False)
    application.initQgis()
    sys.path.append(os.path.join(application.pkgDataPath(), "python",
                                 "plugins"))
    from processing.core.Processing import Processing
    Processing.initialize()
    from gridgraph.provider import GridGraphProvider
    provider = GridGraphProvider()  # the registry does not keep it alive
    QgsApplication.processingRegistry().addProvider(provider)
    os.makedirs(IMAGES, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="gridgraph-pictures-")
    try:
        pictures(folder, options.size)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        QgsProject.instance().clear()


if __name__ == "__main__":
    main()
