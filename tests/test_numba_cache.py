"""The engine's cached kernels are emptied when its sources change
(core.numba_cache): numba checks a cached kernel against its own file only,
so a kernel compiled with another module's kernel would keep the old one."""

import os
import time

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


_COMPILE_ONE_SIGNATURE = """
import os, sys, time
import numpy as np
from numba.core import caching
import gridgraph.core
from gridgraph.core import _unionfind
if sys.argv[2] == "unlocked":
    caching.Cache.save_overload = caching.Cache.save_overload.__wrapped__
save_index = caching.IndexDataCacheFile._save_index
def slow_save_index(self, overloads):
    time.sleep(3)  # after numba read the index: the other process reads it too
    save_index(self, overloads)
caching.IndexDataCacheFile._save_index = slow_save_index
open(sys.argv[3] + "-" + sys.argv[1], "w").close()  # ready
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
parent = np.arange(4, dtype=sys.argv[1])
assert _unionfind.find_root(parent, 3) == 3
"""


@pytest.mark.parametrize("locked", [True, False])
def test_two_processes_caching_two_signatures_keep_both(tmp_path, locked):
    """Two processes compile two signatures of one kernel at once: numba
    alone can give both the same data file (the index then names one
    signature's code for the other); with the lock each keeps its own."""
    import subprocess
    import sys
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    start = tmp_path / "start"
    processes = [subprocess.Popen(
        [sys.executable, "-c", _COMPILE_ONE_SIGNATURE, dtype,
         "locked" if locked else "unlocked", str(start)],
        env=environment, stderr=subprocess.PIPE, text=True)
        for dtype in ("int32", "int64")]
    deadline = time.monotonic() + 300
    while not all(os.path.exists(f"{start}-{dtype}")
                  for dtype in ("int32", "int64")):
        assert time.monotonic() < deadline and all(
            process.poll() is None for process in processes)
        time.sleep(0.01)
    start.write_text("")
    for process in processes:
        _, errors = process.communicate(timeout=300)
        assert process.returncode == 0, errors[-2000:]
    index = subprocess.run(
        [sys.executable, "-c",
         "import gridgraph.core; from gridgraph.core import _unionfind as u;"
         "print(sorted(u.find_root._cache._cache_file._load_index()"
         ".values()))"],
        env=environment, capture_output=True, text=True, check=True)
    names = eval(index.stdout)  # noqa: S307 (our own subprocess's list)
    if locked:
        assert len(names) == len(set(names)) == 2, names
    else:  # the race the lock closes, shown without it
        assert len(set(names)) < 2 or len(names) < 2, names
