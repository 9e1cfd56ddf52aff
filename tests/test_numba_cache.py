"""The engine's cached kernels are emptied when its sources change
(core.numba_cache): numba checks a cached kernel against its own file only,
so a kernel compiled with another module's kernel would keep the old one."""

import os

import pytest
from numba.core import caching

from gridgraph.core import numba_cache, warmup


@pytest.fixture
def flushed(monkeypatch, tmp_path):
    """Records the kernels whose cache would be emptied (without emptying
    the real cache) and keeps the digest's marker under tmp_path."""
    seen = []
    monkeypatch.setattr(caching.Cache, "flush",
                        lambda self: seen.append(self._name))
    monkeypatch.setattr(numba_cache, "_marker_folder",
                        lambda: str(tmp_path / "cache"))
    return seen


def test_a_change_of_the_sources_empties_every_engine_kernel(flushed,
                                                             tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(warmup, "_sources_digest", lambda: "old")
    emptied = numba_cache.refresh()
    assert emptied == len(flushed) > 0
    names = set(flushed)
    # kernels that other modules' kernels call or inline, and kernels of a
    # module nothing had imported yet
    for name in ("_link_runs_equal", "_resolve_range", "_compress",
                 "_lower_bounds", "_renumber"):
        assert any(name in kernel for kernel in names), name
    assert os.listdir(tmp_path / "cache") == ["gridgraph-sources-old"]
    flushed.clear()
    assert numba_cache.refresh() == 0 and flushed == []
    monkeypatch.setattr(warmup, "_sources_digest", lambda: "new")
    assert numba_cache.refresh() == emptied
    assert os.listdir(tmp_path / "cache") == ["gridgraph-sources-new"]


def test_a_cache_folder_that_cannot_be_written_is_left_alone(flushed,
                                                             tmp_path,
                                                             monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(numba_cache, "_marker_folder",
                        lambda: str(blocker / "cache"))
    monkeypatch.setattr(warmup, "_sources_digest", lambda: "other")
    assert numba_cache.refresh() == 0


def test_the_real_digest_is_recorded_after_import():
    assert os.path.exists(os.path.join(
        numba_cache._marker_folder(),
        "gridgraph-sources-" + warmup._sources_digest()))


def test_processes_starting_together_refresh_one_cache(tmp_path):
    """A cluster's workers import the engine at once after an update: each
    may empty the cache; none fails, and one marker is left."""
    import subprocess
    import sys
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    (tmp_path / "gridgraph-sources-older").write_text("")
    processes = [subprocess.Popen(
        [sys.executable, "-c", "import gridgraph.core"], env=environment,
        stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for process in processes:
        _, errors = process.communicate(timeout=300)
        assert process.returncode == 0, errors[-2000:]
    markers = [name for name in os.listdir(tmp_path)
               if name.startswith("gridgraph-sources-")]
    assert markers == ["gridgraph-sources-" + warmup._sources_digest()]
