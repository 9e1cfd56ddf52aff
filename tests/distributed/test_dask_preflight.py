"""The preflight before any tile work on a Dask cluster
(core/distributed.py), and the runs it refuses: calls on all workers
with timeouts, workers of another version or code, hung or slow
workers, cold workers warmed, an unreachable scheduler, an in-memory
array, a path the workers cannot open; a scheduler address opens and
closes its own client.
"""

import functools
import os
import random
import socket
import time

import numpy as np
import pytest

from gridgraph.core import (GridGraphError, InvalidInputError,
                            connected_components, cost_distance, distributed,
                            tile_io)

from dask_helpers import TILE, save_npy, assert_same, costs, batch_intervals

pytest.importorskip("distributed")

# sys.path without the folder above the checkout, for the workers
pytestmark = pytest.mark.usefixtures("worker_sys_path")


@pytest.mark.parametrize("by_run", [True, False])
def test_a_run_asks_the_workers_twice(client, tmp_path, monkeypatch,
                                      by_run):
    """A tiled run on a warm cluster: the workers' batching intervals are
    set by the preflight's own client.run (by a client.run of their own
    with the preflight as tasks, PREFLIGHT_BY_RUN off) and set back, with
    the malloc settings, by one client.run at the end: two calls in all.
    The scheduler is asked for its workers three times: for the backend
    (GPU workers?), the tile plan and the run.  Dask's own intervals are
    back after the run."""
    monkeypatch.setattr(distributed, "PREFLIGHT_BY_RUN", by_run)
    memmap = save_npy(tmp_path, "v", (np.random.default_rng(5).random(
        (40, 44)) < 0.5).astype(np.uint8))
    expected = connected_components(np.asarray(memmap), connectivity=8)
    connected_components(memmap, tile_size=TILE, executor=client)  # warm
    before = batch_intervals(client)
    calls = []
    during = []
    for name in ("run", "scheduler_info"):
        real = getattr(client, name)

        def spy(*arguments, _real=real, _name=name, **keywords):
            calls.append(_name)
            return _real(*arguments, **keywords)
        monkeypatch.setattr(client, name, spy)

    def look(fraction):
        if not during:
            during.append(list(calls))
    result = connected_components(memmap, connectivity=8, tile_size=TILE,
                                  executor=client, progress=look)
    monkeypatch.undo()
    np.testing.assert_array_equal(result.labels, expected.labels)
    assert calls.count("run") == 2
    assert calls.count("scheduler_info") == 3
    assert during[0][-1] == "run" and "scheduler_info" in during[0]
    assert batch_intervals(client) == before


def set_stream_interval(seconds, dask_worker=None):
    dask_worker.batched_stream.interval = seconds


def test_intervals_set_back_after_a_failed_preflight(client, tmp_path,
                                                     monkeypatch):
    """A preflight that finds a problem (a worker running other code)
    after it set the workers' batching intervals: the run fails, naming
    the worker, and every interval is what it was before, here not Dask's
    own on the workers (as another client's run might have left them)."""
    before = batch_intervals(client)
    client.run(set_stream_interval, 0.003)
    try:
        memmap = save_npy(tmp_path, "v", np.ones((16, 16)))
        monkeypatch.setattr(distributed, "code_fingerprint",
                            lambda: "0.0+old")
        with pytest.raises(GridGraphError, match="the driver 0.0\\+old"):
            connected_components(memmap, tile_size=TILE, executor=client)
        monkeypatch.undo()
        assert batch_intervals(client) == (
            before[0], before[1], [0.003] * len(before[2]))
    finally:
        client.run(set_stream_interval, distributed.DASK_FROM_WORKER_S)
    assert batch_intervals(client) == before


def test_preflight_names_a_worker_of_an_older_version(client, tmp_path,
                                                      monkeypatch):
    """A worker whose GridGraph is an older version (no interval setter,
    worker_check of five arguments) still answers the preflight's
    client.run, and the run fails naming its version, not with the
    preflight unable to run."""
    memmap = save_npy(tmp_path, "v", np.ones((16, 16)))
    client.run(hide_worker_interval)
    try:
        monkeypatch.setattr(distributed, "code_fingerprint",
                            lambda: "9.9+new")
        with pytest.raises(GridGraphError) as error:
            connected_components(memmap, tile_size=TILE, executor=client)
    finally:
        client.run(restore_worker_interval)
    assert "the driver 9.9+new" in str(error.value)
    assert "could not run" not in str(error.value)


def test_preflight_that_hangs_fails_naming_the_workers(client, tmp_path,
                                                       monkeypatch):
    """Workers whose preflight task (the kernels' warm-up) does not finish
    in PREFLIGHT_TIMEOUT_S fail the run with a ClusterError naming them,
    instead of hanging it; a worker that passed the warm-up before is not
    named."""
    source = tile_io.open_source(save_npy(tmp_path, "v", np.zeros(
        (8, 8), np.uint8)))
    distributed.preflight(client, [source], None)  # the workers' imports
    # a warm-up no worker has passed (unique to this run), 3 s long
    warm_up = functools.partial(time.sleep, 3.0 + random.random() / 1000)
    warm, *cold = sorted(client.scheduler_info()["workers"])
    client.run(mark_warmed, distributed._warm_up_key(warm_up),
               workers=[warm])
    monkeypatch.setattr(distributed, "PREFLIGHT_TIMEOUT_S", 1)
    start = time.monotonic()
    with pytest.raises(distributed.ClusterError) as error:
        distributed.preflight(client, [source], None, warm_up=warm_up)
    assert time.monotonic() - start < 2.9
    message = str(error.value)
    assert "did not finish within 1 s" in message
    assert cold and all(address in message for address in cold)
    assert warm not in message
    time.sleep(3)  # the workers' threads free again for the next tests


def mark_warmed(key):
    """Runs on a worker: the warm-up ``key`` counted as passed there."""
    from gridgraph.core import distributed
    distributed._WARMED_UP.add(key)


@pytest.mark.parametrize("by_run", [True, False])
def test_every_call_on_all_workers_has_a_timeout(client, tmp_path,
                                                 monkeypatch, by_run):
    """Each client.run and run_on_scheduler of a tiled run carries a
    timeout (a worker whose event loop hangs cannot hang the run), with
    the preflight's checks by client.run or as tasks."""
    monkeypatch.setattr(distributed, "PREFLIGHT_BY_RUN", by_run)
    memmap = save_npy(tmp_path, "v", (np.random.default_rng(6).random(
        (30, 34)) < 0.5).astype(np.uint8))
    keywords = []
    for name in ("run", "run_on_scheduler"):
        real = getattr(client, name)

        def spy(*arguments, _real=real, _name=name, **given):
            keywords.append((_name, given.get("callback_timeout")))
            return _real(*arguments, **given)
        monkeypatch.setattr(client, name, spy)
    connected_components(memmap, tile_size=TILE, executor=client)
    cost_distance(save_npy(tmp_path, "c", costs((20, 19), 3)), [(2, 3)],
                  tile_size=TILE, executor=client)
    monkeypatch.undo()
    assert {name for name, _ in keywords} == {"run", "run_on_scheduler"}
    assert all(timeout in (distributed.DASK_CALL_TIMEOUT_S,
                           distributed.PREFLIGHT_CHECK_TIMEOUT_S)
               for _, timeout in keywords), keywords


def test_preflight_checks_slow_to_answer_run_as_tasks(client, tmp_path,
                                                      monkeypatch):
    """The preflight's client.run timing out (a worker slow to answer from
    its event loop) is not an error: every worker is checked by a task
    instead, the run's labels are the same, and Dask's own batching
    intervals are back afterwards."""
    memmap = save_npy(tmp_path, "v", (np.random.default_rng(8).random(
        (26, 30)) < 0.5).astype(np.uint8))
    expected = connected_components(np.asarray(memmap), connectivity=8)
    before = batch_intervals(client)
    monkeypatch.setattr(distributed, "PREFLIGHT_CHECK_TIMEOUT_S", 1e-4)
    submitted = []
    real = client.submit

    def spy(function, *arguments, **keywords):
        submitted.append(keywords.get("key", ""))
        return real(function, *arguments, **keywords)
    monkeypatch.setattr(client, "submit", spy)
    result = connected_components(memmap, connectivity=8, tile_size=TILE,
                                  executor=client)
    monkeypatch.undo()
    np.testing.assert_array_equal(result.labels, expected.labels)
    workers = client.scheduler_info()["workers"]
    assert sum(key.startswith("gridgraph-preflight-")
               for key in submitted) == len(workers)
    assert batch_intervals(client) == before


def test_no_call_on_all_workers_in_core_lacks_a_timeout():
    """Every ``.run(`` and ``.run_on_scheduler(`` call in core/ (those
    the run-time tests above do not reach too: the GPU workers' report,
    the step pools' malloc settings) passes ``callback_timeout``."""
    import ast
    import pathlib
    core = pathlib.Path(distributed.__file__).parent
    missing, found = [], 0
    for path in sorted(core.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and \
                    isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("run", "run_on_scheduler") and \
                    "client" in ast.unparse(node.func.value):
                found += 1
                if "callback_timeout" not in [k.arg for k in node.keywords]:
                    missing.append(f"{path.name}:{node.lineno}")
    assert found >= 8 and not missing, missing


def hide_worker_interval():
    """Runs on a worker: its GridGraph as an older version's, without the
    interval setter and with worker_check taking five arguments."""
    from gridgraph.core import distributed
    real = distributed.worker_check

    def worker_check(sources, out_dir, token, warm_up, warmed=None):
        return real(sources, out_dir, token, warm_up, warmed)

    distributed._hidden = (distributed.worker_interval, real)
    del distributed.worker_interval
    distributed.worker_check = worker_check


def restore_worker_interval():
    from gridgraph.core import distributed
    distributed.worker_interval, distributed.worker_check = \
        distributed.__dict__.pop("_hidden")


def test_scheduler_address_opens_and_closes_its_own_client(cluster,
                                                           tmp_path):
    local_cluster, client = cluster
    values = np.random.default_rng(1).integers(0, 2, (17, 18))
    expected = connected_components(values)
    before = len(client.scheduler_info()["workers"])
    result = connected_components(save_npy(tmp_path, "v", values),
                                  tile_size=TILE,
                                  executor=local_cluster.scheduler_address)
    assert_same(result, expected, ["labels"])
    clients = client.run_on_scheduler(
        lambda dask_scheduler: len(dask_scheduler.clients))
    deadline = time.monotonic() + 10
    while clients > 2 and time.monotonic() < deadline:  # ours + fire-and-forget
        time.sleep(0.1)
        clients = client.run_on_scheduler(
            lambda dask_scheduler: len(dask_scheduler.clients))
    assert clients <= 2
    assert len(client.scheduler_info()["workers"]) == before


def test_unreachable_scheduler_fails_fast(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    memmap = save_npy(tmp_path, "v", np.ones((16, 16)))
    start = time.monotonic()
    with pytest.raises(InvalidInputError) as error:
        connected_components(memmap, executor=address)
    assert time.monotonic() - start < distributed.CONNECT_TIMEOUT_S + 2
    assert address in str(error.value)
    assert "scheduler" in str(error.value)
    with pytest.raises(InvalidInputError, match="tcp://host:8786"):
        connected_components(memmap, executor="localhost")


def test_in_memory_array_is_refused_with_the_fix(client):
    with pytest.raises(InvalidInputError) as error:
        cost_distance(np.ones((16, 16)), [(0, 0)], executor=client)
    assert "in-memory array" in str(error.value)
    assert "mmap_mode" in str(error.value) and "GeoTIFF" in str(error.value)


def test_relative_path_workers_cannot_open(client, tmp_path, monkeypatch):
    pytest.importorskip("osgeo")
    from conftest import write_geotiff
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    write_geotiff(tmp_path / "values.tif", np.ones((16, 16)))
    monkeypatch.chdir(tmp_path)
    before = client.run(os.getcwd)
    client.run(os.chdir, str(elsewhere))
    try:
        with pytest.raises(GridGraphError) as error:
            connected_components("values.tif", tile_size=TILE,
                                 executor=client)
    finally:
        for address, folder in before.items():
            client.run(os.chdir, folder, workers=[address])
    message = str(error.value)
    assert "cannot open the input 'values.tif'" in message
    for address in before:
        assert f"worker {address}" in message
    assert "absolute paths on shared storage" in message


def test_preflight_names_a_worker_running_other_code(client, tmp_path,
                                                     monkeypatch):
    memmap = save_npy(tmp_path, "v", np.ones((16, 16)))
    monkeypatch.setattr(distributed, "code_fingerprint", lambda: "0.0+old")
    with pytest.raises(GridGraphError) as error:
        connected_components(memmap, tile_size=TILE, executor=client)
    assert "the driver 0.0+old" in str(error.value)
    assert "worker tcp://127.0.0.1" in str(error.value)


def forget_warm_ups():
    """Runs on a worker: as if no warm-up had run in this process."""
    from gridgraph.core import distributed
    distributed._WARMED_UP.clear()


def warm_ups():
    from gridgraph.core import distributed
    return len(distributed._WARMED_UP)


@pytest.mark.parametrize("by_run", [True, False])
def test_preflight_tasks_only_for_cold_workers(client, tmp_path, monkeypatch,
                                               by_run):
    """PREFLIGHT_BY_RUN: the checks go to every worker in one client.run
    and only workers that have not passed the warm-up get a preflight
    task (which warms them up); off, every worker gets one each run.  The
    result is the same."""
    monkeypatch.setattr(distributed, "PREFLIGHT_BY_RUN", by_run)
    memmap = save_npy(tmp_path, "v", (np.arange(24 * 20).reshape(24, 20)
                                      % 3).astype(np.int16))
    expected = connected_components(np.asarray(memmap))
    submitted = []
    real_submit = client.submit

    def submit(function, *arguments, **keywords):
        if str(keywords.get("key", "")).startswith("gridgraph-preflight"):
            submitted.append(keywords["workers"])
        return real_submit(function, *arguments, **keywords)

    connected_components(memmap, tile_size=TILE, executor=client)  # warm
    monkeypatch.setattr(client, "submit", submit)
    workers = sorted(client.run(os.getpid))
    client.run(forget_warm_ups, workers=workers[:1])
    for cold in (workers[:1], []):
        submitted.clear()
        result = connected_components(memmap, tile_size=TILE,
                                      executor=client)
        np.testing.assert_array_equal(result.labels, expected.labels)
        assert sorted(w for ws in submitted for w in ws) == (
            cold if by_run else workers)
        assert min(client.run(warm_ups).values()) >= 1
