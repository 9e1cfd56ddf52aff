"""gridgraph:habitatnetwork: the patch-based habitat connectivity network."""

import os
from types import SimpleNamespace

from qgis.core import (NULL, QgsFeature, QgsField, QgsFields,
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
from ..core.habitat import IMPORTANCE_AUTO_LIMIT
from ..core import io as raster_io
from ..core.costdistance import tiled
from .base import (BandParameter, GridGraphAlgorithm,
                   progress_callback)
from .styles import GraduatedLineStyle, LabelStyle, PolygonStyle, RampStyle

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
            "<p>Builds the landscape graph of habitat patches that ecologists "
            "use to study connectivity (Urban &amp; Keitt 2001; Fall et al. "
            "2007): the patches, the least-cost links between neighbouring "
            "patches, their minimum spanning tree, the components, and the "
            "connectivity indices IIC and PC with each patch's importance. "
            "It answers <i>which forest patches are connected for this "
            "species, through which corridors, and which patches matter "
            "most?</i></p>"
            "<p><b>Example</b>: habitat = the forest classes of a land-cover "
            "raster (<i>Habitat values</i> 4,5), resistance from a lookup "
            "table per class (Reclassify by table: grassland 5, cropland 20, "
            "forest 1, towns 100, water nodata), a minimum patch area of one "
            "hectare, and the cost at which half of the animals still cross "
            "(e.g. 60).</p>"
            "<p><b>Habitat raster</b> and <b>Habitat band</b>: where the "
            "habitat is. <b>Habitat values</b>: the values that are habitat, "
            "separated by commas; empty = every non-zero cell. Nodata cells "
            "are never habitat. Touching habitat cells form a patch; patch "
            "ids count the patches row by row from the top-left cell.<br>"
            "<b>Resistance raster</b> and <b>Resistance band</b>: the cost "
            "of crossing each cell (0 or more), another band of the same "
            "raster or a raster on the same grid (same CRS, extent and cell "
            "size). A step between neighbouring cells costs the mean of "
            "their resistances times the step length (1 straight, &radic;2 "
            "diagonal), as in Cost distance; nodata cells are barriers; "
            "every habitat cell needs a resistance. The bands' scale and "
            "offset are applied.<br>"
            "<b>Connectivity</b>: four or eight neighbours, for the patches "
            "and for movement.<br>"
            "<b>Minimum patch area</b> (map units squared): smaller patches "
            "are ignored.<br>"
            "<b>Maximum link cost</b>: patches joined by links costing at "
            "most this form one component, and only these links count in "
            "IIC (0 = no limit).<br>"
            "<b>Cost at which dispersal probability is 0.5</b>: a link is "
            "crossed with probability exp(-k &times; cost), k set so that a "
            "link of this cost is crossed half the time; PC needs it.</p>"
            "<p>Each cell goes to the patch it is cheapest to reach (the "
            "allocation). Where the areas of two patches touch, the cheapest "
            "crossing is their link: its cost is the least-cost path between "
            "the two patches through their areas, its line that path. The "
            "minimum spanning tree is the cheapest set of links connecting "
            "every patch it can (in_mst). IIC and PC (Pascual-Hortal &amp; "
            "Saura 2006; Saura &amp; Pascual-Hortal 2007) measure how much "
            "habitat is reachable; dIIC and dPC say by how many percent "
            "they drop when a patch is lost (computed up to {limit} patches, "
            "empty above: each patch repeats the whole index).</p>"
            "<p>Outputs (all optional): <b>Patches</b> (ids; 0 elsewhere), "
            "<b>Patch polygons</b> (id, area, degree = number of links, "
            "component, dIIC, dPC), <b>Links</b> as lines (from_id, to_id, "
            "cost, length in map units, in_mst), <b>Allocation</b> (the "
            "nearest patch of each cell), <b>Accumulated cost</b> (from the "
            "nearest patch; nodata where unreached), <b>Corridors</b> (on "
            "each cell of a spanning-tree link, its cost), and the numbers "
            "of patches, links and components, IIC "
            "and PC.</p>").format(limit=IMPORTANCE_AUTO_LIMIT) \
            + self.advancedHelp()

    def outputStyle(self, name):  # noqa: N802
        if name == self.OUTPUT_LINKS:
            return GraduatedLineStyle("cost", casing=True)
        if name == self.OUTPUT_PATCH_POLYGONS:
            return PolygonStyle("id")
        return None

    def initAlgorithm(self, config=None):  # noqa: N802 - QGIS API
        # The numbers with a default are optional: a model or script that
        # leaves them out means the default (the modeler refuses a missing
        # mandatory value).
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
            optional=True, minValue=0.0))
        self.addParameter(QgsProcessingParameterNumber(
            self.MAX_LINK_COST, self.tr("Maximum link cost (0 = no limit)"),
            QgsProcessingParameterNumber.Double, defaultValue=0.0,
            optional=True, minValue=0.0))
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
            self.OUTPUT_COST, self.tr("Accumulated cost (from the patches)"),
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

    RASTER_OUTPUT_TYPES = {OUTPUT_PATCHES: "int32", OUTPUT_ALLOCATION: "int32",
                           OUTPUT_COST: "float64", OUTPUT_CORRIDORS: "float64"}
    # habitat mask (1), component labels (8), patches (4), the cost
    # distance's three rasters (20) and its scratch (16), corridors (8)
    SCRATCH_BYTES_PER_CELL = 57

    def runAlgorithm(self, parameters, context, feedback, outputs):  # noqa: N802
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
        routing = SimpleNamespace(tiled=is_tiled, shape=resistance.shape)
        self.checkTiledOutputs(routing, destinations)
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
        with self.tiledOutputFolder(routing) as out_dir:
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
                    "computed up to {limit}; each patch repeats the whole "
                    "index); the fields are left empty").format(
                        n=net.patch_count, limit=IMPORTANCE_AUTO_LIMIT))
            polygons = []
            if want_polygons:
                polygons = self.patchPolygons(net, resistance, projection,
                                              connectivity, out_dir, feedback)
            links = self.linkFeatures(net, resistance) if want_links else []
            self.checkCanceled(feedback)

            # publishing: every output under a temporary name, moved into
            # place together by the OutputSet's commit
            results = {}
            if want_polygons:
                sink, results[self.OUTPUT_PATCH_POLYGONS] = outputs.sink(
                    self.OUTPUT_PATCH_POLYGONS, self.polygonFields(),
                    QgsWkbTypes.MultiPolygon, resistance_layer.crs())
                for start in range(0, len(polygons), FEATURE_BATCH):
                    sink.add(polygons[start:start + FEATURE_BATCH])
            if want_links:
                sink, results[self.OUTPUT_LINKS] = outputs.sink(
                    self.OUTPUT_LINKS, self.linkFields(),
                    QgsWkbTypes.LineString, resistance_layer.crs())
                for start in range(0, len(links), FEATURE_BATCH):
                    sink.add(links[start:start + FEATURE_BATCH])
            styles = {self.OUTPUT_PATCHES: LabelStyle(net.patch_count),
                      self.OUTPUT_ALLOCATION: LabelStyle(net.patch_count),
                      self.OUTPUT_COST: RampStyle(),
                      self.OUTPUT_CORRIDORS: RampStyle("Reds")}
            for name, path in destinations.items():
                if path is None:
                    continue
                engine_name, nodata = self.RASTER_OUTPUTS[name]
                self.writeRaster(outputs, path, getattr(net, engine_name),
                                 resistance, projection, nodata)
                self.setStyle(context, path, styles[name])
                results[name] = path
        results.update({self.PATCHES: net.patch_count,
                        self.LINKS: len(net.links),
                        self.COMPONENTS: net.components, self.IIC: net.iic,
                        self.PC: net.pc})
        return results

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
