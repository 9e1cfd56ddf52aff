"""Threshold segments straight from the raster, without the spanning tree."""

import numbers

import numpy as np

from .._common import (as_progress, check_connectivity, check_number,
                       valid_mask)
from ..tiling import load_raster
from ..errors import InvalidInputError


def segments_by_threshold(values, threshold, connectivity=4, weight="max",
                          nodata=None, progress=None, band=1):
    """Label the pieces of the graph of edges whose weight is <= threshold.

    The same labels, numbered the same way, as
    ``segment_by_threshold(minimum_spanning_tree(values, ...), threshold)``
    (the pieces of the minimum spanning forest without its edges heavier
    than the threshold are the pieces of the graph of all edges at or
    under it), computed by a union-find labelling of the grid: no tree, no
    edge list.  The CPU does it, whatever backend the tree would use.

    Parameters
    ----------
    values : 2-D ndarray, memmap or str
        As in :func:`gridgraph.core.minimum_spanning_tree` (held in memory).
    threshold : float, or a sequence of floats
        Not NaN (infinities are fine).  Edges with ``weight <= threshold``
        join cells, compared as
        ``segment_by_threshold`` compares the tree's weights (numpy's
        comparison of the weights' dtype, float32 for inputs of 32 bits or
        fewer, with a Python float).  A sequence gives one labelling per
        threshold and shares the union-find work between them.
    connectivity : {4, 8}
    weight : {"max", "min", "mean", "absdiff"}
    nodata : number, optional
        Cells equal to it are not vertices; NaN never is one.
    progress : callable, optional
        ``progress(fraction)``; returning False cancels (CancelledError).
    band : int
        Band to read when ``values`` is a path.

    Returns
    -------
    (labels, count), or a list of them in the order of a sequence of
    thresholds.  ``labels`` is int32 (int64 from 2**31 - 1 cells on),
    1..count in scan order of each segment's first cell, 0 on nodata.

    Examples
    --------
    >>> import numpy as np
    >>> grid = np.array([[1, 2, 9],
    ...                  [1, 5, 9]], dtype=np.float32)
    >>> labels, count = segments_by_threshold(grid, 1.5, weight="absdiff")
    >>> labels
    array([[1, 1, 2],
           [1, 3, 2]], dtype=int32)
    >>> [count for _, count in segments_by_threshold(
    ...     grid, [0.5, 1.5, 4.0], weight="absdiff")]
    [4, 3, 1]
    """
    from . import WEIGHTS
    connectivity = check_connectivity(connectivity, (4, 8))
    if weight not in WEIGHTS:
        raise InvalidInputError(
            f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    single = isinstance(threshold, numbers.Real) or (
        isinstance(threshold, np.ndarray) and threshold.ndim == 0)
    thresholds = [threshold] if single else list(np.asarray(threshold).ravel()
                                                if isinstance(threshold,
                                                              np.ndarray)
                                                else threshold)
    if not thresholds:
        raise InvalidInputError("give at least one threshold")
    thresholds = [check_number("threshold", t, allow_none=False,
                               finite=False) for t in thresholds]
    progress = as_progress(progress)
    array, file_nodata = load_raster(values, band)
    if nodata is None:
        nodata = file_nodata
    valid = valid_mask(array, nodata)
    weight_dtype = np.float64 if array.dtype.itemsize > 4 else np.float32
    weights = np.ascontiguousarray(array, dtype=weight_dtype)
    effective = [comparison_threshold(t, weight_dtype) for t in thresholds]
    ordered = sorted(set(effective))
    from ._segments_cpu import label_thresholds
    labelled = dict(zip(ordered, label_thresholds(
        weights, valid, connectivity, WEIGHTS.index(weight), ordered,
        progress)))
    results = []
    for t in effective:
        labels, count = labelled[t]
        if any(labels is earlier for earlier, _ in results):
            labels = labels.copy()  # one array per threshold asked for
        results.append((labels, count))
    progress(1.0)
    return results[0] if single else results


def comparison_threshold(threshold, weight_dtype):
    """The float64 number that a weight of ``weight_dtype`` is compared with
    when numpy compares an array of such weights with ``threshold`` as a
    Python float (numpy 1.x: cast to float32 when it fits its range, else
    float64; numpy 2: cast to the array's dtype)."""
    threshold = float(threshold)
    dtype = np.result_type(np.empty(1, weight_dtype), threshold)
    with np.errstate(over="ignore"):
        return float(dtype.type(threshold))
