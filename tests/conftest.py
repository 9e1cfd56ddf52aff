"""Shared fixtures: the GridGraph provider on top of pytest-qgis, and writers
for small GeoTIFF and GeoPackage fixtures made with GDAL/OGR in tmp_path.

QGIS-level tests use the ``gridgraph_provider`` fixture (or the
``processing_run`` helper fixture that needs it); engine tests need none of it.
The Dask tests (tests/distributed) take a module's local cluster from
``cluster`` / ``client``, or one of their own from ``killable_client``.
"""

import contextlib
import os
import sys

# pytest-qgis starts a QgsApplication while pytest configures itself; no
# display must be needed, whatever pytest.ini says.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

PROJECTED_CRS = "EPSG:32633"  # UTM 33N: square metre cells
GEOGRAPHIC_CRS = "EPSG:4326"
# Top-left corner (x, y) and 10 m cells: cell (row, col) has its centre at
# (X0 + 10 col + 5, Y0 - 10 row - 5).
X0, Y0, CELL = 500000.0, 5000000.0, 10.0
PROJECTED_GEOTRANSFORM = (X0, CELL, 0.0, Y0, 0.0, -CELL)

_GDAL_TYPES = {"Byte": 1, "UInt16": 2, "Int16": 3, "UInt32": 4, "Int32": 5,
               "Float32": 6, "Float64": 7}


def cell_centre(row, col, geotransform=PROJECTED_GEOTRANSFORM):
    """Map coordinates of a cell centre on a north-up grid."""
    x0, dx, _, y0, _, dy = geotransform
    return x0 + (col + 0.5) * dx, y0 + (row + 0.5) * dy


def write_geotiff(path, array, crs=PROJECTED_CRS,
                  geotransform=PROJECTED_GEOTRANSFORM, nodata=None,
                  data_type="Float64", bands=None):
    """Write ``array`` (or the list ``bands``) as a GeoTIFF with GDAL."""
    from osgeo import gdal, osr
    gdal.UseExceptions()
    layers = bands if bands is not None else [array]
    rows, cols = np.asarray(layers[0]).shape
    dataset = gdal.GetDriverByName("GTiff").Create(
        str(path), cols, rows, len(layers), _GDAL_TYPES[data_type])
    dataset.SetGeoTransform(geotransform)
    reference = osr.SpatialReference()
    reference.SetFromUserInput(crs)
    dataset.SetProjection(reference.ExportToWkt())
    for index, layer in enumerate(layers, start=1):
        band = dataset.GetRasterBand(index)
        if nodata is not None:
            band.SetNoDataValue(float(nodata))
        band.WriteArray(np.asarray(layer))
    dataset.FlushCache()
    dataset = None
    return str(path)


def write_points(path, points, crs=PROJECTED_CRS, fids=None):
    """A GeoPackage point layer; ``fids`` (default 1..n) are the feature ids."""
    from osgeo import ogr, osr
    ogr.UseExceptions()
    reference = osr.SpatialReference()
    reference.SetFromUserInput(crs)
    reference.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    source = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    layer = source.CreateLayer("points", reference, ogr.wkbPoint)
    layer.CreateField(ogr.FieldDefn("name", ogr.OFTString))
    for index, (x, y) in enumerate(points):
        feature = ogr.Feature(layer.GetLayerDefn())
        feature.SetFID(fids[index] if fids is not None else index + 1)
        feature.SetField("name", f"p{index}")
        point = ogr.Geometry(ogr.wkbPoint)
        point.AddPoint_2D(float(x), float(y))
        feature.SetGeometry(point)
        layer.CreateFeature(feature)
    source = None
    return str(path)


def read_raster(path):
    """(array, nodata, geotransform, projection WKT) of band 1."""
    from osgeo import gdal
    gdal.UseExceptions()
    dataset = gdal.Open(str(path))
    band = dataset.GetRasterBand(1)
    return (band.ReadAsArray(), band.GetNoDataValue(),
            dataset.GetGeoTransform(), dataset.GetProjection())


def read_features(path):
    """[(attributes dict, geometry WKT-able QgsGeometry)] of a vector output."""
    from qgis.core import QgsVectorLayer
    layer = QgsVectorLayer(str(path), "output", "ogr")
    assert layer.isValid(), f"cannot open {path}"
    names = [field.name() for field in layer.fields()]
    return [(dict(zip(names, feature.attributes())), feature.geometry())
            for feature in layer.getFeatures()]


def feedback_cancelling_at(percent=0):
    """(feedback, reports): a QgsProcessingFeedback that cancels itself at its
    first progress report at or past ``percent`` (0: the first report), and the
    list of every percentage reported, for asserting where the run stopped."""
    from qgis.core import QgsProcessingFeedback
    feedback = QgsProcessingFeedback()
    reports = []

    def cancel_past(value):
        reports.append(value)
        if value >= percent:
            feedback.cancel()
    feedback.progressChanged.connect(cancel_past)
    return feedback, reports


@pytest.fixture
def feedback_cancelled_after_a_write(monkeypatch):
    """A QgsProcessingFeedback that is cancelled as soon as the algorithm
    has written one raster output (GridGraphAlgorithm.writeRaster): for the
    tests that cancel while outputs are being written."""
    from qgis.core import QgsProcessingFeedback

    from gridgraph.algorithms.base import GridGraphAlgorithm
    feedback = QgsProcessingFeedback()
    write = GridGraphAlgorithm.writeRaster

    def write_then_cancel(self, *args, **kwargs):
        written = write(self, *args, **kwargs)
        feedback.cancel()
        return written
    monkeypatch.setattr(GridGraphAlgorithm, "writeRaster", write_then_cancel)
    return feedback


@pytest.fixture(scope="session")
def gridgraph_provider(qgis_processing):
    """The GridGraph provider, registered once per session (as QGIS would)."""
    from qgis.core import QgsApplication

    from gridgraph.provider import GridGraphProvider
    registry = QgsApplication.processingRegistry()
    provider = registry.providerById("gridgraph")
    if provider is None:
        provider = GridGraphProvider()
        assert registry.addProvider(provider)
    yield provider


@pytest.fixture
def run_algorithm(gridgraph_provider):
    """``run_algorithm(id, parameters, feedback=None)`` through processing.run."""
    import processing
    from qgis.core import QgsProcessingContext, QgsProcessingFeedback

    def run(algorithm_id, parameters, feedback=None):
        context = QgsProcessingContext()
        return processing.run(algorithm_id, parameters, context=context,
                              feedback=feedback or QgsProcessingFeedback())
    return run


@pytest.fixture
def check_parameters(gridgraph_provider):
    """``check_parameters(id, parameters) -> (ok, message)`` without running."""
    from qgis.core import QgsApplication, QgsProcessingContext

    def check(algorithm_id, parameters):
        algorithm = QgsApplication.processingRegistry().createAlgorithmById(
            algorithm_id)
        assert algorithm is not None, algorithm_id
        return algorithm.checkParameterValues(parameters,
                                              QgsProcessingContext())
    return check


# ------------------------------------------------------------- markers
# Applied here from each test's file and fixtures, so that no test file has
# to carry them (tests/README.md: the tiers and how to run them).

# (pytest-qgis's qgis_app and qgis_iface are autouse: every test has them)
QGIS_FIXTURES = {"gridgraph_provider", "run_algorithm", "check_parameters",
                 "qgis_process", "qgis_processing", "qgis_new_project"}
# files that start QGIS in subprocesses (qgis_process) rather than by fixture
QGIS_FILES = {"test_qgis_process.py", "test_faults_signals.py"}
SLOW_FILES = {"test_tiled_components.py", "test_tiled_costdistance.py",
              "test_tiled_mst.py", "test_tiled_memory.py",
              "test_tiled_outputs.py", "test_mst_forest.py",
              "test_faults_disk.py", "test_faults_signals.py"}

# the Dask tests (tests/distributed: a local cluster of worker processes)
SLOW_FOLDER = os.sep + os.path.join("tests", "distributed") + os.sep

# engine tests that take many seconds each (64-bit index paths on large
# rasters, many-dtype copies): slow, whatever their file
SLOW_NAMES = ("64_bit", "int64", "two_to_the_31", "input_is_not_modified",
              "chunked_parallel", "large_rasters")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.fspath)
        name = os.path.basename(path)
        if (QGIS_FIXTURES & set(getattr(item, "fixturenames", ()))
                or name in QGIS_FILES):
            item.add_marker(pytest.mark.qgis)
        if name == "test_grass_oracle.py":
            item.add_marker(pytest.mark.grass)
        if os.sep + "cuda" + os.sep in path:
            item.add_marker(pytest.mark.cuda)
            item.add_marker(pytest.mark.slow)  # the simulator is slow
        if (name in SLOW_FILES or SLOW_FOLDER in path
                or any(part in item.name for part in SLOW_NAMES)):
            item.add_marker(pytest.mark.slow)


QGIS_PROCESS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "scripts", "qgis-process")


def qgis_process_environment():
    """The environment for scripts/qgis-process: the user's QGIS profile
    (where `make link` enabled the plugin), not pytest-qgis's temporary one."""
    environment = dict(os.environ)
    environment.pop("QGIS_CUSTOM_CONFIG_PATH", None)
    environment["QT_QPA_PLATFORM"] = "offscreen"
    return environment


@pytest.fixture(scope="session")
def qgis_process():
    """``qgis_process(*arguments) -> (returncode, parsed JSON or None, text)``.

    Runs scripts/qgis-process with ``--json``; fails (never skips) when the
    plugin is not loaded by it, saying how to enable it.  ``.listing`` holds
    the JSON of ``qgis_process list``.
    """
    import json
    import subprocess

    def run(*arguments, timeout=300):
        completed = subprocess.run(
            [QGIS_PROCESS, "--json", *map(str, arguments)],
            capture_output=True, text=True, env=qgis_process_environment(),
            timeout=timeout)
        try:
            parsed = json.loads(completed.stdout)
        except ValueError:
            parsed = None
        return (completed.returncode, parsed,
                completed.stdout + completed.stderr)

    code, listing, text = run("list")
    if code != 0 or listing is None or "gridgraph" not in listing.get(
            "providers", {}):
        pytest.fail("qgis_process does not load the gridgraph plugin; run "
                    "`make link` (it links the checkout into the QGIS "
                    "profile and enables it), then `scripts/qgis-process "
                    "plugins` to check:\n" + text[-2000:])
    run.listing = listing
    return run


# ------------------------------------------------------------- Dask
# The Dask tests (tests/distributed, a pytest process of their own in
# `make test`): one local cluster a module; rasters are small and tiles 8
# cells wide so that every run crosses many seams while the per-task
# overhead stays small.  Here, not in a conftest of that folder: two
# conftests of folders without __init__.py are both imported as
# `conftest`, and `from conftest import write_geotiff` got the wrong one.
@pytest.fixture(scope="module")
def worker_sys_path():
    """For the module (the Dask tests name it in their ``pytestmark``):
    worker processes start with this process's sys.path: leave out the
    folder above the checkout that pytest's rootdir import puts there (a
    checkout folder named like a package, e.g. ``dask``, would shadow it
    in the workers)."""
    above = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path
                   if os.path.abspath(p or os.curdir) != above]
    yield
    sys.path[:] = saved


@contextlib.contextmanager
def two_worker_cluster():
    """A ``LocalCluster`` of two one-thread worker processes on loopback
    and its client: ``(cluster, client)``, both closed on exit."""
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield cluster, client


@pytest.fixture(scope="module")
def cluster(worker_sys_path):
    """One cluster (:func:`two_worker_cluster`) for the module:
    ``(cluster, client)``."""
    with two_worker_cluster() as cluster_and_client:
        yield cluster_and_client


@pytest.fixture
def client(cluster):
    return cluster[1]


@pytest.fixture
def killable_client(worker_sys_path):
    """A client of a cluster of its own, for tests that kill a worker: the
    module's cluster then never depends on a nanny's restart (Dask at times
    closes the nanny just after it restarted the killed worker, its log
    "Closing Nanny ... nanny-close", and the next test lacked a worker;
    seen twice in `make test`, 2026-11-28)."""
    with two_worker_cluster() as (_, client):
        yield client
