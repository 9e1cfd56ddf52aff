"""gridgraph:habitatnetwork: the patch-based habitat connectivity network."""

import os
from types import SimpleNamespace

from qgis.core import (NULL, QgsFeature, QgsFeatureSink, QgsField, QgsFields,
                       QgsGeometry, QgsLineString, QgsProcessing,
                       QgsProcessingException, QgsProcessingOutputNumber,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterNumber,
                       QgsProcessingParameterRasterDestination,
                       QgsProcessingParameterRasterLayer,
                       QgsProcessingParameterString, QgsWkbTypes)
from qgis.PyQt.QtCore import QVariant

from ..core import habitat_network
from ..core import io as raster_io
from ..core.costdistance import tiled
from .base import (ENGINE_SHARE, BandParameter, GridGraphAlgorithm,
                   progress_callback)
from .styles import LabelStyle, RampStyle

# Link and polygon features handed to a sink at a time.
FEATURE_BATCH = 1000


class HabitatNetwork(GridGraphAlgorithm):
    """Habitat patches, least-cost links, their spanning tree and IIC/PC."""

    HABITAT = "HABITAT"
    HABITAT_BAND = "HABITAT_BAND"
    HABITAT_VALUES = "HABITAT_VALUES"
    RESISTANCE = "RESISTANCE"
    RESISTANCE_BAND = "RESISTANCE_BAND"
    CONNECTIVITY = "CONNECTIVITY"
    MIN_AREA = "MIN_AREA"
    MAX_LINK_COST = "MAX_LINK_COST"
    DISTANCE_P05 = "DISTANCE_P05"
    OUTPUT_PATCHES = "OUTPUT_PATCHES"
    OUTPUT_PATCH_POLYGONS = "OUTPUT_PATCH_POLYGONS"
    OUTPUT_LINKS = "OUTPUT_LINKS"
    OUTPUT_ALLOCATION = "OUTPUT_ALLOCATION"
    OUTPUT_COST = "OUTPUT_COST"
    OUTPUT_CORRIDORS = "OUTPUT_CORRIDORS"
    PATCHES = "PATCHES"
    LINKS = "LINKS"
    COMPONENTS = "COMPONENTS"
    IIC = "IIC"
    PC = "PC"

    CONNECTIVITIES = (4, 8)
    # raster output -> (engine output name, nodata)
    RASTER_OUTPUTS = {OUTPUT_PATCHES: ("patches", 0),
                      OUTPUT_ALLOCATION: ("allocation", 0),
                      OUTPUT_COST: ("accumulated", float("nan")),
                      OUTPUT_CORRIDORS: ("corridors", float("nan"))}

    ALGORITHM_NAME = "habitatnetwork"
    DISPLAY_NAME = "Habitat connectivity network"
    GROUP = "Distance"
    GROUP_ID = "distance"
    ICON = "habitatnetwork.svg"
    TAGS = ("habitat,connectivity,landscape graph,patch,least cost path,"
            "corridor,minimum planar graph,grains of connectivity,"
            "minimum spanning tree,IIC,PC,dPC,graphab,grainscape,ecology,"
            "conservation,resistance")

    def shortHelpString(self):  # noqa: N802 - QGIS API
        return self.tr(
            "The landscape graph of habitat patches that ecologists use to "
            "study connectivity (Urban &amp; Keitt 2001; Fall et al. 2007), "
            "in one run.\n\n"
            "<b>Patches</b>: groups of touching habitat cells. Habitat is "
            "every valid non-zero cell of the habitat band, or, when "
            "<i>habitat values</i> lists some (such as 3,4,7), the cells with "
            "those values. Patches smaller than the <i>minimum patch "
            "area</i> (map units squared) are ignored. Patch ids follow the "
            "raster row by row from the top-left cell.\n"
            "<b>Resistance</b>: the cost of crossing each cell (a band of the "
            "same raster or another raster on the same grid). Moving between "
            "two neighbouring cells costs the mean of their resistances "
            "times the step length in cells (1 straight, &radic;2 "
            "diagonal), as in Cost distance. Nodata cells are barriers; "
            "every habitat cell needs a resistance.\n"
            "<b>Links</b>: each cell is given to the patch it is cheapest to "
            "reach (the allocation). Where the areas of two patches touch, "
            "the cheapest crossing becomes their link: its cost is the "
            "least-cost path between the patches through those two areas, "
            "its line the path itself.\n"
            "<b>Network</b>: the links of the minimum spanning tree (the "
            "cheapest set of links connecting all connected patches) are "
            "flagged in_mst. Patches joined by links costing at most the "
            "<i>maximum link cost</i> (0 = no limit) form one component.\n"
            "<b>Indices</b>: IIC (integral index of connectivity) over the "
            "links within the maximum link cost, and PC (probability of "
            "connectivity) over all links with the chance of crossing a "
            "link exp(-k &times; cost), k set so that a link costing the "
            "<i>cost at which dispersal probability is 0.5</i> is crossed "
            "half the time (PC is left empty without it). For each patch, "
            "dIIC and dPC say by how many percent the index drops when the "
            "patch is lost (computed up to 1500 patches: each one repeats "
            "the whole index; empty above that).\n\n"
            "Outputs (all optional): the patch raster and polygons (id, "
            "area, number of links, component, dIIC, dPC), the links as "
            "lines (from_id, to_id, cost, length in map units, in_mst), the "
            "allocation raster, the accumulated cost raster (cost from the "
            "nearest patch) and the corridors raster (on each cell of a "
            "spanning-tree link's path, that link's cost). The numbers of "
            "patches, links and components, IIC and PC are outputs too.\n\n"
            "Advanced: backend (auto picks an NVIDIA GPU for the cost "
            "distance when numba CUDA can use one). A tile size, or a "
            "resistance raster larger than the memory limit, runs the tiled "
            "(out-of-core) engines (GeoTIFF raster outputs only), with the "
            "same results.")

    def initAlgorithm(self, config=None):  # noqa: N802 - QGIS API
        self.addParameter(QgsProcessingParameterRasterLayer(
            self.HABITAT, self.tr("Habitat raster")))
        self.addParameter(BandParameter(
            self.HABITAT_BAND, self.tr("Habitat band"), 1, self.HABITAT))
        self.addParameter(QgsProcessingParameterString(
            self.HABITAT_VALUES,
            self.tr("Habitat values, comma separated (empty = every non-zero "
                    "cell)"), defaultValue="", optional=True))
        self.addParameter(QgsProcessingParameterRasterLayer(
            self.RESISTANCE, self.tr("Resistance raster")))
        self.addParameter(BandParameter(
            self.RESISTANCE_BAND, self.tr("Resistance band"), 1,
            self.RESISTANCE))
        self.addParameter(QgsProcessingParameterEnum(
            self.CONNECTIVITY, self.tr("Connectivity"),
            options=[self.tr("four (rook)"), self.tr("eight (queen)")],
            defaultValue=1))
        self.addParameter(QgsProcessingParameterNumber(
            self.MIN_AREA, self.tr("Minimum patch area (map units squared)"),
            QgsProcessingParameterNumber.Double, defaultValue=0.0,
            minValue=0.0))
        self.addParameter(QgsProcessingParameterNumber(
            self.MAX_LINK_COST, self.tr("Maximum link cost (0 = no limit)"),
            QgsProcessingParameterNumber.Double, defaultValue=0.0,
            minValue=0.0))
        self.addParameter(QgsProcessingParameterNumber(
            self.DISTANCE_P05,
            self.tr("Cost at which dispersal probability is 0.5 (for PC)"),
            QgsProcessingParameterNumber.Double, optional=True,
            minValue=0.0))
        self.addScaleParameters()
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_PATCHES, self.tr("Patches"), optional=True,
            createByDefault=True))
        self.addParameter(QgsProcessingParameterFeatureSink(
            self.OUTPUT_PATCH_POLYGONS, self.tr("Patch polygons"),
            QgsProcessing.TypeVectorPolygon, optional=True,
            createByDefault=False))
        self.addParameter(QgsProcessingParameterFeatureSink(
            self.OUTPUT_LINKS, self.tr("Links"),
            QgsProcessing.TypeVectorLine, optional=True,
            createByDefault=True))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_ALLOCATION, self.tr("Allocation (nearest patch)"),
            optional=True, createByDefault=False))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_COST, self.tr("Accumulated cost from the patches"),
            optional=True, createByDefault=False))
        self.addParameter(QgsProcessingParameterRasterDestination(
            self.OUTPUT_CORRIDORS, self.tr("Corridors (spanning tree links)"),
            optional=True, createByDefault=False))
        for name, description in (
                (self.PATCHES, "Number of patches"),
                (self.LINKS, "Number of links"),
                (self.COMPONENTS, "Number of components"),
                (self.IIC, "Integral index of connectivity (IIC)"),
                (self.PC, "Probability of connectivity (PC)")):
            self.addOutput(QgsProcessingOutputNumber(name,
                                                     self.tr(description)))

    # ------------------------------------------------------------- checks

    def checkParameterValues(self, parameters, context):  # noqa: N802
        ok, message = super().checkParameterValues(parameters, context)
        for layer_name, band_name in ((self.HABITAT, self.HABITAT_BAND),
                                      (self.RESISTANCE, self.RESISTANCE_BAND)):
            if ok:
                ok, message = self.checkBand(parameters, context, layer_name,
                                             band_name)
        if not ok:
            return ok, message
        try:
            self.habitatValues(parameters, context)
        except QgsProcessingException as error:
            return False, str(error)
        return self.checkSameGrid(parameters, context)

    def checkSameGrid(self, parameters, context):  # noqa: N802
        """(ok, message): HABITAT and RESISTANCE share rows, columns, extent
        and CRS."""
        habitat = self.parameterAsRasterLayer(parameters, self.HABITAT,
                                              context)
        resistance = self.parameterAsRasterLayer(parameters, self.RESISTANCE,
                                                 context)
        if habitat is None or resistance is None:
            return True, ""
        same_size = (habitat.width(), habitat.height()) == (
            resistance.width(), resistance.height())
        tolerance = 1e-6 * max(habitat.rasterUnitsPerPixelX(),
                               habitat.rasterUnitsPerPixelY())
        a, b = habitat.extent(), resistance.extent()
        same_extent = all(abs(p - q) <= tolerance for p, q in (
            (a.xMinimum(), b.xMinimum()), (a.xMaximum(), b.xMaximum()),
            (a.yMinimum(), b.yMinimum()), (a.yMaximum(), b.yMaximum())))
        same_crs = habitat.crs() == resistance.crs()
        if same_size and same_extent and same_crs:
            return True, ""
        return False, self.tr(
            "The habitat raster {habitat} ({hw} x {hh} cells, {hcrs}) and the "
            "resistance raster {resistance} ({rw} x {rh} cells, {rcrs}) are "
            "not on the same grid (same CRS, extent and cell size): resample "
            "one onto the other first (Raster > Projections > Warp, with the "
            "other layer as the target extent and resolution)").format(
                habitat=habitat.name(), hw=habitat.width(),
                hh=habitat.height(), hcrs=habitat.crs().authid(),
                resistance=resistance.name(), rw=resistance.width(),
                rh=resistance.height(), rcrs=resistance.crs().authid())

    def habitatValues(self, parameters, context):  # noqa: N802
        """HABITAT_VALUES as a list of numbers, or None when empty."""
        text = (self.parameterAsString(parameters, self.HABITAT_VALUES,
                                       context) or "").strip()
        if not text:
            return None
        values = []
        for item in text.replace(";", ",").split(","):
            if not item.strip():
                continue
            try:
                values.append(float(item))
            except ValueError:
                raise QgsProcessingException(self.tr(
                    "Habitat values must be numbers separated by commas, "
                    "such as 3,4,7; {item!r} is not a number").format(
                        item=item.strip())) from None
        return values or None

    # ------------------------------------------------------------ the run

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        habitat_layer, habitat = self.bandOnDisk(
            parameters, context, self.HABITAT, self.parameterAsInt(
                parameters, self.HABITAT_BAND, context))
        resistance_layer, resistance = self.bandOnDisk(
            parameters, context, self.RESISTANCE, self.parameterAsInt(
                parameters, self.RESISTANCE_BAND, context))
        options = self.scaleOptions(parameters, context)
        plan = self.runEngine(tiled.plan, resistance.path, resistance.band,
                              options["tile_size"], options["memory_limit_mb"],
                              options["executor"])
        is_tiled = plan is not None
        if is_tiled:
            plan.source.close()
            feedback.pushInfo(self.tr(
                "tiled (out-of-core) path: tiles of {size} x {size} cells")
                .format(size=plan.grid.tile_size))
        destinations = {name: self.rasterDestination(parameters, name, context)
                        for name in self.RASTER_OUTPUTS}
        self.checkTiledOutputs(SimpleNamespace(tiled=is_tiled), destinations)
        want_polygons = self.sinkRequested(parameters,
                                           self.OUTPUT_PATCH_POLYGONS, context)
        want_links = self.sinkRequested(parameters, self.OUTPUT_LINKS, context)
        wanted = {self.RASTER_OUTPUTS[name][0]
                  for name, path in destinations.items() if path is not None}
        if want_polygons:
            wanted.add("patches")
        _, xres, _, _, _, yres = resistance.geotransform
        max_link_cost = self.parameterAsDouble(parameters, self.MAX_LINK_COST,
                                               context)
        distance_p05 = None
        if parameters.get(self.DISTANCE_P05) not in (None, ""):
            distance_p05 = self.parameterAsDouble(
                parameters, self.DISTANCE_P05, context) or None
        projection = self.outputProjection(resistance_layer, resistance)

        connectivity = self.CONNECTIVITIES[self.parameterAsEnum(
            parameters, self.CONNECTIVITY, context)]
        with self.tiledOutputFolder(SimpleNamespace(tiled=is_tiled)) as out_dir:
            net = self.runTimed(
                feedback, habitat_network, habitat.path, resistance.path,
                habitat_values=self.habitatValues(parameters, context),
                connectivity=connectivity,
                min_area=self.parameterAsDouble(parameters, self.MIN_AREA,
                                                context),
                max_link_cost=max_link_cost or None,
                distance_p05=distance_p05, cell_size=(xres, yres),
                habitat_band=habitat.band, resistance_band=resistance.band,
                out_dir=out_dir, outputs=sorted(wanted),
                progress=progress_callback(feedback, 0.0, 0.8),
                **options)
            feedback.pushInfo(self.tr(
                "{patches} patch(es), {links} link(s), {components} "
                "component(s)").format(patches=net.patch_count,
                                       links=len(net.links),
                                       components=net.components))
            if net.d_iic is None:
                feedback.pushWarning(self.tr(
                    "dIIC and dPC were not computed: {n} patches (they are "
                    "computed up to 1500; each patch repeats the whole "
                    "index); the fields are left empty").format(
                        n=net.patch_count))
            polygons = []
            if want_polygons:
                polygons = self.patchPolygons(net, resistance, projection,
                                              connectivity, out_dir, feedback)
            links = self.linkFeatures(net, resistance) if want_links else []
            self.checkCanceled(feedback)

            # publishing: sinks first (they may still fail on their target)
            outputs = {}
            if want_polygons:
                sink, sink_id = self.createSink(
                    parameters, self.OUTPUT_PATCH_POLYGONS, context,
                    self.polygonFields(), QgsWkbTypes.MultiPolygon,
                    resistance_layer.crs())
            if want_links:
                link_sink, link_id = self.createSink(
                    parameters, self.OUTPUT_LINKS, context, self.linkFields(),
                    QgsWkbTypes.LineString, resistance_layer.crs())
            styles = {self.OUTPUT_PATCHES: LabelStyle(net.patch_count),
                      self.OUTPUT_ALLOCATION: LabelStyle(net.patch_count),
                      self.OUTPUT_COST: RampStyle("Viridis"),
                      self.OUTPUT_CORRIDORS: RampStyle("Reds")}
            for name, path in destinations.items():
                if path is None:
                    continue
                engine_name, nodata = self.RASTER_OUTPUTS[name]
                self.writeRaster(path, getattr(net, engine_name), resistance,
                                 projection, nodata)
                self.setStyle(context, path, styles[name])
                outputs[name] = path
        if want_polygons:
            for start in range(0, len(polygons), FEATURE_BATCH):
                sink.addFeatures(polygons[start:start + FEATURE_BATCH],
                                 QgsFeatureSink.FastInsert)
            outputs[self.OUTPUT_PATCH_POLYGONS] = sink_id
        if want_links:
            for start in range(0, len(links), FEATURE_BATCH):
                link_sink.addFeatures(links[start:start + FEATURE_BATCH],
                                      QgsFeatureSink.FastInsert)
            outputs[self.OUTPUT_LINKS] = link_id
        outputs.update({self.PATCHES: net.patch_count,
                        self.LINKS: len(net.links),
                        self.COMPONENTS: net.components, self.IIC: net.iic,
                        self.PC: net.pc})
        feedback.setProgress(100)
        return outputs

    # ------------------------------------------------------------ features

    @staticmethod
    def polygonFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("id", QVariant.LongLong))
        fields.append(QgsField("area", QVariant.Double))
        fields.append(QgsField("degree", QVariant.LongLong))
        fields.append(QgsField("component", QVariant.LongLong))
        fields.append(QgsField("dIIC", QVariant.Double))
        fields.append(QgsField("dPC", QVariant.Double))
        return fields

    @staticmethod
    def linkFields():  # noqa: N802
        fields = QgsFields()
        fields.append(QgsField("from_id", QVariant.LongLong))
        fields.append(QgsField("to_id", QVariant.LongLong))
        fields.append(QgsField("cost", QVariant.Double))
        fields.append(QgsField("length", QVariant.Double))
        fields.append(QgsField("in_mst", QVariant.Bool))
        return fields

    def patchPolygons(self, net, raster, projection, connectivity,  # noqa: N802
                      out_dir, feedback):
        """One multipolygon feature per patch, attributes filled in."""
        if out_dir is None:
            parts = raster_io.polygonize_labels(
                net.patches, raster.geotransform, projection, connectivity)
        else:  # tiled: polygonize a GeoTIFF scanline by scanline
            labels_file = os.path.join(out_dir, "patches-for-polygons.tif")
            self.writeRaster(labels_file, net.patches, raster, projection, 0)
            polygons_file = self.runEngine(
                raster_io.polygonize_label_file, labels_file,
                os.path.join(out_dir, "patches.gpkg"), connectivity,
                progress=progress_callback(feedback, 0.8, 0.85))
            parts = ((label, wkb) for label, wkbs in
                     raster_io.read_label_polygons(polygons_file)
                     for wkb in wkbs)
        by_patch = {}
        for label, wkb in parts:
            by_patch.setdefault(label, []).append(wkb)
        fields = self.polygonFields()
        features = []
        for done, patch in enumerate(sorted(by_patch)):
            geometry = QgsGeometry()
            for wkb in by_patch[patch]:
                part = QgsGeometry()
                part.fromWkb(wkb)
                geometry = part if geometry.isEmpty() else geometry.combine(
                    part)
            geometry.convertToMultiType()
            k = patch - 1
            feature = QgsFeature(fields)
            feature.setGeometry(geometry)
            feature.setAttributes([
                patch, float(net.patch_area[k]), int(net.patch_degree[k]),
                int(net.patch_component[k]),
                NULL if net.d_iic is None else float(net.d_iic[k]),
                NULL if net.d_pc is None else float(net.d_pc[k])])
            features.append(feature)
            if done % FEATURE_BATCH == 0:
                self.checkCanceled(feedback)
                feedback.setProgress(85 + 5 * done / max(len(by_patch), 1))
        return features

    def linkFeatures(self, net, raster):  # noqa: N802
        """One line per link, through the cell centres of its path."""
        links = net.links
        fields = self.linkFields()
        xs, ys = raster_io.cell_centre(raster.geotransform,
                                       links.path_rows + 0.0,
                                       links.path_cols + 0.0)
        features = []
        for k in range(len(links)):
            piece = slice(links.path_offsets[k], links.path_offsets[k + 1])
            feature = QgsFeature(fields)
            feature.setGeometry(QgsGeometry(QgsLineString(
                xs[piece].tolist(), ys[piece].tolist())))
            feature.setAttributes([
                int(links.from_id[k]), int(links.to_id[k]),
                float(links.cost[k]), float(links.length[k]),
                bool(links.in_mst[k])])
            features.append(feature)
        return features
