"""The engine's cached kernels are emptied when its sources change
(core.numba_cache): numba checks a cached kernel against its own file only,
so a kernel compiled with another module's kernel would keep the old one."""

import os
import time

import pytest
from numba.core import caching

from gridgraph.core import numba_cache


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
    monkeypatch.setattr(numba_cache, "sources_digest", lambda: "old")
    emptied = numba_cache.refresh()
    assert emptied == len(flushed) > 0
    names = set(flushed)
    # kernels that other modules' kernels call or inline, and kernels of a
    # module nothing had imported yet
    for name in ("_link_runs", "_resolve_range", "_compress",
                 "_lower_bounds", "_renumber"):
        assert any(name in kernel for kernel in names), name
    assert os.listdir(tmp_path / "cache") == ["gridgraph-sources-old"]
    flushed.clear()
    assert numba_cache.refresh() == 0 and flushed == []
    monkeypatch.setattr(numba_cache, "sources_digest", lambda: "new")
    assert numba_cache.refresh() == emptied
    assert os.listdir(tmp_path / "cache") == ["gridgraph-sources-new"]


def test_a_cache_folder_that_cannot_be_written_is_left_alone(flushed,
                                                             tmp_path,
                                                             monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(numba_cache, "_marker_folder",
                        lambda: str(blocker / "cache"))
    monkeypatch.setattr(numba_cache, "sources_digest", lambda: "other")
    assert numba_cache.refresh() == 0


def test_the_real_digest_is_recorded_after_import():
    assert os.path.exists(os.path.join(
        numba_cache._marker_folder(),
        "gridgraph-sources-" + numba_cache.sources_digest()))


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
    assert markers == ["gridgraph-sources-" + numba_cache.sources_digest()]


_COMPILE_ONE_SIGNATURE = """
import os, sys, time
import numpy as np
from numba.core import caching
import gridgraph.core
from gridgraph.core import _unionfind
dtype, mode, start = sys.argv[1:4]
if mode == "unlocked":
    caching.Cache.save_overload = caching.Cache.save_overload.__wrapped__
    caching.Cache.load_overload = caching.Cache.load_overload.__wrapped__
save_index = caching.IndexDataCacheFile._save_index
def meeting_save_index(self, overloads):
    # numba has just read the index: wait (5 s at most) until the other
    # process has read it too, as two compiles ending together would
    open(f"{start}-read-{dtype}", "w").close()
    other = f"{start}-read-" + ("int64" if dtype == "int32" else "int32")
    deadline = time.monotonic() + 5
    while not os.path.exists(other) and time.monotonic() < deadline:
        time.sleep(0.01)
    save_index(self, overloads)
caching.IndexDataCacheFile._save_index = meeting_save_index
open(f"{start}-ready-{dtype}", "w").close()
while not os.path.exists(start):
    time.sleep(0.01)
parent = np.arange(4, dtype=dtype)
assert _unionfind.find_root(parent, 3) == 3
"""

_CACHED_DATA = """
import os
import gridgraph.core
from gridgraph.core import _unionfind as u
cache = u.find_root._cache
names = list(cache._cache_file._load_index().values())
print(sorted(names), all(os.path.exists(os.path.join(cache._cache_path, n))
                         for n in names))
"""


def _run_together(scripts, environment, start):
    """Start ``scripts`` (argument lists for python -c), let them go at
    once when each has written ``start-ready-<its first argument>``, and
    wait for them; each must succeed.  Returns their outputs."""
    import subprocess
    import sys
    processes = [subprocess.Popen([sys.executable, "-c", *script],
                                  env=environment, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for script in scripts]
    outputs = []
    try:
        deadline = time.monotonic() + 300
        while not all(os.path.exists(f"{start}-ready-{script[1]}")
                      for script in scripts):
            for process in processes:
                if process.poll() is not None:
                    assert process.returncode == 0, process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        start.write_text("")
        for process in processes:
            output, errors = process.communicate(timeout=300)
            assert process.returncode == 0, errors[-2000:]
            outputs.append(output)
        return outputs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


@pytest.mark.parametrize("locked", [True, False])
def test_two_processes_caching_two_signatures_keep_both(tmp_path, locked):
    """Two processes compile two signatures of one kernel at once: numba
    alone can give both the same data file (the index then names one
    signature's code for the other); with the lock each keeps its own."""
    import subprocess
    import sys
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    start = tmp_path / "start"
    mode = "locked" if locked else "unlocked"
    _run_together([[_COMPILE_ONE_SIGNATURE, dtype, mode, str(start)]
                   for dtype in ("int32", "int64")], environment, start)
    cached = subprocess.run([sys.executable, "-c", _CACHED_DATA],
                            env=environment, capture_output=True, text=True,
                            check=True).stdout.split("] ")
    names = cached[0].strip("[").split(", ")
    assert cached[1].strip() == "True"  # every named data file exists
    if locked:
        assert len(names) == len(set(names)) == 2, names
    else:  # the race the lock closes, shown without it: one key lost
        assert len(names) == 1, names


_WRITE_AFTER_A_FLUSH = """
import os, sys, time
import numpy as np
from numba.core import caching
import gridgraph.core
from gridgraph.core import _unionfind
role, mode, start = sys.argv[1:4]
if mode == "unlocked":
    caching.Cache.save_overload = caching.Cache.save_overload.__wrapped__
    caching.Cache.load_overload = caching.Cache.load_overload.__wrapped__
indexed = f"{start}-indexed"
if role == "writer":
    # int64's code in the first data file, then the index emptied (as a
    # refresh does): int32's save takes that file's number again
    _unionfind.find_root(np.arange(4, dtype=np.int64), 3)
    _unionfind.find_root._cache.flush()
    save_data = caching.IndexDataCacheFile._save_data
    def slow_save_data(self, name, data):
        open(indexed, "w").close()  # the index is written, the data not yet
        time.sleep(3)
        save_data(self, name, data)
    caching.IndexDataCacheFile._save_data = slow_save_data
open(f"{start}-ready-{role}", "w").close()
while not os.path.exists(start):
    time.sleep(0.01)
if role == "writer":
    _unionfind.find_root(np.arange(4, dtype=np.int32), 3)
else:
    from numba import types
    while not os.path.exists(indexed):
        time.sleep(0.005)
    # loaded from the cache, not called (the wrong code would read past
    # the array)
    _unionfind.find_root.compile((types.Array(types.int32, 1, "C"),
                                  types.int64))
    print([str(s[0].dtype) for s in _unionfind.find_root.signatures])
"""


@pytest.mark.parametrize("locked", [True, False])
def test_a_read_waits_for_the_data_file_its_index_names(tmp_path, locked):
    """numba writes a kernel's index before its data file: a process
    loading between the two, after a refresh emptied the index, reads an
    older data file of the same number (another signature's code).  With
    the lock the read waits for the write."""
    import subprocess
    import sys
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    start = tmp_path / "start"
    mode = "locked" if locked else "unlocked"
    subprocess.run([sys.executable, "-c", "import gridgraph.core"],
                   env=environment, check=True)  # the digest's marker
    _, output = _run_together(
        [[_WRITE_AFTER_A_FLUSH, role, mode, str(start)]
         for role in ("writer", "reader")], environment, start)
    # the signature numba registered for the int32 call it loaded
    assert output.strip() == ("['int32']" if locked else "['int64']")


def test_the_package_import_leaves_the_warm_up_module_alone(tmp_path):
    """``python -m gridgraph.core.warmup`` runs the module as the main
    module of every process it starts: importing the package must not
    import it first (runpy warned that it was imported twice), also when
    the digest is new and every module is imported for its kernels."""
    import subprocess
    import sys
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    code = ("import runpy, sys, warnings\n"
            "import gridgraph.core\n"
            "assert 'gridgraph.core.warmup' not in sys.modules\n"
            "warnings.simplefilter('error', RuntimeWarning)\n"
            "runpy.run_module('gridgraph.core.warmup', "
            "run_name='__mp_main__')\n")
    result = subprocess.run([sys.executable, "-c", code], env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    # the digest was new in that cache folder: the refresh ran
    assert any(name.startswith("gridgraph-sources-")
               for name in os.listdir(tmp_path))
