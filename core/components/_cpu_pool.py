"""The thread pool of the components CPU kernels (:mod:`._cpu`): one
process-wide pool of plain Python threads (the kernels release the GIL, so
no numba threading layer is involved and concurrent QGIS tasks are safe),
and :func:`_run_jobs`, which shares jobs (a strip's kernel calls, in
order) among the calling thread and the pool's threads as they come free.
"""

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

# Seconds between progress reports (and cancel checks) while the calling
# thread, out of jobs, waits for the pool's: a cancel then waits for the
# calls running at most, not for every job the pool threads hold
_POLL_SECONDS = 0.05


def _run_jobs(pool, jobs, progress, low, high, workers, lead=None,
              waits=None):
    """Run the calls of each job in order, the jobs concurrently on
    ``workers`` threads: the calling thread and ``workers - 1`` pool
    tasks, each taking the next job not yet taken when done with one, so
    a thread slowed by something else on its core (a virtual machine's
    neighbours, other processes) ends up with fewer jobs instead of
    holding the others up.  Progress goes from ``low`` to ``high`` as
    calls finish; it is reported (and a cancel honoured) on the calling
    thread between its calls and, once it has no job left, every
    ``_POLL_SECONDS`` while it waits for the pool's.  A cancel or a
    failing call stops every thread before its next call, and the error
    is raised here once all have stopped.

    ``lead()``, when given, runs on the calling thread before it takes
    jobs; ``waits[job]``, when given, is an event a thread waits for before
    running that job (set by ``lead``)."""
    total = max(1, sum(len(calls) for calls in jobs))
    workers = max(1, min(workers, len(jobs)))
    done = [0] * workers  # one writer each
    stop = threading.Event()
    untaken = iter(range(len(jobs)))
    taking = threading.Lock()

    def report():
        progress(low + (high - low) * sum(done) / total)

    def worker(index, check):
        if index == 0 and lead is not None:
            lead()
        while not stop.is_set():
            with taking:
                job = next(untaken, None)
            if job is None:
                return
            if waits is not None:
                waits[job].wait()  # set by lead, or all at once on stop
                if stop.is_set():
                    return
            for call in jobs[job]:
                if stop.is_set():
                    return
                call()
                done[index] += 1
                if check:
                    report()

    futures = [pool.submit(worker, index, False)
               for index in range(1, workers)]
    try:
        worker(0, True)
        running = futures
        while running:
            # polled, not a blocking wait: progress (and a cancel) while
            # the pool threads run the jobs they hold
            finished, running = wait(running, timeout=_POLL_SECONDS)
            for future in finished:
                future.result()  # a pool thread's error, raised here
            if running:
                report()
        report()
    except BaseException:
        stop.set()
        for event in waits or ():
            event.set()  # the waiting threads see stop
        for future in futures:
            future.exception()  # wait, whatever it raised
        raise


class _Serial:
    """Stands in for a thread pool when one thread is all we use."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    @staticmethod
    def map(function, *iterables):
        return map(function, *iterables)

    @staticmethod
    def submit(function, *args):
        future = Future()
        try:
            future.set_result(function(*args))
        except BaseException as error:  # noqa: BLE001 - kept for result()
            future.set_exception(error)
        return future


class _Shared:
    """The process-wide pool, entered per call (leaving it keeps it)."""

    def __init__(self, pool):
        self._pool = pool

    def __enter__(self):
        return self._pool

    def __exit__(self, *exc_info):
        return False


_POOL = []  # the process-wide strip pool, made on first use
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child():
    """A forked child inherits the pool object but none of its threads (nor
    a lock's holder): shares sent to it would wait for ever.  The child
    makes its own pool on first use (a process pool executor forks)."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool(workers):
    """A pool with at least the ``workers - 1`` threads that run beside the
    calling one (which runs a share itself), or the calling thread alone.

    The pool is kept for the process: starting threads cost 0.1-0.9 ms a
    call on the 2-core box, a tenth of a 2048² labelling.  Concurrent calls
    share it; its tasks never wait on other tasks, so none can block
    another call for good."""
    if workers <= 1:
        return _Serial()
    with _POOL_LOCK:
        if not _POOL or _POOL[0]._max_workers < workers - 1:
            if _POOL:
                _POOL.pop().shutdown(wait=False)  # its threads end when idle
            _POOL.append(ThreadPoolExecutor(workers - 1, "components-strips"))
        return _Shared(_POOL[0])


def _wait(results):
    # consuming the iterator re-raises any exception of a block here
    for _ in results:
        pass
