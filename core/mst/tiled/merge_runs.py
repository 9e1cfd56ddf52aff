"""Round 4 of the tiled MST in one process: the k-way merge of the tiles'
sorted runs into the edge list (on an executor, :mod:`.edge_list`'s sample
sort replaces it)."""

import numpy as np
from numba import njit

from ... import tiling
from .._cpu import _lighter

# Edges per chunk of the final k-way merge (the output is flushed to the
# sinks chunk by chunk).
MERGE_CHUNK = 8192 * 128
MERGE_RUN_BUFFER = 1 << 16
# Shares of the merge's budget: the runs' read buffers and the output chunk.
RUN_BUFFERS_SHARE = 0.5
OUTPUT_CHUNK_SHARE = 0.3


# --------------------------------------------------------------------------
# round 4: k-way merge of the sorted runs


@njit(cache=True, nogil=True)
def _sift_down(heap, size, slot, head_w, head_e):
    run = heap[slot]
    while True:
        child = 2 * slot + 1
        if child >= size:
            break
        if child + 1 < size and _lighter(head_w[heap[child + 1]],
                                         head_e[heap[child + 1]],
                                         head_w[heap[child]],
                                         head_e[heap[child]]):
            child += 1
        if not _lighter(head_w[heap[child]], head_e[heap[child]],
                        head_w[run], head_e[run]):
            break
        heap[slot] = heap[child]
        slot = child
    heap[slot] = run


@njit(cache=True, nogil=True)
def _merge_runs(buffer_w, buffer_e, position, end, heap, heap_size, out_w,
                out_e, cols, edges):
    """Pop run heads into ``out_*`` until it is full or a run's buffer is
    empty; returns (entries written, new heap size, the run needing a
    refill or -1).  ``edges`` receives (low, high) of each entry."""
    count = 0
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    while heap_size > 0 and count < out_w.size:
        r = heap[0]
        out_w[count] = head_w[r]
        e = head_e[r]
        out_e[count] = e
        low = e >> 2
        rank = e & 3
        edges[count, 0] = low
        if rank == 0:
            edges[count, 1] = low + 1
        elif rank == 1:
            edges[count, 1] = low + cols - 1
        elif rank == 2:
            edges[count, 1] = low + cols
        else:
            edges[count, 1] = low + cols + 1
        count += 1
        position[r] += 1
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
            _sift_down(heap, heap_size, 0, head_w, head_e)
        else:
            return count, heap_size, r
    return count, heap_size, -1


@njit(cache=True, nogil=True)
def _heap_remove_top(heap, heap_size, buffer_w, buffer_e, position, end):
    heap_size -= 1
    heap[0] = heap[heap_size]
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    if heap_size > 0:
        _sift_down(heap, heap_size, 0, head_w, head_e)
    return heap_size


@njit(cache=True, nogil=True)
def _heap_build(heap, heap_size, buffer_w, buffer_e, position, end):
    head_w = np.empty(position.size, dtype=buffer_w.dtype)
    head_e = np.empty(position.size, dtype=np.int64)
    for r in range(position.size):
        if position[r] < end[r]:
            head_w[r] = buffer_w[r, position[r]]
            head_e[r] = buffer_e[r, position[r]]
    for slot in range(heap_size // 2 - 1, -1, -1):
        _sift_down(heap, heap_size, slot, head_w, head_e)


class _RunReader:
    """Reads a sorted run (edge ids and weights) from the scratch store in
    buffers."""

    def __init__(self, store, key):
        self.edge = store.reader(key, 0)
        self.weight = store.reader(key, 1)
        self.size = self.edge.shape[0]
        self.done = 0

    def fill(self, buffer_w, buffer_e, row):
        n = min(buffer_w.shape[1], self.size - self.done)
        buffer_e[row, :n] = self.edge.read(self.done, self.done + n)
        buffer_w[row, :n] = self.weight.read(self.done, self.done + n)
        self.done += n
        return n

    def close(self):
        self.edge.close()
        self.weight.close()


def merge_runs(store, keys, total, weight_dtype, shape, out_dir, progress,
               budget_bytes=None):
    """Round 4: merge the sorted runs into the edge list and weights.

    Returns (edges, weights).  The run buffers and the output chunk share
    ``budget_bytes``.
    """
    edges_sink = tiling.make_sink(out_dir, "edges", (total, 2), np.int64)
    weights_sink = tiling.make_sink(out_dir, "weights", (total, 1),
                                    weight_dtype)
    readers = [_RunReader(store, key) for key in keys]
    k = len(readers)
    entry = np.dtype(weight_dtype).itemsize + 8
    run_buffer, chunk = MERGE_RUN_BUFFER, MERGE_CHUNK
    if budget_bytes is not None:
        run_buffer = int(min(run_buffer, max(
            256, budget_bytes * RUN_BUFFERS_SHARE // (max(k, 1) * entry))))
        chunk = int(min(chunk, max(
            1, budget_bytes * OUTPUT_CHUNK_SHARE // ((entry + 16) * 8192))
            * 8192))
    buffer_w = np.empty((max(k, 1), run_buffer), dtype=weight_dtype)
    buffer_e = np.empty((max(k, 1), run_buffer), dtype=np.int64)
    position = np.zeros(max(k, 1), dtype=np.int64)
    end = np.zeros(max(k, 1), dtype=np.int64)
    heap = np.empty(max(k, 1), dtype=np.int64)
    heap_size = 0
    for r, reader in enumerate(readers):
        end[r] = reader.fill(buffer_w, buffer_e, r)
        if end[r] > 0:
            heap[heap_size] = r
            heap_size += 1
    _heap_build(heap, heap_size, buffer_w, buffer_e, position, end)
    out_w = np.empty(chunk, dtype=weight_dtype)
    out_e = np.empty(chunk, dtype=np.int64)
    out_edges = np.empty((chunk, 2), dtype=np.int64)
    filled = 0
    written = 0
    try:
        with tiling.output_sinks([edges_sink, weights_sink]):
            while heap_size > 0:
                count, heap_size, refill = _merge_runs(
                    buffer_w, buffer_e, position, end, heap, heap_size,
                    out_w[filled:], out_e[filled:], shape[1],
                    out_edges[filled:])
                filled += count
                if refill >= 0:
                    position[refill] = 0
                    end[refill] = readers[refill].fill(buffer_w, buffer_e,
                                                       refill)
                    if end[refill] == 0:
                        heap_size = _heap_remove_top(heap, heap_size, buffer_w,
                                                     buffer_e, position, end)
                    else:
                        _heap_build(heap, heap_size, buffer_w, buffer_e,
                                    position, end)
                if filled == chunk or (heap_size == 0 and filled):
                    window = tiling.Window(written, 0, filled, 2)
                    edges_sink.write(window, out_edges[:filled])
                    weights_sink.write(tiling.Window(written, 0, filled, 1),
                                       out_w[:filled, None])
                    written += filled
                    filled = 0
                    progress(written / max(total, 1))
            edges = edges_sink.finish()
            weights = weights_sink.finish()
    finally:
        for reader in readers:
            reader.close()
    return edges, weights.reshape(-1)
