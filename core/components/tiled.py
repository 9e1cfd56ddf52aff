"""Connected components on the block hierarchy (out-of-core).

Three rounds (docs/architecture.md, "The block hierarchy"):

1. Per tile (:func:`tile_summary`, a pure function of source, window and
   parameters): label the tile with the in-memory kernel and return a small
   message: the labels and values along the tile's four border lines, and
   for every label touching the border its first cell (global row-major
   index).  Labels that do not touch the border are whole components; the
   message only counts how many start on each row of the tile.
2. In memory (:func:`merge`): union-find over the border labels of all
   tiles, joined across every seam (and across tile corners for
   8-connectivity).  The union keeps the piece with the smallest first cell
   as the root, so each component's first cell is its root's.  Counting
   the component starts per (row, tile column) and taking prefix sums gives
   every component its scan-order number without storing one entry per
   component: label = 1 + (starts before its first cell in scan order).
3. Per tile (:func:`tile_labels`): label the tile again (the same labels,
   as the kernel is deterministic) and renumber: border labels get their
   component's number from round 2, interior labels count the starts
   before them on their row.  Written into ``out_dir`` by the tasks, the
   tiles run in runs of adjacent tiles of one tile row
   (:func:`label_run`, :data:`LABEL_RUN_TILES`), each run written
   through one window.  On a Dask cluster, with
   :data:`KEPT_LABELS_SHARE` set, round 1's tile labels can stay on the
   workers instead (one future per batch of tiles) and round 3 only
   renumbers them where they are (:func:`renumber_kept_group`); off by
   default (see there).

Memory: a tile's kernel arrays, plus messages of O(tile side) per tile
(and, on a cluster, the kept labels in the workers' memory).
"""

import functools
from dataclasses import dataclass

import numpy as np
from numba import njit

from .. import distributed, tile_tasks, tiling
from .._common import Progress, index_dtype, valid_mask
from .._unionfind import find_root as _find
from . import IN_MEMORY_BYTES_PER_CELL

# Bytes per cell of one tile's working set: the values (up to 8), the valid
# mask, the labels (8 for large tiles), the kernel's union-find array (8) and
# the renumbered output block (8).
TILE_BYTES_PER_CELL = 33
# Progress spans of the two tile rounds (the merge between them is quick).
SUMMARY_SPAN = (0.0, 0.45)
LABEL_SPAN = (0.5, 1.0)
# On a Dask cluster round 1's labels may stay on the workers for round 3
# when they take at most this share of the workers' memory (else round 3
# labels each tile again).  0 (the default): never.  Measured on the H100
# host's CPUs (neuse40, tiles of 1024, one-thread workers): unbatched,
# 3.36 s against 2.28 s at 8 workers (2026-11-24 12:23 UTC); one future
# per batch, 3.83 s against 5.18 s at 1 worker but 1.34-1.57 s against
# 1.18-1.25 s at 8 (17:59 UTC): at 8 workers the label round is bound by
# writing the labels file, not by labelling (docs/benchmarks.md, fifth
# session).
KEPT_LABELS_SHARE = 0.0
# The label round writes a raw labels file (out_dir) through shared
# mappings of the file, its space reserved up front (NpySink's mapped
# mode), instead of pwrite: the label round's floor on the H100 host was
# processes queueing on one file's buffered writes.  False: pwrite.  A
# Dask cluster with workers on more than one host writes with pwrite
# whatever this says (distributed.one_host: whole pages written back by
# two machines would overwrite each other at the runs' seams).
MAPPED_LABEL_WRITES = True
# Strips each tile is labelled in (components._cpu.label's ``strips``)
# when an executor runs the tiles: 1, the task's own thread.  The executor
# runs tiles side by side (one per worker thread); the kernel's own strip
# threads, one per CPU the process may use, would put 16 threads in every
# one-thread Dask worker of a 16-CPU machine.  Measured on the H100 host
# (2026-11-24 20:25 UTC, neuse40): a "one-worker" run used 9.8 CPU
# seconds in 5.7 s of wall, and 8 workers switched involuntarily 1700
# times a run (docs/benchmarks.md, Dask, sixth session).  In process
# (no executor) the kernel keeps its strips: None, one per CPU.
EXECUTOR_TILE_STRIPS = 1
# The label round's tasks, when they write the labels into out_dir
# themselves: runs of adjacent tiles of one tile row, each run's labels
# written through one mapping of its rows (tile_io.NpySink.window_writer:
# a 1024-wide tile's row segment of a raster whose rows are not a
# multiple of a page touches two pages, each shared with the next tile,
# so tile by tile every page is faulted in twice, by two processes).
# "auto": runs of about the length of a Dask batch
# (tile_tasks.BATCHES_PER_THREAD tasks per worker thread; one thread
# without an executor), each tile row cut into near equal runs; "row":
# whole tile rows; an int: at most that many tiles a run; None: tile by
# tile in Morton order (batched on Dask as round 1).  Measured on the H100
# host's CPUs (neuse40, tiles of 1024, one-thread workers, 2026-11-24
# 20:59 UTC), with tile_io.POPULATE_MAPPED_WRITES: 0.94-0.95 s at 8
# workers against 1.17-1.29 s tile by tile, 4.98 s against 6.19 s at 1
# (docs/benchmarks.md, Dask, sixth session, second round).
LABEL_RUN_TILES = "auto"
# ...and a run's labels take at most this many bytes (more tiles are cut
# into shorter runs): its mapped pages are in the writing process's
# resident set until the run is written (tile by tile: one tile's).
RUN_BYTES = 64 << 20
# Tiles per Dask task: "auto" groups them (tile_tasks.BATCHES_PER_THREAD
# Dask tasks per worker thread; the same tile calls, the same labels),
# None one task per tile.
DASK_BATCH = "auto"


@dataclass
class TileSummary:
    """Round 1's message of one tile.

    ``top``, ``bottom``, ``left``, ``right``: per border cell, the index + 1
    of its label among the tile's border labels (0 where no component);
    ``*_values``: the cell values there; ``first_cell``: the global first
    cell of each border label; ``interior_before``: for each border label,
    the components that do not touch the border and start earlier on the
    same tile row; ``row_starts``: per tile row, how many such interior
    components start there."""

    first_cell: np.ndarray
    interior_before: np.ndarray
    row_starts: np.ndarray
    top: np.ndarray
    bottom: np.ndarray
    left: np.ndarray
    right: np.ndarray
    top_values: np.ndarray
    bottom_values: np.ndarray
    left_values: np.ndarray
    right_values: np.ndarray

    def line(self, side):
        """(border label indices, values) along ``side``."""
        return getattr(self, side), getattr(self, side + "_values")


@dataclass
class TileAnswer:
    """Round 2's answer to one tile: each border label's component number
    and whether its piece holds the component's first cell, and the count
    of components starting before each of the tile's rows (in its tile
    column's segment of the row, and all rows and segments before)."""

    number: np.ndarray
    is_root: np.ndarray
    starts_before: np.ndarray


def connected_components_tiled(plan, connectivity, mode, nodata, backend,
                               out_dir, executor, progress):
    """The tiled path of :func:`gridgraph.core.connected_components`."""
    from . import ComponentsResult
    source = plan.source
    if nodata is None:
        nodata = source.nodata
    rows, cols = source.shape
    label_bytes = np.dtype(index_dtype(rows * cols)).itemsize * rows * cols
    out_dir = tiling.check_out_dir(out_dir, label_bytes, plan.limit_bytes)
    labels, count = label_tiled(source, plan.grid, connectivity, mode, nodata,
                                out_dir, executor, progress, backend)
    return ComponentsResult(labels=labels, count=int(count))


def label_tiled(source, grid, connectivity, mode, nodata, out_dir=None,
                executor=None, progress=None, backend="cpu"):
    """Label the components of ``source`` tile by tile.

    Returns ``(labels, count)``: labels is an in-memory array when
    ``out_dir`` is None, else a read-only memmap of ``out_dir/labels.npy``.
    Identical to the in-memory labels for every tile size and executor.
    """
    with distributed.tile_executor(
            executor, [source], out_dir,
            functools.partial(warm_up, source.dtype)) as executor:
        return _label_tiled(source, grid, connectivity, mode, nodata,
                            out_dir, executor, progress, backend)


def _label_tiled(source, grid, connectivity, mode, nodata, out_dir, executor,
                 progress, backend):
    progress = progress if progress is not None else Progress()
    rows, cols = source.shape
    label_dtype = index_dtype(rows * cols)
    tiles = grid.morton_order()
    windows = [grid.window(r, c) for r, c in tiles]
    shape = (rows, cols)
    strips = None if executor is None else EXECUTOR_TILE_STRIPS
    # made before round 1: a full disk fails the run before any tile work
    sink = tiling.make_sink(out_dir, "labels", shape, label_dtype,
                            mapped=MAPPED_LABEL_WRITES and out_dir is not None
                            and distributed.one_host(executor))
    with tiling.output_sinks([sink]):
        return _rounds(source, grid, connectivity, mode, nodata, executor,
                       progress, backend, tiles, windows, shape, strips,
                       label_dtype, sink)


def _rounds(source, grid, connectivity, mode, nodata, executor, progress,
            backend, tiles, windows, shape, strips, label_dtype, sink):
    """The three rounds into ``sink`` (:func:`_label_tiled`)."""
    # a sink on disk is written by the tasks themselves (their own
    # window, idempotent); an in-memory one here
    in_task = isinstance(sink, tiling.NpySink)
    runs = None
    if in_task and LABEL_RUN_TILES is not None:
        threads = tiling.executor_workers(executor)
        runs = grid.row_runs(_run_length(grid, threads, label_dtype))
    if runs is not None and (backend != "cuda" or executor is not None) \
            and not _keep_labels(executor, shape[0] * shape[1]) and \
            distributed.task_resources(backend, executor) is None:
        count = _joined_rounds(
            source, grid, connectivity, mode, nodata, executor, progress,
            backend, tiles, windows, shape, strips, label_dtype, sink, runs)
        return sink.finish(), count
    summaries, kept, on_gpu = _summary_round(
        source, connectivity, mode, nodata, executor, progress, backend,
        windows, shape, strips)
    by_tile = {tile: summary for tile, summary in zip(tiles, summaries)}
    answers, count = merge(grid, by_tile, connectivity == 8, mode == "equal")
    progress(LABEL_SPAN[0])

    def write(index, block):
        if not in_task:
            sink.write(windows[index], block)

    resources = None  # renumbering runs on the CPU
    if kept is not None:
        # one task per group of kept labels (a summary batch's), run
        # where they are; it writes its windows or returns the blocks
        groups = tiling.kept_groups(kept)
        function = renumber_kept_group
        arguments = [(future, [(index, windows[number],
                                answers[tiles[number]])
                               for index, number in parts],
                      label_dtype, sink if in_task else None)
                     for future, parts in groups]

        def write(index, blocks):
            if not in_task:
                for (_, number), block in zip(groups[index][1], blocks):
                    sink.write(windows[number], block)
    else:
        resources = distributed.task_resources(backend, executor)
        function = tile_labels
        arguments = [(source, window, shape, connectivity, mode, nodata,
                      answers[tile], label_dtype, backend, strips)
                     for tile, window in zip(tiles, windows)]
    if on_gpu is not None:
        on_gpu.write_labels(sink, [answers[tile] for tile in tiles],
                            label_dtype, progress.span(*LABEL_SPAN))
    elif kept is not None:
        tiling.run_tasks(function, arguments, executor,
                         progress.span(*LABEL_SPAN), on_result=write)
    elif runs is not None:
        tiling.run_tasks(
            label_run,
            [(sink, source, [(grid.window(*tile), answers[tile])
                             for tile in run], shape, connectivity,
              mode, nodata, label_dtype, backend, strips)
             for run in runs],
            executor, progress.span(*LABEL_SPAN), on_result=write,
            resources=resources, at_once=True)
    else:
        tiling.run_tasks(
            functools.partial(tiling.write_in_task, sink, function)
            if in_task else function, arguments, executor,
            progress.span(*LABEL_SPAN), on_result=write,
            resources=resources,
            # blocks gathered here travel one by one
            batch=DASK_BATCH if in_task else None)
    del kept, arguments  # the kept labels: released on the workers
    return sink.finish(), count


def _joined_rounds(source, grid, connectivity, mode, nodata, executor,
                   progress, backend, tiles, windows, shape, strips,
                   label_dtype, sink, runs):
    """The three rounds with the label round in runs written by the tasks
    (the default with ``out_dir`` on the CPU): round 1, the merge and the
    label runs through :func:`tiling.run_joined_rounds` (on a Dask
    cluster the merge is a task on a worker and the label round is
    submitted together with round 1, behind it).  Returns the count."""
    return tiling.run_joined_rounds(
        executor, tile_summary,
        [(source, window, shape, connectivity, mode, nodata, backend, strips)
         for window in windows],
        merge_summaries, (grid, tiles, connectivity == 8, mode == "equal"),
        label_run_answered,
        [(sink, source, grid, run, shape, connectivity, mode, nodata,
          label_dtype, backend, strips) for run in runs],
        progress.span(*SUMMARY_SPAN), progress.span(*LABEL_SPAN),
        batch=DASK_BATCH, part=_run_answers)


def merge_summaries(grid, tiles, eight, compare_values, summaries):
    """Round 2 as the join of :func:`tiling.run_joined_rounds`: ``(answers,
    count)`` (:func:`merge`) from round 1's ``summaries`` of ``tiles``, in
    that order; the answers packed (:class:`tile_tasks.Packed`, indexed
    by tile), as every label task's worker fetches them all."""
    answers, count = merge(grid, dict(zip(tiles, summaries)), eight,
                           compare_values)
    return tile_tasks.Packed([answers[tile] for tile in tiles], tiles), count


def _run_answers(answers, task):
    """The answers a label run's task (:func:`label_run_answered`'s
    arguments after ``answers``) needs: its tiles'."""
    run = task[3]
    return tile_tasks.Packed([answers[tile] for tile in run], run)


def label_run_answered(answers, sink, source, grid, run, shape, connectivity,
                       mode, nodata, label_dtype, backend="cpu", strips=None):
    """:func:`label_run` for the tiles ``run`` of ``grid``, their answers
    taken from round 2's ``answers`` (all tiles' or the run's, by tile)."""
    label_run(sink, source, [(grid.window(*tile), answers[tile])
                             for tile in run], shape, connectivity, mode,
              nodata, label_dtype, backend, strips)


def _summary_round(source, connectivity, mode, nodata, executor, progress,
                   backend, windows, shape, strips):
    """Round 1: ``(summaries, kept labels or None, the GPU rounds or
    None)``."""
    if backend == "cuda" and executor is None:
        # the GPU rounds (labels kept on the device, reads ahead, writes
        # overlapped): components/_cuda_tiled.py
        from ._cuda_tiled import TileRounds
        on_gpu = TileRounds(source, windows, connectivity, mode, nodata)
        return on_gpu.summaries(shape, progress.span(*SUMMARY_SPAN)), None, \
            on_gpu
    keep = _keep_labels(executor, shape[0] * shape[1])
    summaries = tiling.run_tasks(
        tile_summary_kept if keep else tile_summary,
        [(source, window, shape, connectivity, mode, nodata, backend,
          strips) for window in windows],
        executor, progress.span(*SUMMARY_SPAN), keep=keep,
        resources=distributed.task_resources(backend, executor),
        batch=DASK_BATCH, at_once=True)
    if not keep:
        return summaries, None, None
    # (summary, future of the tile's labels)
    return [summary for summary, _ in summaries], \
        [state for _, state in summaries], None


def _run_length(grid, threads, label_dtype):
    """Tiles per run of the label round (:data:`LABEL_RUN_TILES`, within
    :data:`RUN_BYTES` of labels) for an executor of ``threads``."""
    if LABEL_RUN_TILES == "row":
        length = grid.tile_cols
    elif LABEL_RUN_TILES == "auto":
        length = grid.count // (tile_tasks.BATCHES_PER_THREAD * threads)
    else:
        length = int(LABEL_RUN_TILES)
    tile_bytes = grid.tile_size ** 2 * np.dtype(label_dtype).itemsize
    return max(1, min(length, RUN_BYTES // tile_bytes))


def label_run(sink, source, run, shape, connectivity, mode, nodata,
              label_dtype, backend="cpu", strips=None):
    """Round 3 for a run of adjacent tiles of one tile row (``run``: their
    ``(window, answer)``): each tile labelled as :func:`tile_labels` does
    and written into ``sink`` through one window, the run's
    (:func:`tiling.window_writer`).  Returns None; idempotent (a retried
    run writes the same bytes)."""
    window = tiling.union_window([part for part, _ in run])
    with tiling.window_writer(sink, window) as put:
        for part, answer in run:
            put(part, tile_label_filler(source, part, connectivity, mode,
                                        nodata, answer, backend, strips))


def _keep_labels(executor, cells):
    """Whether round 1's tile labels stay on the workers: on a Dask cluster
    whose memory limits hold them (int64 labels, the widest) within
    :data:`KEPT_LABELS_SHARE` (0: never); a cluster without limits keeps
    them."""
    if KEPT_LABELS_SHARE <= 0 or not distributed.is_dask_client(executor):
        return False
    workers = distributed.cluster_workers(executor).values()
    if any(limit is None for _, limit in workers):
        return True
    return cells * 8 <= KEPT_LABELS_SHARE * sum(
        limit for _, limit in workers)


def warm_up(dtype=np.float64):
    """Compile this module's tile kernels (a Dask worker's preflight): the
    tiled path on a tiny raster of ``dtype``, in this process, in both
    modes, as tile tasks writing their label runs into a labels file
    (:func:`tiling.as_tile_tasks`; a worker runs nothing else, so no
    in-memory run)."""
    tiling.warm_up_row_io()  # a tile's rows read from a file raster
    values = (np.arange(16 * 16) % 3).reshape(16, 16).astype(dtype)
    source = tiling.ArraySource(values)
    grid = tiling.TileGrid(values.shape, 8)
    for mode in ("equal", "nonzero"):
        for connectivity in (4, 8):
            with tiling.as_tile_tasks() as (pool, out_dir):
                label_tiled(source, grid, connectivity, mode, None, out_dir,
                            pool)
    # the label round's renumbering into a part of a mapped labels file
    # (a strided view: numba compiles it apart from the contiguous one)
    window = tiling.Window(0, 0, 8, 8)
    answer = merge(tiling.TileGrid((8, 8), 8), {(0, 0): tile_summary(
        tiling.ArraySource(values[:8, :8]), window, (8, 8), 4, "equal",
        None)}, False, True)[0][(0, 0)]
    tile_label_filler(tiling.ArraySource(values[:8, :8]), window, 4,
                      "equal", None, answer)(np.empty((16, 16), np.int32)[:8,
                                                                      :8])


def _local_labels(source, window, connectivity, mode, nodata, backend,
                  strips=None):
    values = source.read(window)
    valid = valid_mask(values, nodata)
    if backend == "cuda":
        from ._cuda import label
        labels, count = label(values, valid, connectivity, mode, Progress())
    else:
        from ._cpu import label
        labels, count = label(values, valid, connectivity, mode, Progress(),
                              strips=strips)
    return values, labels, count


def tile_summary(source, window, shape, connectivity, mode, nodata,
                 backend="cpu", strips=None):
    """Round 1 for one tile: its :class:`TileSummary`.  ``strips``: the CPU
    kernel's (None: one per CPU; any value gives the same labels)."""
    return tile_summary_kept(source, window, shape, connectivity, mode,
                             nodata, backend, strips)[0]


def tile_summary_kept(source, window, shape, connectivity, mode, nodata,
                      backend="cpu", strips=None):
    """Round 1 for one tile: ``(summary, (labels, border_index))``, the
    :class:`TileSummary` and the tile's labels for :func:`renumber_kept`."""
    values, labels, count = _local_labels(source, window, connectivity, mode,
                                          nodata, backend, strips)
    border_index = tiling.border_label_index(labels, count)
    first_cell, interior_before, row_starts = _starts(
        labels, border_index, np.int64(window.row), np.int64(window.col),
        np.int64(shape[1]))
    summary = TileSummary(
        first_cell=first_cell, interior_before=interior_before,
        row_starts=row_starts,
        top=border_index[labels[0]] + 1, bottom=border_index[labels[-1]] + 1,
        left=border_index[labels[:, 0]] + 1,
        right=border_index[labels[:, -1]] + 1,
        top_values=np.array(values[0]), bottom_values=np.array(values[-1]),
        left_values=np.array(values[:, 0]),
        right_values=np.array(values[:, -1]))
    return summary, (labels, border_index)


@njit(cache=True, nogil=True)
def _starts(labels, border_index, row0, col0, raster_cols):
    """First cells of the border labels and start counts of the others.

    The kernel numbers labels in scan order of their first cells, so a label
    larger than every label seen so far marks its first cell.
    """
    rows, cols = labels.shape
    n_border = 0
    for label in range(border_index.size):
        if border_index[label] >= 0:
            n_border += 1
    first_cell = np.empty(n_border, dtype=np.int64)
    interior_before = np.empty(n_border, dtype=np.int64)
    row_starts = np.zeros(rows, dtype=np.int64)
    newest = 0
    for r in range(rows):
        run = 0
        for c in range(cols):
            label = labels[r, c]
            if label <= newest:
                continue
            newest = label
            b = border_index[label]
            if b >= 0:
                first_cell[b] = (row0 + r) * raster_cols + col0 + c
                interior_before[b] = run
            else:
                run += 1
        row_starts[r] = run
    return first_cell, interior_before, row_starts


def merge(grid, summaries, eight, compare_values):
    """Round 2: join border labels across seams and number the components.

    ``summaries`` maps (tile_row, tile_col) to its :class:`TileSummary`.
    Returns ``(answers, count)``, answers mapping each tile to its
    :class:`TileAnswer`.

    This runs between the rounds while every worker waits (an 8-worker
    run's critical path): the border lines are joined in one kernel call
    and the numbering in another (:func:`_number`), with no array of the
    raster's rows made twice.  On neuse40's 234 summaries: 14.6-20.8 ms
    before, ~11.5 ms now on the 2-core box; 13-23 ms on H200 hosts' CPUs
    (docs/benchmarks.md, Dask, twenty-first session), where faulting in
    the fresh pages of the concatenated border lines is ~40 % of it.
    """
    tiles = sorted(summaries)
    parts = [summaries[tile] for tile in tiles]
    at = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([part.first_cell.size for part in parts], out=at[1:])
    total = int(at[-1])
    first_cell = _concatenated([part.first_cell for part in parts])
    parent = np.arange(total, dtype=np.int64)
    # every seam and corner in one kernel call (a call per seam cost ~18 us
    # of argument checks: 8 of the merge's 12 ms on neuse40's 234 tiles)
    tile_index = np.full((grid.tile_rows, grid.tile_cols), -1, np.int64)
    for k, tile in enumerate(tiles):
        tile_index[tile] = k
    lines = []
    for side in ("top", "bottom", "left", "right"):
        labels = [getattr(part, side) for part in parts]
        line_at = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([line.size for line in labels], out=line_at[1:])
        lines += [_concatenated(labels), _concatenated(
            [getattr(part, side + "_values") for part in parts]), line_at]
    _join_seams(parent, first_cell, at[:-1], tile_index, *lines, eight,
                compare_values)

    # Component starts per (raster row, tile column): interior starts from
    # the messages (set here) plus the roots, whose first cell starts their
    # component (added by _number, which turns them into the starts before)
    rows, cols = grid.shape
    size = grid.tile_size
    before = np.zeros((rows, grid.tile_cols), dtype=np.int64)
    for (tr, tc), part in zip(tiles, parts):
        before[tr * size:tr * size + part.row_starts.size, tc] = \
            part.row_starts
    number, is_root, count = _number(
        parent, first_cell, _concatenated(
            [part.interior_before for part in parts]), before, cols, size)

    answers = {}
    for k, (tr, tc) in enumerate(tiles):
        start, stop = at[k], at[k + 1]
        row = tr * size
        answers[(tr, tc)] = TileAnswer(
            number=number[start:stop], is_root=is_root[start:stop],
            starts_before=before[row:row + parts[k].row_starts.size, tc])
    return answers, int(count)


@njit(cache=True, nogil=True)
def _number(parent, first_cell, interior_before, starts, raster_cols,
            tile_size):
    """The components' numbers from the joined border labels: ``(number
    of each border label, whether it is its component's root, count)``.
    ``starts`` (raster rows x tile columns) holds the interior components
    starting in each row segment; it is turned in place into the
    components starting before each segment in scan order.

    A root's number: 1 + starts before its row segment + interior starts
    before it in the segment + roots before it in the segment."""
    total = parent.size
    root = np.empty(total, dtype=np.int64)
    for node in range(total):
        root[node] = _find(parent, node)
    is_root = np.empty(total, dtype=np.bool_)
    roots = 0
    for node in range(total):
        is_root[node] = root[node] == node
        if is_root[node]:
            roots += 1
    tile_cols = starts.shape[1]
    root_ids = np.empty(roots, dtype=np.int64)
    k = 0
    for node in range(total):
        if is_root[node]:
            root_ids[k] = node
            k += 1
            cell = first_cell[node]
            starts[cell // raster_cols, (cell % raster_cols) // tile_size] += 1
    flat = starts.reshape(-1)
    count = 0
    for i in range(flat.size):
        here = flat[i]
        flat[i] = count
        count += here
    # the roots in scan order of their first cells (distinct cells)
    root_ids = root_ids[np.argsort(first_cell[root_ids])]
    number = np.zeros(total, dtype=np.int64)
    segment = -1
    rank = 0
    for node in root_ids:
        cell = first_cell[node]
        here = (cell // raster_cols) * tile_cols + \
            (cell % raster_cols) // tile_size
        rank = rank + 1 if here == segment else 0
        segment = here
        number[node] = 1 + flat[here] + interior_before[node] + rank
    for node in range(total):
        number[node] = number[root[node]]
    return number, is_root, count


@njit(cache=True, nogil=True)
def _union(parent, first_cell, a, b):
    """Join the sets of a and b; the root with the earlier first cell wins."""
    ra = _find(parent, a)
    rb = _find(parent, b)
    if ra == rb:
        return
    if first_cell[ra] < first_cell[rb]:
        parent[rb] = ra
    else:
        parent[ra] = rb


@njit(cache=True, nogil=True)
def _linked(index_a, value_a, index_b, value_b, compare_values):
    if index_a == 0 or index_b == 0:
        return False
    return (not compare_values) or value_a == value_b


@njit(cache=True, nogil=True)
def _join_lines(parent, first_cell, line_a, values_a, offset_a, line_b,
                values_b, offset_b, eight, compare_values):
    """Union across a seam: cell i of line a touches cell i of line b, and
    cells i +- 1 too when 8-connected."""
    n = line_a.size
    for i in range(n):
        if line_a[i] == 0:
            continue
        first = i - 1 if eight and i > 0 else i
        last = i + 1 if eight and i + 1 < n else i
        for j in range(first, last + 1):
            if _linked(line_a[i], values_a[i], line_b[j], values_b[j],
                       compare_values):
                _union(parent, first_cell, offset_a + line_a[i] - 1,
                       offset_b + line_b[j] - 1)


def _concatenated(arrays):
    """One array of ``arrays`` end to end (their common dtype; a 0-length
    one of int64 when there are none)."""
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


@njit(cache=True, nogil=True)
def _join_seams(parent, first_cell, label_offset, tile_index, top, top_values,
                top_at, bottom, bottom_values, bottom_at, left, left_values,
                left_at, right, right_values, right_at, eight,
                compare_values):
    """Union across every seam of the tile grid (``tile_index[tile row,
    tile col]``: the tile's place in the per-tile arrays, -1 for a tile
    without a summary), and across tile corners when 8-connected: the
    border lines of all tiles end to end, tile k's from ``*_at[k]`` to
    ``*_at[k + 1]``; ``label_offset[k]``: its first border label's
    place in ``parent``."""
    tile_rows, tile_cols = tile_index.shape
    for tr in range(tile_rows):
        for tc in range(tile_cols):
            k = tile_index[tr, tc]
            if k < 0:
                continue
            if tc + 1 < tile_cols and tile_index[tr, tc + 1] >= 0:
                j = tile_index[tr, tc + 1]
                _join_lines(parent, first_cell,
                            right[right_at[k]:right_at[k + 1]],
                            right_values[right_at[k]:right_at[k + 1]],
                            label_offset[k], left[left_at[j]:left_at[j + 1]],
                            left_values[left_at[j]:left_at[j + 1]],
                            label_offset[j], eight, compare_values)
            if tr + 1 >= tile_rows:
                continue
            j = tile_index[tr + 1, tc]
            if j >= 0:
                _join_lines(parent, first_cell,
                            bottom[bottom_at[k]:bottom_at[k + 1]],
                            bottom_values[bottom_at[k]:bottom_at[k + 1]],
                            label_offset[k], top[top_at[j]:top_at[j + 1]],
                            top_values[top_at[j]:top_at[j + 1]],
                            label_offset[j], eight, compare_values)
            if not eight:
                continue
            # the corners: the upper tile's last (first) bottom cell and
            # the lower right (left) tile's first (last) top cell
            if tc + 1 < tile_cols and tile_index[tr + 1, tc + 1] >= 0:
                j = tile_index[tr + 1, tc + 1]
                _join_cells(parent, first_cell, bottom, bottom_values,
                            bottom_at[k + 1] - 1, label_offset[k], top,
                            top_values, top_at[j], label_offset[j],
                            compare_values)
            if tc > 0 and tile_index[tr + 1, tc - 1] >= 0:
                j = tile_index[tr + 1, tc - 1]
                _join_cells(parent, first_cell, bottom, bottom_values,
                            bottom_at[k], label_offset[k], top, top_values,
                            top_at[j + 1] - 1, label_offset[j],
                            compare_values)


@njit(cache=True, nogil=True)
def _join_cells(parent, first_cell, line_a, values_a, at_a, offset_a, line_b,
                values_b, at_b, offset_b, compare_values):
    """Union of cell ``at_a`` of ``line_a`` and cell ``at_b`` of
    ``line_b`` (a tile corner, 8-connectivity) when both are labelled
    and, comparing values, equal."""
    if _linked(line_a[at_a], values_a[at_a], line_b[at_b], values_b[at_b],
               compare_values):
        _union(parent, first_cell, offset_a + line_a[at_a] - 1,
               offset_b + line_b[at_b] - 1)


def tile_labels(source, window, shape, connectivity, mode, nodata, answer,
                label_dtype, backend="cpu", strips=None):
    """Round 3 for one tile: its final labels (an array of ``label_dtype``)."""
    final = np.empty((window.rows, window.cols), dtype=label_dtype)
    tile_label_filler(source, window, connectivity, mode, nodata, answer,
                      backend, strips)(final)
    return final


def tile_label_filler(source, window, connectivity, mode, nodata, answer,
                      backend="cpu", strips=None):
    """Round 3 for one tile, up to the final numbers: the tile is labelled
    now, and the returned ``fill(out)`` writes its final labels into
    ``out`` (any 2-D array of the window's shape, e.g. the tile's part of
    a mapped labels file: no block of its own and no copy, which saved
    a write and a read of every label in the label round)."""
    _, labels, count = _local_labels(source, window, connectivity, mode,
                                     nodata, backend, strips)
    kept = (labels, tiling.border_label_index(labels, count))
    return functools.partial(renumber_into, kept, answer)


def renumber_kept_group(states, parts, label_dtype, sink=None):
    """Round 3 for the tiles of one group of kept labels
    (:func:`tiling.kept_groups`): ``parts`` are ``(index in states or None
    for states itself, window, answer)``.  Writes each block into ``sink``
    (returns None), or returns the blocks in order without one.  Pure."""
    blocks = []
    with tiling.heap_kept_for_tiles():
        for index, window, answer in parts:
            block = renumber_kept(states if index is None else states[index],
                                  window, answer, label_dtype)
            if sink is not None:
                sink.write(window, block)
            else:
                blocks.append(block)
    return None if sink is not None else blocks


def renumber_kept(kept, window, answer, label_dtype):
    """Round 3 for one tile from round 1's ``(labels, border_index)`` (kept
    on the worker): its final labels.  Pure (``kept`` is only read)."""
    final = np.empty(kept[0].shape, dtype=label_dtype)
    renumber_into(kept, answer, final)
    return final


def renumber_into(kept, answer, final):
    """Round 3's final labels of one tile from ``(labels, border_index)``
    into ``final`` (the tile's shape; ``kept`` is only read)."""
    labels, border_index = kept
    _renumber(labels, border_index, answer.number, answer.is_root,
              answer.starts_before, final)


@njit(cache=True, nogil=True)
def _renumber(labels, border_index, border_number, border_is_root,
              starts_before, final):
    rows, cols = labels.shape
    count = border_index.size - 1
    number = np.zeros(count + 1, dtype=np.int64)
    newest = 0
    for r in range(rows):
        run = 0
        for c in range(cols):
            label = labels[r, c]
            if label > newest:
                newest = label
                b = border_index[label]
                if b >= 0:
                    number[label] = border_number[b]
                    if border_is_root[b]:
                        run += 1
                else:
                    number[label] = 1 + starts_before[r] + run
                    run += 1
            final[r, c] = number[label]


def plan(values, band, tile_size, memory_limit_mb, executor):
    """The tiled plan for these options, or None for the in-memory path."""
    return tiling.plan_for(values, band, tile_size, memory_limit_mb, executor,
                           IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL)
