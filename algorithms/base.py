"""What the GridGraph algorithms share: the advanced (scale) parameters,
reading the input band, the progress/cancel bridge to the engine, the
translation of engine errors, output checks, and atomic raster writing.

No numerics here: arrays go from GDAL to ``gridgraph.core`` and back.
"""

import functools
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from qgis.core import (QgsCoordinateReferenceSystem, QgsProcessing,
                       QgsProcessingAlgorithm, QgsProcessingException,
                       QgsProcessingOutputLayerDefinition,
                       QgsProcessingParameterBand,
                       QgsProcessingParameterDefinition,
                       QgsProcessingParameterEnum,
                       QgsProcessingParameterNumber,
                       QgsProcessingParameterRasterLayer,
                       QgsProcessingParameterString,
                       QgsMessageLog, QgsProperty,
                       QgsRasterFileWriter)
from qgis.PyQt.QtCore import QCoreApplication
from qgis.PyQt.QtGui import QIcon

from ..core import GridGraphError, scratch
from ..core import io as raster_io
from ..core import tiling, warmup
from ..core._common import cuda_available, valid_mask
from . import checks, styles
from .outputs import OutputSet

ICON_FOLDER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "icons")
# The repository site (metadata.txt's homepage); one page per algorithm.
HELP_URL = "https://github.com/gridgraph/gridgraph/blob/main/docs/{name}.md"

_PROVIDER_PREFIX = re.compile(r"^[A-Za-z_]{2,}:")

# Share of the progress bar the engine gets; writing outputs takes the rest.
ENGINE_SHARE = 0.9


@functools.lru_cache(maxsize=None)
def gpu_usable():
    """True when numba reaches a CUDA device (asked once per session)."""
    return cuda_available()


def progress_callback(feedback, start=0.0, stop=ENGINE_SHARE):
    """The engine's ``progress(fraction) -> keep going`` built from a feedback."""
    width = 100.0 * (stop - start)
    return lambda fraction: (feedback.setProgress(100.0 * start + width * fraction)
                             or not feedback.isCanceled())


class BandParameter(QgsProcessingParameterBand):
    """A band number that is not optional, yet may be left out (band 1).

    Flagged optional, the dialog labels it "[optional]" and offers "not
    set"; not flagged, QGIS 3.22's band parameter refuses a missing value
    instead of taking its default (qgis_process: "mandatory parameters were
    not specified").  A missing value is checked as the default here, and
    parameterAsInt gives the default too.
    """

    def checkValueIsAcceptable(self, value, context=None):  # noqa: N802
        if value is None:
            value = self.defaultValue()
        return super().checkValueIsAcceptable(value, context)

    def clone(self):
        copy = BandParameter(self.name(), self.description(),
                             self.defaultValue(),
                             self.parentLayerParameterName(),
                             allowMultiple=self.allowMultiple())
        copy.setFlags(self.flags())
        copy.setHelp(self.help())
        return copy


@dataclass
class InputBand:
    """One band of an input layer, as the engine gets it.

    On the in-memory path ``array`` holds its cells; on the engine's tiled
    (out-of-core) path it is None and the engine reads ``path`` / ``band``
    tile by tile, so the adapter never holds the whole band.
    """

    path: str
    band: int
    shape: tuple
    nodata: object
    geotransform: tuple
    projection: str
    array: object = None

    @property
    def tiled(self):
        """True when the band stays on disk for the engine's tiled path."""
        return self.array is None

    @property
    def values(self):
        """The engine's raster argument: the array, or the path (tiled)."""
        return self.path if self.tiled else self.array

    def engineKeywords(self, out_dir):  # noqa: N802
        """The engine's ``band`` and ``out_dir`` keywords (tiled path only)."""
        return {"band": self.band, "out_dir": out_dir} if self.tiled else {}

    def cellValues(self, cells):  # noqa: N802
        """Values of the (row, col) ``cells``; one-cell window reads when tiled."""
        cells = np.asarray(cells, dtype=np.int64).reshape(-1, 2)
        if not self.tiled:
            return self.array[cells[:, 0], cells[:, 1]]
        reader = raster_io.open_band(self.path, self.band)
        return np.array([reader.read(int(row), int(col), 1, 1)[0, 0]
                         for row, col in cells])

    def hasValidCell(self):  # noqa: N802
        """True when a cell is neither nodata nor NaN (strip by strip when tiled)."""
        if not self.tiled:
            return bool(valid_mask(self.array, self.nodata).any())
        reader = raster_io.open_band(self.path, self.band)
        rows, cols = self.shape
        strip = max(1, (16 << 20) // max(1, cols * reader.dtype.itemsize))
        for top in range(0, rows, strip):
            block = reader.read(top, 0, min(strip, rows - top), cols)
            if valid_mask(block, self.nodata).any():
                return True
        return False


class GridGraphAlgorithm(QgsProcessingAlgorithm):
    """Base of the GridGraph algorithms (subclasses set the class attributes)."""

    INPUT = "INPUT"
    BAND = "BAND"
    BACKEND = "BACKEND"
    TILE_SIZE = "TILE_SIZE"
    MEMORY_LIMIT_MB = "MEMORY_LIMIT_MB"
    DASK_SCHEDULER = "DASK_SCHEDULER"

    BACKENDS = ("auto", "cpu", "cuda")

    ALGORITHM_NAME = ""
    DISPLAY_NAME = ""
    GROUP = ""
    GROUP_ID = ""
    ICON = ""
    TAGS = ""

    def tr(self, text):
        return QCoreApplication.translate(type(self).__name__, text)

    def createInstance(self):  # noqa: N802 - QGIS API
        return type(self)()

    def name(self):
        return self.ALGORITHM_NAME

    def displayName(self):  # noqa: N802 - QGIS API
        return self.tr(self.DISPLAY_NAME)

    def group(self):
        return self.tr(self.GROUP)

    def groupId(self):  # noqa: N802 - QGIS API
        return self.GROUP_ID

    def tags(self):
        return [tag.strip() for tag in self.tr(self.TAGS).split(",") if tag.strip()]

    def icon(self):
        return QIcon(self.svgIconPath())

    def svgIconPath(self):  # noqa: N802 - QGIS API
        return os.path.join(ICON_FOLDER, self.ICON)

    def advancedHelp(self):  # noqa: N802
        """The help on the advanced parameters, the same for every algorithm."""
        return self.tr(
            "<p><b>Advanced parameters</b> (leave them unset for the "
            "defaults):<br>"
            "<b>Backend</b>: <i>auto</i> uses an NVIDIA GPU when one is "
            "usable (through numba's CUDA support), else the processor; "
            "<i>cpu</i> or <i>cuda</i> force one. Results are the same "
            "either way.<br>"
            "<b>Tile size</b> and <b>Memory limit</b>: a raster file larger "
            "than the memory limit (0 = about half of the free memory), or "
            "any raster when a tile size is given (a power of two, 8 or "
            "more), is processed in tiles read from and written to disk, so "
            "rasters larger than memory work; raster outputs are then "
            "GeoTIFF only. Results are the same as in one piece.<br>"
            "<b>Dask scheduler address</b>: leave empty to work within "
            "QGIS; an address such as tcp://host:8786 sends the tiles to a "
            "Dask cluster (see the help page).</p>"
            "<p>The first run after installing prepares (compiles) the "
            "computing code once (the log says so); later runs start at "
            "once.</p>")

    def helpUrl(self):  # noqa: N802 - QGIS API
        return HELP_URL.format(name=self.name())

    def flags(self):
        return super().flags() | QgsProcessingAlgorithm.FlagCanCancel

    # ----------------------------------------------------------- parameters

    def addInputParameters(self, description):  # noqa: N802
        """INPUT raster layer and its BAND (default 1)."""
        self.addParameter(QgsProcessingParameterRasterLayer(
            self.INPUT, self.tr(description)))
        self.addParameter(BandParameter(
            self.BAND, self.tr("Band number"), 1, self.INPUT))

    def addScaleParameters(self):  # noqa: N802
        """BACKEND, TILE_SIZE, MEMORY_LIMIT_MB, DASK_SCHEDULER (advanced)."""
        parameters = [
            QgsProcessingParameterEnum(
                self.BACKEND, self.tr("Backend"),
                options=[self.tr("auto (CUDA when available, else CPU)"),
                         self.tr("cpu"),
                         self.tr("cuda") if gpu_usable()
                         else self.tr("cuda (no usable GPU found)")],
                defaultValue=0),
            QgsProcessingParameterNumber(
                self.TILE_SIZE, self.tr("Tile size in cells (0 = automatic)"),
                QgsProcessingParameterNumber.Integer, defaultValue=0,
                minValue=0),
            QgsProcessingParameterNumber(
                self.MEMORY_LIMIT_MB,
                self.tr("Memory limit in MB (0 = automatic)"),
                QgsProcessingParameterNumber.Integer, defaultValue=0,
                minValue=0),
            QgsProcessingParameterString(
                self.DASK_SCHEDULER,
                self.tr("Dask scheduler address (empty = this process)"),
                defaultValue="", optional=True),
        ]
        for parameter in parameters:
            # Optional with a default: a model saved before a parameter
            # existed, or written by a script, leaves it unset, which means
            # the default (the modeler refuses a missing mandatory value).
            parameter.setFlags(parameter.flags()
                               | QgsProcessingParameterDefinition.FlagAdvanced
                               | QgsProcessingParameterDefinition.FlagOptional)
            self.addParameter(parameter)

    def scaleOptions(self, parameters, context):  # noqa: N802
        """Engine keywords from the advanced parameters."""
        tile_size = self.parameterAsInt(parameters, self.TILE_SIZE, context)
        memory = self.parameterAsInt(parameters, self.MEMORY_LIMIT_MB, context)
        scheduler = (self.parameterAsString(parameters, self.DASK_SCHEDULER,
                                            context) or "").strip()
        return {
            "backend": self.BACKENDS[self.parameterAsEnum(
                parameters, self.BACKEND, context)],
            "tile_size": tile_size or None,
            "memory_limit_mb": memory or None,
            "executor": scheduler or None,
        }

    # ------------------------------------------------------------- checks

    # GDAL type name of each raster output (the type it is written with):
    # checkParameterValues refuses a format that cannot hold it.
    RASTER_OUTPUT_TYPES = {}
    # Bytes per cell the tiled path writes in its scratch folder (outputs
    # as .npy plus the largest scratch), checked against the free space.
    SCRATCH_BYTES_PER_CELL = 16

    def parameterLabel(self, name):  # noqa: N802
        """``Label [NAME]``: a parameter as the user sees it."""
        return checks.label(self, name)

    def checkParameterValues(self, parameters, context):  # noqa: N802
        # numbers first: QGIS's own check refuses NaN without saying why
        ok, message = checks.check_numbers(self, parameters, context)
        if not ok:
            return ok, message
        ok, message = super().checkParameterValues(parameters, context)
        if not ok:
            return ok, message
        ok, message = self.checkBand(parameters, context, self.INPUT,
                                     self.BAND)
        if not ok:
            return ok, message
        return checks.check_files(self, parameters, context)

    def checkBand(self, parameters, context, layer_name, band_name):  # noqa: N802
        """(ok, message): the band exists in the raster layer."""
        layer = self.parameterAsRasterLayer(parameters, layer_name, context)
        if layer is None:
            return True, ""
        band = self.parameterAsInt(parameters, band_name, context)
        if not 1 <= band <= layer.bandCount():
            return False, self.tr(
                "Band {band} does not exist: {layer} has {count} band(s); "
                "choose a band from 1 to {count}").format(
                    band=band, layer=layer.name(), count=layer.bandCount())
        return True, ""

    @staticmethod
    def isRequested(parameters, name):  # noqa: N802
        """True when an optional destination parameter was given a target."""
        value = parameters.get(name)
        if isinstance(value, QgsProcessingOutputLayerDefinition):
            if value.sink.propertyType() != QgsProperty.StaticProperty:
                return True  # an expression: evaluated when the sink is made
            value = value.sink.staticValue()
        return value is not None and str(value).strip() != ""

    # ---------------------------------------------------------- raster in

    def gdalLayer(self, parameters, context, layer_name=None):  # noqa: N802
        """The raster layer of a parameter; raises unless GDAL reads it."""
        layer_name = layer_name or self.INPUT
        layer = self.parameterAsRasterLayer(parameters, layer_name, context)
        if layer is None:
            raise QgsProcessingException(
                self.invalidRasterError(parameters, layer_name))
        if layer.providerType() != "gdal":
            raise QgsProcessingException(self.tr(
                "{layer} is a {provider} raster: GridGraph reads rasters "
                "through GDAL only; save it as a GeoTIFF first (Export > "
                "Save As, or gdal:translate)").format(
                    layer=layer.name(), provider=layer.providerType()))
        return layer

    def noValidCellError(self, layer, band, nodata):  # noqa: N802
        return QgsProcessingException(self.tr(
            "Band {band} of {layer} has no valid cell: every cell is "
            "nodata ({nodata}) or NaN; choose another band or fix the "
            "layer's nodata value").format(
                band=band, layer=layer.name(), nodata=nodata))

    def readInputBand(self, parameters, context, layer_name=None,  # noqa: N802
                      band_name=None, band=None):
        """(layer, core.io.RasterBand) of a GDAL raster parameter, read whole.

        Raises QgsProcessingException when the layer is not a GDAL raster,
        the band does not exist or every cell is nodata.
        """
        layer = self.gdalLayer(parameters, context, layer_name)
        if band is None:
            band = self.parameterAsInt(parameters, band_name or self.BAND,
                                       context)
        raster = self.runEngine(raster_io.read_band, layer.source(), band)
        if not valid_mask(raster.array, raster.nodata).any():
            raise self.noValidCellError(layer, band, raster.nodata)
        return layer, raster

    @staticmethod
    def inMemory(layer, raster, band=1):  # noqa: N802
        """The InputBand of a band read whole (a core.io.RasterBand)."""
        return InputBand(layer.source(), band, raster.array.shape,
                         raster.nodata, raster.geotransform,
                         raster.projection, raster.array)

    def bandOnDisk(self, parameters, context, layer_name=None, band=1):  # noqa: N802
        """(layer, InputBand) of a GDAL raster parameter, cells left on disk."""
        layer = self.gdalLayer(parameters, context, layer_name)
        reader = self.runEngine(raster_io.open_band, layer.source(), band)
        return layer, InputBand(layer.source(), band, reader.shape,
                                reader.nodata, reader.geotransform,
                                reader.projection)

    def openInputBand(self, parameters, context, plan, feedback=None):  # noqa: N802
        """(layer, InputBand) of INPUT, routed as the engine routes it.

        ``plan`` is the operation's ``tiled.plan``: when it picks the tiled
        path for the layer's file (TILE_SIZE given, or the raster does not
        fit MEMORY_LIMIT_MB or, at 0, the default share of RAM) the band is
        left on disk and the engine gets its path; otherwise it is read
        whole as before.
        """
        layer = self.gdalLayer(parameters, context)
        band = self.parameterAsInt(parameters, self.BAND, context)
        options = self.scaleOptions(parameters, context)
        tiled_plan = self.runEngine(
            plan, layer.source(), band, options["tile_size"],
            options["memory_limit_mb"], options["executor"])
        if tiled_plan is None:
            layer, raster = self.readInputBand(parameters, context, band=band)
            return layer, self.inMemory(layer, raster, band)
        source = tiled_plan.source
        raster = InputBand(layer.source(), band, source.shape, source.nodata,
                           source.geotransform, source.projection)
        source.close()
        if feedback is not None:
            grid = tiled_plan.grid
            feedback.pushInfo(self.tr(
                "tiled (out-of-core) path: {count} tile(s) of {size} x {size} "
                "cells").format(count=grid.count, size=grid.tile_size))
        return layer, raster

    @contextmanager
    def tiledOutputFolder(self, raster):  # noqa: N802
        """The engine's ``out_dir``: on the tiled path a folder of this run
        in the scratch root ($GRIDGRAPH_SCRATCH_DIR, else the temporary
        folder), named after this process, checked for free space first
        and removed afterwards (also on a failure or cancel; after a
        SIGKILL by the next run); None on the in-memory path."""
        if not raster.tiled:
            yield None
            return
        folder = self.runEngine(scratch.make_run_folder, "tiled")
        try:
            shape = getattr(raster, "shape", None)
            if shape is not None:
                self.runEngine(scratch.check_free_space, folder,
                               int(shape[0]) * int(shape[1])
                               * self.SCRATCH_BYTES_PER_CELL,
                               "the tiled run's scratch files")
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def checkTiledOutputs(self, raster, paths):  # noqa: N802
        """On the tiled path raster outputs are streamed into GeoTIFFs only:
        refuse another format before anything is computed."""
        if not raster.tiled:
            return
        for name, path in paths.items():
            if path is not None and self.rasterDriver(path) != "GTiff":
                raise QgsProcessingException(self.tr(
                    "{name}: the tiled (out-of-core) path writes GeoTIFF "
                    "only, not {path}; give a .tif output, or set TILE_SIZE "
                    "and MEMORY_LIMIT_MB to 0 when the raster fits in "
                    "memory").format(name=name, path=path))

    @staticmethod
    def outputProjection(layer, raster):  # noqa: N802
        """WKT of the layer's CRS (as QGIS sees it) for the outputs."""
        crs = layer.crs()
        if crs.isValid():
            return crs.toWkt(QgsCoordinateReferenceSystem.WKT_PREFERRED_GDAL)
        return raster.projection

    # --------------------------------------------------------- the engine

    # Python keywords of the engine and the parameters they come from, so
    # the engine's messages name what the user set.
    ENGINE_KEYWORDS = {"tile_size": "TILE_SIZE",
                       "memory_limit_mb": "MEMORY_LIMIT_MB",
                       "max_cost": "MAX_COST", "backend": "BACKEND"}

    def runEngine(self, function, *args, **kwargs):  # noqa: N802
        """Call the engine; its typed errors (and a full disk) become
        QgsProcessingException in the dialog's words."""
        try:
            return function(*args, **kwargs)
        except GridGraphError as error:
            message = self.engineMessage(error)
        except OSError as error:
            if not scratch.is_disk_full(error):
                raise
            folder = os.path.dirname(error.filename) if getattr(
                error, "filename", None) else scratch.scratch_root()
            message = str(scratch.disk_full_error(folder, 0))
        # raised outside the handler, so the engine's exception is not kept
        # as its context: that traceback's frames hold the run's rasters and
        # GDAL datasets, which QGIS then keeps past its own exit (freed after
        # GDAL's teardown, they crashed the interpreter at exit)
        raise QgsProcessingException(message)

    def engineMessage(self, error):  # noqa: N802
        """The engine's message with its keywords as parameter labels."""
        message = str(error)
        if message.startswith("executor must be"):
            return (f"{self.parameterLabel(self.DASK_SCHEDULER)}: running "
                    "on a Dask cluster is not available in this version; "
                    "leave it empty to run in this process")
        if "Dask" in message and not message.startswith("executor"):
            # the cluster's own messages (core/distributed.py)
            message = f"{self.parameterLabel(self.DASK_SCHEDULER)}: {message}"
        for keyword, name in self.ENGINE_KEYWORDS.items():
            if self.parameterDefinition(name) is not None:
                message = re.sub(rf"\b{keyword}\b",
                                 self.parameterLabel(name), message)
        return message

    def noteFirstCompile(self, feedback):  # noqa: N802
        """Say in the log when this run will compile the kernels first."""
        if warmup.is_running():
            feedback.pushInfo(self.tr(
                "The computing code is being prepared for first use (once "
                "after installing); this run waits for it"))
        elif not warmup.is_warm():
            feedback.pushInfo(self.tr(
                "If this is the first run since installing, the computing "
                "code is compiled first (about 20 s to a minute, once; later "
                "runs start at once)"))

    def runTimed(self, feedback, function, *args, **kwargs):  # noqa: N802
        """:meth:`runEngine`, logging the engine's wall time."""
        self.noteFirstCompile(feedback)
        start = time.perf_counter()
        result = self.runEngine(function, *args, **kwargs)
        feedback.pushInfo(self.tr("engine time: {seconds:.3f} s ({name})")
                          .format(seconds=time.perf_counter() - start,
                                  name=function.__name__))
        return result

    # --------------------------------------------------------- raster out

    def rasterDestination(self, parameters, name, context, required=False):  # noqa: N802
        """Path of a raster output, or None when it is not requested.

        The folder is checked now, before any computing, so a bad path
        fails fast and nothing is computed for nothing.
        """
        if not required and not self.isRequested(parameters, name):
            return None
        path = self.parameterAsOutputLayer(parameters, name, context)
        if not path:
            return None
        self.checkWritableFolder(path, name)
        return path

    def sinkRequested(self, parameters, name, context):  # noqa: N802
        """True when a feature sink is requested; checks a file target's folder."""
        if not self.isRequested(parameters, name):
            return False
        value = parameters[name]
        if isinstance(value, QgsProcessingOutputLayerDefinition):
            value = value.sink.valueAsString(context.expressionContext())[0]
        target = str(value)
        if target == QgsProcessing.TEMPORARY_OUTPUT or (
                not os.path.isabs(target) and _PROVIDER_PREFIX.match(target)):
            return True  # memory:, ogr:, postgres: ... checked by QGIS itself
        self.checkWritableFolder(target.split("|")[0], name)
        return True

    def checkWritableFolder(self, path, name):  # noqa: N802
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise QgsProcessingException(self.tr(
                "Cannot write {name} to {path}: the folder {folder} does not "
                "exist; create it or choose another location").format(
                    name=self.parameterLabel(name), path=path, folder=folder))
        if not os.access(folder, os.W_OK):
            raise QgsProcessingException(self.tr(
                "Cannot write {name} to {path}: the folder {folder} is not "
                "writable; choose another location").format(
                    name=self.parameterLabel(name), path=path, folder=folder))

    @staticmethod
    def rasterDriver(path):  # noqa: N802
        """GDAL driver QGIS picks for the path's extension (GTiff by default)."""
        return QgsRasterFileWriter.driverForExtension(
            os.path.splitext(path)[1]) or "GTiff"

    def writeRaster(self, outputs, path, array, raster, projection,  # noqa: N802
                    nodata=None):
        """Write ``array`` on the input's grid in the path's format, under
        a temporary name of ``outputs`` (an :class:`OutputSet`) that its
        commit moves to ``path``.

        A memmap (a tiled result in ``out_dir``) is streamed into a tiled
        GeoTIFF a strip at a time.  Called the old way, without an
        OutputSet (``writeRaster(path, array, raster, projection,
        nodata)``), the one file is written atomically on its own.
        """
        if not isinstance(outputs, OutputSet):  # the old signature
            path, array, raster, projection, nodata = (
                outputs, path, array, raster, projection)
            target = path
        else:
            self.checkCanceled(outputs.feedback)
            target = outputs.rasterPath(path)
        try:
            if isinstance(array, np.memmap):
                return self.runEngine(tiling.write_geotiff, array, target,
                                      raster.geotransform, projection, nodata)
            driver = self.rasterDriver(path)
            return self.runEngine(raster_io.write_raster, target, array,
                                  raster.geotransform, projection,
                                  nodata=nodata, driver_name=driver,
                                  atomic=not isinstance(outputs, OutputSet))
        except QgsProcessingException as error:
            # name the output the user gave, not its temporary name
            raise QgsProcessingException(
                str(error).replace(target, path)) from None

    def moveRaster(self, outputs, source, path):  # noqa: N802
        """Move a finished raster file (e.g. in ``out_dir``) to ``path``
        when ``outputs`` commits."""
        self.checkCanceled(outputs.feedback)
        return self.runEngine(raster_io.move_raster, source,
                              outputs.rasterPath(path))

    # ------------------------------------------------------------- the run

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        """Run :meth:`runAlgorithm` with the failure contract around it:
        stale leftovers of killed runs swept, SIGTERM turned into a cancel,
        every output published together or none (see :class:`OutputSet`)."""
        # numba's one-time set-up overlaps with reading the input
        warmup.prepare_in_background()
        guard = scratch.TerminationGuard(feedback.cancel)
        with guard:
            try:
                self.sweepStale(parameters, context)
                with OutputSet(self, parameters, context, feedback) as outputs:
                    results = self.runAlgorithm(parameters, context, feedback,
                                                outputs)
                    outputs.commit()
            except QgsProcessingException:
                if guard.requested:
                    raise QgsProcessingException(guard.message) from None
                raise
        feedback.setProgress(100)
        return results

    def createSink(self, parameters, name, context, fields, geometry_type, crs):  # noqa: N802
        """A feature sink outside an OutputSet (for adapters not yet on
        :meth:`runAlgorithm`); prefer ``outputs.sink``, checked and atomic."""
        sink, dest_id = self.parameterAsSink(parameters, name, context, fields,
                                             geometry_type, crs)
        if sink is None:
            raise QgsProcessingException(self.invalidSinkError(parameters, name))
        self.setStyle(context, dest_id, self.outputStyle(name))
        return sink, dest_id

    def runAlgorithm(self, parameters, context, feedback, outputs):  # noqa: N802
        """The algorithm proper: returns the results dict (subclasses)."""
        raise NotImplementedError

    def sweepStale(self, parameters, context):  # noqa: N802
        """Remove what runs killed before they could clean up left in the
        scratch root and in this run's output folders."""
        folders = {os.path.dirname(os.path.abspath(path)) for path in
                   checks.output_files(self, parameters, context).values()}
        try:
            folders.add(scratch.scratch_root())
        except GridGraphError:
            pass  # reported when a scratch folder is needed
        removed = scratch.sweep_stale(*sorted(folders))
        if removed:
            QgsMessageLog.logMessage(
                "removed leftovers of killed runs: " + ", ".join(removed),
                "GridGraph")

    def outputStyle(self, name):  # noqa: N802
        """The styles.* post-processor of an output (None: QGIS's default)."""
        return None

    @staticmethod
    def setStyle(context, dest_id, styler):  # noqa: N802
        """Style an output when QGIS loads it on completion."""
        if styler is not None and context.willLoadLayerOnCompletion(dest_id):
            context.layerToLoadOnCompletionDetails(dest_id).setPostProcessor(
                styles.keep(dest_id, styler))

    @staticmethod
    def checkCanceled(feedback):  # noqa: N802
        if feedback is not None and feedback.isCanceled():
            raise QgsProcessingException(
                "cancelled by the user; no output was written")

