"""The kernels are compiled ahead of a user's first run: core.warmup fills
numba's on-disk cache, the plugin starts it in a background thread without
blocking, and a run says in the log when it may have to compile."""

import threading
import time

import numpy as np
import pytest

from gridgraph.core import numba_cache, warmup


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "gridgraph-warm-test"
    monkeypatch.setattr(warmup, "_marker_path", lambda: str(path))
    return path


def test_warm_up_runs_every_operation_and_leaves_its_marker(marker):
    assert not warmup.is_warm()
    seen = []
    seconds = warmup.warm_up(dtypes=(np.uint8, np.float32),
                             progress=lambda done, total: seen.append(
                                 (done, total)))
    assert seen == [(1, 2), (2, 2)]
    assert seconds > 0
    assert marker.exists() and warmup.is_warm()


def test_warm_up_in_processes_shares_the_dtypes(marker):
    """`make setup`'s warm-up: the dtypes shared among new processes (the
    kernels load from the cache here), progress as each share ends, the
    marker once all have."""
    seen = []
    warmup.warm_up(dtypes=(np.uint8, np.int16, np.float32),
                   progress=lambda done, total: seen.append((done, total)),
                   processes=2)
    assert sorted(seen) in ([(1, 3), (3, 3)], [(2, 3), (3, 3)])
    assert marker.exists() and warmup.is_warm()


def test_a_failing_warm_up_process_fails_the_warm_up(marker):
    from gridgraph.core import InvalidInputError
    with pytest.raises(InvalidInputError):
        warmup.warm_up(dtypes=(np.uint8, np.complex64), processes=2)
    assert not marker.exists()


def test_marker_names_the_code_it_compiled():
    """The real marker is keyed by the engine's sources and numba's
    version: editing the engine makes the cache cold again."""
    path = warmup._marker_path()
    assert path.endswith(numba_cache.sources_digest())
    assert "gridgraph-warm-" in path


def test_one_marker_whatever_the_import_path(tmp_path, monkeypatch):
    """The package is imported through the venv's link by `make setup` and
    through the QGIS profile's link by QGIS: both must find one marker."""
    link = tmp_path / "other-root"
    link.symlink_to(numba_cache._CORE, target_is_directory=True)
    expected = numba_cache.sources_digest()
    monkeypatch.setattr(numba_cache, "_CORE", str(link))
    assert numba_cache.sources_digest() == expected


def test_background_warm_up_does_not_block(marker, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(warmup, "warm_up", lambda: release.wait(10) and 0.0)
    lines = []
    start = time.perf_counter()
    thread = warmup.start_in_background(log=lines.append)
    assert time.perf_counter() - start < 0.5
    assert thread is not None and thread.daemon and warmup.is_running()
    assert warmup.start_in_background() is None  # one at a time
    release.set()
    thread.join(5)
    assert not warmup.is_running()
    assert "background" in lines[0] and "ready" in lines[-1]


def test_nothing_to_do_when_warm(marker):
    marker.parent.mkdir(parents=True)
    marker.write_text("warm")
    assert warmup.start_in_background() is None


def test_plugin_starts_the_warm_up_from_init_gui(qgis_processing, monkeypatch):
    from gridgraph.plugin import GridGraphPlugin
    calls = []
    monkeypatch.setattr(warmup, "start_in_background",
                        lambda log=None: calls.append(log))
    plugin = GridGraphPlugin(None)
    try:
        plugin.initProcessing()
        assert calls == []  # qgis_process: no background compile
        plugin.initGui()
        assert len(calls) == 1 and callable(calls[0])
    finally:
        plugin.unload()


def test_a_run_says_when_it_may_compile(gridgraph_provider, run_algorithm,
                                        monkeypatch, tmp_path):
    from qgis.core import QgsProcessingFeedback

    from conftest import write_geotiff

    class Log(QgsProcessingFeedback):
        def __init__(self):
            super().__init__()
            self.lines = []

        def pushInfo(self, text):  # noqa: N802 - QGIS API
            self.lines.append(text)

    path = write_geotiff(tmp_path / "v.tif", np.array([[1, 0], [0, 1]]),
                         data_type="Byte")
    parameters = {"INPUT": path, "OUTPUT": str(tmp_path / "labels.tif")}
    for warm, expected in ((False, True), (True, False)):
        monkeypatch.setattr(warmup, "is_warm", lambda warm=warm: warm)
        log = Log()
        run_algorithm("gridgraph:connectedcomponents", parameters, log)
        said = any("first run since installing" in line for line in log.lines)
        assert said == expected
