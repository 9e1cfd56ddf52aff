"""Tile tasks on a Dask cluster (``executor=`` a client or a scheduler
address): every output identical to the in-process run, also when a worker
dies mid-run; clean failures (unreachable scheduler, workers that cannot
open the input, too many worker deaths, cancel) that leave no partial file.

One ``LocalCluster`` of two worker processes on loopback serves the module;
rasters are small and tiles 8 cells wide so that every run crosses many
seams while the per-task overhead stays small.
"""

import functools
import itertools
import os
import random
import signal
import socket
import sys
import time

import numpy as np
import pytest

from gridgraph.core import (CancelledError, GridGraphError,
                            InvalidInputError, connected_components,
                            cost_distance, distributed, minimum_spanning_tree,
                            tile_io)

pytest.importorskip("distributed")

TILE = 8


@pytest.fixture(scope="module", autouse=True)
def worker_sys_path():
    """Worker processes start with this process's sys.path: leave out the
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


@pytest.fixture(scope="module")
def cluster(worker_sys_path):
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield cluster, client


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
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


def save_npy(folder, name, array):
    """``array`` as a .npy file, opened as a read-only memmap (a raster
    every worker can open)."""
    path = os.path.join(folder, name + ".npy")
    np.save(path, array)
    return np.load(path, mmap_mode="r")


def assert_same(result, expected, names):
    for name in names:
        np.testing.assert_array_equal(getattr(result, name),
                                      getattr(expected, name), err_msg=name)


def assert_components_on_dask(client, tmp_path, seed, shape=(64, 72)):
    """Components (8-connected, ``nonzero``) of a random mask run on the
    cluster into ``tmp_path/out``: the in-process labels, and ``out``
    holds labels.npy only."""
    values = (np.random.default_rng(seed).random(shape) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, connectivity=8, mode="nonzero",
                                  tile_size=TILE, executor=client,
                                  out_dir=out)
    assert result.count == expected.count > 20
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]


def costs(shape, seed):
    rng = np.random.default_rng(seed)
    cost = rng.integers(1, 5, shape).astype(np.float64)
    cost[rng.random(shape) < 0.1] = np.nan
    return cost


SOURCES = [(1, 2), (17, 20), (11, 4)]


def scheduler_tasks(client):
    """The keys the scheduler holds."""
    return set(client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks]))


def no_new_tasks(client, before, timeout=10):
    """True once the scheduler holds no task beyond ``before``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not scheduler_tasks(client) - before:
            return True
        time.sleep(0.1)
    return False


# ------------------------------------------------------------ identical

@pytest.mark.parametrize("connectivity,mode", [(4, "equal"), (8, "nonzero")])
def test_components_identical(client, tmp_path, connectivity, mode):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 3, (21, 19)) if mode == "equal" else \
        (rng.random((21, 19)) < 0.3).astype(np.int64)
    expected = connected_components(values, connectivity=connectivity,
                                    mode=mode)
    memmap = save_npy(tmp_path, "values", values.astype(np.int16))
    result = connected_components(memmap, connectivity=connectivity,
                                  mode=mode, tile_size=TILE, executor=client)
    assert result.count == expected.count > 5
    assert_same(result, expected, ["labels"])


def test_run_tasks_batched_on_dask(client, monkeypatch):
    """batch="auto": tiles grouped into a few Dask tasks per worker thread,
    every result handed on in its place."""
    import operator

    from gridgraph.core import tiling
    marks = []
    results = tiling.run_tasks(operator.mul, [(k, 3) for k in range(50)],
                               client, progress=marks.append, batch="auto")
    assert results == [3 * k for k in range(50)]
    # 2 one-thread workers: 4 batches a thread of 50 / 8 tasks, the larger
    # first (tile_tasks.batch_sizes): 8 batches (a mark per batch or
    # fewer); one task each would give at least 50 / 4 marks (4 tasks in
    # flight)
    assert tiling.batch_sizes(50, 2) == [7] * 2 + [6] * 6
    assert len(marks) <= 8 and marks[-1] == 1.0
    seen = {}
    tiling.run_tasks(operator.mul, ((k, 2) for k in range(20)), client,
                     on_result=seen.__setitem__, count=20, batch="auto")
    assert seen == {k: 2 * k for k in range(20)}


def test_run_tasks_batches_are_the_dask_tasks(client):
    """Each batch of tile_tasks.batch_sizes is one Dask task running its
    tiles in order (batches of one size)."""
    from gridgraph.core import tiling
    results = tiling.run_tasks(task_key, [(k,) for k in range(40)], client,
                               batch="auto")
    assert [k for k, _ in results] == list(range(40))
    keys = [key for _, key in results]
    sizes = [len(list(group)) for _, group in itertools.groupby(keys)]
    assert len(set(keys)) == len(sizes)  # each Dask task's tiles together
    assert sizes == tiling.batch_sizes(40, 2) == [5] * 8


@pytest.mark.parametrize("at_once", [True, False])
@pytest.mark.parametrize("batch", [None, "auto"])
def test_run_tasks_round_submitted_at_once(client, monkeypatch, batch,
                                           at_once):
    """DASK_SUBMIT_ROUND_AT_ONCE: every task of a round of small tasks
    (at_once=True) is with the scheduler when the first result is handed
    on (one message, Dask starting each next task); off, at most 2 a
    worker thread are in flight.  Either way every result is handed on in
    its place."""
    import operator

    from gridgraph.core import tile_tasks, tiling
    monkeypatch.setattr(tile_tasks, "DASK_SUBMIT_ROUND_AT_ONCE", at_once)
    held, seen = [], {}

    def on_result(index, value):
        if not held:
            held.append(sum(key.startswith("mul-")
                            for key in scheduler_tasks(client)))
        seen[index] = value

    tiling.run_tasks(operator.mul, [(k, 3) for k in range(40)], client,
                     on_result=on_result, batch=batch, at_once=True)
    assert seen == {k: 3 * k for k in range(40)}
    tasks = 40 if batch is None else len(tiling.batch_sizes(40, 2))
    assert held[0] == tasks if at_once else held[0] <= 4 < tasks


@pytest.mark.parametrize("batch,at_once", [(None, False), ("auto", True)])
def test_run_tasks_until_on_dask(client, batch, at_once):
    """until: no task submitted once it says so; the ones in flight (at most
    DASK_IN_FLIGHT_PER_THREAD a thread) finish and are handed on, not
    cancelled.  A round given ``until`` runs task by task whatever its
    batch and at_once."""
    import operator

    from gridgraph.core import distributed, tile_tasks, tiling
    seen = {}
    tiling.run_tasks(operator.mul, [(k, 3) for k in range(60)], client,
                     on_result=seen.__setitem__, batch=batch,
                     at_once=at_once, until=lambda: len(seen) >= 3)
    limit = tile_tasks.DASK_IN_FLIGHT_PER_THREAD * \
        distributed.cluster_threads(client)
    assert 3 <= len(seen) <= 3 + limit < 60
    assert seen == {k: 3 * k for k in seen}
    # what the scheduler still holds of them: tasks handed on (released
    # as their futures go), none submitted and left behind
    held = {int(key.rsplit("-", 1)[1]) for key in scheduler_tasks(client)
            if key.startswith("mul-")}
    assert held <= set(seen)


def set_heap_kept(on):
    """tile_tasks.HEAP_KEPT_IN_BATCHES in a worker."""
    from gridgraph.core import tile_tasks
    tile_tasks.HEAP_KEPT_IN_BATCHES = on


def task_key(k):
    """``(k, key of the Dask task running this call)``."""
    from distributed import get_worker
    return k, str(get_worker().get_current_task())


def numba_threads_in_task(*_):
    """numba's thread count for parallel kernels on this thread."""
    import numba
    return numba.get_num_threads()


def worker_numba_pool():
    import numba
    return numba.config.NUMBA_NUM_THREADS


def test_tile_tasks_keep_numba_to_their_thread(client):
    """Dask tile tasks (a round of run_tasks, batched or not, and a
    TaskPool's, with and without locality) run numba's parallel kernels on
    their own thread (tile_tasks.DASK_TASK_NUMBA_THREADS), whatever the
    worker's NUMBA_NUM_THREADS; a later plain task on the same worker
    thread gets the worker's setting back."""
    from gridgraph.core import task_pool, tile_tasks
    pools = client.run(worker_numba_pool)
    if min(pools.values()) < 2:
        pytest.skip("the workers' numba pools hold one thread: a task "
                    "limited to one looks the same")
    assert tile_tasks.run_tasks(numba_threads_in_task, [()] * 6,
                                client) == [1] * 6
    assert tile_tasks.run_tasks(numba_threads_in_task, [()] * 6, client,
                                batch="auto") == [1] * 6
    for locality in (False, True):
        pool = task_pool.TaskPool(client, keep=locality, name="threads",
                                  locality=locality)
        try:
            for tag in range(3):
                pool.submit(tag, (lambda: (numba_threads_in_task(), None))
                            if locality else numba_threads_in_task)
            done = sorted(pool.next_done() for _ in range(3))
        finally:
            pool.close()  # (its steps' workers keep freed memory till then)
        if locality:
            done = [(tag, message) for tag, (message, _) in done]
        assert done == [(0, 1), (1, 1), (2, 1)]
    for worker, pool in pools.items():  # one thread each: the same thread
        assert client.submit(numba_threads_in_task, pure=False,
                             workers=[worker]).result() == pool


def step_state(state, add):
    """A TaskPool step: ``(message, state)`` from the last state."""
    state = (0 if state is None else state) + add
    return state * 10, state


def read_state(state):
    return state


@pytest.mark.parametrize("locality", [False, True])
@pytest.mark.parametrize("pushed", [True, False])
def test_task_pool_keeps_each_state_in_its_task(client, monkeypatch,
                                                locality, pushed):
    """A TaskPool with keep=True: each step is one task holding its
    (message, state); its message comes to the driver as an event the task
    logs (pushed) or from one small task taking it out (no third task for
    the state); a later step, and a run_tasks round, given the step's
    future run on its state."""
    from gridgraph.core import task_pool, tile_tasks
    monkeypatch.setattr(task_pool, "PUSHED_MESSAGES", pushed)

    def no_fallback(pool, key):
        raise AssertionError(f"step {key}'s message event never came")

    monkeypatch.setattr(task_pool.TaskPool, "_fetch_message", no_fallback)
    pool = task_pool.TaskPool(client, keep=True, name="kept-step",
                              locality=locality)
    topic = pool._topic
    state = None
    for add in (1, 2, 3):
        pool.submit("tile", step_state, state, add)
        (waited_on, (tag, step, _)), = pool.outstanding.items()
        assert waited_on.key == step.key + ("" if pushed else "-message")
        tag, (message, state) = pool.next_done()
        assert tag == "tile" and state is step
        assert message == 10 * sum(range(1, add + 1))
        held = {k for k in scheduler_tasks(client)
                if k.startswith(step.key)}
        # the step's own task holds the state; no other task of the step
        assert step.key in held <= (
            {step.key} if pushed else {step.key, step.key + "-message"})
    pool.close()
    assert tile_tasks.run_tasks(read_state, [(state,)], client) == [6]
    if pushed:  # the scheduler forgot the pool's events
        assert not client.run_on_scheduler(scheduler_has_topic, topic)


def step_keeps_freed_memory(state, add):
    from gridgraph.core import tile_tasks
    assert tile_tasks.freed_memory_kept or tile_tasks._MALLOPT is None
    return step_state(state, add)


def keeps_freed_memory():
    from gridgraph.core import tile_tasks
    return tile_tasks.freed_memory_kept


@pytest.mark.parametrize("kept", [True, False])
def test_task_pool_steps_keep_freed_memory_until_close(client, monkeypatch,
                                                       kept):
    """With STEP_HEAP_KEPT a step runs with freed memory kept in the
    worker's heap, which stays so after the step (for the next one); the
    pool's close sets every worker's own malloc settings back.  Without
    it nothing is kept."""
    from gridgraph.core import task_pool, tile_tasks
    if tile_tasks._MALLOPT is None:
        pytest.skip("no glibc mallopt here")
    monkeypatch.setattr(tile_tasks, "STEP_HEAP_KEPT", kept)
    client.run(tile_tasks.own_malloc_settings)
    pool = task_pool.TaskPool(client, keep=True, name="heap-kept")
    pool.submit("tile", step_keeps_freed_memory if kept else step_state,
                None, 2)
    tag, (message, state) = pool.next_done()
    assert (tag, message) == ("tile", 20)
    try:
        assert any(client.run(keeps_freed_memory).values()) == kept
    finally:
        pool.close()
    assert not any(client.run(keeps_freed_memory).values())


@pytest.mark.parametrize("kept", [True, False])
def test_tile_tasks_keep_freed_memory_until_the_run_ends(client, tmp_path,
                                                         monkeypatch, kept):
    """With TASK_HEAP_KEPT a round run tile by tile leaves each worker's
    freed memory in its heap after the tasks (for the next one) until the
    tiled run ends; without it every task sets the worker's own malloc
    settings back at its end.  Inside a task it is kept either way."""
    from gridgraph.core import distributed, tile_tasks
    from gridgraph.core.tile_io import open_source
    if tile_tasks._MALLOPT is None:
        pytest.skip("no glibc mallopt here")
    monkeypatch.setattr(tile_tasks, "TASK_HEAP_KEPT", kept)
    client.run(tile_tasks.own_malloc_settings)
    source = open_source(save_npy(tmp_path, "cost", costs((20, 23), 8)))
    with distributed.tile_executor(client, [source]) as executor:
        assert tile_tasks.run_tasks(keeps_freed_memory, [()] * 6,
                                    executor) == [True] * 6
        assert any(client.run(keeps_freed_memory).values()) == kept
    assert not any(client.run(keeps_freed_memory).values())


def test_tiled_run_sets_workers_malloc_back(client, tmp_path):
    # a worker left keeping freed memory during a run (a step started after
    # its pool's close) gets its own settings back when the run ends
    from gridgraph.core import distributed, tile_tasks
    from gridgraph.core.tile_io import open_source
    if tile_tasks._MALLOPT is None:
        pytest.skip("no glibc mallopt here")
    source = open_source(save_npy(tmp_path, "cost", costs((20, 23), 8)))
    with distributed.tile_executor(client, [source]) as executor:
        executor.run(tile_tasks.keep_freed_memory)
        assert all(client.run(keeps_freed_memory).values())
    assert not any(client.run(keeps_freed_memory).values())


def scheduler_has_topic(topic, dask_scheduler=None):
    return topic in dask_scheduler._broker._topics


def test_task_pool_message_without_its_event(client, monkeypatch):
    # a step whose message event never comes (logged under a topic nobody
    # listens to): fetched with a task once the step has been finished
    # for the grace time
    from gridgraph.core import task_pool, tile_tasks
    monkeypatch.setattr(task_pool, "PUSHED_MESSAGE_GRACE_S", 0.2)
    pool = task_pool.TaskPool(client, keep=True, name="lost-event")
    listened = pool._topic
    pool._topic = listened + "-nobody"
    pool.submit("tile", step_state, None, 4)
    tag, (message, state) = pool.next_done()
    assert (tag, message) == ("tile", 40)
    assert tile_tasks.run_tasks(read_state, [(state,)], client) == [4]
    pool._topic = listened
    pool.close()


def failing_step(state):
    raise ValueError("this tile cannot be solved")


def test_task_pool_step_error_raised(client):
    # a failed step logs no event: its error comes from its future
    from gridgraph.core import task_pool
    pool = task_pool.TaskPool(client, keep=True, name="failing")
    pool.submit("tile", failing_step, None)
    with pytest.raises(ValueError, match="cannot be solved"):
        pool.next_done()
    pool.cancel()


@pytest.mark.parametrize("writes,kept,switches", [
    ("mapped", False, False), ("pwrite", False, False),
    ("mapped", True, False), ("pwrite", True, False),
    ("mapped", False, True), ("mapped", True, True)])
def test_components_many_tiles_batched(client, tmp_path, monkeypatch,
                                       request, writes, kept, switches):
    """72 tiles on 2 workers: both rounds batched (9 tiles a Dask task,
    fewer at the end), labels written by the tasks into out_dir (through
    shared mappings of the reserved file or with pwrite) or gathered
    here; with ``kept`` round 1's
    labels stay on the workers, one future per batch, and round 3
    renumbers them there; ``switches``: the heap kept in the batches
    (set on the workers too)."""
    from gridgraph.core import tiling
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES",
                        writes == "mapped")
    client.run(set_heap_kept, switches)
    request.addfinalizer(lambda: client.run(set_heap_kept, False))
    monkeypatch.setattr(components_tiled, "KEPT_LABELS_SHARE",
                        0.25 if kept else 0.0)
    groups = []
    real_kept_groups = tiling.kept_groups
    monkeypatch.setattr(tiling, "kept_groups", lambda states: groups.append(
        real_kept_groups(states)) or groups[-1])
    values = (np.random.default_rng(11).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    for out_dir in (out, None):
        result = connected_components(memmap, connectivity=8, mode="nonzero",
                                      tile_size=TILE, executor=client,
                                      out_dir=out_dir)
        assert result.count == expected.count > 20
        assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]  # no partial file
    if kept:  # a group per summary batch, the tiles in batch order
        sizes = tiling.batch_sizes(72, 2)
        assert [len(parts) for _, parts in groups[0]] == sizes
        assert [index for _, parts in groups[0] for index, _ in parts] == [
            k for size in sizes for k in range(size)]
    else:
        assert not groups


@pytest.mark.parametrize("connectivity", [4, 8])
def test_mst_identical_every_output(client, tmp_path, connectivity):
    values = np.random.default_rng(5).integers(0, 9, (19, 22)).astype(
        np.float32)
    values[4, 5] = np.nan
    expected = minimum_spanning_tree(values, connectivity=connectivity)
    memmap = save_npy(tmp_path, "values", values)
    result = minimum_spanning_tree(memmap, connectivity=connectivity,
                                   tile_size=TILE, executor=client)
    assert_same(result, expected, ["edges", "weights", "parent_direction"])
    assert (result.total_weight, result.trees) == (expected.total_weight,
                                                   expected.trees)
    out = tmp_path / "out"
    out.mkdir()
    no_edges = minimum_spanning_tree(memmap, connectivity=connectivity,
                                     tile_size=TILE, executor=client,
                                     edges=False, out_dir=out)
    assert_same(no_edges, expected, ["parent_direction"])
    assert no_edges.total_weight == expected.total_weight
    assert sorted(os.listdir(out)) == ["parent_direction.npy"]


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_cost_distance_identical_every_output(client, tmp_path,
                                              connectivity):
    cost = costs((20, 23), connectivity)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3],
                             connectivity=connectivity)
    memmap = save_npy(tmp_path, "cost", cost)
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(memmap, SOURCES, source_ids=[1, 2, 3],
                           connectivity=connectivity, tile_size=TILE,
                           executor=client, out_dir=out)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    assert set(np.unique(expected.allocation)) == {0, 1, 2, 3}
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


@pytest.mark.parametrize("ids", [[1, 1, 1], [1, 2, 3]])
def test_cost_distance_hops_only_for_ties(client, tmp_path, ids):
    # real-valued costs: no tie, no hops visit; a plateau in one corner:
    # the hops run after the first pass of the labels (several ids) or of
    # the outputs (one id) and the tied tiles are made again on the
    # workers; the in-memory rasters either way
    rng = np.random.default_rng(5)
    smooth = rng.random((40, 37)) + 0.5
    plateau = smooth.copy()
    plateau[26:34, 2:10] = 1.0
    for cost, tie in ((smooth, False), (plateau, True)):
        expected = cost_distance(cost, SOURCES, source_ids=ids)
        out = tmp_path / f"out{int(tie)}"
        out.mkdir()
        result = cost_distance(save_npy(tmp_path, f"cost{int(tie)}", cost),
                               SOURCES, source_ids=ids, tile_size=TILE,
                               executor=client, out_dir=out)
        assert_same(result, expected,
                    ["accumulated", "direction", "allocation"])
        assert (result.hops_visits > 0) == tie


@pytest.mark.parametrize("per_worker", [1, 3])
def test_cost_distance_tasks_in_flight_per_worker(client, tmp_path,
                                                  monkeypatch, per_worker):
    # solves and hops visits queued ahead on the workers (more tasks in
    # flight than worker threads) reach the same fixed point
    from gridgraph.core import tiling
    from gridgraph.core.costdistance import rounds
    monkeypatch.setattr(rounds, "ROUND_TASKS_PER_WORKER", per_worker)
    monkeypatch.setattr(rounds, "HOPS_TASKS_PER_WORKER", per_worker)
    most = {}

    class CountingPool(tiling.TaskPool):
        def submit(self, tag, function, *arguments):
            super().submit(tag, function, *arguments)
            most[self.name] = max(most.get(self.name, 0), len(self))

    monkeypatch.setattr(rounds.tiling, "TaskPool", CountingPool)
    cost = costs((40, 37), 8)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3])
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(save_npy(tmp_path, "cost", cost), SOURCES,
                           source_ids=[1, 2, 3], tile_size=TILE,
                           executor=client, out_dir=out)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    workers = tiling.executor_workers(client)
    # (never more than workers * per_worker: the rounds' loops stop there)
    if per_worker > 1:  # the 40 x 37 raster has tiles enough to queue
        assert max(most.values()) > workers


def batch_intervals(client):
    """Dask's message batching intervals: the client's stream, the
    scheduler's streams (to the workers and to this client), the
    workers' streams."""
    def on_scheduler(dask_scheduler=None):
        streams = list(dask_scheduler.stream_comms.values())
        streams.append(dask_scheduler.client_comms[client_id])
        return sorted(stream.interval for stream in streams)

    def on_worker(dask_worker=None):
        return dask_worker.batched_stream.interval

    client_id = client.id
    return (client.scheduler_comm.interval,
            client.run_on_scheduler(on_scheduler),
            sorted(client.run(on_worker).values()))


def test_batch_intervals_off_for_the_run_and_set_back(client, tmp_path):
    # a chain of short steps waited on Dask's batching (10 ms from the
    # client, 5 ms from the scheduler, 2 ms from a worker): none while a
    # tiled run lasts, Dask's own afterwards, and the same outputs
    before = batch_intervals(client)
    assert before[0] > 0 and min(before[1]) > 0 and min(before[2]) > 0
    during = []

    def look(fraction):
        if not during:
            during.append(batch_intervals(client))

    cost = costs((24, 21), 12)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3])
    result = cost_distance(save_npy(tmp_path, "cost", cost), SOURCES,
                           source_ids=[1, 2, 3], tile_size=TILE,
                           executor=client, progress=look)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    assert during == [(0.0, [0.0] * len(before[1]),
                       [0.0] * len(before[2]))]
    assert batch_intervals(client) == before


def test_batch_intervals_of_overlapping_runs_set_back(client, tmp_path):
    # two runs on one cluster, the second started while the first runs and
    # ending after it: once both have ended Dask's own intervals are back
    # (not the 0 the second run found)
    before = batch_intervals(client)
    source = tile_io.open_source(save_npy(tmp_path, "v", np.zeros(
        (8, 8), np.uint8)))
    first = distributed.tile_executor(client, [source])
    second = distributed.tile_executor(client, [source])
    first.__enter__()
    try:
        second.__enter__()
        try:
            during = batch_intervals(client)
        finally:
            first.__exit__(None, None, None)
    finally:
        second.__exit__(None, None, None)
    assert during == (0.0, [0.0] * len(before[1]), [0.0] * len(before[2]))
    assert batch_intervals(client) == before


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


def test_cost_distance_source_raster_and_subset(client, tmp_path):
    cost = costs((18, 17), 9)
    sources = np.zeros(cost.shape, np.int32)
    sources[2, 3], sources[15, 14] = 7, 9
    cost[2, 3] = cost[15, 14] = 2.0
    expected = cost_distance(cost, sources)
    result = cost_distance(save_npy(tmp_path, "cost", cost),
                           save_npy(tmp_path, "sources", sources),
                           tile_size=TILE, executor=client,
                           outputs=("accumulated", "allocation"))
    assert_same(result, expected, ["accumulated", "allocation"])
    assert result.direction is None


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


# ------------------------------------------------------------ a worker dies

def test_worker_killed_mid_run_changes_nothing(killable_client, tmp_path):
    client = killable_client
    cost = costs((24, 24), 21)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3])
    memmap = save_npy(tmp_path, "cost", cost)
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    killed = []

    def kill_after_the_survey(fraction):
        # past the survey round: tile states now live on the workers
        if fraction > 0.15 and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(memmap, SOURCES, source_ids=[1, 2, 3],
                           tile_size=TILE, executor=client, out_dir=out,
                           progress=kill_after_the_survey)
    assert killed
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


@pytest.mark.slow  # kept labels are off by default: the mechanism only
def test_worker_killed_with_kept_labels_changes_nothing(killable_client,
                                                        tmp_path,
                                                        monkeypatch):
    # components keep round 1's tile labels on the workers; a worker killed
    # as the label round starts loses some: Dask recomputes them from their
    # summary tasks and the labels are still identical
    from gridgraph.core.components import tiled as components_tiled
    client = killable_client
    values = (np.random.default_rng(8).random((40, 37)) < 0.4).astype(
        np.int16)
    expected = connected_components(values, mode="nonzero")
    assert not components_tiled._keep_labels(client, values.size)  # default
    monkeypatch.setattr(components_tiled, "KEPT_LABELS_SHARE", 0.25)
    assert components_tiled._keep_labels(client, values.size)
    assert not components_tiled._keep_labels(None, values.size)
    memmap = save_npy(tmp_path, "values", values)
    pids = client.run(os.getpid)
    victim = sorted(pids)[-1]
    killed = []

    def kill_at_the_label_round(fraction):
        if fraction >= 0.5 and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, mode="nonzero", tile_size=TILE,
                                  executor=client, out_dir=out,
                                  progress=kill_at_the_label_round)
    assert killed
    assert result.count == expected.count
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]


def test_no_retries_left_is_a_clean_error(tmp_path):
    import dask
    from distributed import Client, LocalCluster
    values = np.random.default_rng(2).integers(0, 9, (24, 24)).astype(
        np.float32)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)

        def kill_every_worker(fraction):
            if fraction > 0:
                for pid in pids.values():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

        with pytest.raises(GridGraphError) as error:
            minimum_spanning_tree(memmap, tile_size=TILE, executor=client,
                                  out_dir=out, progress=kill_every_worker)
    message = str(error.value)
    assert "died" in message and "allowed-failures" in message
    assert os.listdir(out) == []


# ------------------------------------------------------------ refusals

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


def test_cancel_cancels_outstanding_futures(client, tmp_path):
    memmap = save_npy(tmp_path, "v", np.random.default_rng(4).random(
        (32, 32)).astype(np.float32))
    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def cancel_at_first_tile(fraction):
        calls.append(fraction)
        return False

    before = scheduler_tasks(client)
    with pytest.raises(CancelledError):
        minimum_spanning_tree(memmap, tile_size=TILE, executor=client,
                              out_dir=out, progress=cancel_at_first_tile)
    assert len(calls) == 1  # nothing ran on after the cancel
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("settings", [
    {"LABEL_RUN_TILES": None, "DASK_BATCH": None},
    {"LABEL_RUN_TILES": 1, "DASK_SUBMIT_ROUND_AT_ONCE": False},
    {"LABEL_RUN_TILES": 1, "DASK_SUBMIT_ROUND_AT_ONCE": True}],
    ids=["tiles", "runs", "runs_at_once"])
def test_cancel_in_the_label_round(client, tmp_path, monkeypatch, settings):
    """Components cancelled in the label round with tasks outstanding (a
    task a tile: tile by tile without batches, or runs of one tile, one by
    one or at once), writing through mappings: CancelledError, and once
    the workers are done nothing is left in out_dir (no partial file: a
    task still running finds it gone and fails)."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    for name, value in settings.items():
        monkeypatch.setattr(tile_tasks if name.startswith("DASK_SUBMIT")
                            else components_tiled, name, value)
    values = (np.random.default_rng(12).random((64, 72)) < 0.45).astype(
        np.uint8)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    marks = []

    def cancel_in_the_label_round(fraction):
        marks.append(fraction)
        return fraction <= components_tiled.LABEL_SPAN[0]

    before = scheduler_tasks(client)
    with pytest.raises(CancelledError):
        connected_components(memmap, connectivity=8, mode="nonzero",
                             tile_size=TILE, executor=client, out_dir=out,
                             progress=cancel_in_the_label_round)
    assert marks[-1] > components_tiled.LABEL_SPAN[0]
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("runs,mapped,at_once", [
    (None, True, False), (2, True, False), ("auto", False, False),
    ("row", True, False), ("auto", True, True)])
def test_components_label_runs_on_dask(client, tmp_path, monkeypatch, runs,
                                       mapped, at_once):
    """The label round in runs of adjacent tiles (LABEL_RUN_TILES: tile by
    tile, 2, about a batch, whole tile rows), written by the workers into
    out_dir through one mapping a run (its pages populated first, the
    default on the workers) or gathered and written with pwrite: the
    in-process labels, nothing else left; each round submitted at once
    (DASK_SUBMIT_ROUND_AT_ONCE) or task by task."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "LABEL_RUN_TILES", runs)
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES", mapped)
    monkeypatch.setattr(tile_tasks, "DASK_SUBMIT_ROUND_AT_ONCE", at_once)
    assert_components_on_dask(client, tmp_path, 13)


@pytest.mark.parametrize("on_worker", [True, False])
def test_components_merge_as_a_task_on_a_worker(client, tmp_path,
                                                monkeypatch, on_worker):
    """tile_tasks.DASK_JOIN_ON_WORKER: the merge runs as a Dask task on a
    worker (never in this process) and the label round's tasks are handed
    to the scheduler with round 1's, before any of its results is in; off
    (the default), the merge runs here between the rounds.  The
    in-process labels either way, only labels.npy left, no task left on
    the scheduler."""
    from distributed import get_task_stream

    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    assert not tile_tasks.DASK_JOIN_ON_WORKER  # the default
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    events = []
    real_merge, real_map = components_tiled.merge, client.map

    def merge_here(*arguments):
        events.append("merge here")
        return real_merge(*arguments)

    def spy_map(function, *iterables, **keywords):
        events.append("map " + str(keywords["key"][0]).split("-")[0])
        return real_map(function, *iterables, **keywords)

    monkeypatch.setattr(components_tiled, "merge", merge_here)
    monkeypatch.setattr(client, "map", spy_map)
    values = (np.random.default_rng(13).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    events.clear()
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    before = scheduler_tasks(client)
    with get_task_stream(client=client) as stream:
        result = connected_components(
            memmap, connectivity=8, mode="nonzero", tile_size=TILE,
            executor=client, out_dir=out,
            progress=lambda fraction: events.append("progress"))
    assert result.count == expected.count > 20
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]
    assert no_new_tasks(client, before)
    merged_on_workers = [  # (not the task handing the count on)
        record for record in stream.data
        if str(record["key"]).startswith("merge_summaries-")
        and "-value-" not in str(record["key"])]
    first_progress = events.index("progress")
    if on_worker:
        assert len(merged_on_workers) == 1
        assert "merge here" not in events
        assert events[:first_progress] == ["map tile_summary",
                                           "map label_run_answered"]
    else:
        assert merged_on_workers == []
        assert events.count("merge here") == 1
        assert events.index("map label_run_answered") > \
            events.index("merge here") \
            > first_progress


@pytest.mark.parametrize("on_worker", [False, True])
def test_round_1_failing_leaves_no_task(client, tmp_path, monkeypatch,
                                        on_worker):
    """Components' round 1 failing on its last tile (submitted at once;
    the merge here or as a task on a worker): round 1's error is raised,
    and its finished tasks are released too (no task left on the
    scheduler while the error's traceback lives) and out_dir holds
    nothing."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    real_summary = components_tiled.tile_summary

    def tile_summary(source, window, *rest):
        if (window.row, window.col) == (56, 64):  # the last tile
            raise OSError("the tile's read failed")
        return real_summary(source, window, *rest)

    monkeypatch.setattr(components_tiled, "tile_summary", tile_summary)
    values = (np.random.default_rng(18).random((64, 72)) < 0.45).astype(
        np.uint8)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    before = scheduler_tasks(client)
    with pytest.raises(OSError, match="the tile's read failed"):
        connected_components(memmap, connectivity=8, mode="nonzero",
                             tile_size=TILE, executor=client, out_dir=out)
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("on_worker", [True, False])
def test_worker_killed_in_the_label_round(killable_client, tmp_path,
                                          monkeypatch, on_worker):
    """A worker killed as the label round starts (the merge ran on a
    worker, the label runs behind it, or the merge ran here): Dask
    recomputes what it held (the merge's answers, round 1's summaries)
    and retries its runs; the labels are still the in-process ones, only
    labels.npy left."""
    from gridgraph.core import tile_tasks
    client = killable_client
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    values = (np.random.default_rng(16).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    killed = []

    def kill_at_the_label_round(fraction):
        from gridgraph.core.components import tiled as components_tiled
        if fraction > components_tiled.LABEL_SPAN[0] and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, connectivity=8, mode="nonzero",
                                  tile_size=TILE, executor=client,
                                  out_dir=out,
                                  progress=kill_at_the_label_round)
    assert killed
    assert result.count == expected.count
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]


@pytest.mark.parametrize("hosts", [1, 2])
def test_components_workers_on_two_hosts_write_with_pwrite(
        client, tmp_path, monkeypatch, hosts):
    """Labels are written through shared mappings only when every worker
    is on one host (one page cache); workers on two hosts (here: the
    scheduler made to report two) write with pwrite, which sends only
    the bytes written.  The same labels either way."""
    from gridgraph.core import tiling
    monkeypatch.setattr(distributed, "cluster_hosts", lambda client: {
        f"10.0.0.{k}" for k in range(hosts)})
    made = []
    real_make_sink = tiling.make_sink

    def make_sink(*arguments, **keywords):
        made.append(real_make_sink(*arguments, **keywords))
        return made[-1]

    monkeypatch.setattr(tiling, "make_sink", make_sink)
    assert_components_on_dask(client, tmp_path, 15, (40, 44))
    assert [sink.mapped for sink in made] == [hosts == 1]


# ------------------------------------------------------------ processing

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


# ------------------------------------------------------------ thread pools

@pytest.mark.parametrize("connectivity", [8, 16])
def test_cost_distance_thread_pool_identical(tmp_path, connectivity):
    """The same scheduling of tile solves in a thread pool (several tiles
    in flight, solved from different snapshots) gives the in-memory pairs
    bit for bit."""
    from concurrent.futures import ThreadPoolExecutor
    cost = costs((33, 29), 40 + connectivity)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3],
                             connectivity=connectivity)
    with ThreadPoolExecutor(3) as pool:
        result = cost_distance(save_npy(tmp_path, "cost", cost), SOURCES,
                               source_ids=[1, 2, 3],
                               connectivity=connectivity, tile_size=TILE,
                               executor=pool)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])


# ------------------------------------------------------------ the edge list

@pytest.mark.parametrize("where", ["threads", "dask"])
def test_mst_edge_list_by_sample_sort(cluster, tmp_path, monkeypatch, where):
    """With tasks elsewhere (threads; Dask workers sharing out_dir) the
    sorted edge list comes from a sample sort over per-tile run files:
    ranges of 100 edges here, so dozens of ranges cut through the runs;
    identical to the in-memory list (NaN weights last)."""
    from concurrent.futures import ThreadPoolExecutor

    from gridgraph.core.mst.tiled import edge_list
    monkeypatch.setattr(edge_list, "RANGE_EDGES", 100)
    calls = []
    original = edge_list.sample_sort
    monkeypatch.setattr(edge_list, "sample_sort",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    values = np.random.default_rng(8).integers(0, 7, (29, 26)).astype(
        np.float32)
    values[3, 4] = values[10, :5] = np.nan
    expected = minimum_spanning_tree(values, connectivity=8)
    out = tmp_path / "out"
    out.mkdir()
    memmap = save_npy(tmp_path, "values", values)
    pool = ThreadPoolExecutor(2) if where == "threads" else None
    executor = pool if pool is not None else cluster[1]
    try:
        result = minimum_spanning_tree(memmap, connectivity=8,
                                       tile_size=TILE, executor=executor,
                                       out_dir=out)
    finally:
        if pool is not None:
            pool.shutdown()
    assert calls == [1]
    assert_same(result, expected, ["edges", "weights", "parent_direction"])
    assert result.total_weight == expected.total_weight
    assert sorted(os.listdir(out)) == ["edges.npy", "parent_direction.npy",
                                       "weights.npy"]


def test_tiles_sized_from_the_workers_memory(client):
    """A Dask executor always tiles, with automatic tiles sized from the
    smallest worker memory limit per thread, not the driver's memory."""
    from gridgraph.core import tiling
    from gridgraph.core.costdistance import tiled
    workers = client.scheduler_info()["workers"].values()
    per_thread = min(w["memory_limit"] / w["nthreads"] for w in workers)
    shape = (70000, 50000)
    grid = tiling.plan(shape, None, None, tiled.IN_MEMORY_BYTES_PER_CELL,
                       tiled.TILE_BYTES_PER_CELL, client)
    assert grid.tile_size == tiling.auto_tile_size(
        shape, per_thread, tiled.TILE_BYTES_PER_CELL, 1)
    small = tiling.plan((16, 16), None, None, 1, 1, client)
    assert small is not None and small.tile_size == 16  # not in memory
    limited = tiling.plan(shape, None, 64, tiled.IN_MEMORY_BYTES_PER_CELL,
                          tiled.TILE_BYTES_PER_CELL, client)
    assert limited.tile_size == tiling.auto_tile_size(
        shape, 64 * 2**20, tiled.TILE_BYTES_PER_CELL, 1)
    assert tiling.executor_workers(client) == sum(
        w["nthreads"] for w in workers)
