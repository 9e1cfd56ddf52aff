"""Rounds 2-4 of the tiled cost distance, per tile: hops over the tight
moves, predecessors and allocation labels read off the final pairs, and
the output blocks."""

import numpy as np
from numba import njit

from ..._common import numba_readable, valid_mask
from .band import _scatter_halo, band_cells
from .budget import PREDECESSOR_UNREACHED

# Below every hops value: the halo ring's hops once a tile's search starts
# (_ring_floor).
HOPS_FLOOR = np.iinfo(np.int64).min


def _on_device(state):
    """Whether ``state`` is a tile state of a run on the GPU (a
    ``_cuda_tiled.DeviceTile``, or a ``HostTile`` spilled from one or
    returned by a Dask worker; the tasks then run there)."""
    return getattr(state, "on_device", False) \
        or getattr(state, "for_device", False)


def _tile_frame(cost_source, window, nodata, state, margin, halo,
                frame_label, frame_flag, frame_known):
    """A tile's (distance, hops, cost) with its ``margin``-wide halo, flat
    (new arrays: ``state`` is only read); the halo's labels go into
    ``frame_label`` and ``frame_flag`` when it has them."""
    rows, cols = window.rows, window.cols
    frame_rows, frame_cols = rows + 2 * margin, cols + 2 * margin
    # every cell is written: the inside here, the ring by _scatter_halo
    frame_distance = np.empty(frame_rows * frame_cols)
    frame_hops = np.empty(frame_rows * frame_cols, np.int64)
    frame_cost = np.empty(frame_rows * frame_cols)
    cost = cost_source.read(window)
    valid = valid_mask(cost, nodata)
    distance, hops = state
    _fill_frame(np.ascontiguousarray(numba_readable(cost)), valid, distance,
                hops, margin, frame_distance, frame_hops, frame_cost)
    label = halo.label if halo.label is not None else np.zeros(0, np.int64)
    flag = halo.flag if halo.flag is not None else np.zeros(0, np.uint8)
    _scatter_halo(rows, cols, margin, halo.distance, halo.hops, halo.cost,
                  label, flag, frame_distance, frame_hops, frame_cost,
                  frame_label, frame_flag, frame_known)
    return frame_distance, frame_hops, frame_cost


@njit(cache=True, nogil=True)
def _fill_frame(cost, valid, distance, hops, margin, frame_distance,
                frame_hops, frame_cost):
    """The inside of a tile's frame in one pass: costs as float64 (0 where
    invalid), distances (-inf where invalid) and hops of the state."""
    rows, cols = cost.shape
    frame_cols = cols + 2 * margin
    for r in range(rows):
        for c in range(cols):
            frame = (r + margin) * frame_cols + c + margin
            k = r * cols + c
            if valid[r, c]:
                frame_cost[frame] = cost[r, c]
                frame_distance[frame] = distance[k]
            else:
                frame_cost[frame] = 0.0
                frame_distance[frame] = -np.inf
            frame_hops[frame] = hops[k]


@njit(cache=True, nogil=True, inline="always")
def _tight(frame_distance, frame_cost, start, end, base, i, frame_cols,
           passed, step_lengths):
    """True when the move from frame cell ``start`` to its neighbour
    ``end`` gives ``end`` its distance exactly (both reached, the move
    allowed).  ``i`` is the offset from ``base`` (one of the two) to the
    other, so the cells a knight's move passes between are ``base +
    passed[i]``."""
    d_start = frame_distance[start]
    d_end = frame_distance[end]
    if not (d_start > -np.inf and d_start < np.inf
            and d_end > -np.inf and d_end < np.inf and d_start <= d_end):
        return False
    if i >= 8 and (
            frame_distance[base + passed[i, 0, 0] * frame_cols
                           + passed[i, 0, 1]] == -np.inf
            or frame_distance[base + passed[i, 1, 0] * frame_cols
                              + passed[i, 1, 1]] == -np.inf):
        return False
    # the search's expression, term for term
    return d_start + (frame_cost[start] + frame_cost[end]) * 0.5 \
        * step_lengths[i] == d_end


@njit(cache=True, nogil=True)
def _solve_hops(frame_distance, frame_hops, frame_cost, rows, cols, margin,
                band_r, band_c, source_local, drow, dcol, passed,
                step_lengths):
    """Least hops of a tile's cells over *tight* moves (those that give the
    end its final distance exactly), from its sources and the hops of the
    halo: a breadth-first distance on the tight graph, so the same in any
    order.  Works on the frame in place; the halo is read only.

    Every move costs one hop, so no heap is needed: the seeds (sources at
    0, band cells lowered by the halo) sorted by their hops are merged
    with a FIFO queue whose values never decrease (a multi-source
    breadth-first search, each cell queued at most once from the queue).
    The binary heap it replaces made a tile's first visit cost as much as
    its Dijkstra solve.  The frame's halo ring is overwritten
    (:func:`_ring_floor`): only the inside is the result.  On a 1024 x
    1024 tile of neuse40's DEM (2-core box) a first visit's search took
    140 ms with a bounds check and a division per cell and (cell, hops)
    in its queue, 30 ms as now, the same hops."""
    frame_cols = cols + 2 * margin
    connectivity = drow.size
    seed_cell = np.empty(source_local.size + band_r.size, np.int64)
    seed_hops = np.empty(source_local.size + band_r.size, np.int64)
    seeds = 0
    for k in range(source_local.size):
        local_row = source_local[k] // cols
        cell = (local_row + margin) * frame_cols \
            + source_local[k] - local_row * cols + margin
        frame_hops[cell] = 0
        seed_cell[seeds] = cell
        seed_hops[seeds] = 0
        seeds += 1
    for b in range(band_r.size):
        row = band_r[b] + margin
        col = band_c[b] + margin
        cell = row * frame_cols + col
        best = frame_hops[cell]
        for i in range(connectivity):
            from_row = row + drow[i]
            from_col = col + dcol[i]
            if margin <= from_row < rows + margin and \
                    margin <= from_col < cols + margin:
                continue  # inside: the search below covers it
            start = from_row * frame_cols + from_col
            if frame_hops[start] < best - 1 and _tight(
                    frame_distance, frame_cost, start, cell, cell, i,
                    frame_cols, passed, step_lengths):
                best = frame_hops[start] + 1
        if best < frame_hops[cell]:
            frame_hops[cell] = best
            seed_cell[seeds] = cell
            seed_hops[seeds] = best
            seeds += 1
    _ring_floor(frame_hops, rows, cols, margin)
    # each move as one step in the flat frame
    step = np.empty(connectivity, np.int64)
    for i in range(connectivity):
        step[i] = drow[i] * frame_cols + dcol[i]
    order = np.argsort(seed_hops[:seeds], kind="mergesort")
    # a cell enters the queue only when its hops drop below a value the
    # queue has not reached yet: at most once per cell of the tile, and
    # never lowered once queued (the values taken from the queue and the
    # seeds never decrease), so its hops are read back from the frame
    queue = np.empty(rows * cols + 1, np.int64)
    head = 0
    tail = 0
    next_seed = 0
    while next_seed < seeds or head < tail:
        if head < tail and (next_seed == seeds or frame_hops[queue[head]]
                            <= seed_hops[order[next_seed]]):
            cell = queue[head]
            key = frame_hops[cell]
            head += 1
        else:
            cell = seed_cell[order[next_seed]]
            key = seed_hops[order[next_seed]]
            next_seed += 1
            if key > frame_hops[cell]:
                continue  # the search reached it with fewer hops
        next_hops = key + 1
        # _tight's test with the start's loads taken once per cell (a
        # reached start: a source or the end of a tight move)
        d_start = frame_distance[cell]
        c_start = frame_cost[cell]
        for i in range(connectivity):
            end = cell + step[i]
            if next_hops >= frame_hops[end]:
                continue  # the halo's ring included: no move ends there
            d_end = frame_distance[end]
            if not (d_end > -np.inf and d_end < np.inf and d_start <= d_end):
                continue
            if i >= 8 and (
                    frame_distance[cell + passed[i, 0, 0] * frame_cols
                                   + passed[i, 0, 1]] == -np.inf
                    or frame_distance[cell + passed[i, 1, 0] * frame_cols
                                      + passed[i, 1, 1]] == -np.inf):
                continue
            # the search's expression, term for term
            if d_start + (c_start + frame_cost[end]) * 0.5 \
                    * step_lengths[i] == d_end:
                frame_hops[end] = next_hops
                queue[tail] = end
                tail += 1


@njit(cache=True, nogil=True)
def _ring_floor(frame_hops, rows, cols, margin):
    """Give the frame's halo ring the least hops value.  Its hops were
    read by the seeding; from then on no move may end there, which the
    search's hops test then says without a bounds check per move or a
    division per cell."""
    frame_cols = cols + 2 * margin
    for r in range(rows + 2 * margin):
        base = r * frame_cols
        if margin <= r < rows + margin:
            for c in range(margin):
                frame_hops[base + c] = HOPS_FLOOR
                frame_hops[base + frame_cols - 1 - c] = HOPS_FLOOR
        else:
            for c in range(frame_cols):
                frame_hops[base + c] = HOPS_FLOOR


def hops_tile(cost_source, window, nodata, state, margin, source_local,
              halo, offsets, passed, step_lengths, backend="cpu"):
    """Phase 2 for one tile, with the distances final: lower its hops from
    ``source_local`` (its sources, on its first visit) and from the hops of
    its :class:`Halo`.  Pure: returns ``(band_hops, state)``, the new hops
    of its band cells and its new state.  ``backend`` "cuda" runs the
    task on the GPU (``_cuda_tiled.hops_tile``: the frame and the state
    stay on the device; same final hops)."""
    if backend == "cuda":
        from .. import _cuda_tiled  # frame and state on the device
        return _cuda_tiled.hops_tile(cost_source, window, nodata, state,
                                     margin, source_local, halo, offsets,
                                     passed, step_lengths)
    rows, cols = window.rows, window.cols
    frame_cols = cols + 2 * margin
    n = (rows + 2 * margin) * frame_cols
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, halo,
        np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(n, np.bool_))
    band_r, band_c = band_cells(rows, cols, margin)
    _solve_hops(frame_distance, frame_hops, frame_cost, rows, cols, margin,
                band_r, band_c, source_local,
                np.ascontiguousarray(offsets[:, 0]),
                np.ascontiguousarray(offsets[:, 1]), passed, step_lengths)
    hops = np.ascontiguousarray(frame_hops.reshape(
        rows + 2 * margin, frame_cols)[margin:margin + rows,
                                       margin:margin + cols]).reshape(-1)
    return hops[band_r * cols + band_c], (state[0], hops)


def tile_trees(cost_source, window, nodata, state, margin, source_local,
               source_ids, halo, offsets, passed, step_lengths, labels=True,
               use_hops=True):
    """Predecessor codes and allocation labels of one tile.  Pure.

    With a :class:`Halo` of label mode 1 the halo cells are labelled with
    their own band index (flag 1), so a cell whose tree leaves the tile
    gets the index of the band cell it leaves through; with mode 2 with
    the resolved band labels.  Returns (predecessor, label, flag, ties),
    each but ``ties`` rows x cols; without ``labels`` (one source id: the
    allocation needs no tree walked) and a halo without labels, label and
    flag are None.

    Without ``use_hops`` (the hops phase not run: only the sources' hops 0
    are read) the trees are canonical where no cell has two tight
    neighbours; ``ties`` counts the tile's cells that have (0 with
    ``use_hops``: every tree canonical).  With ties the trees are not
    walked (label and flag None): the predecessors read without the hops
    may then form a cycle (tight moves of zero cost both ways).
    """
    from .._cpu import canonical_predecessors, walk_to_roots
    # a halo with labels is scattered into the label frames: walk them
    labels = labels or halo.label is not None
    rows, cols = window.rows, window.cols
    frame_rows, frame_cols = rows + 2 * margin, cols + 2 * margin
    n = frame_rows * frame_cols
    inner = (slice(margin, margin + rows), slice(margin, margin + cols))
    frame_label = np.zeros(n if labels else 0, np.int64)
    frame_flag = np.zeros(n if labels else 0, np.uint8)
    frame_known = np.zeros(n, np.bool_)
    frame_distance, frame_hops, frame_cost = _tile_frame(
        cost_source, window, nodata, state, margin, halo, frame_label,
        frame_flag, frame_known)
    predecessor = np.full(n, -1, np.int8)
    drow = np.ascontiguousarray(offsets[:, 0])
    dcol = np.ascontiguousarray(offsets[:, 1])
    ties = canonical_predecessors(frame_distance, frame_hops, frame_cost,
                                  frame_rows, frame_cols, margin,
                                  margin + rows, margin, margin + cols, drow,
                                  dcol, np.ascontiguousarray(passed[:, 0, 0]),
                                  np.ascontiguousarray(passed[:, 0, 1]),
                                  np.ascontiguousarray(passed[:, 1, 0]),
                                  np.ascontiguousarray(passed[:, 1, 1]),
                                  step_lengths, predecessor, use_hops)
    ties = 0 if use_hops else int(ties)
    shape = (frame_rows, frame_cols)
    if not labels or ties:
        return predecessor.reshape(shape)[inner], None, None, ties
    if source_local.size:
        local_rows, local_cols = np.divmod(source_local, cols)
        framed = (local_rows + margin) * frame_cols + local_cols + margin
        # the first listing written last wins
        frame_label[framed[::-1]] = source_ids[::-1]
        frame_flag[framed] = 0
        frame_known[framed] = True
    walk_to_roots(predecessor, frame_cols, drow, dcol, frame_label,
                  frame_flag, frame_known)
    return (predecessor.reshape(shape)[inner],
            frame_label.reshape(shape)[inner],
            frame_flag.reshape(shape)[inner], ties)


@njit(cache=True, nogil=True)
def _resolve_band_labels(label, flag):
    """Follow band-index labels (flag 1) to the id they lead to, in
    place.  Paths end at an id: each step moves to a strictly smaller
    (cost, hops) pair."""
    for start in range(label.shape[0]):
        if flag[start] != 1:
            continue
        cell = start
        while flag[cell] == 1:
            cell = label[cell]
        root = label[cell]
        cell = start
        while flag[cell] == 1:
            following = label[cell]
            label[cell] = root
            flag[cell] = 0
            cell = following


def tile_band_labels(cost_source, window, nodata, state, margin,
                     source_local, source_ids, halo, offsets, passed,
                     step_lengths, use_hops=True):
    """The label pass's task for one tile (several source ids): for each
    band cell, its source id (flag 0) or the band index its tree leaves
    the tile through (flag 1), from :func:`tile_trees` with a label-mode-1
    halo.  Returns ``(band_label, band_flag, ties)``; ``use_hops`` and
    ``ties`` as there (on the GPU: ``_cuda_tiled.tile_band_labels``)."""
    if _on_device(state):
        from .. import _cuda_tiled
        return _cuda_tiled.tile_band_labels(
            cost_source, window, nodata, state, margin, source_local,
            source_ids, halo, offsets, passed, step_lengths, use_hops)
    _, label, flag, ties = tile_trees(
        cost_source, window, nodata, state, margin, source_local, source_ids,
        halo, offsets, passed, step_lengths, use_hops=use_hops)
    band_r, band_c = band_cells(window.rows, window.cols, margin)
    if ties:  # labelled again with the hops
        return (np.zeros(band_r.size, np.int64),
                np.zeros(band_r.size, np.uint8), ties)
    return label[band_r, band_c], flag[band_r, band_c], ties


def tile_outputs(cost_source, window, nodata, state, margin, source_local,
                 source_ids, halo, offsets, passed, step_lengths, outputs,
                 single_id, use_hops=True):
    """The output pass's task for one tile: ``(blocks, ties)``, its blocks
    of ``outputs`` (accumulated cost, GRASS direction, allocation) as a
    dict and, without ``use_hops``, its cells whose direction needs the
    hops (:func:`tile_trees`); with ties the blocks are None (made once
    the hops are known).

    ``halo`` is None when no tree is read (no direction wanted, and no
    allocation or one source id); ``single_id`` is the allocation of every
    reached cell when there is only one source id (else the halo holds the
    resolved labels)."""
    if _on_device(state):
        from .. import _cuda_tiled
        return _cuda_tiled.tile_outputs(
            cost_source, window, nodata, state, margin, source_local,
            source_ids, halo, offsets, passed, step_lengths, outputs,
            single_id, use_hops=use_hops)
    from .. import GRASS_DIRECTION_DEGREES
    from .._cpu import directions_in_degrees
    shape = (window.rows, window.cols)
    distance = state[0].reshape(shape)
    if halo is None:
        reached = np.isfinite(distance)  # -inf on barriers, +inf unreached
        blocks = {}
        if "accumulated" in outputs:
            blocks["accumulated"] = np.where(reached, distance, np.nan)
        if "allocation" in outputs:
            blocks["allocation"] = np.where(reached, single_id, 0)
        return blocks, 0
    predecessor, label, _, ties = tile_trees(
        cost_source, window, nodata, state, margin, source_local, source_ids,
        halo, offsets, passed, step_lengths, labels=single_id is None,
        use_hops=use_hops)
    if ties:
        return None, ties
    predecessor = np.ascontiguousarray(predecessor)
    # NaN where unreached, 0 at sources, as the in-memory path's
    direction = directions_in_degrees(predecessor, GRASS_DIRECTION_DEGREES)
    unreached = predecessor == PREDECESSOR_UNREACHED
    blocks = {"accumulated": np.where(unreached, np.nan, distance),
              "direction": direction,
              "allocation": np.where(unreached, 0, single_id
                                     if single_id is not None else label)}
    return {name: blocks[name] for name in outputs}, ties


def write_outputs(sinks, cost_source, window, *arguments, use_hops=True):
    """:func:`tile_outputs`'s blocks written to their ``sinks`` (a dict by
    output name) in the task; returns only the tile's tie count so no
    block travels back (with ties nothing is written).  A tile state on
    the GPU is written by ``_cuda_tiled.write_outputs``."""
    if _on_device(arguments[1]):
        from .. import _cuda_tiled  # blocks computed on the device
        return _cuda_tiled.write_outputs(sinks, cost_source, window,
                                         *arguments, use_hops=use_hops)
    blocks, ties = tile_outputs(cost_source, window, *arguments,
                                use_hops=use_hops)
    if blocks is not None:
        for name, sink in sinks.items():
            sink.write(window, blocks[name])
    return ties
