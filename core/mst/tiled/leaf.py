"""Round 1 of the tiled MST: a leaf tile's forest and its message."""

import threading
from dataclasses import dataclass

import numpy as np

from ..._common import Progress
from .._cpu import valid_cells
from .forest import (Graph, _local_ids, _low_bits_from_ids,
                     compress_tile_bands)

# One CUDA solve at a time: tile threads share the device (its memory is
# sized for one tile's solve) and numba's CUDA layer is not meant to be
# driven from several threads at once; the CPU work of the other threads
# goes on meanwhile.
_GPU_LOCK = threading.Lock()


@dataclass
class LeafMessage:
    """What a leaf tile tells the hierarchy: its forest compressed against
    the tile's boundary, its counts, and the values and validity of its four
    border lines (the separator edges are built from them)."""

    graph: Graph
    valid: int  # valid cells
    edges: int  # edges of the tile's forest
    top: np.ndarray
    bottom: np.ndarray
    left: np.ndarray
    right: np.ndarray
    top_valid: np.ndarray
    bottom_valid: np.ndarray
    left_valid: np.ndarray
    right_valid: np.ndarray


def leaf_tile(source, window, shape, nodata, connectivity, weight_index,
              weight_dtype, backend, keep_edges=True):
    """Round 1 for one tile (pure).

    Returns ``(message, forest)``: the small message for the hierarchy
    (the compressed forest in global cells and keys, the border lines'
    values and validity, the tile's count of valid cells) and the tile's
    MSF for the scratch store: ``(local_ids, weights)`` (int32 local edge
    ids and weights in (weight, edge id) order) when ``keep_edges``, else
    ``(low_mask,)``, one uint8 per cell whose bit k is the edge of rank k
    whose low end is that cell.
    """
    if backend == "cuda":
        from .. import _cuda as kernels
    else:
        from .. import _cpu as kernels
    values = source.read(window)
    valid = valid_cells(values, nodata)
    rows, cols = window.rows, window.cols
    if backend == "cuda" and not keep_edges:
        # the forest crosses to the host as one byte per cell: no sort
        with _GPU_LOCK:
            low_bits, n_edges = kernels.forest_low_bits(
                values, valid, connectivity, weight_index, weight_dtype)
        mask = low_bits
        forest = (low_bits,)
    else:
        if backend == "cuda":
            with _GPU_LOCK:
                edges, weights = kernels.spanning_forest(
                    values, valid, connectivity, weight_index, weight_dtype,
                    Progress())
        else:
            edges, weights = kernels.spanning_forest(
                values, valid, connectivity, weight_index, weight_dtype,
                Progress())
        local_id = _local_ids(edges, cols)
        del edges
        mask = _low_bits_from_ids(local_id, rows * cols)
        n_edges = int(local_id.size)
        if keep_edges:
            forest = (local_id, weights)
        else:
            forest = (mask,)
            del local_id, weights
    typed = np.ascontiguousarray(values, dtype=weight_dtype)
    a, b, w, e = compress_tile_bands(
        mask, valid.reshape(-1), typed.reshape(-1), rows, cols,
        window.row, window.col, shape[0], shape[1], weight_index,
        typed.dtype.type(0.5))
    message = LeafMessage(
        graph=Graph(a, b, w, e), valid=int(np.count_nonzero(valid)),
        edges=n_edges,
        top=np.array(typed[0]), bottom=np.array(typed[-1]),
        left=np.array(typed[:, 0]), right=np.array(typed[:, -1]),
        top_valid=np.array(valid[0]), bottom_valid=np.array(valid[-1]),
        left_valid=np.array(valid[:, 0]), right_valid=np.array(valid[:, -1]))
    return message, forest
