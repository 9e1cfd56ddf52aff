"""``DASK_SCHEDULER`` through ``processing.run``: a run on the test
cluster and an unreachable scheduler's message.
"""

import numpy as np
import pytest

from dask_helpers import TILE, costs

pytest.importorskip("distributed")

# sys.path without the folder above the checkout, for the workers
pytestmark = pytest.mark.usefixtures("worker_sys_path")


@pytest.mark.usefixtures("gridgraph_provider")
def test_processing_run_with_dask_scheduler(cluster, run_algorithm,
                                            tmp_path):
    from conftest import cell_centre, read_raster, write_geotiff, write_points
    cost = costs((20, 21), 2)
    cost[3, 3] = cost[16, 18] = 1.0
    path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg",
                          [cell_centre(3, 3), cell_centre(16, 18)],
                          fids=[4, 9])
    names = ["OUTPUT", "OUTPUT_DIRECTION", "OUTPUT_ALLOCATION"]
    runs = {}
    for label, extra in (("whole", {}),
                         ("dask", {"DASK_SCHEDULER":
                                   cluster[0].scheduler_address,
                                   "TILE_SIZE": TILE})):
        runs[label] = run_algorithm("gridgraph:costdistance", dict(
            {"INPUT": path, "SOURCES": points, "CONNECTIVITY": 1},
            **extra, **{n: str(tmp_path / f"{label}-{n}.tif")
                        for n in names}))
    for name in names:
        np.testing.assert_array_equal(read_raster(runs["dask"][name])[0],
                                      read_raster(runs["whole"][name])[0],
                                      err_msg=name)
    components = {}
    for label, extra in (("whole", {}),
                         ("dask", {"DASK_SCHEDULER":
                                   cluster[0].scheduler_address})):
        components[label] = run_algorithm(
            "gridgraph:connectedcomponents",
            dict({"INPUT": path, "OUTPUT": str(tmp_path / f"cc-{label}.tif")},
                 **extra))
    assert components["dask"]["COMPONENTS"] == \
        components["whole"]["COMPONENTS"]
    np.testing.assert_array_equal(
        read_raster(components["dask"]["OUTPUT"])[0],
        read_raster(components["whole"]["OUTPUT"])[0])


@pytest.mark.usefixtures("gridgraph_provider")
def test_processing_unreachable_scheduler_message(run_algorithm, tmp_path):
    from qgis.core import QgsProcessingException

    from conftest import write_geotiff
    path = write_geotiff(tmp_path / "v.tif", np.ones((9, 9)))
    with pytest.raises(QgsProcessingException) as error:
        run_algorithm("gridgraph:connectedcomponents", {
            "INPUT": path, "DASK_SCHEDULER": "tcp://127.0.0.1:9",
            "OUTPUT": str(tmp_path / "o.tif")})
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in str(
        error.value)
    assert "executor" not in str(error.value)
    assert not (tmp_path / "o.tif").exists()
