"""A window's rows read from or written to a row-major raster file, one
``pread`` / ``pwrite`` a row, in a compiled loop.

A window narrower than the raster is a row segment per row, each at its
own file offset: Linux has no call that reads (or writes) many file
offsets at once short of io_uring, so it takes one system call a row.  In
Python each call also paid a ``memoryview`` slice and ``os.preadv``'s
argument handling: a 1024 x 1024 tile of a uint8 raster 12 555 cells wide
took 2.4-3.7 ms to read, against 1.3-1.5 ms with the loop compiled (the
reads alone, 2-core box, page cache warm, a test run beside them,
2026-11-30).  A tiled run reads every tile once or twice: end to end,
components of neuse40 on Dask took 24 % less time at 1 worker and 11-13 %
less at 8 on two H200 hosts' CPUs; cost distance and the MST, whose tiles
cost far more than their reads, moved within their runs' spread
(docs/benchmarks.md, Dask, twenty-third session).

The C library's ``pread`` and ``pwrite`` are called by symbol
(``numba.types.ExternalFunction``), so the kernels are cached like any
other; the buffer is passed as its address (an integer: the same register
as a pointer in the C calling convention of every 64-bit Linux).  A row
that fails (an error, end of file) stops the loop and its index is
returned: the caller goes on from there with Python's calls, which raise
the error with its errno (a full disk, a file cut short) or get past a
transient one (a signal).  Where the C library lacks the functions
(:data:`AVAILABLE` False) the callers keep Python's calls.
"""

import ctypes

from numba import njit, types

_PREAD = types.ExternalFunction(
    "pread", types.int64(types.int32, types.uint64, types.uint64,
                         types.int64))
_PWRITE = types.ExternalFunction(
    "pwrite", types.int64(types.int32, types.uint64, types.uint64,
                          types.int64))


def _libc_has(*names):
    """Whether this process's C library has every function ``names``: a
    symbol the compiled code cannot find would crash the process, not
    raise (no ``pread`` on Windows)."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):
        return False
    return all(hasattr(libc, name) for name in names)


AVAILABLE = _libc_has("pread", "pwrite")


@njit(cache=True, nogil=True)
def _transfer_rows(fd, address, row_bytes, rows, start, stride, write):
    """``pwrite`` (``write``) or ``pread`` of ``rows`` rows of
    ``row_bytes`` bytes, the buffer's rows packed from ``address``, the
    file's row ``r`` at ``start + r * stride``.  Returns the number of
    rows done whole: ``rows``, or the index of the row that failed."""
    for r in range(rows):
        done = 0
        while done < row_bytes:
            if write:
                n = _PWRITE(fd, address + r * row_bytes + done,
                            row_bytes - done, start + r * stride + done)
            else:
                n = _PREAD(fd, address + r * row_bytes + done,
                           row_bytes - done, start + r * stride + done)
            if n <= 0:
                return r
            done += n
    return rows


def pread_rows(fd, address, row_bytes, rows, start, stride):
    """Read ``rows`` rows into the buffer at ``address``
    (:func:`_transfer_rows`); returns the rows read whole."""
    return _transfer_rows(fd, address, row_bytes, rows, start, stride, False)


def pwrite_rows(fd, address, row_bytes, rows, start, stride):
    """Write ``rows`` rows from the buffer at ``address``
    (:func:`_transfer_rows`); returns the rows written whole."""
    return _transfer_rows(fd, address, row_bytes, rows, start, stride, True)


def warm_up():
    """Compile (or load) the loop without a system call (no rows): a tile
    task then compiles nothing (``tests/test_tile_warm_up.py``)."""
    if AVAILABLE:
        _transfer_rows(0, 0, 0, 0, 0, 0, False)
