"""Round 0 of the tiled cost distance: each tile's :class:`Survey`."""

from dataclasses import dataclass

import numpy as np

from ..._common import valid_mask
from ..sources import source_ids_of, source_raster_mask
from .band import band_cells

# --------------------------------------------------------------------------
# round 0: survey


@dataclass
class Survey:
    """Round 0's message of one tile: ``valid`` (count of valid cells),
    ``negative`` (count) and ``first_negative`` ((row, col, value) of the
    first in scan order, or None), ``band_cost`` (float64, NaN on
    barriers), ``largest`` (the largest finite float64 cost, else 0) and,
    for a source raster, ``source_cells`` (global (row, col)),
    ``source_ids`` and ``blocked`` (the source cells on barriers)."""

    valid: int
    negative: int
    first_negative: tuple
    band_cost: np.ndarray
    largest: float
    source_cells: np.ndarray = None
    source_ids: np.ndarray = None
    blocked: np.ndarray = None


def survey_tile(cost_source, window, nodata, margin, source_raster,
                source_nodata):
    """Per tile: cost checks, band costs and (for a source raster) sources,
    as a :class:`Survey`."""
    cost = cost_source.read(window)
    valid = valid_mask(cost, nodata)
    negative = valid & (cost < 0)
    n_negative = int(np.count_nonzero(negative))
    first_negative = None
    if n_negative:
        r, c = np.argwhere(negative)[0]
        first_negative = (window.row + int(r), window.col + int(c),
                          cost[r, c])
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    band_cost = np.where(valid[band_r, band_c],
                         cost[band_r, band_c].astype(np.float64), np.nan)
    survey = Survey(valid=int(np.count_nonzero(valid)), negative=n_negative,
                    first_negative=first_negative, band_cost=band_cost,
                    largest=_largest_finite(cost, valid))
    if source_raster is not None:
        raster = source_raster.read(window)
        mask = source_raster_mask(raster, source_nodata)
        cells = np.argwhere(mask).astype(np.int64)
        ids = source_ids_of(raster[mask])
        cells[:, 0] += window.row
        cells[:, 1] += window.col
        survey.source_cells = cells
        survey.source_ids = ids
        survey.blocked = cells[~valid[cells[:, 0] - window.row,
                                      cells[:, 1] - window.col]]
    return survey


def _largest_finite(cost, valid):
    """The largest finite valid cost of a float64 tile, else 0 (costs of
    32 bits or fewer cannot add up to the float64 limit)."""
    if cost.dtype != np.float64:
        return 0.0
    with np.errstate(invalid="ignore"):
        largest = float(np.max(cost, where=valid & (cost < np.inf),
                               initial=0.0))
    return largest
