"""The tiled MST's memory budget, progress spans and plan."""

from ... import tiling

# A leaf tile: values and valid mask (5), the kernel's working set (about
# 60 bytes per cell: lightest edges, components, cut edges, chosen edges),
# the local edge ids, the forest's bitmask and the typed values (~15), and
# slack for the kernel's sort.
TILE_BYTES_PER_CELL = 96
# The in-memory run: the kernel's working set plus the sorted edge list
# (20 per edge) and the parent-direction pass (adjacency and BFS, 40).
IN_MEMORY_BYTES_PER_CELL = 130
# Shares of the memory budget: a tile's working set (the tile share of
# :func:`gridgraph.core.tiling.plan_for`), and the forests and sorted runs
# kept in memory (past it they spill to the scratch folder); the final
# k-way merge's buffers come after the tiles.
TILE_SHARE = 0.4
STORE_SHARE = 0.3
MERGE_SHARE = 0.3
# Progress spans of the rounds (the edge list's merge takes the rest).
LEAF_SPAN = (0.0, 0.5)
HIERARCHY_SPAN = (0.5, 0.6)
PIECES_SPAN = (0.6, 0.7)
FINISH_SPAN = (0.7, 0.85)


def plan(values, band, tile_size, memory_limit_mb, executor):
    """The tiled plan for these options, or None for the in-memory path."""
    return tiling.plan_for(values, band, tile_size, memory_limit_mb, executor,
                           IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL,
                           tile_share=TILE_SHARE)
