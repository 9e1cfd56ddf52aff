"""The tiled connected components' two tile rounds on the GPU, in this
process (``backend="cuda"``, no executor).

What :mod:`.tiled`'s tasks do per tile -- label it, find its border
labels, the first cells and start counts of its components (the
summary), then renumber every cell from the merge's answer -- runs here
on the device: the tile is labelled once (``_cuda.label_device``, whose
roots are each component's first cell in scan order) and its labels stay
on the GPU between the rounds while they fit (else the label round reads
and labels the tile again: the same labels, the kernel is deterministic).
The reads of the next tiles run ahead on a thread pool while the device
works, and the finished blocks are written in row bands in parallel,
overlapped with the next tiles.  Only the border lines, the per-row
counts and the final blocks cross the bus.  The numbers are those of
``tiled._starts`` and ``tiled._renumber`` (one thread per tile row, in
scan order), so the labels are the CPU path's, bit for bit.
"""

from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from numba import cuda

from .._cuda_common import (FLAT_THREADS, blocks_for, copy_to_host,
                            usable_device_memory, valid_cells_device)
from . import _cuda

# Tiles read ahead of the one on the device, at most: fewer when the
# values are wide, so that the tiles read, the one labelled and the two
# blocks being written fit the tiled plan's budget of one tile
# (tiled.TILE_BYTES_PER_CELL a cell).
READ_AHEAD = 4
# Final blocks waiting for their writes.
WRITES_IN_FLIGHT = 2
# Row bands a finished block is written in, in parallel.
WRITE_BANDS = 8
# Share of the GPU's free memory that may keep tiles' labels between the
# rounds.
KEEP_SHARE = 0.5
# A fixed budget in bytes instead (tests: 0 labels every tile twice).
KEEP_BYTES = None


@cuda.jit(device=True, inline=True)
def _is_root(root_bits, cell):
    return (root_bits[cell >> 5] >> (cell & 31)) & 1


@cuda.jit(cache=True)
def _row_starts(root_bits, labels, rows, cols, border_index, row0, col0,
                raster_cols, first_cell, interior_before, row_starts):
    """``tiled._starts`` with one thread per tile row: the first cells are
    the roots."""
    r = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if r >= rows:
        return
    run = 0
    base = r * cols
    for c in range(cols):
        cell = base + c
        if _is_root(root_bits, cell):
            b = border_index[labels[cell]]
            if b >= 0:
                first_cell[b] = (row0 + r) * raster_cols + col0 + c
                interior_before[b] = run
            else:
                run += 1
    row_starts[r] = run


@cuda.jit(cache=True)
def _row_numbers(root_bits, labels, rows, cols, border_index, border_number,
                 border_is_root, starts_before, number):
    """``tiled._renumber``'s numbers of the tile's labels, one thread per
    row (each label is numbered at its first cell)."""
    r = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if r >= rows:
        return
    run = 0
    base = r * cols
    for c in range(cols):
        cell = base + c
        if _is_root(root_bits, cell):
            label = labels[cell]
            b = border_index[label]
            if b >= 0:
                number[label] = border_number[b]
                if border_is_root[b]:
                    run += 1
            else:
                number[label] = 1 + starts_before[r] + run
                run += 1


@cuda.jit(cache=True)
def _apply_numbers(labels, n, number, final):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        final[i] = number[labels[i]]


@cuda.jit(cache=True)
def _columns(labels, rows, cols, left, right):
    r = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if r < rows:
        left[r] = labels[r * cols]
        right[r] = labels[r * cols + cols - 1]


@cuda.jit(cache=True)
def _fill(values, n, value):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        values[i] = value


@cuda.jit(cache=True)
def _rank_border(border, m, index):
    """index[label] = its rank among the sorted border labels ``border``."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < m:
        index[border[i]] = i


def _launch(n):
    return blocks_for(n, FLAT_THREADS), FLAT_THREADS


class _Labelled:
    """A tile labelled on the device: labels, count, root bits, the border
    label index (host and device) and the border lines' labels."""

    def __init__(self, values, window, connectivity, mode, nodata):
        rows, cols = window.rows, window.cols
        d_values, d_valid = valid_cells_device(values, nodata)
        self.labels, self.count, self.root_bits = _cuda.label_device(
            d_values, d_valid, rows, cols, connectivity, mode == "nonzero",
            roots=True)
        del d_values, d_valid
        n = rows * cols
        left = cuda.device_array(rows, dtype=self.labels.dtype)
        right = cuda.device_array(rows, dtype=self.labels.dtype)
        _columns[_launch(rows)](self.labels, rows, cols, left, right)
        self.lines = dict(top=self.labels[:cols].copy_to_host(),
                          bottom=self.labels[n - cols:].copy_to_host(),
                          left=left.copy_to_host(), right=right.copy_to_host())
        # the border labels, sorted: a border label's index is its rank
        # (no host pass over the tile's count, which a smooth raster in
        # "equal" mode makes about its cell count: 0.1 s a 4096² tile)
        border = np.unique(np.concatenate(list(self.lines.values())))
        self.border = border[border > 0].astype(np.int64)
        self.n_border = int(self.border.size)
        self.d_border_index = cuda.device_array(self.count + 1,
                                                dtype=np.int32)
        _fill[_launch(self.count + 1)](self.d_border_index, self.count + 1,
                                       -1)
        if self.n_border:
            _rank_border[_launch(self.n_border)](
                cuda.to_device(self.border), self.n_border,
                self.d_border_index)

    def line_index(self, side):
        """Per cell of a border line: 1 + its label's border index, 0
        where no component."""
        line = self.lines[side]
        return np.where(line > 0, np.searchsorted(self.border, line) + 1,
                        0).astype(np.int32)

    @property
    def nbytes(self):
        return self.labels.nbytes + self.root_bits.nbytes \
            + self.d_border_index.nbytes


def _summary(tile, values, window, shape):
    from .tiled import TileSummary
    rows, cols = window.rows, window.cols
    m = tile.n_border
    first_cell = cuda.device_array(max(m, 1), dtype=np.int64)
    interior_before = cuda.device_array(max(m, 1), dtype=np.int64)
    row_starts = cuda.device_array(rows, dtype=np.int64)
    _row_starts[_launch(rows)](tile.root_bits, tile.labels, rows, cols,
                               tile.d_border_index, window.row, window.col,
                               shape[1], first_cell, interior_before,
                               row_starts)
    return TileSummary(
        first_cell=first_cell.copy_to_host()[:m],
        interior_before=interior_before.copy_to_host()[:m],
        row_starts=row_starts.copy_to_host(),
        top=tile.line_index("top"), bottom=tile.line_index("bottom"),
        left=tile.line_index("left"), right=tile.line_index("right"),
        top_values=np.array(values[0]), bottom_values=np.array(values[-1]),
        left_values=np.array(values[:, 0]),
        right_values=np.array(values[:, -1]))


def _final_block(tile, window, answer, label_dtype):
    rows, cols = window.rows, window.cols
    n = rows * cols
    number = cuda.device_array(tile.count + 1, dtype=np.int64)
    number[0:1] = np.zeros(1, np.int64)
    _row_numbers[_launch(rows)](
        tile.root_bits, tile.labels, rows, cols, tile.d_border_index,
        cuda.to_device(np.ascontiguousarray(answer.number, dtype=np.int64)
                       if len(answer.number) else np.zeros(1, np.int64)),
        cuda.to_device(np.ascontiguousarray(answer.is_root, dtype=np.bool_)
                       if len(answer.is_root) else np.zeros(1, np.bool_)),
        cuda.to_device(np.ascontiguousarray(answer.starts_before,
                                            dtype=np.int64)),
        number)
    final = cuda.device_array(n, dtype=label_dtype)
    if n:
        _apply_numbers[_launch(n)](tile.labels, n, number, final)
    return copy_to_host(final).reshape(rows, cols)


class TileRounds:
    """The two tile rounds of one tiled run on the GPU, with the labels
    kept between them."""

    def __init__(self, source, windows, connectivity, mode, nodata):
        self.source = source
        self.windows = windows
        self.connectivity = connectivity
        self.mode = mode
        self.nodata = nodata
        self.kept = {}
        usable = usable_device_memory()
        self.budget = KEEP_BYTES if KEEP_BYTES is not None else (
            np.inf if usable is None else KEEP_SHARE * usable)
        self.used = 0
        from .._common import index_dtype
        from .tiled import TILE_BYTES_PER_CELL
        rows, cols = source.shape
        label_bytes = np.dtype(index_dtype(rows * cols)).itemsize
        value_bytes = max(np.dtype(source.dtype).itemsize, 4)
        self.read_ahead = int(max(1, min(READ_AHEAD, (
            TILE_BYTES_PER_CELL - WRITES_IN_FLIGHT * label_bytes)
            // value_bytes - 1)))

    def _reads(self, indices, pool):
        """(index, values) of the tiles in order, ``read_ahead`` read
        ahead."""
        indices = list(indices)
        ahead = deque()
        following = 0
        while following < len(indices) or ahead:
            while following < len(indices) and \
                    len(ahead) <= self.read_ahead:
                index = indices[following]
                ahead.append((index, pool.submit(self.source.read,
                                                 self.windows[index])))
                following += 1
            index, future = ahead.popleft()
            yield index, future.result()

    def _label(self, values, index):
        return _Labelled(values, self.windows[index], self.connectivity,
                         self.mode, self.nodata)

    def summaries(self, shape, progress):
        """Round 1: every tile's ``TileSummary``, in window order."""
        result = [None] * len(self.windows)
        with ThreadPoolExecutor(self.read_ahead,
                                "gridgraph-tile-reads") as pool:
            for done, (index, values) in enumerate(
                    self._reads(range(len(self.windows)), pool)):
                tile = self._label(values, index)
                result[index] = _summary(tile, values, self.windows[index],
                                         shape)
                if self.used + tile.nbytes <= self.budget:
                    self.kept[index] = tile
                    self.used += tile.nbytes
                progress((done + 1) / len(self.windows))
        return result

    def write_labels(self, sink, answers, label_dtype, progress):
        """Round 3: every tile's final labels written into ``sink``
        (``answers`` in window order)."""
        missing = [i for i in range(len(self.windows)) if i not in self.kept]
        with ThreadPoolExecutor(max(self.read_ahead, WRITE_BANDS),
                                "gridgraph-tile-io") as pool:
            reads = self._reads(missing, pool)
            writing = deque()  # each tile's write futures
            try:
                for done, index in enumerate(range(len(self.windows))):
                    window = self.windows[index]
                    tile = self.kept.pop(index, None)
                    if tile is None:
                        read_index, values = next(reads)
                        assert read_index == index
                        tile = self._label(values, index)
                    else:
                        self.used -= tile.nbytes
                    block = _final_block(tile, window, answers[index],
                                         label_dtype)
                    del tile
                    while len(writing) >= WRITES_IN_FLIGHT:
                        for future in writing.popleft():
                            future.result()
                    writing.append(_write_bands(pool, sink, window, block))
                    progress((done + 1) / len(self.windows))
                while writing:
                    for future in writing.popleft():
                        future.result()
            finally:
                # nothing is left writing when the sink is aborted
                wait([f for futures in writing for f in futures])
        self.kept.clear()


def _write_bands(pool, sink, window, block):
    rows = window.rows
    bounds = [rows * i // WRITE_BANDS for i in range(WRITE_BANDS + 1)]
    return [pool.submit(sink.write,
                        type(window)(window.row + a, window.col, b - a,
                                     window.cols), block[a:b])
            for a, b in zip(bounds, bounds[1:]) if b > a]
