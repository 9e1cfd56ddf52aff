"""The patch graph: spanning forest, components and connectivity indices.

The graph is small next to the raster (one vertex per habitat patch, about
three links per patch in the minimum planar graph), so plain numpy and numba
kernels over a CSR adjacency do it; no graph library is needed.

Indices (Pascual-Hortal & Saura 2006; Saura & Pascual-Hortal 2007), with
a_i the patch areas and A_L the landscape area::

    IIC = sum_i sum_j a_i a_j / (1 + nl_ij) / A_L**2
    PC  = sum_i sum_j a_i a_j p*_ij        / A_L**2

nl_ij is the number of links on the path from i to j with the fewest links
(the pair adds nothing when j cannot be reached; nl_ii = 0), p*_ij the
largest product of link probabilities p = exp(-theta * cost) over the paths
from i to j (p*_ii = 1).  Because -log p = theta * cost, p*_ij is
exp(-theta * D_ij) with D_ij the least sum of link costs: one Dijkstra per
patch over the link costs (over link counts, each link weighing 1, for
IIC; :func:`._importance.rows`).  exp(-x) is exactly 0.0 in float64 once
x > MAX_EXPONENT, so each Dijkstra stops there without changing a bit.

A patch's importance dI_k = 100 * (I - I_k) / I, I_k the index of the
landscape without patch k (its area and its links removed, A_L unchanged).
Only pairs inside k's graph component change; :mod:`._importance` finds
the pairs whose distance grows from each source's shortest-path tree.
"""

import numpy as np
from numba import njit

from .._unionfind import find_root
from . import _importance

# exp(-x) rounds to 0.0 in float64 for every x above this (the smallest
# subnormal is 2**-1074, exp(-745.14) < 2**-1075).
MAX_EXPONENT = 745.2


def spanning_forest(count, from_id, to_id, cost):
    """Mask of the links in the minimum spanning forest of the patch graph.

    Kruskal's algorithm on the links sorted by (cost, lower id, higher id):
    a total order, so the forest is unique, as the raster MST's.
    """
    order = np.lexsort((to_id, from_id, cost))
    return _kruskal(count, from_id.astype(np.int64), to_id.astype(np.int64),
                    order.astype(np.int64))


@njit(cache=True, nogil=True)
def _kruskal(count, from_id, to_id, order):
    parent = np.arange(count + 1, dtype=np.int64)
    in_forest = np.zeros(from_id.size, dtype=np.bool_)
    for k in order:
        a = find_root(parent, from_id[k])
        b = find_root(parent, to_id[k])
        if a != b:
            # the lower root stays root: the result does not depend on it,
            # but a fixed rule keeps the trees the same run to run
            if a < b:
                parent[b] = a
            else:
                parent[a] = b
            in_forest[k] = True
    return in_forest


def graph_components(count, from_id, to_id, keep):
    """Component of each patch (1..c, numbered in order of each component's
    lowest patch id) in the graph of the links where ``keep`` is True, and c."""
    return _components(count, from_id.astype(np.int64),
                       to_id.astype(np.int64), keep.astype(np.bool_))


@njit(cache=True, nogil=True)
def _components(count, from_id, to_id, keep):
    parent = np.arange(count + 1, dtype=np.int64)
    for k in range(from_id.size):
        if keep[k]:
            a = find_root(parent, from_id[k])
            b = find_root(parent, to_id[k])
            if a != b:
                parent[max(a, b)] = min(a, b)
    number = np.zeros(count + 1, dtype=np.int64)
    component = np.zeros(count, dtype=np.int64)
    components = 0
    for patch in range(1, count + 1):
        root = find_root(parent, patch)
        if number[root] == 0:
            components += 1
            number[root] = components
        component[patch - 1] = number[root]
    return component, components


def adjacency(count, from_id, to_id, weight):
    """CSR adjacency (offsets, neighbours, weights) over patches 0..count-1
    of the undirected links (ids 1..count); neighbours in ascending order."""
    a = np.concatenate([from_id, to_id]).astype(np.int64) - 1
    b = np.concatenate([to_id, from_id]).astype(np.int64) - 1
    w = np.concatenate([weight, weight]).astype(np.float64)
    order = np.lexsort((b, a))
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=count), out=offsets[1:])
    return offsets, b[order], w[order]


# ------------------------------------------------------------- the indices


def connectivity_index(kind, count, from_id, to_id, cost, area,
                       landscape_area, theta=None, importance=True):
    """IIC (``kind`` "iic", over the given links) or PC ("pc", with kernel
    exp(-theta * cost)) and, with ``importance``, each patch's dI in percent.

    Returns (index, d_index or None).  Sums run in a fixed order (per
    source row, rows added in patch order), so results do not depend on the
    number of threads.
    """
    area = np.asarray(area, dtype=np.float64)
    offsets, neighbours, weight = adjacency(count, from_id, to_id, cost)
    if kind == "iic":  # link counts: every link weighs 1
        weight = np.ones_like(weight)
        limit = np.inf
    else:
        limit = MAX_EXPONENT / theta
    rows = _importance.rows(offsets, neighbours, weight, area, kind == "pc",
                            theta or 0.0, limit)
    numerator = _ordered_sum(rows)
    index = numerator / landscape_area ** 2
    if not importance:
        return index, None
    component, components = graph_components(count, from_id, to_id,
                                             np.ones(len(from_id), bool))
    d_index = np.zeros(count)
    order = np.argsort(component, kind="stable")
    bounds = np.searchsorted(component[order], np.arange(1, components + 2))
    for c in range(components):
        members = order[bounds[c]:bounds[c + 1]].astype(np.int64)
        mask = np.zeros(count, dtype=np.bool_)
        mask[members] = True
        loss = _importance.removal_loss(members, offsets, neighbours, weight,
                                        area, mask, kind == "pc",
                                        theta or 0.0, limit)
        d_index[members] = 100.0 * (rows[members] + loss) / numerator
    return index, d_index


@njit(cache=True, nogil=True)
def _ordered_sum(values):
    total = 0.0
    for v in values:
        total += v
    return total
