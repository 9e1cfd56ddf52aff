"""The tiled MST's driver: its rounds, top to bottom.

:func:`minimum_spanning_tree_tiled` runs :func:`leaf_round` (round 1),
:func:`.hierarchy.separator_edges` and :func:`.hierarchy.merge_hierarchy`
(round 2), :func:`split_removed`, :func:`pieces_round` (rounds 3a/3b),
:func:`finish_round` (round 3c) and :func:`edge_list_round` (round 4).
Tile tasks go through :func:`gridgraph.core.tiling.run_tasks`: in this
process, in threads or processes, or on Dask workers.
"""

import concurrent.futures
import functools
import os
from dataclasses import dataclass

import numpy as np

from ... import distributed, tiling
from ..._common import Progress
from .._cpu import sum_parts_size, total_from_parts
from . import edge_list
from .budget import (FINISH_SPAN, HIERARCHY_SPAN, LEAF_SPAN, PIECES_SPAN,
                     MERGE_SHARE, STORE_SHARE)
from .expand import orient_pieces, tile_finish, tile_pieces
from .hierarchy import merge_hierarchy, separator_edges
from .leaf import leaf_tile
from .merge_runs import merge_runs

def minimum_spanning_tree_tiled(plan, connectivity, weight_index,
                                weight_dtype, nodata, backend, out_dir,
                                executor, progress, keep_edges=True):
    """The tiled path of :func:`gridgraph.core.minimum_spanning_tree`;
    ``keep_edges=False`` skips the edge list (edges and weights None)."""
    with distributed.tile_executor(
            executor, [plan.source], out_dir,
            functools.partial(warm_up, plan.source.dtype,
                              connectivity)) as executor:
        return _minimum_spanning_tree_tiled(
            plan, connectivity, weight_index, weight_dtype, nodata, backend,
            out_dir, executor, progress, keep_edges)


def warm_up(dtype=np.float32, connectivity=4):
    """Compile this module's tile kernels (a Dask worker's preflight): the
    tiled path on a tiny raster of ``dtype``, in this process, as tile
    tasks (:func:`tiling.as_tile_tasks`: the sample sort of the edge list;
    a worker runs nothing else, so no in-memory run).  4 x 4 tiles, so
    that the hierarchy has a level below its top (whose blocks are
    compressed, :func:`.forest._compress`).
    ``tests/test_tile_warm_up.py`` checks that a larger run compiles
    nothing more."""
    from .. import minimum_spanning_tree
    tiling.warm_up_row_io()  # a tile's rows read from a file raster
    # few distinct weights (ties, paths contracted from both ends); for
    # float types also a raster with two cells far apart in magnitude,
    # whose weight keys do not fit beside the edge ids (the sort's
    # two-pass path)
    values = np.random.default_rng(0).integers(1, 5, (32, 32)).astype(dtype)
    rasters = [values]
    if values.dtype.kind == "f":
        rasters.append(values.copy())
        rasters[1][0, 0] = np.finfo(dtype).max / 4
        rasters[1][31, 31] = np.finfo(dtype).tiny
    for values in rasters:
        for keep_edges in (True, False):
            with tiling.as_tile_tasks() as (pool, out_dir):
                minimum_spanning_tree(values, connectivity=connectivity,
                                      tile_size=8, backend="cpu",
                                      edges=keep_edges, executor=pool,
                                      out_dir=out_dir)


@dataclass
class Run:
    """What every round needs: the source, grid, tiles and options."""

    source: object
    grid: object
    nodata: object
    connectivity: int
    weight_index: int
    weight_dtype: np.dtype
    backend: str
    executor: object
    keep_edges: bool

    @property
    def shape(self):
        return self.source.shape

    @functools.cached_property
    def tiles(self):
        return self.grid.morton_order()

    @functools.cached_property
    def windows(self):
        return {tile: self.grid.window(*tile) for tile in self.tiles}


@dataclass
class KeptSeparators:
    """The separator edges in the final forest (ends, weights, keys), and
    the removed edges inside each tile (global keys, by tile)."""

    low: np.ndarray
    high: np.ndarray
    w: np.ndarray
    e: np.ndarray
    removed_by_tile: dict


def _minimum_spanning_tree_tiled(plan, connectivity, weight_index,
                                 weight_dtype, nodata, backend, out_dir,
                                 executor, progress, keep_edges):
    from .. import MSTResult
    source = plan.source
    rows, cols = source.shape
    progress = progress if progress is not None else Progress()
    weight_dtype = np.dtype(weight_dtype)
    run = Run(source, plan.grid, source.nodata if nodata is None else nodata,
              connectivity, weight_index, weight_dtype, backend, executor,
              keep_edges)
    # edges (16) and weights per cell, and the parent directions (4)
    edge_bytes = 16 + weight_dtype.itemsize if keep_edges else 0
    out_dir = tiling.check_out_dir(
        out_dir, rows * cols * (4 + edge_bytes), plan.limit_bytes)
    with tiling.scratch_folder(out_dir) as folder:
        # the tile forests (8 bytes per edge, or 1 per cell without the
        # edge list) and the sorted runs (12) stay in memory while they fit
        # this share of the budget; on Dask workers they stay there as
        # futures
        store = tiling.TileStates(tiling.ScratchStore(
            folder, int(plan.limit_bytes * STORE_SHARE)))
        messages = leaf_round(run, store, progress.span(*LEAF_SPAN))
        n_valid = sum(m.valid for m in messages.values())
        separators = separator_edges(run.grid, messages, connectivity,
                                     weight_index, weight_dtype)
        removed = merge_hierarchy(run.grid, messages, separators,
                                  weight_dtype,
                                  progress.span(*HIERARCHY_SPAN), executor)
        del messages
        kept = split_removed(run, separators, removed)
        del separators, removed
        roots = pieces_round(run, store, kept, progress.span(*PIECES_SPAN))
        edges_span = (FINISH_SPAN[1], 1.0)
        direction_sink = tiling.make_sink(out_dir, "parent_direction",
                                          (rows, cols), np.float32, np.nan)
        with tiling.output_sinks([direction_sink]):
            finished = finish_round(
                run, store, kept, roots, direction_sink, folder, out_dir,
                progress.span(FINISH_SPAN[0], FINISH_SPAN[1]
                              if keep_edges else 1.0))
            edges = weights = None
            if keep_edges:
                edges, weights = edge_list_round(
                    run, store, finished, folder, out_dir,
                    plan.limit_bytes * MERGE_SHARE,
                    progress.span(*edges_span))
            parent_direction = direction_sink.finish()
    progress(1.0)
    total = sum(finished.run_sizes.values())
    return MSTResult(edges=edges, weights=weights,
                     total_weight=total_from_parts(finished.parts),
                     trees=n_valid - total, parent_direction=parent_direction,
                     shape=(rows, cols))


# --------------------------------------------------------------------------
# round 1: leaf tiles


def leaf_round(run, store, progress):
    """Every tile's forest (kept in ``store``) and its
    :class:`.leaf.LeafMessage`, by tile."""
    messages = {}

    def keep_leaf(index, result):
        message, forest = result
        tile = run.tiles[index]
        messages[tile] = message
        store.put(("msf", tile), forest)

    tiling.run_tasks(
        leaf_tile,
        [(run.source, run.windows[t], run.shape, run.nodata,
          run.connectivity, run.weight_index, run.weight_dtype, run.backend,
          run.keep_edges) for t in run.tiles],
        run.executor, progress, on_result=keep_leaf, keep=True,
        resources=distributed.task_resources(run.backend, run.executor))
    return messages


# --------------------------------------------------------------------------
# between rounds 2 and 3: which removed edges are separators


def split_removed(run, separators, removed):
    """The separators that stay, and the removed edges inside each tile."""
    cols = run.shape[1]
    if separators:
        low, high, w, e = (np.concatenate([s[k] for s in separators.values()])
                           for k in range(4))
    else:
        low = high = e = np.empty(0, np.int64)
        w = np.empty(0, run.weight_dtype)
    # a removed edge is a separator when its ends lie in two tiles (not
    # looked up among the separators: np.isin of ~1.3M keys in ~1.3M took
    # most of this serial step's 1.1-1.4 s at neuse40's size)
    is_separator = _crosses_tiles(removed, run.grid, cols)
    removed_by_tile = _group_by_tile(removed[~is_separator], run.grid, cols)
    keep = ~_in_sorted(e, removed[is_separator])
    return KeptSeparators(low[keep], high[keep], w[keep], e[keep],
                          removed_by_tile)


def local_removed(run, kept, tile):
    """The removed edges inside ``tile`` as sorted local keys."""
    ids = kept.removed_by_tile.get(tile)
    if ids is None:
        return np.empty(0, np.int64)
    window = run.windows[tile]
    cols = run.shape[1]
    low = ids >> 2
    local_low = (low // cols - window.row) * window.cols \
        + low % cols - window.col
    return np.sort(local_low * 4 + (ids & 3))


# --------------------------------------------------------------------------
# round 3a/3b: border pieces, rooted across tiles


def pieces_round(run, store, kept, progress):
    """Every tile's border pieces (per tile, in parallel), rooted across
    tiles here: {tile: (root local cells, root degrees)}."""
    pieces = tiling.run_tasks(
        tile_pieces,
        ((run.source, run.windows[t], run.nodata, store.get(("msf", t)),
          local_removed(run, kept, t)) for t in run.tiles),
        run.executor, progress, count=len(run.tiles))
    return orient_pieces(run.grid, dict(zip(run.tiles, pieces)), kept.low,
                         kept.high)


# --------------------------------------------------------------------------
# round 3c: directions, the exact total, the sorted runs


@dataclass
class Finished:
    """What round 3c leaves: per tile its count of final edges, the exact
    sum's parts of all weights, and the runs' samples for a sample sort
    (``samples`` None: the runs are in the store for the k-way merge)."""

    run_sizes: dict
    parts: np.ndarray
    samples: dict = None


def finish_round(run, store, kept, roots, direction_sink, folder, out_dir,
                 progress):
    """Per tile: its parent directions (written into ``direction_sink``),
    its final edges counted and summed, and with the edge list its sorted
    run (to run files for a sample sort, else into the store)."""
    grid, cols = run.grid, run.shape[1]
    owned = {}
    if kept.e.size:
        order = np.lexsort((kept.e, kept.w))
        owner = _tile_index(kept.low[order], grid, cols)
        # grouped by owner tile, each group still in (w, e) order
        by_owner = np.argsort(owner, kind="stable")
        order, owner = order[by_owner], owner[by_owner]
        bounds = np.flatnonzero(np.diff(owner)) + 1
        for pick, t in zip(np.split(order, bounds),
                           owner[np.concatenate([[0], bounds])]):
            owned[divmod(int(t), grid.tile_cols)] = (kept.w[pick],
                                                     kept.e[pick])
    empty_sep = (np.empty(0, run.weight_dtype), np.empty(0, np.int64))
    finished = Finished({}, np.zeros(sum_parts_size(run.weight_dtype),
                                     dtype=np.int64))
    executor = run.executor
    # the edge list by a sample sort over run files when tasks run
    # elsewhere and can share the scratch folder (Dask workers: only when
    # it lies in out_dir); in this process by the k-way merge
    shared = not distributed.is_dask_client(executor) or (
        out_dir is not None and os.path.abspath(folder).startswith(
            os.path.abspath(out_dir) + os.sep))
    sample_sort = run.keep_edges and executor is not None and shared
    if sample_sort:
        finished.samples = {}

    def keep_run(index, result):
        tile = run.tiles[index]
        if sample_sort:
            block, tile_parts, count, sample_w, sample_e = result
            finished.samples[tile] = (sample_w, sample_e)
        else:
            block, run_ids, run_weights, tile_parts, count = result
        if block is not None:
            direction_sink.write(run.windows[tile], block)
        store.discard(("msf", tile))
        if run.keep_edges and not sample_sort:
            store.put(("run", tile), (run_ids, run_weights))
        finished.run_sizes[tile] = count
        finished.parts[:] += tile_parts  # integers: exact in any order

    # tasks write their own blocks (pwrite at distinct offsets) when they
    # can reach the sink (threads; processes and Dask workers for a sink on
    # disk): one thread writing every block would hold up the others
    in_task = executor is None or isinstance(
        executor, concurrent.futures.ThreadPoolExecutor) or \
        isinstance(direction_sink, tiling.NpySink)
    if sample_sort:
        def finish(t):
            return functools.partial(
                edge_list.finish_to_files, tile_finish,
                direction_sink if in_task else None, folder, t)
    else:
        def finish(t):
            return functools.partial(_finish_and_write, direction_sink) \
                if in_task else tile_finish
    tiling.run_tasks(
        _call,
        ((finish(t), run.source, run.windows[t], run.shape, run.nodata,
          store.get(("msf", t)), local_removed(run, kept, t), roots[t],
          owned.get(t, empty_sep), run.weight_index, run.weight_dtype)
         for t in run.tiles),
        executor, progress, on_result=keep_run, count=len(run.tiles))
    return finished


# --------------------------------------------------------------------------
# round 4: the sorted edge list


def edge_list_round(run, store, finished, folder, out_dir, budget_bytes,
                    progress):
    """The edge list and weights in (weight, low, high) order: a sample
    sort of the run files on an executor, else a k-way merge here."""
    total = sum(finished.run_sizes.values())
    if finished.samples is not None:
        return edge_list.sample_sort(
            folder, run.tiles, finished.run_sizes, finished.samples,
            run.weight_dtype, run.shape, out_dir, run.executor,
            tiling.executor_workers(run.executor), progress)
    return merge_runs(store, [("run", t) for t in run.tiles], total,
                      run.weight_dtype, run.shape, out_dir, progress,
                      budget_bytes=budget_bytes)


def _call(function, *arguments):
    """``function(*arguments)``: lets one task list carry a function per
    task."""
    return function(*arguments)


def _finish_and_write(sink, source, window, *arguments):
    """:func:`tile_finish`, writing the direction block to ``sink`` here
    (None in its place in the result)."""
    block, *rest = tile_finish(source, window, *arguments)
    sink.write(window, block)
    return (None, *rest)


def _tile_index(cells, grid, cols):
    return (cells // cols // grid.tile_size) * grid.tile_cols \
        + (cells % cols) // grid.tile_size


def _crosses_tiles(edge_ids, grid, cols):
    """Whether each edge (key ``low * 4 + rank``) joins two tiles."""
    ends = edge_list.edge_ends(edge_ids, cols)
    return _tile_index(ends[:, 0], grid, cols) \
        != _tile_index(ends[:, 1], grid, cols)


def _in_sorted(values, sorted_values):
    """``np.isin(values, sorted_values)`` for sorted ``sorted_values``:
    the values sorted once and looked up in order (a binary search per
    value in random order was slower than the sort)."""
    if sorted_values.size == 0 or values.size == 0:
        return np.zeros(values.shape, dtype=bool)
    # stable: timsort merges the separators' runs (each seam's keys ascend)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    at = np.minimum(np.searchsorted(sorted_values, ordered),
                    sorted_values.size - 1)
    found = np.empty(values.shape, dtype=bool)
    found[order] = sorted_values[at] == ordered
    return found


def _group_by_tile(edge_ids, grid, cols):
    """Edge ids grouped by the tile of their low end."""
    if edge_ids.size == 0:
        return {}
    index = _tile_index(edge_ids >> 2, grid, cols)
    order = np.argsort(index, kind="stable")
    index, edge_ids = index[order], edge_ids[order]
    bounds = np.flatnonzero(np.diff(index)) + 1
    groups = {}
    for part_index, part in zip(np.split(index, bounds),
                                np.split(edge_ids, bounds)):
        groups[divmod(int(part_index[0]), grid.tile_cols)] = part
    return groups
