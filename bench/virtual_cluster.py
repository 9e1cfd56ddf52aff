"""A virtual cluster: the tiled drivers' schedule on k workers, timed on one.

``VirtualExecutor(k)`` is a :class:`concurrent.futures.Executor` that runs
each task at once in this process, measures it, and gives it a finish time
on a virtual clock with ``k`` workers; the drivers' own work between two
waits advances the clock too (serial).  ``virtual_waits()`` patches the
``wait`` that :mod:`gridgraph.core.tile_tasks` uses, so a driver collects its
tasks in virtual finish order: the same decisions (which tile next, how
many solves) as a real cluster of k one-thread workers without transfer
costs.  ``executor.clock`` is then the run's modelled time.

Times are this thread's CPU time (``time.thread_time``), so other
processes on a shared box do not blur the model; kernels that spread over
numba's threads are undercounted.  Used by ``bench/dask.py --simulate`` to
tune the rounds on a 2-core box.
"""

import contextlib
import heapq
import time
from concurrent.futures import Executor, Future


class VirtualExecutor(Executor):

    def __init__(self, workers):
        self._max_workers = workers
        self.free_at = [0.0] * workers  # a heap of the workers' free times
        self.clock = 0.0  # the driver's virtual time
        self.finish = {}  # future -> virtual finish time
        self.task_seconds = 0.0
        self.driver_seconds = 0.0
        self.tasks = 0
        self._since = None  # real time the driver last resumed

    def _driver_resumes(self):
        self._since = time.thread_time()

    def _driver_pauses(self):
        if self._since is not None:
            self.driver_seconds += time.thread_time() - self._since
            self.clock += time.thread_time() - self._since
            self._since = None

    def submit(self, function, *args, **kwargs):
        self._driver_pauses()
        start = time.thread_time()
        future = Future()
        try:
            future.set_result(function(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed on
            future.set_exception(error)
        seconds = time.thread_time() - start
        self.task_seconds += seconds
        self.tasks += 1
        begin = max(self.clock, heapq.heappop(self.free_at))
        self.finish[future] = begin + seconds
        heapq.heappush(self.free_at, begin + seconds)
        self._driver_resumes()
        return future

    def wait_first(self, futures):
        self._driver_pauses()
        first = min(futures, key=lambda f: self.finish[f])
        self.clock = max(self.clock, self.finish.pop(first))
        self._driver_resumes()
        return first

    def close(self):
        self._driver_pauses()
        return self.clock


@contextlib.contextmanager
def virtual_waits(executor):
    """Patch gridgraph.core.tile_tasks's ``wait`` to return the future with
    the least virtual finish time first."""
    from concurrent.futures._base import DoneAndNotDoneFutures
    from concurrent.futures import wait as real_wait

    from gridgraph.core import tile_tasks

    def wait(futures, timeout=None, return_when=None):
        futures = list(futures)
        if return_when == "FIRST_COMPLETED" and futures:
            first = executor.wait_first(futures)
            return DoneAndNotDoneFutures({first}, set(futures) - {first})
        for future in futures:
            executor.finish.pop(future, None)
        return real_wait(futures)

    tile_tasks.wait = wait
    executor._driver_resumes()
    try:
        yield executor
    finally:
        executor.close()
        tile_tasks.wait = real_wait
