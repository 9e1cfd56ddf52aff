"""Minimum spanning tree (forest) of a raster grid graph."""

from dataclasses import dataclass

import numpy as np

from .._common import (as_progress, check_common_arguments, check_connectivity,
                       check_number, resolve_backend)
from ..tiling import check_unsupported_scale_options, load_raster
from ..errors import InvalidInputError

WEIGHTS = ("max", "min", "mean", "absdiff")

# Parent-direction raster: degrees counter-clockwise from east from a cell to
# its parent (the GRASS r.cost ``outdir`` convention), 0 at roots.
PARENT_OFFSETS = np.array([(0, 1), (-1, 0), (0, -1), (1, 0),
                           (-1, 1), (-1, -1), (1, -1), (1, 1)], dtype=np.int64)
PARENT_DEGREES = np.array([360.0, 90.0, 180.0, 270.0,
                           45.0, 135.0, 225.0, 315.0], dtype=np.float32)


@dataclass
class MSTResult:
    """Minimum spanning forest of the valid cells.

    Attributes
    ----------
    edges : (k, 2) ndarray of int64, or None
        Row-major cell indices (low, high) of each tree edge, rows in
        ascending (weight, low, high) order.  None when the run was asked
        for no edge list (``edges=False``).
    weights : (k,) ndarray of float32 (float64 for Float64 input), or None
        None with ``edges=False``.
    total_weight : float
        The exact sum of the tree's weights rounded once to float64 (so
        the same whatever order the weights are added in: every backend,
        tile size and ``edges`` option gives the same bits).
    trees : int
        Number of trees (connected pieces of valid cells).
    parent_direction : ndarray of float32
        Degrees counter-clockwise from east toward each cell's parent on the
        way to its tree's lowest-index cell; 0 at those roots; NaN on nodata.
    shape : tuple
        Raster shape, to turn cell indices into (row, col).
    """

    edges: np.ndarray
    weights: np.ndarray
    total_weight: float
    trees: int
    parent_direction: np.ndarray
    shape: tuple


def minimum_spanning_tree(values, connectivity=4, weight="max", nodata=None,
                          backend="auto", tile_size=None, memory_limit_mb=None,
                          executor=None, progress=None, band=1,
                          out_dir=None, edges=True):
    """Minimum spanning forest of the grid graph of a raster.

    Every valid cell is a vertex and neighbouring valid cells share an edge
    of weight ``f(v_a, v_b)``.  Ties are broken by the total order
    (weight, min(a, b), max(a, b)) on row-major cell indices, so the forest
    is unique and the same on every backend and tile size.

    Parameters
    ----------
    values : 2-D ndarray, memmap or str
    connectivity : {4, 8}
    weight : {"max", "min", "mean", "absdiff"}
        Edge weight from the two cell values; computed in float32 for inputs
        of 32 bits or fewer, float64 for 64-bit input.
    nodata, backend, tile_size, memory_limit_mb, executor, progress, band
        As in :func:`gridgraph.core.connected_components`.  The tiled path
        follows Haverkort's hierarchy (docs/architecture.md) and gives the same
        forest, edge order, weights and parent directions.  With a
        ``concurrent.futures.ThreadPoolExecutor`` the tiles run in its
        threads (the automatic tile size shrinks so that every worker's
        tile fits the memory limit); with ``backend="cuda"`` one tile is
        on the GPU at a time while the other threads do the CPU work.
    out_dir : str, optional
        Tiled path only: a folder for ``edges.npy`` (k x 2),
        ``weights.npy`` (k x 1, returned flattened) and
        ``parent_direction.npy``, returned as read-only memmaps; the edges
        are streamed there by a k-way merge, never held in memory.  The
        scratch files also go there.
    edges : bool, default True
        False: the result carries no edge list (``edges`` and ``weights``
        are None) while the parent directions, total weight and tree count
        are the same as with True.  The tiled path then never writes the
        sorted runs nor merges them (no ``edges.npy``/``weights.npy``; 20
        to 24 bytes per cell less on disk, and faster).

    Returns
    -------
    MSTResult

    References
    ----------
    Borůvka (1926); Sousa, MST solvers for multi-core CPUs and GPUs (2014);
    Vineet et al., Fast minimum spanning tree for large graphs on the GPU
    (HPG 2009).

    Examples
    --------
    >>> import numpy as np
    >>> grid = np.array([[1, 5],
    ...                  [2, 3]], dtype=np.float32)
    >>> tree = minimum_spanning_tree(grid, weight="absdiff", backend="cpu")
    >>> tree.edges
    array([[0, 2],
           [2, 3],
           [1, 3]])
    >>> float(tree.total_weight), tree.trees
    (4.0, 1)
    """
    check_common_arguments(values, nodata, band, progress, out_dir)
    connectivity = check_connectivity(connectivity, (4, 8))
    if not isinstance(weight, str) or weight not in WEIGHTS:
        raise InvalidInputError(
            f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    check_unsupported_scale_options(tile_size, memory_limit_mb, executor,
                                    tiled=True)
    progress = as_progress(progress)
    from .. import distributed
    from . import tiled
    plan = tiled.plan(values, band, tile_size, memory_limit_mb, executor)
    if plan is not None:
        return tiled.minimum_spanning_tree_tiled(
            plan, connectivity, WEIGHTS.index(weight),
            np.float64 if plan.source.dtype.itemsize > 4 else np.float32,
            nodata, distributed.resolve_backend(executor, backend), out_dir,
            executor, progress,
            keep_edges=bool(edges))
    array, file_nodata = load_raster(values, band)
    if nodata is None:
        nodata = file_nodata
    weight_dtype = np.float64 if array.dtype.itemsize > 4 else np.float32
    if resolve_backend(backend) == "cuda":
        # everything on the device; only the asked-for outputs come back
        from . import _cuda
        tree_edges, weights, total_weight, trees, parent_direction = \
            _cuda.minimum_spanning_tree(
                array, nodata, connectivity, WEIGHTS.index(weight),
                weight_dtype, bool(edges), progress)
        return MSTResult(
            edges=tree_edges, weights=weights, total_weight=total_weight,
            trees=trees, parent_direction=parent_direction,
            shape=array.shape)
    from . import _cpu
    valid = _cpu.valid_cells(array, nodata)  # valid_mask on all cores
    if edges:
        tree_edges, weights = _cpu.spanning_forest(
            array, valid, connectivity, WEIGHTS.index(weight), weight_dtype,
            progress.span(0.0, 0.8))
        parent_direction = _cpu.parent_direction(
            tree_edges, valid, progress.span(0.8, 1.0))
    else:
        # the directions, total and count need only the set of tree edges:
        # no sort, no edge list
        edge_ids, weights = _cpu.unsorted_forest(
            array, valid, connectivity, WEIGHTS.index(weight), weight_dtype,
            progress.span(0.0, 0.8))
        parent_direction = _cpu.forest_direction(
            edge_ids, valid, progress.span(0.8, 1.0))
        tree_edges = edge_ids
    n_valid = int(np.count_nonzero(valid))
    progress(1.0)
    trees = n_valid - len(tree_edges)
    total_weight = _cpu.exact_total(weights)
    if not edges:
        tree_edges = weights = None
    return MSTResult(
        edges=tree_edges, weights=weights, total_weight=total_weight,
        trees=trees, parent_direction=parent_direction, shape=array.shape)


def segment_by_threshold(result, threshold):
    """Cut tree edges heavier than ``threshold``; label the pieces.

    Returns an int32 (int64 past 2**31 cells) label raster numbered 1..n in
    scan order of each piece's first cell, 0 on nodata, and n.
    """
    from . import _cpu
    if not isinstance(result, MSTResult):
        raise InvalidInputError(
            "segment_by_threshold takes the result of minimum_spanning_tree, "
            f"got {type(result).__name__}")
    # NaN is refused, as segments_by_threshold refuses it: a threshold
    # that compares false with every weight is a mistake, not a request
    threshold = check_number("threshold", threshold, allow_none=False,
                             finite=False)
    if result.edges is None:
        raise InvalidInputError(
            "this spanning tree was computed without its edge list "
            "(edges=False): run minimum_spanning_tree with edges=True to "
            "segment it")
    keep = result.weights <= threshold
    valid = ~np.isnan(result.parent_direction)
    return _cpu.label_forest(result.edges[keep], valid)


from .segments import segments_by_threshold  # noqa: E402  (needs WEIGHTS)
