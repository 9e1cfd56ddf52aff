"""gridgraph:connectedcomponents: label the clumps of a raster."""

import os

from qgis.core import (QgsFeature, QgsField, QgsFields,
                       QgsGeometry, QgsProcessingOutputNumber,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterRasterDestination, QgsProcessing,
                       QgsWkbTypes)
from qgis.PyQt.QtCore import QVariant

from ..core import component_summary, connected_components
from ..core import io as raster_io
from ..core import tiling
from ..core.tiled_outputs import component_summary_streamed
from ..core.components import tiled
from ..core._common import Progress
from .base import GridGraphAlgorithm
from .progress import Phases
from .styles import LabelStyle, PolygonStyle


class ConnectedComponents(GridGraphAlgorithm):
    """Connected components (clumps) of the cells of one band."""

    MODE = "MODE"
    CONNECTIVITY = "CONNECTIVITY"
    OUTPUT = "OUTPUT"
    OUTPUT_POLYGONS = "OUTPUT_POLYGONS"
    COMPONENTS = "COMPONENTS"

    MODES = ("equal", "nonzero")
    CONNECTIVITIES = (4, 8)

    ALGORITHM_NAME = "connectedcomponents"
    DISPLAY_NAME = "Connected components"
    GROUP = "Connectivity"
    GROUP_ID = "connectivity"
    ICON = "connectedcomponents.svg"
    TAGS = ("clump,clumps,regions,label,labelling,connected components,"
            "r.clump,patches,polygonize,raster,graph")

    def shortHelpString(self):  # noqa: N802 - QGIS API
        return self.tr(
            "<p>Finds the patches (clumps) of a raster: groups of touching "
            "cells that belong together, each given its own number. It "
            "answers questions such as <i>how many separate forest patches "
            "are there, and how large is each?</i></p>"
            "<p><b>Example</b>: on a land-cover raster, label the forest "
            "patches with <i>Mode</i> = nonzero on a forest/non-forest "
            "raster (1 = forest, 0 = other) and <i>Connectivity</i> = eight; "
            "ask for the polygons to get each patch's area.</p>"
            "<p><b>Input raster</b> and <b>Band number</b>: the raster to "
            "label. Cells with the band's nodata value (and NaN cells) "
            "belong to no patch. The band's scale and offset are applied "
            "first, so packed rasters are compared on their real values."
            "</p>"
            "<p><b>Mode</b>: <i>equal</i> groups touching cells that have "
            "exactly the same value (as GRASS r.clump does on a land-cover "
            "map); <i>nonzero</i> groups all touching cells that are not 0, "
            "whatever their value, and leaves 0 as background.</p>"
            "<p><b>Connectivity</b>: <i>four</i> joins cells that share a "
            "side; <i>eight</i> also joins cells that touch at a corner, so "
            "a diagonal line of cells is one patch.</p>"
            "<p><b>Component labels</b>: a raster with the patch number of "
            "each cell (1, 2, 3 ... numbered from the top-left of the "
            "raster, row by row); 0, the output's nodata value, is "
            "background and nodata. Loaded with a different colour for "
            "consecutive numbers.</p>"
            "<p><b>Component polygons</b> (optional): one (multi)polygon per "
            "patch with its <i>label</i>, its number of <i>cells</i>, its "
            "<i>area</i> in the layer's map units squared and its <i>value"
            "</i> (the cells' value in equal mode; empty in nonzero mode, "
            "where a patch mixes values).</p>"
            "<p><b>Number of components</b> is also reported in the log and "
            "as an output for models.</p>") + self.advancedHelp()

    def outputStyle(self, name):  # noqa: N802
        return PolygonStyle() if name == self.OUTPUT_POLYGONS else None

    def initAlgorithm(self, config=None):  # noqa: N802 - QGIS API
        self.addInputParameters("Input raster")
        self.addParameter(QgsProcessingParameterEnum(
            self.MODE, self.tr("Mode"),
            options=[self.tr("equal: neighbours with the same value"),
                     self.tr("nonzero: every non-zero cell is foreground")],
            defaultValue=0))
        self.addParameter(QgsProcessingParameterEnum(
            self.CONNECTIVITY, self.tr("Connectivity"),
            options=[self.tr("four (rook)"), self.tr("eight (queen)")],
            defaultValue=0))
        self.addScaleParameters()
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT, self.tr("Component labels")))
        self.addParameter(QgsProcessingParameterFeatureSink(
            self.OUTPUT_POLYGONS, self.tr("Component polygons"),
            QgsProcessing.TypeVectorPolygon, optional=True,
            createByDefault=False))
        self.addOutput(QgsProcessingOutputNumber(
            self.COMPONENTS, self.tr("Number of components")))

    RASTER_OUTPUT_TYPES = {"OUTPUT": "int32"}
    # labels .npy (int64), the labels GeoTIFF, the polygons GeoPackage
    SCRATCH_BYTES_PER_CELL = 24

    def runAlgorithm(self, parameters, context, feedback, outputs):  # noqa: N802
        phases = Phases(feedback)
        phases.begin(self.tr("Reading the raster"), 0.05)
        layer, raster = self.openInputBand(parameters, context, tiled.plan,
                                           feedback)
        mode = self.MODES[self.parameterAsEnum(parameters, self.MODE, context)]
        connectivity = self.CONNECTIVITIES[
            self.parameterAsEnum(parameters, self.CONNECTIVITY, context)]
        output = self.rasterDestination(parameters, self.OUTPUT, context,
                                        required=True)
        want_polygons = self.sinkRequested(parameters, self.OUTPUT_POLYGONS,
                                           context)
        self.checkTiledOutputs(raster, {self.OUTPUT: output})

        with self.tiledOutputFolder(raster) as out_dir:
            result = self.runTimed(
                feedback, connected_components, raster.values,
                connectivity=connectivity, mode=mode, nodata=raster.nodata,
                progress=phases.begin(self.tr("Labelling the components"),
                                      0.5 if want_polygons else 0.75),
                **raster.engineKeywords(out_dir),
                **self.scaleOptions(parameters, context))
            # the in-memory path checked this before reading; tiled, only a
            # run without components can lack valid cells
            if result.count == 0 and raster.tiled and (
                    mode == "equal" or not raster.hasValidCell()):
                raise self.noValidCellError(layer, raster.band, raster.nodata)
            feedback.pushInfo(self.tr(
                "Found {count} connected component(s) ({mode}, "
                "{connectivity}-connected)").format(
                    count=result.count, mode=mode, connectivity=connectivity))

            projection = self.outputProjection(layer, raster)
            features = []
            streamed = None
            if want_polygons:
                polygon_progress = phases.begin(
                    self.tr("Making the component polygons"), 0.25)
            if want_polygons and raster.tiled:
                streamed = self.streamedPolygons(result, raster, projection,
                                                 connectivity, mode, out_dir,
                                                 polygon_progress)
            elif want_polygons:
                features = self.componentPolygons(result, raster, projection,
                                                  connectivity, mode,
                                                  polygon_progress, feedback)
            self.checkCanceled(feedback)

            # publishing: everything under temporary names, moved into
            # place together by the caller's commit
            results = {self.COMPONENTS: result.count}
            if want_polygons:  # created first: it may still fail on its target
                sink, sink_id = outputs.sink(
                    self.OUTPUT_POLYGONS, self.polygonFields(),
                    QgsWkbTypes.MultiPolygon, layer.crs())
            share = phases.remaining(2 if want_polygons else 1)
            phases.begin(self.tr("Writing the component labels"), share)
            if streamed is not None:
                labels_file, polygons_file, cells, first_values = streamed
                self.moveRaster(outputs, labels_file, output)
                write_polygons = phases.begin(
                    self.tr("Writing the component polygons"), share)
                self.addStreamedPolygons(sink, polygons_file, cells,
                                         first_values, raster, mode,
                                         write_polygons)
            else:
                self.writeRaster(outputs, output, result.labels, raster,
                                 projection, nodata=0)
                if want_polygons:
                    phases.begin(self.tr("Writing the component polygons"),
                                 share)
                    sink.add(features)
        self.setStyle(context, output, LabelStyle(result.count))
        results[self.OUTPUT] = output
        if want_polygons:
            results[self.OUTPUT_POLYGONS] = sink_id
        return results

    @staticmethod
    def polygonFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("label", QVariant.LongLong))
        fields.append(QgsField("cells", QVariant.LongLong))
        fields.append(QgsField("area", QVariant.Double))
        fields.append(QgsField("value", QVariant.Double))
        return fields

    @staticmethod
    def cellArea(raster):  # noqa: N802
        _, dx, rx, _, ry, dy = raster.geotransform
        return abs(dx * dy - rx * ry)

    @staticmethod
    def polygonFeature(fields, label, parts, cells, cell_area, value):  # noqa: N802
        """The multipolygon feature of one component from its WKB parts."""
        geometry = QgsGeometry()
        for wkb in parts:
            part = QgsGeometry()
            part.fromWkb(wkb)
            geometry = part if geometry.isEmpty() else geometry.combine(part)
        geometry.convertToMultiType()
        feature = QgsFeature(fields)
        feature.setGeometry(geometry)
        feature.setAttributes([label, cells, cells * cell_area, value])
        return feature

    def componentPolygons(self, result, raster, projection, connectivity,  # noqa: N802
                          mode, progress, feedback):
        """One multipolygon feature per component, attributes filled in."""
        cells, first_values = component_summary(result.labels, raster.array,
                                                result.count)
        cell_area = self.cellArea(raster)
        parts = {}
        for label, wkb in raster_io.polygonize_labels(
                result.labels, raster.geotransform, projection, connectivity):
            parts.setdefault(label, []).append(wkb)
        fields = self.polygonFields()
        features = []
        for done, label in enumerate(sorted(parts)):
            value = (float(first_values[label - 1]) if mode == "equal"
                     else None)
            features.append(self.polygonFeature(
                fields, label, parts[label], int(cells[label - 1]),
                cell_area, value))
            if done % 1000 == 0:
                progress(done / max(len(parts), 1))
                self.checkCanceled(feedback)
        return features

    def streamedPolygons(self, result, raster, projection, connectivity,  # noqa: N802
                         mode, out_dir, progress):
        """Tiled path: the labels GeoTIFF, its polygons and the attributes,
        made in ``out_dir`` without loading a raster.

        The labels memmap is streamed into a GeoTIFF (moved to the output
        when everything succeeded), GDAL polygonizes that file scanline by
        scanline into a GeoPackage indexed by label, and the cell counts and
        first values are summed strip by strip.  Returns (labels GeoTIFF,
        polygons GeoPackage, cells, first values or None).
        """
        labels_file = os.path.join(out_dir, "labels.tif")
        self.runEngine(tiling.write_geotiff, result.labels, labels_file,
                       raster.geotransform, projection, 0)
        cells, first_values = self.runEngine(
            component_summary_streamed, result.labels,
            raster.path if mode == "equal" else None, result.count,
            band=raster.band, out_dir=out_dir,
            progress=Progress(progress).span(0.0, 0.3))
        polygons_file = self.runEngine(
            raster_io.polygonize_label_file, labels_file,
            os.path.join(out_dir, "polygons.gpkg"), connectivity,
            progress=Progress(progress).span(0.3, 1.0))
        return labels_file, polygons_file, cells, first_values

    def addStreamedPolygons(self, sink, polygons_file, cells, first_values,  # noqa: N802
                            raster, mode, progress):
        """Features from :meth:`streamedPolygons`' GeoPackage into the sink,
        a batch at a time, in label order (the in-memory order)."""
        cell_area = self.cellArea(raster)
        fields = self.polygonFields()
        total = max(len(cells), 1)
        batch = []
        for label, parts in raster_io.read_label_polygons(polygons_file):
            value = (float(first_values[label - 1]) if mode == "equal"
                     else None)
            batch.append(self.polygonFeature(
                fields, label, parts, int(cells[label - 1]), cell_area,
                value))
            if len(batch) == 1000:
                sink.add(batch)
                batch = []
                progress(label / total)
        sink.add(batch)
