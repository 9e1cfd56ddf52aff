"""gridgraph:costdistance through processing.run: literal grids, directions,
allocation, paths, reprojected sources, source rasters, the engine as
reference."""

import math

import numpy as np
import pytest

from conftest import (CELL, GEOGRAPHIC_CRS, PROJECTED_CRS, X0, Y0,
                      cell_centre, read_features, read_raster, write_geotiff,
                      write_points)
from gridgraph.core import cost_distance

ALG = "gridgraph:costdistance"
pytestmark = pytest.mark.usefixtures("gridgraph_provider")
R2, R5 = math.sqrt(2.0), math.sqrt(5.0)
NAN = float("nan")

# One corridor from the top-left cell, around the barrier row, to the
# bottom-left cell: the least-cost path is unique.
CORRIDOR = np.array([[1.0, 1.0, 1.0, 1.0],
                     [NAN, NAN, NAN, 1.0],
                     [1.0, 1.0, 1.0, 1.0]])


def outputs(tmp_path, *names):
    return {name: str(tmp_path / f"{name.lower()}.tif") for name in names}


def test_four_connected_unit_costs_directions(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((3, 4)),
                         data_type="Byte")
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    result = run_algorithm(ALG, {
        "INPUT": cost, "SOURCES": sources, "CONNECTIVITY": 0,
        **outputs(tmp_path, "OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION")})

    accumulated, nodata, geotransform, projection = read_raster(result["OUTPUT"])
    assert accumulated.dtype == np.float64
    np.testing.assert_array_equal(accumulated, [[0, 1, 2, 3],
                                                [1, 2, 3, 4],
                                                [2, 3, 4, 5]])
    assert geotransform == (X0, CELL, 0.0, Y0, 0.0, -CELL)
    assert "32633" in projection
    direction = read_raster(result["OUTPUT_DIRECTION"])[0]
    assert direction.dtype == np.float32
    # GRASS outdir: toward the next cell back to the source, counter-
    # clockwise from east; row 0 goes west (180), column 0 north (90).
    assert direction[0, 0] == 0
    np.testing.assert_array_equal(direction[0, 1:], [180, 180, 180])
    np.testing.assert_array_equal(direction[1:, 0], [90, 90])
    allocation = read_raster(result["OUTPUT_ALLOCATION"])[0]
    np.testing.assert_array_equal(allocation, np.ones((3, 4)))


@pytest.mark.parametrize("connectivity,expected", [
    (1, [[0, 1, 2, 3], [1, R2, 1 + R2, 2 + R2], [2, 1 + R2, 2 * R2, 1 + 2 * R2]]),
    # a knight's move reaches (1, 2) for sqrt(5) < 1 + sqrt(2)
    (2, [[0, 1, 2, 3], [1, R2, R5, 1 + R5], [2, R5, 2 * R2, R2 + R5]]),
])
def test_eight_and_sixteen_connectivity(run_algorithm, tmp_path, connectivity,
                                        expected):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((3, 4)),
                         data_type="Int16")
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "CONNECTIVITY": connectivity,
                                 **outputs(tmp_path, "OUTPUT")})
    np.testing.assert_allclose(read_raster(result["OUTPUT"])[0], expected,
                               rtol=1e-12)


def test_map_units_use_the_cell_size(run_algorithm, tmp_path):
    geotransform = (X0, 10.0, 0.0, Y0, 0.0, -20.0)  # 10 m wide, 20 m tall
    cost = write_geotiff(tmp_path / "cost.tif", np.full((3, 3), 2.0),
                         geotransform=geotransform)
    sources = write_points(tmp_path / "s.gpkg",
                           [cell_centre(0, 0, geotransform)])
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "CONNECTIVITY": 1, "MAP_UNITS": True,
                                 **outputs(tmp_path, "OUTPUT")})
    diagonal = 2.0 * math.hypot(10.0, 20.0)
    np.testing.assert_allclose(read_raster(result["OUTPUT"])[0], [
        [0, 20, 40],
        [40, diagonal, diagonal + 20],
        [80, diagonal + 40, 2 * diagonal]], rtol=1e-12)


def test_max_cost_leaves_far_cells_unreached(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((1, 6)))
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "MAX_COST": 2.5,
                                 **outputs(tmp_path, "OUTPUT",
                                           "OUTPUT_ALLOCATION")})
    accumulated, nodata, _, _ = read_raster(result["OUTPUT"])
    np.testing.assert_array_equal(accumulated[0, :3], [0, 1, 2])
    assert np.isnan(accumulated[0, 3:]).all() and np.isnan(nodata)
    np.testing.assert_array_equal(read_raster(result["OUTPUT_ALLOCATION"])[0],
                                  [[1, 1, 1, 0, 0, 0]])


def test_allocation_uses_feature_ids(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((3, 4)))
    sources = write_points(tmp_path / "s.gpkg",
                           [cell_centre(0, 0), cell_centre(2, 3)],
                           fids=[7, 42])
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "CONNECTIVITY": 0,
                                 **outputs(tmp_path, "OUTPUT_ALLOCATION")})
    assert "OUTPUT" not in result
    rows, cols = np.indices((3, 4))
    np.testing.assert_array_equal(
        read_raster(result["OUTPUT_ALLOCATION"])[0],
        np.where(rows + cols <= 2, 7, 42))


def test_least_cost_path_around_a_barrier(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", CORRIDOR)
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)], fids=[3])
    destinations = write_points(
        tmp_path / "d.gpkg",
        [cell_centre(2, 0), cell_centre(0, 0), (X0 - 100.0, Y0 + 100.0)],
        fids=[11, 12, 13])
    result = run_algorithm(ALG, {
        "INPUT": cost, "SOURCES": sources, "DESTINATIONS": destinations,
        "CONNECTIVITY": 0, "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")})
    paths = {a["destination"]: (a, g) for a, g in
             read_features(result["OUTPUT_PATHS"])}
    assert sorted(paths) == [11, 12]  # 13 lies outside the raster: skipped
    attributes, line = paths[11]
    assert attributes["cost"] == 8.0 and attributes["source"] == 3
    expected = [(2, 0), (2, 1), (2, 2), (2, 3), (1, 3), (0, 3), (0, 2),
                (0, 1), (0, 0)]
    assert [(p.x(), p.y()) for p in line.vertices()] == \
        [cell_centre(r, c) for r, c in expected]
    attributes, line = paths[12]  # on the source itself: a zero-length line
    assert attributes["cost"] == 0.0
    assert line.length() == 0.0


def test_unreached_destination_is_skipped_with_a_warning(run_algorithm,
                                                         tmp_path):
    from qgis.core import QgsProcessingFeedback

    class Recorder(QgsProcessingFeedback):
        def __init__(self):
            super().__init__()
            self.warnings = []

        def pushWarning(self, text):  # noqa: N802
            self.warnings.append(text)

    walled = CORRIDOR.copy()
    walled[1, 3] = NAN
    cost = write_geotiff(tmp_path / "cost.tif", walled)
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    destinations = write_points(tmp_path / "d.gpkg", [cell_centre(2, 0)])
    feedback = Recorder()
    result = run_algorithm(ALG, {
        "INPUT": cost, "SOURCES": sources, "DESTINATIONS": destinations,
        "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")}, feedback)
    assert read_features(result["OUTPUT_PATHS"]) == []
    assert any("no source reaches" in w and "1" in w for w in feedback.warnings)


def test_nodata_cells_are_barriers(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif",
                         np.where(np.isnan(CORRIDOR), -9, CORRIDOR),
                         nodata=-9, data_type="Int16")
    sources = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "CONNECTIVITY": 1,
                                 **outputs(tmp_path, "OUTPUT")})
    accumulated = read_raster(result["OUTPUT"])[0]
    assert np.isnan(accumulated[1, :3]).all()
    # (0,0) (0,1) (0,2) diagonally to (1,3) and (2,2), then (2,1) (2,0)
    assert accumulated[2, 0] == pytest.approx(4 + 2 * R2, rel=1e-12)


def test_sources_in_another_crs_are_reprojected(run_algorithm, tmp_path):
    from qgis.core import (QgsCoordinateReferenceSystem,
                           QgsCoordinateTransform, QgsPointXY, QgsProject)
    transform = QgsCoordinateTransform(
        QgsCoordinateReferenceSystem(PROJECTED_CRS),
        QgsCoordinateReferenceSystem(GEOGRAPHIC_CRS), QgsProject.instance())
    lonlat = [transform.transform(QgsPointXY(*cell_centre(r, c)))
              for r, c in [(1, 2), (4, 0)]]
    rng = np.random.default_rng(5)
    values = rng.uniform(1, 10, size=(5, 6))
    cost = write_geotiff(tmp_path / "cost.tif", values)
    sources = write_points(tmp_path / "s.gpkg",
                           [(p.x(), p.y()) for p in lonlat],
                           crs=GEOGRAPHIC_CRS)
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 **outputs(tmp_path, "OUTPUT",
                                           "OUTPUT_ALLOCATION")})
    reference = cost_distance(values, [(1, 2), (4, 0)], connectivity=8,
                              source_ids=[1, 2], backend="cpu")
    np.testing.assert_allclose(read_raster(result["OUTPUT"])[0],
                               reference.accumulated, rtol=1e-12)
    np.testing.assert_array_equal(read_raster(result["OUTPUT_ALLOCATION"])[0],
                                  reference.allocation)


def test_geographic_cost_raster(run_algorithm, tmp_path):
    geotransform = (10.0, 0.5, 0.0, 50.0, 0.0, -0.5)
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((3, 4)),
                         crs=GEOGRAPHIC_CRS, geotransform=geotransform)
    sources = write_points(tmp_path / "s.gpkg", [(10.25, 49.75)],
                           crs=GEOGRAPHIC_CRS)
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCES": sources,
                                 "CONNECTIVITY": 0, "MAP_UNITS": True,
                                 **outputs(tmp_path, "OUTPUT")})
    accumulated, _, written, projection = read_raster(result["OUTPUT"])
    np.testing.assert_allclose(accumulated, 0.5 * np.add.outer(
        np.arange(3), np.arange(4)), rtol=1e-12)
    assert written == geotransform and "4326" in projection


def test_source_raster_cells_and_ids(run_algorithm, tmp_path):
    cost = write_geotiff(tmp_path / "cost.tif", np.ones((3, 4)))
    source_values = np.array([[5, 0, 0, -1],
                              [0, 0, 0, -1],
                              [0, 0, 0, 8]])
    source_raster = write_geotiff(tmp_path / "sources.tif", source_values,
                                  nodata=-1, data_type="Int16")
    result = run_algorithm(ALG, {"INPUT": cost, "SOURCE_RASTER": source_raster,
                                 "CONNECTIVITY": 0,
                                 **outputs(tmp_path, "OUTPUT",
                                           "OUTPUT_ALLOCATION")})
    rows, cols = np.indices((3, 4))
    first, second = rows + cols, (2 - rows) + (3 - cols)
    np.testing.assert_array_equal(read_raster(result["OUTPUT"])[0],
                                  np.minimum(first, second))
    # the nodata (-1) cells are not sources
    np.testing.assert_array_equal(read_raster(result["OUTPUT_ALLOCATION"])[0],
                                  np.where(first <= second, 5, 8))


def test_matches_the_engine_on_a_random_raster(run_algorithm, tmp_path):
    rng = np.random.default_rng(2024)
    values = rng.uniform(0.5, 20.0, size=(21, 27)).astype(np.float32)
    values[rng.random(values.shape) < 0.15] = -1
    cells = [(3, 4), (17, 20), (10, 2)]
    for row, col in cells:
        values[row, col] = 1.0
    cost = write_geotiff(tmp_path / "cost.tif", values, nodata=-1,
                         data_type="Float32")
    sources = write_points(tmp_path / "s.gpkg",
                           [cell_centre(r, c) for r, c in cells],
                           fids=[4, 5, 6])
    result = run_algorithm(ALG, {
        "INPUT": cost, "SOURCES": sources, "CONNECTIVITY": 2,
        **outputs(tmp_path, "OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION")})
    reference = cost_distance(values, cells, connectivity=16, nodata=-1,
                              source_ids=[4, 5, 6], backend="cpu")
    np.testing.assert_array_equal(read_raster(result["OUTPUT"])[0],
                                  reference.accumulated)
    np.testing.assert_array_equal(read_raster(result["OUTPUT_DIRECTION"])[0],
                                  reference.direction)
    np.testing.assert_array_equal(read_raster(result["OUTPUT_ALLOCATION"])[0],
                                  reference.allocation)
