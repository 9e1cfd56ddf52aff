"""An output array kept for the next call once its caller has let it go.

A kernel's output is fresh memory: the first write to each page faults,
and the kernel zeroes the page before the kernel writes it again.  For a
4096² int32 labelling that is 64 MiB a call, more than glibc keeps between
allocations (it maps anything over 32 MiB afresh), and it dominates short
calls: on the GPU machine's Xeon two threads labelled a 4096² fractal mask
in 20 ms of wall with 16 ms of system time (docs/benchmarks.md, issue 13).
A script or a tool that labels raster after raster pays it every time.

:class:`KeptOutput` hands out an uninitialised array (as ``np.empty``) and
keeps a reference to it.  The next call asking for the same shape and type
gets the same array back when nothing else refers to it any more: every
numpy view of an array refers to the array that owns the memory, so a
caller still holding the result, or any view of it, raises the owner's
reference count and the next call allocates a new array instead (and keeps
that one).  At most one array is kept per :class:`KeptOutput`, and none over
``max_bytes``; the kept array's pages stay committed while it is kept, as
the union-find buffer of the components kernels does
(``components._cpu._KEPT_UNION_FIND``), and are not counted in a run's
``memory_limit_mb``.  A weak reference to a result never dies while the
result is kept.
"""

import sys
import threading

import numpy as np


def _references_when_free():
    """What ``sys.getrefcount`` reads for an object held only by a list
    and a local name, read the way :meth:`KeptOutput.empty` reads it: 3
    up to CPython 3.13 (the list, the name, the call's argument), 2 from
    3.14 on, whose calls borrow a local's reference (CPython gh-130704).
    Measured, not assumed: a count one too low would hand out an array a
    caller still holds."""
    holder = [object()]
    probe = holder[0]
    return sys.getrefcount(probe)


_FREE_REFERENCES = _references_when_free()


class KeptOutput:
    """Uninitialised output arrays, the last one reused once it is free."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self._kept = []
        self._lock = threading.Lock()

    def empty(self, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype``: the kept one
        when it has that shape and type and nothing refers to it, else a
        new one (kept in its place when at most ``max_bytes``)."""
        shape = tuple(int(extent) for extent in shape)
        dtype = np.dtype(dtype)
        with self._lock:
            if self._kept:
                kept = self._kept[0]
                if kept.shape == shape and kept.dtype == dtype and \
                        sys.getrefcount(kept) == _FREE_REFERENCES:
                    # a caller may have made it read-only before letting
                    # it go (it owns its memory: it may be made writable)
                    kept.flags.writeable = True
                    return kept
                del kept
            array = np.empty(shape, dtype=dtype)
            if array.nbytes <= self.max_bytes:
                self._kept[:] = [array]
            else:
                self._kept.clear()
            return array

    def release(self):
        """Forget the kept array (its memory goes back when its last user
        lets it go)."""
        with self._lock:
            self._kept.clear()
