"""Minimum spanning forest on the block hierarchy (out-of-core).

Haverkort's I/O-efficient grid MST (references in docs/architecture.md):

1. Leaf tiles (:func:`leaf_tile`, per tile): the in-memory kernel gives the
   tile's minimum spanning forest (MSF), kept in the scratch folder.  The
   forest is then *compressed* against the tile's boundary (the cells with
   a neighbour in another tile): dead ends -- branches with no boundary
   cell -- are dropped (Observation 3: they belong to the final forest),
   and every path whose inner vertices are non-boundary cells of degree 2 is
   replaced by one edge keyed by the path's heaviest edge (Observation 4).
   What remains has O(tile side) edges.
2. Levels (:func:`merge_hierarchy`): a block of 2 x 2 children takes their
   compressed graphs plus the separator edges between them (original grid
   edges, found from the tiles' border lines), computes their MSF
   (Kruskal; Observation 2) and compresses it against its own boundary, up
   to the block covering the raster.
3. Expansion.  Every edge is keyed by (weight, low, high) of an original
   edge -- for a contracted path, of its heaviest original edge -- so an
   edge left out of some level's MSF removes exactly that one original
   edge from the final forest, and everything else stays (a kept path keeps
   all its edges, a dropped path all but its heaviest).  The final forest
   is therefore the union of the tile forests and the separator edges,
   minus the set of removed original edges; no per-level records are
   needed to expand.  Per tile the final forest is rebuilt from scratch,
   its pieces are rooted so that every cell points toward its tree's
   lowest-index cell (the piece tree across tiles is solved in memory),
   and the edges are written as sorted runs that a k-way merge turns into
   the (weight, low, high)-ordered edge list.  Without an edge list
   (``edges=False``) a tile keeps its forest as one byte per cell, and
   round 3 only counts and sums its final edges: the total is an exact
   sum (``_cpu.sum_parts``), so the order of the tiles does not matter.

Tile tasks run through ``tiling.run_tasks``: in threads when an executor is
given (the kernels release the GIL).  With the CUDA backend one GPU solve
runs at a time (``_GPU_LOCK``) while the other threads do the CPU work
around it.

Edge keys: ``edge_id = low * 4 + rank`` (rank 0 right, 1 down-left, 2 down,
3 down-right), as in the in-memory kernel; (weight, edge_id) orders as
(weight, low, high), NaN weights last.

The rounds, one module each: :mod:`.leaf` (round 1), :mod:`.hierarchy`
(round 2), :mod:`.expand` (round 3), :mod:`.merge_runs` and
:mod:`.edge_list` (round 4), with :mod:`.forest` (edge keys, compression,
the per-cell bitmask) and :mod:`.budget` (memory shares, progress spans);
:mod:`.driver` runs them top to bottom.
"""

from .budget import (IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL,  # noqa: F401
                     plan)
from .driver import minimum_spanning_tree_tiled, warm_up  # noqa: F401
from .expand import PiecesMessage, tile_finish, tile_pieces  # noqa: F401
from .forest import Graph, _compress  # noqa: F401
from .hierarchy import merge_block, merge_hierarchy  # noqa: F401
from .leaf import LeafMessage, leaf_tile  # noqa: F401
