"""CUDA kernels of connected components: block-based union-find.

The scheme of Playne & Hawick (A new algorithm for parallel connected-
component labelling on GPUs, IEEE TPDS 2018) with the tile-local first
phase of Allegretti et al. (2020):

1. Tiles of TILE_H x TILE_W cells, one thread block each: union-find in
   shared memory over the tile's edges, then every cell points at its
   tile-local root (as a global cell index).
2. Seams: the edges that cross tile borders are united in the global
   parent array.  Unions link the larger root under the smaller with an
   atomic min, so ``parent[x] <= x`` always holds and the root of every
   component is its first cell in raster scan order.
3. Roots (cells that are their own parent) become a bit mask, 32 cells
   a word; a prefix sum over the words' root counts plus a popcount inside
   the word numbers every root 1..count in scan order, and every cell
   takes its root's number.

Indices are the dtype of :func:`gridgraph.core._common.index_dtype`
(int64 from 2**31 - 1 cells on); every index computation is done in int64.
"""

import numpy as np
from numba import cuda

from .._common import index_dtype
from .._cuda_common import (FLAT_THREADS, SIMULATOR, PhaseTimer,
                            blocks_for, check_device_memory, copy_to_device,
                            copy_to_host, device_scalar, exclusive_scan,
                            find_halving, find_root, valid_cells_device)

TILE_W = 4 if SIMULATOR else 32
TILE_H = 4 if SIMULATOR else 32
THREADS_Y = 2 if SIMULATOR else 8
ROWS_PER_THREAD = TILE_H // THREADS_Y
TILE_THREADS = TILE_W * THREADS_Y
TILE_CELLS = TILE_W * TILE_H
SEAM_CELLS_PER_TILE = TILE_W + 2 * (TILE_H - 1)
# a warp is a tile row, so the row masks are ballots
assert SIMULATOR or TILE_W == 32
WORDS_PER_BLOCK = FLAT_THREADS // 32  # root-mask words per flat block


@cuda.jit(device=True, cache=True)
def _foreground(values, valid, nonzero, i):
    return valid[i] != 0 and (not nonzero or values[i] != 0)


@cuda.jit(device=True, cache=True)
def _joined(values, nonzero, a, b):
    """Two foreground cells are connected (``equal`` mode: same value)."""
    return nonzero or values[a] == values[b]


@cuda.jit(device=True, cache=True)
def _union(parent, a, b):
    """Join the trees of a and b, the larger root under the smaller.

    When the atomic min finds that the root it targets was linked by
    another thread meanwhile, it carries on from that root's new parent
    (Playne & Hawick 2018, Algorithm 3).
    """
    done = False
    while not done:
        a = find_halving(parent, a)
        b = find_halving(parent, b)
        if a < b:
            old = cuda.atomic.min(parent, b, a)
            done = old == b
            b = old
        elif b < a:
            old = cuda.atomic.min(parent, a, b)
            done = old == a
            a = old
        else:
            done = True


if SIMULATOR:
    @cuda.jit(device=True)
    def _row_bits(masks, row, bit, flag):
        """Set bit ``bit`` of ``masks[row]`` when ``flag`` (masks zeroed
        before; every thread of the row calls this between two barriers)."""
        if flag:
            cuda.atomic.or_(masks, row, 1 << bit)
else:
    @cuda.jit(device=True, cache=True)
    def _row_bits(masks, row, bit, flag):
        """Set bit ``bit`` of ``masks[row]`` when ``flag``: one warp is one
        tile row (TILE_W == 32), so a ballot builds the row's mask."""
        bits = cuda.ballot_sync(0xFFFFFFFF, flag)
        if bit == 0:
            masks[row] = bits


@cuda.jit(cache=True)
def _label_tiles(values, valid, nonzero, eight, rows, cols, tiles_x, parent):
    """Phase 1: union-find inside each tile, in shared memory.

    Runs first: a row's bit masks of "joined to the left" and "joined to
    the cell above" give every cell the first cell of its run (the run's
    root) without any union.  Then only the start of each overlap between
    a run and the run above is united with it (the rest of the overlap
    follows through the runs), and, for 8-connectivity, diagonal neighbours
    that no run overlap covers.
    """
    local = cuda.shared.array(TILE_CELLS, np.int32)
    left_mask = cuda.shared.array(TILE_H, np.uint32)
    up_mask = cuda.shared.array(TILE_H, np.uint32)
    tile = np.int64(cuda.blockIdx.x)
    tile_row = tile // tiles_x
    r0 = tile_row * TILE_H
    c0 = (tile - tile_row * tiles_x) * TILE_W
    tx = cuda.threadIdx.x % TILE_W
    ty = cuda.threadIdx.x // TILE_W
    c = c0 + tx
    if cuda.threadIdx.x < TILE_H:
        left_mask[cuda.threadIdx.x] = 0
        up_mask[cuda.threadIdx.x] = 0
    for k in range(ROWS_PER_THREAD):
        lr = ty + k * THREADS_Y
        li = lr * TILE_W + tx
        r = r0 + lr
        local[li] = -1
        if r < rows and c < cols and _foreground(values, valid, nonzero,
                                                 r * cols + c):
            local[li] = li
    cuda.syncthreads()
    for k in range(ROWS_PER_THREAD):
        lr = ty + k * THREADS_Y
        li = lr * TILE_W + tx
        i = (r0 + lr) * cols + c
        here = local[li] >= 0
        joined_left = here and tx > 0 and local[li - 1] >= 0 and _joined(
            values, nonzero, i, i - 1)
        joined_up = here and lr > 0 and local[li - TILE_W] >= 0 and _joined(
            values, nonzero, i, i - cols)
        _row_bits(left_mask, lr, tx, joined_left)
        _row_bits(up_mask, lr, tx, joined_up)
    cuda.syncthreads()
    for k in range(ROWS_PER_THREAD):
        lr = ty + k * THREADS_Y
        li = lr * TILE_W + tx
        if local[li] >= 0:
            # the run starts at the last cell up to here not joined to its
            # left (bit 0 never is)
            starts = ~left_mask[lr] & ((2 << tx) - 1)
            local[li] = lr * TILE_W + 31 - cuda.clz(np.uint32(starts))
    cuda.syncthreads()
    for k in range(ROWS_PER_THREAD):
        lr = ty + k * THREADS_Y
        li = lr * TILE_W + tx
        if lr > 0 and local[li] >= 0:
            i = (r0 + lr) * cols + c
            lefts = left_mask[lr]
            ups = up_mask[lr]
            joined_left = (lefts >> tx) & 1
            up = li - TILE_W
            if (ups >> tx) & 1:
                # the left cell's union covers this one when both are
                # joined up (the two cells above are then one run)
                if not (joined_left and tx > 0 and (ups >> (tx - 1)) & 1):
                    _union(local, li, up)
            elif eight:
                # a diagonal neighbour joined to this cell is in the run
                # above the left cell when that one is joined to both
                if not joined_left and tx > 0 and local[up - 1] >= 0 and \
                        _joined(values, nonzero, i, i - cols - 1):
                    _union(local, li, up - 1)
                if tx + 1 < TILE_W and local[up + 1] >= 0 and _joined(
                        values, nonzero, i, i - cols + 1) and not (
                        (lefts >> (tx + 1)) & 1 and (ups >> (tx + 1)) & 1):
                    _union(local, li, up + 1)
    cuda.syncthreads()
    for k in range(ROWS_PER_THREAD):
        lr = ty + k * THREADS_Y
        li = lr * TILE_W + tx
        r = r0 + lr
        if r < rows and c < cols:
            if local[li] >= 0:
                root = find_root(local, li)
                root_row = root // TILE_W
                parent[r * cols + c] = ((r0 + root_row) * cols + c0
                                        + (root - root_row * TILE_W))
            else:
                parent[r * cols + c] = -1


@cuda.jit(cache=True)
def _merge_seams(values, nonzero, eight, rows, cols, tiles_x, n_tiles,
                 parent):
    """Phase 2: unite the edges that cross tile borders.

    A thread per seam cell of a tile (its first row, first and last
    column) looks at its backward neighbours (left, up, up-left, up-right)
    that lie in another tile.
    """
    g = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if g >= n_tiles * SEAM_CELLS_PER_TILE:
        return
    tile = g // SEAM_CELLS_PER_TILE
    p = g - tile * SEAM_CELLS_PER_TILE
    tile_row = tile // tiles_x
    r0 = tile_row * TILE_H
    c0 = (tile - tile_row * tiles_x) * TILE_W
    if p < TILE_W:
        lr = np.int64(0)
        tx = p
    elif p < TILE_W + TILE_H - 1:
        lr = p - TILE_W + 1
        tx = np.int64(0)
    else:
        lr = p - (TILE_W + TILE_H - 1) + 1
        tx = np.int64(TILE_W - 1)
    r = r0 + lr
    c = c0 + tx
    if r >= rows or c >= cols:
        return
    i = r * cols + c
    if parent[i] < 0:
        return
    if tx == 0 and c > 0:
        j = i - 1
        if parent[j] >= 0 and _joined(values, nonzero, i, j):
            _union(parent, i, j)
    if r > 0:
        if lr == 0:
            j = i - cols
            if parent[j] >= 0 and _joined(values, nonzero, i, j):
                _union(parent, i, j)
        if eight:
            if c > 0 and (lr == 0 or tx == 0):
                j = i - cols - 1
                if parent[j] >= 0 and _joined(values, nonzero, i, j):
                    _union(parent, i, j)
            if c + 1 < cols and (lr == 0 or tx == TILE_W - 1):
                j = i - cols + 1
                if parent[j] >= 0 and _joined(values, nonzero, i, j):
                    _union(parent, i, j)


@cuda.jit(cache=True)
def _root_words(parent, n, n_words, root_bits, word_roots):
    """Phase 3a: a bit per root cell (roots are the cells that are their
    own parent: each component's first cell), 32 cells a word, and the
    roots per word.  A warp's 32 cells are one word: a ballot."""
    masks = cuda.shared.array(WORDS_PER_BLOCK, np.uint32)
    t = cuda.threadIdx.x
    if t < WORDS_PER_BLOCK:
        masks[t] = 0
    cuda.syncthreads()
    i = np.int64(cuda.blockIdx.x) * FLAT_THREADS + t
    _row_bits(masks, t // 32, t % 32, i < n and parent[i] == i)
    cuda.syncthreads()
    if t < WORDS_PER_BLOCK:
        w = np.int64(cuda.blockIdx.x) * WORDS_PER_BLOCK + t
        if w < n_words:
            bits = masks[t]
            root_bits[w] = bits
            word_roots[w] = cuda.popc(bits)


@cuda.jit(cache=True)
def _label_cells(parent, n, root_bits, word_offsets, labels):
    """Phase 3b: a cell's label is 1 + the roots before its root in scan
    order (0: background)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        p = parent[i]
        if p < 0:
            labels[i] = 0
        else:
            root = find_root(parent, p)
            w = root >> 5
            below = root_bits[w] & ((np.int64(1) << (root & 31)) - 1)
            labels[i] = word_offsets[w] + cuda.popc(below) + 1


def _kernel_ready(array):
    """A C-contiguous, native-endian array the kernels compile for."""
    values = np.asarray(array)
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    elif not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return np.ascontiguousarray(values)


def device_bytes(n_cells, value_itemsize):
    """GPU memory :func:`label` needs for a raster of ``n_cells``."""
    index_size = np.dtype(index_dtype(n_cells)).itemsize
    return n_cells * (value_itemsize + 1 + 2 * index_size) + n_cells // 2


def label_device(values, valid, rows, cols, connectivity, nonzero,
                 progress=None, stats=None, roots=False):
    """Label device arrays; returns (device labels, count).

    ``values`` and ``valid`` (uint8) are flat device arrays of rows * cols
    cells; the labels come back flat, in :func:`index_dtype` of the size.
    ``stats`` (a dict) receives the time of each phase.  With ``roots``
    also the root bits (bit i % 32 of word i // 32: cell i is the first
    cell of its component): (labels, count, root_bits).
    """
    timer = PhaseTimer(stats)
    n = rows * cols
    dtype = index_dtype(n)
    parent = cuda.device_array(n, dtype=dtype)
    tiles_x = blocks_for(cols, TILE_W)
    n_tiles = tiles_x * blocks_for(rows, TILE_H)
    eight = connectivity == 8
    _label_tiles[n_tiles, TILE_THREADS](values, valid, nonzero, eight, rows,
                                        cols, tiles_x, parent)
    timer.mark("tiles")
    seam_threads = n_tiles * SEAM_CELLS_PER_TILE
    _merge_seams[blocks_for(seam_threads, FLAT_THREADS), FLAT_THREADS](
        values, nonzero, eight, rows, cols, tiles_x, n_tiles, parent)
    timer.mark("seams")
    if progress is not None:
        progress(0.5)
    n_words = blocks_for(n, 32)
    root_bits = cuda.device_array(n_words, dtype=np.uint32)
    word_roots = cuda.device_array(n_words + 1, dtype=np.int64)
    _root_words[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
        parent, n, n_words, root_bits, word_roots)
    word_roots[n_words] = 0
    exclusive_scan(word_roots, n_words + 1)
    count = int(device_scalar(word_roots, n_words))
    timer.mark("roots")
    labels = cuda.device_array(n, dtype=dtype)
    _label_cells[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
        parent, n, root_bits, word_roots, labels)
    timer.mark("number")
    if roots:
        return labels, count, root_bits
    return labels, count


def label(array, valid, connectivity, mode, progress):
    """Label the connected components of ``array`` on the GPU.

    Same contract as :func:`gridgraph.core.components._cpu.label`: returns
    (labels, count) with labels 1..count in raster scan order of each
    component's first cell, 0 for background and invalid cells; int32, or
    int64 from 2**31 - 1 cells on.
    """
    values = _kernel_ready(array)
    rows, cols = values.shape
    valid = np.ascontiguousarray(valid, dtype=np.bool_)
    if valid.shape != values.shape:
        raise ValueError(f"valid mask shape {valid.shape} differs from the "
                         f"raster shape {values.shape}")
    n = rows * cols
    dtype = index_dtype(n)
    if n == 0:
        progress(1.0)
        return np.empty((rows, cols), dtype=dtype), 0
    check_device_memory(
        device_bytes(n, values.dtype.itemsize),
        f"connected components of a {rows} x {cols} raster")
    progress(0.0)
    d_values = copy_to_device(values)
    d_valid = copy_to_device(valid.view(np.uint8))
    labels, count = label_device(d_values, d_valid, rows, cols, connectivity,
                                 mode == "nonzero", progress.span(0.1, 0.9))
    del d_values, d_valid
    result = copy_to_host(labels).reshape(rows, cols)
    progress(1.0)
    return result, count


def label_array(array, nodata, connectivity, mode, progress, stats=None):
    """:func:`label` with the valid cells (NaN, ``nodata``) found on the
    device rather than passed in: the public API's CUDA path, which so
    sends only the raster and gets back only the labels."""
    values = np.asarray(array)
    rows, cols = values.shape
    n = rows * cols
    if n == 0:
        progress(1.0)
        return np.empty((rows, cols), dtype=index_dtype(n)), 0
    check_device_memory(
        device_bytes(n, 4 if values.dtype == np.float16
                     else values.dtype.itemsize),
        f"connected components of a {rows} x {cols} raster")
    progress(0.0)
    timer = PhaseTimer(stats)
    d_values, d_valid = valid_cells_device(values, nodata)
    timer.mark("to device, valid cells")
    labels, count = label_device(d_values, d_valid, rows, cols, connectivity,
                                 mode == "nonzero", progress.span(0.1, 0.9),
                                 stats)
    del d_values, d_valid
    timer = PhaseTimer(stats)
    result = copy_to_host(labels).reshape(rows, cols)
    timer.mark("labels to host")
    progress(1.0)
    return result, count
