"""core.io's fast paths give what the plain ones give: segment_wkb against
OGR's own WKB of the same lines; read_band's multi-threaded decoding."""

import numpy as np
from osgeo import gdal, ogr

from gridgraph.core import io


def test_segment_wkb_matches_ogr():
    rng = np.random.default_rng(3)
    xs = rng.normal(5e5, 1e4, (7, 2))
    ys = rng.normal(4e6, 1e4, (7, 2))
    xs[0] = [-0.0, np.nextafter(1.0, 2.0)]  # signed zero, last bit
    wkb, size = io.segment_wkb(xs, ys)
    assert len(wkb) == 7 * size
    for i in range(7):
        line = ogr.Geometry(ogr.wkbLineString)
        line.AddPoint_2D(float(xs[i, 0]), float(ys[i, 0]))
        line.AddPoint_2D(float(xs[i, 1]), float(ys[i, 1]))
        expected = bytes(line.ExportToWkb(ogr.wkbNDR))
        assert wkb[i * size:(i + 1) * size] == expected
        parsed = ogr.CreateGeometryFromWkb(wkb[i * size:(i + 1) * size])
        assert parsed.GetPoints() == [(xs[i, 0], ys[i, 0]),
                                      (xs[i, 1], ys[i, 1])]


def test_segment_wkb_empty():
    wkb, size = io.segment_wkb(np.empty((0, 2)), np.empty((0, 2)))
    assert wkb == b"" and size == 41


def test_read_band_decodes_on_threads_and_restores_the_option(tmp_path):
    rng = np.random.default_rng(5)
    values = rng.normal(size=(300, 517))  # several DEFLATE tiles, edge tiles
    values[::7, ::3] = np.nan
    path = str(tmp_path / "values.tif")
    io.write_raster(path, values, (0, 1, 0, 0, 0, -1), "", float("nan"))
    for previous in (None, "1"):
        gdal.SetThreadLocalConfigOption("GDAL_NUM_THREADS", previous)
        try:
            band = io.read_band(path)
            assert gdal.GetThreadLocalConfigOption(
                "GDAL_NUM_THREADS", None) == previous
        finally:
            gdal.SetThreadLocalConfigOption("GDAL_NUM_THREADS", None)
        assert np.array_equal(band.array, values, equal_nan=True)
        assert band.array.dtype == np.float64
