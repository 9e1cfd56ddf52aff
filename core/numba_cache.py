"""Numba's on-disk cache kept in step with the engine's sources.

numba checks a cached kernel against its own source file only (that file's
modification time and size).  A kernel that calls or inlines a kernel of
another module is compiled together with it, so after that other module
changes the cached caller still runs the old callee (numba issue 6845).
Updating the engine in place (a ``git pull`` of a linked checkout, files
copied over an install) could then run a mix of old and new kernels.

:func:`refresh` runs at import: it compares a digest of all the engine's
sources (:func:`sources_digest`) with the one recorded
beside the cache and, when they differ, empties the cache index of every
engine kernel (they compile again on first use, or at the next
``make setup`` warm-up) and records the new digest.  With the digest
recorded it costs a walk over the sources' file stamps (~1 ms).

:func:`lock_cache` (also at import) makes a kernel's cache writes one at a
time across processes, and its reads wait for a write.  numba writes a new
signature by reading the kernel's index, taking the first free data-file
number and writing the index, then the data file: two processes that
compile two signatures of one kernel at once (a parallel warm-up, test
workers, a cluster's workers, QGIS's background warm-up beside a
``qgis_process`` run) can take the same number, and the index then names
the other signature's code for one of them; a process reading between the
index and the data file can load an older file of that number (after a
refresh numbering starts again).  Either way a wrong kernel, not just a
slower one.

Not covered: a process that imported the old code and is still running
while the sources change may write kernels compiled from the old code into
the cache after the refresh (close QGIS before updating the plugin).
"""

import contextlib
import functools
import hashlib
import importlib
import logging
import os
import sys
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: numba's own writes stay
    fcntl = None

_CORE = os.path.dirname(os.path.abspath(__file__))
_PREFIX = "gridgraph-sources-"


def sources_digest():
    """A digest of the engine's sources and numba's version: the marker of
    a finished warm-up (core/warmup.py) and the cache's digest are only
    trusted for the code they were made from.  Here, not in core/warmup.py:
    the package's import computes it (:func:`refresh`), and importing the
    warm-up module with the package made ``python -m
    gridgraph.core.warmup``'s processes warn that it was imported twice."""
    import numba
    digest = hashlib.sha1(f"{numba.__version__} {sys.version}".encode())
    for folder, _, names in sorted(os.walk(_CORE)):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                stat = os.stat(path)
                # relative: `make setup` imports the package through the
                # venv's link, QGIS through the profile's; one marker
                relative = os.path.relpath(path, _CORE)
                digest.update(f"{relative} {stat.st_size} "
                              f"{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _marker_folder():
    """Where the digest is recorded: beside the warm-up's marker."""
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(_CORE,
                                                             "__pycache__")


# Modules that define no kernel and are not imported with the package:
# the warm-up runs as ``python -m gridgraph.core.warmup``, and its spawned
# processes run it again as their main module; imported first by a
# refresh, runpy warned in each that it was imported twice.
_NO_KERNELS = ("warmup",)


def _engine_modules():
    """The dotted names of every module of the engine (but
    :data:`_NO_KERNELS`)."""
    package = __name__.rsplit(".", 1)[0]
    names = []
    for folder, subfolders, files in os.walk(_CORE):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith((".", "__")))
        relative = os.path.relpath(folder, _CORE)
        prefix = package if relative == "." else \
            package + "." + relative.replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py") and not (
                    relative == "." and name[:-3] in _NO_KERNELS):
                names.append(prefix if name == "__init__.py"
                             else prefix + "." + name[:-3])
    return names


def engine_kernels(import_all=True):
    """Every numba CPU dispatcher defined in the engine's modules, by
    ``module.name`` of its Python function (a module may name one kernel
    twice, or re-export another module's).  ``import_all``: import every
    module first (kernels of one not imported yet count); else only the
    modules imported so far (what a process has met)."""
    from numba.core.registry import CPUDispatcher
    if import_all:
        modules = []
        for name in _engine_modules():
            try:
                modules.append(importlib.import_module(name))
            except Exception:  # noqa: BLE001 (an optional backend's module)
                continue
    else:
        package = __name__.rsplit(".", 1)[0]
        modules = [module for name, module in list(sys.modules.items())
                   if module is not None and (
                       name == package or name.startswith(package + "."))]
    kernels = {}
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, CPUDispatcher):
                function = value.py_func
                kernels[f"{function.__module__}.{function.__name__}"] = value
    return kernels


def _cached_kernels():
    """The engine's kernels with an on-disk cache (``cache=True``)."""
    from numba.core.caching import Cache  # (not NullCache: no cache=True)
    return [kernel for kernel in engine_kernels().values()
            if isinstance(getattr(kernel, "_cache", None), Cache)]


# How long a kernel's cache read or write waits for another process's write
# of the same kernel (numba's write takes milliseconds): past it a write is
# skipped and a read misses (the kernel compiles), both still correct.
LOCK_WAIT_S = 30.0


@contextlib.contextmanager
def _cache_lock(cache, exclusive):
    """Hold ``cache``'s lock file (beside its index), exclusive or shared;
    yields True when held, None when no lock can be had (a folder that
    cannot be written, a file system without locks: numba's own way), False
    after :data:`LOCK_WAIT_S`."""
    path = cache._cache_file._index_path + ".lock"
    descriptor = None
    try:
        if exclusive:  # (numba creates the folder before a write anyway)
            cache._impl.locator.ensure_cache_path()
        descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:
        pass
    if descriptor is None:
        yield None
        return
    try:
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(descriptor, mode)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    held = False
                    break
                time.sleep(0.005)
            except OSError:  # ENOLCK and the like: no locks here
                held = None
                break
        yield held
    finally:
        os.close(descriptor)  # (releases the lock)


def lock_cache():
    """Make numba's on-disk cache safe for processes sharing it: a kernel's
    cache write (index and data file) holds an exclusive ``flock`` on a file
    beside its index, a read a shared one, so that no process takes a data
    file's number another one is taking, and none reads an index entry
    whose data file is not written yet (numba writes the index first).
    Every kernel of the process (the engine's, the tests' oracles, another
    package's), CPU and CUDA.  Idempotent; without ``fcntl`` (Windows) it
    does nothing."""
    from numba.core import caching
    save, load = caching.Cache.save_overload, caching.Cache.load_overload
    if fcntl is None or getattr(save, "_gridgraph_locked", False):
        return

    @functools.wraps(save)
    def save_overload(self, sig, data):
        with _cache_lock(self, exclusive=True) as held:
            if held is False:
                return None  # not cached this time: it compiles again later
            return save(self, sig, data)

    @functools.wraps(load)
    def load_overload(self, sig, target_context):
        with _cache_lock(self, exclusive=False) as held:
            if held is False:
                return None  # a miss: numba compiles the kernel
            return load(self, sig, target_context)

    save_overload._gridgraph_locked = True
    caching.Cache.save_overload = save_overload
    caching.Cache.load_overload = load_overload


def refresh():
    """Empty the engine's cached kernels if its sources changed since the
    digest was recorded; returns the number of kernels emptied (0 when the
    digest matched).  Never raises: a cache it cannot write is left as it
    is (numba then compiles in memory)."""
    try:
        folder = _marker_folder()
        marker = os.path.join(folder, _PREFIX + sources_digest())
        if os.path.exists(marker):
            return 0
        kernels = _cached_kernels()
        for kernel in kernels:
            kernel._cache.flush()
        os.makedirs(folder, exist_ok=True)
        # (processes starting together, a cluster's workers, may all do
        # this at once: numba writes each index by an atomic rename, and
        # an older marker another one removed first is no error)
        for name in os.listdir(folder):
            if name.startswith(_PREFIX) and name != os.path.basename(marker):
                try:
                    os.remove(os.path.join(folder, name))
                except FileNotFoundError:
                    pass
        with open(marker, "w"):
            pass
        return len(kernels)
    except OSError as error:
        logging.getLogger(__name__).info(
            "numba's cache of the engine was not refreshed: %s", error)
        return 0
