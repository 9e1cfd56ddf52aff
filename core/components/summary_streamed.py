"""Component summary of a tiled (out-of-core) label raster, read a strip
of rows at a time so that memory does not grow with the raster: the
attributes of the component polygons, equal to
:func:`gridgraph.core.component_summary`'s on the same rasters."""

import os

import numpy as np

from .. import tiling
from .._common import as_progress
from ..errors import InvalidInputError

# Cells per strip: a strip's sort (np.unique) and its arrays stay in the
# tens of MB whatever the raster's size.
STRIP_CELLS = 1 << 22


def _strips(shape, strip_cells):
    rows, cols = shape
    strip_rows = max(1, strip_cells // max(1, cols))
    return [tiling.Window(top, 0, min(strip_rows, rows - top), cols)
            for top in range(0, rows, strip_rows)]


def _zeros(out_dir, name, size, dtype):
    """A zeroed array: a ``.npy`` memmap in ``out_dir`` when one is given
    (arrays with one entry per component can be as large as a raster)."""
    if out_dir is None:
        return np.zeros(size, dtype=dtype)
    return np.lib.format.open_memmap(os.path.join(os.fspath(out_dir),
                                                  name + ".npy"),
                                     mode="w+", dtype=dtype, shape=(size,))


def component_summary_streamed(labels, values, count, band=1, out_dir=None,
                               progress=None, strip_cells=STRIP_CELLS):
    """Cell count and first value of each component, read strip by strip.

    The out-of-core twin of :func:`gridgraph.core.component_summary`, with
    the same results.

    Parameters
    ----------
    labels : 2-D integer ndarray, memmap or raster path
        Labels 1..count in scan order of each component's first cell, 0
        for none (a tiled :func:`connected_components` result).
    values : 2-D ndarray, memmap, raster path, or None
        The raster that was labelled (same shape); None when only the
        counts are wanted (``first_values`` is then None).
    count : int
        Number of components.
    band : int
        Band of ``values`` when it is a path.
    out_dir : str, optional
        Folder for the two per-component arrays (``component_cells.npy``,
        ``component_values.npy``), returned as memmaps; in memory without.
    progress : callable, optional
        ``progress(fraction) -> keep going``; False raises CancelledError.

    Returns
    -------
    cells : (count,) int64 array
    first_values : (count,) array of the values' dtype, or None
    """
    progress = as_progress(progress)
    label_source = tiling.open_source(labels)
    value_source = None if values is None else tiling.open_source(values,
                                                                  band)
    try:
        if value_source is not None and \
                tuple(value_source.shape) != tuple(label_source.shape):
            raise InvalidInputError(
                f"labels and values differ in shape: {label_source.shape} "
                f"and {value_source.shape}")
        cells = _zeros(out_dir, "component_cells", count, np.int64)
        first_values = None if value_source is None else _zeros(
            out_dir, "component_values", count, value_source.dtype)
        strips = _strips(label_source.shape, strip_cells)
        for done, window in enumerate(strips):
            strip = label_source.read(window).ravel()
            present, first_index, counts = np.unique(
                strip, return_index=True, return_counts=True)
            keep = (present >= 1) & (present <= count)
            index = present[keep].astype(np.int64) - 1
            if value_source is not None:
                # a component is new when no earlier strip counted a cell of
                # it: its first cell in this strip is its first in scan order
                new = cells[index] == 0
                strip_values = value_source.read(window).ravel()
                first_values[index[new]] = \
                    strip_values[first_index[keep][new]]
            cells[index] += counts[keep]
            progress((done + 1) / len(strips))
    finally:
        label_source.close()
        if value_source is not None:
            value_source.close()
    return cells, first_values
