"""gridgraph.core.habitat_network: literal landscapes, oracles, parity.

How correctness is established:
- literal landscapes whose patches, links, tree and indices are worked out
  by hand below;
- each link's cost against a separate cost distance from one patch (the
  least-cost distance between the two patches) whenever that distance's
  path stays inside the two patches' regions, and never below it;
- the spanning forest's total against scipy's minimum_spanning_tree over
  the complete graph of pairwise least-cost distances (the minimum planar
  graph contains that tree: Fall et al. 2007);
- IIC / PC / dIIC / dPC against the published formulas written out here
  with scipy.sparse.csgraph shortest paths;
- the tiled path (strips, tiles, memmaps, a GeoTIFF input) equal to the
  in-memory run, bit for bit.
"""

import math

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree, shortest_path

from gridgraph.core import (InvalidInputError, cost_distance,
                            habitat_network, least_cost_path)
from gridgraph.core import habitat as habitat_module
from gridgraph.core.habitat import _graph, _scan


def random_landscape(shape, seed, density=0.08, integer=True):
    """Blobs of habitat over a positive resistance surface."""
    rng = np.random.default_rng(seed)
    habitat = (rng.random(shape) < density).astype(np.uint8)
    # grow the seeds into small blobs
    grown = habitat.copy()
    grown[1:] |= habitat[:-1]
    grown[:, 1:] |= habitat[:, :-1]
    resistance = rng.integers(1, 20, shape).astype(np.float64) if integer \
        else rng.uniform(0.5, 20.0, shape)
    return grown, resistance


# ------------------------------------------------------------ literal cases


def three_in_a_row():
    habitat = np.zeros((5, 15), dtype=np.uint8)
    habitat[:, 0:2] = 1      # patch 1: 10 cells
    habitat[0:3, 6:9] = 1    # patch 2: 9 cells
    habitat[:, 13:15] = 1    # patch 3: 10 cells
    return habitat, np.ones((5, 15))


def test_three_patches_in_a_row():
    habitat, resistance = three_in_a_row()
    net = habitat_network(habitat, resistance, connectivity=4,
                          distance_p05=5.0, backend="cpu")
    assert net.patch_count == 3
    assert net.patch_cells.tolist() == [10, 9, 10]
    # the middle patch's region separates the outer two: two links
    assert net.links.from_id.tolist() == [1, 2]
    assert net.links.to_id.tolist() == [2, 3]
    # 1 -> 2: column 1 to column 6 on row 1..3, five unit steps
    assert net.links.cost.tolist() == [5.0, 5.0]
    assert net.links.length.tolist() == [5.0, 5.0]
    assert net.links.in_mst.tolist() == [True, True]
    assert net.mst_cost == 10.0
    # the middle patch lies on the tree path between 1 and 3
    path = net.links.path(0)
    assert tuple(path[0]) in {(r, c) for r in range(5) for c in (0, 1)}
    assert habitat[tuple(path[-1])] == 1 and 6 <= path[-1][1] <= 8
    assert net.components == 1 and net.patch_component.tolist() == [1, 1, 1]
    assert net.patch_degree.tolist() == [1, 2, 1]
    # IIC by hand: areas 10, 9, 10; nl(1,2) = nl(2,3) = 1, nl(1,3) = 2
    a = np.array([10.0, 9.0, 10.0])
    numerator = (a @ a + 2 * (10 * 9 / 2 + 9 * 10 / 2 + 10 * 10 / 3))
    assert net.landscape_area == 75.0
    assert net.iic == pytest.approx(numerator / 75.0**2, rel=1e-14)
    # without patch 2 only the outer two remain, unconnected
    without_2 = 10 * 10 + 10 * 10
    assert net.d_iic[1] == pytest.approx(
        100 * (numerator - without_2) / numerator, rel=1e-12)
    assert np.argmax(net.d_iic) == 1 and np.argmax(net.d_pc) == 1
    # PC by hand: p = 0.5 per link (cost 5 = distance_p05), 0.25 via 2
    pc_numerator = a @ a + 2 * (90 * 0.5 + 90 * 0.5 + 100 * 0.25)
    assert net.pc == pytest.approx(pc_numerator / 75.0**2, rel=1e-14)


def test_two_patches_behind_a_barrier_have_no_link():
    habitat = np.zeros((4, 9), dtype=np.uint8)
    habitat[:, :2] = 1
    habitat[:, 7:] = 1
    resistance = np.ones((4, 9))
    resistance[:, 4] = np.nan
    net = habitat_network(habitat, resistance, connectivity=8,
                          distance_p05=3.0, backend="cpu")
    assert net.patch_count == 2
    assert len(net.links) == 0
    assert net.components == 2 and net.patch_component.tolist() == [1, 2]
    assert net.landscape_area == 32.0
    assert net.iic == pytest.approx((64 + 64) / 32.0**2)
    assert net.pc == pytest.approx((64 + 64) / 32.0**2)
    assert net.d_iic.tolist() == [50.0, 50.0]
    assert np.isnan(net.accumulated[:, 4]).all()
    assert (net.allocation[:, :4] == 1).all() and (net.allocation[:, 5:] == 2).all()


def test_patch_smaller_than_min_area_is_dropped_and_ids_follow_scan_order():
    habitat = np.zeros((6, 10), dtype=np.uint8)
    habitat[0, 8] = 1            # 1 cell: dropped (first in scan order)
    habitat[1:4, 0:3] = 1        # 9 cells
    habitat[3:6, 6:9] = 1        # 9 cells
    resistance = np.full((6, 10), 2.0)
    net = habitat_network(habitat, resistance, connectivity=4,
                          min_area=4 * 100.0, cell_size=(10.0, 10.0),
                          backend="cpu")
    assert net.patch_count == 2
    assert net.patch_area.tolist() == [900.0, 900.0]
    assert net.patches[0, 8] == 0          # the small patch's cell is matrix
    assert net.patches[1, 0] == 1 and net.patches[3, 6] == 2
    assert net.accumulated[0, 8] > 0
    assert len(net.links) == 1
    # lengths in map units: 10 m cells
    assert net.links.length[0] == pytest.approx(
        10.0 * (len(net.links.path(0)) - 1))
    smaller = habitat_network(habitat, resistance, connectivity=4,
                              min_area=1, backend="cpu")
    assert smaller.patch_count == 3 and smaller.patches[0, 8] == 1


def test_habitat_values_pick_classes_and_nodata_is_not_habitat():
    land = np.array([[3, 3, 0, 5, 5, 0, 4, 4],
                     [3, 9, 0, 5, 5, 0, 4, 4]], dtype=np.int16)
    resistance = np.ones(land.shape)
    net = habitat_network(land, resistance, habitat_values=[3, 4],
                          habitat_nodata=9, connectivity=4, backend="cpu")
    assert net.patch_count == 2
    assert net.patches.tolist() == [[1, 1, 0, 0, 0, 0, 2, 2],
                                    [1, 0, 0, 0, 0, 0, 2, 2]]


def test_errors_name_the_problem():
    habitat, resistance = three_in_a_row()
    with pytest.raises(InvalidInputError, match="same grid"):
        habitat_network(habitat, resistance[:, :-1], backend="cpu")
    with pytest.raises(InvalidInputError, match="no habitat patch"):
        habitat_network(np.zeros((3, 3)), np.ones((3, 3)), backend="cpu")
    with pytest.raises(InvalidInputError, match="lower the minimum area"):
        habitat_network(habitat, resistance, min_area=1000, backend="cpu")
    broken = resistance.copy()
    broken[2, 7] = np.nan
    with pytest.raises(InvalidInputError, match="row 2, column 7"):
        habitat_network(habitat, broken, backend="cpu")
    with pytest.raises(InvalidInputError, match="connectivity"):
        habitat_network(habitat, resistance, connectivity=16, backend="cpu")
    with pytest.raises(InvalidInputError, match="distance_p05"):
        habitat_network(habitat, resistance, distance_p05=0, backend="cpu")
    negative = resistance.copy()
    negative[0, 5] = -1
    with pytest.raises(InvalidInputError, match="negative"):
        habitat_network(habitat, negative, backend="cpu")


def test_inputs_are_not_modified():
    habitat, resistance = random_landscape((20, 24), 3)
    before = habitat.copy(), resistance.copy()
    habitat_network(habitat, resistance, backend="cpu")
    assert np.array_equal(habitat, before[0])
    assert np.array_equal(resistance, before[1])


# ------------------------------------------------------------------ oracles


def patch_distances(net, resistance, connectivity):
    """Least-cost distance between every two patches, one cost distance per
    patch (the complete graph), and each run's result."""
    n = net.patch_count
    distance = np.full((n, n), np.inf)
    runs = {}
    for a in range(1, n + 1):
        run = cost_distance(resistance, (net.patches == a).astype(np.uint8),
                            connectivity, backend="cpu")
        runs[a] = run
        for b in range(1, n + 1):
            cells = run.accumulated[net.patches == b]
            if b != a and np.isfinite(cells).any():
                distance[a - 1, b - 1] = np.nanmin(cells)
    return distance, runs


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_links_and_tree_against_patch_by_patch_cost_distances(connectivity,
                                                              seed):
    habitat, resistance = random_landscape((24, 30), seed,
                                           integer=connectivity == 4)
    resistance[np.random.default_rng(seed).random(resistance.shape) < 0.05] \
        = np.nan
    resistance[habitat == 1] = np.where(
        np.isnan(resistance[habitat == 1]), 1.0, resistance[habitat == 1])
    net = habitat_network(habitat, resistance, connectivity=connectivity,
                          backend="cpu")
    assert net.patch_count > 5 and len(net.links) > 5
    distance, runs = patch_distances(net, resistance, connectivity)
    inside = 0
    for k in range(len(net.links)):
        a, b = int(net.links.from_id[k]), int(net.links.to_id[k])
        cost = net.links.cost[k]
        assert cost >= distance[a - 1, b - 1] * (1 - 1e-12)
        # the separate run's least-cost path from b back to a
        run = runs[a]
        cells = np.argwhere(net.patches == b)
        closest = cells[np.argmin(run.accumulated[cells[:, 0], cells[:, 1]])]
        path = least_cost_path(run, *closest)
        regions = net.allocation[path[:, 0], path[:, 1]]
        if np.isin(regions, [a, b]).all():
            inside += 1
            assert cost == pytest.approx(distance[a - 1, b - 1], rel=1e-12)
        # the link's own path: from a's patch to b's, through a's then b's
        # region, each step a neighbour step
        own = net.links.path(k)
        assert net.patches[tuple(own[0])] == a
        assert net.patches[tuple(own[-1])] == b
        steps = np.abs(np.diff(own, axis=0))
        assert steps.max() <= 1 and (steps.sum(axis=1) >= 1).all()
        if connectivity == 4:
            assert (steps.sum(axis=1) == 1).all()
    assert inside >= len(net.links) // 2
    # the tree: Kruskal over the complete graph (scipy as the oracle)
    complete = np.where(np.isfinite(distance), distance, 0.0)
    oracle = minimum_spanning_tree(csr_matrix(complete)).sum()
    assert net.mst_cost == pytest.approx(oracle, rel=1e-12)
    assert net.links.in_mst.sum() == net.patch_count - net.components


def test_crossing_ties_pick_the_first_cell_and_a_growing_table(monkeypatch):
    # every crossing between two flat patches costs the same
    habitat = np.zeros((6, 7), dtype=np.uint8)
    habitat[:, 0] = 1
    habitat[:, 6] = 1
    net = habitat_network(habitat, np.ones((6, 7)), connectivity=4,
                          backend="cpu")
    assert net.links.cost.tolist() == [6.0]
    # column 3 is as close to both: the tie rule gives it to patch 2
    assert net.links.crossing[0].tolist() == [[0, 2], [0, 3]]
    # a table that must grow many times gives the same links
    habitat, resistance = random_landscape((40, 40), 7, density=0.1)
    reference = habitat_network(habitat, resistance, backend="cpu")
    monkeypatch.setattr(_scan, "INITIAL_CAPACITY", 2)
    grown = habitat_network(habitat, resistance, backend="cpu")
    assert_same_network(reference, grown)


def test_traced_paths_equal_least_cost_path():
    habitat, resistance = random_landscape((20, 20), 5, integer=False)
    patches = habitat_network(habitat, resistance, backend="cpu").patches
    run = cost_distance(resistance, patches, 8, backend="cpu")
    cells = np.argwhere(np.isfinite(run.accumulated))[::7]
    offsets, rows, cols = _scan.trace_links(run.direction, cells,
                                            cells)
    for k, (r, c) in enumerate(cells):
        expected = least_cost_path(run, r, c)
        got = np.stack([rows[offsets[k]:offsets[k + 1]],
                        cols[offsets[k]:offsets[k + 1]]], axis=1)
        # the path from its source to the cell, then back again
        assert np.array_equal(got, np.concatenate([expected[::-1], expected]))


# ----------------------------------------------------------- indices oracle


def direct_iic(n, links, area, landscape_area, removed=None):
    """Pascual-Hortal & Saura (2006): sum a_i a_j / (1 + nl_ij) / A_L^2."""
    keep = [i for i in range(n) if i != removed]
    graph = np.zeros((n, n))
    for a, b in links:
        if removed not in (a, b):
            graph[a, b] = graph[b, a] = 1
    nl = shortest_path(csr_matrix(graph), unweighted=True, directed=False)
    total = sum(area[i] * area[j] / (1 + nl[i, j])
                for i in keep for j in keep if np.isfinite(nl[i, j]))
    return total / landscape_area**2


def direct_pc(n, links, costs, area, landscape_area, theta, removed=None):
    """Saura & Pascual-Hortal (2007): sum a_i a_j p*_ij / A_L^2, p*_ij the
    maximum product of p = exp(-theta cost): a shortest path in -log p."""
    keep = [i for i in range(n) if i != removed]
    rows, cols, weights = [], [], []
    for (a, b), cost in zip(links, costs):
        if removed not in (a, b):
            rows.append(a)
            cols.append(b)
            # -log p, kept apart from zero weights that csgraph drops
            weights.append(-math.log(math.exp(-theta * cost)) or 1e-300)
    graph = csr_matrix((weights, (rows, cols)), shape=(n, n))
    best = np.exp(-shortest_path(graph, directed=False))
    total = sum(area[i] * area[j] * best[i, j] for i in keep for j in keep)
    return total / landscape_area**2


@pytest.mark.parametrize("seed", range(6))
def test_indices_against_the_published_formulas(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 14))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)
             if rng.random() < 0.3]
    links = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    costs = rng.uniform(1, 30, len(links)).round(1)
    area = rng.integers(1, 50, n).astype(np.float64)
    landscape = area.sum() * 3
    theta = math.log(2) / 10.0
    iic, d_iic = _graph.connectivity_index(
        "iic", n, links[:, 0] + 1, links[:, 1] + 1, costs, area, landscape)
    pc, d_pc = _graph.connectivity_index(
        "pc", n, links[:, 0] + 1, links[:, 1] + 1, costs, area, landscape,
        theta=theta)
    assert iic == pytest.approx(direct_iic(n, pairs, area, landscape),
                                rel=1e-12)
    assert pc == pytest.approx(direct_pc(n, pairs, costs, area, landscape,
                                         theta), rel=1e-12)
    for k in range(n):
        expected = 100 * (iic - direct_iic(n, pairs, area, landscape, k)) / iic
        assert d_iic[k] == pytest.approx(expected, rel=1e-9, abs=1e-12)
        expected = 100 * (pc - direct_pc(n, pairs, costs, area, landscape,
                                         theta, k)) / pc
        assert d_pc[k] == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_importance_on_larger_graphs_with_ties(seed):
    # a grid-like graph (many equal shortest paths: ties in the trees),
    # integer costs, two components and an isolated patch
    rng = np.random.default_rng(seed)
    side = 6
    pairs, costs = [], []
    for r in range(side):
        for c in range(side):
            v = r * side + c
            if c + 1 < side and rng.random() < 0.85:
                pairs.append((v, v + 1))
                costs.append(float(rng.integers(1, 4)))
            if r + 1 < side and rng.random() < 0.85:
                pairs.append((v, v + side))
                costs.append(float(rng.integers(1, 4)))
    n = side * side + 4
    pairs += [(36, 37), (37, 38)]
    costs += [2.0, 2.0]
    links = np.array(pairs, dtype=np.int64)
    costs = np.array(costs)
    area = rng.integers(1, 9, n).astype(np.float64)
    landscape = area.sum() * 2
    theta = math.log(2) / 3.0
    iic, d_iic = _graph.connectivity_index(
        "iic", n, links[:, 0] + 1, links[:, 1] + 1, costs, area, landscape)
    pc, d_pc = _graph.connectivity_index(
        "pc", n, links[:, 0] + 1, links[:, 1] + 1, costs, area, landscape,
        theta=theta)
    for k in range(n):
        expected = 100 * (iic - direct_iic(n, pairs, area, landscape, k)) / iic
        assert d_iic[k] == pytest.approx(expected, rel=1e-9, abs=1e-12), k
        expected = 100 * (pc - direct_pc(n, pairs, costs, area, landscape,
                                         theta, k)) / pc
        assert d_pc[k] == pytest.approx(expected, rel=1e-9, abs=1e-12), k


def test_pc_stops_only_where_exp_underflows():
    # a chain whose far end is beyond exp's range: the truncated search
    # must give the same bits as a full one
    n = 6
    from_id = np.arange(1, n)
    to_id = np.arange(2, n + 1)
    costs = np.array([100.0, 300.0, 400.0, 50.0, 1.0])
    area = np.ones(n)
    pc, _ = _graph.connectivity_index("pc", n, from_id, to_id, costs, area,
                                      10.0, theta=1.0, importance=False)
    full = sum(math.exp(-abs(np.cumsum(np.r_[0, costs])[i]
                             - np.cumsum(np.r_[0, costs])[j]))
               for i in range(n) for j in range(n))
    assert pc == pytest.approx(full / 100.0, rel=1e-15)


def test_network_indices_use_the_threshold_for_iic_only():
    habitat, resistance = random_landscape((24, 24), 11)
    net = habitat_network(habitat, resistance, backend="cpu",
                          distance_p05=20.0)
    threshold = float(np.quantile(net.links.cost, 0.3))
    cut = habitat_network(habitat, resistance, backend="cpu",
                          distance_p05=20.0, max_link_cost=threshold)
    pairs = [(a - 1, b - 1) for a, b, c in zip(
        net.links.from_id, net.links.to_id, net.links.cost) if c <= threshold]
    assert cut.iic == pytest.approx(direct_iic(
        net.patch_count, pairs, net.patch_area, net.landscape_area), rel=1e-12)
    assert cut.pc == net.pc
    from scipy.sparse.csgraph import connected_components
    graph = np.zeros((net.patch_count,) * 2)
    for a, b in pairs:
        graph[a, b] = 1
    count, labels = connected_components(csr_matrix(graph), directed=False)
    assert cut.components == count > net.components == 1
    # numbered in order of each component's lowest patch id, as scipy does
    assert np.array_equal(cut.patch_component, labels + 1)
    assert_same_links(net.links, cut.links)


# ------------------------------------------------------------------- parity


def assert_same_links(expected, got):
    for name in ("from_id", "to_id", "cost", "length", "in_mst", "crossing",
                 "path_offsets", "path_rows", "path_cols"):
        assert np.array_equal(getattr(expected, name), getattr(got, name)), \
            name


def assert_same_network(expected, got):
    assert_same_links(expected.links, got.links)
    for name in ("patch_count", "components", "mst_cost", "landscape_area",
                 "iic", "pc"):
        assert getattr(expected, name) == getattr(got, name), name
    for name in ("patch_cells", "patch_area", "patch_degree",
                 "patch_component", "d_iic", "d_pc"):
        a, b = getattr(expected, name), getattr(got, name)
        assert (a is None and b is None) or np.array_equal(a, b), name
    for name in ("patches", "accumulated", "allocation", "corridors"):
        a, b = getattr(expected, name), getattr(got, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert np.array_equal(np.asarray(a), np.asarray(b),
                                  equal_nan=True), name


@pytest.mark.parametrize("tile_size", [8, 16])
@pytest.mark.parametrize("connectivity", [4, 8])
def test_tiled_path_equals_in_memory(tmp_path, monkeypatch, tile_size,
                                     connectivity):
    habitat, resistance = random_landscape((37, 45), 4, integer=False)
    resistance[5:30, 20] = np.nan
    habitat[5:30, 20] = 0
    options = dict(connectivity=connectivity, distance_p05=15.0,
                   min_area=2, max_link_cost=40.0,
                   outputs=("patches", "accumulated", "allocation",
                            "corridors"))
    reference = habitat_network(habitat, resistance, backend="cpu", **options)
    # strips of a few rows: the scan and the relabelling cross strip seams
    monkeypatch.setattr(habitat_module, "STRIP_BYTES_PER_CELL",
                        2**20 * 0.25 * 64 / (45 * 5))
    out = tmp_path / "out"
    out.mkdir()
    tiled = habitat_network(habitat, resistance, backend="cpu",
                            tile_size=tile_size, memory_limit_mb=64,
                            out_dir=str(out), **options)
    assert isinstance(tiled.patches, np.memmap)
    assert isinstance(tiled.allocation, np.memmap)
    assert_same_network(reference, tiled)
    assert sorted(p.name for p in out.iterdir()) == [
        "accumulated.npy", "allocation.npy", "corridors.npy", "patches.npy"]
    # no out_dir: the tiled results come back in memory, nothing left over
    in_memory = habitat_network(habitat, resistance, backend="cpu",
                                tile_size=tile_size, **options)
    assert not isinstance(in_memory.patches, np.memmap)
    assert_same_network(reference, in_memory)


def test_tiled_path_reads_geotiffs(tmp_path):
    from conftest import write_geotiff
    habitat, resistance = random_landscape((30, 26), 9, integer=False)
    stack = write_geotiff(tmp_path / "stack.tif", None, data_type="Float32",
                          bands=[habitat.astype(np.float32),
                                 resistance.astype(np.float32)])
    reference = habitat_network(habitat, resistance.astype(np.float32),
                                backend="cpu", distance_p05=10.0)
    for tile_size in (None, 8):
        from_file = habitat_network(stack, stack, resistance_band=2,
                                    backend="cpu", distance_p05=10.0,
                                    tile_size=tile_size)
        assert_same_network(reference, from_file)


def test_corridors_mark_the_tree_paths():
    habitat, resistance = three_in_a_row()
    net = habitat_network(habitat, resistance, connectivity=4,
                          outputs=["corridors"], backend="cpu")
    assert net.patches is None and net.accumulated is None
    marked = ~np.isnan(net.corridors)
    expected = np.zeros_like(marked)
    for k in range(len(net.links)):
        path = net.links.path(k)
        expected[path[:, 0], path[:, 1]] = True
    assert np.array_equal(marked, expected)
    assert set(np.unique(net.corridors[marked])) == {5.0}


def test_importance_is_skipped_on_request_and_above_the_limit(monkeypatch):
    habitat, resistance = random_landscape((20, 20), 2)
    net = habitat_network(habitat, resistance, backend="cpu",
                          distance_p05=5.0, importance=False)
    assert net.d_iic is None and net.d_pc is None and net.pc is not None
    monkeypatch.setattr(habitat_module, "IMPORTANCE_AUTO_LIMIT", 1)
    assert habitat_network(habitat, resistance, backend="cpu").d_iic is None


def test_doctest_example_runs():
    import doctest
    failures, tried = doctest.testmod(habitat_module, raise_on_error=False)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize("tile_size", [None, 8])
def test_a_raster_of_two_columns(tile_size):
    habitat = np.zeros((12, 2), dtype=np.uint8)
    habitat[0:2, :] = 1
    habitat[9:12, :] = 1
    net = habitat_network(habitat, np.ones((12, 2)), connectivity=4,
                          tile_size=tile_size, backend="cpu")
    assert net.patch_count == 2 and net.links.cost.tolist() == [8.0]
    assert net.allocation[:5].tolist() == [[1, 1]] * 5


def test_tiled_runs_leave_no_scratch_on_success_failure_and_cancel(
        tmp_path, monkeypatch):
    from gridgraph.core import CancelledError
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(scratch))
    habitat, resistance = random_landscape((20, 20), 8)
    out = tmp_path / "out"
    out.mkdir()
    habitat_network(habitat, resistance, tile_size=8, out_dir=str(out),
                    backend="cpu")
    assert list(scratch.iterdir()) == []
    broken = resistance.copy()
    broken[habitat == 1] = np.nan
    failed = tmp_path / "failed"
    failed.mkdir()
    with pytest.raises(InvalidInputError, match="no valid resistance"):
        habitat_network(habitat, broken, tile_size=8, out_dir=str(failed),
                        backend="cpu")
    with pytest.raises(CancelledError):
        habitat_network(habitat, resistance, tile_size=8,
                        out_dir=str(failed), backend="cpu",
                        progress=lambda fraction: fraction < 0.5)
    assert list(scratch.iterdir()) == [] and list(failed.iterdir()) == []
