"""The tiled cost distance's memory figures, markers and plan."""

import numpy as np

from ... import tiling

PREDECESSOR_UNREACHED = -1
PREDECESSOR_SOURCE = -2
HOPS_UNREACHED = np.iinfo(np.int64).max
# During the distance rounds a cell whose tentative distance passed its
# solve's settle bound (not yet relaxed to its neighbours) holds this in
# the hops array; none is left when the rounds end.
HOPS_PENDING = -2

# A tile's state: distance and hops.
STATE_BYTES_PER_CELL = 16
# The larger of one tile solve -- the costs as read (up to 8) and, for
# dtypes numba cannot read, as float64 (8), state (16), valid mask (1),
# the search records (24: tiled.solve._solve_tile_indexed) and the heap
# (12 per entry for the frontier, from 65 536 entries: under 1 a cell on
# neuse40's 1024-cell tiles; 57 in all, 4 left for it) -- and one output
# pass: the frame (distance, hops, cost, label: 32; flag, known,
# predecessor: 3), the three output blocks (20) and a temporary (8).
TILE_BYTES_PER_CELL = 64
# The in-memory run: the search record (32), predecessor (1), the
# accumulated and allocation outputs (16), direction (4).
IN_MEMORY_BYTES_PER_CELL = 53
# Bytes per band cell of the global arrays (costs, incoming and outgoing
# distance and hops; labels and flags when there are several source ids).
BAND_BYTES_PER_CELL = 49


def plan(values, band, tile_size, memory_limit_mb, executor):
    """The tiled plan for these options, or None for the in-memory path."""
    return tiling.plan_for(values, band, tile_size, memory_limit_mb, executor,
                           IN_MEMORY_BYTES_PER_CELL, TILE_BYTES_PER_CELL)
