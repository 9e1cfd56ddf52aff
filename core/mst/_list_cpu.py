"""Borůvka rounds on the list of edges between components (the CPU MST
after round 1 on the grid, ``_cpu``): per component the lightest edge,
hooking, and the list contracted to the edges that still cross, until none
is left.

``_cpu._PARALLEL_MIN_CELLS`` and ``_cpu._LIST_LABEL_RANGES`` are read from
``_cpu`` when called (tests and benchmarks change them there).
"""

import numba
import numpy as np
from numba import njit, prange

from . import _cpu
from ._cpu import _find_root, _lighter, _next_run


@njit(cache=True, nogil=True, parallel=True)
def _list_lightest(end_a, end_b, weight, edge_id, best, best_weight, best_id):
    """Per component, the lightest of its edges in the list.

    The list is cut into ``best.shape[0]`` chunks scanned in parallel, each
    into its own row of ``best*`` (index, weight, id of the best edge, index
    -1 for none); row 0 then holds the result.  Each scan reads the edge
    list once, in order, and keeps the weight and id next to the index.
    """
    n_chunks, m = best.shape
    n_edges = end_a.size
    for t in prange(n_chunks):
        for c in range(m):
            best[t, c] = -1
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            w = weight[i]
            e = edge_id[i]
            a = end_a[i]
            b = end_b[i]
            if best[t, a] < 0 or _lighter(w, e, best_weight[t, a],
                                          best_id[t, a]):
                best[t, a] = i
                best_weight[t, a] = w
                best_id[t, a] = e
            if best[t, b] < 0 or _lighter(w, e, best_weight[t, b],
                                          best_id[t, b]):
                best[t, b] = i
                best_weight[t, b] = w
                best_id[t, b] = e
    for c in prange(m):
        for t in range(1, n_chunks):
            j = best[t, c]
            if j >= 0 and (best[0, c] < 0 or _lighter(
                    best_weight[t, c], best_id[t, c], best_weight[0, c],
                    best_id[0, c])):
                best[0, c] = j
                best_weight[0, c] = best_weight[t, c]
                best_id[0, c] = best_id[t, c]


@njit(cache=True, nogil=True, parallel=True)
def _chunk_label_ranges(end_a, end_b, ranges):
    """ranges[t] = (least, greatest) component of chunk t's edges
    ((n_edges, -1) for an empty chunk)."""
    n_chunks = ranges.shape[0]
    n_edges = end_a.size
    for t in prange(n_chunks):
        least = np.int64(n_edges) + (1 << 40)
        greatest = np.int64(-1)
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            least = min(least, np.int64(min(end_a[i], end_b[i])))
            greatest = max(greatest, np.int64(max(end_a[i], end_b[i])))
        ranges[t, 0] = least
        ranges[t, 1] = greatest


@njit(cache=True, nogil=True, parallel=True)
def _list_lightest_ranges(end_a, end_b, weight, edge_id, ranges, offsets,
                          part, part_weight, part_id, best, best_weight,
                          best_id):
    """:func:`_list_lightest` with each chunk's scratch only as long as the
    range of components its edges touch (``ranges``; entries from
    ``offsets[t]`` in ``part*``): components are labelled in scan order
    of their roots and the list in scan order of its cells, so a chunk of
    rows touches a narrow range.  The result goes to ``best*`` (size m)."""
    n_chunks = ranges.shape[0]
    n_edges = end_a.size
    m = best.size
    for t in prange(n_chunks):
        base = offsets[t] - ranges[t, 0]
        for k in range(offsets[t], offsets[t + 1]):
            part[k] = -1
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            w = weight[i]
            e = edge_id[i]
            a = base + end_a[i]
            b = base + end_b[i]
            if part[a] < 0 or _lighter(w, e, part_weight[a], part_id[a]):
                part[a] = i
                part_weight[a] = w
                part_id[a] = e
            if part[b] < 0 or _lighter(w, e, part_weight[b], part_id[b]):
                part[b] = i
                part_weight[b] = w
                part_id[b] = e
    for c in prange(m):
        best[c] = -1
        for t in range(n_chunks):
            if c < ranges[t, 0] or c > ranges[t, 1]:
                continue
            k = offsets[t] + c - ranges[t, 0]
            j = part[k]
            if j >= 0 and (best[c] < 0 or _lighter(
                    part_weight[k], part_id[k], best_weight[c], best_id[c])):
                best[c] = j
                best_weight[c] = part_weight[k]
                best_id[c] = part_id[k]


def _lightest_by_ranges(current, m, n_chunks):
    """Per component of the list ``current`` (end_a, end_b, weight,
    edge_id), the index, weight and id of its lightest edge (-1: none)."""
    end_a, end_b, weight, edge_id = current
    ranges = np.empty((n_chunks, 2), dtype=np.int64)
    _chunk_label_ranges(end_a, end_b, ranges)
    offsets = np.zeros(n_chunks + 1, dtype=np.int64)
    np.cumsum(np.maximum(ranges[:, 1] - ranges[:, 0] + 1, 0),
              out=offsets[1:])
    size = int(offsets[-1])
    part = np.empty(size, dtype=np.int64)
    part_weight = np.empty(size, dtype=weight.dtype)
    part_id = np.empty(size, dtype=np.int64)
    best = np.empty(m, dtype=np.int64)
    best_weight = np.empty(m, dtype=weight.dtype)
    best_id = np.empty(m, dtype=np.int64)
    _list_lightest_ranges(end_a, end_b, weight, edge_id, ranges, offsets,
                          part, part_weight, part_id, best, best_weight,
                          best_id)
    return best, best_weight, best_id


@njit(cache=True, nogil=True, parallel=True)
def _list_hook(end_a, end_b, best, best_weight, best_id, parent,
               chosen_edge, chosen_weight, n_chosen, chunk_offsets):
    """Borůvka hooking of the m components of the list (as in
    :func:`_hook_cells`): appends the tree edges found to ``chosen_*`` (in
    component order) and leaves each component's root in ``parent``.
    Returns the new n_chosen.  ``chunk_offsets`` (chunks + 1) is scratch.

    Every loop runs in parallel.  Breaking a mutual pair writes only the
    lower entry, which no other entry's test reads to a different end: an
    entry c reads ``parent[p]`` only for p > c, and the higher entry of a
    pair is never written.  Root finding compresses paths concurrently
    (safe, see :func:`_find_root`).
    """
    m = parent.size
    n_chunks = chunk_offsets.size - 1
    for c in prange(m):
        j = best[c]
        if j < 0:
            parent[c] = c
        else:
            parent[c] = end_b[j] if end_a[j] == c else end_a[j]
    for c in prange(m):
        p = parent[c]
        if p > c and parent[p] == c:
            parent[c] = c
    for t in prange(n_chunks):
        hooked = 0
        for c in range(m * t // n_chunks, m * (t + 1) // n_chunks):
            if parent[c] != c:
                hooked += 1
        chunk_offsets[t + 1] = hooked
    chunk_offsets[0] = n_chosen
    for t in range(n_chunks):
        chunk_offsets[t + 1] += chunk_offsets[t]
    for t in prange(n_chunks):
        j = chunk_offsets[t]
        for c in range(m * t // n_chunks, m * (t + 1) // n_chunks):
            if parent[c] != c:
                chosen_edge[j] = best_id[c]
                chosen_weight[j] = best_weight[c]
                j += 1
    for c in prange(m):
        _find_root(parent, np.int64(c) + 0)  # a copy: the walk moves it
    return chunk_offsets[n_chunks]


@njit(cache=True, nogil=True, parallel=True)
def _list_contract(end_a, end_b, weight, edge_id, parent, new_label,
                   chunk_offsets, out_a, out_b, out_weight, out_id):
    """Drop the edges inside a component and relabel the others.

    Surviving roots (those with an edge left) get compact labels in root
    order; the kept edges go, in list order, to the ``out_*`` arrays, one
    per run of consecutive edges between the same two components (see
    :func:`_next_run`).
    ``new_label`` (size m) and ``chunk_offsets`` (chunks + 1) are scratch.
    Returns (edges kept, new component count).
    """
    n_chunks = chunk_offsets.size - 1
    n_edges = end_a.size
    m = parent.size
    for c in prange(m):
        new_label[c] = 0
    for t in prange(n_chunks):
        kept = 0
        last_low = np.int64(-1)
        last_high = np.int64(-1)
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            a = parent[end_a[i]]
            b = parent[end_b[i]]
            if a != b:
                # every writer stores the same value
                new_label[a] = 1
                new_label[b] = 1
                new_run, last_low, last_high = _next_run(a, b, last_low,
                                                         last_high)
                if new_run:
                    kept += 1
        chunk_offsets[t + 1] = kept
    # compact labels in root order: counts per chunk of roots, then ranks
    label_offsets = np.zeros(n_chunks + 1, dtype=np.int64)
    for t in prange(n_chunks):
        count = 0
        for c in range(m * t // n_chunks, m * (t + 1) // n_chunks):
            count += new_label[c]
        label_offsets[t + 1] = count
    for t in range(n_chunks):
        label_offsets[t + 1] += label_offsets[t]
    for t in prange(n_chunks):
        label = label_offsets[t]
        for c in range(m * t // n_chunks, m * (t + 1) // n_chunks):
            if new_label[c] != 0:
                new_label[c] = label
                label += 1
    m_new = label_offsets[n_chunks]
    chunk_offsets[0] = 0
    for t in range(n_chunks):
        chunk_offsets[t + 1] += chunk_offsets[t]
    for t in prange(n_chunks):
        j = chunk_offsets[t]
        last_low = np.int64(-1)
        last_high = np.int64(-1)
        for i in range(n_edges * t // n_chunks, n_edges * (t + 1) // n_chunks):
            a = parent[end_a[i]]
            b = parent[end_b[i]]
            if a == b:
                continue
            new_run, last_low, last_high = _next_run(a, b, last_low,
                                                     last_high)
            if new_run:
                j += 1
            elif not _lighter(weight[i], edge_id[i], out_weight[j - 1],
                              out_id[j - 1]):
                continue
            out_a[j - 1] = new_label[a]
            out_b[j - 1] = new_label[b]
            out_weight[j - 1] = weight[i]
            out_id[j - 1] = edge_id[i]
    return chunk_offsets[n_chunks], m_new


def _list_rounds(end_a, end_b, weight, edge_id, spare, m, chosen_edge,
                 chosen_weight, n_chosen, progress):
    """Borůvka rounds on the list of edges between m components until no
    edge is left; appends the tree edges to ``chosen_*`` and returns the
    new n_chosen.  The lists alternate with ``spare``, a second set of
    buffers of the same sizes."""
    n_edges = end_a.size
    first_edges = max(n_edges, 1)
    while n_edges > 0:
        current = (end_a[:n_edges], end_b[:n_edges], weight[:n_edges],
                   edge_id[:n_edges])
        with _cpu._threads_for(n_edges):
            n_chunks = max(1, min(numba.get_num_threads(),
                                  n_edges // _cpu._PARALLEL_MIN_CELLS))
            if _cpu._LIST_LABEL_RANGES:
                best, best_weight, best_id = _lightest_by_ranges(
                    current, m, n_chunks)
            else:
                best = np.empty((n_chunks, m), dtype=np.int64)
                best_weight = np.empty((n_chunks, m), dtype=weight.dtype)
                best_id = np.empty((n_chunks, m), dtype=np.int64)
                _list_lightest(*current, best, best_weight, best_id)
                best, best_weight, best_id = best[0], best_weight[0], \
                    best_id[0]
            parent = np.empty(m, dtype=np.int64)
            n_chosen = _list_hook(current[0], current[1], best,
                                  best_weight, best_id, parent,
                                  chosen_edge, chosen_weight, n_chosen,
                                  np.zeros(n_chunks + 1, dtype=np.int64))
            del best, best_weight, best_id
            n_edges, m = _list_contract(
                *current, parent, np.empty(m, dtype=np.int64),
                np.zeros(n_chunks + 1, dtype=np.int64), *spare)
        (end_a, end_b, weight, edge_id), spare = spare, (end_a, end_b,
                                                         weight, edge_id)
        # the list shrinks by a factor per round: report its share done
        progress(1.0 - n_edges / first_edges)
    return n_chosen
