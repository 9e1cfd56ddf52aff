"""Block-hierarchy infrastructure: the tile-size, executor and memory
options, the tile grid and Morton order, the plan (in memory or tiled),
scratch folders and the per-tile state store.

The tiled (out-of-core) versions of the operations (``<operation>/tiled``)
cut the raster into square tiles of side 2**k, visit them in Morton (z-)
order and run per-tile work as pure functions of (raster source, window,
parameters) that return small messages (docs/architecture.md).

The windowed sources and sinks live in :mod:`.tile_io`, how rounds of
tasks run (in-process, a pool, a Dask cluster) in :mod:`.tile_tasks`, the
pool of tasks started one by one in :mod:`.task_pool`; all are named here
too, so ``tiling.NpySink``, ``tiling.run_tasks`` and ``tiling.TaskPool``
keep working.  Imports go one way: ``errors`` <- ``_common`` <- ``io``
(GDAL, loaded lazily) <- ``tile_io``, ``tile_tasks`` <- ``task_pool`` <-
``tiling`` <- the operations.
"""

import functools
import math
import os
import shutil
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from numba import njit

from . import distributed
from ._common import check_number, is_number
from ._row_io import warm_up as warm_up_row_io  # noqa: F401  (named here)
from .errors import InvalidInputError
from .task_pool import TaskPool  # noqa: F401  (named here)
from .tile_io import (  # noqa: F401  (the sources and sinks, named here)
    ArraySink, ArraySource, FileArraySource, GdalSource, NpyFile, NpySink,
    Window, _pread_exact, _pwrite_exact, check_out_dir,
    load_raster, make_sink, open_source, output_sinks, reopen_source,
    union_window, window_writer, write_geotiff)
from .tile_tasks import (  # noqa: F401  (how tasks run, named here)
    KeptPart, batch_sizes, executor_workers, heap_kept_for_tiles,
    kept_groups, release_free_memory, run_joined_rounds, run_tasks,
    write_in_task)

MIN_TILE_SIZE = 8
# Largest automatic tile: 16M cells keeps per-tile kernels fast and their
# memory in the hundreds of MB; a forced TILE_SIZE may be larger.
MAX_AUTO_TILE_SIZE = 4096
# With several workers, automatic tiles are made smaller until each worker
# has this many (not below MIN_WORKER_TILE_SIZE, where the per-task costs
# start to weigh): 234 tiles for 8 one-thread workers ran the MST at 75 %
# parallel efficiency on the H100 host (docs/benchmarks.md).
MIN_TILES_PER_WORKER = 4
MIN_WORKER_TILE_SIZE = 256
# Share of the available RAM used when no memory limit is given.
DEFAULT_MEMORY_SHARE = 0.5
# Share of the memory budget for the working sets of the tiles in flight
# (an operation may ask for another: the MST's is 0.4).
TILE_SHARE = 0.25
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


def surely_available_bytes():
    """A cheap lower bound of :func:`available_memory_bytes`: the free
    pages (``sysinfo``) less the kernel's reserves, or less a sixteenth
    of the RAM when that is more.  The kernel's MemAvailable is the free
    pages less its reserves (``totalreserve_pages``) plus at least half
    of the page cache and reclaimable slabs, so never under this bound.
    Reading MemAvailable (parsing /proc/meminfo) took 0.11-0.20 ms right
    after a large array was freed, where a script or a benchmark loop
    calls again (2-core box, 2026-12-01: a 2048² labelling 0.30 ms
    faster, 1.68-1.87 against 1.98-2.17 ms).  0 when the bound is not
    known: the reserves not readable, or /proc/meminfo not describing the
    RAM ``sysinfo`` sees (LXCFS gives a container its own /proc/meminfo
    but not its own ``sysinfo``)."""
    reserve = _kernel_reserve_bytes()
    if reserve is None:
        return 0
    free, total = _free_and_total_bytes()
    return max(0, free - max(reserve, total // 16))


def _free_and_total_bytes():
    """(free, total) bytes of RAM from ``sysinfo`` (through sysconf)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return (os.sysconf("SC_AVPHYS_PAGES") * page,
            os.sysconf("SC_PHYS_PAGES") * page)


@functools.lru_cache(maxsize=1)
def _kernel_reserve_bytes():
    """The kernel's reserved memory (:func:`zone_reserve_pages` of
    /proc/zoneinfo), or None when unknown or when /proc/meminfo's MemTotal
    is not the RAM ``sysinfo`` reports; read once a process."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        _, total = _free_and_total_bytes()
        with open("/proc/meminfo") as meminfo:
            mem_total = next(int(line.split()[1]) * 1024 for line in meminfo
                             if line.startswith("MemTotal:"))
        with open("/proc/zoneinfo") as zoneinfo:
            reserve = zone_reserve_pages(zoneinfo)
    except (OSError, ValueError, AttributeError, StopIteration):
        return None
    if reserve is None or abs(mem_total - total) > 1 << 20:
        return None
    return reserve * page


def zone_reserve_pages(lines):
    """The kernel's ``totalreserve_pages`` from the lines of
    /proc/zoneinfo: per zone, its high watermark plus its largest
    ``protection`` (lowmem reserve), without the kernel's cap at the
    zone's managed pages (so never less); None without any zone."""
    total = None
    high = protection = 0
    for line in lines:
        if line.startswith("Node"):
            if total is not None:
                total += high + protection
            total = total or 0
            high = protection = 0
            continue
        words = line.split()
        if len(words) == 2 and words[0] == "high":
            high = int(words[1])
        elif words and words[0] == "protection:":
            numbers = line.split("(", 1)[1].split(")", 1)[0].split(",")
            protection = max(int(number) for number in numbers)
    if total is not None:
        total += high + protection
    return total


def fits_memory_limit(needed_bytes, memory_limit_mb):
    """Whether ``needed_bytes`` fit the budget of ``memory_limit_mb``
    (:func:`memory_limit_bytes`); without a limit, the exact figure is
    read only when the cheap bound (:func:`surely_available_bytes`) is
    too small to tell."""
    if memory_limit_mb in (None, 0) and \
            needed_bytes <= surely_available_bytes() * DEFAULT_MEMORY_SHARE:
        return True
    return needed_bytes <= memory_limit_bytes(memory_limit_mb)


def memory_limit_bytes(memory_limit_mb):
    """The memory budget in bytes: ``memory_limit_mb`` or a safe share of RAM."""
    if memory_limit_mb in (None, 0):
        return int(available_memory_bytes() * DEFAULT_MEMORY_SHARE)
    if not memory_limit_mb > 0:
        raise InvalidInputError(
            f"memory_limit_mb must be positive (or 0 / None for automatic), "
            f"got {memory_limit_mb!r}")
    return int(float(memory_limit_mb) * 2**20)


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

    def row_runs(self, length):
        """The tiles as runs of adjacent tiles of one tile row, row by row
        (lists of ``(tile_row, tile_col)``): each tile row cut into
        ``ceil(tile_cols / length)`` runs of near equal length (None: a
        run per tile row).  The run's tiles share the file pages where
        they meet, and its rows are one segment of the file each."""
        cols = self.tile_cols
        parts = 1 if length is None else -(-cols // max(1, int(length)))
        bounds = [cols * k // parts for k in range(parts + 1)]
        return [[(r, c) for c in range(bounds[k], bounds[k + 1])]
                for r in range(self.tile_rows) for k in range(parts)]


def auto_tile_size(shape, limit_bytes, tile_bytes_per_cell, workers=1,
                   share=TILE_SHARE):
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


def tiles_for_workers(shape, tile_size, workers):
    """Automatic tiles halved (down to :data:`MIN_WORKER_TILE_SIZE`) until
    there are :data:`MIN_TILES_PER_WORKER` per worker: a round then keeps
    every worker busy however its tasks' times vary."""
    while workers > 1 and tile_size // 2 >= MIN_WORKER_TILE_SIZE and \
            TileGrid(shape, tile_size).count < MIN_TILES_PER_WORKER * workers:
        tile_size //= 2
    return tile_size


@dataclass
class TiledPlan:
    """What the tiled path of an operation needs: the opened source, the
    tile grid and the memory budget in bytes."""

    source: object
    grid: TileGrid
    limit_bytes: int


def plan_for(values, band, tile_size, memory_limit_mb, executor,
             in_memory_bytes_per_cell, tile_bytes_per_cell,
             tile_share=TILE_SHARE):
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
        if fits_memory_limit(values.size * in_memory_bytes_per_cell,
                             memory_limit_mb):
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
         tile_bytes_per_cell, executor=None, tile_share=TILE_SHARE):
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
    if cells == 0:
        return None  # an empty raster: nothing to tile (no tile is empty)
    if not distributed.is_distributed(executor):
        if tile_size is None:
            if cells * in_memory_bytes_per_cell <= limit:
                return None
            workers = executor_workers(executor)
            tile_size = tiles_for_workers(shape, auto_tile_size(
                shape, limit, tile_bytes_per_cell, workers, tile_share),
                workers)
        return TileGrid(shape, tile_size)
    with distributed.client_for(executor) as client:
        workers = distributed.cluster_workers(client)  # one round trip
        threads = distributed.cluster_threads(client, workers)
        per_thread = distributed.memory_per_thread(client, workers)
    if tile_size is None:
        task_bytes = limit / threads if per_thread is None else (
            per_thread if memory_limit_mb in (None, 0)
            else min(per_thread, limit))
        tile_size = tiles_for_workers(shape, auto_tile_size(
            shape, task_bytes, tile_bytes_per_cell, 1, tile_share), threads)
    return TileGrid(shape, tile_size)


# --------------------------------------------------------------------------
# scratch


@contextmanager
def as_tile_tasks():
    """For a worker's warm-up (a Dask preflight): ``(executor, out_dir)``,
    a one-thread pool and a scratch folder, so that a tiny run takes the
    path of tile tasks that write their own windows (mapped label runs,
    packed answers, the MST's sample sort) and compiles the kernels for
    the array layouts they meet there: numba compiles a strided view or a
    sliced answer apart from a contiguous array, and a kernel left cold
    compiles inside a timed tile task on every worker (the MST's
    hierarchy: 1.6-2.4 s a worker, docs/benchmarks.md, eleventh session).

    The folder is made in the system's temporary folder.  Where that
    cannot be written (no access, a full disk), ``out_dir`` is None or the
    block's file error is dropped: the warm-up only saves time, and a
    worker's own temporary folder is none of the run's business (its
    outputs go to the run's ``out_dir``, checked by the preflight)."""
    import concurrent.futures
    import tempfile
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            folder = tempfile.mkdtemp(prefix="gridgraph-warm-")
        except OSError:
            folder = None
        try:
            yield pool, folder
        except OSError:
            if folder is None:
                raise
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


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
