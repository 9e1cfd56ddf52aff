"""The tile tasks on a Dask cluster (core/tile_tasks.py and
core/task_pool.py): batches, rounds submitted at once, ``until``,
numba's threads, task pools' states, freed memory kept and given back,
Dask's message batching off for a run and set back.
"""

import itertools

import numpy as np
import pytest

from gridgraph.core import cost_distance, distributed, tile_io

from dask_helpers import (TILE, save_npy, assert_same, costs, SOURCES,
                          scheduler_tasks, batch_intervals)

pytest.importorskip("distributed")

# sys.path without the folder above the checkout, for the workers
pytestmark = pytest.mark.usefixtures("worker_sys_path")


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


@pytest.mark.parametrize("batch", [None, "auto"])
@pytest.mark.parametrize("kept", [True, False])
def test_tile_tasks_keep_freed_memory_until_the_run_ends(client, tmp_path,
                                                         monkeypatch, kept,
                                                         batch):
    """With TASK_HEAP_KEPT a round run tile by tile (BATCHES_HEAP_KEPT: in
    batches) leaves each worker's freed memory in its heap after the tasks
    (for the next one) until the tiled run ends; without it every task
    sets the worker's own malloc settings back at its end.  Inside a task
    it is kept either way."""
    from gridgraph.core import distributed, tile_tasks
    from gridgraph.core.tile_io import open_source
    if tile_tasks._MALLOPT is None:
        pytest.skip("no glibc mallopt here")
    monkeypatch.setattr(tile_tasks, "TASK_HEAP_KEPT", kept)
    monkeypatch.setattr(tile_tasks, "BATCHES_HEAP_KEPT", kept)
    client.run(tile_tasks.own_malloc_settings)
    source = open_source(save_npy(tmp_path, "cost", costs((20, 23), 8)))
    with distributed.tile_executor(client, [source]) as executor:
        assert tile_tasks.run_tasks(keeps_freed_memory, [()] * 20,
                                    executor, batch=batch) == [True] * 20
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
