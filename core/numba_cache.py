"""Numba's on-disk cache kept in step with the engine's sources.

numba checks a cached kernel against its own source file only (that file's
modification time and size).  A kernel that calls or inlines a kernel of
another module is compiled together with it, so after that other module
changes the cached caller still runs the old callee (numba issue 6845).
Updating the engine in place (a ``git pull`` of a linked checkout, files
copied over an install) could then run a mix of old and new kernels.

:func:`refresh` runs at import: it compares a digest of all the engine's
sources (:func:`gridgraph.core.warmup._sources_digest`) with the one recorded
beside the cache and, when they differ, empties the cache index of every
engine kernel (they compile again on first use, or at the next
``make setup`` warm-up) and records the new digest.  With the digest
recorded it costs a walk over the sources' file stamps (~1 ms).

:func:`lock_cache_writes` (also at import) makes a kernel's cache writes
one at a time across processes.  numba writes a new signature by reading the
kernel's index, taking the first free data-file number and writing both
back: two processes that compile two signatures of one kernel at once (a
parallel warm-up, test workers, a cluster's workers, QGIS's background
warm-up beside a ``qgis_process`` run) can take the same number, and the
index then names the other signature's code for one of them (a wrong
kernel, not just a slower one).

Not covered: a process that imported the old code and is still running
while the sources change may write kernels compiled from the old code into
the cache after the refresh (close QGIS before updating the plugin).
"""

import functools
import importlib
import logging
import os
import sys

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: numba's own writes stay
    fcntl = None

_CORE = os.path.dirname(os.path.abspath(__file__))
_PREFIX = "gridgraph-sources-"


def _marker_folder():
    """Where the digest is recorded: beside the warm-up's marker."""
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(_CORE,
                                                             "__pycache__")


def _engine_modules():
    """The dotted names of every module of the engine."""
    package = __name__.rsplit(".", 1)[0]
    names = []
    for folder, subfolders, files in os.walk(_CORE):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith((".", "__")))
        relative = os.path.relpath(folder, _CORE)
        prefix = package if relative == "." else \
            package + "." + relative.replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py"):
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


def lock_cache_writes():
    """Make numba's cache writes of the engine's kernels (CPU and CUDA)
    exclusive across processes: an advisory ``flock`` on a file beside the
    kernel's index, held while numba reads the index, picks the data file's
    name and writes both.  Other packages' kernels are left as numba writes
    them.  Idempotent; without ``fcntl`` (Windows) it does nothing."""
    from numba.core import caching
    original = caching.Cache.save_overload
    if fcntl is None or getattr(original, "_gridgraph_locked", False):
        return
    package = __name__.rsplit(".", 1)[0]

    @functools.wraps(original)
    def save_overload(self, sig, data):
        module = getattr(getattr(self, "_py_func", None), "__module__", "")
        if not (module == package or module.startswith(package + ".")):
            return original(self, sig, data)
        try:
            self._impl.locator.ensure_cache_path()
            handle = open(self._cache_file._index_path + ".lock", "ab")
        except OSError:  # a cache numba cannot write either: its own way
            return original(self, sig, data)
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released by the close
            return original(self, sig, data)

    save_overload._gridgraph_locked = True
    caching.Cache.save_overload = save_overload


def refresh():
    """Empty the engine's cached kernels if its sources changed since the
    digest was recorded; returns the number of kernels emptied (0 when the
    digest matched).  Never raises: a cache it cannot write is left as it
    is (numba then compiles in memory)."""
    from .warmup import _sources_digest
    try:
        folder = _marker_folder()
        marker = os.path.join(folder, _PREFIX + _sources_digest())
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
