"""gridgraph:minimumspanningtree through processing.run: a literal 2x2 tree,
forests, lines, segments, totals, the engine as reference."""

import numpy as np
import pytest

from conftest import (GEOGRAPHIC_CRS, cell_centre, read_features, read_raster,
                      write_geotiff)
from gridgraph.core import minimum_spanning_tree, segment_by_threshold

ALG = "gridgraph:minimumspanningtree"
pytestmark = pytest.mark.usefixtures("gridgraph_provider")

# absdiff weights: 0-2 is 1, 2-3 is 1, 1-3 is 2, 0-1 is 4.
TWO_BY_TWO = np.array([[1, 5],
                       [2, 3]], dtype=np.float32)


def test_literal_tree_lines_direction_segments(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "v.tif", TWO_BY_TWO, data_type="Float32")
    result = run_algorithm(ALG, {
        "INPUT": path, "WEIGHT": 3, "THRESHOLD": 1.5,
        "OUTPUT_DIRECTION": str(tmp_path / "direction.tif"),
        "OUTPUT_LINES": str(tmp_path / "lines.gpkg"),
        "OUTPUT_SEGMENTS": str(tmp_path / "segments.tif")})
    assert result["TOTAL_WEIGHT"] == 4.0
    assert result["TREES"] == 1
    direction, nodata, _, _ = read_raster(result["OUTPUT_DIRECTION"])
    # root = cell 0; 2 points north to it, 3 west to 2, 1 south to 3
    np.testing.assert_array_equal(direction, [[0, 270], [90, 180]])
    assert np.isnan(nodata)
    segments, nodata, _, _ = read_raster(result["OUTPUT_SEGMENTS"])
    np.testing.assert_array_equal(segments, [[1, 2], [1, 1]])
    assert nodata == 0

    lines = read_features(result["OUTPUT_LINES"])
    assert [(a["weight"], a["from"], a["to"]) for a, _ in lines] == \
        [(1.0, 0, 2), (1.0, 2, 3), (2.0, 1, 3)]
    for attributes, geometry in lines:
        ends = [(p.x(), p.y()) for p in geometry.vertices()]
        assert ends == [cell_centre(*divmod(attributes["from"], 2)),
                        cell_centre(*divmod(attributes["to"], 2))]


@pytest.mark.parametrize("weight", [0, 1, 2])
def test_weight_functions(run_algorithm, tmp_path, weight):
    # max: edges 0-2 (2), 2-3 (3), and 1-3 / 0-1 tie at 5 -> (0,1) first
    # min: 0-1 (1), 0-2 (1), 2-3 (2) ; mean: 0-2 1.5, 2-3 2.5, 0-1 3
    path = write_geotiff(tmp_path / "v.tif", TWO_BY_TWO, data_type="Byte")
    result = run_algorithm(ALG, {"INPUT": path, "WEIGHT": weight,
                                 "OUTPUT_LINES": str(tmp_path / "l.gpkg")})
    assert result["TOTAL_WEIGHT"] == pytest.approx(
        {0: 2 + 3 + 5, 1: 1 + 1 + 2, 2: 1.5 + 2.5 + 3}[weight])
    assert "OUTPUT_DIRECTION" not in result
    edges = [(a["from"], a["to"]) for a, _ in read_features(
        result["OUTPUT_LINES"])]
    assert edges == {0: [(0, 2), (2, 3), (0, 1)],
                     1: [(0, 1), (0, 2), (2, 3)],
                     2: [(0, 2), (2, 3), (0, 1)]}[weight]


def test_nodata_splits_the_forest(run_algorithm, tmp_path):
    values = np.array([[1, -5, 3, 4],
                       [2, -5, 6, -5]], dtype=np.int16)
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-5,
                         data_type="Int16")
    result = run_algorithm(ALG, {"INPUT": path, "CONNECTIVITY": 0,
                                 "OUTPUT_DIRECTION": str(tmp_path / "d.tif")})
    assert result["TREES"] == 2
    assert result["TOTAL_WEIGHT"] == 2 + 4 + 6  # (0,4) + (2,3) + (2,6)
    direction = read_raster(result["OUTPUT_DIRECTION"])[0]
    np.testing.assert_array_equal(direction[:, 1], [np.nan, np.nan])
    np.testing.assert_array_equal(direction, [[0, np.nan, 0, 180],
                                              [90, np.nan, 90, np.nan]])


def test_geographic_crs_lines(run_algorithm, tmp_path):
    geotransform = (10.0, 0.5, 0.0, 50.0, 0.0, -0.5)
    path = write_geotiff(tmp_path / "v.tif", TWO_BY_TWO, crs=GEOGRAPHIC_CRS,
                         geotransform=geotransform)
    result = run_algorithm(ALG, {"INPUT": path, "WEIGHT": 3,
                                 "OUTPUT_LINES": str(tmp_path / "l.gpkg")})
    (attributes, geometry), = [f for f in read_features(result["OUTPUT_LINES"])
                               if f[0]["from"] == 0]
    assert [(p.x(), p.y()) for p in geometry.vertices()] == \
        [(10.25, 49.75), (10.25, 49.25)]


@pytest.mark.parametrize("connectivity,data_type", [(0, "Float64"),
                                                    (1, "Int16")])
def test_matches_the_engine_on_a_random_raster(run_algorithm, tmp_path,
                                               connectivity, data_type):
    rng = np.random.default_rng(77 + connectivity)
    values = rng.integers(0, 30, size=(17, 19)).astype(
        np.float64 if data_type == "Float64" else np.int16)
    values[rng.random(values.shape) < 0.1] = -1
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-1,
                         data_type=data_type)
    result = run_algorithm(ALG, {
        "INPUT": path, "CONNECTIVITY": connectivity, "WEIGHT": 2,
        "THRESHOLD": 12.0,
        "OUTPUT_DIRECTION": str(tmp_path / "d.tif"),
        "OUTPUT_LINES": str(tmp_path / "l.gpkg"),
        "OUTPUT_SEGMENTS": str(tmp_path / "s.tif")})
    tree = minimum_spanning_tree(values, connectivity=(4, 8)[connectivity],
                                 weight="mean", nodata=-1, backend="cpu")
    assert result["TOTAL_WEIGHT"] == tree.total_weight
    assert result["TREES"] == tree.trees
    np.testing.assert_array_equal(read_raster(result["OUTPUT_DIRECTION"])[0],
                                  tree.parent_direction)
    labels, count = segment_by_threshold(tree, 12.0)
    np.testing.assert_array_equal(read_raster(result["OUTPUT_SEGMENTS"])[0],
                                  labels)
    lines = read_features(result["OUTPUT_LINES"])
    assert [[a["from"], a["to"]] for a, _ in lines] == tree.edges.tolist()
    np.testing.assert_array_equal([a["weight"] for a, _ in lines],
                                  tree.weights)
