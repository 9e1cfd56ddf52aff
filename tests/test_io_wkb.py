"""core.io.segment_wkb against OGR's own WKB of the same lines."""

import numpy as np
from osgeo import ogr

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
