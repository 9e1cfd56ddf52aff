"""Helpers shared by every operation: input loading, validity masks, backend
choice, progress and cancellation.  Nothing here imports qgis."""

import ctypes
import functools
import math
import os
import sys

import numpy as np

from .errors import BackendUnavailableError, CancelledError, InvalidInputError

BACKENDS = ("auto", "cpu", "cuda")

# Rasters with fewer cells than this use 32-bit label / index arrays; larger
# ones need 64-bit indices (cell counts past 2**31).
INT32_CELL_LIMIT = 2**31 - 1


def index_dtype(n_cells):
    """Smallest signed integer dtype that can index ``n_cells`` cells (and -1)."""
    return np.int32 if n_cells < INT32_CELL_LIMIT else np.int64


def cuda_available():
    """True when numba can reach a CUDA device (or its simulator)."""
    if not _cuda_driver_may_load():
        return False
    try:
        from numba import cuda
    except ImportError:  # pragma: no cover - numba is a hard dependency
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # driver present but broken
        return False


def _cuda_driver_may_load():
    """False only when numba's CUDA driver search is bound to fail: on
    Linux, no simulator asked for, no NUMBA_CUDA_DRIVER given and none of
    the library names and folders numba tries (numba.cuda.cudadrv.driver.
    locate_driver_and_loader) loads.  Every GridGraph algorithm asks at
    start-up (the backend parameter's label), so every qgis_process run,
    other providers' too, paid ~0.07-0.1 s for importing numba.cuda on a
    machine without a GPU; this costs a few failed dlopen calls, once a
    process (:func:`_cuda_library_loads`)."""
    if not sys.platform.startswith("linux") \
            or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0") \
            or os.environ.get("NUMBA_CUDA_DRIVER"):
        return True
    return _cuda_library_loads()


@functools.lru_cache(maxsize=1)
def _cuda_library_loads():
    """Whether one of the names and folders numba tries for the CUDA
    driver loads; asked once a process: the failed dlopen calls took
    ~0.34 ms a call on the 2-core box right after other work, and every
    call with ``backend="auto"`` asks (2026-12-03: a 2048² labelling
    2.31 ms with ``auto`` against 1.85 ms with ``cpu``)."""
    names = ("libcuda.so", "libcuda.so.1")
    for candidate in names + tuple(os.path.join(folder, name)
                                   for folder in ("/usr/lib", "/usr/lib64")
                                   for name in names):
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return True
    return False


def resolve_backend(backend):
    """Map ``auto``/``cpu``/``cuda`` to the backend that will actually run.

    ``auto`` picks CUDA when a usable device exists and the operation has a
    CUDA implementation, else the CPU.  Asking for ``cuda`` explicitly on a
    machine without one is an error that names what is missing.
    """
    if backend is None:
        backend = "auto"
    backend = str(backend).lower()
    if backend not in BACKENDS:
        raise InvalidInputError(
            f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "cuda":
        if not cuda_available():
            raise BackendUnavailableError(
                "the cuda backend was requested but numba finds no usable CUDA "
                "device (no NVIDIA GPU, no driver, or no CUDA toolkit for "
                "numba-cuda); install the NVIDIA driver and numba-cuda, or use "
                "backend='cpu' / BACKEND=auto")
        return "cuda"
    if backend == "auto":
        return "cuda" if _cuda_enabled_for_auto() else "cpu"
    return "cpu"


def _cuda_enabled_for_auto():
    # GRIDGRAPH_BACKEND=cpu lets a user with a GPU pin the CPU for `auto`.
    if os.environ.get("GRIDGRAPH_BACKEND", "").lower() == "cpu":
        return False
    return cuda_available()


def check_connectivity(connectivity, allowed):
    """Return ``connectivity`` as an int, or raise naming the bad value."""
    try:
        value = int(connectivity)
        same = bool(value == connectivity) and not isinstance(connectivity,
                                                              bool)
    except (TypeError, ValueError, OverflowError):
        value, same = None, False
    if value not in allowed or not same:
        raise InvalidInputError(
            f"connectivity must be one of {', '.join(map(str, allowed))}, "
            f"got {connectivity!r}")
    return value


def is_number(value):
    """True for a real number (Python or numpy), booleans excluded."""
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def check_number(name, value, minimum=None, allow_none=True, finite=True,
                 integer=False, above=False, maximum=None):
    """``value`` as a float (an int when ``integer``), or raise naming it.

    None passes when ``allow_none``; NaN never does; infinity only when
    ``finite`` is False; ``minimum`` is inclusive (exclusive with ``above``).
    """
    if value is None and allow_none:
        return None
    if not is_number(value):
        raise InvalidInputError(
            f"{name} must be a number, got {value!r} of type "
            f"{type(value).__name__}")
    number = float(value)
    # math, not numpy: a numpy call on a Python float costs ~1 us (more
    # when the call follows other work), and every public call checks some
    if math.isnan(number) or (finite and not math.isfinite(number)):
        raise InvalidInputError(f"{name} must be a finite number, got {value!r}")
    if integer and number != math.floor(number):
        raise InvalidInputError(f"{name} must be a whole number, got {value!r}")
    if minimum is not None and (number <= minimum if above
                                else number < minimum):
        relation = "greater than" if above else "at least"
        raise InvalidInputError(
            f"{name} must be {relation} {minimum}, got {value!r}")
    if maximum is not None and number > maximum:
        raise InvalidInputError(
            f"{name} must be at most {maximum}, got {value!r}")
    return int(value) if integer else number


def check_nodata(value, name="nodata"):
    """None, or a real number (NaN allowed: it marks nothing new)."""
    if value is None:
        return None
    if not is_number(value):
        raise InvalidInputError(
            f"{name} must be a number or None, got {value!r} of type "
            f"{type(value).__name__}")
    return value


def check_common_arguments(values, nodata, band, progress, out_dir):
    """Checks shared by every operation's public function: the raster, its
    ``nodata``, ``band``, ``progress`` and ``out_dir`` (InvalidInputError
    naming the argument, before any work)."""
    if isinstance(values, np.ndarray):  # the common case first
        _check_raster_array(values)
    elif values is None or isinstance(values, (bytes, dict, set)):
        raise InvalidInputError(
            f"the raster must be a 2-D array or a path GDAL opens, got "
            f"{type(values).__name__}")
    elif not isinstance(values, (str, os.PathLike)):
        try:
            as_raster_array(values)
        except (TypeError, ValueError) as error:
            if isinstance(error, InvalidInputError):
                raise
            raise InvalidInputError(
                f"the raster must be a 2-D array of numbers: {error}") from None
    check_nodata(nodata)
    check_number("band", band, minimum=1, allow_none=False, integer=True)
    if progress is not None and not callable(progress):
        raise InvalidInputError("progress must be a callable taking a fraction")
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise InvalidInputError(
            f"out_dir must be a folder path or None, got {out_dir!r}")


def as_raster_array(values):
    """``values`` as a 2-D integer or float array (booleans as uint8 0 and
    1: viewed, or copied when a byte is neither)."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(
            f"the raster must be a 2-D array of numbers: {error}") from None
    _check_raster_array(array)
    if array.dtype == bool:
        array = array.view(np.uint8)
        # numpy reads any non-zero byte as True, and a bool array made from
        # other bytes (a view of uint8 data, a buffer) may hold 2..255:
        # ``equal`` mode would split a region of True cells by their bytes
        if array.size and array.max() > 1:
            array = (array != 0).view(np.uint8)
    return array


def _check_raster_array(array):
    """Raise unless ``array`` is 2-D, of integers, floats or booleans."""
    if array.ndim != 2:
        raise InvalidInputError(
            f"expected a 2-D raster, got an array of shape {array.shape}; "
            "pass a single band (e.g. values[0] for a band-first stack)")
    # kinds, not np.issubdtype (slow): signed, unsigned, float, bool
    if array.dtype.kind not in "iufb":
        raise InvalidInputError(
            f"raster values must be integers or floats, got dtype {array.dtype}")


def numba_can_read(dtype):
    """Whether numba's kernels take arrays of ``dtype`` as they are: a
    native byte order, integer or float, and not float16 (numba has no
    float16 and no byte-swapped arrays; convert those first)."""
    return dtype.isnative and dtype.kind in "iuf" and dtype != np.float16


def numba_readable(array):
    """``array`` itself when numba's kernels take its dtype, else its values
    as float64 (every integer, float16 and byte-swapped value is exact
    there)."""
    return array if numba_can_read(array.dtype) else \
        array.astype(np.float64)


def valid_mask(array, nodata):
    """Cells that are graph vertices: not NaN and not equal to ``nodata``."""
    if np.issubdtype(array.dtype, np.floating):
        mask = ~np.isnan(array)
    else:
        mask = np.ones(array.shape, dtype=bool)
    value = nodata_in_dtype(array.dtype, nodata)
    if value is not None:
        mask &= array != value
    return mask


def nodata_in_dtype(dtype, nodata):
    """``nodata`` as a value of ``dtype``, or None when no cell of that
    dtype can equal it: None, NaN (of any float type), and for an integer
    dtype an infinite, fractional or out-of-range value.  The host mask
    (:func:`valid_mask`) and the CUDA one compare with this same value."""
    dtype = np.dtype(dtype)
    if nodata is None or np.isnan(float(nodata)):
        return None
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if not np.isfinite(float(nodata)) or float(nodata) != int(nodata) \
                or not info.min <= nodata <= info.max:
            return None
        return dtype.type(int(nodata))
    return dtype.type(nodata)


class Progress:
    """Wraps the user's ``progress`` callable.

    ``progress(fraction)`` receives a float in [0, 1]; returning ``False``
    cancels.  ``span(start, stop)`` gives a child whose 0..1 maps onto
    start..stop of the parent, so nested phases report one monotone bar.
    """

    def __init__(self, callback=None, start=0.0, stop=1.0):
        self._callback = callback
        self._start = start
        self._stop = stop

    def __call__(self, fraction):
        """Report ``fraction`` of this span; raise CancelledError on cancel."""
        if self._callback is None:
            return
        fraction = min(max(float(fraction), 0.0), 1.0)
        value = self._start + (self._stop - self._start) * fraction
        if self._callback(value) is False:
            raise CancelledError("cancelled by the user; no output was written")

    def span(self, start, stop):
        """A child reporter covering ``start..stop`` of this one."""
        width = self._stop - self._start
        return Progress(self._callback, self._start + width * start,
                        self._start + width * stop)


def as_progress(progress):
    """Accept None, a callable or a :class:`Progress`."""
    if isinstance(progress, Progress):
        return progress
    if progress is not None and not callable(progress):
        raise InvalidInputError("progress must be a callable taking a fraction")
    return Progress(progress)
