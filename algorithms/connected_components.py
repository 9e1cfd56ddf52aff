"""gridgraph:connectedcomponents: label the clumps of a raster."""

from qgis.core import (QgsFeature, QgsFeatureSink, QgsField, QgsFields,
                       QgsGeometry, QgsProcessingOutputNumber,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterRasterDestination, QgsProcessing,
                       QgsWkbTypes)
from qgis.PyQt.QtCore import QVariant

from ..core import component_summary, connected_components
from ..core import io as raster_io
from ..core.components import tiled
from .base import ENGINE_SHARE, GridGraphAlgorithm, progress_callback
from .styles import LabelStyle


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
            "Labels the connected components (clumps) of a raster band. Every "
            "valid cell is a vertex of a grid graph; nodata and NaN cells are "
            "not part of any component.\n\n"
            "<b>Mode</b>: <i>equal</i> connects neighbouring cells with the "
            "same value (like GRASS r.clump); <i>nonzero</i> treats every "
            "non-zero cell as foreground and zero as background (like "
            "scipy.ndimage.label).\n"
            "<b>Connectivity</b>: four (rook: edges only) or eight (queen: "
            "edges and corners).\n\n"
            "<b>Labels</b> are numbered 1..n in raster scan order (row by row, "
            "left to right) of each component's first cell; 0 is background "
            "and nodata (the output's nodata value).\n"
            "<b>Polygons</b> (optional): one feature per component with its "
            "label, its number of cells, its area in map units squared (cells "
            "times the cell area) and its value (the raster value of its "
            "cells in equal mode; NULL in nonzero mode, where a component "
            "mixes values).\n"
            "<b>Components</b>: the number of components.\n\n"
            "Advanced: the backend (auto picks an NVIDIA GPU through numba "
            "CUDA when one is usable, else the CPU). A tile size (a power of "
            "two >= 8), or a raster file larger than the memory limit (0 = "
            "half the available RAM), runs the tiled (out-of-core) engine: "
            "the raster is read and the labels written tile by tile (GeoTIFF "
            "output only), with the same labels; polygons need the in-memory "
            "path. The Dask scheduler must stay empty in this version.")

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

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        layer, raster = self.openInputBand(parameters, context, tiled.plan,
                                           feedback)
        mode = self.MODES[self.parameterAsEnum(parameters, self.MODE, context)]
        connectivity = self.CONNECTIVITIES[
            self.parameterAsEnum(parameters, self.CONNECTIVITY, context)]
        output = self.rasterDestination(parameters, self.OUTPUT, context,
                                        required=True)
        want_polygons = self.sinkRequested(parameters, self.OUTPUT_POLYGONS,
                                           context)
        if want_polygons:
            self.notTiledYet(raster, self.OUTPUT_POLYGONS,
                             self.tr("Component polygons"))
        self.checkTiledOutputs(raster, {self.OUTPUT: output})

        with self.tiledOutputFolder(raster) as out_dir:
            result = self.runTimed(
                feedback, connected_components, raster.values,
                connectivity=connectivity, mode=mode, nodata=raster.nodata,
                progress=progress_callback(
                    feedback, 0.0, 0.6 if want_polygons else ENGINE_SHARE),
                **raster.engineKeywords(out_dir),
                **self.scaleOptions(parameters, context))
            # the in-memory path checked this before reading; tiled, only a
            # run without components can lack valid cells
            if result.count == 0 and raster.tiled and (
                    mode == "equal" or not raster.hasValidCell()):
                raise self.noValidCellError(layer, raster.band, raster.nodata)
            feedback.pushInfo(self.tr("{count} component(s)").format(
                count=result.count))

            projection = self.outputProjection(layer, raster)
            features = []
            if want_polygons:
                features = self.componentPolygons(result, raster, projection,
                                                  connectivity, mode, feedback)
            self.checkCanceled(feedback)

            outputs = {self.COMPONENTS: result.count}
            if want_polygons:  # created first: it may still fail on its target
                sink, sink_id = self.createSink(
                    parameters, self.OUTPUT_POLYGONS, context,
                    self.polygonFields(), QgsWkbTypes.MultiPolygon,
                    layer.crs())
            self.writeRaster(output, result.labels, raster, projection,
                             nodata=0)
        self.setStyle(context, output, LabelStyle(result.count))
        outputs[self.OUTPUT] = output
        if want_polygons:
            sink.addFeatures(features, QgsFeatureSink.FastInsert)
            outputs[self.OUTPUT_POLYGONS] = sink_id
        feedback.setProgress(100)
        return outputs

    @staticmethod
    def polygonFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("label", QVariant.LongLong))
        fields.append(QgsField("cells", QVariant.LongLong))
        fields.append(QgsField("area", QVariant.Double))
        fields.append(QgsField("value", QVariant.Double))
        return fields

    def componentPolygons(self, result, raster, projection, connectivity,  # noqa: N802
                          mode, feedback):
        """One multipolygon feature per component, attributes filled in."""
        cells, first_values = component_summary(result.labels, raster.array,
                                                result.count)
        _, dx, rx, _, ry, dy = raster.geotransform
        cell_area = abs(dx * dy - rx * ry)
        parts = {}
        for label, wkb in raster_io.polygonize_labels(
                result.labels, raster.geotransform, projection, connectivity):
            parts.setdefault(label, []).append(wkb)
        fields = self.polygonFields()
        features = []
        for done, label in enumerate(sorted(parts)):
            geometry = QgsGeometry()
            for wkb in parts[label]:
                part = QgsGeometry()
                part.fromWkb(wkb)
                geometry = part if geometry.isEmpty() else geometry.combine(part)
            geometry.convertToMultiType()
            feature = QgsFeature(fields)
            feature.setGeometry(geometry)
            count = int(cells[label - 1])
            value = (float(first_values[label - 1]) if mode == "equal"
                     else None)
            feature.setAttributes([label, count, count * cell_area, value])
            features.append(feature)
            if done % 1000 == 0:
                self.checkCanceled(feedback)
                feedback.setProgress(60 + 30 * done / max(len(parts), 1))
        return features
