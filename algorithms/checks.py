"""Up-front checks shared by every GridGraph algorithm (``checkParameterValues``).

Everything that can be known before computing is refused before computing,
with a message naming the parameter as the user sees it (its label, with
the id in brackets) and the fix:

- an output that is one of the inputs (resolved real paths, a
  ``|layername=`` suffix ignored), two outputs on one file, an output that
  is an existing folder or in a folder that does not exist or is not
  writable;
- a raster output in a format GDAL cannot create, or not for the data type
  the output will have (``.asc``/``.png``/``.jpg`` cannot hold Float64);
- numbers that are NaN or infinite, and a tile size that is not a power of
  two >= 8 or is larger than the raster needs.
"""

import math
import os

from qgis.core import (QgsProcessingDestinationParameter,
                       QgsProcessingParameterFeatureSink,
                       QgsProcessingParameterFeatureSource,
                       QgsProcessingParameterNumber,
                       QgsProcessingParameterRasterDestination,
                       QgsProcessingParameterRasterLayer,
                       QgsProcessingParameterVectorLayer,
                       QgsRasterFileWriter, QgsVectorFileWriter)

from ..core import io as raster_io
from ..core.tiling import MIN_TILE_SIZE
from .outputs import file_target


def label(algorithm, name):
    """``Label [NAME]`` of a parameter, as the dialog and qgis_process show it."""
    definition = algorithm.parameterDefinition(name)
    if definition is None:
        return name
    return f"{definition.description()} [{name}]"


def _real(path):
    return os.path.normcase(os.path.realpath(os.path.abspath(path)))


def input_files(algorithm, parameters, context):
    """{parameter name: real path of the file it reads} of the given inputs."""
    files = {}
    for definition in algorithm.parameterDefinitions():
        name = definition.name()
        if parameters.get(name) in (None, ""):
            continue
        source = None
        if isinstance(definition, QgsProcessingParameterRasterLayer):
            layer = algorithm.parameterAsRasterLayer(parameters, name, context)
            source = layer.source() if layer is not None else None
        elif isinstance(definition, (QgsProcessingParameterFeatureSource,
                                     QgsProcessingParameterVectorLayer)):
            layer = algorithm.parameterAsVectorLayer(parameters, name, context)
            if layer is not None:
                source = layer.source()
            else:
                value = parameters[name]
                source = getattr(getattr(value, "source", None), "staticValue",
                                 lambda: value)()
                source = str(source)
        if source:
            path = str(source).split("|")[0]
            if os.path.exists(path):
                files[name] = _real(path)
    return files


def output_files(algorithm, parameters, context):
    """{parameter name: path} of the requested file outputs (as QGIS will
    write them: a missing extension gets the default one)."""
    files = {}
    for definition in algorithm.destinationParameterDefinitions():
        name = definition.name()
        if not algorithm.isRequested(parameters, name):
            continue
        path = file_target(parameters.get(name), context)
        if path is None:
            continue
        if not os.path.splitext(path)[1] and not os.path.isdir(path) and \
                isinstance(
                definition, QgsProcessingDestinationParameter):
            path = f"{path}.{definition.defaultFileExtension()}"
        files[name] = path
    return files


def check_files(algorithm, parameters, context):
    """(ok, message) for the input and output files."""
    inputs = input_files(algorithm, parameters, context)
    outputs = output_files(algorithm, parameters, context)
    seen = {}
    for name, path in outputs.items():
        real = _real(path)
        for input_name, input_path in inputs.items():
            if real == input_path:
                return False, (
                    f"{label(algorithm, name)} is the same file as "
                    f"{label(algorithm, input_name)} ({path}): writing it "
                    "would destroy the input; choose another output file")
        if real in seen:
            return False, (
                f"{label(algorithm, seen[real])} and {label(algorithm, name)} "
                f"are the same file ({path}): one output would be lost; "
                "give each output its own file")
        seen[real] = name
        if os.path.isdir(path):
            return False, (
                f"{label(algorithm, name)}: {path} is a folder; give a file "
                f"name in it, e.g. {os.path.join(path, 'output.tif')}")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return False, (
                f"{label(algorithm, name)}: the folder {folder} does not "
                "exist; create it or choose another location")
        if not os.access(folder, os.W_OK):
            return False, (
                f"{label(algorithm, name)}: the folder {folder} is not "
                "writable; choose another location")
        problem = format_problem(algorithm, name, path)
        if problem:
            return False, f"{label(algorithm, name)}: {problem}"
    return True, ""


def format_problem(algorithm, name, path):
    """Why GDAL/OGR cannot write ``path`` for output ``name``, or None."""
    definition = algorithm.parameterDefinition(name)
    extension = os.path.splitext(path)[1]
    if isinstance(definition, QgsProcessingParameterRasterDestination):
        driver = QgsRasterFileWriter.driverForExtension(extension) or "GTiff"
        dtype = algorithm.RASTER_OUTPUT_TYPES.get(name)
        if dtype is None:
            return None
        return raster_io.raster_format_problem(driver, dtype)
    if isinstance(definition, QgsProcessingParameterFeatureSink):
        if extension and not QgsVectorFileWriter.driverForExtension(extension):
            return (f"no vector format writes {extension} files; give a "
                    ".gpkg (GeoPackage) or .shp output")
    return None


def check_numbers(algorithm, parameters, context):
    """(ok, message): every number given is finite; the tile size sane."""
    for definition in algorithm.parameterDefinitions():
        name = definition.name()
        if not isinstance(definition, QgsProcessingParameterNumber) or \
                parameters.get(name) in (None, ""):
            continue
        value = algorithm.parameterAsDouble(parameters, name, context)
        if not math.isfinite(value):
            return False, (
                f"{label(algorithm, name)} must be a finite number, got "
                f"{parameters.get(name)!r}")
    return check_tile_size(algorithm, parameters, context)


def check_tile_size(algorithm, parameters, context):
    name = algorithm.TILE_SIZE
    if parameters.get(name) in (None, ""):
        return True, ""
    tile = algorithm.parameterAsInt(parameters, name, context)
    if tile == 0:
        return True, ""
    if tile < MIN_TILE_SIZE or tile & (tile - 1):
        below = 1 << max(tile.bit_length() - 1, 3) if tile > 0 else 8
        return False, (
            f"{label(algorithm, name)} must be a power of two of at least "
            f"{MIN_TILE_SIZE} (or 0 for automatic), got {tile}; try {below} "
            f"or {below * 2}")
    layer = algorithm.parameterAsRasterLayer(parameters, algorithm.INPUT,
                                             context)
    if layer is None:
        return True, ""
    longest = max(layer.width(), layer.height())
    covering = MIN_TILE_SIZE
    while covering < longest:
        covering *= 2
    if tile > covering:
        return False, (
            f"{label(algorithm, name)} {tile} is larger than the raster "
            f"({layer.width()} x {layer.height()} cells), which one tile of "
            f"{covering} already covers; use a tile size of at most "
            f"{covering}, or 0 to let GridGraph choose")
    return True, ""
