"""The union-find ``find`` shared by the numba kernels."""

from numba import njit


@njit(cache=True, nogil=True)
def find_root(parent, node):
    """Root of ``node``'s set in the forest ``parent``; points every node on
    the way straight at the root (path compression)."""
    root = node
    while parent[root] != root:
        root = parent[root]
    while parent[node] != root:
        following = parent[node]
        parent[node] = root
        node = following
    return root


@njit(cache=True, nogil=True)
def merge_sets(parent, first, second):
    """Join the sets of ``first`` and ``second`` in a forest whose every
    non-root points at a smaller node (so each root is its set's minimum):
    Rem's algorithm with splicing, which climbs both paths at once, stops
    where they meet and points nodes on the way at smaller ones (Patwary,
    Blair & Manne, *Experiments on Union-Find Algorithms for the
    Disjoint-Set Data Structure*, SEA 2010: the fastest of the variants
    they measured).  The forest keeps its invariant."""
    while parent[first] != parent[second]:
        if parent[first] > parent[second]:
            first, second = second, first
        # parent[first] < parent[second]: splice second's path
        if second == parent[second]:
            parent[second] = parent[first]
            return
        following = parent[second]
        parent[second] = parent[first]
        second = following
