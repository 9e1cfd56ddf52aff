"""An independent reference of cost distance's tie rule, in plain Python.

Every backend and tile size must give the same direction and allocation
rasters, also where two least-cost paths cost exactly the same.  The rule
(gridgraph.core.costdistance): each reached cell has the least pair
(accumulated cost, steps) over all paths from a source, compared cost
first; its predecessor is the allowed neighbour n minimising
(d[n] + step(n, c), steps[n], index of the offset from c to n); its
allocation is the id of the source at the root (a cell listed twice as a
source keeps its first id).

This module computes that by Bellman-Ford iteration on the pairs (slow,
obviously correct) and shares no code or tables with the engine.
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

    changed = True
    while changed:
        changed = False
        for r in range(rows):
            for c in range(cols):
                if not valid[r, c] or (r, c) in source_id:
                    continue
                best = pair[r][c]
                for dr, dc in moves:
                    if not allowed(r, c, dr, dc):
                        continue
                    d, h = pair[r + dr][c + dc]
                    if d == math.inf:
                        continue
                    step = math.hypot(dr, dc)
                    candidate = d + (cost[r + dr, c + dc] + cost[r, c]) \
                        * 0.5 * step
                    if candidate <= max_cost and (candidate, h + 1) < best:
                        best = (candidate, h + 1)
                if best < pair[r][c]:
                    pair[r][c] = best
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
                candidate = nd + (cost[r + dr, c + dc] + cost[r, c]) \
                    * 0.5 * math.hypot(dr, dc)
                key = (candidate, nh, i)
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
