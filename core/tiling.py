"""Block-hierarchy infrastructure: tile grid, Morton order, windowed raster
sources and sinks, scratch folders, the memory budget and the executor hook.

The tiled (out-of-core) versions of the operations (``<operation>/tiled.py``)
cut the raster into square tiles of side 2**k, visit them in Morton (z-)
order and run per-tile work as pure functions of (raster source, window,
parameters) that return small messages (docs/architecture.md).

Sources and sinks never hold a whole raster: a numpy memmap (or a ``.npy``
file) is read with ``pread`` so the pages never enter this process's resident
set, a GDAL raster is read and written window by window, and outputs are
written to ``.npy`` files with ``pwrite`` and handed back as read-only
memmaps.  Nothing here imports GDAL; paths go through :mod:`.io`.
"""

import math
import os
import shutil
import tempfile
import threading
import weakref
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from numba import njit

from . import distributed
from ._common import Progress, as_raster_array, check_number, is_number
from .errors import InvalidInputError

MIN_TILE_SIZE = 8
# Largest automatic tile: 16M cells keeps per-tile kernels fast and their
# memory in the hundreds of MB; a forced TILE_SIZE may be larger.
MAX_AUTO_TILE_SIZE = 4096
# Share of the available RAM used when no memory limit is given.
DEFAULT_MEMORY_SHARE = 0.5
# Environment variable naming the folder where scratch folders are created.
SCRATCH_ENV = "GRIDGRAPH_SCRATCH_DIR"


# --------------------------------------------------------------------------
# options


def check_tile_size(tile_size):
    """Return ``tile_size`` as an int, or None for automatic (None or 0).

    A tile size is a power of two >= 8 (the hierarchy halves blocks down to
    tiles and needs square power-of-two blocks).
    """
    if tile_size is None:
        return None
    try:
        value = int(tile_size)
    except (TypeError, ValueError):
        value = None
    if value is None or value != tile_size:
        raise InvalidInputError(
            f"tile_size must be an integer power of two >= {MIN_TILE_SIZE} "
            f"(or 0 / None for automatic), got {tile_size!r}")
    if value == 0:
        return None
    if value < MIN_TILE_SIZE or value & (value - 1):
        below = 1 << max(value.bit_length() - 1, 3) if value > 0 else 8
        raise InvalidInputError(
            f"tile_size must be a power of two >= {MIN_TILE_SIZE} (or 0 for "
            f"automatic), got {value}; try {below} or {below * 2}")
    return value


def available_memory_bytes():
    """Memory this process may still use: MemAvailable on Linux."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 4 << 30


def memory_limit_bytes(memory_limit_mb):
    """The memory budget in bytes: ``memory_limit_mb`` or a safe share of RAM."""
    if memory_limit_mb in (None, 0):
        return int(available_memory_bytes() * DEFAULT_MEMORY_SHARE)
    if not memory_limit_mb > 0:
        raise InvalidInputError(
            f"memory_limit_mb must be positive (or 0 / None for automatic), "
            f"got {memory_limit_mb!r}")
    return int(float(memory_limit_mb) * 2**20)


def executor_workers(executor):
    """How many tile tasks may run at once under ``executor``: 1 in-process,
    the pool's workers, or a Dask cluster's threads (asked of the
    scheduler)."""
    if executor is None:
        return 1
    if distributed.is_distributed(executor):
        with distributed.client_for(executor) as client:
            return distributed.cluster_threads(client)
    return max(1, int(getattr(executor, "_max_workers", 1) or 1))


def check_executor(executor):
    """Accept None (in-process), a :class:`concurrent.futures.Executor`, a
    ``dask.distributed.Client`` or a scheduler address."""
    if executor is None or isinstance(executor, Executor) or \
            distributed.is_dask_client(executor):
        return executor
    if isinstance(executor, str):
        return distributed.check_address(executor)
    raise InvalidInputError(
        "executor must be None (run in this process), a concurrent.futures "
        "executor (e.g. ThreadPoolExecutor), a dask.distributed.Client or a "
        f"Dask scheduler address such as 'tcp://host:8786', got "
        f"{type(executor).__name__}")


def check_unsupported_scale_options(tile_size, memory_limit_mb, executor,
                                    tiled=False):
    """Check the block-hierarchy options: ``tile_size`` a power of two >= 8
    (None or 0: automatic), ``memory_limit_mb`` positive (None or 0: a safe
    share of RAM), ``executor`` None or a concurrent.futures executor (a
    Dask client or scheduler address is not available yet).  Operations
    without a tiled path yet (``tiled=False``) reject tile_size and
    executor instead of ignoring them."""
    if tile_size is not None and not (is_number(tile_size)
                                      and np.isfinite(float(tile_size))):
        raise InvalidInputError(
            f"tile_size must be an integer power of two >= 8 (or 0 / None "
            f"for automatic), got {tile_size!r}")
    if not tiled:
        if tile_size not in (None, 0):
            raise InvalidInputError(
                "tiled processing (tile_size) is not available yet for this "
                "operation: leave tile_size unset (0) to process the raster "
                "in memory")
        if executor is not None:
            raise InvalidInputError(
                "executors are not available yet for this operation: leave "
                "it empty to run in this process")
    check_tile_size(tile_size)
    check_executor(executor)
    # 2**30 MB (1 PB) is past any machine's memory: a larger number is a slip
    check_number("memory_limit_mb", memory_limit_mb, minimum=0,
                 maximum=2**30)


# --------------------------------------------------------------------------
# tile grid


@dataclass(frozen=True)
class Window:
    """A rectangle of cells: first row and column, and its size."""

    row: int
    col: int
    rows: int
    cols: int

    @property
    def slices(self):
        """``(row_slice, col_slice)`` of the window in the full raster."""
        return (slice(self.row, self.row + self.rows),
                slice(self.col, self.col + self.cols))


def morton_key(tile_row, tile_col):
    """Z-order key of a tile: the bits of row and column interleaved."""
    key = 0
    bit = 0
    while tile_row >> bit or tile_col >> bit:
        key |= ((tile_col >> bit) & 1) << (2 * bit)
        key |= ((tile_row >> bit) & 1) << (2 * bit + 1)
        bit += 1
    return key


class TileGrid:
    """Square tiles of side ``tile_size`` covering a raster of ``shape``.

    Tiles on the last row / column are cut short when the raster is not a
    multiple of the tile size.  ``levels`` is the height of the quadtree of
    blocks of 2**h x 2**h tiles that covers the grid.
    """

    def __init__(self, shape, tile_size):
        rows, cols = (int(v) for v in shape)
        self.shape = (rows, cols)
        self.tile_size = int(tile_size)
        self.tile_rows = max(1, -(-rows // self.tile_size))
        self.tile_cols = max(1, -(-cols // self.tile_size))
        side = max(self.tile_rows, self.tile_cols)
        self.levels = max(0, (side - 1).bit_length())

    def __repr__(self):
        return (f"TileGrid(shape={self.shape}, tile_size={self.tile_size}, "
                f"tiles={self.tile_rows}x{self.tile_cols})")

    @property
    def count(self):
        """Number of tiles."""
        return self.tile_rows * self.tile_cols

    def window(self, tile_row, tile_col):
        """The cells of tile (tile_row, tile_col)."""
        size = self.tile_size
        row, col = tile_row * size, tile_col * size
        return Window(row, col, min(size, self.shape[0] - row),
                      min(size, self.shape[1] - col))

    def index(self, tile_row, tile_col):
        """Row-major number of a tile."""
        return tile_row * self.tile_cols + tile_col

    def morton_order(self):
        """(tile_row, tile_col) of every tile in Morton (z-) order."""
        tiles = [(r, c) for r in range(self.tile_rows)
                 for c in range(self.tile_cols)]
        tiles.sort(key=lambda rc: morton_key(*rc))
        return tiles


def auto_tile_size(shape, limit_bytes, tile_bytes_per_cell, workers=1,
                   share=0.25):
    """Largest power-of-two tile whose working set fits ``share`` of the
    budget (per concurrent worker), at least 8 and at most 4096."""
    budget = limit_bytes * share / max(1, workers)
    side = int(math.sqrt(max(budget / max(tile_bytes_per_cell, 1), 64)))
    size = 1 << max(3, side.bit_length() - 1)
    size = min(size, MAX_AUTO_TILE_SIZE)
    # no point in tiles much larger than the raster
    longest = max(shape)
    while size > MIN_TILE_SIZE and size // 2 >= longest:
        size //= 2
    return max(MIN_TILE_SIZE, size)


@dataclass
class TiledPlan:
    """What the tiled path of an operation needs: the opened source, the
    tile grid and the memory budget in bytes."""

    source: object
    grid: TileGrid
    limit_bytes: int


def plan_for(values, band, tile_size, memory_limit_mb, executor,
             in_memory_bytes_per_cell, tile_bytes_per_cell, tile_share=0.25):
    """Open ``values`` and :func:`plan` it: a :class:`TiledPlan`, or None
    when the raster is processed in memory.

    Small arrays never reach GDAL or the file checks: an ndarray that is
    not a memmap and fits the limit goes straight back to the in-memory
    path.  With a Dask executor the raster is always tiled (the tiles run
    on the cluster) and must be a file the workers can open.
    """
    on_cluster = distributed.is_distributed(executor)
    if on_cluster:
        refuse_in_memory(values)
    elif tile_size in (None, 0) and isinstance(values, np.ndarray) and \
            not isinstance(values, np.memmap) and values.ndim == 2:
        limit = memory_limit_bytes(memory_limit_mb)
        if values.size * in_memory_bytes_per_cell <= limit:
            return None
    source = open_source(values, band)
    if on_cluster:
        refuse_in_memory(source)
    grid = plan(source.shape, tile_size, memory_limit_mb,
                in_memory_bytes_per_cell, tile_bytes_per_cell, executor,
                tile_share)
    if grid is None:
        return None
    return TiledPlan(source, grid, memory_limit_bytes(memory_limit_mb))


def refuse_in_memory(values):
    """Raise when ``values`` (an array or a source) lives only in this
    process's memory: Dask workers could not read it."""
    if isinstance(values, ArraySource) or (
            isinstance(values, np.ndarray)
            and not isinstance(values, np.memmap)):
        raise InvalidInputError(
            "an in-memory array cannot be processed on a Dask cluster (it "
            "would be copied into every task): write it to a file the "
            "workers can open (a GeoTIFF, or a .npy file opened with "
            "np.load(path, mmap_mode='r')) on shared storage, or run "
            "without a Dask scheduler")


def plan(shape, tile_size, memory_limit_mb, in_memory_bytes_per_cell,
         tile_bytes_per_cell, executor=None, tile_share=0.25):
    """Decide between the in-memory and the tiled path.

    Returns None for the in-memory path, else the :class:`TileGrid` to use.
    The tiled path is taken when ``tile_size`` forces it, when the
    in-memory run (about ``in_memory_bytes_per_cell`` per cell) would not
    fit the memory limit, or when the executor is a Dask cluster.  Automatic
    tiles are sized from the memory of one task: the driver's budget shared
    by the pool's workers, or the smallest memory limit per thread of the
    cluster's workers (and ``memory_limit_mb`` when it is lower).
    """
    tile_size = check_tile_size(tile_size)
    check_executor(executor)
    limit = memory_limit_bytes(memory_limit_mb)
    cells = int(shape[0]) * int(shape[1])
    if not distributed.is_distributed(executor):
        if tile_size is None:
            if cells * in_memory_bytes_per_cell <= limit:
                return None
            tile_size = auto_tile_size(shape, limit, tile_bytes_per_cell,
                                       executor_workers(executor), tile_share)
        return TileGrid(shape, tile_size)
    with distributed.client_for(executor) as client:
        threads = distributed.cluster_threads(client)
        per_thread = distributed.memory_per_thread(client)
    if tile_size is None:
        task_bytes = limit / threads if per_thread is None else (
            per_thread if memory_limit_mb in (None, 0)
            else min(per_thread, limit))
        tile_size = auto_tile_size(shape, task_bytes, tile_bytes_per_cell, 1,
                                   tile_share)
    return TileGrid(shape, tile_size)


# --------------------------------------------------------------------------
# sources


def load_raster(values, band=1):
    """Return ``(array, nodata)`` for a 2-D array, memmap or GDAL raster path.

    Arrays are returned as they are (no copy); a path is read through
    :mod:`gridgraph.core.io`, and its band's nodata value is returned so the
    caller can combine it with an explicit ``nodata``.
    """
    if isinstance(values, (str, os.PathLike)):
        from . import io  # GDAL is only needed for paths
        raster = io.read_band(os.fspath(values), band)
        return raster.array, raster.nodata
    return as_raster_array(values), None


class ArraySource:
    """A raster held in memory (a plain numpy array)."""

    def __init__(self, array, nodata=None):
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.nodata = nodata

    def read(self, window):
        """A fresh C-contiguous copy of the window."""
        return np.array(self.array[window.slices], order="C")

    def close(self):
        pass


class FileArraySource:
    """A raster stored row-major in a file (a numpy memmap's file).

    Rows of a window are read with ``os.preadv`` into a fresh array, so
    reading never maps the file into this process: the resident set holds
    only the windows in use, whatever the raster's size.
    """

    def __init__(self, path, dtype, shape, offset, row_stride, nodata=None):
        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(v) for v in shape)
        self.offset = int(offset)
        self.row_stride = int(row_stride)
        self.nodata = nodata
        self._fd = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"] = None  # reopened on the other side
        return state

    def _descriptor(self):
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
            weakref.finalize(self, os.close, self._fd)
        return self._fd

    def read(self, window):
        """The window as a new C-contiguous array."""
        block = np.empty((window.rows, window.cols), dtype=self.dtype)
        if block.size == 0:
            return block
        fd = self._descriptor()
        itemsize = self.dtype.itemsize
        row_bytes = window.cols * itemsize
        full_rows = (window.col == 0 and window.cols == self.shape[1]
                     and self.row_stride == row_bytes)
        start = self.offset + window.row * self.row_stride + window.col * itemsize
        flat = block.reshape(-1).view(np.uint8)
        if full_rows:
            _pread_exact(fd, flat, start)
        else:
            for r in range(window.rows):
                _pread_exact(fd, flat[r * row_bytes:(r + 1) * row_bytes],
                             start + r * self.row_stride)
        return block

    def close(self):
        pass


def _pread_exact(fd, buffer, offset):
    view = memoryview(buffer)
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise InvalidInputError(
                f"raster file ended early at byte {offset + done}: the file "
                "is shorter than its shape and dtype say")
        done += n


class GdalSource:
    """A band of a raster GDAL opens, read window by window.

    GDAL datasets must not be shared between threads, so each thread
    (a thread pool's tile tasks) reads through its own handle, opened on
    its first read; a pickled copy (a process pool, Dask) reopens too.
    Packed bands come back unpacked (see :class:`.io.BandReader`).
    """

    def __init__(self, path, band=1, nodata=None):
        from . import io
        self.path = os.fspath(path)
        self.band = band
        reader = io.open_band(self.path, band)
        self.shape = reader.shape
        self.dtype = reader.dtype
        self.nodata = reader.nodata if nodata is None else nodata
        self.geotransform = reader.geotransform
        self.projection = reader.projection
        self._local = threading.local()
        self._local.reader = reader

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def read(self, window):
        """The window as a new array (through GDAL's RasterIO)."""
        reader = getattr(self._local, "reader", None)
        if reader is None:
            from . import io
            reader = self._local.reader = io.open_band(self.path, self.band)
        return reader.read(window.row, window.col, window.rows, window.cols)

    def close(self):
        self._local = threading.local()


def open_source(values, band=1):
    """A raster source for an array, a memmap or a GDAL path.

    A numpy memmap whose rows are contiguous in its file is read from the
    file with ``pread`` (see :class:`FileArraySource`); another array is
    sliced in memory.  The source's ``nodata`` is the band's for a path,
    else None.
    """
    if isinstance(values, (str, os.PathLike)):
        return GdalSource(values, band)
    if isinstance(values, np.memmap):
        source = _file_source(values)
        if source is not None:
            return source
    return ArraySource(as_raster_array(values))


def _file_source(memmap):
    """A FileArraySource over ``memmap``'s file, or None when its layout
    (a view with a column step, a negative stride, no file) does not allow
    reading rows straight from the file."""
    import mmap
    if memmap.ndim != 2 or memmap.filename is None:
        return None
    base = memmap
    while isinstance(getattr(base, "base", None), np.memmap):
        base = base.base
    handle = getattr(base, "_mmap", None)
    if handle is None:
        return None
    itemsize = memmap.dtype.itemsize
    if memmap.strides[1] != itemsize or memmap.strides[0] < 0 or \
            (memmap.shape[0] > 1 and memmap.strides[0] < memmap.shape[1] * itemsize):
        return None
    if not memmap.dtype.isnative or memmap.dtype.kind not in "iuf":
        return None
    try:
        start_of_map = np.frombuffer(handle, dtype=np.uint8, count=1).ctypes.data
    except (TypeError, ValueError):
        return None
    map_offset = memmap.offset - memmap.offset % mmap.ALLOCATIONGRANULARITY
    file_offset = map_offset + (memmap.ctypes.data - start_of_map)
    return FileArraySource(memmap.filename, memmap.dtype, memmap.shape,
                           file_offset, memmap.strides[0])


def reopen_source(source):
    """(shape, dtype) of ``source`` opened afresh from its path, after
    reading its first cell: what a Dask worker's preflight checks."""
    if isinstance(source, GdalSource):
        from . import io
        reader = io.open_band(source.path, source.band)
        shape, dtype = reader.shape, reader.dtype
    elif isinstance(source, FileArraySource):
        size = os.stat(source.path).st_size
        rows, cols = source.shape
        needed = source.offset + max(rows - 1, 0) * source.row_stride \
            + cols * source.dtype.itemsize
        if rows and cols and size < needed:
            raise InvalidInputError(
                f"the file holds {size} bytes, {needed} are needed")
        shape, dtype = source.shape, source.dtype
    else:
        raise InvalidInputError("an in-memory raster has no path to open")
    if shape[0] and shape[1]:
        # on a worker the source arrived pickled, without the driver's
        # handle: this read opens the file there
        source.read(Window(0, 0, 1, 1))
    return tuple(shape), np.dtype(dtype)


# --------------------------------------------------------------------------
# sinks


class ArraySink:
    """Collects windows into an array held in memory."""

    def __init__(self, shape, dtype, fill=0):
        self.array = np.full(shape, fill, dtype=dtype)

    def write(self, window, block):
        self.array[window.slices] = block

    def finish(self):
        return self.array

    def abort(self):
        self.array = None


class NpySink:
    """Writes windows into a ``.npy`` file with ``pwrite``.

    The file is created at full size up front (sparse: unwritten cells read
    as zero) under a temporary name; :meth:`finish` moves it into place and
    returns it as a read-only memmap, which maps pages only when the caller
    touches them.  :meth:`abort` removes the temporary file and leaves any
    older file at ``path`` alone.
    """

    def __init__(self, path, shape, dtype):
        self.path = os.fspath(path)
        self.shape = tuple(int(v) for v in shape)
        self.dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype),
                  "fortran_order": False, "shape": self.shape}
        handle, self.partial = tempfile.mkstemp(
            prefix="." + os.path.basename(self.path) + ".",
            suffix=".partial", dir=os.path.dirname(os.path.abspath(self.path)))
        os.close(handle)
        with open(self.partial, "wb") as handle:
            try:
                np.lib.format.write_array_header_1_0(handle, header)
            except ValueError:  # a header past 64 KiB needs version 2
                handle.seek(0)
                np.lib.format.write_array_header_2_0(handle, header)
            self.offset = handle.tell()
            handle.truncate(self.offset + self.dtype.itemsize
                            * self.shape[0] * self.shape[1])
        self._fd = os.open(self.partial, os.O_WRONLY)

    def __getstate__(self):
        # a copy in a worker process opens the partial file per write
        # (never creating it: after an abort the write fails instead of
        # leaving a file behind); writes of a window are idempotent, so a
        # retried task may write it again
        state = dict(self.__dict__)
        state["_fd"] = None
        return state

    def write(self, window, block):
        from . import scratch  # a full disk: DiskFullError naming the folder
        with scratch.disk_errors(os.path.dirname(self.partial),
                                 self.dtype.itemsize * self.shape[0]
                                 * self.shape[1], self.path):
            if self._fd is None:
                fd = os.open(self.partial, os.O_WRONLY)
                try:
                    self._write(fd, window, block)
                finally:
                    os.close(fd)
            else:
                self._write(self._fd, window, block)

    def _write(self, fd, window, block):
        block = np.ascontiguousarray(block, dtype=self.dtype)
        itemsize = self.dtype.itemsize
        row_stride = self.shape[1] * itemsize
        start = self.offset + window.row * row_stride + window.col * itemsize
        flat = block.reshape(-1).view(np.uint8)
        row_bytes = window.cols * itemsize
        if window.col == 0 and window.cols == self.shape[1]:
            _pwrite_exact(fd, flat, start)
            return
        for r in range(window.rows):
            _pwrite_exact(fd, flat[r * row_bytes:(r + 1) * row_bytes],
                          start + r * row_stride)

    def finish(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        os.replace(self.partial, self.path)
        if self.shape[0] * self.shape[1] == 0:
            return np.load(self.path)  # an empty file cannot be mapped
        return np.load(self.path, mmap_mode="r")

    def abort(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.remove(self.partial)
        except OSError:
            pass


def _pwrite_exact(fd, buffer, offset):
    view = memoryview(buffer)
    done = 0
    while done < len(view):
        done += os.pwritev(fd, [view[done:]], offset + done)


class NpyFile:
    """Reads ranges of rows (first-axis entries) of a ``.npy`` file with
    ``pread``, without mapping it."""

    def __init__(self, path):
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(handle)
            else:
                header = np.lib.format.read_array_header_2_0(handle)
            self.offset = handle.tell()
        self.shape, fortran_order, self.dtype = header
        if fortran_order:
            raise InvalidInputError(f"{path!r} is in Fortran order")
        self.row_items = int(np.prod(self.shape[1:], dtype=np.int64))
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, start, stop):
        """Entries ``start:stop`` along the first axis, as a new array."""
        block = np.empty((stop - start,) + tuple(self.shape[1:]),
                         dtype=self.dtype)
        if block.size:
            row_bytes = self.row_items * self.dtype.itemsize
            _pread_exact(self._fd, block.reshape(-1).view(np.uint8),
                         self.offset + start * row_bytes)
        return block

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def make_sink(out_dir, name, shape, dtype, fill=0):
    """An :class:`NpySink` for ``out_dir/name.npy``, or an in-memory
    :class:`ArraySink` when ``out_dir`` is None."""
    if out_dir is None:
        return ArraySink(shape, dtype, fill)
    return NpySink(os.path.join(os.fspath(out_dir), name + ".npy"), shape,
                   dtype)


def check_out_dir(out_dir, output_bytes, limit_bytes):
    """Validate ``out_dir``; without one, the outputs must fit in memory."""
    if out_dir is None:
        if output_bytes > limit_bytes:
            raise InvalidInputError(
                f"the outputs of this tiled run take {output_bytes / 2**20:.0f} "
                f"MB, more than the memory limit of {limit_bytes / 2**20:.0f} "
                "MB: pass out_dir= (a folder) to write them to .npy files "
                "returned as memmaps, or raise memory_limit_mb")
        return None
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise InvalidInputError(
            f"out_dir {out_dir!r} is not a folder: create it first")
    if not os.access(out_dir, os.W_OK):
        raise InvalidInputError(
            f"out_dir {out_dir!r} is not writable: choose another folder")
    return out_dir


def write_geotiff(array, path, geotransform=None, projection="",
                  nodata=None, strip_rows=None):
    """Copy a 2-D array or memmap (e.g. a tiled result) into a tiled
    GeoTIFF, a strip of rows at a time (BigTIFF when it could pass 4 GB).

    A memmap is read from its file with ``pread``, so the copy's memory is
    one strip whatever the raster's size.  An int64 array gets the GeoTIFF
    type :func:`.io.write_raster` gives the same values in memory (Int32
    when they fit; see :func:`.io.int64_storage_dtype`), from a first pass
    over the strips for their range.  Returns ``path``.
    """
    from . import io
    source = open_source(array)
    rows, cols = source.shape
    if strip_rows is None:
        strip_rows = max(1, (64 << 20) // max(1, cols * source.dtype.itemsize))
    windows = [Window(top, 0, min(strip_rows, rows - top), cols)
               for top in range(0, rows, strip_rows)]
    value_range = None
    if source.dtype == np.int64:
        low, high = 0, 0  # the in-memory rule's initial=0
        for window in windows:
            block = source.read(window)
            if block.size:
                low, high = min(low, int(block.min())), max(high,
                                                            int(block.max()))
        value_range = (low, high)
    writer = io.BandWriter(path, (rows, cols), source.dtype, geotransform,
                           projection, nodata, value_range=value_range)
    try:
        for window in windows:
            writer.write(window.row, 0, source.read(window))
        return writer.close()
    except BaseException:
        writer.abort()
        raise


@contextmanager
def output_sinks(sinks):
    """Finish nothing, but remove every sink's partial file on an error."""
    try:
        yield sinks
    except BaseException:
        for sink in sinks:
            sink.abort()
        raise


# --------------------------------------------------------------------------
# scratch


@contextmanager
def scratch_folder(parent=None):
    """A temporary folder for per-tile scratch, removed on success, failure
    and cancel.  It is made in $GRIDGRAPH_SCRATCH_DIR when set, else in
    ``parent`` (the caller's output folder), else in the system temporary
    folder, and named after this process (:mod:`.scratch`) so that the
    next run removes it when this one is killed before it could."""
    from . import scratch
    parent = os.environ.get(SCRATCH_ENV) or parent or None
    if parent is not None and not os.path.isdir(parent):
        raise InvalidInputError(
            f"scratch folder parent {parent!r} does not exist: create it or "
            f"unset {SCRATCH_ENV}")
    folder = scratch.make_run_folder("scratch", parent)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class ScratchStore:
    """Per-tile arrays kept in memory up to ``budget_bytes``, beyond it in
    files of the scratch folder.

    One file per key holds its arrays back to back (raw bytes, the layout
    kept here), so a spill costs one file creation and reads need no
    header parsing; :meth:`reader` reads ranges with ``pread``.
    """

    def __init__(self, folder, budget_bytes=0):
        self.folder = folder
        self.budget = budget_bytes
        self.memory_bytes = 0
        self._in_memory = {}
        self._on_disk = {}
        self._serial = 0

    def __contains__(self, key):
        return key in self._in_memory or key in self._on_disk

    def put(self, key, arrays):
        """Store a sequence of arrays under ``key`` (replacing old ones)."""
        arrays = [np.ascontiguousarray(a) for a in arrays]
        size = sum(a.nbytes for a in arrays)
        self.discard(key)
        if self.memory_bytes + size <= self.budget:
            self._in_memory[key] = arrays
            self.memory_bytes += size
            return
        self._serial += 1
        path = os.path.join(self.folder, f"scratch-{self._serial}.bin")
        layout = []
        from . import scratch
        try:
            with scratch.disk_errors(self.folder, size, "scratch files"):
                with open(path, "wb") as handle:
                    for array in arrays:
                        layout.append((array.dtype, array.shape,
                                       handle.tell()))
                        handle.write(memoryview(array.reshape(-1)).cast("B"))
        except BaseException:
            scratch.remove_quietly(path)
            raise
        self._on_disk[key] = (path, layout)

    def get(self, key):
        """The arrays stored under ``key`` (fresh copies when on disk)."""
        if key in self._in_memory:
            return list(self._in_memory[key])
        path, layout = self._on_disk[key]
        arrays = []
        for dtype, shape, offset in layout:
            count = int(np.prod(shape, dtype=np.int64))
            arrays.append(np.fromfile(path, dtype=dtype, count=count,
                                      offset=offset).reshape(shape))
        return arrays

    def reader(self, key, index):
        """Random access to array ``index`` of ``key`` along its first axis:
        an object with ``shape`` and ``read(start, stop)``."""
        if key in self._in_memory:
            return _ArrayReader(self._in_memory[key][index])
        path, layout = self._on_disk[key]
        dtype, shape, offset = layout[index]
        return _FileRangeReader(path, dtype, shape, offset)

    def discard(self, key):
        """Forget ``key`` (and delete its file)."""
        arrays = self._in_memory.pop(key, None)
        if arrays is not None:
            self.memory_bytes -= sum(a.nbytes for a in arrays)
        entry = self._on_disk.pop(key, None)
        if entry is not None:
            try:
                os.remove(entry[0])
            except OSError:
                pass


class TileStates:
    """Per-tile state of a tiled run: Dask futures (the state stays on the
    workers) kept by key, anything else in a :class:`ScratchStore`."""

    def __init__(self, store):
        self.store = store
        self.remote = {}

    def __contains__(self, key):
        return key in self.remote or key in self.store

    def put(self, key, state):
        self.discard(key)
        if distributed.is_future(state):
            self.remote[key] = state
        else:
            self.store.put(key, state)

    def get(self, key):
        """The state: a future, or the arrays (fresh copies when on disk)."""
        if key in self.remote:
            return self.remote[key]
        return self.store.get(key)

    def reader(self, key, index):
        return self.store.reader(key, index)

    def discard(self, key):
        future = self.remote.pop(key, None)
        if future is not None:
            future.release()
        self.store.discard(key)


class _ArrayReader:
    def __init__(self, array):
        self.array = array
        self.shape = array.shape

    def read(self, start, stop):
        return self.array[start:stop]

    def close(self):
        pass


class _FileRangeReader:
    def __init__(self, path, dtype, shape, offset):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.offset = offset
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) \
            * self.dtype.itemsize
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, start, stop):
        block = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
        if block.size:
            _pread_exact(self._fd, block.reshape(-1).view(np.uint8),
                         self.offset + start * self.row_bytes)
        return block

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --------------------------------------------------------------------------
# executor hook


def _malloc_trim():
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def release_free_memory():
    """Hand memory freed by the last tile back to the system.

    glibc keeps freed blocks of up to its (self-raising) mmap threshold in
    its heap, so without this the resident set creeps up by fragments of
    every tile's temporaries; ``malloc_trim`` returns them (a few ms).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def run_tasks(function, tasks, executor=None, progress=None, on_result=None,
              count=None, keep=False):
    """Run ``function(*task)`` for every task.

    ``tasks`` may be a generator (then give ``count``): tasks are drawn
    only as they are started, so their arguments (e.g. arrays read from
    scratch) need not all exist at once.

    ``executor=None`` runs them one after the other in this process;
    a :class:`concurrent.futures.Executor` or a Dask client runs them
    concurrently with at most twice its worker count in flight (so
    finished results do not pile up).  ``on_result(index, result)``
    consumes each result as it arrives (in task order when in-process, in
    completion order otherwise); without it the results are returned as a
    list in task order.  ``progress`` gets the finished fraction after
    every task and may cancel: then no further task is submitted and the
    outstanding ones are cancelled.

    ``keep=True``: ``function`` returns ``(message, state)``; the result
    handed on is ``(message, state)`` where, with a Dask client, ``state``
    is a future that stays on the workers (pass it as an argument of later
    tasks: Dask moves it only when it must, and recomputes it from its
    inputs when its worker dies) and only the message travels.
    """
    progress = progress if progress is not None else Progress()
    total = len(tasks) if count is None else count
    tasks = iter(tasks)
    results = None if on_result is not None else [None] * total

    def consume(index, result):
        if on_result is not None:
            on_result(index, result)
        else:
            results[index] = result

    if executor is None:
        for index, task in enumerate(tasks):
            consume(index, function(*task))
            release_free_memory()
            progress((index + 1) / max(total, 1))
        return results
    if distributed.is_dask_client(executor):
        _run_on_dask(executor, function, tasks, total, consume, progress,
                     keep)
        return results
    in_flight = {}
    limit = 2 * executor_workers(executor)
    next_task = 0
    done = 0
    try:
        while done < total:
            while next_task < total and len(in_flight) < limit:
                future = executor.submit(function, *next(tasks))
                in_flight[future] = next_task
                next_task += 1
            finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for future in finished:
                index = in_flight.pop(future)
                consume(index, future.result())
                done += 1
            progress(done / max(total, 1))
    except BaseException:
        for future in in_flight:
            future.cancel()
        wait(list(in_flight))
        raise
    return results


def write_in_task(sink, function, source, window, *arguments):
    """``function(source, window, *arguments)``'s block written to ``sink``
    in the task (a thread, a process or a Dask worker sharing the sink's
    folder); returns None so nothing travels back."""
    sink.write(window, function(source, window, *arguments))


def _run_on_dask(client, function, tasks, total, consume, progress, keep):
    """:func:`run_tasks` on a Dask client (see there)."""
    import operator
    import uuid

    from distributed import as_completed

    name = getattr(function, "__name__", None) or getattr(
        getattr(function, "func", None), "__name__", "tile")
    limit = 2 * distributed.cluster_threads(client)
    run = uuid.uuid4().hex[:12]
    in_flight = {}  # the future the driver waits on -> (index, state)
    # not distributed.wait: it needs a default client; results are fetched
    # in the background as tasks finish (one round trip each otherwise,
    # made one after the other by this thread)
    completed = as_completed(loop=client.loop, with_results=True,
                             raise_errors=False)
    next_task = 0
    done = 0
    try:
        while done < total:
            while next_task < total and len(in_flight) < limit:
                key = f"{name}-{run}-{next_task}"
                future = client.submit(function, *next(tasks), key=key,
                                       pure=False)
                if keep:
                    message = client.submit(operator.getitem, future, 0,
                                            key=key + "-message")
                    state = client.submit(operator.getitem, future, 1,
                                          key=key + "-state")
                    in_flight[message] = (next_task, state)
                    completed.add(message)
                else:
                    in_flight[future] = (next_task, None)
                    completed.add(future)
                next_task += 1
            finished = [next(completed)]
            finished += completed.next_batch(block=False)
            for future, value in finished:
                index, state = in_flight.pop(future)
                value = _dask_result(future, value, name)
                consume(index, (value, state) if keep else value)
                done += 1
            progress(done / max(total, 1))
    except BaseException:
        outstanding = list(in_flight)
        outstanding += [state for _, state in in_flight.values()
                        if state is not None]
        if outstanding:
            client.cancel(outstanding, force=True)
        raise


def _dask_result(future, value, name):
    """The value ``as_completed(with_results=True, raise_errors=False)``
    gave with ``future``; a failed task's error raised, explained."""
    if future.status == "finished":
        return value
    try:
        return future.result()  # raises the task's error (or cancel)
    except Exception as error:
        explained = distributed.explain_failure(error, name)
        if explained is not None:
            raise explained from None
        raise


class TaskPool:
    """Tile tasks submitted one by one and collected as they finish, for
    drivers that decide the next task from the last results (the cost
    distance's propagation).

    ``submit(tag, function, *arguments)`` starts a task (in-process: runs
    it at once); ``next_done()`` waits for a finished one and returns
    ``(tag, result)``; ``len(pool)`` counts those not collected yet.  With
    ``keep=True`` results are ``(message, state)`` as in :func:`run_tasks`
    (state a future on a Dask client).  ``cancel()`` cancels what is
    outstanding (on errors and on cancel).
    """

    def __init__(self, executor, keep=False, name="tile"):
        self.executor = executor
        self.keep = keep
        self.name = name
        self.outstanding = {}
        self._done = []
        self._serial = 0
        self._dask = distributed.is_dask_client(executor)
        if self._dask:
            import uuid

            from distributed import as_completed
            self._completed = as_completed(loop=executor.loop,
                                           with_results=True,
                                           raise_errors=False)
            self._run = uuid.uuid4().hex[:12]

    def __len__(self):
        return len(self.outstanding) + len(self._done)

    def submit(self, tag, function, *arguments):
        if self.executor is None:
            self._done.append((tag, function(*arguments)))
            release_free_memory()
            return
        if not self._dask:
            self.outstanding[self.executor.submit(function, *arguments)] = \
                (tag, None)
            return
        import operator
        key = f"{self.name}-{self._run}-{self._serial}"
        self._serial += 1
        client = self.executor
        future = client.submit(function, *arguments, key=key, pure=False)
        state = None
        if self.keep:
            state = client.submit(operator.getitem, future, 1,
                                  key=key + "-state")
            future = client.submit(operator.getitem, future, 0,
                                   key=key + "-message")
        self.outstanding[future] = (tag, state)
        self._completed.add(future)

    def next_done(self):
        """``(tag, result)`` of a finished task (waits for one)."""
        if self._done:
            return self._done.pop(0)
        if self._dask:
            future, value = next(self._completed)
            tag, state = self.outstanding.pop(future)
            value = _dask_result(future, value, self.name)
            return tag, ((value, state) if self.keep else value)
        future = next(iter(wait(list(self.outstanding),
                                return_when=FIRST_COMPLETED).done))
        tag, _ = self.outstanding.pop(future)
        return tag, future.result()

    def cancel(self):
        futures = list(self.outstanding)
        if self._dask:
            futures += [state for _, state in self.outstanding.values()
                        if state is not None]
            if futures:
                self.executor.cancel(futures, force=True)
        else:
            for future in futures:
                future.cancel()
            wait(futures)
        self.outstanding.clear()
        self._done.clear()


@njit(cache=True, nogil=True)
def border_label_index(labels, count):
    """Index of each label among the labels that touch the tile border
    (in label order), -1 for interior labels and for 0."""
    rows, cols = labels.shape
    on_border = np.zeros(count + 1, dtype=np.bool_)
    for c in range(cols):
        on_border[labels[0, c]] = True
        on_border[labels[rows - 1, c]] = True
    for r in range(rows):
        on_border[labels[r, 0]] = True
        on_border[labels[r, cols - 1]] = True
    on_border[0] = False
    index = np.full(count + 1, -1, dtype=np.int32)
    n = 0
    for label in range(1, count + 1):
        if on_border[label]:
            index[label] = n
            n += 1
    return index
