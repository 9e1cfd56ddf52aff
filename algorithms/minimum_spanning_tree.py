"""gridgraph:minimumspanningtree: minimum spanning forest of a raster's cells."""

import numpy as np
from qgis.core import (QgsFeature, QgsFeatureSink, QgsField, QgsFields,
                       QgsGeometry, QgsLineString, QgsProcessing,
                       QgsProcessingException, QgsProcessingOutputNumber,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterNumber,
                       QgsProcessingParameterRasterDestination, QgsWkbTypes)
from qgis.PyQt.QtCore import QVariant

from ..core import minimum_spanning_tree, segments_by_threshold
from ..core import io as raster_io
from ..core.mst import tiled
from ..core.tiled_outputs import segment_by_threshold_streamed
from .base import GridGraphAlgorithm, progress_callback
from .styles import DirectionStyle, GraduatedLineStyle, LabelStyle

# Tree edges turned into line features at a time.
LINE_CHUNK = 10000


class MinimumSpanningTree(GridGraphAlgorithm):
    """Minimum spanning tree (forest) of the grid graph of one band."""

    WEIGHT = "WEIGHT"
    CONNECTIVITY = "CONNECTIVITY"
    THRESHOLD = "THRESHOLD"
    MAX_LINES = "MAX_LINES"
    OUTPUT_DIRECTION = "OUTPUT_DIRECTION"
    OUTPUT_LINES = "OUTPUT_LINES"
    OUTPUT_SEGMENTS = "OUTPUT_SEGMENTS"
    TOTAL_WEIGHT = "TOTAL_WEIGHT"
    TREES = "TREES"

    WEIGHTS = ("max", "min", "mean", "absdiff")
    CONNECTIVITIES = (4, 8)

    ALGORITHM_NAME = "minimumspanningtree"
    DISPLAY_NAME = "Minimum spanning tree"
    GROUP = "Trees"
    GROUP_ID = "trees"
    ICON = "minimumspanningtree.svg"
    TAGS = ("minimum spanning tree,minimum spanning forest,mst,boruvka,"
            "segmentation,watershed,hierarchy,raster,graph")

    def shortHelpString(self):  # noqa: N802 - QGIS API
        return self.tr(
            "Minimum spanning tree of the grid graph of a raster band: every "
            "valid cell is a vertex, neighbouring valid cells share an edge. "
            "Cells cut off from each other by nodata give a minimum spanning "
            "forest (one tree per connected piece).\n\n"
            "<b>Edge weight</b> from the two cell values a and b: <i>max</i> "
            "max(a, b), <i>min</i> min(a, b), <i>mean</i> (a + b) / 2, "
            "<i>absdiff</i> |a - b|; computed in float32 for bands of 32 bits "
            "or fewer and in float64 for Float64 bands.\n"
            "<b>Ties</b> are broken by the order (weight, lower cell index, "
            "higher cell index), cell indices counted row by row from the "
            "top-left cell (index = row &times; columns + column), so the tree "
            "is unique and the same on every backend.\n"
            "<b>Connectivity</b>: four (rook) or eight (queen).\n\n"
            "Outputs:\n"
            "<b>Parent direction</b>: for each cell, the direction of its "
            "parent on the way to its tree's root (the tree's lowest-index "
            "cell), in degrees counter-clockwise from east (east = 360, north "
            "= 90, as GRASS r.cost's outdir); 0 at roots.\n"
            "<b>Edges as lines</b> between cell centres with their weight and "
            "the row-major indices of their two cells (from = lower, to = "
            "higher). Refused above <i>maximum number of lines</i> (each line "
            "is a feature: a large raster has millions of edges); use the "
            "parent direction raster instead, or raise the limit.\n"
            "<b>Segments</b>: cut every edge heavier than the <i>threshold</i> "
            "and label the pieces 1..n in scan order (needs a threshold).\n"
            "<b>Total weight</b> (sum of edge weights, in float64) and the "
            "number of <b>trees</b>.\n\n"
            "Advanced: backend (auto picks an NVIDIA GPU when numba CUDA can "
            "use one). A tile size (a power of two >= 8), or a raster file "
            "larger than the memory limit (0 = half the available RAM), runs "
            "the tiled (out-of-core) engine: the raster is read and the "
            "parent directions written tile by tile (GeoTIFF outputs only), "
            "with the same forest; lines are streamed from the edge list on "
            "disk and segments labelled in strips of rows (the tile size, or "
            "as many as a quarter of the memory limit holds), with the same "
            "results. The Dask scheduler must stay empty in this version.")

    def outputStyle(self, name):  # noqa: N802
        return GraduatedLineStyle("weight") if name == self.OUTPUT_LINES else None

    def initAlgorithm(self, config=None):  # noqa: N802 - QGIS API
        self.addInputParameters("Input raster")
        self.addParameter(QgsProcessingParameterEnum(
            self.WEIGHT, self.tr("Edge weight"),
            options=[self.tr("max of the two cells"),
                     self.tr("min of the two cells"),
                     self.tr("mean of the two cells"),
                     self.tr("absolute difference")],
            defaultValue=0))
        self.addParameter(QgsProcessingParameterEnum(
            self.CONNECTIVITY, self.tr("Connectivity"),
            options=[self.tr("four (rook)"), self.tr("eight (queen)")],
            defaultValue=0))
        self.addParameter(QgsProcessingParameterNumber(
            self.THRESHOLD, self.tr("Segmentation threshold (edge weight)"),
            QgsProcessingParameterNumber.Double, optional=True))
        self.addParameter(QgsProcessingParameterNumber(
            self.MAX_LINES, self.tr("Maximum number of lines"),
            QgsProcessingParameterNumber.Integer, defaultValue=1000000,
            minValue=0))
        self.addScaleParameters()
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_DIRECTION, self.tr("Parent direction"), optional=True,
            createByDefault=True))
        self.addParameter(QgsProcessingParameterFeatureSink(
            self.OUTPUT_LINES, self.tr("Tree edges"),
            QgsProcessing.TypeVectorLine, optional=True,
            createByDefault=False))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_SEGMENTS, self.tr("Segments"), optional=True,
            createByDefault=False))
        self.addOutput(QgsProcessingOutputNumber(
            self.TOTAL_WEIGHT, self.tr("Total weight")))
        self.addOutput(QgsProcessingOutputNumber(
            self.TREES, self.tr("Number of trees")))

    def checkParameterValues(self, parameters, context):  # noqa: N802
        ok, message = super().checkParameterValues(parameters, context)
        if not ok:
            return ok, message
        if (self.isRequested(parameters, self.OUTPUT_SEGMENTS)
                and parameters.get(self.THRESHOLD) in (None, "")):
            return False, self.tr(
                "Segments (OUTPUT_SEGMENTS) need a threshold: set THRESHOLD "
                "to the heaviest edge weight a segment may contain")
        return True, ""

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        layer, raster = self.openInputBand(parameters, context, tiled.plan,
                                           feedback)
        weight = self.WEIGHTS[self.parameterAsEnum(parameters, self.WEIGHT,
                                                   context)]
        connectivity = self.CONNECTIVITIES[
            self.parameterAsEnum(parameters, self.CONNECTIVITY, context)]
        max_lines = self.parameterAsInt(parameters, self.MAX_LINES, context)
        direction_path = self.rasterDestination(
            parameters, self.OUTPUT_DIRECTION, context)
        segments_path = self.rasterDestination(
            parameters, self.OUTPUT_SEGMENTS, context)
        threshold = None
        if segments_path is not None:
            threshold = self.parameterAsDouble(parameters, self.THRESHOLD,
                                               context)
        want_lines = self.sinkRequested(parameters, self.OUTPUT_LINES, context)
        self.checkTiledOutputs(raster, {self.OUTPUT_DIRECTION: direction_path,
                                        self.OUTPUT_SEGMENTS: segments_path})
        scale = self.scaleOptions(parameters, context)

        with self.tiledOutputFolder(raster) as out_dir:
            result = self.runTimed(
                feedback, minimum_spanning_tree, raster.values,
                connectivity=connectivity, weight=weight, nodata=raster.nodata,
                progress=progress_callback(feedback, 0.0, 0.8),
                edges=want_lines or (segments_path is not None
                                     and raster.tiled),
                **raster.engineKeywords(out_dir), **scale)
            if result.trees == 0 and raster.tiled:  # no valid cell at all
                raise self.noValidCellError(layer, raster.band, raster.nodata)
            if result.edges is not None:
                feedback.pushInfo(self.tr(
                    "{edges} edge(s) in {trees} tree(s), total weight {total}"
                ).format(edges=len(result.edges), trees=result.trees,
                         total=result.total_weight))
            else:
                feedback.pushInfo(self.tr(
                    "{trees} tree(s), total weight {total}").format(
                        trees=result.trees, total=result.total_weight))
            if want_lines and len(result.edges) > max_lines:
                raise QgsProcessingException(self.tr(
                    "The tree has {edges} edges, so the lines output would "
                    "have {edges} lines, more than the maximum number of "
                    "lines (MAX_LINES = {limit}); raise MAX_LINES or use the "
                    "parent direction raster (OUTPUT_DIRECTION) instead. "
                    "Nothing was written").format(edges=len(result.edges),
                                                  limit=max_lines))

            segments = None
            if segments_path is not None and raster.tiled:
                segments, count = self.runEngine(
                    segment_by_threshold_streamed, result, threshold,
                    out_dir=out_dir, strip_rows=scale["tile_size"],
                    memory_limit_mb=scale["memory_limit_mb"],
                    progress=progress_callback(feedback, 0.8, 0.9))
            elif segments_path is not None:  # from the raster: no edge list
                segments, count = self.runEngine(
                    segments_by_threshold, raster.values, threshold,
                    connectivity=connectivity, weight=weight,
                    nodata=raster.nodata)
            if segments is not None:
                feedback.pushInfo(self.tr(
                    "{n} segment(s) at threshold {t}").format(
                        n=count, t=threshold))
            lines = []
            if want_lines and not raster.tiled:
                lines = self.edgeLines(result, raster, feedback)
            self.checkCanceled(feedback)

            # publishing: nothing below is cancelled (nor is it in memory)
            outputs = {self.TOTAL_WEIGHT: result.total_weight,
                       self.TREES: result.trees}
            if want_lines:
                sink, sink_id = self.createSink(
                    parameters, self.OUTPUT_LINES, context, self.lineFields(),
                    QgsWkbTypes.LineString, layer.crs())
            projection = self.outputProjection(layer, raster)
            if direction_path is not None:
                self.writeRaster(direction_path, result.parent_direction,
                                 raster, projection, float("nan"))
                self.setStyle(context, direction_path, DirectionStyle())
                outputs[self.OUTPUT_DIRECTION] = direction_path
            if segments_path is not None:
                self.writeRaster(segments_path, segments, raster, projection,
                                 0)
                self.setStyle(context, segments_path, LabelStyle(count))
                outputs[self.OUTPUT_SEGMENTS] = segments_path
            if want_lines and raster.tiled:
                # streamed from the edge memmap, a chunk at a time
                for chunk in self.edgeLineChunks(result, raster):
                    sink.addFeatures(chunk, QgsFeatureSink.FastInsert)
        if want_lines:
            sink.addFeatures(lines, QgsFeatureSink.FastInsert)
            outputs[self.OUTPUT_LINES] = sink_id
        feedback.setProgress(100)
        return outputs

    @staticmethod
    def lineFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("weight", QVariant.Double))
        fields.append(QgsField("from", QVariant.LongLong))
        fields.append(QgsField("to", QVariant.LongLong))
        return fields

    def edgeLineChunks(self, result, raster, chunk_size=LINE_CHUNK):  # noqa: N802
        """Lists of two-point line features, one per tree edge between the
        cells' centres, ``chunk_size`` edges at a time in the edge order
        (never more of the edge list in memory than a chunk)."""
        fields = self.lineFields()
        total = len(result.edges)
        for start in range(0, total, chunk_size):
            edges = np.asarray(result.edges[start:start + chunk_size])
            weights = np.asarray(result.weights[start:start + chunk_size])
            rows, cols = np.unravel_index(edges, result.shape)
            xs, ys = raster_io.cell_centre(raster.geotransform, rows, cols)
            chunk = []
            for index in range(len(edges)):
                feature = QgsFeature(fields)
                feature.setGeometry(QgsGeometry(QgsLineString(
                    xs[index].tolist(), ys[index].tolist())))
                feature.setAttributes([float(weights[index]),
                                       int(edges[index, 0]),
                                       int(edges[index, 1])])
                chunk.append(feature)
            yield chunk

    def edgeLines(self, result, raster, feedback):  # noqa: N802
        """All the line features (the in-memory path: made before any
        output is written, so a cancel leaves nothing)."""
        lines = []
        total = max(len(result.edges), 1)
        for chunk in self.edgeLineChunks(result, raster):
            lines.extend(chunk)
            self.checkCanceled(feedback)
            feedback.setProgress(80 + 10 * len(lines) / total)
        return lines
