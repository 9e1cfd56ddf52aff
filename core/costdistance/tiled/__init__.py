"""Cost distance on the block hierarchy (out-of-core, exact).

Haverkort's I/O-efficient SSSP (references in docs/architecture.md) keeps a
priority queue of clusters
keyed by the smallest tentative distance on their boundary.  This module
does the same at tile granularity:

0. Survey (per tile, pure): read the tile, check its costs, list its
   sources, and keep the costs of its *band* -- the cells within ``margin``
   of the tile border (1 cell; 2 for knight's moves, which reach two cells
   away).  Every edge between two tiles joins two band cells, and the two
   cells a knight's move between tiles passes between (both must be valid)
   are band cells too.
1. Propagation: a tile with sources, or whose band received a better
   distance from a neighbour, is queued with the smallest such distance as
   its key.  The tile with the smallest key is solved by Dijkstra inside
   the tile, seeded with its sources and with the distances its band
   received (:func:`_solve_tile`; a re-solve starts from the tile's previous
   distances and only re-settles cells that improve).  The distances of its
   band cells are then relaxed across every edge into the neighbouring
   tiles' bands (:func:`_relax_out`), queueing the tiles that improve.
   Distances only decrease, so this label-correcting process stops, and it
   stops at the least fixed point: exactly Dijkstra's distances, computed
   with the same floating-point expression along the same paths, so equal
   to the in-memory run bit for bit.
   The tiles' states are pairs (distance, hops).  The solves settle the
   distances; the hops -- the steps of the least (cost, steps) pairs, a
   breadth-first search over the tight moves once the distances are final
   -- come from rounds of their own (:func:`hops_tile`), run only when a
   cell has two tight neighbours (the driver's ``HOPS_ONLY_FOR_TIES``):
   elsewhere the predecessor is the one tight neighbour, whatever the hops.
2. Trees (per tile): each cell's predecessor is read off the final pairs
   of the tile and a halo of neighbours taken from the band arrays, by the
   in-memory rule (:func:`gridgraph.core.costdistance._cpu.
   canonical_predecessors`), so directions match the in-memory run on
   exact ties too.  With several source ids a first pass labels each band
   cell with its source id or with the band cell its tree leaves the tile
   through; those chains are followed in memory (:func:`
   _resolve_band_labels`), and the output pass labels every cell.
3. Output (per tile): accumulated cost, GRASS direction and allocation.

Tile states (distance and hops: 16 bytes per cell) live in
an LRU cache sized from the memory limit; evicted states go to the scratch
folder and come back when the tile is solved again.

The rounds' tile tasks, one module each: :mod:`.survey` (round 0),
:mod:`.solve` (round 1), :mod:`.trees` (hops, labels, outputs), over
:mod:`.band` (band geometry, relaxation, halos) and :mod:`.budget`; the
driver is :mod:`gridgraph.core.costdistance.rounds`.
"""

from .band import (Halo, _band_index, _band_position,  # noqa: F401
                   _relax_out, band_cells, tile_halo)
from .budget import (BAND_BYTES_PER_CELL, HOPS_UNREACHED,  # noqa: F401
                     IN_MEMORY_BYTES_PER_CELL, PREDECESSOR_SOURCE,
                     PREDECESSOR_UNREACHED, STATE_BYTES_PER_CELL,
                     TILE_BYTES_PER_CELL, plan)
from .solve import new_state, solve_round_tile, solve_tile  # noqa: F401
from .survey import Survey, survey_tile  # noqa: F401
from .trees import (_resolve_band_labels, hops_tile,  # noqa: F401
                    tile_band_labels, tile_outputs, tile_trees,
                    write_outputs)
