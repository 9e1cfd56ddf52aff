"""Accumulated cost distance over a friction raster (multi-source Dijkstra)."""

from dataclasses import dataclass

import numpy as np

from .._common import (as_progress, check_common_arguments, check_connectivity,
                       check_nodata, check_number, resolve_backend, valid_mask)
from ..tiling import check_unsupported_scale_options, load_raster
from ..errors import InvalidInputError
from .sources import (check_blocked_sources, check_costs,
                      check_no_source_cells, describe_cells, source_ids_of,
                      source_raster_mask)

# Neighbour offsets (drow, dcol) in the order the kernels use, and the GRASS
# r.cost ``outdir`` value of a cell whose predecessor lies at that offset:
# degrees counter-clockwise from east, pointing to the next cell on the way
# back to the source (north is row - 1).
NEIGHBOUR_OFFSETS = np.array([
    (0, 1), (-1, 0), (0, -1), (1, 0),            # 4-connected
    (-1, 1), (-1, -1), (1, -1), (1, 1),          # + diagonals = 8
    (-1, 2), (-2, 1), (-2, -1), (-1, -2),        # + knight's moves = 16
    (1, -2), (2, -1), (2, 1), (1, 2),
], dtype=np.int64)
# The two cells each move passes between, as (drow, dcol) from its start
# cell: a knight's move (dr, dc) is allowed only when both are valid, so a
# one-cell-thick barrier wall cannot be jumped (GRASS r.cost -k refuses such
# moves too).  One-cell steps pass between no cell; their rows hold (0, 0),
# the start cell itself, so a test of them always passes.
KNIGHT_PASSED_CELLS = np.zeros((16, 2, 2), dtype=np.int64)
for _i, (_dr, _dc) in enumerate(NEIGHBOUR_OFFSETS[8:], start=8):
    if abs(_dr) == 1:   # (r, c + dc/2) and (r + dr, c + dc/2)
        KNIGHT_PASSED_CELLS[_i] = ((0, _dc // 2), (_dr, _dc // 2))
    else:               # (r + dr/2, c) and (r + dr/2, c + dc)
        KNIGHT_PASSED_CELLS[_i] = ((_dr // 2, 0), (_dr // 2, _dc))
del _i, _dr, _dc
GRASS_DIRECTION_DEGREES = np.array([
    360.0, 90.0, 180.0, 270.0,
    45.0, 135.0, 225.0, 315.0,
    22.5, 67.5, 112.5, 157.5,
    202.5, 247.5, 292.5, 337.5,
], dtype=np.float32)


@dataclass
class CostDistanceResult:
    """Outputs of :func:`cost_distance`.

    Attributes
    ----------
    accumulated : ndarray of float64
        Least accumulated cost from the nearest source; NaN on barriers,
        unreachable cells and cells beyond ``max_cost``.
    direction : ndarray of float32
        GRASS r.cost ``outdir`` convention: degrees counter-clockwise from
        east toward the next cell on the least-cost path back to a source;
        0 at sources, NaN where ``accumulated`` is NaN.
    allocation : ndarray of int32 (int64 when an id needs it)
        Id of the source each cell is reached from; 0 where unreached.
        int32 when every source id fits in 32 bits (the default ids 1..k
        do below 2**31 sources), else int64: :func:`allocation_dtype`,
        the same on every backend, tile size and executor.
    """

    accumulated: np.ndarray
    direction: np.ndarray
    allocation: np.ndarray


def cost_distance(cost, sources, connectivity=8, max_cost=None, nodata=None,
                  backend="auto", cell_size=None, source_ids=None,
                  source_nodata=None, tile_size=None, memory_limit_mb=None,
                  executor=None, progress=None, band=1, out_dir=None,
                  outputs=None):
    """Least accumulated cost from a set of source cells to every cell.

    Moving between neighbours a and b costs ``(c_a + c_b) / 2 * L``, with
    L = 1, sqrt(2) or sqrt(5) cells (the convention of GRASS r.cost and
    skimage's ``MCP_Geometric``).  Costs accumulate in float64.  A knight's
    move (16-connectivity) is allowed only when the two cells it passes
    between are valid too, so it never jumps a barrier (as GRASS r.cost -k);
    a diagonal step may pass between two barrier cells.

    Where several least-cost paths cost exactly the same, the direction
    and allocation follow the one with the fewest steps, then the
    neighbour listed first in ``NEIGHBOUR_OFFSETS``: every backend and tile
    size gives the same rasters.

    Parameters
    ----------
    cost : 2-D ndarray, memmap or str
        Friction per cell (or a GDAL-readable path, ``band`` is read).
        NaN and ``nodata`` cells are barriers; negative costs are an error.
    sources : (k, 2) integer array-like or 2-D array shaped like ``cost``
        Either (row, col) source cells, or a raster whose non-zero, non-NaN
        cells are sources.
    connectivity : {4, 8, 16}
        16 adds knight's moves (only past two valid cells).
    max_cost : float, optional
        Cells whose accumulated cost would exceed it are left unreached.
    nodata : number, optional
        Cost value that marks barriers.
    cell_size : (float, float), optional
        ``(xres, yres)``; when given, step lengths are in map units
        (e.g. a diagonal step is ``hypot(xres, yres)``) instead of cells.
    source_ids : sequence of int, optional
        Allocation id of each (row, col) source; default 1..k.  For a source
        raster the id is the raster's value at the source cell.
    source_nodata : number, optional
        For a source raster: cells equal to this value are not sources
        (its band's nodata value, when it is not 0).
    backend, tile_size, memory_limit_mb, executor, progress, band
        As in :func:`gridgraph.core.connected_components`.  The tiled path
        (docs/architecture.md) gives the same rasters to the bit.
        With ``backend="cuda"`` a raster too large for the GPU goes to the
        tiled path with tiles that fit it.
    out_dir : str, optional
        Tiled path only: a folder for ``accumulated.npy``,
        ``direction.npy`` and ``allocation.npy`` (returned as read-only
        memmaps) and for the scratch files.  A source raster may then be
        a memmap too; it is read tile by tile.
    outputs : iterable of {"accumulated", "direction", "allocation"}, optional
        The rasters wanted (default: all three); the others are None in the
        result, and the tiled path neither computes nor writes them.

    Returns
    -------
    CostDistanceResult

    Raises
    ------
    InvalidInputError
        Negative cost, no source, a source outside the raster or on a
        barrier cell (the message lists them), or a bad option.

    References
    ----------
    Dijkstra, A note on two problems in connexion with graphs (1959);
    GRASS GIS r.cost manual (movement direction convention).

    Examples
    --------
    >>> import numpy as np
    >>> cost = np.ones((3, 4))
    >>> out = cost_distance(cost, [(0, 0)], connectivity=4, backend="cpu")
    >>> out.accumulated
    array([[0., 1., 2., 3.],
           [1., 2., 3., 4.],
           [2., 3., 4., 5.]])
    """
    check_common_arguments(cost, nodata, band, progress, out_dir)
    connectivity = check_connectivity(connectivity, (4, 8, 16))
    outputs = _check_outputs(outputs)
    check_unsupported_scale_options(tile_size, memory_limit_mb, executor,
                                    tiled=True)
    progress = as_progress(progress)
    check_nodata(source_nodata, "source_nodata")
    _step_lengths(connectivity, cell_size)
    if max_cost is not None:
        max_cost = check_number("max_cost", max_cost, minimum=0, above=True,
                                finite=False)
        if max_cost == np.inf:
            max_cost = None  # no limit
    from .. import distributed
    from . import rounds, tiled
    backend = distributed.resolve_backend(executor, backend)
    plan = distributed.fit_tiles_to_gpus(
        tiled.plan(cost, band, tile_size, memory_limit_mb, executor),
        executor, backend, tile_size, _cuda_bytes_for_cells,
        lambda side: tiled.plan(cost, band, side, memory_limit_mb, executor))
    if plan is None and backend == "cuda":
        from .._cuda_common import gpu_tiled_plan
        from . import _cuda
        plan = gpu_tiled_plan(cost, band, memory_limit_mb, executor,
                              _cuda_bytes_for_cells, tiled.plan)
    if plan is not None:
        return rounds.cost_distance_tiled(
            plan, sources, source_ids, source_nodata, connectivity,
            _step_lengths(connectivity, cell_size), max_cost, nodata,
            out_dir, executor, progress, backend, outputs)
    array, file_nodata = load_raster(cost, band)
    if nodata is None:
        nodata = file_nodata
    if backend == "cuda":
        # the valid cells and the checks below are computed on the device
        from ._cuda_outputs import CostScan
        scan = CostScan(array, nodata)
        n_valid, n_negative = scan.n_valid, scan.n_negative
        first_negative, valid_at = scan.first_negative, scan.valid_at
    else:
        valid = valid_mask(array, nodata)
        n_valid = int(np.count_nonzero(valid))
        negative = valid & (array < 0)
        n_negative = int(np.count_nonzero(negative))
        first_negative = np.argwhere(negative)[0] if n_negative else None

        def valid_at(cells):
            return valid[cells[:, 0], cells[:, 1]]
    check_costs(n_valid, n_negative, None if not n_negative else (
        *first_negative, array[tuple(first_negative)]))
    source_cells, ids = _source_cells(sources, source_ids, array.shape,
                                      source_nodata)
    check_blocked_sources(source_cells,
                          source_cells[~valid_at(source_cells)])
    step_lengths = _step_lengths(connectivity, cell_size)
    if backend == "cuda":
        # all on the device (float64 costs too: their largest cost, the
        # scaling and the overflow check's first test), only the asked-for
        # outputs come back
        largest = scan.largest_finite_cost()
        exponent = _overflow_exponent(largest, step_lengths)
        limit = np.inf if max_cost is None else max_cost
        check = None
        if largest and (max_cost is None or exponent):
            def check(farthest, host_outputs):
                if farthest + largest * float(np.max(step_lengths)) \
                        < FLOAT64_MAX:
                    return  # one more step from the farthest cell fits
                accumulated, predecessor = host_outputs()
                _check_no_overflow(array, valid_mask(array, nodata),
                                   accumulated, predecessor,
                                   max_cost is None, largest, step_lengths)
        accumulated, direction, allocation = scan.solve(
            source_cells, ids, connectivity, step_lengths,
            np.ldexp(limit, -exponent) if exponent else limit, outputs,
            progress, exponent, check)
        progress(1.0)
        return CostDistanceResult(accumulated, direction, allocation)
    from . import _cpu as kernels
    largest = _largest_finite_cost(array, valid)
    exponent = _overflow_exponent(largest, step_lengths)
    limit = np.inf if max_cost is None else max_cost
    unscaled = array
    if exponent:
        array = np.ldexp(array.astype(np.float64), -exponent)
        limit = np.ldexp(limit, -exponent)
    # the predecessor pass only when directions or allocations are wanted
    accumulated, predecessor, allocation = kernels.solve(
        array, valid, source_cells, ids, connectivity, step_lengths,
        limit, progress, predecessors=outputs != ("accumulated",))
    if exponent:
        with np.errstate(over="ignore"):
            accumulated = np.ldexp(accumulated, exponent)
    if largest and (max_cost is None or exponent):
        _check_no_overflow(unscaled, valid, accumulated, predecessor,
                           max_cost is None, largest, step_lengths)
    direction = _direction_from_predecessor(predecessor) \
        if "direction" in outputs else None
    progress(1.0)
    return CostDistanceResult(
        accumulated if "accumulated" in outputs else None, direction,
        allocation.astype(allocation_dtype(ids), copy=False)
        if "allocation" in outputs else None)


OUTPUTS = ("accumulated", "direction", "allocation")


def allocation_dtype(ids):
    """The allocation raster's dtype for source ``ids``: int32 when every
    id (and 0, unreached) fits in 32 bits, else int64."""
    ids = np.asarray(ids)
    info = np.iinfo(np.int32)
    if ids.size == 0 or (int(ids.min()) >= info.min
                         and int(ids.max()) <= info.max):
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def _check_outputs(outputs):
    if outputs is None:
        return OUTPUTS
    if isinstance(outputs, str):
        outputs = (outputs,)
    try:
        outputs = tuple(outputs)
    except TypeError:
        outputs = (outputs,)
    unknown = [o for o in outputs if not isinstance(o, str)
               or o not in OUTPUTS]
    if unknown or not outputs:
        raise InvalidInputError(
            f"outputs must name one or more of {', '.join(OUTPUTS)}, got "
            f"{outputs!r}")
    return tuple(o for o in OUTPUTS if o in outputs)


def least_cost_path(result, row, col):
    """Cells of the least-cost path from ``(row, col)`` back to its source.

    Follows ``result.direction``; returns an ``(n, 2)`` int64 array of
    (row, col) starting at the given cell and ending at a source, or None
    when the cell was not reached.
    """
    if not isinstance(result, CostDistanceResult) or result.direction is None:
        raise InvalidInputError(
            "least_cost_path takes a cost_distance result with its direction "
            "raster (outputs including 'direction')")
    direction = result.direction
    row = check_number("row", row, allow_none=False, integer=True)
    col = check_number("col", col, allow_none=False, integer=True)
    if not (0 <= row < direction.shape[0] and 0 <= col < direction.shape[1]):
        raise InvalidInputError(
            f"cell ({row}, {col}) lies outside the {direction.shape} raster")
    if np.isnan(direction[row, col]):
        return None
    lookup = {float(d): tuple(o) for d, o in
              zip(GRASS_DIRECTION_DEGREES, NEIGHBOUR_OFFSETS)}
    cells = [(row, col)]
    limit = direction.size
    while direction[row, col] != 0:
        drow, dcol = lookup[float(direction[row, col])]
        row, col = row + drow, col + dcol
        cells.append((row, col))
        if len(cells) > limit:  # a cycle would mean a corrupt direction raster
            raise RuntimeError("direction raster has a cycle")
    return np.array(cells, dtype=np.int64)


def _source_cells(sources, source_ids, shape, source_nodata=None):
    try:
        sources = np.asarray(sources)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(
            "sources must be a (k, 2) array of (row, col) cells or a raster "
            f"of shape {shape}: {error}") from None
    if sources.dtype.kind not in "biuf":
        raise InvalidInputError(
            "sources must be a (k, 2) array of (row, col) cells or a raster "
            f"of shape {shape}, got values of dtype {sources.dtype}")
    # A (k, 2) integer array is a list of cells even when the raster happens
    # to have two columns; pass a boolean mask for such a raster.
    if sources.ndim == 2 and sources.shape == shape and not (
            shape[1] == 2 and np.issubdtype(sources.dtype, np.integer)):
        if source_ids is not None:
            raise InvalidInputError(
                "source_ids only applies to (row, col) sources; a source "
                "raster's ids are its cell values")
        mask = source_raster_mask(sources, source_nodata)
        cells = np.argwhere(mask).astype(np.int64)
        check_no_source_cells(len(cells))
        return cells, source_ids_of(sources[mask])
    if sources.size == 0:
        raise InvalidInputError(
            "no source cells were given: pass at least one (row, col) source "
            "or a source raster")
    if sources.ndim != 2 or sources.shape[1] != 2:
        raise InvalidInputError(
            f"sources must be a (k, 2) array of (row, col) cells or a raster of "
            f"shape {shape}, got an array of shape {sources.shape}")
    if not np.issubdtype(sources.dtype, np.integer):
        if not (np.all(np.isfinite(sources))
                and np.all(np.equal(np.mod(sources, 1), 0))
                and np.all(np.abs(sources) < 2**62)):
            raise InvalidInputError("source (row, col) cells must be integers")
    cells = sources.astype(np.int64)
    outside = ((cells[:, 0] < 0) | (cells[:, 0] >= shape[0])
               | (cells[:, 1] < 0) | (cells[:, 1] >= shape[1]))
    if outside.any():
        raise InvalidInputError(
            f"{int(outside.sum())} source(s) lie outside the {shape[0]} x "
            f"{shape[1]} raster: " + _describe_cells(cells[outside])
            + "; remove them or enlarge the raster")
    if source_ids is None:
        ids = np.arange(1, len(cells) + 1, dtype=np.int64)
    else:
        try:
            ids = np.asarray(source_ids)
            if ids.dtype.kind not in "biu" and not (
                    ids.dtype.kind == "f" and np.all(np.isfinite(ids))
                    and np.all(ids == np.floor(ids))
                    and np.all(np.abs(ids) < 2**63)):
                raise ValueError(f"got values of dtype {ids.dtype}")
            ids = ids.astype(np.int64)
        except (TypeError, ValueError, OverflowError) as error:
            raise InvalidInputError(
                f"source_ids must be whole numbers, one per source: {error}"
            ) from None
        if ids.shape != (len(cells),):
            raise InvalidInputError(
                f"source_ids must have one id per source ({len(cells)}), "
                f"got {ids.shape}")
    return cells, ids


_describe_cells = describe_cells


def _step_lengths(connectivity, cell_size):
    offsets = NEIGHBOUR_OFFSETS[:connectivity].astype(np.float64)
    if cell_size is None:
        xres = yres = 1.0
    else:
        try:
            xres, yres = cell_size
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"cell_size must be two positive numbers (xres, yres), got "
                f"{cell_size!r}") from None
        xres, yres = (abs(check_number("cell_size", v, allow_none=False))
                      for v in (xres, yres))
        if not (xres > 0 and yres > 0):
            raise InvalidInputError(
                f"cell_size must be two positive numbers, got {cell_size!r}")
    return np.hypot(offsets[:, 0] * yres, offsets[:, 1] * xres)


# Largest finite float64.
FLOAT64_MAX = np.finfo(np.float64).max


def _largest_finite_cost(array, valid):
    """The largest finite valid cost of a float64 raster; 0 for integer
    and float32 rasters, whose costs cannot add up to the float64 limit."""
    if not np.issubdtype(array.dtype, np.floating) or array.dtype.itemsize < 8:
        return 0.0
    with np.errstate(invalid="ignore"):
        largest = float(np.max(array, where=valid & (array < np.inf),
                               initial=-np.inf))
    return largest if largest > 0 else 0.0


def _overflow_exponent(largest, step_lengths):
    """k > 0 when costs this large would overflow a single step's
    (c_a + c_b) / 2 * L: the kernels then run on cost / 2**k and the
    accumulated costs are multiplied back by 2**k.  A power of two scales
    every sum and comparison exactly (no rounding changes; costs below
    2**-1000 or so would lose bits, which no real friction raster mixes
    with costs near 1e308), so the result is the one exact arithmetic on
    the unscaled costs would give, where that fits in a float64."""
    if not largest:
        return 0
    # a step's cost and a sum of two accumulated costs stay finite below
    # a quarter of the range
    excess = (np.log2(largest) + 1.0 + np.log2(float(np.max(step_lengths)))
              - np.log2(FLOAT64_MAX / 4))
    if excess < 0:
        return 0
    return int(np.ceil(excess)) + 1


def _check_no_overflow(cost, valid, accumulated, predecessor, unlimited,
                       largest, step_lengths):
    """Raise when an accumulated cost overflowed float64.

    Two signs: a reached cell whose accumulated cost is +inf (after
    scaling back), and, without max_cost, a valid finite-cost cell left
    unreached beside a reached finite-cost cell (the kernels drop a sum
    that became +inf as if the cell were behind a barrier).  +inf cost
    cells are barriers and never count.
    """
    farthest = float(np.nanmax(accumulated, initial=0.0))
    if farthest + largest * float(np.max(step_lengths)) < FLOAT64_MAX:
        return  # one more step from the farthest cell still fits
    # without predecessors (accumulated costs only): unreached cells are
    # exactly the NaN ones
    reached = predecessor != -1 if predecessor is not None \
        else ~np.isnan(accumulated)
    overflowed = reached & ~np.isfinite(accumulated)
    if unlimited:
        open_cell = valid & np.isfinite(cost)
        settled = reached & open_cell
        stuck = open_cell & ~reached
        rows, cols = cost.shape
        for drow, dcol in ((0, 1), (1, 0)):
            here = (slice(0, rows - drow), slice(0, cols - dcol))
            there = (slice(drow, rows), slice(dcol, cols))
            overflowed[there] |= settled[here] & stuck[there]
            overflowed[here] |= settled[there] & stuck[here]
    if overflowed.any():
        row, col = np.argwhere(overflowed)[0]
        raise InvalidInputError(
            f"accumulated costs pass the largest float64 ({FLOAT64_MAX:.3g}) "
            f"at {int(overflowed.sum())} cell(s), first at row {row}, "
            f"column {col}: the costs (up to {largest:.6g}) are too large to "
            "add up along a path; divide the cost raster by a constant "
            "(e.g. 1e300) and multiply the result back, or set a maximum "
            "cost")


def _direction_from_predecessor(predecessor):
    """Turn neighbour indices (-1 unreached, -2 source) into GRASS degrees."""
    from ._cpu import directions_in_degrees
    return directions_in_degrees(np.ascontiguousarray(predecessor),
                                 GRASS_DIRECTION_DEGREES)


def _cuda_bytes_for_cells(n_cells, dtype):
    """The GPU memory an in-memory CUDA run of ``n_cells`` cells of
    ``dtype`` asks :func:`~gridgraph.core._cuda_common.check_device_memory`
    for (``_cuda_outputs.CostScan``: the solve plus 4 bytes a cell), so the
    choice of GPU tiles agrees with the check that would refuse it."""
    from . import _cuda
    return (_cuda.device_bytes(n_cells, _cuda.cost_dtype(dtype).itemsize)
            + 4 * n_cells)
