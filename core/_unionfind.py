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
