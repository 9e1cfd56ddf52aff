"""The public API's CUDA path of cost distance, numpy in and numpy out.

Everything the outputs need is done on the device: the valid cells (NaN,
nodata) and the checks on them (any valid cell, negative costs), the
solve (``_cuda.solve_device``), the GRASS directions from the
predecessor codes; only the raster goes there and only the asked-for
outputs come back, through the staged copies of ``_cuda_common``.
"""

import numpy as np
from numba import cuda

from .._common import valid_mask
from .._cuda_common import (FLAT_THREADS, PhaseTimer, blocks_for,
                            check_device_memory, copy_to_host, mul_rn,
                            valid_cells_device)
from . import _cuda

_NO_CELL = np.iinfo(np.int64).max


@cuda.jit(cache=True)
def _scan_costs(cost, valid, n, facts):
    """facts: [valid cells, negative valid cells, first negative cell]."""
    local = cuda.shared.array(3, np.int64)
    if cuda.threadIdx.x == 0:
        local[0] = 0
        local[1] = 0
        local[2] = _NO_CELL
    cuda.syncthreads()
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and valid[i]:
        cuda.atomic.add(local, 0, 1)
        if cost[i] < 0:
            cuda.atomic.add(local, 1, 1)
            cuda.atomic.min(local, 2, i)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        if local[0]:
            cuda.atomic.add(facts, 0, local[0])
        if local[1]:
            cuda.atomic.add(facts, 1, local[1])
            cuda.atomic.min(facts, 2, local[2])


@cuda.jit(cache=True)
def _largest(values, valid, n, check_valid, finite, out):
    """out[0] = max(out[0], the largest value among the cells i with
    ``valid[i]`` (every cell unless ``check_valid``)); NaN is skipped, and
    infinities too when ``finite``."""
    local = cuda.shared.array(1, np.float64)
    if cuda.threadIdx.x == 0:
        local[0] = -np.inf
    cuda.syncthreads()
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and (not check_valid or valid[i]):
        x = np.float64(values[i])
        if x == x and (not finite or (x < np.inf and x > -np.inf)):
            cuda.atomic.max(local, 0, x)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0 and local[0] > -np.inf:
        cuda.atomic.max(out, 0, local[0])


@cuda.jit(cache=True)
def _scale(values, n, factor):
    """values *= factor, a power of two: exact, or rounded once as
    numpy's ldexp rounds (to a subnormal; to inf on overflow)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        values[i] = mul_rn(values[i], factor)


def _device_largest(values, valid=None, finite=True):
    """The largest value of a flat device array (of its ``valid`` cells),
    NaN skipped, infinities too when ``finite``; -inf when there is
    none."""
    n = values.size
    out = cuda.to_device(np.array([-np.inf]))
    if n:
        _largest[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
            values, values if valid is None else valid, n, valid is not None,
            finite, out)
    return float(out.copy_to_host()[0])


@cuda.jit(cache=True)
def _degrees(pred, n, degrees, direction):
    """GRASS degrees toward the predecessor; 0 at sources, NaN where
    unreached (as ``costdistance._direction_from_predecessor``)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        p = pred[i]
        if p >= 0:
            direction[i] = degrees[p]
        elif p == _cuda.PREDECESSOR_SOURCE:
            direction[i] = 0.0
        else:
            direction[i] = np.nan


class CostScan:
    """The cost raster on the device, its valid cells and what the API
    checks about them: ``n_valid``, ``n_negative`` and ``first_negative``
    ((row, col) of the first negative valid cell in scan order, or None)."""

    def __init__(self, array, nodata, stats=None):
        self.array = array
        self.nodata = nodata
        self.shape = array.shape
        rows, cols = self.shape
        n = rows * cols
        self.stats = stats
        timer = PhaseTimer(stats)
        target = _cuda.cost_dtype(array.dtype)
        from . import _cuda_bytes_for_cells
        check_device_memory(
            _cuda_bytes_for_cells(n, array.dtype),
            f"cost distance on a {rows} x {cols} raster")
        self.cost, self.valid = valid_cells_device(array, nodata, target)
        facts = cuda.to_device(np.array([0, 0, _NO_CELL], dtype=np.int64))
        if n:
            _scan_costs[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
                self.cost, self.valid, n, facts)
        self.n_valid, self.n_negative, first = (
            int(v) for v in facts.copy_to_host())
        self.first_negative = None if first == _NO_CELL else divmod(first,
                                                                    cols)
        timer.mark("to device, checks")

    def largest_finite_cost(self):
        """The largest finite valid cost of a float64 raster, 0 when there
        is none or it is not positive (as ``costdistance.
        _largest_finite_cost``); 0 for integer and float32 rasters, whose
        costs cannot add up to the float64 limit."""
        if not (np.issubdtype(self.array.dtype, np.floating)
                and self.array.dtype.itemsize >= 8):
            return 0.0
        largest = _device_largest(self.cost, self.valid)
        return largest if largest > 0 else 0.0

    def valid_at(self, cells):
        """Whether each (row, col) of ``cells`` is a valid cell (read off
        the host raster: a few cells)."""
        return valid_mask(self.array[cells[:, 0], cells[:, 1]], self.nodata)

    def solve(self, source_cells, ids, connectivity, step_lengths, max_cost,
              outputs, progress, exponent=0, check=None):
        """(accumulated, direction, allocation) of the sources, each None
        unless named in ``outputs``.

        ``exponent`` k > 0: the solve runs on cost / 2**k (and
        ``max_cost`` is taken as already divided), and the accumulated
        costs are multiplied back (``costdistance._overflow_exponent``
        says why).  ``check(farthest, host_outputs)``, when given, is
        called with the largest reached accumulated cost and a function
        returning the host (accumulated, predecessor) rasters, which it
        calls only when it needs them (the overflow check)."""
        from . import GRASS_DIRECTION_DEGREES
        rows, cols = self.shape
        n = rows * cols
        cells, cell_ids = _cuda.unique_sources(np.asarray(source_cells), ids,
                                               cols)
        grid = blocks_for(n, FLAT_THREADS)
        if exponent and n:
            _scale[grid, FLAT_THREADS](self.cost, n, 2.0 ** -exponent)
        dist, pred, alloc, _ = _cuda.solve_device(
            self.cost, self.valid, rows, cols, cells, cell_ids, connectivity,
            step_lengths, float(max_cost), progress.span(0.0, 0.9),
            stats=self.stats)
        self.cost = self.valid = None
        timer = PhaseTimer(self.stats)
        if exponent and n:
            _scale[grid, FLAT_THREADS](dist, n, 2.0 ** exponent)
        if check is not None:
            shape = (rows, cols)
            # as numpy's nanmax: +inf (an overflow) counts
            check(_device_largest(dist, finite=False),
                  lambda: (dist.copy_to_host().reshape(shape),
                           pred.copy_to_host().reshape(shape)))
        direction = None
        if "direction" in outputs:
            direction = cuda.device_array(n, dtype=np.float32)
            _degrees[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
                pred, n, cuda.to_device(GRASS_DIRECTION_DEGREES.astype(
                    np.float32)), direction)
        del pred
        timer.mark("directions")
        shape = (rows, cols)
        result = tuple(copy_to_host(device).reshape(shape)
                       if name in outputs else None
                       for name, device in (("accumulated", dist),
                                            ("direction", direction),
                                            ("allocation", alloc)))
        timer.mark("outputs to host")
        return result
