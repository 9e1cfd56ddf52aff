"""Segments of a tiled (out-of-core) spanning forest: the out-of-core twin
of :func:`gridgraph.core.segment_by_threshold` (its edge list and parent
directions are memmaps), computed a strip of rows at a time; results equal
the in-memory function's.
"""

import os

import numpy as np
from numba import njit

from .. import tiling
from .._common import as_progress, check_number, index_dtype
from .._unionfind import find_root as _find
from ..errors import InvalidInputError

# -------------------------------------------------------------- segments
#
# The pieces of a spanning forest once the edges heavier than a threshold
# are cut, labelled 1..n in scan order of each piece's first cell, without
# the edge list or a raster in memory.  The raster is cut into strips of
# whole rows.  An edge joins a cell to a neighbour in the same or the next
# row, so it lies inside one strip or crosses from a strip's last row into
# the next strip's first row (a seam edge).
#
# 1. One pass over the edge list in chunks sends every kept edge to the
#    file of the strip of its higher cell.
# 2. Top to bottom, each strip's pieces are labelled in memory (union-find
#    over its edges, labels in scan order within the strip) and kept in a
#    scratch file.  A piece touching the strip's first or last row becomes
#    a node of a global union-find; seam edges join the previous strip's
#    last-row nodes to this strip's first-row nodes.  Nodes are numbered
#    in (strip, local label) order, which is the scan order of their first
#    cells, and a union keeps the lower node as root, so every root is the
#    node holding its piece's first cell.  The global structure has one
#    entry per piece touching a strip border: O(pieces), at most two rows
#    of cells per strip.
# 3. Top to bottom again, local labels become global ones: a piece gets a
#    new number at its root (its first cell), in strip order and local
#    label order, i.e. in scan order; a node that is not a root takes its
#    root's number, given in an earlier strip or earlier in this one.

# bytes per cell of a strip in memory: union-find parents and labels
# (8 + 8), the valid mask (1), about one kept edge (16), the output block
STRIP_BYTES_PER_CELL = 40
# Edges read per chunk of the edge list: a chunk's arrays take about 64
# bytes an edge, a sixteenth of the budget, within these bounds.
MIN_EDGE_CHUNK, MAX_EDGE_CHUNK = 1 << 16, 1 << 24
# Strip files kept open at once while the edges are sorted into them.
OPEN_STRIP_FILES = 128


@njit(cache=True, nogil=True)
def _union_lower_root(parent, first, second):
    """Union of the sets of each (first[i], second[i]); the lower index
    stays root, so a root is the least member of its set."""
    for i in range(first.size):
        a = _find(parent, first[i])
        b = _find(parent, second[i])
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b


@njit(cache=True, nogil=True)
def _label_strip(valid, low, high):
    """Labels 1..count of the pieces of the strip's valid cells joined by
    (low, high) (strip-local cell indices), in scan order of each piece's
    first cell; 0 on invalid cells."""
    n = valid.size
    parent = np.arange(n, dtype=np.int64)
    _union_lower_root(parent, low, high)
    labels = np.zeros(n, dtype=np.int64)
    count = 0
    for cell in range(n):
        if not valid[cell]:
            continue
        root = _find(parent, cell)
        if root == cell:  # the least cell of its piece: seen first
            count += 1
            labels[cell] = count
        else:
            labels[cell] = labels[root]
    return labels, count


@njit(cache=True, nogil=True)
def _resolve_roots(parent):
    for node in range(parent.size):
        parent[node] = _find(parent, node)


@njit(cache=True, nogil=True)
def _strip_numbering(count, border_local, base, node_root, node_label,
                     counter):
    """Global number of each local label 1..count of a strip (index 0
    stays 0); returns (numbers, counter after the strip's new pieces)."""
    numbers = np.zeros(count + 1, dtype=np.int64)
    k = 0
    for local in range(1, count + 1):
        if k < border_local.size and border_local[k] == local:
            node = base + k
            k += 1
            root = node_root[node]
            if root != node:
                numbers[local] = node_label[root]
                continue
            counter += 1
            node_label[node] = counter
        else:
            counter += 1
        numbers[local] = counter
    return numbers, counter


class _NodeForest:
    """The global union-find over border pieces, grown strip by strip."""

    def __init__(self):
        self.parent = np.zeros(1024, dtype=np.int64)
        self.size = 0

    def add(self, count):
        """Append ``count`` new nodes (ids size .. size + count - 1)."""
        if self.size + count > self.parent.size:
            grown = np.zeros(max(2 * self.parent.size, self.size + count),
                             dtype=np.int64)
            grown[:self.size] = self.parent[:self.size]
            self.parent = grown
        self.parent[self.size:self.size + count] = np.arange(
            self.size, self.size + count, dtype=np.int64)
        self.size += count

    def union(self, first, second):
        _union_lower_root(self.parent, first, second)

    def roots(self):
        parent = self.parent[:self.size].copy()
        _resolve_roots(parent)
        return parent


def _rows_source(array):
    """A row reader of a 1-D or 2-D array or memmap (pread for memmaps)."""
    array = np.asarray(array) if not isinstance(array, np.memmap) else array
    if array.ndim == 1:
        array = array.reshape(-1, 1)
    return tiling.open_source(array)


def _read_rows(source, start, stop):
    return source.read(tiling.Window(start, 0, stop - start, source.shape[1]))


def default_strip_rows(shape, memory_limit_mb=None):
    """Strip height for :func:`segment_by_threshold_streamed`: a quarter of
    the memory budget, at least one row."""
    budget = tiling.memory_limit_bytes(memory_limit_mb) // 4
    return int(max(1, min(shape[0],
                          budget // (STRIP_BYTES_PER_CELL * max(1, shape[1])))))


def segment_by_threshold_streamed(result, threshold, out_dir=None,
                                  strip_rows=None, memory_limit_mb=None,
                                  progress=None):
    """Cut tree edges heavier than ``threshold``; label the pieces.

    The out-of-core twin of :func:`gridgraph.core.segment_by_threshold`
    for a tiled :class:`~gridgraph.core.MSTResult` (edges, weights and
    parent directions as memmaps; arrays work too), with the same labels.
    The edge list is read in chunks and the raster in strips of
    ``strip_rows`` rows (default from ``memory_limit_mb``: a quarter of the
    budget); the one global structure has an entry per piece touching a
    strip border.

    Parameters
    ----------
    result : MSTResult
        With its edge list (``edges=True``).
    threshold : float
        Edges with ``weight <= threshold`` (compared as the in-memory
        function compares: the weights' dtype against a Python float) stay.
    out_dir : str, optional
        Folder for ``segments.npy`` (returned as a read-only memmap) and
        the scratch files; without it the labels are an in-memory array.
    strip_rows, memory_limit_mb : int, optional
    progress : callable, optional
        ``progress(fraction) -> keep going``; False raises CancelledError.

    Returns
    -------
    labels : 2-D int32 array or memmap (int64 from 2**31 - 1 cells on)
        1..count in scan order of each piece's first cell, 0 on nodata.
    count : int
    """
    if result.edges is None:
        raise InvalidInputError(
            "this spanning tree was computed without its edge list "
            "(edges=False): run minimum_spanning_tree with edges=True to "
            "segment it")
    threshold = check_number("threshold", threshold, allow_none=False,
                             finite=False)
    progress = as_progress(progress)
    rows, cols = result.shape
    if strip_rows is None:
        strip_rows = default_strip_rows(result.shape, memory_limit_mb)
    strip_rows = int(strip_rows)
    if strip_rows < 1:
        raise InvalidInputError(f"strip_rows must be >= 1, got {strip_rows}")
    strips = [(top, min(rows, top + strip_rows))
              for top in range(0, rows, strip_rows)]
    label_dtype = index_dtype(rows * cols)
    if out_dir is not None:
        out_dir = tiling.check_out_dir(out_dir, 0, 0)
    with tiling.scratch_folder(out_dir) as folder:
        edge_files = _sort_edges_into_strips(
            result, threshold, cols, strip_rows, len(strips), folder,
            tiling.memory_limit_bytes(memory_limit_mb),
            progress.span(0.0, 0.4))
        nodes, borders = _label_strips(
            result, strips, cols, edge_files, folder, progress.span(0.4, 0.75))
        sink = tiling.make_sink(out_dir, "segments", (rows, cols),
                                label_dtype)
        with tiling.output_sinks([sink]):
            count = _number_strips(strips, cols, borders, nodes, folder,
                                   sink, label_dtype, progress.span(0.75, 1.0))
            labels = sink.finish()
    progress(1.0)
    return labels, count


class _StripFiles:
    """Append-only files, one per strip; the most recently used
    ``OPEN_STRIP_FILES`` stay open (the edges of every chunk go to every
    strip, and the open-file limit is often 1024)."""

    def __init__(self, folder, count):
        from collections import OrderedDict
        self.paths = [os.path.join(folder, f"strip-{s}.edges")
                      for s in range(count)]
        self._open = OrderedDict()

    def append(self, strip, pairs):
        handle = self._open.pop(strip, None)
        if handle is None:
            if len(self._open) >= OPEN_STRIP_FILES:
                self._open.popitem(last=False)[1].close()
            handle = open(self.paths[strip], "ab")
        self._open[strip] = handle
        np.ascontiguousarray(pairs, dtype=np.int64).tofile(handle)

    def close(self):
        while self._open:
            self._open.popitem()[1].close()


def _sort_edges_into_strips(result, threshold, cols, strip_rows, n_strips,
                            folder, budget_bytes, progress):
    """Pass 1: the kept edges, (low, high) int64 pairs, appended to one
    file per strip (the strip of the higher cell).  Returns the paths."""
    edges = _rows_source(result.edges)
    weights = _rows_source(result.weights)
    total = edges.shape[0]
    chunk_edges = int(min(MAX_EDGE_CHUNK,
                          max(MIN_EDGE_CHUNK, budget_bytes // 16 // 64)))
    files = _StripFiles(folder, n_strips)
    try:
        for start in range(0, total, chunk_edges):
            stop = min(total, start + chunk_edges)
            chunk = _read_rows(edges, start, stop)
            keep = _read_rows(weights, start, stop).ravel() <= threshold
            chunk = chunk[keep]
            strip_of = chunk[:, 1] // cols // strip_rows
            order = np.argsort(strip_of, kind="stable")
            chunk, strip_of = chunk[order], strip_of[order]
            bounds = np.flatnonzero(np.diff(strip_of)) + 1
            for first, last in zip(np.concatenate(([0], bounds)),
                                   np.concatenate((bounds, [chunk.shape[0]]))):
                if last > first:
                    files.append(int(strip_of[first]), chunk[first:last])
            progress(stop / total)
    finally:
        files.close()
        edges.close()
        weights.close()
    return files.paths


def _label_strips(result, strips, cols, edge_files, folder, progress):
    """Pass 2: per strip its local labels (to a scratch file), and the
    global union-find of the pieces on strip borders joined by seam
    edges.  Returns (node roots, per strip (count, border local labels,
    first node id))."""
    direction = tiling.open_source(result.parent_direction)
    nodes = _NodeForest()
    borders = []
    previous_bottom = previous_border = None
    previous_base = 0
    for index, (top, bottom) in enumerate(strips):
        valid = ~np.isnan(direction.read(
            tiling.Window(top, 0, bottom - top, cols))).ravel()
        edges = np.empty((0, 2), dtype=np.int64)
        if os.path.exists(edge_files[index]):
            edges = np.fromfile(edge_files[index],
                                dtype=np.int64).reshape(-1, 2)
            os.remove(edge_files[index])
        first_cell = top * cols
        seam = edges[:, 0] < first_cell
        inside = edges[~seam]
        labels, count = _label_strip(valid, inside[:, 0] - first_cell,
                                     inside[:, 1] - first_cell)
        top_row, bottom_row = labels[:cols], labels[-cols:]
        border_local = np.unique(np.concatenate((top_row, bottom_row)))
        border_local = border_local[border_local > 0]
        base = nodes.size
        nodes.add(border_local.size)
        if seam.any():
            low, high = edges[seam, 0], edges[seam, 1]
            upper = previous_base + np.searchsorted(
                previous_border, previous_bottom[low % cols])
            lower = base + np.searchsorted(border_local,
                                           top_row[high - first_cell])
            nodes.union(upper, lower)
        labels.astype(index_dtype(labels.size + 1)).tofile(
            os.path.join(folder, f"strip-{index}.labels"))
        borders.append((count, border_local, base))
        previous_bottom, previous_border, previous_base = (
            bottom_row, border_local, base)
        progress((index + 1) / len(strips))
    direction.close()
    return nodes.roots(), borders


def _number_strips(strips, cols, borders, node_root, folder, sink,
                   label_dtype, progress):
    """Pass 3: global labels in scan order of first cells, strip by strip,
    into ``sink``; returns the number of pieces."""
    node_label = np.zeros(node_root.size, dtype=np.int64)
    counter = 0
    for index, (top, bottom) in enumerate(strips):
        count, border_local, base = borders[index]
        path = os.path.join(folder, f"strip-{index}.labels")
        local = np.fromfile(path, dtype=index_dtype((bottom - top) * cols + 1))
        os.remove(path)
        numbers, counter = _strip_numbering(count, border_local, base,
                                            node_root, node_label, counter)
        sink.write(tiling.Window(top, 0, bottom - top, cols),
                   numbers[local].astype(label_dtype).reshape(-1, cols))
        progress((index + 1) / len(strips))
    return counter
