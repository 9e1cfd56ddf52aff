"""An independent reference of cost distance's tie rule, in plain Python.

Every backend and tile size must give the same direction and allocation
rasters, also where two least-cost paths cost exactly the same.  The rule
(gridgraph.core.costdistance): each reached cell has the least pair
(accumulated cost, steps) over all paths from a source, compared cost
first; its predecessor is the allowed neighbour n minimising
(d[n] + step(n, c), steps[n], index of the offset from c to n); its
allocation is the id of the source at the root (a cell listed twice as a
source keeps its first id).

This module computes that by Bellman-Ford iteration, costs first and then
steps with the costs final (slow, obviously correct), and shares no code or
tables with the engine.
"""

import math

import numpy as np

ROOK = [(0, 1), (-1, 0), (0, -1), (1, 0)]
QUEEN = ROOK + [(-1, 1), (-1, -1), (1, -1), (1, 1)]
KNIGHT = QUEEN + [(-1, 2), (-2, 1), (-2, -1), (-1, -2),
                  (1, -2), (2, -1), (2, 1), (1, 2)]
MOVES = {4: ROOK, 8: QUEEN, 16: KNIGHT}


def _passed(dr, dc):
    """The two cells a knight's move passes between (None for a step)."""
    if abs(dr) + abs(dc) != 3:
        return None
    if abs(dr) == 1:
        return (0, dc // 2), (dr, dc // 2)
    return (dr // 2, 0), (dr // 2, dc)


def reference(cost, valid, sources, connectivity, max_cost=math.inf):
    """(accumulated, predecessor code, allocation) by the rule above.

    The pair is the fixed point of
    ``(d, h)[c] = min over neighbours n of (d[n] + step(n, c), h[n] + 1)``:
    d the least accumulated cost, h the least steps over the neighbours
    that give it exactly.

    ``sources`` is a list of (row, col, id); ``cost`` is read as float64.
    Predecessor codes: index into the move list, -2 source, -1 unreached.
    """
    rows, cols = cost.shape
    cost = np.asarray(cost, dtype=np.float64)
    moves = MOVES[connectivity]
    inf = (math.inf, math.inf)
    pair = [[inf] * cols for _ in range(rows)]
    source_id = {}
    for r, c, ident in sources:
        source_id.setdefault((r, c), ident)
        pair[r][c] = (0.0, 0)

    def allowed(r, c, dr, dc):
        nr, nc = r + dr, c + dc
        if not (0 <= nr < rows and 0 <= nc < cols) or not valid[nr, nc]:
            return False
        passed = _passed(dr, dc)
        if passed is None:
            return True
        return all(valid[r + pr, c + pc] for pr, pc in passed)

    def step(r, c, dr, dc, d):
        """The accumulated cost at (r, c) reached from (r+dr, c+dc)."""
        return d + (cost[r + dr, c + dc] + cost[r, c]) * 0.5 \
            * math.hypot(dr, dc)

    # 1. distances (Bellman-Ford on costs alone: their least fixed point)
    changed = True
    while changed:
        changed = False
        for r in range(rows):
            for c in range(cols):
                if not valid[r, c] or (r, c) in source_id:
                    continue
                best = pair[r][c][0]
                for dr, dc in moves:
                    if allowed(r, c, dr, dc) and pair[r + dr][c + dc][0] \
                            < math.inf:
                        candidate = step(r, c, dr, dc, pair[r + dr][c + dc][0])
                        if candidate <= max_cost and candidate < best:
                            best = candidate
                if best < pair[r][c][0]:
                    pair[r][c] = (best, math.inf)
                    changed = True
    # 2. steps with the costs final: the least over the neighbours that
    # give a cell its cost exactly.  (Relaxing pairs in one pass could keep
    # a step count taken from a neighbour's cost before it was final, when
    # both round to the same sum.)
    changed = True
    while changed:
        changed = False
        for r in range(rows):
            for c in range(cols):
                d, h = pair[r][c]
                if d == math.inf or h == 0:
                    continue
                for dr, dc in moves:
                    if not allowed(r, c, dr, dc):
                        continue
                    nd, nh = pair[r + dr][c + dc]
                    if nd < math.inf and nh + 1 < h and \
                            step(r, c, dr, dc, nd) == d:
                        h = nh + 1
                if h < pair[r][c][1]:
                    pair[r][c] = (d, h)
                    changed = True

    accumulated = np.full((rows, cols), np.nan)
    predecessor = np.full((rows, cols), -1, dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            d, h = pair[r][c]
            if d == math.inf:
                continue
            accumulated[r, c] = d
            if h == 0:
                predecessor[r, c] = -2
                continue
            best = None
            for i, (dr, dc) in enumerate(moves):
                if not allowed(r, c, dr, dc):
                    continue
                nd, nh = pair[r + dr][c + dc]
                if nd == math.inf:
                    continue
                key = (step(r, c, dr, dc, nd), nh, i)
                if best is None or key < best:
                    best = key
            predecessor[r, c] = best[2]
    allocation = np.zeros((rows, cols), dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            if predecessor[r, c] == -1:
                continue
            cr, cc = r, c
            while predecessor[cr, cc] != -2:
                dr, dc = moves[predecessor[cr, cc]]
                cr, cc = cr + dr, cc + dc
            allocation[r, c] = source_id[(cr, cc)]
    return accumulated, predecessor, allocation
