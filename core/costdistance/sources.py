"""The checks of a cost raster and its sources, shared by the in-memory
path (:func:`gridgraph.core.cost_distance`) and the tiled one
(:mod:`.rounds`, from the tiles' surveys): one wording, one rule."""

import numpy as np

from .._common import valid_mask
from ..errors import InvalidInputError


def source_raster_mask(raster, source_nodata=None):
    """The source cells of a source raster (or of a window of it): its
    valid non-zero cells."""
    mask = raster != 0
    if np.issubdtype(raster.dtype, np.floating):
        mask &= ~np.isnan(raster)
    if source_nodata is not None:
        mask &= valid_mask(raster, source_nodata)
    return mask


def source_ids_of(values):
    """The ids of source cells of a source raster: their values (1 for a
    boolean raster)."""
    return values.astype(np.int64) if values.dtype != bool else \
        np.ones(len(values), np.int64)


def check_costs(n_valid, n_negative, first_negative):
    """Refuse a cost raster without valid cells or with negative costs
    (``first_negative``: (row, col, value) of the first in scan order)."""
    if not n_valid:
        raise InvalidInputError(
            "the cost raster has no valid cell (every cell is nodata or NaN): "
            "check the band and its nodata value")
    if n_negative:
        row, col, value = first_negative
        raise InvalidInputError(
            f"the cost raster has {n_negative} negative cell(s), "
            f"first at row {row}, column {col} (value {value}): "
            "costs must be >= 0; set them to nodata to make barriers, or "
            "shift/rescale the raster")


def check_no_source_cells(count):
    """Refuse a source raster without a source cell."""
    if count == 0:
        raise InvalidInputError(
            "the source raster has no source cell (no valid non-zero "
            "cell): give sources as non-zero cells of the raster")


def check_blocked_sources(cells, blocked_cells):
    """Refuse sources on barrier cells (``blocked_cells``, a subset of
    ``cells``, in scan or list order)."""
    if len(blocked_cells) == 0:
        return
    if len(blocked_cells) == len(cells):
        raise InvalidInputError(
            "every source lies on a barrier (nodata or NaN cost) cell: "
            + describe_cells(blocked_cells)
            + "; move the sources onto cells with a valid cost")
    raise InvalidInputError(
        f"{len(blocked_cells)} source(s) lie on barrier (nodata or NaN "
        "cost) cells: " + describe_cells(blocked_cells)
        + "; move them onto cells with a valid cost or remove them")


def describe_cells(cells, limit=5):
    """The first ``limit`` (row, col) cells in words, and how many more."""
    text = ", ".join(f"(row {r}, col {c})" for r, c in cells[:limit])
    if len(cells) > limit:
        text += f" and {len(cells) - limit} more"
    return text
