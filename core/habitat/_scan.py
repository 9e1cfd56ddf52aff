"""Raster kernels of the habitat network: the crossing scan and the tracing
of link paths through the cost-distance directions.

The crossing scan reads the accumulated cost, the allocation and the
resistance a strip of rows at a time (plus the row below the strip), so a
raster on disk is never loaded whole.  For every pair of neighbouring cells
x, y allocated to different patches a < b it forms the crossing cost::

    (d(x) + (c_x + c_y) * 0.5 * L) + d(y)

(the cost-distance step, as its kernels write it) and keeps, per patch
pair, the crossing with the least (cost, x, neighbour) -- x the cell that
comes first in scan order, the neighbour its index in
``NEIGHBOUR_OFFSETS``.  That is a total order, so the link chosen does not
depend on the strips, nor on how rows are shared among threads.  Pairs live in an open-addressing hash table keyed by
a * (count + 1) + b; it grows between rows when half full.
"""

import numpy as np
from numba import njit, prange

from ..costdistance import GRASS_DIRECTION_DEGREES, NEIGHBOUR_OFFSETS

EMPTY = -1
# Forward neighbours (the cell after x in scan order): each undirected pair
# of cells is met once, from its first cell.  Indices into NEIGHBOUR_OFFSETS.
FORWARD = {4: np.array([0, 3], dtype=np.int64),
           8: np.array([0, 3, 6, 7], dtype=np.int64)}
INITIAL_CAPACITY = 1 << 16


class PairTable:
    """The per-pair best crossings found so far (hash table arrays)."""

    def __init__(self, capacity=None):
        capacity = INITIAL_CAPACITY if capacity is None else capacity
        self.key = np.full(capacity, EMPTY, dtype=np.int64)
        self.cost = np.empty(capacity, dtype=np.float64)
        self.cell = np.empty(capacity, dtype=np.int64)
        self.neighbour = np.empty(capacity, dtype=np.int64)
        self.count = 0

    def grow(self):
        """Rehash into a table four times larger."""
        bigger = PairTable(self.key.size * 4)
        bigger.count = _rehash(self.key, self.cost, self.cell, self.neighbour,
                               bigger.key, bigger.cost, bigger.cell,
                               bigger.neighbour)
        self.__dict__.update(bigger.__dict__)

    def entries(self):
        """(key, cost, cell, neighbour) of the used slots, sorted by key."""
        used = np.flatnonzero(self.key != EMPTY)
        order = np.argsort(self.key[used], kind="stable")
        used = used[order]
        return (self.key[used], self.cost[used], self.cell[used],
                self.neighbour[used])


@njit(cache=True, nogil=True, inline="always")
def _slot(key, mask):
    # Fibonacci hashing: the product's high bits spread consecutive keys
    h = np.uint64(key) * np.uint64(11400714819323198485)
    return np.int64(h >> np.uint64(20)) & mask


@njit(cache=True, nogil=True)
def _offer(table_key, table_cost, table_cell, table_neighbour, key, cost,
           cell, neighbour):
    """Insert or improve the pair ``key``; returns 1 when a slot was taken."""
    mask = table_key.size - 1
    s = _slot(key, mask)
    while True:
        found = table_key[s]
        if found == EMPTY:
            table_key[s] = key
            table_cost[s] = cost
            table_cell[s] = cell
            table_neighbour[s] = neighbour
            return 1
        if found == key:
            if cost < table_cost[s] or (cost == table_cost[s] and (
                    cell < table_cell[s] or (cell == table_cell[s]
                                             and neighbour < table_neighbour[s]))):
                table_cost[s] = cost
                table_cell[s] = cell
                table_neighbour[s] = neighbour
            return 0
        s = (s + 1) & mask


@njit(cache=True, nogil=True)
def _rehash(key, cost, cell, neighbour, new_key, new_cost, new_cell,
            new_neighbour):
    count = 0
    for s in range(key.size):
        if key[s] != EMPTY:
            count += _offer(new_key, new_cost, new_cell, new_neighbour,
                            key[s], cost[s], cell[s], neighbour[s])
    return count


@njit(cache=True, nogil=True)
def scan_strip(accumulated, allocation, resistance, owned_rows, first_row,
               start_row, cols, patch_count, forward, drow, dcol,
               step_lengths, table_key, table_cost, table_cell,
               table_neighbour, count):
    """Crossings of the cells in block rows ``start_row..owned_rows-1``.

    The blocks hold ``owned_rows`` rows from raster row ``first_row`` and,
    when there is one, the raster row below them.  Returns (count, row): the
    row where it stopped because the table is half full (``owned_rows``
    when done).
    """
    block_rows = accumulated.shape[0]
    per_row = forward.size * cols
    for r in range(start_row, owned_rows):
        if 2 * (count + per_row) > table_key.size:
            return count, r
        for c in range(cols):
            a = allocation[r, c]
            if a == 0:
                continue
            dx = accumulated[r, c]
            cx = np.float64(resistance[r, c])
            for f in range(forward.size):
                i = forward[f]
                rr = r + drow[i]
                cc = c + dcol[i]
                if rr >= block_rows or cc < 0 or cc >= cols:
                    continue
                b = allocation[rr, cc]
                if b == 0 or b == a:
                    continue
                cost = (dx + (cx + np.float64(resistance[rr, cc])) * 0.5
                        * step_lengths[i]) + accumulated[rr, cc]
                low = min(a, b)
                high = max(a, b)
                count += _offer(table_key, table_cost, table_cell,
                                table_neighbour, low * (patch_count + 1) + high,
                                cost, (first_row + r) * cols + c, i)
    return count, owned_rows


def scan_crossings(read_strip, rows, cols, strip_rows, patch_count,
                   connectivity, step_lengths, progress=None, threads=None):
    """Best crossing per patch pair over the whole raster.

    ``read_strip(top, n)`` returns (accumulated, allocation, resistance)
    blocks of raster rows top..top+n-1 (float64, int64, float64; barriers
    and unreached cells have allocation 0).  Each strip's rows are split
    among ``threads`` threads (default: numba's thread count), each with a
    table of its own (the kernel releases the GIL); the tables are merged
    by the same total order, so the result is the one table of a single
    thread.  Returns the arrays of :meth:`PairTable.entries`.
    """
    from concurrent.futures import ThreadPoolExecutor

    from numba import get_num_threads
    forward = FORWARD[connectivity]
    drow = NEIGHBOUR_OFFSETS[:, 0].copy()
    dcol = NEIGHBOUR_OFFSETS[:, 1].copy()
    step_lengths = np.ascontiguousarray(step_lengths, dtype=np.float64)
    threads = max(1, int(threads or get_num_threads()))
    tables = [PairTable() for _ in range(threads)]

    def scan_rows(table, blocks, top, start, stop):
        accumulated, allocation, resistance = blocks
        while start < stop:
            table.count, start = scan_strip(
                accumulated, allocation, resistance, stop, top, start, cols,
                patch_count, forward, drow, dcol, step_lengths, table.key,
                table.cost, table.cell, table.neighbour, table.count)
            if start < stop:
                table.grow()

    with ThreadPoolExecutor(threads) as pool:
        for top in range(0, rows, strip_rows):
            owned = min(strip_rows, rows - top)
            blocks = read_strip(top, owned + (1 if top + owned < rows else 0))
            bounds = [owned * t // threads for t in range(threads + 1)]
            # result() re-raises a thread's exception here
            for done in [pool.submit(scan_rows, tables[t], blocks, top,
                                     bounds[t], bounds[t + 1])
                         for t in range(threads)]:
                done.result()
            if progress is not None:
                progress((top + owned) / rows)
    return merge_entries([table.entries() for table in tables])


def merge_entries(entries):
    """One (key, cost, cell, neighbour) per key, sorted by key, from the
    entries of several tables: the least by (cost, cell, neighbour), the
    order :func:`_offer` keeps."""
    key, cost, cell, neighbour = (np.concatenate(parts)
                                  for parts in zip(*entries))
    order = np.lexsort((neighbour, cell, cost, key))
    key = key[order]
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    picked = order[first]
    return key[first], cost[picked], cell[picked], neighbour[picked]


# ------------------------------------------------------------------ paths

NEIGHBOUR_OFFSETS_NB = np.ascontiguousarray(NEIGHBOUR_OFFSETS)


@njit(cache=True, nogil=True)
def _offset_index(degrees, table):
    for i in range(table.size):
        if table[i] == degrees:
            return i
    return -1


@njit(cache=True, nogil=True)
def _trace_length(direction, row, col, table, limit):
    """Cells on the way from (row, col) back to a source, the start included;
    -1 for a corrupt direction raster (a cycle or an unknown value)."""
    n = 1
    while True:
        degrees = direction[row, col]
        if degrees == 0:
            return n
        i = _offset_index(degrees, table)
        if i < 0 or n > limit:
            return -1
        row += NEIGHBOUR_OFFSETS_NB[i, 0]
        col += NEIGHBOUR_OFFSETS_NB[i, 1]
        n += 1


@njit(cache=True, nogil=True)
def _trace_fill(direction, row, col, table, out_rows, out_cols, start, step):
    """Write the cells from (row, col) back to its source into out[start],
    out[start + step], ... (step -1 writes them backwards)."""
    p = start
    while True:
        out_rows[p] = row
        out_cols[p] = col
        degrees = direction[row, col]
        if degrees == 0:
            return
        i = _offset_index(degrees, table)
        row += NEIGHBOUR_OFFSETS_NB[i, 0]
        col += NEIGHBOUR_OFFSETS_NB[i, 1]
        p += step


@njit(cache=True, nogil=True, parallel=True)
def _trace_links(direction, x_row, x_col, y_row, y_col, table):
    # each link's two traces are independent of the others: both passes
    # run over the links in parallel, into places fixed by the offsets
    n = x_row.size
    limit = direction.shape[0] * direction.shape[1]
    offsets = np.zeros(n + 1, dtype=np.int64)
    back = np.zeros(n, dtype=np.int64)
    ahead = np.zeros(n, dtype=np.int64)
    for k in prange(n):
        back[k] = _trace_length(direction, x_row[k], x_col[k], table, limit)
        ahead[k] = _trace_length(direction, y_row[k], y_col[k], table, limit)
    for k in range(n):
        if back[k] < 0 or ahead[k] < 0:
            return offsets, back, np.empty(0, np.int64), np.empty(0, np.int64), k
        offsets[k + 1] = offsets[k] + back[k] + ahead[k]
    rows = np.empty(offsets[n], dtype=np.int64)
    cols = np.empty(offsets[n], dtype=np.int64)
    for k in prange(n):
        # x's patch first: x's path reversed, then y's path forward
        _trace_fill(direction, x_row[k], x_col[k], table, rows, cols,
                    offsets[k] + back[k] - 1, -1)
        _trace_fill(direction, y_row[k], y_col[k], table, rows, cols,
                    offsets[k] + back[k], 1)
    return offsets, back, rows, cols, -1


def trace_links(direction, x_cells, y_cells):
    """Cells of each link's path: from a cell of x's patch through x and y
    to a cell of y's patch, following ``direction`` (GRASS degrees, the
    cost-distance result's) back from both ends.

    Returns (offsets, rows, cols): link k's cells are
    ``rows[offsets[k]:offsets[k + 1]]`` (and cols).  Reads only the cells on
    the paths, so ``direction`` may be a memmap of any size.
    """
    x_cells = np.asarray(x_cells, dtype=np.int64).reshape(-1, 2)
    y_cells = np.asarray(y_cells, dtype=np.int64).reshape(-1, 2)
    offsets, _, rows, cols, bad = _trace_links(
        direction, x_cells[:, 0].copy(), x_cells[:, 1].copy(),
        y_cells[:, 0].copy(), y_cells[:, 1].copy(),
        GRASS_DIRECTION_DEGREES.copy())
    if bad >= 0:
        raise RuntimeError(
            f"the direction raster has a cycle or an unknown value on the "
            f"path of link {bad}: it is not a cost-distance result")
    return offsets, rows, cols


@njit(cache=True, nogil=True, parallel=True)
def path_lengths(offsets, rows, cols, xres, yres):
    """Euclidean length of each link's polyline through cell centres."""
    n = offsets.size - 1
    lengths = np.zeros(n)
    for k in prange(n):
        total = 0.0
        for p in range(offsets[k] + 1, offsets[k + 1]):
            dr = (rows[p] - rows[p - 1]) * yres
            dc = (cols[p] - cols[p - 1]) * xres
            total += np.sqrt(dr * dr + dc * dc)
        lengths[k] = total
    return lengths


@njit(cache=True, nogil=True)
def burn_corridors(corridors, row0, offsets, rows, cols, cost, selected):
    """For each selected link, its cost on each of its cells in the block
    ``corridors`` (raster rows row0..); the least where links cross."""
    block_rows = corridors.shape[0]
    for k in range(offsets.size - 1):
        if not selected[k]:
            continue
        for p in range(offsets[k], offsets[k + 1]):
            r = rows[p] - row0
            if 0 <= r < block_rows:
                old = corridors[r, cols[p]]
                if not (old <= cost[k]):  # NaN (no link yet) or costlier
                    corridors[r, cols[p]] = cost[k]
