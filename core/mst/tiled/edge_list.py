"""The MST's sorted edge list by a sample sort over the tiles' sorted runs.

Each tile's finish task (:func:`finish_to_files`) writes its final edges, a
run sorted by (weight, edge id), to two raw files in the run folder (a
shared folder: the scratch folder inside ``out_dir``) and returns, besides
its small message, an evenly spaced sample of the run.  Then:

1. the driver sorts the samples and picks splitters, ``(weight, edge id)``
   pairs that cut the key space into ranges of about
   :data:`RANGE_EDGES` edges (at least two per worker);
2. per run, one task finds where each splitter falls in it
   (:func:`run_bounds`: binary searches in the run's files);
3. prefix sums of the range sizes give each range its offset in the list;
4. per range, one task (:func:`merge_range`) reads its slice of every run,
   sorts them (keys are distinct: edge ids are unique, NaN weights last)
   and writes its edges and weights at its offset.

The concatenation of the ranges in order is the order the k-way merge of
all the runs gives (the total order of DESIGN.md), so the list is
identical; the ranges run in parallel and no run passes through the
driver.  Files are written whole by one task each and ranges at fixed
offsets, so a retried task writes the same bytes again.
"""

import os

import numpy as np
from numba import njit

from ... import tiling
from .._cpu import _lighter

# Edges per range task: its slices, the sort's index and the (low, high)
# pairs take ~44 bytes an edge, ~180 MB.
RANGE_EDGES = 1 << 22
# Samples per run for the splitters (more: ranges of more even size).
SAMPLES_PER_RUN = 256


def run_paths(folder, tile):
    """The two files of a tile's run: edge ids, weights."""
    name = f"run-{tile[0]}-{tile[1]}"
    return (os.path.join(folder, name + ".edge"),
            os.path.join(folder, name + ".weight"))


def _write_raw(path, array):
    """``array``'s bytes in ``path`` (whole, under a temporary name first,
    so a retried task or a reader never sees half a file)."""
    partial = f"{path}.{os.getpid()}.partial"
    np.ascontiguousarray(array).tofile(partial)
    os.replace(partial, path)


def finish_to_files(function, sink, folder, tile, source, window,
                    *arguments):
    """``function`` (the tile's finish) with its direction block written to
    ``sink`` (when given) and its sorted run to the run folder.

    Returns ``(block or None, sum parts, count, sample_w, sample_e)``.
    """
    block, run_e, run_w, parts, count = function(source, window, *arguments)
    if sink is not None:
        sink.write(window, block)
        block = None
    edge_path, weight_path = run_paths(folder, tile)
    _write_raw(edge_path, run_e)
    _write_raw(weight_path, run_w)
    pick = np.linspace(0, run_e.size - 1, min(SAMPLES_PER_RUN, run_e.size)
                       ).astype(np.int64) if run_e.size else \
        np.empty(0, np.int64)
    return block, parts, count, run_w[pick], run_e[pick]


def splitters(samples_w, samples_e, total, workers):
    """Splitters cutting ``total`` edges into ranges of about
    :data:`RANGE_EDGES` (at least ``2 * workers`` ranges when there are
    enough samples): ``(split_w, split_e)`` sorted."""
    if samples_e.size == 0:
        return samples_w[:0], samples_e[:0]
    ranges = max(2 * workers, -(-total // RANGE_EDGES))
    order = np.lexsort((samples_e, samples_w))
    samples_w, samples_e = samples_w[order], samples_e[order]
    pick = np.unique(np.linspace(0, samples_e.size, ranges + 1)[1:-1]
                     .astype(np.int64))
    return samples_w[pick], samples_e[pick]


@njit(cache=True, nogil=True)
def _lower_bounds(run_w, run_e, split_w, split_e, bounds):
    """``bounds[k]``: the first entry of the run not lighter than splitter
    k (binary search in the total order)."""
    for k in range(split_w.size):
        low, high = 0, run_e.size
        while low < high:
            middle = (low + high) >> 1
            if _lighter(run_w[middle], run_e[middle], split_w[k], split_e[k]):
                low = middle + 1
            else:
                high = middle
        bounds[k] = low


def _open_run(folder, tile, count, weight_dtype):
    edge_path, weight_path = run_paths(folder, tile)
    if count == 0:
        return np.empty(0, np.int64), np.empty(0, weight_dtype)
    return (np.memmap(edge_path, np.int64, "r", shape=(count,)),
            np.memmap(weight_path, weight_dtype, "r", shape=(count,)))


def run_bounds(folder, tile, count, weight_dtype, split_w, split_e):
    """Per run: where every splitter falls (``len(split) + 2`` positions,
    from 0 to ``count``)."""
    run_e, run_w = _open_run(folder, tile, count, weight_dtype)
    bounds = np.empty(split_e.size + 2, np.int64)
    bounds[0], bounds[-1] = 0, count
    _lower_bounds(run_w, run_e, split_w, split_e, bounds[1:-1])
    return bounds


def merge_range(folder, slices, weight_dtype, offset, cols, edges_sink,
                weights_sink):
    """One range: the slices ``(tile, count, start, stop)`` of the runs,
    sorted and written at ``offset`` (or returned as ``(edges, weights)``
    when the sinks are None)."""
    parts_e, parts_w = [], []
    for tile, count, start, stop in slices:
        if stop > start:
            run_e, run_w = _open_run(folder, tile, count, weight_dtype)
            parts_e.append(np.array(run_e[start:stop]))
            parts_w.append(np.array(run_w[start:stop]))
    if parts_e:
        edge_ids = np.concatenate(parts_e)
        weights = np.concatenate(parts_w)
        # lexsort puts NaN weights last and orders them by edge id: the
        # total order of _lighter
        order = np.lexsort((edge_ids, weights))
        edge_ids, weights = edge_ids[order], weights[order]
    else:
        edge_ids = np.empty(0, np.int64)
        weights = np.empty(0, weight_dtype)
    edges = edge_ends(edge_ids, cols)
    if edges_sink is None:
        return edges, weights
    if edge_ids.size:
        edges_sink.write(tiling.Window(offset, 0, edge_ids.size, 2), edges)
        weights_sink.write(tiling.Window(offset, 0, edge_ids.size, 1),
                           weights[:, None])
    return None


def edge_ends(edge_ids, cols):
    """(low, high) cells of edge ids ``low * 4 + rank`` (rank 0 right, 1
    down-left, 2 down, 3 down-right) in a raster of ``cols`` columns."""
    low = edge_ids >> 2
    step = np.array([1, cols - 1, cols, cols + 1], np.int64)
    return np.stack([low, low + step[edge_ids & 3]], axis=1)


def sample_sort(folder, tiles, counts, samples, weight_dtype, shape,
                out_dir, executor, workers, progress):
    """The edge list and weights from the runs in ``folder`` (see the
    module docstring).  ``counts`` and ``samples`` are by tile."""
    total = int(sum(counts.values()))
    edges_sink = tiling.make_sink(out_dir, "edges", (total, 2), np.int64)
    weights_sink = tiling.make_sink(out_dir, "weights", (total, 1),
                                    weight_dtype)
    with tiling.output_sinks([edges_sink, weights_sink]):
        samples_w = np.concatenate([samples[t][0] for t in tiles]) \
            if tiles else np.empty(0, weight_dtype)
        samples_e = np.concatenate([samples[t][1] for t in tiles]) \
            if tiles else np.empty(0, np.int64)
        split_w, split_e = splitters(samples_w.astype(weight_dtype),
                                     samples_e, total, workers)
        bounds = tiling.run_tasks(
            run_bounds, [(folder, t, counts[t], weight_dtype, split_w,
                          split_e) for t in tiles],
            executor, progress.span(0.0, 0.1))
        bounds = np.array(bounds, dtype=np.int64).reshape(
            len(tiles), split_e.size + 2)
        sizes = (bounds[:, 1:] - bounds[:, :-1]).sum(axis=0)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        in_task = isinstance(edges_sink, tiling.NpySink)
        tasks = [(folder, [(t, counts[t], bounds[k, p], bounds[k, p + 1])
                           for k, t in enumerate(tiles)],
                  weight_dtype, int(offsets[p]), shape[1],
                  edges_sink if in_task else None,
                  weights_sink if in_task else None)
                 for p in range(sizes.size)]

        def write(index, result):
            if result is not None and result[0].size:
                n = result[0].shape[0]
                edges_sink.write(tiling.Window(int(offsets[index]), 0, n, 2),
                                 result[0])
                weights_sink.write(
                    tiling.Window(int(offsets[index]), 0, n, 1),
                    result[1][:, None])

        tiling.run_tasks(merge_range, tasks, executor, progress.span(0.1, 1.0),
                         on_result=write)
        edges = edges_sink.finish()
        weights = weights_sink.finish()
    return edges, weights.reshape(-1)
