"""gridgraph:minimumspanningtree: minimum spanning forest of a raster's cells."""

import numpy as np
from qgis.core import (QgsFeature, QgsField, QgsFields,
                       QgsGeometry, QgsProcessing,
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
from .base import GridGraphAlgorithm
from .progress import Phases
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
            "<p>Connects all the cells of a raster into the cheapest "
            "possible network of steps between neighbours, where a step "
            "costs what the two cells' values say (the minimum spanning "
            "tree). Cutting its expensive steps splits the raster into "
            "<i>segments</i>: regions whose cells are joined by a chain of "
            "cheap steps. It answers <i>which areas hang together at a given "
            "elevation or similarity?</i> (a watershed-like hierarchy: "
            "raising the threshold merges segments).</p>"
            "<p><b>Example</b>: segment a DEM into areas without steep "
            "breaks: <i>Edge weight</i> = absolute difference, "
            "<i>Segmentation threshold</i> = 5 (m): every segment is "
            "reachable cell to cell without a height step of more than "
            "5 m.</p>"
            "<p><b>Input raster</b> and <b>Band number</b>: every cell with "
            "a value is part of the network; nodata and NaN cells are left "
            "out, and areas they cut apart get separate trees (a forest). "
            "The band's scale and offset are applied first, so packed "
            "rasters are used with their real values.</p>"
            "<p><b>Edge weight</b> (the cost of the step between cells with "
            "values a and b) and how to choose the threshold for it:<br>"
            "<i>max of the two cells</i>, max(a, b): segments are the areas "
            "connected through cells no higher than the threshold, like a "
            "landscape flooded to that level; pick the level in the input's "
            "units (e.g. 500 for basins below 500 m).<br>"
            "<i>min of the two cells</i>, min(a, b): the same from above "
            "(ridges and peaks joined at or above their level); pick a "
            "level.<br>"
            "<i>mean of the two cells</i>, (a + b) / 2: like max, smoother "
            "at the edges; pick a level.<br>"
            "<i>absolute difference</i>, |a &minus; b|: segments contain no "
            "step larger than the threshold between neighbours; pick the "
            "largest jump you accept inside one region (small: many "
            "segments; large: few). Run once with <i>Tree edges</i> and look "
            "at the histogram of their <i>weight</i> field to choose.</p>"
            "<p><b>Connectivity</b>: four (side neighbours) or eight (also "
            "diagonal neighbours).</p>"
            "<p><b>Segmentation threshold</b>: needed for <i>Segments</i>; "
            "steps heavier than it are cut.</p>"
            "<p><b>Maximum number of lines</b>: <i>Tree edges</i> has one "
            "line per pair of joined cells (about one per cell); above this "
            "number the run stops before writing anything: raise it, or use "
            "the direction raster.</p>"
            "<p>Outputs:<br>"
            "<b>Parent direction</b>: for each cell, the direction of the "
            "next step towards its tree's root (the tree's first cell from "
            "the top-left), in degrees counter-clockwise from east (90 "
            "north, 180 west, 270 south, 360 east); 0 at roots.<br>"
            "<b>Tree edges</b> (optional): the steps of the tree as lines "
            "between cell centres with their <i>weight</i> and the numbers "
            "of their two cells (<i>from</i>, <i>to</i>: counted row by row "
            "from 0 at the top-left).<br>"
            "<b>Segments</b> (optional): the segment number of each cell "
            "(1, 2, 3 ... from the top-left; 0 = nodata).<br>"
            "<b>Total weight</b> and <b>Number of trees</b> are reported in "
            "the log and as outputs for models.</p>"
            "<p>Steps of equal weight are taken in a fixed order, so the "
            "tree is the same on every computer and with every setting "
            "below.</p>") + self.advancedHelp()

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

    RASTER_OUTPUT_TYPES = {OUTPUT_DIRECTION: "float32",
                           OUTPUT_SEGMENTS: "int32"}
    # parent direction, edges (2 x 8) and weights (8) .npy, segments, scratch
    SCRATCH_BYTES_PER_CELL = 48

    def runAlgorithm(self, parameters, context, feedback, outputs):  # noqa: N802
        phases = Phases(feedback)
        phases.begin(self.tr("Reading the raster"), 0.05)
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
                progress=phases.begin(self.tr("Building the minimum spanning "
                                              "tree"), 0.55),
                edges=want_lines or (segments_path is not None
                                     and raster.tiled),
                **raster.engineKeywords(out_dir), **scale)
            if result.trees == 0 and raster.tiled:  # no valid cell at all
                raise self.noValidCellError(layer, raster.band, raster.nodata)
            if result.edges is not None:
                feedback.pushInfo(self.tr(
                    "The tree has {edges} edge(s) in {trees} tree(s) (one "
                    "per piece of raster cut off by nodata); total weight "
                    "{total:.10g}").format(edges=len(result.edges),
                                           trees=result.trees,
                                           total=result.total_weight))
            else:
                feedback.pushInfo(self.tr(
                    "{trees} tree(s) (one per piece of raster cut off by "
                    "nodata); total weight {total:.10g}").format(
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
            if segments_path is not None:
                segment_progress = phases.begin(
                    self.tr("Cutting the tree into segments"), 0.1)
            if segments_path is not None and raster.tiled:
                segments, count = self.runEngine(
                    segment_by_threshold_streamed, result, threshold,
                    out_dir=out_dir, strip_rows=scale["tile_size"],
                    memory_limit_mb=scale["memory_limit_mb"],
                    progress=segment_progress)
            elif segments_path is not None:  # from the raster: no edge list
                segments, count = self.runEngine(
                    segments_by_threshold, raster.values, threshold,
                    connectivity=connectivity, weight=weight,
                    nodata=raster.nodata, progress=segment_progress)
            if segments is not None:
                feedback.pushInfo(self.tr(
                    "{n} segment(s) with no step heavier than {t:g}").format(
                        n=count, t=threshold))
            lines = []
            if want_lines and not raster.tiled:
                lines = self.edgeLines(
                    result, raster,
                    phases.begin(self.tr("Making the tree edge lines"), 0.1),
                    feedback)
            self.checkCanceled(feedback)

            # publishing: everything under temporary names, moved into
            # place together by the caller's commit
            results = {self.TOTAL_WEIGHT: result.total_weight,
                       self.TREES: result.trees}
            if want_lines:
                sink, sink_id = outputs.sink(
                    self.OUTPUT_LINES, self.lineFields(),
                    QgsWkbTypes.LineString, layer.crs())
            projection = self.outputProjection(layer, raster)
            share = phases.remaining(sum(
                (direction_path is not None, segments_path is not None,
                 want_lines)))
            if direction_path is not None:
                phases.begin(self.tr("Writing the parent direction"), share)
                self.writeRaster(outputs, direction_path,
                                 result.parent_direction, raster, projection,
                                 float("nan"))
                self.setStyle(context, direction_path, DirectionStyle())
                results[self.OUTPUT_DIRECTION] = direction_path
            if segments_path is not None:
                phases.begin(self.tr("Writing the segments"), share)
                self.writeRaster(outputs, segments_path, segments, raster,
                                 projection, 0)
                self.setStyle(context, segments_path, LabelStyle(count))
                results[self.OUTPUT_SEGMENTS] = segments_path
            if want_lines:
                write_lines = phases.begin(self.tr("Writing the tree edges"),
                                           share)
            if want_lines and raster.tiled:
                # streamed from the edge memmap, a chunk at a time
                total = max(len(result.edges), 1)
                for done, chunk in enumerate(
                        self.edgeLineChunks(result, raster)):
                    sink.add(chunk)
                    write_lines(min(1.0, (done + 1) * LINE_CHUNK / total))
            elif want_lines:
                sink.add(lines)
            if want_lines:
                results[self.OUTPUT_LINES] = sink_id
        return results

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
        # copies of one feature share its fields; the geometries come from
        # WKB made for the whole chunk at once (half the time of a
        # QgsLineString per edge: the first run's 65 535 lines at 256²)
        template = QgsFeature(self.lineFields())
        total = len(result.edges)
        for start in range(0, total, chunk_size):
            edges = np.asarray(result.edges[start:start + chunk_size])
            weights = np.asarray(result.weights[start:start + chunk_size])
            rows, cols = np.unravel_index(edges, result.shape)
            xs, ys = raster_io.cell_centre(raster.geotransform, rows, cols)
            wkb, size = raster_io.segment_wkb(xs, ys)
            attributes = zip(weights.astype(np.float64).tolist(),
                             edges[:, 0].tolist(), edges[:, 1].tolist())
            chunk = []
            for index, values in enumerate(attributes):
                feature = QgsFeature(template)
                geometry = QgsGeometry()
                geometry.fromWkb(wkb[index * size:(index + 1) * size])
                feature.setGeometry(geometry)
                feature.setAttributes(list(values))
                chunk.append(feature)
            yield chunk

    def edgeLines(self, result, raster, progress, feedback):  # noqa: N802
        """All the line features (the in-memory path: made before any
        output is written, so a cancel leaves nothing)."""
        lines = []
        total = max(len(result.edges), 1)
        for chunk in self.edgeLineChunks(result, raster):
            lines.extend(chunk)
            progress(len(lines) / total)
            self.checkCanceled(feedback)
        return lines
