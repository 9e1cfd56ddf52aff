"""gridgraph:costdistance: accumulated cost from sources over a cost raster."""

import math

import numpy as np
from qgis.core import (QgsCoordinateTransform, QgsCsException, QgsFeature,
                       QgsField, QgsFields, QgsGeometry,
                       QgsLineString, QgsPoint, QgsProcessing,
                       QgsProcessingException,
                       QgsProcessingParameterBoolean,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterFeatureSource,
                       QgsProcessingParameterNumber,
                       QgsProcessingParameterRasterDestination,
                       QgsProcessingParameterRasterLayer, QgsWkbTypes)
from qgis.PyQt.QtCore import QVariant

from ..core import cost_distance, least_cost_path
from ..core import io as raster_io
from ..core._common import valid_mask
from ..core.costdistance import tiled
from .base import GridGraphAlgorithm
from .progress import Phases
from .styles import (DirectionStyle, GraduatedLineStyle, LabelStyle,
                     RampStyle)

# Feature ids listed in an error message before "and N more".
MAX_LISTED = 10


def _list_ids(ids):
    text = ", ".join(str(i) for i in ids[:MAX_LISTED])
    if len(ids) > MAX_LISTED:
        text += f" and {len(ids) - MAX_LISTED} more"
    return text


class CostDistance(GridGraphAlgorithm):
    """Least accumulated cost from source cells to every cell."""

    SOURCES = "SOURCES"
    SOURCE_RASTER = "SOURCE_RASTER"
    DESTINATIONS = "DESTINATIONS"
    CONNECTIVITY = "CONNECTIVITY"
    MAX_COST = "MAX_COST"
    MAP_UNITS = "MAP_UNITS"
    OUTPUT = "OUTPUT"
    OUTPUT_DIRECTION = "OUTPUT_DIRECTION"
    OUTPUT_ALLOCATION = "OUTPUT_ALLOCATION"
    OUTPUT_PATHS = "OUTPUT_PATHS"

    CONNECTIVITIES = (4, 8, 16)
    RASTER_OUTPUTS = (OUTPUT, OUTPUT_DIRECTION, OUTPUT_ALLOCATION)

    ALGORITHM_NAME = "costdistance"
    DISPLAY_NAME = "Cost distance"
    GROUP = "Distance"
    GROUP_ID = "distance"
    ICON = "costdistance.svg"
    TAGS = ("cost distance,accumulated cost,friction,least cost path,"
            "shortest path,dijkstra,allocation,r.cost,direction,"
            "cost surface,raster,graph")

    def shortHelpString(self):  # noqa: N802 - QGIS API
        return self.tr(
            "<p>Works out, for every cell, the least total cost of "
            "travelling there from the nearest source over a cost (friction) "
            "surface, which way to go, and which source is nearest. It "
            "answers <i>how far is each place from the nearest road, "
            "counting effort rather than metres?</i> and, with destinations, "
            "<i>which route is cheapest?</i></p>"
            "<p><b>Example</b>: distance to the nearest road over a "
            "slope-based friction: make a friction raster from the slope "
            "(e.g. 1 + slope / 10 with the Raster calculator), give the "
            "roads rasterized on the same grid as <i>Source raster</i> (or "
            "points along them as <i>Source points</i>), and turn on "
            "<i>Measure steps in map units</i> to get the result in "
            "friction &times; metres.</p>"
            "<p><b>Cost raster</b> and <b>Band number</b>: the cost of "
            "crossing each cell (0 or more). Moving from a cell to its "
            "neighbour costs the mean of the two cells' costs times the "
            "length of the step (1 cell sideways, 1.41 diagonally). Nodata, "
            "NaN and +inf cells are barriers that no route crosses; a "
            "negative cost is refused. The band's scale and offset are "
            "applied first, so packed rasters are used with their real "
            "values.</p>"
            "<p><b>Source points</b> or <b>Source raster</b>: where travel "
            "starts (cost 0). One of the two is required, not both. Points "
            "are reprojected to the cost raster's CRS and each keeps its "
            "feature id; a source raster must be on the cost raster's grid, "
            "and its non-zero, non-nodata cells are sources, each identified "
            "by its value (a label raster from Connected components works "
            "directly). A source outside the raster or on a barrier is "
            "refused.</p>"
            "<p><b>Destination points</b> (optional): with <i>Least-cost "
            "paths</i>, one route is traced from each destination back to "
            "its nearest source.</p>"
            "<p><b>Connectivity</b>: moves to the 4 side neighbours, the 8 "
            "neighbours including diagonals (the default), or 16, which adds "
            "knight's moves (two cells over, one across) for smoother, "
            "shorter routes; a knight's move never jumps over a barrier.</p>"
            "<p><b>Maximum cost</b>: cells that would cost more are left "
            "unreached (0 = no limit); use it to map, e.g., everything "
            "within one hour of walking.</p>"
            "<p><b>Measure steps in map units</b>: step lengths in map units "
            "(from the cell size) instead of cells.</p>"
            "<p>Outputs (ask for at least one):<br>"
            "<b>Accumulated cost</b>: the least total cost to reach each "
            "cell; nodata where no source is reached (behind barriers or "
            "beyond the maximum cost).<br>"
            "<b>Direction</b>: the direction of the next step back towards "
            "the source, in degrees counter-clockwise from east (90 north, "
            "180 west, 270 south, 360 east; as GRASS r.cost); 0 on "
            "sources.<br>"
            "<b>Allocation</b>: the id of the nearest source (its feature id "
            "or source raster value); 0 where unreached.<br>"
            "<b>Least-cost paths</b>: a line per destination with its "
            "<i>destination</i> id, total <i>cost</i> and <i>source</i> id. "
            "Destinations outside the raster or unreached are skipped with "
            "a warning.</p>"
            "<p>Where two routes cost exactly the same, the one with fewer "
            "steps is kept, so results never depend on the computer or the "
            "settings below.</p>") + self.advancedHelp()

    def outputStyle(self, name):  # noqa: N802
        if name == self.OUTPUT_PATHS:
            return GraduatedLineStyle("cost", casing=True)
        return None

    def initAlgorithm(self, config=None):  # noqa: N802 - QGIS API
        self.addInputParameters("Cost raster")
        self.addParameter(QgsProcessingParameterFeatureSource(
            self.SOURCES,
            self.tr("Source points (or a source raster: one of the two is "
                    "required)"),
            [QgsProcessing.TypeVectorPoint], optional=True))
        self.addParameter(QgsProcessingParameterRasterLayer(
            self.SOURCE_RASTER,
            self.tr("Source raster, non-zero cells (or source points: one of "
                    "the two is required)"),
            optional=True))
        self.addParameter(QgsProcessingParameterFeatureSource(
            self.DESTINATIONS, self.tr("Destination points (for paths)"),
            [QgsProcessing.TypeVectorPoint], optional=True))
        self.addParameter(QgsProcessingParameterEnum(
            self.CONNECTIVITY, self.tr("Connectivity"),
            options=[self.tr("four (rook)"), self.tr("eight (queen)"),
                     self.tr("sixteen (queen and knight's moves)")],
            defaultValue=1))
        self.addParameter(QgsProcessingParameterNumber(
            self.MAX_COST, self.tr("Maximum cost (0 = no limit)"),
            QgsProcessingParameterNumber.Double, defaultValue=0.0,
            minValue=0.0))
        self.addParameter(QgsProcessingParameterBoolean(
            self.MAP_UNITS,
            self.tr("Measure steps in map units (cell size) instead of cells"),
            defaultValue=False))
        self.addScaleParameters()
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT, self.tr("Accumulated cost"), optional=True,
            createByDefault=True))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_DIRECTION, self.tr("Direction"),
            optional=True, createByDefault=False))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_ALLOCATION, self.tr("Allocation"),
            optional=True, createByDefault=False))
        self.addParameter(QgsProcessingParameterFeatureSink(
            self.OUTPUT_PATHS, self.tr("Least-cost paths"),
            QgsProcessing.TypeVectorLine, optional=True,
            createByDefault=False))

    def checkParameterValues(self, parameters, context):  # noqa: N802
        ok, message = super().checkParameterValues(parameters, context)
        if not ok:
            return ok, message
        has_points = parameters.get(self.SOURCES) not in (None, "")
        has_raster = parameters.get(self.SOURCE_RASTER) not in (None, "")
        if not has_points and not has_raster:
            return False, self.tr(
                "No sources: give source points (SOURCES) or a source raster "
                "(SOURCE_RASTER)")
        if has_points and has_raster:
            return False, self.tr(
                "Give either source points (SOURCES) or a source raster "
                "(SOURCE_RASTER), not both; merge them into one first")
        wants_paths = self.isRequested(parameters, self.OUTPUT_PATHS)
        if wants_paths and parameters.get(self.DESTINATIONS) in (None, ""):
            return False, self.tr(
                "Least-cost paths (OUTPUT_PATHS) need destination points "
                "(DESTINATIONS)")
        if not wants_paths and not any(
                self.isRequested(parameters, name)
                for name in self.RASTER_OUTPUTS):
            return False, self.tr(
                "No output requested: choose at least one of OUTPUT, "
                "OUTPUT_DIRECTION, OUTPUT_ALLOCATION, OUTPUT_PATHS")
        return True, ""

    RASTER_OUTPUT_TYPES = {OUTPUT: "float64", OUTPUT_DIRECTION: "float32",
                           OUTPUT_ALLOCATION: "int32"}
    # accumulated (8), direction (4), allocation (8) .npy and scratch
    SCRATCH_BYTES_PER_CELL = 28

    def runAlgorithm(self, parameters, context, feedback, outputs):  # noqa: N802
        phases = Phases(feedback)
        phases.begin(self.tr("Reading the cost raster and the sources"), 0.05)
        layer, raster = self.openInputBand(parameters, context, tiled.plan,
                                           feedback)
        connectivity = self.CONNECTIVITIES[
            self.parameterAsEnum(parameters, self.CONNECTIVITY, context)]
        max_cost = self.parameterAsDouble(parameters, self.MAX_COST, context)
        map_units = self.parameterAsBoolean(parameters, self.MAP_UNITS, context)
        destinations = {name: self.rasterDestination(parameters, name, context)
                        for name in self.RASTER_OUTPUTS}
        want_paths = self.sinkRequested(parameters, self.OUTPUT_PATHS, context)
        self.checkTiledOutputs(raster, destinations)

        source_keywords = self.sources(parameters, context, layer, raster,
                                       feedback)
        cell_size = None
        if map_units:
            cell_size = self.cellSize(layer, raster)
        # the paths follow the directions; otherwise the engine computes
        # (and on the tiled path writes) only the requested rasters
        engine_names = {self.OUTPUT: "accumulated",
                        self.OUTPUT_DIRECTION: "direction",
                        self.OUTPUT_ALLOCATION: "allocation"}
        wanted = [engine_names[name] for name, path in destinations.items()
                  if path is not None]
        with self.tiledOutputFolder(raster) as out_dir:
            result = self.runTimed(
                feedback, cost_distance, raster.values,
                outputs=None if want_paths or not wanted else wanted,
                connectivity=connectivity, max_cost=max_cost or None,
                nodata=raster.nodata, cell_size=cell_size,
                progress=phases.begin(self.tr("Computing the accumulated cost"),
                                      0.6 if want_paths else 0.7),
                **source_keywords, **raster.engineKeywords(out_dir),
                **self.scaleOptions(parameters, context))

            self.logReach(result, raster, feedback)
            paths = []
            if want_paths:
                paths = self.paths(
                    parameters, context, layer, raster, result,
                    phases.begin(self.tr("Tracing the least-cost paths"), 0.1),
                    feedback)
            self.checkCanceled(feedback)

            results = {}
            if want_paths:
                sink, sink_id = outputs.sink(
                    self.OUTPUT_PATHS, self.pathFields(),
                    QgsWkbTypes.LineString, layer.crs())
            projection = self.outputProjection(layer, raster)
            arrays = {self.OUTPUT: (result.accumulated, float("nan"),
                                    RampStyle()),
                      self.OUTPUT_DIRECTION: (result.direction, float("nan"),
                                              DirectionStyle()),
                      self.OUTPUT_ALLOCATION: (result.allocation, 0,
                                               LabelStyle())}
            written = [name for name, path in destinations.items()
                       if path is not None] + ([self.OUTPUT_PATHS]
                                               if want_paths else [])
            share = phases.remaining(len(written))
            for name, path in destinations.items():
                if path is None:
                    continue
                array, nodata, style = arrays[name]
                phases.begin(self.tr("Writing {output}").format(
                    output=self.parameterDefinition(name).description()),
                    share)
                self.writeRaster(outputs, path, array, raster, projection,
                                 nodata)
                if style is not None:
                    self.setStyle(context, path, style)
                results[name] = path
            if want_paths:
                phases.begin(self.tr("Writing the least-cost paths"), share)
                sink.add(paths)
                results[self.OUTPUT_PATHS] = sink_id
        return results

    def cellSize(self, layer, raster):  # noqa: N802
        """(xres, yres) in map units from the geotransform: the lengths of
        a column step and a row step, so a rotated grid gets its true cell
        sizes; a sheared grid (steps not at right angles) is refused, its
        diagonal and knight's steps having no length from two sizes."""
        _, a, b, _, d, e = raster.geotransform
        xres, yres = math.hypot(a, d), math.hypot(b, e)
        if abs(a * b + d * e) > 1e-9 * xres * yres:
            raise QgsProcessingException(self.tr(
                "{layer} has a sheared grid (geotransform {gt}: its rows and "
                "columns are not at right angles), so steps have no length "
                "in map units; warp it to a north-up grid first (e.g. "
                "gdal:warpreproject), or measure steps in cells (turn off "
                "{map_units})").format(
                    layer=layer.name(), gt=tuple(raster.geotransform),
                    map_units=self.parameterLabel(self.MAP_UNITS)))
        return xres, yres

    def logReach(self, result, raster, feedback):  # noqa: N802
        """The result in plain words: cells reached, highest cost (in
        memory only: on the tiled path that would read the rasters again)."""
        if raster.tiled:
            return
        if result.accumulated is not None:
            # unreached cells are NaN; no copy of the reached ones
            count = int(np.count_nonzero(np.isfinite(result.accumulated)))
            highest = (float(np.nanmax(result.accumulated)) if count
                       else None)
            if highest is not None and not np.isfinite(highest):
                accumulated = result.accumulated
                highest = float(accumulated[np.isfinite(accumulated)].max())
        elif result.allocation is not None:
            count, highest = int((result.allocation != 0).sum()), None
        else:
            return
        text = self.tr("Reached {count} of {total} cells").format(
            count=count, total=raster.shape[0] * raster.shape[1])
        if highest is not None:
            text += self.tr("; the highest accumulated cost is {cost:.6g}"
                            ).format(cost=highest)
        feedback.pushInfo(text)

    # -------------------------------------------------------------- sources

    def sources(self, parameters, context, layer, raster, feedback):
        """Engine keywords for the sources: cells and ids, or a raster."""
        if parameters.get(self.SOURCE_RASTER) not in (None, ""):
            return self.rasterSources(parameters, context, layer, raster)
        source = self.parameterAsSource(parameters, self.SOURCES, context)
        if source is None:
            raise QgsProcessingException(
                self.invalidSourceError(parameters, self.SOURCES))
        points = self.pointCells(source, context, layer, raster)
        if not points:
            raise QgsProcessingException(self.tr(
                "The source layer has no point: add source points or use a "
                "source raster"))
        outside = sorted({fid for fid, cell in points if cell is None})
        if outside:
            raise QgsProcessingException(self.tr(
                "{n} source feature(s) lie outside the cost raster (feature "
                "id(s) {ids}): remove them or use a raster that covers them. "
                "{crs}").format(n=len(outside), ids=_list_ids(outside),
                                crs=self.crsNote(source.sourceCrs(), layer)))
        cells = np.array([cell for _, cell in points], dtype=np.int64)
        ids = np.array([fid for fid, _ in points], dtype=np.int64)
        on_cell = valid_mask(raster.cellValues(cells)[None, :],
                             raster.nodata)[0]
        blocked = sorted({int(fid) for fid, ok in zip(ids, on_cell) if not ok})
        if blocked:
            every = len(blocked) == len(set(ids.tolist()))
            raise QgsProcessingException(self.tr(
                "{which} source feature(s) lie on barrier cells (nodata or NaN "
                "cost) of the cost raster (feature id(s) {ids}): move them "
                "onto cells with a valid cost or remove them").format(
                    which=("All" if every else str(len(blocked))),
                    ids=_list_ids(blocked)))
        if (ids == 0).any():
            feedback.pushWarning(self.tr(
                "A source has feature id 0, which the allocation raster also "
                "uses for unreached cells; save the points in a format whose "
                "ids start at 1 (e.g. GeoPackage) to tell them apart"))
        return {"sources": cells, "source_ids": ids}

    def rasterSources(self, parameters, context, layer, raster):  # noqa: N802
        if raster.tiled:  # the engine reads the source raster tile by tile
            source_layer, sources = self.bandOnDisk(
                parameters, context, layer_name=self.SOURCE_RASTER, band=1)
        else:
            source_layer, band = self.readInputBand(
                parameters, context, layer_name=self.SOURCE_RASTER, band=1)
            sources = self.inMemory(source_layer, band, 1)
        same_crs = (source_layer.crs() == layer.crs()
                    or not (source_layer.crs().isValid()
                            and layer.crs().isValid()))
        size = max(abs(v) for v in raster.geotransform[1:3]
                   + raster.geotransform[4:6])
        same_grid = (tuple(sources.shape) == tuple(raster.shape) and all(
            abs(a - b) <= 1e-6 * size
            for a, b in zip(sources.geotransform, raster.geotransform)))
        if not (same_crs and same_grid):
            rows, cols = raster.shape
            raise QgsProcessingException(self.tr(
                "The source raster {source} is not on the cost raster's grid "
                "({cols} x {rows} cells, geotransform {gt}, CRS {crs}); it has "
                "{scols} x {srows} cells, geotransform {sgt}, CRS {scrs}. "
                "Align it to the cost raster first, e.g. with "
                "gdal:warpreproject (same CRS, extent and resolution)").format(
                    source=source_layer.name(), cols=cols, rows=rows,
                    gt=tuple(raster.geotransform), crs=layer.crs().authid(),
                    scols=sources.shape[1], srows=sources.shape[0],
                    sgt=tuple(sources.geotransform),
                    scrs=source_layer.crs().authid()))
        return {"sources": sources.values, "source_nodata": sources.nodata}

    def crsNote(self, points_crs, layer):  # noqa: N802
        """Both CRSs, and the usual cause when points fall outside."""
        def name(crs):
            if not crs.isValid():
                return self.tr("none (unknown)")
            return "{id} ({description})".format(
                id=crs.authid() or self.tr("custom"),
                description=crs.description())
        note = self.tr(
            "The point layer's CRS is {points}; the cost raster's CRS is "
            "{raster}.").format(points=name(points_crs),
                                raster=name(layer.crs()))
        if not points_crs.isValid() or not layer.crs().isValid():
            note += self.tr(
                " A layer without a CRS is not reprojected: set its CRS "
                "(Layer Properties > Source) so the points are moved into "
                "the raster's.")
        elif points_crs != layer.crs():
            note += self.tr(
                " The points are reprojected; if their coordinates are in "
                "another CRS than the layer declares (e.g. a GeoJSON, always "
                "read as EPSG:4326, holding projected coordinates), assign "
                "the right CRS to the layer.")
        return note

    def pointCells(self, source, context, layer, raster):  # noqa: N802
        """[(feature id, (row, col) or None when outside)] of every point."""
        transform = None
        if (source.sourceCrs().isValid() and layer.crs().isValid()
                and source.sourceCrs() != layer.crs()):
            transform = QgsCoordinateTransform(
                source.sourceCrs(), layer.crs(), context.transformContext())
        rows, cols = raster.shape
        points = []
        for feature in source.getFeatures():
            geometry = feature.geometry()
            if geometry.isEmpty():
                continue
            if transform is not None:
                try:
                    geometry.transform(transform)
                except QgsCsException:
                    points.append((feature.id(), None))
                    continue
            for vertex in geometry.vertices():
                row, col = raster_io.world_to_cell(raster.geotransform,
                                                   vertex.x(), vertex.y())
                inside = 0 <= row < rows and 0 <= col < cols
                points.append((feature.id(), (row, col) if inside else None))
        return points

    # ---------------------------------------------------------------- paths

    @staticmethod
    def pathFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("destination", QVariant.LongLong))
        fields.append(QgsField("cost", QVariant.Double))
        fields.append(QgsField("source", QVariant.LongLong))
        return fields

    def paths(self, parameters, context, layer, raster, result, progress,
              feedback):
        """Least-cost path features from each destination point."""
        source = self.parameterAsSource(parameters, self.DESTINATIONS, context)
        if source is None:
            raise QgsProcessingException(
                self.invalidSourceError(parameters, self.DESTINATIONS))
        fields = self.pathFields()
        features, outside, unreached = [], [], []
        points = self.pointCells(source, context, layer, raster)
        for done, (fid, cell) in enumerate(points):
            if cell is None:
                outside.append(fid)
                continue
            cells = least_cost_path(result, *cell)
            if cells is None:
                unreached.append(fid)
                continue
            vertices = [QgsPoint(*raster_io.cell_centre(raster.geotransform,
                                                        row, col))
                        for row, col in cells]
            if len(vertices) == 1:  # the destination is a source cell
                vertices.append(vertices[0].clone())
            feature = QgsFeature(fields)
            feature.setGeometry(QgsGeometry(QgsLineString(vertices)))
            row, col = cell
            feature.setAttributes([fid, float(result.accumulated[row, col]),
                                   int(result.allocation[row, col])])
            features.append(feature)
            if done % 100 == 0:
                progress(done / len(points))
                self.checkCanceled(feedback)
        feedback.pushInfo(self.tr(
            "Traced {n} least-cost path(s) for {total} destination point(s)"
        ).format(n=len(features), total=len(points)))
        if outside:
            feedback.pushWarning(self.tr(
                "Skipped {n} destination(s) outside the cost raster (feature "
                "id(s) {ids}). {crs}").format(
                    n=len(outside), ids=_list_ids(outside),
                    crs=self.crsNote(source.sourceCrs(), layer)))
        if unreached:
            feedback.pushWarning(self.tr(
                "Skipped {n} destination(s) that no source reaches (behind "
                "barriers, on a barrier or beyond the maximum cost; feature "
                "id(s) {ids})").format(n=len(unreached),
                                       ids=_list_ids(unreached)))
        return features
