"""Strip bounds of a labelling that give the strips equal shares of the
estimated first-pass cost (:func:`_balanced_bounds`), for both drivers of
:mod:`._cpu` (the kernel calls and the team of :mod:`._cpu_team`)."""

import numpy as np
from numba import njit

from ._cpu_passes import _RUN_SCAN_MIN_CELLS_PER_RUN
from ._cpu_runs import _run_bounds_equal, _run_bounds_nonzero

# Rows sampled to balance the strips' first-pass costs
_BALANCE_SAMPLE_ROWS = 48
# cells tested first on each sampled row, and the runs in them (one per
# this many cells) that make the row rough without testing the rest
_BALANCE_PREFIX = 512
_BALANCE_PREFIX_CELLS_PER_RUN = 6


@njit(cache=True, nogil=True)
def _balanced_bounds(values, valid, check_valid, nonzero, strip_count,
                     samples):
    """Strip bounds (``strip_count + 1`` rows) that split the estimated
    first-pass cost evenly: ``samples`` rows spread over the raster stand
    for the rows around them.  A rough row (at least one run per
    ``_RUN_SCAN_MIN_CELLS_PER_RUN`` cells) costs its cells (the cell
    scan); a smooth one, labelled run by run, a sixteenth of its cells
    (the run bounds read 64 cells at a time) and 8 cells a run (2-core box,
    4096² fractal mask, one thread: the two strips' first passes within
    5 % of each other, 3.05 and 2.93 ms, against 3.47 and 2.60 ms for
    equal rows; 2048²: 0.98 us a row of ~20 runs, the cell scan 4.3 ns a
    cell).  On a fractal mask the rows differ by their runs (4096²: 60 %
    more in the top half); on a random one all rows cost the same.  A
    strip that would get no row gives equal rows instead."""
    rows, cols = values.shape
    bounds_buffer = np.empty((cols + 9, 3), dtype=np.int64)
    bounds_kept = np.empty((2, cols // 64 + 2), dtype=np.uint64)
    costs = np.empty(samples + 1, dtype=np.float64)
    costs[0] = 0.0
    for index in range(samples):
        # the sample stands for rows [index, index + 1) * rows / samples
        row = (2 * index + 1) * rows // (2 * samples)
        inside = valid[row if check_valid else 0]
        # a row whose first cells hold a run every few cells (a random
        # mask's: one in 4) is rough: no need to find all its runs
        smooth = True
        for stop in (min(cols, _BALANCE_PREFIX), cols):
            if smooth:
                if nonzero:
                    runs = _run_bounds_nonzero(values[row, :stop],
                                               inside[:stop], check_valid,
                                               bounds_buffer, bounds_kept)
                else:
                    runs = _run_bounds_equal(values[row, :stop],
                                             inside[:stop], check_valid,
                                             bounds_buffer)
                smooth = runs * (_RUN_SCAN_MIN_CELLS_PER_RUN if stop == cols
                                 else _BALANCE_PREFIX_CELLS_PER_RUN) <= stop
        cost = cols / 16 + 8.0 * runs if smooth else float(cols)
        costs[index + 1] = costs[index] + cost
    bounds = np.empty(strip_count + 1, dtype=np.int64)
    bounds[0] = 0
    bounds[strip_count] = rows
    sample = 0
    for strip in range(1, strip_count):
        target = costs[samples] * strip / strip_count
        while costs[sample + 1] < target:
            sample += 1
        share = (target - costs[sample]) / max(
            costs[sample + 1] - costs[sample], 1e-300)
        bounds[strip] = int(round((sample + share) * rows / samples))
    for strip in range(strip_count):
        if bounds[strip + 1] <= bounds[strip]:
            # a strip without rows: equal rows instead
            for other in range(strip_count + 1):
                bounds[other] = (other * rows + strip_count // 2) \
                    // strip_count
            break
    return bounds
