"""Windowed raster sources and sinks of the tiled engine.

A numpy memmap (or a ``.npy`` file) is read with ``pread`` so the pages
never enter this process's resident set, a GDAL raster is read and written
window by window (through :mod:`.io`), and outputs are written to ``.npy``
files with ``pwrite`` (idempotent window writes: a task run twice writes the
same bytes) and handed back as read-only memmaps once every window is in.
Nothing here imports GDAL at import time.
"""

import errno
import functools
import os
import re
import tempfile
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import _row_io
from ._common import as_raster_array
from .errors import InvalidInputError

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


# A window narrower than the raster is read and written a row a system
# call in a compiled loop (_row_io), not in Python; off (a bench variant,
# "-pyrows"): Python's os.preadv / os.pwritev a row, as before.
COMPILED_ROW_IO = _row_io.AVAILABLE


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
            return block
        # a call a row, the loop compiled (_row_io); from a row that
        # failed on, Python's calls (which raise the error, or get past a
        # signal)
        done = _row_io.pread_rows(fd, flat.ctypes.data, row_bytes,
                                  window.rows, start, self.row_stride) \
            if COMPILED_ROW_IO else 0
        for r in range(done, window.rows):
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
        self.dtype = self.array.dtype

    def write(self, window, block):
        self.array[window.slices] = block

    def finish(self):
        return self.array

    def abort(self):
        self.array = None


class NpySink:
    """Writes windows into a ``.npy`` file with ``pwrite``, or, with
    ``mapped``, through a shared mapping of the window's rows (the file's
    blocks reserved up front: a full disk fails at construction).

    The file is created at full size up front (sparse: unwritten cells read
    as zero) under a temporary name; :meth:`finish` moves it into place and
    returns it as a read-only memmap, which maps pages only when the caller
    touches them.  :meth:`abort` removes the temporary file and leaves any
    older file at ``path`` alone.
    """

    def __init__(self, path, shape, dtype, mapped=False):
        self.path = os.fspath(path)
        self.shape = tuple(int(v) for v in shape)
        self.dtype = np.dtype(dtype)
        self.mapped = False
        from . import scratch  # a full disk: DiskFullError naming the folder
        with scratch.disk_errors(os.path.dirname(os.path.abspath(self.path)),
                                 self.dtype.itemsize * self.shape[0]
                                 * self.shape[1], self.path):
            self.partial, self.offset = _partial_npy(self.path, self.shape,
                                                     self.dtype)
        self._fd = os.open(self.partial, os.O_WRONLY)
        if mapped and self.shape[0] * self.shape[1]:
            self.mapped = self._reserve()

    def _reserve(self):
        """Allocate the file's blocks now (``posix_fallocate``), so writes
        through a mapping cannot find the disk full later (a SIGBUS in the
        writer instead of an error): a full disk fails here, the partial
        file removed.  False where the file system cannot reserve (the
        sink then writes with ``pwrite``)."""

        from . import scratch
        size = self.offset + self.dtype.itemsize * self.shape[0] \
            * self.shape[1]
        try:
            with scratch.disk_errors(os.path.dirname(self.partial), size,
                                     self.path):
                try:
                    os.posix_fallocate(self._fd, 0, size)
                except OSError as error:
                    if error.errno in (errno.EOPNOTSUPP, errno.ENOSYS,
                                       errno.EINVAL):
                        return False
                    raise
        except BaseException:
            self.abort()
            raise
        return True

    def __getstate__(self):
        # a copy in a worker process opens the partial file per write
        # (never creating it: after an abort the write fails instead of
        # leaving a file behind); writes of a window are idempotent, so a
        # retried task may write it again
        state = dict(self.__dict__)
        state["_fd"] = None
        return state

    def _disk_errors(self):
        from . import scratch  # a full disk: DiskFullError naming the folder
        return scratch.disk_errors(os.path.dirname(self.partial),
                                   self.dtype.itemsize * self.shape[0]
                                   * self.shape[1], self.path)

    def write(self, window, block):
        if self.mapped:
            with self.window_writer(window) as put:
                put(window, block)
            return
        with self._disk_errors():
            if self._fd is None:
                fd = os.open(self.partial, os.O_WRONLY)
                try:
                    self._write(fd, window, block)
                finally:
                    os.close(fd)
            else:
                self._write(self._fd, window, block)

    @contextmanager
    def window_writer(self, window):
        """For the ``with`` block: ``put(part, block)`` writes the blocks
        of windows ``part`` inside ``window`` (a run of adjacent tiles of
        one tile row), each at once; a block may be a filler,
        ``block(out)`` writing the part's values into ``out``
        (:func:`_put_into`).

        Mapped, the blocks go through one shared mapping of ``window``'s
        rows: processes writing one file through the page cache do not
        queue behind each other the way buffered writes of one file do
        (two processes: 0.13 s against 0.33 s for 884 MB, 2026-11-24),
        and a page that two tiles of the run share (a row segment of a
        tile is rarely page aligned) is faulted in once, not once per
        tile.  The blocks were reserved up front, so no page can find the
        disk full.  With :data:`POPULATE_MAPPED_WRITES` the window's
        pages are faulted in writable before the first block
        (``madvise(MADV_POPULATE_WRITE)``); with
        :data:`HUGE_PAGE_MAPPED_WRITES` (off), where the kernel makes
        large page-cache folios for the file (:func:`large_folio_writes`),
        the mapping is advised MADV_HUGEPAGE instead and the copy faults
        a folio at a time.

        Not mapped: the blocks are gathered into one band of ``window``
        (which they must tile: disjoint and covering it) and the band is
        written with ``pwrite`` at the end of the block, one call per row
        of the window, one in all where it spans whole rows; a band of
        more than :data:`PWRITE_BAND_BYTES` (memory on top of a tile's)
        is not gathered: each block is written as :meth:`write` does."""
        if not self.mapped and window.rows * window.cols \
                * self.dtype.itemsize > PWRITE_BAND_BYTES:
            yield functools.partial(_write_each, self)
            return
        if not self.mapped:
            band = np.empty((window.rows, window.cols), dtype=self.dtype)
            cells = []

            def gather(part, block):
                _put_into(band[part.row - window.row:part.row - window.row
                               + part.rows, part.col - window.col:part.col
                               - window.col + part.cols], block)
                cells.append(part.rows * part.cols)

            yield gather
            if sum(cells) != band.size:
                raise RuntimeError(
                    f"the blocks written into {window} cover {sum(cells)} "
                    f"of its {band.size} cells")
            self.write(window, band)
            return
        # only the sink's own work is read as a write error: what the
        # caller does between blocks (labelling a tile) raises as it is
        with self._disk_errors():
            huge = large_folio_writes(self.partial)
            rows = _mapped_rows(self.partial, self.offset, self.dtype,
                                window.row, window.rows, self.shape[1],
                                window if POPULATE_MAPPED_WRITES == "always"
                                or (POPULATE_MAPPED_WRITES and not huge)
                                else None, huge)

        def put(part, block):
            with self._disk_errors():
                _put_into(rows[part.row - window.row:part.row - window.row
                               + part.rows, part.col:part.col + part.cols],
                          block)

        try:
            yield put
        finally:
            # unmapped here (the dirty pages stay in the page cache)
            del rows, put

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
        # as FileArraySource.read: compiled, then Python from a failed row
        done = _row_io.pwrite_rows(fd, flat.ctypes.data, row_bytes,
                                   window.rows, start, row_stride) \
            if COMPILED_ROW_IO else 0
        for r in range(done, window.rows):
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


def _partial_npy(path, shape, dtype):
    """A new ``.npy`` file at full size (sparse) under a hidden temporary
    name beside ``path``: ``(its path, the offset of its data)``.

    The name carries this host and process
    (``.gridgraph-partial-<host>-<pid>-<token>-<name>.*.partial``), so the
    partial files of a run killed before it could remove them (SIGKILL,
    the out-of-memory killer) are removed by the next run making one in
    that folder (:func:`scratch.sweep_stale`, which keeps those of live
    processes and other hosts').  On an error (a full disk while writing
    the header) no file is left."""
    from . import scratch
    folder = os.path.dirname(os.path.abspath(path))
    scratch.sweep_stale(folder)
    header = {"descr": np.lib.format.dtype_to_descr(dtype),
              "fortran_order": False, "shape": shape}
    handle, partial = tempfile.mkstemp(
        prefix=f"{scratch.TEMPORARY_PREFIX}partial-{scratch.owner_tag()}-"
        f"{os.path.basename(path)}.", suffix=".partial", dir=folder)
    os.close(handle)
    try:
        with open(partial, "wb") as handle:
            try:
                np.lib.format.write_array_header_1_0(handle, header)
            except ValueError:  # a header past 64 KiB needs version 2
                handle.seek(0)
                np.lib.format.write_array_header_2_0(handle, header)
            offset = handle.tell()
            handle.truncate(offset + dtype.itemsize * shape[0] * shape[1])
    except BaseException:
        scratch.remove_quietly(partial)
        raise
    return partial, offset


# NpySink.window_writer without a mapping gathers a run's blocks into one
# band for pwrite up to this size (a run of 13 tiles of 1024 x 1024 int32
# labels: 52 MB); a larger run is written block by block.
PWRITE_BAND_BYTES = 64 << 20
# NpySink.window_writer faults a window's pages in writable before its
# blocks are copied, one madvise(MADV_POPULATE_WRITE) call per
# contiguous range of the file (Linux >= 5.14; where the kernel refuses it
# the copy faults them in, as without).  A shared mapping's page faults
# are then taken in the kernel without a trap per page.  Measured on the
# H100 host's CPUs (components' label round in runs, neuse40, 2026-11-24
# 20:59 UTC): 0.94-0.95 s at 8 workers against 1.00-1.10 s without, 4.98
# s against 5.28 s at 1; tile by tile it changed nothing (docs/
# benchmarks.md, Dask, sixth session, second round).  Not where the
# mapping is advised MADV_HUGEPAGE (HUGE_PAGE_MAPPED_WRITES) unless
# "always" (a benchmark's variant).
POPULATE_MAPPED_WRITES = True
# NpySink's window mappings advised MADV_HUGEPAGE and not populated: the
# page cache then makes the file's new pages as large folios, each mapped
# by one fault, where a run's row segments (a part of each raster row)
# otherwise take a fault or more per page.  "auto": where the kernel makes
# large folios for the file system of the file (:func:`large_folio_writes`;
# elsewhere the pages are populated as above); True / False: always /
# never.  Off: a gain on one host and a loss on another with the same
# kernel.  On an H100 host's CPUs (components, neuse40, tiles of 1024,
# one-thread Dask workers, 2026-12-05) median 0.328 s against 0.358 s at
# 8 workers, 1.60 s at 1 either way, page faults 36-46k against 86-128k;
# on the 2-core box (the same kernel release) 1.8 s against 1.5-1.6 s at
# 1 worker and 1.0-1.9 s against 0.9-1.0 s at 2 (docs/benchmarks.md,
# Dask, thirty-ninth session).
HUGE_PAGE_MAPPED_WRITES = False
# Linux makes large page-cache folios on these file systems from this
# release on (ext4 from 6.16; XFS earlier): see large_folio_writes.
LARGE_FOLIO_FILE_SYSTEMS = ("ext4", "xfs")
LARGE_FOLIO_KERNEL = (6, 16)
_large_folio_dirs = {}
MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python's mmap may not name it
_populate_refused = False
# errno values of a failed MADV_POPULATE_WRITE already logged here
_populate_logged = set()


def large_folio_writes(path):
    """Whether writes through shared mappings of the file at ``path`` are
    best advised MADV_HUGEPAGE and left unpopulated
    (:data:`HUGE_PAGE_MAPPED_WRITES`; "auto": Linux from
    :data:`LARGE_FOLIO_KERNEL` on, transparent huge pages not ``never``,
    and the file on one of :data:`LARGE_FOLIO_FILE_SYSTEMS`).  Cached
    per folder."""
    if HUGE_PAGE_MAPPED_WRITES != "auto":
        return bool(HUGE_PAGE_MAPPED_WRITES)
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in _large_folio_dirs:
        _large_folio_dirs[folder] = large_folios_for(
            os.uname().release, _read_text(
                "/sys/kernel/mm/transparent_hugepage/enabled"),
            file_system_type(folder))
    return _large_folio_dirs[folder]


def large_folios_for(release, thp_enabled, fs_type):
    """:func:`large_folio_writes`'s rule: ``release`` as ``os.uname()``
    gives it, ``thp_enabled`` the text of
    /sys/kernel/mm/transparent_hugepage/enabled (None: unreadable),
    ``fs_type`` as /proc/mounts names it (None: unknown)."""
    numbers = []
    for part in release.split("-")[0].split(".")[:2]:
        if not part.isdigit():
            return False
        numbers.append(int(part))
    return tuple(numbers) >= LARGE_FOLIO_KERNEL and \
        thp_enabled is not None and "[never]" not in thp_enabled and \
        fs_type in LARGE_FOLIO_FILE_SYSTEMS


def file_system_type(folder):
    """The type (``ext4``, ``tmpfs``...) of the file system holding
    ``folder``: the mount in /proc/self/mounts with the longest mount
    point above it; None where that cannot be read (not Linux)."""
    text = _read_text("/proc/self/mounts")
    if text is None:
        return None
    folder = os.path.realpath(folder)
    best, found = -1, None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        # mount points escape spaces and the like as octal (\040)
        point = re.sub(r"\\([0-7]{3})",
                       lambda match: chr(int(match.group(1), 8)), fields[1])
        inside = folder == point or folder.startswith(
            point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, found = len(point), fields[2]
    return found


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _mapped_rows(path, offset, dtype, first, count, cols, populate=None,
                 huge=False):
    """Rows ``first:first + count`` of a row-major raster of ``cols``
    columns stored at ``offset`` in the file at ``path``, as a writable
    array through a shared mapping of just those rows.  The mapping lasts
    as long as the array (unmapped when it is released).  ``populate``: a
    window of the raster whose pages to fault in writable now
    (:data:`POPULATE_MAPPED_WRITES`); ``huge``: the mapping advised
    MADV_HUGEPAGE first (:data:`HUGE_PAGE_MAPPED_WRITES`)."""
    import mmap
    itemsize = np.dtype(dtype).itemsize
    if count * cols == 0:
        return np.empty((count, cols), dtype=dtype)
    start = offset + first * cols * itemsize
    length = count * cols * itemsize
    base = start - start % mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDWR)  # never creates: after an abort it fails
    try:
        handle = mmap.mmap(fd, start - base + length, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE,
                           offset=base)
    finally:
        os.close(fd)
    if huge:
        try:
            handle.madvise(mmap.MADV_HUGEPAGE)
        except (AttributeError, OSError):  # no THP: plain pages
            pass
    if populate is not None:
        _populate(handle, start - base, populate, first, cols, itemsize)
    # the array holds the mapping: released with it
    return np.frombuffer(handle, dtype=dtype, count=count * cols,
                         offset=start - base).reshape(count, cols)


def _populate(handle, start, window, first, cols, itemsize):
    """``madvise(MADV_POPULATE_WRITE)`` on ``window``'s bytes of a mapping
    of whole raster rows from row ``first`` at byte ``start``: one range
    where the window spans whole rows, else a range per row.  Silently
    nothing where the kernel refuses the advice (before Linux 5.14: EINVAL;
    ENOSYS, EOPNOTSUPP); any other error (out of memory, a file cut
    short) is logged once per errno and the copy then faults the pages in
    (and meets the error itself if it persists)."""
    global _populate_refused
    import mmap
    if _populate_refused:
        return
    page = mmap.PAGESIZE
    row_bytes = cols * itemsize
    if window.col == 0 and window.cols == cols:
        ranges = [(start + (window.row - first) * row_bytes,
                   window.rows * row_bytes)]
    else:
        ranges = [(start + (row - first) * row_bytes + window.col * itemsize,
                   window.cols * itemsize)
                  for row in range(window.row, window.row + window.rows)]
    for begin, size in ranges:
        aligned = begin - begin % page
        try:
            handle.madvise(MADV_POPULATE_WRITE, aligned, begin + size
                           - aligned)
        except OSError as error:
            if error.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                _populate_refused = True
            elif error.errno not in _populate_logged:
                _populate_logged.add(error.errno)
                import logging
                logging.getLogger(__name__).warning(
                    "madvise(MADV_POPULATE_WRITE) failed on the output "
                    "mapping (%s); its pages are faulted in by the writes "
                    "instead", error)
            return  # the copy faults the pages in


def window_writer(sink, window):
    """``sink``'s :meth:`NpySink.window_writer` for ``window``; for a sink
    without one, a context giving its ``write`` (each block on its own)."""
    opener = getattr(sink, "window_writer", None)
    if opener is not None:
        return opener(window)
    return _each_on_its_own(sink)


@contextmanager
def _each_on_its_own(sink):
    yield functools.partial(_write_each, sink)


def _write_each(sink, part, block):
    """``sink.write`` of one block of a window writer's (an array, or a
    filler: :func:`_put_into`)."""
    if callable(block):
        filled = np.empty((part.rows, part.cols), dtype=sink.dtype)
        block(filled)
        block = filled
    sink.write(part, block)


def _put_into(out, block):
    """Write a window writer's ``block`` into ``out``, the block's place:
    an array is copied; a callable (a filler) writes the values into
    ``out`` itself, sparing the block an array of its own and the copy
    (components' label round renumbers straight into the mapped labels
    file)."""
    if callable(block):
        block(out)
    else:
        out[...] = block


def union_window(windows):
    """The smallest window holding every one of ``windows``."""
    top = min(w.row for w in windows)
    left = min(w.col for w in windows)
    bottom = max(w.row + w.rows for w in windows)
    right = max(w.col + w.cols for w in windows)
    return Window(top, left, bottom - top, right - left)


def _pwrite_exact(fd, buffer, offset):
    view = memoryview(buffer)
    done = 0
    while done < len(view):
        n = os.pwritev(fd, [view[done:]], offset + done)
        if n <= 0:  # never for a local disk; a network one could
            raise OSError(errno.EIO, f"writing at byte {offset + done} "
                          "wrote nothing")
        done += n


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


def make_sink(out_dir, name, shape, dtype, fill=0, mapped=False):
    """An :class:`NpySink` for ``out_dir/name.npy`` (``mapped``: written
    through shared mappings, its space reserved up front), or an in-memory
    :class:`ArraySink` when ``out_dir`` is None."""
    if out_dir is None:
        return ArraySink(shape, dtype, fill)
    path = os.path.join(os.fspath(out_dir), name + ".npy")
    return NpySink(path, shape, dtype, mapped)


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
