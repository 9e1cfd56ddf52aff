"""The habitat network's parallel passes against their sequential or numpy
definitions, and the cost distance seeded from the patch boundary cells
against the one seeded from every patch cell (how it ran before).

- boundary seeding: accumulated cost and allocation equal those of
  ``cost_distance`` from the whole patch raster, and every link's path
  equals the one traced through that run's directions;
- the crossing scan on 1..7 threads (rows split among them, strips of a
  few rows) equals the one-thread scan; the merge keeps the least
  (cost, cell, neighbour) per pair;
- the path traces (parallel over links) equal ``least_cost_path``;
- mask, cell counts, relabelling and boundary cells equal their numpy
  definitions on every dtype and nodata rule.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_habitat_network import random_landscape  # noqa: E402

from gridgraph.core import (cost_distance, habitat_network,  # noqa: E402
                            least_cost_path)
from gridgraph.core._common import valid_mask  # noqa: E402
from gridgraph.core.costdistance import (NEIGHBOUR_OFFSETS,  # noqa: E402
                                         _step_lengths)
from gridgraph.core.habitat import _raster, _scan  # noqa: E402


def landscapes():
    for seed, integer in ((0, True), (1, False), (2, True)):
        for connectivity in (4, 8):
            habitat, resistance = random_landscape((33, 29), seed,
                                                   density=0.12,
                                                   integer=integer)
            if seed == 2:  # a wall of barriers, habitat at the raster edge
                resistance[4:30, 11] = np.nan
                habitat[4:30, 11] = 0
                habitat[0, :] = 1
            yield seed, connectivity, habitat, resistance


@pytest.mark.parametrize("seed,connectivity,habitat,resistance",
                         list(landscapes()))
def test_boundary_seeding_equals_every_patch_cell_seeded(
        seed, connectivity, habitat, resistance):
    net = habitat_network(habitat, resistance, connectivity=connectivity,
                          backend="cpu")
    full = cost_distance(resistance, net.patches.astype(np.float64),
                         connectivity, backend="cpu")
    assert np.array_equal(net.accumulated, full.accumulated, equal_nan=True)
    assert np.array_equal(net.allocation, full.allocation)
    assert len(net.links) > 3
    for k in range(len(net.links)):
        start, end = net.links.crossing[k]
        expected = np.concatenate([least_cost_path(full, *start)[::-1],
                                   least_cost_path(full, *end)])
        assert np.array_equal(net.links.path(k), expected)


def test_boundary_seeding_interior_cells_exist_and_are_settled():
    habitat = np.zeros((12, 12), dtype=np.uint8)
    habitat[1:6, 1:6] = 1      # 9 interior cells (8-connected)
    habitat[8:11, 8:11] = 1    # 1 interior cell
    resistance = np.full((12, 12), 2.0)
    net = habitat_network(habitat, resistance, connectivity=8,
                          backend="cpu")
    cells, ids = _raster.boundary_cells(net.patches, 0, 12, 8, 0)
    assert len(cells) == 25 - 9 + 9 - 1
    assert np.all(net.accumulated[habitat == 1] == 0)
    assert np.array_equal(net.allocation[habitat == 1],
                          net.patches[habitat == 1])
    # three diagonal steps from corner (5, 5) to corner (8, 8), crossing
    # between (6, 6) and (7, 7): (d + step) + d, each a step of 2 sqrt 2
    step = (2.0 + 2.0) * 0.5 * np.sqrt(2.0)
    assert net.links.cost.tolist() == [(step + step) + step]


def test_one_patch_over_the_whole_raster():
    net = habitat_network(np.ones((5, 6), np.uint8), np.ones((5, 6)),
                          backend="cpu")
    assert net.patch_count == 1 and len(net.links) == 0
    assert np.all(net.accumulated == 0) and np.all(net.allocation == 1)


# ------------------------------------------------------------ crossing scan


@pytest.mark.parametrize("connectivity", [4, 8])
def test_scan_on_many_threads_equals_one_thread(connectivity):
    habitat, resistance = random_landscape((41, 37), 3, density=0.1,
                                           integer=True)
    net = habitat_network(habitat, resistance, connectivity=connectivity,
                          backend="cpu")
    rows, cols = resistance.shape

    def read_strip(top, n):
        return (net.accumulated[top:top + n], net.allocation[top:top + n],
                resistance[top:top + n])

    step = _step_lengths(connectivity, None)
    one = _scan.scan_crossings(read_strip, rows, cols, rows, net.patch_count,
                               connectivity, step, threads=1)
    assert len(one[0]) == len(net.links) > 5
    for threads in (2, 3, 7):
        for strip_rows in (rows, 5, 1):
            got = _scan.scan_crossings(read_strip, rows, cols, strip_rows,
                                       net.patch_count, connectivity, step,
                                       threads=threads)
            for a, b in zip(one, got):
                assert np.array_equal(a, b)


def test_merge_keeps_the_least_cost_then_cell_then_neighbour():
    table_a = (np.array([5, 9]), np.array([2.0, 1.0]), np.array([40, 3]),
               np.array([1, 0]))
    table_b = (np.array([5, 9, 12]), np.array([2.0, 1.0, 7.0]),
               np.array([40, 2, 8]), np.array([0, 3, 1]))
    table_c = (np.array([5]), np.array([1.5]), np.array([90]),
               np.array([3]))
    key, cost, cell, neighbour = _scan.merge_entries([table_a, table_b,
                                                      table_c])
    assert key.tolist() == [5, 9, 12]
    assert cost.tolist() == [1.5, 1.0, 7.0]
    assert cell.tolist() == [90, 2, 8]
    assert neighbour.tolist() == [3, 3, 1]
    # a tie on cost and cell: the lower neighbour
    key, cost, cell, neighbour = _scan.merge_entries([table_a, table_b])
    assert (cell[0], neighbour[0]) == (40, 0)


# ---------------------------------------------------------------- traces


def test_parallel_traces_equal_least_cost_path_and_name_the_bad_link():
    habitat, resistance = random_landscape((30, 30), 8, integer=False)
    patches = habitat_network(habitat, resistance, backend="cpu").patches
    run = cost_distance(resistance, patches, 8, backend="cpu")
    reached = np.argwhere(np.isfinite(run.accumulated))
    starts, ends = reached[::3], reached[::-3][:len(reached[::3])]
    offsets, rows, cols = _scan.trace_links(run.direction, starts, ends)
    for k in range(len(starts)):
        expected = np.concatenate([least_cost_path(run, *starts[k])[::-1],
                                   least_cost_path(run, *ends[k])])
        got = np.stack([rows[offsets[k]:offsets[k + 1]],
                        cols[offsets[k]:offsets[k + 1]]], axis=1)
        assert np.array_equal(got, expected)
    # a cycle on the path of two links: the first of them is named
    direction = run.direction.copy()
    r, c = starts[5]
    direction[r, c] = 360.0          # east...
    direction[r, c + 1] = 180.0      # ...and back west
    bad = np.array([starts[0], starts[5], starts[5]])
    with pytest.raises(RuntimeError, match="link 1:"):
        _scan.trace_links(direction, bad, bad)


def test_path_lengths_in_map_units():
    offsets = np.array([0, 3, 3, 5])
    rows = np.array([0, 1, 1, 4, 5])
    cols = np.array([0, 1, 2, 4, 4])
    lengths = _scan.path_lengths(offsets, rows, cols, 2.0, 3.0)
    assert lengths.tolist() == [np.hypot(2.0, 3.0) + 2.0, 0.0, 3.0]


# ----------------------------------------------------------- raster passes


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.int64,
                                   np.float16, np.float32, np.float64])
@pytest.mark.parametrize("nodata", [None, 0, 3, 255, -1.5, np.nan])
@pytest.mark.parametrize("values", [None, [2.0, 3.0, 7.0]])
def test_habitat_mask_equals_numpy(dtype, nodata, values):
    rng = np.random.default_rng(11)
    block = rng.integers(0, 9, (9, 14)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        block[2, 3:6] = np.nan
        block[4, 4] = -1.5
    values = None if values is None else np.unique(np.asarray(values))
    valid = valid_mask(block, nodata)
    expected = valid & (block != 0 if values is None
                        else np.isin(block, values))
    got = _raster.habitat_mask(block, nodata, values)
    assert got.dtype == np.uint8
    assert np.array_equal(got, expected.astype(np.uint8))
    out = np.full((12, 14), 7, dtype=np.uint8)  # into rows of a larger one
    _raster.habitat_mask(block, nodata, values, out=out[2:11])
    assert np.array_equal(out[2:11], got)
    assert np.all(out[:2] == 7) and np.all(out[11:] == 7)


@pytest.mark.parametrize("bins", [3, 50])
def test_label_counts_equal_bincount(monkeypatch, bins):
    labels = np.random.default_rng(2).integers(0, bins, (23, 17)).astype(
        np.int32)
    expected = np.bincount(labels.ravel(), minlength=bins)
    assert np.array_equal(_raster.label_counts(labels, bins), expected)
    monkeypatch.setattr(_raster, "PARALLEL_BINCOUNT_LIMIT", 1)
    assert np.array_equal(_raster.label_counts(labels, bins), expected)


@pytest.mark.parametrize("dtype,nodata", [(np.float32, None),
                                          (np.float64, -9.0),
                                          (np.int16, 0), (np.float16, None)])
def test_relabel_equals_numpy(dtype, nodata):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 6, (15, 12)).astype(np.int32)
    renumber = np.array([0, 1, 0, 2, 3, 0], dtype=np.int64)
    resistance = rng.integers(0, 5, (15, 12)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        resistance[3, 2:5] = np.nan
        if nodata is not None:
            resistance[7, 7] = nodata
    out = np.zeros((15, 12), dtype=np.int32)
    valid_cells, stranded, first = _raster.relabel(labels, renumber,
                                                   resistance, nodata, out)
    assert np.array_equal(out, renumber[labels])
    valid = valid_mask(resistance, nodata)
    bad = (out != 0) & ~valid
    assert valid_cells == int(valid.sum())
    assert stranded == int(bad.sum()) > 0
    assert first == tuple(int(v) for v in np.argwhere(bad)[0])


@pytest.mark.parametrize("connectivity", [4, 8])
def test_boundary_cells_equal_numpy_in_strips(connectivity):
    rng = np.random.default_rng(9)
    patches = rng.integers(0, 4, (19, 16)).astype(np.int32)
    patches[5:12, 3:12] = 2
    rows, cols = patches.shape
    padded = np.pad(patches, 1, constant_values=-1)  # -1: outside
    other = np.zeros(patches.shape, dtype=bool)
    for dr, dc in NEIGHBOUR_OFFSETS[:connectivity]:
        near = padded[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]
        other |= (near != -1) & (near != patches)
    expected = np.argwhere((patches != 0) & other)
    for strip in (rows, 4, 1):
        found = []
        for top in range(0, rows, strip):
            n = min(strip, rows - top)
            above = 1 if top else 0
            below = 1 if top + n < rows else 0
            block = patches[top - above:top + n + below]
            found.append(_raster.boundary_cells(block, above, above + n,
                                                connectivity, top - above))
        cells = np.concatenate([c for c, _ in found])
        ids = np.concatenate([i for _, i in found])
        assert np.array_equal(cells, expected)
        assert np.array_equal(ids, patches[expected[:, 0], expected[:, 1]])


# ------------------------------------- cost distance CUDA: tiles woken first


def tiles_around_per_cell(grid, cells, keys):
    """The first tiles of the CUDA cost distance as first written: one pass
    over the cells per neighbour tile."""
    from gridgraph.core.costdistance._cuda import TILE
    wake = np.zeros(grid.n_tiles, dtype=np.int32)
    tile_key = np.full(grid.n_tiles, np.inf)
    tile_rows = (cells // grid.cols) // TILE
    tile_cols = (cells % grid.cols) // TILE
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            r = tile_rows + dr
            c = tile_cols + dc
            inside = ((r >= 0) & (r < grid.tiles_y) & (c >= 0)
                      & (c < grid.tiles_x))
            tiles = r[inside] * grid.tiles_x + c[inside]
            wake[tiles] = 1
            np.minimum.at(tile_key, tiles, keys[inside])
    return wake, tile_key


@pytest.mark.parametrize("rows,cols,count", [(200, 130, 40), (64, 64, 1),
                                             (31, 300, 500), (5, 7, 3)])
def test_cuda_first_tiles_equal_the_per_cell_passes(rows, cols, count):
    # the tile grid alone (no device arrays): _Grid.__init__ is skipped
    from gridgraph.core.costdistance import _cuda
    grid = _cuda._Grid.__new__(_cuda._Grid)
    grid.rows, grid.cols = rows, cols
    grid.tiles_x = -(-cols // _cuda.TILE)
    grid.tiles_y = -(-rows // _cuda.TILE)
    grid.n_tiles = grid.tiles_x * grid.tiles_y
    rng = np.random.default_rng(rows + count)
    cells = rng.integers(0, rows * cols, count).astype(np.int64)
    keys = np.round(rng.random(count) * 5)  # ties between cells of a tile
    keys[::7] = 0.0
    expected = tiles_around_per_cell(grid, cells, keys)
    got = grid.tiles_around(cells, keys)
    for a, b in zip(expected, got):
        assert a.dtype == b.dtype and np.array_equal(a, b)


# ------------------------------------------------------- PC rows, fast path


def random_patch_graph(n, seed, integer):
    rng = np.random.default_rng(seed)
    # a spanning path plus random chords: connected, about 3 links a patch
    a = np.concatenate([np.arange(1, n), rng.integers(1, n + 1, 2 * n)])
    b = np.concatenate([np.arange(2, n + 1), rng.integers(1, n + 1, 2 * n)])
    keep = a != b
    a, b = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    pairs = np.unique(np.stack([a, b], 1), axis=0)
    cost = (rng.integers(1, 6, len(pairs)).astype(np.float64) if integer
            else rng.uniform(0.5, 30.0, len(pairs)))
    return pairs[:, 0], pairs[:, 1], cost, rng.uniform(1, 50, n)


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("theta", [0.01, 2.0])
def test_pc_rows_sorted_search_gives_the_bits_of_the_tree_search(integer,
                                                                 theta):
    from gridgraph.core.habitat import _graph, _importance
    n = 300
    from_id, to_id, cost, area = random_patch_graph(n, 4, integer)
    offsets, neighbours, weight = _graph.adjacency(n, from_id, to_id, cost)
    limit = _graph.MAX_EXPONENT / theta
    fast = _importance.rows(offsets, neighbours, weight, area, True, theta,
                            limit, True)
    tree = _importance.rows(offsets, neighbours, weight, area, True, theta,
                            limit, False)
    assert np.array_equal(fast, tree)
    assert np.all(fast > 0)
    # integer costs tie (the fallback runs), real-valued ones do not
    distance = np.empty(n)
    slots = np.empty(n, dtype=np.int64)
    heap_key = np.empty(n)
    heap_node = np.empty(n, dtype=np.int64)
    ties = [_importance._sorted_sum(s, offsets, neighbours, weight, area,
                                    theta, limit, distance, slots, heap_key,
                                    heap_node)[1] for s in range(n)]
    assert any(ties) == integer
