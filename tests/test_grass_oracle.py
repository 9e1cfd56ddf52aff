"""GRASS GIS as an oracle: grass7:r.cost and grass7:r.clump against the
GridGraph algorithms, through processing.run, on small seeded random rasters
in a projected CRS with square cells (the GRASS region is the raster's).

Where GRASS's conventions differ from GridGraph's the tests pin down exactly
how (read from r.cost's main.c and confirmed here), instead of hiding it:

* outdir at start cells: GRASS leaves them null; GridGraph writes 0.
* knight's moves (-k / 16-connectivity): both refuse the move when x or
  y, the two cells it passes between, is null (so neither jumps a one-cell
  barrier wall); GRASS charges (c_a + c_b + c_x + c_y) / 4 * sqrt(5),
  GridGraph (c_a + c_b) / 2 * sqrt(5).  Identical on uniform costs (with or
  without barriers); different otherwise.
* max_cost: GRASS stops its search once the cheapest open cell exceeds it
  but keeps every cell it has labelled by then, including cells above the
  limit with costs that are not final; GridGraph leaves every cell above
  the limit unreached.
* nearest/allocation ids of start points: GRASS numbers the points 1..n
  (their category); GridGraph uses the feature ids.
* start_raster: GRASS starts from every non-null cell (zeros included);
  GridGraph's SOURCE_RASTER from valid non-zero cells only.
* r.clump finds the same clumps as the equal mode but numbers them in its
  own order (often, not always, GridGraph's scan order): compared as
  partitions.
"""

import math

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from conftest import cell_centre, read_raster, write_geotiff, write_points

pytestmark = pytest.mark.usefixtures("gridgraph_provider")

NAN = float("nan")
BARRIER = -9.0  # nodata value of the cost rasters
KNIGHT_MOVES = [(-1, 2), (-2, 1), (-2, -1), (-1, -2), (1, -2), (2, -1),
                (2, 1), (1, 2)]
QUEEN_MOVES = [(0, 1), (-1, 0), (0, -1), (1, 0), (-1, 1), (-1, -1), (1, -1),
               (1, 1)]


@pytest.fixture(scope="module")
def grass(gridgraph_provider):
    """``grass(algorithm, parameters)`` through processing.run; fails (never
    skips) when QGIS's GRASS provider is missing."""
    import processing
    from qgis.core import QgsApplication
    if QgsApplication.processingRegistry().algorithmById("grass7:r.cost") is None:
        pytest.fail("QGIS's GRASS provider (grass7) is not available: install "
                    "qgis-plugin-grass and GRASS GIS (make system-packages)")

    def run(algorithm, parameters):
        return processing.run(algorithm, {
            **parameters, "GRASS_REGION_PARAMETER": None,
            "GRASS_REGION_CELLSIZE_PARAMETER": 0})
    return run


def random_cost(seed, shape=(13, 17), barrier_share=0.1):
    """Float64 costs in [0.5, 20) with ``barrier_share`` nodata cells."""
    rng = np.random.default_rng(seed)
    cost = rng.uniform(0.5, 20.0, size=shape)
    cost[rng.random(shape) < barrier_share] = BARRIER
    return cost, rng


def pick_cells(rng, cost, count):
    valid = np.argwhere(cost != BARRIER)
    return [tuple(int(v) for v in valid[i])
            for i in rng.choice(len(valid), size=count, replace=False)]


def reference_dijkstra(cost, sources, moves, knight_rule):
    """Multi-source least cost with scipy's Dijkstra (independent of the
    engine).  A knight's move needs both cells it passes between (x, y)
    valid; it costs, by ``knight_rule``, "pair" (c_a + c_b) / 2 * L or
    "grass" (c_a + c_b + c_x + c_y) / 4 * L."""
    rows, cols = cost.shape
    valid = cost != BARRIER
    index = np.arange(cost.size).reshape(cost.shape)
    heads, tails, weights = [], [], []
    for dr, dc in moves:
        length = math.hypot(dr, dc)
        for r in range(rows):
            for c in range(cols):
                rr, cc = r + dr, c + dc
                if not (0 <= rr < rows and 0 <= cc < cols):
                    continue
                if not (valid[r, c] and valid[rr, cc]):
                    continue
                weight = (cost[r, c] + cost[rr, cc]) / 2.0 * length
                if abs(dr) + abs(dc) == 3:
                    if abs(dr) == 2:
                        passed = [(r + dr // 2, c), (r + dr // 2, c + dc)]
                    else:
                        passed = [(r, c + dc // 2), (r + dr, c + dc // 2)]
                    if not all(valid[p] for p in passed):
                        continue
                    if knight_rule == "grass":
                        weight = (cost[r, c] + cost[rr, cc] + sum(
                            cost[p] for p in passed)) / 4.0 * length
                heads.append(index[r, c])
                tails.append(index[rr, cc])
                weights.append(weight)
    graph = coo_matrix((weights, (heads, tails)),
                       shape=(cost.size, cost.size)).tocsr()
    distance = dijkstra(graph, directed=True, min_only=True,
                        indices=[index[s] for s in sources])
    return np.where(np.isinf(distance), NAN, distance).reshape(cost.shape)


def gridgraph_cost(run_algorithm, tmp_path, parameters):
    outputs = {name: str(tmp_path / f"gg_{name.lower()}.tif") for name in (
        "OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION")}
    result = run_algorithm("gridgraph:costdistance", {**parameters, **outputs})
    return [read_raster(result[name])[0] for name in outputs]


def grass_cost(grass, tmp_path, parameters):
    outputs = {name: str(tmp_path / f"grass_{name}.tif")
               for name in ("output", "outdir", "nearest")}
    result = grass("grass7:r.cost", {"-n": False, **parameters, **outputs})
    return [read_raster(result[name]) for name in outputs]


def nan_nodata(raster):
    """A GRASS output read as float with its nodata as NaN."""
    array, nodata = raster[0].astype(np.float64), raster[1]
    if nodata is not None and not math.isnan(nodata):
        array[raster[0] == nodata] = NAN
    return array


def test_r_cost_eight_connected_from_start_points(grass, run_algorithm,
                                                  tmp_path):
    cost, rng = random_cost(seed=11)
    sources = pick_cells(rng, cost, 3)
    cost_path = write_geotiff(tmp_path / "cost.tif", cost, nodata=BARRIER)
    points = write_points(tmp_path / "starts.gpkg",
                          [cell_centre(*s) for s in sources], fids=[4, 7, 9])
    output, outdir, nearest = grass_cost(grass, tmp_path, {
        "input": cost_path, "start_points": points, "-k": False})
    accumulated, direction, allocation = gridgraph_cost(
        run_algorithm, tmp_path, {"INPUT": cost_path, "SOURCES": points,
                                  "CONNECTIVITY": 1})

    grass_accumulated = nan_nodata(output)
    np.testing.assert_array_equal(np.isnan(grass_accumulated),
                                  np.isnan(accumulated))
    np.testing.assert_allclose(accumulated, grass_accumulated, rtol=1e-9)

    grass_direction = nan_nodata(outdir)
    is_source = np.zeros(cost.shape, bool)
    is_source[tuple(np.array(sources).T)] = True
    reached = ~np.isnan(accumulated)
    # random float costs: every least-cost path is unique
    np.testing.assert_array_equal(direction[reached & ~is_source],
                                  grass_direction[reached & ~is_source])
    # start cells: GRASS leaves outdir null, GridGraph writes 0
    assert np.isnan(grass_direction[is_source]).all()
    assert (direction[is_source] == 0).all()

    # GRASS numbers the start points 1..n; GridGraph uses the feature ids
    grass_nearest = nan_nodata(nearest)
    fid_of_category = {1: 4, 2: 7, 3: 9}
    np.testing.assert_array_equal(
        np.vectorize(fid_of_category.get)(grass_nearest[reached].astype(int)),
        allocation[reached])


def test_r_cost_from_start_raster_with_max_cost(grass, run_algorithm,
                                                tmp_path):
    cost, rng = random_cost(seed=12)
    starts = np.full(cost.shape, -1, dtype=np.int16)  # -1: nodata (null)
    for value, cell in zip((3, 8), pick_cells(rng, cost, 2)):
        starts[cell] = value
    cost_path = write_geotiff(tmp_path / "cost.tif", cost, nodata=BARRIER)
    start_path = write_geotiff(tmp_path / "starts.tif", starts, nodata=-1,
                               data_type="Int16")
    max_cost = 60  # GRASS reads max_cost as an integer
    output, _, nearest = grass_cost(grass, tmp_path, {
        "input": cost_path, "start_raster": start_path, "-k": False,
        "max_cost": max_cost})
    accumulated, _, allocation = gridgraph_cost(
        run_algorithm, tmp_path, {"INPUT": cost_path,
                                  "SOURCE_RASTER": start_path,
                                  "CONNECTIVITY": 1, "MAX_COST": max_cost})
    (tmp_path / "full").mkdir()
    full, _, _ = gridgraph_cost(run_algorithm, tmp_path / "full", {
        "INPUT": cost_path, "SOURCE_RASTER": start_path, "CONNECTIVITY": 1})

    grass_accumulated = nan_nodata(output)
    ours = ~np.isnan(accumulated)
    assert ours.any() and (~ours & ~np.isnan(full)).any(), \
        "max_cost should cut the raster"
    np.testing.assert_allclose(accumulated[ours], grass_accumulated[ours],
                               rtol=1e-9)
    np.testing.assert_array_equal(nan_nodata(nearest)[ours], allocation[ours])
    np.testing.assert_array_equal(accumulated[ours], full[ours])
    # GRASS keeps the cells it labelled before stopping: above max_cost,
    # with tentative costs (never below the least cost, possibly above it)
    beyond = ~ours & ~np.isnan(grass_accumulated)
    assert beyond.any()
    assert (grass_accumulated[beyond] > max_cost).all()
    assert (grass_accumulated[beyond] >= full[beyond] - 1e-9).all()


def test_r_cost_knight_moves_on_uniform_costs(grass, run_algorithm, tmp_path):
    cost = np.full((11, 14), 2.5)
    sources = [(2, 3), (9, 12)]
    cost_path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "starts.gpkg",
                          [cell_centre(*s) for s in sources])
    output, _, _ = grass_cost(grass, tmp_path, {
        "input": cost_path, "start_points": points, "-k": True})
    accumulated, _, _ = gridgraph_cost(run_algorithm, tmp_path, {
        "INPUT": cost_path, "SOURCES": points, "CONNECTIVITY": 2})
    # both knight rules agree when every cell costs the same
    np.testing.assert_allclose(accumulated, nan_nodata(output), rtol=1e-9)
    assert accumulated[2, 5] == pytest.approx(2.5 * 2)
    assert accumulated[3, 5] == pytest.approx(2.5 * math.sqrt(5))


def test_r_cost_knight_rule_differs_exactly_as_described(grass, run_algorithm,
                                                         tmp_path):
    cost, rng = random_cost(seed=13)
    starts = np.full(cost.shape, -1, dtype=np.int16)
    sources = pick_cells(rng, cost, 2)
    for value, cell in zip((1, 2), sources):
        starts[cell] = value
    cost_path = write_geotiff(tmp_path / "cost.tif", cost, nodata=BARRIER)
    start_path = write_geotiff(tmp_path / "starts.tif", starts, nodata=-1,
                               data_type="Int16")
    output, _, _ = grass_cost(grass, tmp_path, {
        "input": cost_path, "start_raster": start_path, "-k": True})
    accumulated, _, _ = gridgraph_cost(run_algorithm, tmp_path, {
        "INPUT": cost_path, "SOURCE_RASTER": start_path, "CONNECTIVITY": 2})

    moves = QUEEN_MOVES + KNIGHT_MOVES
    grass_rule = reference_dijkstra(cost, sources, moves, "grass")
    pair_rule = reference_dijkstra(cost, sources, moves, "pair")
    np.testing.assert_allclose(nan_nodata(output), grass_rule, rtol=1e-9)
    np.testing.assert_allclose(accumulated, pair_rule, rtol=1e-9)
    reached = ~np.isnan(accumulated) & ~np.isnan(grass_rule)
    assert np.abs(accumulated[reached] - grass_rule[reached]).max() > 1e-3


def test_knight_moves_do_not_cross_a_barrier_wall(grass, run_algorithm,
                                                  tmp_path):
    cost = np.ones((3, 5))
    cost[:, 2] = NAN  # a full wall: nothing on the right is reachable
    cost_path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg", [cell_centre(1, 0)])
    accumulated, _, _ = gridgraph_cost(run_algorithm, tmp_path, {
        "INPUT": cost_path, "SOURCES": points, "CONNECTIVITY": 2})
    assert np.isnan(accumulated[:, 2:]).all()
    assert not np.isnan(accumulated[:, :2]).any()
    # a wall with a gap at the bottom, reached only through the gap; on
    # unit costs GRASS's four-cell mean equals our two-cell one, so r.cost
    # -k must give the same costs
    cost = np.ones((4, 7))
    cost[:3, 3] = BARRIER
    cost_path = write_geotiff(tmp_path / "gap.tif", cost, nodata=BARRIER)
    points = write_points(tmp_path / "gap.gpkg", [cell_centre(0, 0)])
    output, _, _ = grass_cost(grass, tmp_path, {
        "input": cost_path, "start_points": points, "-k": True})
    accumulated, _, _ = gridgraph_cost(run_algorithm, tmp_path, {
        "INPUT": cost_path, "SOURCES": points, "CONNECTIVITY": 2})
    expected = reference_dijkstra(cost, [(0, 0)],
                                  QUEEN_MOVES + KNIGHT_MOVES, "pair")
    np.testing.assert_allclose(nan_nodata(output), expected, rtol=1e-9)
    np.testing.assert_allclose(accumulated, expected, rtol=1e-9)
    # (1, 2) -> (2, 4) would jump the wall between (1, 3) and (2, 3) for
    # 2 * sqrt(5); refused, the path is four diagonals through the gap
    assert accumulated[2, 4] == pytest.approx(4 * math.sqrt(2))


@pytest.mark.parametrize("diagonal,seed,data_type", [
    (False, 21, "Int16"), (True, 22, "Int16"), (True, 23, "Float64")])
def test_r_clump_partitions(grass, run_algorithm, tmp_path, diagonal, seed,
                            data_type):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, size=(14, 19)).astype(
        np.int16 if data_type == "Int16" else np.float64)
    if data_type == "Float64":
        values = values * 0.25 + 0.1
    values[rng.random(values.shape) < 0.1] = -1
    path = write_geotiff(tmp_path / "values.tif", values, nodata=-1,
                         data_type=data_type)
    clumps = read_raster(grass("grass7:r.clump", {
        "input": path, "title": "clumps", "-d": diagonal, "threshold": 0,
        "output": str(tmp_path / "clumps.tif")})["output"])
    result = run_algorithm("gridgraph:connectedcomponents", {
        "INPUT": path, "MODE": 0, "CONNECTIVITY": int(diagonal),
        "OUTPUT": str(tmp_path / "labels.tif")})
    labels = read_raster(result["OUTPUT"])[0]

    grass_labels = nan_nodata(clumps)
    valid = values != -1
    np.testing.assert_array_equal(np.isnan(grass_labels), ~valid)
    assert (labels[~valid] == 0).all()
    # same partition: the label pairs form a one-to-one map
    pairs = set(zip(grass_labels[valid].astype(int), labels[valid]))
    assert len(pairs) == len({g for g, _ in pairs}) == len({o for _, o in pairs})
    assert result["COMPONENTS"] == len(pairs) > 10
