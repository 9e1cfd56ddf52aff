"""Compile the CPU kernels ahead of a user's first run.

numba compiles each kernel the first time it meets a new combination of
argument types, then keeps the machine code in its on-disk cache (the
kernels are declared with ``cache=True``).  On an empty cache the first
minimum spanning tree of a session took about 20 s on a 256 x 256 raster.
:func:`warm_up` calls every public operation on tiny rasters of each band
data type GDAL commonly hands over, which fills that cache; later processes
(QGIS, qgis_process, scripts) load the kernels in well under a second.

It runs at install (``make setup``: ``python -m gridgraph.core.warmup``)
and, in the QGIS desktop, in a background thread at plugin load
(:func:`start_in_background`).  :func:`is_warm` tells an algorithm whether
its run will have to compile first, so it can say so in the log.

Only the in-memory CPU path is warmed: the tiled path and the CUDA kernels
compile on their first use (both serve runs that take far longer than the
compile).  Nothing here imports qgis.
"""

import os
import threading
import time

import numpy as np

from . import numba_cache

# Band data types a GDAL raster is read as (Byte, Int16, UInt16, Int32,
# UInt32, Float32, Float64); each one compiles its own kernels.
DTYPES = (np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float32,
          np.float64)

_CORE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_thread = None


def _marker_path():
    """Where a finished warm-up is recorded: beside numba's cache files
    (NUMBA_CACHE_DIR when set, else the package's __pycache__)."""
    folder = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        _CORE, "__pycache__")
    return os.path.join(folder,
                        f"gridgraph-warm-{numba_cache.sources_digest()}")


def is_warm():
    """True when a warm-up of this code finished (its kernels are cached)."""
    try:
        return os.path.exists(_marker_path())
    except OSError:
        return False


def is_running():
    """True while :func:`start_in_background`'s thread is compiling."""
    return _thread is not None and _thread.is_alive()


def _tiny_raster(dtype):
    """A 6 x 7 raster of ``dtype`` with two patches, a plateau and nodata."""
    values = (np.arange(42).reshape(6, 7) * 7 % 5 + 1).astype(dtype)
    values[2, :3] = 0
    values[4, 4] = 3
    return values


def warm_up(dtypes=DTYPES, progress=None, processes=1):
    """Run every in-memory CPU operation on tiny rasters of each dtype.

    ``progress(done, total)`` is called after each dtype (with processes,
    after each process's share).  Returns the seconds spent.  Writes the
    marker :func:`is_warm` looks for once every dtype is done.
    ``processes`` > 1 shares the dtypes among that many new Python
    processes (``sys.executable``: a script's or ``make setup``'s Python,
    never QGIS's); numba's cache writes are locked across processes
    (:func:`gridgraph.core.numba_cache.lock_cache`).
    """
    start = time.perf_counter()
    with _lock:
        if processes > 1 and len(dtypes) > 1:
            _warm_in_processes(dtypes, progress, processes)
        else:
            _warm_dtypes(dtypes, progress, tail=True)
        marker = _marker_path()
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(f"warmed in {time.perf_counter() - start:.1f} s\n")
    return time.perf_counter() - start


def _warm_in_processes(dtypes, progress, processes):
    """:func:`_warm_dtypes` on shares of ``dtypes`` in new processes; the
    last share (the smallest) also warms the dtype-independent tail."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    processes = min(processes, len(dtypes))
    shares = [[np.dtype(dtype).name for dtype in dtypes[index::processes]]
              for index in range(processes)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = {pool.submit(_warm_named_dtypes, share,
                               index == len(shares) - 1):
                   len(share) for index, share in enumerate(shares)}
        done = 0
        for future in as_completed(futures):
            future.result()
            done += futures[future]
            if progress is not None:
                progress(done, len(dtypes))


def _warm_named_dtypes(names, tail):
    """A warm-up process's share (dtype names pickle across processes)."""
    _warm_dtypes([np.dtype(name).type for name in names], None, tail)


def _warm_dtypes(dtypes, progress, tail):
    """Every operation on each of ``dtypes``; ``tail``: also the kernels
    no dtype of the input decides (the float64 accumulated cost's MST, the
    parallel block search)."""
    from . import (component_summary, connected_components, cost_distance,
                   habitat_network, least_cost_path, minimum_spanning_tree,
                   segment_by_threshold, segments_by_threshold)
    for done, dtype in enumerate(dtypes, start=1):
        values = _tiny_raster(dtype)
        nodata = 0
        # nonzero mode: blocks for 8-connectivity, cells for 4
        for mode, connectivity in (("equal", 8), ("nonzero", 8),
                                   ("nonzero", 4)):
            result = connected_components(values,
                                          connectivity=connectivity,
                                          mode=mode, nodata=nodata,
                                          backend="cpu")
            component_summary(result.labels, values, result.count)
        # point sources as the algorithm passes them (cells, feature
        # ids), or a source raster (labels: Int32, or the same type)
        points = {"sources": np.array([[0, 0], [5, 6]], dtype=np.int64),
                  "source_ids": np.array([1, 2], dtype=np.int64)}
        labels = {"sources": (values == 3).astype(np.int32),
                  "source_nodata": 0}
        same = {"sources": values * (values == 3), "source_nodata": 0}
        for sources in (points, labels, same):
            for cell_size, max_cost in ((None, None), ((30.0, 30.0), 9.0)):
                distance = cost_distance(values, connectivity=16,
                                         nodata=nodata, backend="cpu",
                                         cell_size=cell_size,
                                         max_cost=max_cost, **sources)
                least_cost_path(distance, 5, 0)
        # the habitat network: its mask kernel compiles per habitat
        # type, the relabelling and the crossing scan per resistance
        # type, the paths and the indices once (about 25 s of CPU on
        # a first run otherwise)
        habitat_network((values == 3).astype(dtype), values,
                        connectivity=8, distance_p05=5.0,
                        backend="cpu")
        for weight in ("max", "min", "mean", "absdiff"):
            tree = minimum_spanning_tree(values, connectivity=8,
                                         weight=weight, nodata=nodata,
                                         backend="cpu", edges=True)
            segment_by_threshold(tree, 2.0)  # thresholds come as floats
            minimum_spanning_tree(values, connectivity=4, weight=weight,
                                  nodata=nodata, backend="cpu",
                                  edges=False)
            for connectivity in (4, 8):
                segments_by_threshold(values, 2.0,
                                      connectivity=connectivity,
                                      weight=weight, nodata=nodata)
        if progress is not None:
            progress(done, len(dtypes))
    if tail:
        # the accumulated cost (float64 with NaN) fed to the next algorithm
        accumulated = np.arange(42, dtype=np.float64).reshape(6, 7)
        accumulated[2, 3] = np.nan
        minimum_spanning_tree(accumulated, backend="cpu",
                              nodata=float("nan"), edges=True)
        _warm_block_search(cost_distance)
        # the tiled path's reads of file rasters (their tile kernels
        # compile on a first tiled run, or in a Dask worker's preflight)
        from . import _row_io
        _row_io.warm_up()


def _warm_block_search(cost_distance):
    """Where numba has enough threads, cost distance takes its parallel
    block search from BLOCKS_MIN_CELLS cells on (costdistance._cpu.solve):
    a small raster in small blocks compiles it (its kernels work on the
    search's float64 state, so one dtype does)."""
    import numba

    from ._common import Progress
    from .costdistance import _cpu, _step_lengths
    if numba.get_num_threads() < _cpu.BLOCKS_MIN_THREADS:
        return
    cost = np.ones((64, 64))
    _cpu.solve(cost, np.ones(cost.shape, dtype=bool), np.array([[0, 0]]),
               np.array([1]), 8, _step_lengths(8, None), np.inf, Progress(),
               blocks=16)


def start_in_background(log=None):
    """Start :func:`warm_up` in a daemon thread unless the cache is warm.

    ``log(message)`` receives one line at the start and one at the end.
    Returns the thread, or None when there was nothing to do.  numba
    compiles under its own lock, so a run started meanwhile waits for the
    kernel it needs rather than compiling it twice.
    """
    global _thread
    if is_warm() or is_running():
        return None

    def work():
        try:
            seconds = warm_up()
        except Exception as error:  # never let a warm-up break the plugin
            if log is not None:
                log(f"GridGraph: preparing the computing code failed "
                    f"({error}); each algorithm compiles what it needs on "
                    "its first run instead")
            return
        if log is not None:
            log(f"GridGraph: computing code ready ({seconds:.0f} s, once "
                "after installing)")

    if log is not None:
        log("GridGraph: preparing (compiling) the computing code in the "
            "background, once after installing")
    _thread = threading.Thread(target=work, name="gridgraph-warmup",
                               daemon=True)
    _thread.start()
    return _thread


_prepare_thread = None
_prepare_lock = threading.Lock()


def prepare_in_background():
    """Start numba's one-time set-up of its CPU target in a daemon thread.

    The first kernel a process calls, compiled or loaded from the cache,
    waits for numba to fill its typing and lowering registries (0.2-0.3 s
    of Python on the 2-core box: 0.32 of the 0.37 s that loading a cached
    cost-distance kernel took in a fresh process).  An algorithm starts
    this before reading its input, so the set-up runs while GDAL decodes
    the raster (GDAL's reads release the GIL).  The set-up holds numba's
    compiler lock, so a kernel called meanwhile waits for it instead of
    doing it twice.  Once per process; returns the thread (None when
    already started).  Changes no result.
    """
    global _prepare_thread
    with _prepare_lock:
        if _prepare_thread is not None:
            return None

        def work():
            try:
                from numba.core.compiler_lock import global_compiler_lock
                from numba.core.registry import cpu_target
                with global_compiler_lock:
                    cpu_target.typing_context.refresh()
                    cpu_target.target_context.refresh()
            except Exception:  # pragma: no cover - the first kernel does it
                pass
        _prepare_thread = threading.Thread(target=work, daemon=True,
                                           name="gridgraph-numba-setup")
        _prepare_thread.start()
        return _prepare_thread


def main():
    if is_warm():
        print(f"gridgraph: kernels already compiled ({_marker_path()})")
        return

    def report(done, total):
        print(f"  {done}/{total} data types", flush=True)
    # one process per core (each compiles its dtypes' kernels; the kernels
    # no dtype decides compile in each: more than 4 gains little)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    processes = max(1, min(cores, 4))
    print(f"gridgraph: compiling the CPU kernels into numba's cache "
          f"({processes} processes) ...", flush=True)
    seconds = warm_up(progress=report, processes=processes)
    print(f"gridgraph: kernels compiled and cached in {seconds:.1f} s "
          f"({_marker_path()})")


if __name__ == "__main__":
    main()
