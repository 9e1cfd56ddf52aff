"""Raster and geometry I/O through GDAL/OGR: the only engine module that imports it."""

import errno
import gc
import os
import shutil
import sys
import traceback
import zlib
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import scratch
from ._common import as_progress, valid_mask
from .errors import CancelledError, InvalidInputError, RasterReadError

try:
    from osgeo import gdal, ogr, osr
    gdal.UseExceptions()
    ogr.UseExceptions()
except ImportError:  # pragma: no cover - in-memory use needs no GDAL
    gdal = ogr = osr = None

# DEFLATE at level 1 on all cores: a 4096² Float64 raster writes in 0.6 s
# (77 MB) where GDAL's default level took 8 s (76 MB) on a 2-core machine.
GEOTIFF_COMPRESSION = ["COMPRESS=DEFLATE", "ZLEVEL=1", "NUM_THREADS=ALL_CPUS"]
# ...but only where it pays: a continuous Float64 surface (an accumulated
# cost) shrinks by ~20% for ~10x the write time (4096², 2-core box: 1.1 s
# of CPU for 134 -> 107 MB, against 0.09 s uncompressed), while labels,
# directions and NaN-marked areas shrink 5-20x for little more time than
# an uncompressed write.  write_raster compresses a sample of tiles with
# zlib at level 1 first and writes the raster uncompressed when DEFLATE
# would keep more than this share of the bytes.
COMPRESSION_WORTH_RATIO = 0.7
# Sample: up to 4 x 4 tiles of 64 x 64 cells, evenly spread (at most
# 0.5 MB of Float64: 10-16 ms of zlib on the 2-core box; 3 x 3 tiles of
# 256 x 256 took 0.19 s on a Float64 cost surface, zlib being slowest on
# what does not compress).
COMPRESSION_SAMPLE_TILES = 4
COMPRESSION_SAMPLE_SIDE = 64

_GDAL_TYPES = {
    np.dtype(np.uint8): 1, np.dtype(np.uint16): 2, np.dtype(np.int16): 3,
    np.dtype(np.uint32): 4, np.dtype(np.int32): 5, np.dtype(np.float32): 6,
    np.dtype(np.float64): 7,
}
# GDT_Int64 exists from GDAL 3.5 on.
GDAL_INT64 = getattr(gdal, "GDT_Int64", None) if gdal is not None else None
if GDAL_INT64 is not None:
    _GDAL_TYPES[np.dtype(np.int64)] = GDAL_INT64

_INT32 = np.iinfo(np.int32)
# Every integer of at most this magnitude is exact in a float64.
FLOAT64_EXACT_LIMIT = 2**53


@dataclass
class RasterBand:
    """One band read into memory with its georeferencing."""

    array: np.ndarray
    nodata: object
    geotransform: tuple
    projection: str


def _require_gdal():
    if gdal is None:
        raise InvalidInputError(
            "reading a raster path needs GDAL's Python bindings (osgeo); "
            "install python3-gdal or pass a numpy array")


def read_band(path, band=1):
    """Read ``band`` (1-based) of the raster at ``path``.

    A packed band (scale/offset metadata) is unpacked: see :func:`unpack`.
    A damaged file (truncated, changed while being read) raises
    :class:`RasterReadError` naming the file and the band.
    """
    _require_gdal()
    dataset = _open_raster(path)
    if band < 1 or band > dataset.RasterCount:
        raise InvalidInputError(
            f"band {band} does not exist: {path!r} has {dataset.RasterCount} "
            f"band(s); choose a band from 1 to {dataset.RasterCount}")
    raster_band = dataset.GetRasterBand(band)
    nodata = raster_band.GetNoDataValue()
    try:
        with _decoding_threads():
            array = _read_in_bands(dataset, raster_band)
    except RuntimeError as error:
        raise _read_error(path, band, error) from None
    if array is None:
        raise _read_error(path, band, "GDAL returned no data")
    scaling = band_scaling(raster_band)
    if scaling is not None:
        array, nodata = unpack(array, nodata, scaling), None
    return RasterBand(array, nodata, dataset.GetGeoTransform(),
                      dataset.GetProjection())


# Bytes a banded read or write request covers at least (in whole block
# rows): 16 MB keeps GDAL's decoding and compressing threads busy.
IO_BAND_BYTES = 16 << 20


def _band_rows(block_rows, row_bytes):
    """Rows of a band: whole blocks, at least IO_BAND_BYTES."""
    return block_rows * max(1, -(-IO_BAND_BYTES // (block_rows * row_bytes)))


def _write_in_bands(dataset, band, array, flush_each):
    """``band.WriteArray(array)``, a band of block rows at a time with the
    dataset flushed after each when ``flush_each``: GDAL's block cache
    then holds one band of blocks, not a second copy of the raster in
    fresh memory (as :func:`_read_in_bands`).  A MEM dataset (formats
    GDAL only copies into) takes the array whole: its blocks are its
    data."""
    rows = array.shape[0]
    if not flush_each:
        band.WriteArray(array)
        band.FlushCache()
        return
    band_rows = _band_rows(max(1, band.GetBlockSize()[1]),
                           max(1, array.shape[1] * array.dtype.itemsize))
    try:
        for top in range(0, rows, band_rows):
            band.WriteArray(array[top:top + band_rows], 0, top)
            dataset.FlushCache()
    except BaseException as error:
        # the traceback keeps this frame and GDAL's (holding the dataset
        # as ``self``): drop their references so that write_raster's
        # clean-up closes the dataset, quietly, at once
        dataset = band = None  # noqa: F841
        traceback.clear_frames(error.__traceback__)
        raise


def _read_in_bands(dataset, raster_band):
    """The whole band as ReadAsArray gives it, read a band of block rows
    at a time into the one array, dropping GDAL's cached blocks after
    each: a whole-band ReadAsArray decodes every block into GDAL's block
    cache first, fresh memory as large as the raster (4096² Float64: 134
    MB more, 25 000 more page faults; 0.25 s instead of 0.30-0.62 s and
    437 instead of 534 MB peak on the 2-core box at load 2).  Returns
    None when GDAL returns no data."""
    rows, cols = dataset.RasterYSize, dataset.RasterXSize
    block_rows = max(1, raster_band.GetBlockSize()[1])
    first = raster_band.ReadAsArray(0, 0, cols, min(block_rows, rows))
    if first is None or first.shape[0] >= rows:
        return first
    band_rows = _band_rows(block_rows, max(1, cols * first.dtype.itemsize))
    array = np.empty((rows, cols), dtype=first.dtype)
    array[:first.shape[0]] = first
    top = first.shape[0]
    del first
    while top < rows:
        count = min(band_rows, rows - top)
        if raster_band.ReadAsArray(0, top, cols, count,
                                   buf_obj=array[top:top + count]) is None:
            return None
        dataset.FlushCache()
        top += count
    return array


@contextmanager
def _decoding_threads():
    """Let GDAL decode a compressed GeoTIFF's blocks on every core during
    one whole-band read (GDAL >= 3.6; older versions ignore the option).
    Thread-local, so other threads' reads are unaffected.  On the shared
    2-core box (load 2.2) a 4096² Float64 DEFLATE raster read in 0.26 s
    either way (median of 7, interleaved): no core was free; the gain is
    for machines with idle cores."""
    previous = gdal.GetThreadLocalConfigOption("GDAL_NUM_THREADS", None)
    gdal.SetThreadLocalConfigOption("GDAL_NUM_THREADS", "ALL_CPUS")
    try:
        yield
    finally:
        gdal.SetThreadLocalConfigOption("GDAL_NUM_THREADS", previous)


def _open_raster(path):
    try:
        dataset = gdal.Open(os.fspath(path))
    except RuntimeError as error:
        raise RasterReadError(
            f"cannot open raster {path!r}: {error}; check that the file "
            "exists and is a raster GDAL reads") from None
    if dataset is None:
        raise RasterReadError(f"cannot open raster {path!r}")
    return dataset


def _read_error(path, band, error, window=None):
    where = f" (rows {window[0]}..{window[0] + window[2] - 1}, columns " \
        f"{window[1]}..{window[1] + window[3] - 1})" if window else ""
    return RasterReadError(
        f"cannot read band {band} of {path!r}{where}: {error}. The file is "
        "damaged or truncated (or changed while being read): restore or "
        "re-export it, e.g. with gdal_translate, and run again")


def band_scaling(raster_band):
    """(scale, offset) of a packed band, or None when it is not packed."""
    scale = raster_band.GetScale()
    offset = raster_band.GetOffset()
    scale = 1.0 if scale is None else float(scale)
    offset = 0.0 if offset is None else float(offset)
    if scale == 1.0 and offset == 0.0:
        return None
    return scale, offset


def unpack(raw, nodata, scaling):
    """Values of a packed band: ``raw * scale + offset`` in float64.

    Float64 always, not float32: the product of an Int16/Int32 count and
    a decimal scale such as 0.01 is rounded once to the nearest float64,
    as GDAL's own unscaling does, where float32 would round it again
    (0.01 * 12345 is 123.45000000000000284 in float64, 123.44999694824219
    in float32).  Nodata cells (compared on the raw values) become NaN,
    so the unpacked band has no nodata value of its own.
    """
    scale, offset = scaling
    values = raw.astype(np.float64)
    values *= scale
    values += offset
    values[~valid_mask(raw, nodata)] = np.nan
    return values


def int64_storage_dtype(low, high):
    """The dtype an Int64 raster with values in [low, high] is written as.

    Int64 rasters need GDAL >= 3.5 and many readers (QGIS before 3.30
    among them) cannot show them, so: Int32 when every value fits; else
    Float64, exact for magnitudes up to 2**53; else Int64 where GDAL has
    it.  Raises InvalidInputError when no type holds the values exactly
    (past 2**53 with GDAL < 3.5).  Used by :func:`write_raster` and
    :class:`BandWriter`, so the in-memory and the tiled (streamed) outputs
    get the same type for the same values.
    """
    low, high = int(low), int(high)
    if _INT32.min <= low and high <= _INT32.max:
        return np.dtype(np.int32)
    if max(-low, high) <= FLOAT64_EXACT_LIMIT:
        return np.dtype(np.float64)
    if GDAL_INT64 is not None:
        return np.dtype(np.int64)
    raise InvalidInputError(
        f"integer raster values from {low} to {high} do not fit a raster "
        f"type of this GDAL ({gdal.__version__ if gdal else 'none'}): "
        "Float64 is exact only up to 2**53 and Int64 rasters need GDAL >= "
        "3.5; upgrade GDAL or use smaller ids")


def gdal_type_name(dtype):
    """GDAL's name of the raster type a numpy dtype is written as."""
    dtype = np.dtype(dtype)
    if dtype == np.int64:
        dtype = np.dtype(np.int32)  # see int64_storage_dtype
    gdal_type = _GDAL_TYPES.get(dtype)
    if gdal_type is None or gdal is None:
        return str(dtype)
    return gdal.GetDataTypeName(gdal_type)


def raster_format_problem(driver_name, dtype):
    """None when GDAL can write a ``dtype`` raster in ``driver_name``'s
    format; else what is wrong, with the fix (checked before computing)."""
    _require_gdal()
    driver = gdal.GetDriverByName(driver_name)
    if driver is None:
        return (f"GDAL has no raster format {driver_name!r}; give a .tif "
                "(GeoTIFF) output")
    metadata = driver.GetMetadata() or {}
    if metadata.get("DCAP_RASTER") != "YES" or not (
            metadata.get("DCAP_CREATE") == "YES"
            or metadata.get("DCAP_CREATECOPY") == "YES"):
        return (f"GDAL cannot write {driver_name} rasters; give a .tif "
                "(GeoTIFF) output")
    name = gdal_type_name(dtype)
    types = (metadata.get("DMD_CREATIONDATATYPES") or "").split()
    if types and name not in types:
        return (f"the {driver_name} format cannot hold {name} values (it "
                f"takes {', '.join(types)}); give a .tif (GeoTIFF) output")
    return None


def write_raster(path, array, geotransform, projection, nodata=None,
                 driver_name="GTiff", atomic=True):
    """Write a 2-D array as a single-band raster, atomically.

    The file is written beside ``path`` under a hidden temporary name and
    moved into place (with its sidecar files) only when complete, so a
    failure leaves no half-written file; ``atomic=False`` writes ``path``
    itself (a caller's own temporary name).  An int64 array is written
    with :func:`int64_storage_dtype`'s type.  Formats GDAL only copies
    into (AAIGrid, PNG, XYZ...) are written through an in-memory copy.
    A full disk raises :class:`DiskFullError`.
    """
    _require_gdal()
    array = np.asarray(array)
    if array.dtype == np.int64:
        array = array.astype(int64_storage_dtype(
            array.min(initial=0), array.max(initial=0)), copy=False)
    gdal_type = _GDAL_TYPES.get(array.dtype)
    if gdal_type is None:
        raise InvalidInputError(f"cannot write rasters of dtype {array.dtype}")
    directory = _check_folder(path)
    problem = raster_format_problem(driver_name, array.dtype)
    if problem is not None:
        raise InvalidInputError(f"cannot write {path!r}: {problem}")
    driver = gdal.GetDriverByName(driver_name)
    temporary = scratch.temporary_path(path) if atomic else path
    options = []
    if driver_name == "GTiff":
        options = ["TILED=YES", "BIGTIFF=IF_SAFER"]
        if compression_pays(array):
            options = GEOTIFF_COMPRESSION + options
    try:
        with scratch.disk_errors(directory, array.nbytes, path):
            rows, cols = array.shape
            direct = driver.GetMetadataItem("DCAP_CREATE") == "YES"
            target = driver if direct else gdal.GetDriverByName("MEM")
            dataset = target.Create(temporary if direct else "", cols, rows,
                                    1, gdal_type, options if direct else [])
            dataset.SetGeoTransform(geotransform)
            if projection:
                dataset.SetProjection(projection)
            band = dataset.GetRasterBand(1)
            if nodata is not None:
                _set_nodata(band, nodata)
            _write_in_bands(dataset, band, array, direct)
            if not direct:
                copy = driver.CreateCopy(temporary, dataset, 0, options)
                copy.FlushCache()
                copy = None
            band = None
            dataset.FlushCache()
            dataset = None  # close before the move
            _check_written(temporary, path)
            if atomic:
                scratch.publish(temporary, path)
    except BaseException:
        with _quiet_close():
            dataset = band = copy = None
        scratch.discard(temporary)
        raise
    return path


def compression_pays(array):
    """Whether DEFLATE shrinks ``array``'s bytes to at most
    ``COMPRESSION_WORTH_RATIO`` of their size, judged on a sample of tiles
    spread over the raster (compressed with zlib at level 1, as GDAL's
    DEFLATE at ZLEVEL=1).  Only the file's size and write time depend on
    it: the values read back are the same either way."""
    rows, cols = array.shape
    if rows == 0 or cols == 0:
        return True
    side = COMPRESSION_SAMPLE_SIDE
    count = COMPRESSION_SAMPLE_TILES

    def starts(length):
        last = max(length - side, 0)
        return sorted({round(last * k / max(count - 1, 1))
                       for k in range(count)})
    raw = packed = 0
    for row in starts(rows):
        for col in starts(cols):
            tile = np.ascontiguousarray(array[row:row + side,
                                              col:col + side])
            raw += tile.nbytes
            packed += len(zlib.compress(tile.data, 1))
    return packed <= COMPRESSION_WORTH_RATIO * raw


@contextmanager
def _quiet_close():
    """Close the datasets of a failed write without GDAL's error at close
    (the disk is still full) escaping as an "Exception ignored in
    delete_Dataset" traceback on stderr: the file is removed right after,
    and the first error is the one raised."""
    previous = sys.unraisablehook

    def hook(unraisable):
        if not (isinstance(unraisable.exc_value, RuntimeError)
                and "delete_" in repr(unraisable.object)):
            previous(unraisable)
    sys.unraisablehook = hook
    try:
        yield
        gc.collect()
    finally:
        sys.unraisablehook = previous


def _check_folder(path):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InvalidInputError(
            f"cannot write {path!r}: folder {directory!r} does not exist; "
            "create it or choose another output location")
    if not os.access(directory, os.W_OK):
        raise InvalidInputError(
            f"cannot write {path!r}: folder {directory!r} is not writable; "
            "choose another output location")
    return directory


def _check_written(temporary, path):
    """Open the closed file again: GDAL 3.6 reports no error when closing
    a dataset, so a write that failed at close (the disk filled up while
    the last blocks or the directory were flushed) shows only here, as a
    file GDAL cannot open or read to the end."""
    try:
        dataset = gdal.Open(temporary)
        band = dataset.GetRasterBand(1)
        rows, cols = dataset.RasterYSize, dataset.RasterXSize
        band.ReadAsArray(0, rows - 1, cols, 1)
        dataset = band = None
    except RuntimeError as error:
        directory = os.path.dirname(os.path.abspath(temporary))
        free = scratch.free_bytes(directory)
        if free is not None and free < 1 << 20:
            raise scratch.disk_full_error(directory, 0, path) from None
        raise InvalidInputError(
            f"cannot write {path!r}: the file GDAL wrote cannot be read "
            f"back ({error}); check the folder's free space") from None


def move_raster(source, path):
    """Move the finished raster file ``source`` to ``path``, atomically.

    A rename when both lie on one file system; else a copy under a
    temporary name beside ``path``, moved into place when complete, and
    ``source`` removed.  Returns ``path``.
    """
    directory = _check_folder(path)
    try:
        os.replace(source, path)
        return path
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise scratch.write_error(directory, error, 0, path) from None
    temporary = scratch.temporary_path(path)
    try:
        with scratch.disk_errors(directory, os.path.getsize(source), path):
            shutil.copyfile(source, temporary)
        scratch.publish(temporary, path)
    except BaseException:
        scratch.discard(temporary)
        raise
    _remove_quietly(source)
    return path


def _set_nodata(band, nodata):
    # an Int64 band takes its nodata value as an integer (GDAL >= 3.5)
    if GDAL_INT64 is not None and band.DataType == GDAL_INT64:
        band.SetNoDataValue(int(nodata))
    else:
        band.SetNoDataValue(float(nodata))


def _remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def polygonize_labels(labels, geotransform, projection="", connectivity=4):
    """Polygons of a label raster, one (label, WKB) pair per polygon part.

    Uses GDAL's polygonize (with 8-connectedness when ``connectivity`` is 8,
    so diagonal links keep a component in one polygon).  Label 0 is skipped.
    Parts come in GDAL's order; :func:`polygonize_label_file` gives the same
    polygons from a GeoTIFF without loading it.
    """
    _require_gdal()
    labels = np.asarray(labels)
    if labels.dtype != np.int32:
        labels = labels.astype(np.int32 if labels.max(initial=0) < 2**31
                               else np.float64)
    rows, cols = labels.shape
    memory = gdal.GetDriverByName("MEM").Create(
        "", cols, rows, 1, _GDAL_TYPES[labels.dtype])
    memory.SetGeoTransform(geotransform)
    if projection:
        memory.SetProjection(projection)
    band = memory.GetRasterBand(1)
    band.WriteArray(labels)
    mask = gdal.GetDriverByName("MEM").Create("", cols, rows, 1, gdal.GDT_Byte)
    mask.GetRasterBand(1).WriteArray((labels != 0).astype(np.uint8))
    vector = ogr.GetDriverByName("Memory").CreateDataSource("")
    layer = vector.CreateLayer("polygons", geom_type=ogr.wkbPolygon)
    layer.CreateField(ogr.FieldDefn("label", ogr.OFTInteger64))
    gdal.Polygonize(band, mask.GetRasterBand(1), layer, 0,
                    _polygonize_options(connectivity))
    for feature in layer:
        yield int(feature.GetField(0)), bytes(feature.GetGeometryRef().ExportToWkb())


def _polygonize_options(connectivity):
    return ["8CONNECTED=8"] if connectivity == 8 else []


LABEL_POLYGONS_LAYER = "polygons"


def polygonize_label_file(path, polygons_path, connectivity=4,
                          progress=None):
    """Polygonize the label raster at ``path`` without loading it.

    GDAL's polygonize reads the band and its nodata mask a scanline at a
    time, so memory does not grow with the raster.  The label raster must
    have nodata 0 (background and nodata, as the labels are written): the
    mask then keeps exactly the cells :func:`polygonize_labels` keeps, and
    the polygons are the same.  They go to a new GeoPackage at
    ``polygons_path`` (layer ``polygons``, field ``label``, in GDAL's
    order) with an index on the label, read back by
    :func:`read_label_polygons`.  ``progress(fraction)`` returning False
    stops it with CancelledError.  Returns ``polygons_path``.
    """
    _require_gdal()
    progress = as_progress(progress)
    dataset = _open_raster(path)
    band = dataset.GetRasterBand(1)
    if band.GetNoDataValue() != 0:
        raise InvalidInputError(
            f"the label raster {path!r} has nodata {band.GetNoDataValue()}, "
            "not 0: label 0 (background) would be polygonized; write the "
            "labels with nodata 0")
    polygons_path = os.fspath(polygons_path)
    with scratch.disk_errors(os.path.dirname(os.path.abspath(polygons_path)),
                             0, polygons_path):
        vector = ogr.GetDriverByName("GPKG").CreateDataSource(polygons_path)
        layer = vector.CreateLayer(LABEL_POLYGONS_LAYER,
                                   srs=dataset.GetSpatialRef(),
                                   geom_type=ogr.wkbPolygon,
                                   options=["SPATIAL_INDEX=NO"])
        layer.CreateField(ogr.FieldDefn("label", ogr.OFTInteger64))
        # the GeoPackage driver creates the table lazily: made inside the
        # transaction below, a rollback (cancel, write error) would drop it
        # and closing the file would then fail in its destructor
        layer.SyncToDisk()
    cancelled = []

    def report(fraction, message, data):
        try:
            progress(fraction)
        except CancelledError as error:
            cancelled.append(error)
            return 0
        return 1

    # one SQLite transaction: a commit per polygon is 100x slower
    layer.StartTransaction()
    try:
        gdal.Polygonize(band, band.GetMaskBand(), layer, 0,
                        _polygonize_options(connectivity), callback=report)
    except RuntimeError as error:
        try:
            layer.RollbackTransaction()
        except RuntimeError:
            pass
        if cancelled:
            raise cancelled[0] from None
        raise scratch.write_error(os.path.dirname(os.path.abspath(
            polygons_path)), error, 0, polygons_path) from None
    with scratch.disk_errors(os.path.dirname(os.path.abspath(polygons_path)),
                             0, polygons_path):
        layer.CommitTransaction()
        vector.ExecuteSQL(f"CREATE INDEX {LABEL_POLYGONS_LAYER}_label "
                          f"ON {LABEL_POLYGONS_LAYER}(label)")
    layer = vector = band = dataset = None
    progress(1.0)
    return polygons_path


def read_label_polygons(polygons_path):
    """(label, [WKB of each part]) from :func:`polygonize_label_file`'s
    GeoPackage, in ascending label order; a label's parts in the order
    GDAL made them (as :func:`polygonize_labels` yields them).  Reads one
    label at a time through SQLite's index."""
    _require_gdal()
    vector = ogr.Open(os.fspath(polygons_path))
    layer = vector.GetLayerByName(LABEL_POLYGONS_LAYER)
    geometry = layer.GetGeometryColumn()
    result = vector.ExecuteSQL(
        f'SELECT label, "{geometry}" FROM {LABEL_POLYGONS_LAYER} '
        "ORDER BY label, fid")
    try:
        label, parts = None, []
        for feature in result:
            current = int(feature.GetField(0))
            if current != label and parts:
                yield label, parts
                parts = []
            label = current
            parts.append(bytes(feature.GetGeometryRef().ExportToWkb()))
        if parts:
            yield label, parts
    finally:
        vector.ReleaseResultSet(result)
        vector = None


def cell_centre(geotransform, row, col):
    """Map coordinates of the centre of cell (row, col)."""
    x0, dx, rx, y0, ry, dy = geotransform
    return (x0 + (col + 0.5) * dx + (row + 0.5) * rx,
            y0 + (col + 0.5) * ry + (row + 0.5) * dy)


# little-endian WKB of a 2D two-point LineString: byte order, type 2,
# two points, then x0 y0 x1 y1
_SEGMENT_WKB = np.dtype([("order", "u1"), ("type", "<u4"), ("points", "<u4"),
                         ("xy", "<f8", (4,))])


def segment_wkb(xs, ys):
    """WKB of the two-point lines (xs[i, 0], ys[i, 0]) -> (xs[i, 1], ys[i, 1]).

    Returns (buffer, size): line i is ``buffer[i * size:(i + 1) * size]``.
    Built in one pass with numpy, so that making many line features costs
    one geometry call each instead of a list conversion per vertex.
    """
    lines = np.empty(len(xs), dtype=_SEGMENT_WKB)
    lines["order"] = 1
    lines["type"] = 2
    lines["points"] = 2
    lines["xy"][:, 0] = xs[:, 0]
    lines["xy"][:, 1] = ys[:, 0]
    lines["xy"][:, 2] = xs[:, 1]
    lines["xy"][:, 3] = ys[:, 1]
    return lines.tobytes(), _SEGMENT_WKB.itemsize


def world_to_cell(geotransform, x, y):
    """(row, col) of the cell containing map point (x, y); may lie outside."""
    inverse = gdal.InvGeoTransform(geotransform) if gdal else None
    if inverse is None:
        x0, dx, _, y0, _, dy = geotransform
        return int(np.floor((y - y0) / dy)), int(np.floor((x - x0) / dx))
    px = inverse[0] + inverse[1] * x + inverse[2] * y
    py = inverse[3] + inverse[4] * x + inverse[5] * y
    return int(np.floor(py)), int(np.floor(px))


class BandReader:
    """One band of a raster opened for window reads (the tiled path).

    A packed band is unpacked as :func:`read_band` unpacks it (``dtype``
    is then float64 and ``nodata`` None), and a damaged file raises
    :class:`RasterReadError` naming the file, band and window.
    """

    def __init__(self, path, band=1):
        _require_gdal()
        self.path = os.fspath(path)
        self._dataset = _open_raster(self.path)
        count = self._dataset.RasterCount
        if band < 1 or band > count:
            raise InvalidInputError(
                f"band {band} does not exist: {path!r} has {count} band(s); "
                f"choose a band from 1 to {count}")
        self.band = band
        self._band = self._dataset.GetRasterBand(band)
        self.shape = (self._dataset.RasterYSize, self._dataset.RasterXSize)
        self.nodata = self._band.GetNoDataValue()
        self._scaling = band_scaling(self._band)
        self._raw_nodata = self.nodata
        if self._scaling is None:
            self.dtype = np.dtype(gdal_array_type(self._band.DataType))
        else:
            self.dtype, self.nodata = np.dtype(np.float64), None
        self.geotransform = self._dataset.GetGeoTransform()
        self.projection = self._dataset.GetProjection()

    def close(self):
        """Release the GDAL dataset (reads fail afterwards)."""
        self._band = self._dataset = None

    def read(self, row, col, rows, cols):
        """Cells [row, row + rows) x [col, col + cols) as a new array."""
        try:
            block = self._band.ReadAsArray(col, row, cols, rows)
        except RuntimeError as error:
            raise _read_error(self.path, self.band, error,
                              (row, col, rows, cols)) from None
        if block is None:
            raise _read_error(self.path, self.band, "GDAL returned no data",
                              (row, col, rows, cols))
        if self._scaling is not None:
            block = unpack(block, self._raw_nodata, self._scaling)
        return block


def gdal_array_type(gdal_type):
    """The numpy dtype GDAL's ReadAsArray returns for a GDAL data type."""
    from osgeo import gdal_array
    return gdal_array.GDALTypeCodeToNumericTypeCode(gdal_type)


def open_band(path, band=1):
    """A :class:`BandReader` on ``band`` of the raster at ``path``."""
    return BandReader(path, band)


class BandWriter:
    """A single-band tiled GeoTIFF written window by window.

    Written under a temporary name beside ``path`` and moved into place by
    :meth:`close`; :meth:`abort` removes it.  BigTIFF is used when the
    uncompressed size could pass 4 GB.

    An int64 raster is stored as :func:`int64_storage_dtype` picks for
    ``value_range`` (its (min, max), e.g. from a first pass over the
    data), as :func:`write_raster` stores the same array; without a range
    it is stored as Float64 and values past 2**53 are refused.
    :meth:`write` refuses a block outside the range instead of wrapping
    or rounding it.
    """

    def __init__(self, path, shape, dtype, geotransform=None, projection="",
                 nodata=None, block_size=256, value_range=None):
        _require_gdal()
        dtype = np.dtype(dtype)
        self._range = None
        if dtype == np.int64:
            if value_range is None:
                value_range = (-FLOAT64_EXACT_LIMIT, FLOAT64_EXACT_LIMIT)
            self._range = (int(value_range[0]), int(value_range[1]))
            dtype = int64_storage_dtype(*self._range)
        gdal_type = _GDAL_TYPES.get(dtype)
        if gdal_type is None:
            raise InvalidInputError(f"cannot write rasters of dtype {dtype}")
        self.dtype = dtype
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise InvalidInputError(
                f"cannot write {path!r}: folder {directory!r} does not exist "
                "or is not writable; choose another output location")
        self.path = path
        self._temporary = scratch.temporary_path(path)
        rows, cols = shape
        self._needed = rows * cols * dtype.itemsize
        big = self._needed > 3.5 * 2**30
        options = GEOTIFF_COMPRESSION + [
                   "TILED=YES", f"BLOCKXSIZE={block_size}", f"BLOCKYSIZE={block_size}",
                   "BIGTIFF=YES" if big else "BIGTIFF=IF_SAFER"]
        try:
            with self._errors():
                self._dataset = gdal.GetDriverByName("GTiff").Create(
                    self._temporary, cols, rows, 1, gdal_type, options)
                if geotransform is not None:
                    self._dataset.SetGeoTransform(geotransform)
                if projection:
                    self._dataset.SetProjection(projection)
                self._band = self._dataset.GetRasterBand(1)
                if nodata is not None:
                    _set_nodata(self._band, nodata)
        except BaseException:
            self.abort()
            raise

    def _errors(self):
        return scratch.disk_errors(os.path.dirname(os.path.abspath(self.path)),
                                   self._needed, self.path)

    def write(self, row, col, block):
        """Write ``block`` with its top-left cell at (row, col)."""
        block = np.asarray(block)
        if self._range is not None and block.size and (
                block.min() < self._range[0] or block.max() > self._range[1]):
            raise InvalidInputError(
                f"values from {block.min()} to {block.max()} in the window "
                f"at row {row}, column {col} lie outside the declared range "
                f"{self._range} of {self.path!r}; pass the data's true range")
        with self._errors():
            self._band.WriteArray(block.astype(self.dtype, copy=False), col,
                                  row)

    def close(self, publish=True):
        """Flush and move the file into place; returns its path.

        ``publish=False`` leaves it under its temporary name (returned) for
        a caller that moves several outputs into place together.
        """
        try:
            with self._errors():
                self._band.FlushCache()
                self._dataset.FlushCache()
                self._band = self._dataset = None
            _check_written(self._temporary, self.path)
            if not publish:
                return self._temporary
            scratch.publish(self._temporary, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self):
        """Drop the partial file."""
        with _quiet_close():
            self._band = self._dataset = None
        scratch.discard(self._temporary)
