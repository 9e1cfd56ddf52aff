"""tiling.run_tasks(until=...): once ``until`` says so no further task
starts, and the tasks in flight finish and are handed on (never cancelled:
they may be writing), in this process and on a thread pool (on Dask:
tests/distributed/test_dask_tile_tasks.py)."""

import concurrent.futures
import threading
import time

import pytest

from gridgraph.core import tiling


def check_stops(executor, limit):
    """Tasks 0..39, ``until`` true once task 5's result is in: every task
    started is handed on, none after the ones in flight then (at most
    ``limit``), and run_tasks returns only when those are in."""
    started, lock = [], threading.Lock()

    def task(k):
        with lock:
            started.append(k)
        time.sleep(0.01)  # in flight together
        return k * k

    seen = {}
    marks = []
    tiling.run_tasks(task, [(k,) for k in range(40)], executor,
                     progress=marks.append, on_result=seen.__setitem__,
                     until=lambda: 5 in seen)
    assert set(seen) == set(started)  # the started ones all handed on
    assert all(seen[k] == k * k for k in seen)
    assert 5 in seen and len(seen) <= 6 + limit
    assert len(seen) < 40
    assert marks == sorted(marks) and marks[-1] == len(seen) / 40
    return seen


def test_until_in_process_stops_at_once():
    seen = check_stops(None, 0)
    assert sorted(seen) == list(range(6))


@pytest.mark.parametrize("workers", [1, 3])
def test_until_on_a_pool_lets_the_tasks_in_flight_finish(workers):
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        check_stops(pool, 2 * workers)


def test_without_until_every_task_runs():
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert tiling.run_tasks(pow, [(k, 2) for k in range(30)], pool) == \
            [k * k for k in range(30)]
