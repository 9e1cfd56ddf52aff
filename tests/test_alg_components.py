"""gridgraph:connectedcomponents through processing.run: literal grids, the
engine as reference, polygons and their attributes."""

import numpy as np
import pytest
from qgis.core import NULL

from conftest import (GEOGRAPHIC_CRS, read_features, read_raster,
                      write_geotiff)
from gridgraph.core import connected_components

ALG = "gridgraph:connectedcomponents"
pytestmark = pytest.mark.usefixtures("gridgraph_provider")

# Four clumps of equal values; 0 is the band's nodata.
VALUES = np.array([[5, 5, 7, 7],
                   [5, 9, 9, 7],
                   [2, 2, 9, 0]])
LABELS = np.array([[1, 1, 2, 2],
                   [1, 3, 3, 2],
                   [4, 4, 3, 0]])

DIAGONAL = np.array([[1, 0, 1],
                     [0, 1, 0],
                     [1, 0, 0]])


def test_equal_mode_labels_polygons_and_count(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "values.tif", VALUES, nodata=0,
                         data_type="Int16")
    result = run_algorithm(ALG, {
        "INPUT": path, "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")})

    assert result["COMPONENTS"] == 4
    labels, nodata, geotransform, projection = read_raster(result["OUTPUT"])
    np.testing.assert_array_equal(labels, LABELS)
    assert nodata == 0
    assert geotransform == (500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0)
    assert "32633" in projection

    features = read_features(result["OUTPUT_POLYGONS"])
    by_label = {attributes["label"]: (attributes, geometry)
                for attributes, geometry in features}
    assert sorted(by_label) == [1, 2, 3, 4]
    expected = {1: (3, 5.0), 2: (3, 7.0), 3: (3, 9.0), 4: (2, 2.0)}
    for label, (cells, value) in expected.items():
        attributes, geometry = by_label[label]
        assert attributes["cells"] == cells
        assert attributes["area"] == pytest.approx(cells * 100.0)
        assert attributes["value"] == value
        assert geometry.area() == pytest.approx(cells * 100.0)
    # component 4 is the two cells of row 2, columns 0-1
    assert by_label[4][1].boundingBox().toString(0) == \
        "500000,4999970 : 500020,4999980"


def test_nonzero_four_and_eight_connectivity(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "mask.tif", DIAGONAL, data_type="Byte")
    four = run_algorithm(ALG, {"INPUT": path, "MODE": 1, "CONNECTIVITY": 0,
                               "OUTPUT": str(tmp_path / "four.tif")})
    eight = run_algorithm(ALG, {"INPUT": path, "MODE": 1, "CONNECTIVITY": 1,
                                "OUTPUT": str(tmp_path / "eight.tif"),
                                "OUTPUT_POLYGONS": str(tmp_path / "eight.gpkg")})
    assert four["COMPONENTS"] == 4
    np.testing.assert_array_equal(read_raster(four["OUTPUT"])[0],
                                  [[1, 0, 2], [0, 3, 0], [4, 0, 0]])
    assert eight["COMPONENTS"] == 1
    np.testing.assert_array_equal(read_raster(eight["OUTPUT"])[0], DIAGONAL)
    (attributes, geometry), = read_features(eight["OUTPUT_POLYGONS"])
    # nonzero components may mix values: no single value to report
    assert attributes["cells"] == 4
    assert attributes["value"] == NULL and attributes["value"] != 0
    assert geometry.area() == pytest.approx(400.0)


def test_geographic_crs_area_in_square_degrees(run_algorithm, tmp_path):
    geotransform = (10.0, 0.5, 0.0, 50.0, 0.0, -0.25)
    path = write_geotiff(tmp_path / "geo.tif", VALUES, crs=GEOGRAPHIC_CRS,
                         geotransform=geotransform, nodata=0,
                         data_type="Float64")
    result = run_algorithm(ALG, {
        "INPUT": path, "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")})
    labels, _, written_geotransform, projection = read_raster(result["OUTPUT"])
    np.testing.assert_array_equal(labels, LABELS)
    assert written_geotransform == geotransform
    assert "4326" in projection
    areas = {a["label"]: a["area"] for a, _ in read_features(
        result["OUTPUT_POLYGONS"])}
    assert areas == pytest.approx({1: 0.375, 2: 0.375, 3: 0.375, 4: 0.25})


@pytest.mark.parametrize("mode,connectivity", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_matches_the_engine_on_a_random_raster(run_algorithm, tmp_path, mode,
                                               connectivity):
    rng = np.random.default_rng(10 * mode + connectivity)
    values = rng.integers(0, 4, size=(23, 31)).astype(np.int16)
    values[rng.random(values.shape) < 0.1] = -1
    path = write_geotiff(tmp_path / "random.tif", values, nodata=-1,
                         data_type="Int16")
    result = run_algorithm(ALG, {
        "INPUT": path, "MODE": mode, "CONNECTIVITY": connectivity,
        "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")})
    reference = connected_components(
        values, connectivity=(4, 8)[connectivity],
        mode=("equal", "nonzero")[mode], nodata=-1, backend="cpu")
    assert result["COMPONENTS"] == reference.count
    np.testing.assert_array_equal(read_raster(result["OUTPUT"])[0],
                                  reference.labels)

    features = read_features(result["OUTPUT_POLYGONS"])
    assert sorted(a["label"] for a, _ in features) == \
        list(range(1, reference.count + 1))
    for attributes, geometry in features:
        inside = reference.labels == attributes["label"]
        assert attributes["cells"] == inside.sum()
        assert geometry.area() == pytest.approx(100.0 * inside.sum())
        assert geometry.isGeosValid() or connectivity == 1
        if mode == 0:
            assert attributes["value"] == values[inside][0]


def test_band_two_is_read(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "two.tif", None, bands=[
        np.zeros((3, 4)), VALUES.astype(float)], nodata=0)
    result = run_algorithm(ALG, {"INPUT": path, "BAND": 2,
                                 "OUTPUT": str(tmp_path / "labels.tif")})
    np.testing.assert_array_equal(read_raster(result["OUTPUT"])[0], LABELS)
