"""The algorithms on the engine's tiled (out-of-core) path: a GeoTIFF input
with TILE_SIZE (or a MEMORY_LIMIT_MB it does not fit) is handed to the
engine as a path, results come back as memmaps in a temporary folder of the
Processing temp folder, are streamed into GeoTIFFs, and the folder is
removed.  Every output must equal the in-memory run's (TILE_SIZE=0)."""

import glob
import os

import numpy as np
import pytest
from qgis.core import NULL, QgsProcessingException, QgsProcessingFeedback

from conftest import (cell_centre, feedback_cancelling_at, read_features, read_raster,
                      write_geotiff, write_points)
from gridgraph.core import tiling
from rasters import fractal_surface, spiral_mask

pytestmark = pytest.mark.usefixtures("gridgraph_provider")
CC, CD, MST = ("gridgraph:connectedcomponents", "gridgraph:costdistance",
               "gridgraph:minimumspanningtree")
TILED_NOTE = "tiled (out-of-core) path"


class RecordingFeedback(QgsProcessingFeedback):
    """Keeps the info lines the algorithm pushes."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def pushInfo(self, info):  # noqa: N802 - QGIS API
        self.lines.append(info)
        super().pushInfo(info)

    @property
    def text(self):
        return "\n".join(self.lines)


def tiled_folders():
    # this process's only: other runs on the machine share the scratch root
    from gridgraph.core.scratch import scratch_root
    return glob.glob(os.path.join(scratch_root(),
                                  f"gridgraph-tiled-*-{os.getpid()}-*"))


@pytest.fixture
def streamed(monkeypatch):
    """Records (array type, out_dir) of every tiling.write_geotiff call."""
    calls = []
    original = tiling.write_geotiff

    def spy(array, path, *args, **kwargs):
        calls.append((type(array), os.path.dirname(array.filename)
                      if isinstance(array, np.memmap) else None))
        return original(array, path, *args, **kwargs)
    monkeypatch.setattr(tiling, "write_geotiff", spy)
    return calls


def run_both(run_algorithm, algorithm_id, parameters, folder, outputs,
             **tiled_options):
    """Run in memory and tiled; returns (in-memory, tiled, tiled feedback)."""
    before = set(tiled_folders())
    whole = run_algorithm(algorithm_id, dict(parameters, **{
        name: str(folder / f"whole-{name}.tif") for name in outputs}))
    feedback = RecordingFeedback()
    tiled = run_algorithm(algorithm_id, dict(parameters, **tiled_options, **{
        name: str(folder / f"tiled-{name}.tif") for name in outputs}),
        feedback)
    assert TILED_NOTE in feedback.text
    assert set(tiled_folders()) == before, "the tiled out_dir was left behind"
    return whole, tiled, feedback


def assert_streamed_from_removed_folder(streamed, count):
    assert len(streamed) == count
    for array_type, out_dir in streamed:
        assert issubclass(array_type, np.memmap)
        from gridgraph.core.scratch import scratch_root
        assert out_dir.startswith(scratch_root())
        assert not os.path.exists(out_dir)


# ----------------------------------------------------- connected components

@pytest.mark.parametrize("mode,connectivity", [(0, 0), (0, 1), (1, 0),
                                               (1, 1)])
def test_components_tiled_labels_equal_in_memory(run_algorithm, tmp_path,
                                                 streamed, mode,
                                                 connectivity):
    values = np.random.default_rng(3).integers(0, 4, size=(37, 29))
    path = write_geotiff(tmp_path / "v.tif", values, nodata=3,
                         data_type="Byte")
    whole, tiled, _ = run_both(
        run_algorithm, CC, {"INPUT": path, "MODE": mode,
                            "CONNECTIVITY": connectivity},
        tmp_path, ["OUTPUT"], TILE_SIZE=8)
    assert tiled["COMPONENTS"] == whole["COMPONENTS"] > 1
    tiled_labels, nodata, geotransform, projection = read_raster(
        tiled["OUTPUT"])
    whole_labels, *whole_meta = read_raster(whole["OUTPUT"])
    np.testing.assert_array_equal(tiled_labels, whole_labels)
    assert tiled_labels.dtype == whole_labels.dtype
    assert [nodata, geotransform, projection] == whole_meta
    assert_streamed_from_removed_folder(streamed, 1)


def test_components_memory_limit_forces_the_tiled_path(run_algorithm,
                                                       tmp_path, streamed):
    # 256 x 256 cells take 1.5 MB in memory (24 bytes a cell): over 1 MB
    values = np.random.default_rng(5).integers(0, 3, size=(256, 256))
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    whole, tiled, _ = run_both(run_algorithm, CC, {"INPUT": path}, tmp_path,
                               ["OUTPUT"], MEMORY_LIMIT_MB=1)
    assert tiled["COMPONENTS"] == whole["COMPONENTS"] > 10
    np.testing.assert_array_equal(read_raster(tiled["OUTPUT"])[0],
                                  read_raster(whole["OUTPUT"])[0])
    assert_streamed_from_removed_folder(streamed, 1)


def test_small_raster_under_a_memory_limit_stays_in_memory(run_algorithm,
                                                           tmp_path, streamed):
    path = write_geotiff(tmp_path / "v.tif", np.eye(6), data_type="Byte")
    feedback = RecordingFeedback()
    result = run_algorithm(CC, {"INPUT": path, "MEMORY_LIMIT_MB": 64,
                                "OUTPUT": str(tmp_path / "l.tif")}, feedback)
    # six diagonal ones (rook-separated) and the two zero triangles
    assert result["COMPONENTS"] == 8
    assert TILED_NOTE not in feedback.text
    assert streamed == []


def spiral_and_fractal(size=75):
    """A nonzero-mode raster (one spiral arm across every tile, plus nodata
    specks) and an equal-mode one (fractal classes, NaN holes), neither a
    multiple of the tile size."""
    spiral = spiral_mask(size).astype(np.float32)
    spiral[np.random.default_rng(2).random(spiral.shape) < 0.03] = -1
    classes = np.floor(fractal_surface((size - 5, size + 13), seed=4)
                       / 120).astype(np.float64)
    classes[np.random.default_rng(6).random(classes.shape) < 0.05] = np.nan
    return {"nonzero": (spiral, -1), "equal": (classes, None)}


def feature_rows(path):
    """(attributes, WKT) of every feature of a vector output, in order."""
    return [(attributes, geometry.asWkt(17))
            for attributes, geometry in read_features(path)]


@pytest.mark.parametrize("mode,connectivity,tile_size", [
    ("nonzero", 0, 16), ("nonzero", 1, 64), ("equal", 0, 16),
    ("equal", 1, 64)])
def test_components_tiled_polygons_equal_in_memory(run_algorithm, tmp_path,
                                                   streamed, mode,
                                                   connectivity, tile_size):
    values, nodata = spiral_and_fractal()[mode]
    path = write_geotiff(tmp_path / "v.tif", values, nodata=nodata,
                         data_type="Float32" if mode == "nonzero"
                         else "Float64")
    whole, tiled, _ = run_both(
        run_algorithm, CC, {"INPUT": path, "MODE": ("equal", "nonzero").index(
            mode), "CONNECTIVITY": connectivity,
            "OUTPUT_POLYGONS": str(tmp_path / "whole-polygons.gpkg")},
        tmp_path, ["OUTPUT"], TILE_SIZE=tile_size,
        OUTPUT_POLYGONS=str(tmp_path / "tiled-polygons.gpkg"))
    assert tiled["COMPONENTS"] == whole["COMPONENTS"]
    labels, label_nodata = read_raster(tiled["OUTPUT"])[:2]
    whole_labels = read_raster(whole["OUTPUT"])[0]
    np.testing.assert_array_equal(labels, whole_labels)
    assert labels.dtype == whole_labels.dtype == np.int32
    assert label_nodata == 0

    polygons = feature_rows(tiled["OUTPUT_POLYGONS"])
    assert polygons == feature_rows(whole["OUTPUT_POLYGONS"])
    # and they describe the labels: one feature per label in label order,
    # cell counts from the raster, the cells' value in equal mode
    assert [a["label"] for a, _ in polygons] == \
        list(range(1, tiled["COMPONENTS"] + 1))
    counts = np.bincount(labels.ravel(), minlength=tiled["COMPONENTS"] + 1)
    assert [a["cells"] for a, _ in polygons] == counts[1:].tolist()
    assert all(a["area"] == 100.0 * a["cells"] for a, _ in polygons)
    if mode == "equal":
        first = {}
        for label, value in zip(labels.ravel(), values.ravel()):
            first.setdefault(label, value)
        assert [a["value"] for a, _ in polygons] == \
            [first[label] for label in range(1, tiled["COMPONENTS"] + 1)]
    else:
        assert all(a["value"] == NULL for a, _ in polygons)
    assert_streamed_from_removed_folder(streamed, 1)


def test_components_tiled_spiral_is_one_polygon(run_algorithm, tmp_path):
    values = spiral_mask(75).astype(np.uint8)
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    result = run_algorithm(CC, {
        "INPUT": path, "MODE": 1, "TILE_SIZE": 8,
        "OUTPUT": str(tmp_path / "l.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "p.gpkg")})
    (attributes, geometry), = read_features(result["OUTPUT_POLYGONS"])
    assert attributes["label"] == 1 == result["COMPONENTS"]
    assert attributes["cells"] == int(values.sum())
    # cells of 10 m: the polygon's area is the cells' area, holes excluded
    assert geometry.area() == pytest.approx(100.0 * values.sum())
    assert geometry.isMultipart() and len(geometry.asMultiPolygon()) == 1


def test_tiled_all_nodata_is_an_error(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "v.tif", np.full((9, 9), 7.0), nodata=7)
    for algorithm_id, mode in ((CC, 0), (CC, 1), (MST, 0)):
        with pytest.raises(QgsProcessingException) as error:
            run_algorithm(algorithm_id, {
                "INPUT": path, "TILE_SIZE": 8, "MODE": mode,
                "OUTPUT": str(tmp_path / "l.tif"),
                "OUTPUT_DIRECTION": str(tmp_path / "d.tif")})
        assert "has no valid cell" in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.tif"]


def test_nonzero_mode_all_background_is_not_an_error(run_algorithm,
                                                     tmp_path):
    path = write_geotiff(tmp_path / "v.tif", np.zeros((9, 9)))
    result = run_algorithm(CC, {"INPUT": path, "TILE_SIZE": 8, "MODE": 1,
                                "OUTPUT": str(tmp_path / "l.tif")})
    assert result["COMPONENTS"] == 0
    assert not read_raster(result["OUTPUT"])[0].any()


def test_tiled_output_must_be_a_geotiff(run_algorithm, tmp_path):
    path = write_geotiff(tmp_path / "v.tif", np.ones((9, 9)))
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(CC, {"INPUT": path, "TILE_SIZE": 8,
                           "OUTPUT": str(tmp_path / "l.img")})
    assert "GeoTIFF only" in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.tif"]


# ---------------------------------------------------------- cost distance

def random_costs(seed, shape=(40, 50)):
    rng = np.random.default_rng(seed)
    cost = rng.uniform(1, 5, size=shape)
    cost[rng.random(shape) < 0.15] = np.nan  # barriers
    cost[3, 3] = cost[20, 7] = 2.0
    cost[min(30, shape[0] - 1), min(40, shape[1] - 1)] = 2.0
    return cost


@pytest.mark.parametrize("connectivity", [0, 1, 2])
def test_cost_distance_tiled_equals_in_memory(run_algorithm, tmp_path,
                                              streamed, connectivity):
    cost = random_costs(11 + connectivity)
    path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg",
                          [cell_centre(3, 3), cell_centre(30, 40)],
                          fids=[4, 9])
    destinations = write_points(tmp_path / "d.gpkg",
                                [cell_centre(20, 7)], fids=[2])
    outputs = ["OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION"]
    whole, tiled, _ = run_both(
        run_algorithm, CD,
        {"INPUT": path, "SOURCES": points, "CONNECTIVITY": connectivity,
         "DESTINATIONS": destinations},
        tmp_path, outputs, TILE_SIZE=8,
        OUTPUT_PATHS=str(tmp_path / "tiled-paths.gpkg"))
    accumulated = read_raster(tiled["OUTPUT"])[0]
    expected = read_raster(whole["OUTPUT"])[0]
    np.testing.assert_array_equal(np.isnan(accumulated), np.isnan(expected))
    assert np.isfinite(expected).sum() > 1000
    np.testing.assert_allclose(accumulated, expected, rtol=0, atol=1e-9)
    # random real costs: no two least-cost paths tie, so these agree too
    for name in ("OUTPUT_DIRECTION", "OUTPUT_ALLOCATION"):
        np.testing.assert_array_equal(read_raster(tiled[name])[0],
                                      read_raster(whole[name])[0])
    allocation = read_raster(tiled["OUTPUT_ALLOCATION"])[0]
    assert set(np.unique(allocation)) == {0, 4, 9}
    assert allocation.dtype == np.int32
    assert read_raster(whole["OUTPUT_ALLOCATION"])[0].dtype == np.int32
    (attributes, geometry), = read_features(tiled["OUTPUT_PATHS"])
    assert attributes["destination"] == 2
    assert attributes["cost"] == pytest.approx(expected[20, 7], abs=1e-9)
    assert attributes["source"] in (4, 9)
    assert_streamed_from_removed_folder(streamed, 3)


@pytest.mark.parametrize("ids,data_type,allocation_type", [
    ((5, 7), "Int16", np.int32),
    ((-7, 2**31 - 1), "Int32", np.int32),
    # ids past 32 bits: Float64 on both paths (exact below 2**53)
    ((-(2**31) - 1, 2**52 + 1), "Float64", np.float64),
])
def test_cost_distance_tiled_source_raster(run_algorithm, tmp_path,
                                           streamed, ids, data_type,
                                           allocation_type):
    cost = random_costs(21, (33, 27))
    sources = np.zeros(cost.shape)
    sources[3, 3], sources[30, 26] = ids  # valid cost cells
    path = write_geotiff(tmp_path / "cost.tif", cost)
    source_path = write_geotiff(tmp_path / "src.tif", sources, nodata=0,
                                data_type=data_type)
    whole, tiled, _ = run_both(
        run_algorithm, CD, {"INPUT": path, "SOURCE_RASTER": source_path},
        tmp_path, ["OUTPUT", "OUTPUT_ALLOCATION"], TILE_SIZE=16)
    accumulated = read_raster(tiled["OUTPUT"])[0]
    expected = read_raster(whole["OUTPUT"])[0]
    np.testing.assert_array_equal(np.isnan(accumulated), np.isnan(expected))
    np.testing.assert_allclose(accumulated, expected, rtol=0, atol=1e-9)
    allocation, nodata = read_raster(tiled["OUTPUT_ALLOCATION"])[:2]
    whole_allocation, whole_nodata = read_raster(
        whole["OUTPUT_ALLOCATION"])[:2]
    assert allocation.dtype == whole_allocation.dtype == allocation_type
    assert nodata == whole_nodata == 0
    np.testing.assert_array_equal(allocation, whole_allocation)
    assert set(np.unique(allocation).tolist()) == {0, *ids}
    assert_streamed_from_removed_folder(streamed, 2)


def test_cost_distance_tiled_source_on_a_barrier(run_algorithm, tmp_path):
    cost = np.ones((12, 12))
    cost[5, 6] = np.nan
    path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg",
                          [cell_centre(0, 0), cell_centre(5, 6)], fids=[1, 8])
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(CD, {"INPUT": path, "SOURCES": points, "TILE_SIZE": 8,
                           "OUTPUT": str(tmp_path / "c.tif")})
    assert "lie on barrier cells" in str(error.value)
    assert "feature id(s) 8" in str(error.value)
    assert not (tmp_path / "c.tif").exists()


# ----------------------------------------------------- minimum spanning tree

@pytest.mark.parametrize("weight,connectivity", [(0, 0), (3, 1)])
def test_mst_tiled_equals_in_memory(run_algorithm, tmp_path, streamed,
                                    weight, connectivity):
    values = np.random.default_rng(7).uniform(0, 10, size=(40, 50))
    values[np.random.default_rng(8).random(values.shape) < 0.2] = -1
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-1,
                         data_type="Float32")
    whole, tiled, _ = run_both(
        run_algorithm, MST, {"INPUT": path, "WEIGHT": weight,
                             "CONNECTIVITY": connectivity},
        tmp_path, ["OUTPUT_DIRECTION"], TILE_SIZE=16,
        OUTPUT_LINES=str(tmp_path / "tiled-lines.gpkg"))
    assert tiled["TREES"] == whole["TREES"] >= 1
    assert tiled["TOTAL_WEIGHT"] == whole["TOTAL_WEIGHT"] > 0
    direction = read_raster(tiled["OUTPUT_DIRECTION"])[0]
    np.testing.assert_array_equal(direction,
                                  read_raster(whole["OUTPUT_DIRECTION"])[0])
    valid = int((values != -1).sum())
    lines = read_features(tiled["OUTPUT_LINES"])
    assert len(lines) == valid - tiled["TREES"]
    assert sum(a["weight"] for a, _ in lines) == \
        pytest.approx(tiled["TOTAL_WEIGHT"], rel=1e-12)
    assert_streamed_from_removed_folder(streamed, 1)


def test_mst_memory_limit_forces_the_tiled_path(run_algorithm, tmp_path):
    # 130 bytes a cell in memory: 96 x 96 cells take 1.2 MB, over 1 MB
    values = np.random.default_rng(9).uniform(0, 10, size=(96, 96))
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Float32")
    whole, tiled, _ = run_both(run_algorithm, MST, {"INPUT": path}, tmp_path,
                               ["OUTPUT_DIRECTION"], MEMORY_LIMIT_MB=1)
    assert tiled["TREES"] == whole["TREES"] == 1
    assert tiled["TOTAL_WEIGHT"] == whole["TOTAL_WEIGHT"]
    np.testing.assert_array_equal(read_raster(tiled["OUTPUT_DIRECTION"])[0],
                                  read_raster(whole["OUTPUT_DIRECTION"])[0])


def mst_rasters():
    """A fractal surface (trees and segments cross many tiles) with nodata
    specks, and a spiral arm of varying values on nodata (one long tree
    through every tile); neither side a multiple of the tile size."""
    surface = fractal_surface((70, 83), seed=12)
    surface[np.random.default_rng(13).random(surface.shape) < 0.04] = -1
    spiral = np.where(spiral_mask(75), np.random.default_rng(14).uniform(
        0, 10, size=(75, 75)), -1).astype(np.float32)
    return {"fractal": surface, "spiral": spiral}


@pytest.mark.parametrize("name,weight,connectivity,tile_size,threshold", [
    ("fractal", 3, 0, 16, 37.0),
    ("fractal", 0, 1, 64, 640.0),
    ("spiral", 3, 0, 16, 6.9),
    ("spiral", 2, 1, 64, 7.8),
])
def test_mst_tiled_lines_and_segments_equal_in_memory(
        run_algorithm, tmp_path, streamed, name, weight, connectivity,
        tile_size, threshold):
    values = mst_rasters()[name]
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-1,
                         data_type="Float32")
    whole, tiled, _ = run_both(
        run_algorithm, MST,
        {"INPUT": path, "WEIGHT": weight, "CONNECTIVITY": connectivity,
         "THRESHOLD": threshold,
         "OUTPUT_LINES": str(tmp_path / "whole-lines.gpkg")},
        tmp_path, ["OUTPUT_DIRECTION", "OUTPUT_SEGMENTS"],
        TILE_SIZE=tile_size, OUTPUT_LINES=str(tmp_path / "tiled-lines.gpkg"))
    assert (tiled["TREES"], tiled["TOTAL_WEIGHT"]) == \
        (whole["TREES"], whole["TOTAL_WEIGHT"])

    lines = feature_rows(tiled["OUTPUT_LINES"])
    assert lines == feature_rows(whole["OUTPUT_LINES"])
    valid = int((values != -1).sum())
    assert len(lines) == valid - tiled["TREES"]
    keys = [(a["weight"], a["from"], a["to"]) for a, _ in lines]
    assert keys == sorted(keys) and all(low < high for _, low, high in keys)

    segments, nodata = read_raster(tiled["OUTPUT_SEGMENTS"])[:2]
    whole_segments, whole_nodata = read_raster(whole["OUTPUT_SEGMENTS"])[:2]
    np.testing.assert_array_equal(segments, whole_segments)
    assert segments.dtype == whole_segments.dtype == np.int32
    assert nodata == whole_nodata == 0
    # a forest cut at the threshold: one piece per valid cell less one per
    # kept edge; labels 1..n in scan order of first cells, 0 on nodata
    kept = sum(1 for weight_, _, _ in keys if weight_ <= threshold)
    count = valid - kept
    assert tiled["TREES"] < count < valid / 3
    # some segment spans several tiles
    tile_of = (np.arange(values.shape[0])[:, None] // tile_size
               * 100 + np.arange(values.shape[1])[None, :] // tile_size)
    spans = {}
    for label, tile in zip(segments.ravel(), tile_of.ravel()):
        spans.setdefault(label, set()).add(tile)
    assert max(len(tiles) for label, tiles in spans.items() if label) >= 3
    first_seen = list(dict.fromkeys(segments.ravel()[values.ravel() != -1]))
    assert first_seen == list(range(1, count + 1))
    assert not segments[values == -1].any()
    # lines stream from the edge memmap; direction and segments rasters too
    assert_streamed_from_removed_folder(streamed, 2)


def test_mst_tiled_segments_literal(run_algorithm, tmp_path):
    # absdiff weights cut at 1: the 2/3 "U" is one segment whose arms meet
    # only in the last row (another strip and tile than their tops), the
    # 7s are split by a nodata column into two segments numbered after it
    values = np.full((10, 10), 7.0)
    values[:, 0] = values[:, 9] = 2
    values[9] = [2, 3, 2, 3, 2, 3, 2, 3, 2, 3]
    values[:9, 5] = -1
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-1)
    result = run_algorithm(MST, {
        "INPUT": path, "WEIGHT": 3, "THRESHOLD": 1.0, "TILE_SIZE": 8,
        "OUTPUT_SEGMENTS": str(tmp_path / "s.tif")})
    expected = np.array([[1, 2, 2, 2, 2, 0, 3, 3, 3, 1]] * 9
                        + [[1] * 10])
    np.testing.assert_array_equal(read_raster(result["OUTPUT_SEGMENTS"])[0],
                                  expected)


def threshold_pieces(values, valid, connectivity, weight, threshold):
    """Oracle: a minimum spanning forest cut at a threshold has the pieces
    of the grid graph restricted to edges of weight <= threshold (whatever
    the forest), labelled here with scipy in scan order of first cells."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    rows, cols = values.shape
    index = np.arange(rows * cols).reshape(rows, cols)
    flat_values = values.astype(np.float32).ravel()
    flat_valid = valid.ravel()
    offsets = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if connectivity == 8
                                  else [])
    ends = []
    for dr, dc in offsets:
        a = index[:rows - dr, max(0, -dc):cols - max(0, dc)].ravel()
        b = a + dr * cols + dc
        va, vb = flat_values[a], flat_values[b]
        w = np.abs(va - vb) if weight == "absdiff" else np.maximum(va, vb)
        ok = flat_valid[a] & flat_valid[b] & (w <= threshold)
        ends.append((a[ok], b[ok]))
    a = np.concatenate([e[0] for e in ends])
    b = np.concatenate([e[1] for e in ends])
    graph = coo_matrix((np.ones(a.size), (a, b)), shape=(index.size,) * 2)
    _, piece = connected_components(graph, directed=False)
    labels = np.zeros(index.size, dtype=np.int64)
    numbers = {}
    for cell in np.flatnonzero(flat_valid):
        labels[cell] = numbers.setdefault(piece[cell], len(numbers) + 1)
    return labels.reshape(rows, cols)


@pytest.mark.parametrize("weight,connectivity,threshold", [
    (3, 0, 57.0), (3, 1, 40.0), (0, 0, 663.0), (0, 1, 661.0)])
def test_mst_tiled_segments_equal_the_threshold_graph(
        run_algorithm, tmp_path, weight, connectivity, threshold):
    values = fractal_surface((53, 45), seed=31)
    values[np.random.default_rng(32).random(values.shape) < 0.08] = -1
    path = write_geotiff(tmp_path / "v.tif", values, nodata=-1,
                         data_type="Float32")
    result = run_algorithm(MST, {
        "INPUT": path, "WEIGHT": weight, "CONNECTIVITY": connectivity,
        "THRESHOLD": threshold, "TILE_SIZE": 16,
        "OUTPUT_SEGMENTS": str(tmp_path / "s.tif")})
    segments = read_raster(result["OUTPUT_SEGMENTS"])[0]
    expected = threshold_pieces(values, values != -1, (4, 8)[connectivity],
                                ("max", "min", "mean", "absdiff")[weight],
                                threshold)
    assert 20 < expected.max() < (values != -1).sum() / 4
    np.testing.assert_array_equal(segments, expected)


# ------------------------------------------------------------- cancelling

@pytest.mark.parametrize("algorithm_id,outputs", [
    (CC, {"OUTPUT": "labels.tif"}),
    (CD, {"OUTPUT": "cost.tif", "OUTPUT_ALLOCATION": "allocation.tif",
          "OUTPUT_PATHS": "paths.gpkg"}),
    (MST, {"OUTPUT_DIRECTION": "direction.tif", "OUTPUT_LINES": "l.gpkg"}),
])
def test_cancel_on_the_tiled_path_leaves_nothing(run_algorithm, tmp_path,
                                                 algorithm_id, outputs):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    values = np.random.default_rng(1).uniform(1, 5, size=(40, 50))
    raster = write_geotiff(inputs / "values.tif", values)
    point = write_points(inputs / "p.gpkg", [cell_centre(3, 3)])
    feedback, reports = feedback_cancelling_at()
    parameters = {"INPUT": raster, "TILE_SIZE": 8}
    if algorithm_id == CD:
        parameters.update(SOURCES=point, DESTINATIONS=point)
    parameters.update({name: str(tmp_path / file)
                       for name, file in outputs.items()})
    before = set(tiled_folders())
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(algorithm_id, parameters, feedback)
    assert "cancelled" in str(error.value)
    assert reports, "the algorithm never reported progress"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs"]
    assert set(tiled_folders()) == before


# a GDAL object failing in its destructor after the cancel is an error too
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("cancel_at", [0, 61, 71])
def test_cancel_while_making_polygons_leaves_nothing(run_algorithm, tmp_path,
                                                     cancel_at):
    # 0: in the engine; 61: summing the attributes; 71: polygonizing
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    values = np.floor(fractal_surface((90, 70), seed=3) / 100)
    raster = write_geotiff(inputs / "values.tif", values)
    feedback, reports = feedback_cancelling_at(cancel_at)
    before = set(tiled_folders())
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(CC, {"INPUT": raster, "TILE_SIZE": 16,
                           "OUTPUT": str(tmp_path / "labels.tif"),
                           "OUTPUT_POLYGONS": str(tmp_path / "p.gpkg")},
                      feedback)
    assert "cancelled" in str(error.value)
    assert any(cancel_at <= percent < cancel_at + 10 for percent in reports)
    assert max(reports) < cancel_at + 10, "it went on after the cancel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs"]
    assert set(tiled_folders()) == before


@pytest.mark.parametrize("cancel_at", [0, 61])
def test_cancel_while_making_segments_leaves_nothing(run_algorithm, tmp_path,
                                                     cancel_at):
    # 0: in the engine; 61: labelling the segments (the 60-70 % phase)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    raster = write_geotiff(inputs / "values.tif",
                           fractal_surface((90, 70), seed=3))
    feedback, reports = feedback_cancelling_at(cancel_at)
    before = set(tiled_folders())
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm(MST, {"INPUT": raster, "TILE_SIZE": 16,
                            "THRESHOLD": 20.0,
                            "OUTPUT_DIRECTION": str(tmp_path / "d.tif"),
                            "OUTPUT_SEGMENTS": str(tmp_path / "s.tif"),
                            "OUTPUT_LINES": str(tmp_path / "l.gpkg")},
                      feedback)
    assert "cancelled" in str(error.value)
    assert any(cancel_at <= percent < cancel_at + 9 for percent in reports)
    assert max(reports) < cancel_at + 9, "it went on after the cancel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs"]
    assert set(tiled_folders()) == before
