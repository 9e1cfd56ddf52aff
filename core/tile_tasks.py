"""How tile tasks run: in this process, on a ``concurrent.futures``
executor or on a Dask cluster, the executor only moving the messages.

:func:`run_tasks` runs a round of independent tasks
(:func:`run_joined_rounds` two rounds joined by a small step);
:class:`gridgraph.core.task_pool.TaskPool` serves drivers that pick the
next task from the last answers (the cost distance's propagation).  With
``keep=True`` a task's large state stays where it was computed (a future
on a Dask worker).
"""

import functools
import itertools
import os
from concurrent.futures import FIRST_COMPLETED, wait
from contextlib import contextmanager
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from . import distributed
from ._common import Progress

# Tasks in flight per Dask worker thread in a round of independent tasks
# (one queued behind each running one).  4 measured the same as 2 on the
# H100 host's CPUs (components, neuse40, 8 workers: 2.29 s against 2.28 s,
# 2026-11-24 12:23 UTC, bench/dask_variants.py).
DASK_IN_FLIGHT_PER_THREAD = 2
# A round of independent tasks whose arguments and results are small
# (``run_tasks(at_once=True)``, no ``keep``) goes to the scheduler in one
# message (``client.map``): Dask queues it and starts each next task as a
# worker thread frees up, without a round trip through this process per
# task.  Measured on the H100 host's CPUs (components, neuse40, 8
# one-thread workers, 2026-11-24 23:29 UTC): 0.94-0.99 s against
# 1.01-1.15 s (docs/benchmarks.md, Dask, seventh session).  False: one by
# one, at most DASK_IN_FLIGHT_PER_THREAD per thread in flight.
DASK_SUBMIT_ROUND_AT_ONCE = True
# run_tasks(batch="auto") on a Dask cluster: tiles grouped into about this
# many Dask tasks per worker thread.  Short tile tasks (components: ~15 ms
# at 1024 x 1024) are otherwise bound by the driver's and scheduler's cost
# per task (submit, result, progress), not by the workers.
BATCHES_PER_THREAD = 4
# Threads a numba parallel kernel may use inside a Dask tile task: the
# worker threads run tiles side by side, so each task keeps to its own
# thread, as Dask's nanny asks of OpenMP and BLAS (OMP_NUM_THREADS=1).  A
# worker started without NUMBA_NUM_THREADS would otherwise run numba's
# pool of every core of its machine inside each task (the MST's and cost
# distance's parallel kernels; components' own strips are set by its
# driver: components.tiled.EXECUTOR_TILE_STRIPS).  None: numba's setting.
DASK_TASK_NUMBA_THREADS = 1

def executor_workers(executor):
    """How many tile tasks may run at once under ``executor``: 1 in-process,
    the pool's workers, or a Dask cluster's threads (asked of the
    scheduler)."""
    if executor is None:
        return 1
    if distributed.is_distributed(executor):
        with distributed.client_for(executor) as client:
            return distributed.cluster_threads(client)
    return max(1, int(getattr(executor, "_max_workers", 1) or 1))



# batch_sizes makes exactly BATCHES_PER_THREAD batches a thread (when
# there are tiles enough), of two sizes one apart, the larger first: the
# round runs in whole waves of one batch a thread.  False: batches of
# total // (BATCHES_PER_THREAD x threads) tiles and a smaller last one,
# more batches than that where the division leaves tiles over (neuse40's
# 234 tiles at 8 threads: 33 of 7 and one of 3, a fifth wave of two
# batches for two workers while six wait; in an 8-worker components run on
# an H200 host's CPUs the workers' last summary batches ended 30-50 ms
# apart, ~41 ms a batch: docs/benchmarks.md, Dask, twenty-first session).
# Measured there, ABBA at 8 workers: the workers' idle time after round 1's
# last batch 77-140 worker-ms against 98-330, but components no faster
# (0.61-0.90 s against 0.60-0.79 s), cost distance no faster (9.47, 10.38
# s against 9.68, 9.79 s), the MST 10.71, 11.15 s against 11.36, 11.66 s.
EVEN_BATCH_WAVES = True


def batch_sizes(total, threads):
    """Tiles per Dask task of a batched round (``run_tasks(batch="auto")``),
    in submission order: ``BATCHES_PER_THREAD x threads`` batches (fewer
    when there are fewer tiles) of near equal size, the larger first
    (:data:`EVEN_BATCH_WAVES`; off: ``total // (BATCHES_PER_THREAD x
    threads)`` (at least 1) each, the last one smaller).  (Batches
    shrinking towards the round's end, guided self-scheduling, were tried
    in the fifth and seventh sessions: shorter tails, more tasks, no sooner
    end; removed.)"""
    if total <= 0:
        return []
    if EVEN_BATCH_WAVES:
        count = min(total, BATCHES_PER_THREAD * max(1, threads))
        size, larger = divmod(total, count)
        return [size + 1] * larger + [size] * (count - larger)
    largest = max(1, total // (BATCHES_PER_THREAD * max(1, threads)))
    sizes = [largest] * (total // largest)
    if total % largest:
        sizes.append(total % largest)
    return sizes


def _glibc(name):
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        return getattr(libc, name)
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")
# glibc's mallopt parameters, its defaults, and what a batch of tiles uses
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
DEFAULT_THRESHOLD = 128 * 1024
# With HEAP_KEPT_IN_BATCHES, within a batch (and any Dask tile task) freed
# tile arrays stay in the heap for the next tile (the largest mmap
# threshold glibc takes, 32 MiB, and no trimming; the batch ends with
# malloc_trim).  Dask's nanny starts workers with
# MALLOC_TRIM_THRESHOLD_=65536, which makes glibc map and unmap every
# array over 128 KiB: each tile's temporaries are fresh pages, faulted in
# and zeroed by the kernel, and at 8 workers the page allocator is shared
# by all of them.  On since the tenth session: components on neuse40
# (H200 host's 16 CPUs, 2026-11-28, ABBA, docs/benchmarks.md, Dask, tenth
# session) took 3.49 s at 1 worker against 4.06 s (medians of 4) and
# 0.638 s at 8 against 0.785 s (medians of 8), the workers' page faults
# a run 35k against 406k at 1 worker, 116k against 463k at 8.  (The
# fifth session had measured a summary tile 20 %
# slower with it at 1 worker on an H100 host, before the kernels and the
# label writes changed; the 2-core box gains a third per tile.)  Only Dask
# tile tasks use it: the settings are a process's, and a QGIS process's
# own are left alone.
BATCH_MMAP_THRESHOLD = 32 * 1024 * 1024
BATCH_TRIM_THRESHOLD = 1 << 30
HEAP_KEPT_IN_BATCHES = True
# A TaskPool's steps on a Dask worker (cost distance's tile solves and hops
# visits) leave freed memory in the heap for the worker's next step (no
# trim after each step): each step allocates a tile state and frames of
# 8-16 MB that under the nanny's settings are fresh pages every time.  The
# workers that kept it get their own settings back (and a trim) at the
# pool's close and again at the tiled run's end (distributed.tile_executor:
# a step started after the close, recomputed or not yet cancelled).
# Measured on an H200 host's CPUs (neuse40, tiles of 1024, 2026-11-29,
# against the variant costdistance-trimmed, a trim after each step;
# docs/benchmarks.md, Dask, sixteenth session): 1 worker 60.10 s against
# 70.69 s, 8 workers 11.07 and 12.24 s against 12.45 and 13.03 s, the
# workers' page faults 1.2-1.3M against 3.6-4.7M, the same outputs.
STEP_HEAP_KEPT = True
# The same for the tasks of every round not run in batches on a Dask
# cluster (run_tasks without batches: cost distance's label and output
# rounds, whose tasks take the tile states' futures, components' label
# runs, the MST's rounds): each task leaves freed memory in the worker's
# heap for the next one, set back at the tiled run's end
# (distributed.tile_executor).  An output tile of the cost distance
# allocates its frames and blocks (~30 MB at tiles of 1024), fresh pages
# every task without it.  False: set back (and trimmed) at each task's
# end.  Measured on H200 hosts' CPUs (neuse40, tiles of 1024, 2026-11-29,
# docs/benchmarks.md, Dask, eighteenth session): the MST 11.78 s against
# 12.82 s at 8 workers and 81.75 s against 92.81 s at 1; cost distance
# (with MAPPED_OUTPUT_WRITES) 81.0 s against 90.2 s at 1.
TASK_HEAP_KEPT = True
# The same for a round run in batches on a Dask cluster
# (run_tasks(batch="auto"): components' round 1, the surveys): a batch
# leaves its freed memory in the worker's heap for the worker's next batch
# and next round, set back at the tiled run's end.  False: each batch's
# end sets the worker's own settings back (heap_kept_for_tiles), so every
# batch's first tile takes its arrays as fresh pages: at 8 workers four
# times a worker in components' round 1 (BATCHES_PER_THREAD), eight heaps
# made four times over where one worker makes one four times.
BATCHES_HEAP_KEPT = True
# Whether this process keeps freed memory now (keep_freed_memory, until
# own_malloc_settings).
freed_memory_kept = False


@contextmanager
def heap_kept_for_tiles():
    """For the ``with`` block: glibc keeps freed memory in its heap for
    reuse (:data:`BATCH_MMAP_THRESHOLD`, :data:`BATCH_TRIM_THRESHOLD`);
    afterwards the process's own settings (``MALLOC_*_THRESHOLD_``, as
    Dask's nanny sets them, else glibc's initial 128 KiB, then no longer
    self-raising) are set back and the free memory handed back.  The
    settings are the process's: in a worker with several threads one
    batch's end sets them back for the others too (slower, never wrong)."""
    if _MALLOPT is None or not HEAP_KEPT_IN_BATCHES:
        try:
            yield
        finally:
            release_free_memory()
        return
    keep_freed_memory()
    try:
        yield
    finally:
        own_malloc_settings()


def keep_freed_memory():
    """glibc keeps freed memory in its heap for reuse from now on
    (:data:`BATCH_MMAP_THRESHOLD`, :data:`BATCH_TRIM_THRESHOLD`)."""
    global freed_memory_kept
    if _MALLOPT is not None:
        freed_memory_kept = True
        _MALLOPT(M_MMAP_THRESHOLD, BATCH_MMAP_THRESHOLD)
        _MALLOPT(M_TRIM_THRESHOLD, BATCH_TRIM_THRESHOLD)


def own_malloc_settings():
    """The process's own malloc settings set back (``MALLOC_*_THRESHOLD_``,
    as Dask's nanny sets them, else glibc's initial 128 KiB, then no
    longer self-raising) and the free memory handed back."""
    global freed_memory_kept
    freed_memory_kept = False
    if _MALLOPT is not None:
        for parameter, variable in ((M_MMAP_THRESHOLD,
                                     "MALLOC_MMAP_THRESHOLD_"),
                                    (M_TRIM_THRESHOLD,
                                     "MALLOC_TRIM_THRESHOLD_")):
            try:
                value = int(os.environ.get(variable, DEFAULT_THRESHOLD))
            except ValueError:
                value = DEFAULT_THRESHOLD
            _MALLOPT(parameter, value)
    release_free_memory()


def own_malloc_settings_if_kept():
    """:func:`own_malloc_settings` where this process keeps freed memory
    (a worker a step ran on): elsewhere nothing is touched."""
    if freed_memory_kept:
        own_malloc_settings()


def workers_malloc_settings_back(client):
    """Every worker of Dask ``client`` that keeps freed memory for its
    steps (:data:`STEP_HEAP_KEPT`) given its own malloc settings back
    (best-effort: a worker gone keeps nothing)."""
    try:
        client.run(own_malloc_settings_if_kept,
                   callback_timeout=distributed.DASK_CALL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a cluster gone: nothing kept
        pass


def release_free_memory():
    """Hand memory freed by the last tile back to the system.

    glibc keeps freed blocks of up to its (self-raising) mmap threshold in
    its heap, so without this the resident set creeps up by fragments of
    every tile's temporaries; ``malloc_trim`` returns them (a few ms).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def run_tasks(function, tasks, executor=None, progress=None, on_result=None,
              count=None, keep=False, resources=None, batch=None,
              at_once=False, until=None):
    """Run ``function(*task)`` for every task.

    ``tasks`` may be a generator (then give ``count``): tasks are drawn
    only as they are started, so their arguments (e.g. arrays read from
    scratch) need not all exist at once.

    ``executor=None`` runs them one after the other in this process;
    a :class:`concurrent.futures.Executor` runs them concurrently with at
    most twice its worker count in flight (so finished results do not pile
    up), a Dask client with :data:`DASK_IN_FLIGHT_PER_THREAD` per thread.
    ``on_result(index, result)`` consumes each result as it arrives (in
    task order when in-process, in
    completion order otherwise); without it the results are returned as a
    list in task order.  ``progress`` gets the finished fraction after
    every task and may cancel: then no further task is submitted and the
    outstanding ones are cancelled.

    ``keep=True``: ``function`` returns ``(message, state)``; the result
    handed on is ``(message, state)`` where, with a Dask client, ``state``
    is a future that stays on the workers (pass it as an argument of later
    tasks: Dask moves it only when it must, and recomputes it from its
    inputs when its worker dies) and only the message travels.

    ``resources``: the Dask resources each task needs
    (:func:`gridgraph.core.distributed.task_resources`: the GPU of a CUDA
    task); ignored by other executors.

    ``batch="auto"``: on a Dask cluster, consecutive tasks are grouped so
    that each worker thread gets about :data:`BATCHES_PER_THREAD` Dask
    tasks, each running its tiles one after the other (:func:`_run_batch`),
    the last ones smaller (:func:`batch_sizes`: give the longest tasks
    first); the same calls, so the same results.  Only for tasks whose
    arguments are values (a future among them would pull every state of
    the group to one worker).  With ``keep`` the states of a batch stay
    together on its worker: each tile's state is then a :class:`KeptPart`
    (the batch's future and the tile's place in it; :func:`kept_groups`).

    ``at_once=True``: the tasks' arguments and results are small (all of
    them may exist at once): on a Dask cluster, without ``keep``, the
    round goes to the scheduler in one message
    (:data:`DASK_SUBMIT_ROUND_AT_ONCE`).

    ``until``: asked after each result is handed on; once it returns True
    no further task is submitted, and the ones submitted (on Dask up to
    :data:`DASK_IN_FLIGHT_PER_THREAD` a thread, queued on the workers) are
    waited for (not cancelled: they may be writing) and handed on before
    this returns.
    The round then runs task by task (no ``batch``, not ``at_once``).
    """
    progress = progress if progress is not None else Progress()
    total = len(tasks) if count is None else count
    tasks = iter(tasks)
    results = None if on_result is not None else [None] * total
    stopped = [False]

    def consume(index, result):
        if on_result is not None:
            on_result(index, result)
        else:
            results[index] = result
        if until is not None and not stopped[0] and until():
            stopped[0] = True

    if until is not None:
        batch, at_once = None, False
    if executor is None:
        for index, task in enumerate(tasks):
            consume(index, function(*task))
            release_free_memory()
            progress((index + 1) / max(total, 1))
            if stopped[0]:
                break
        return results
    if distributed.is_dask_client(executor):
        sizes = None
        if batch == "auto":
            sizes = batch_sizes(total, distributed.cluster_threads(executor))
        if sizes is not None and len(sizes) < total:
            _run_batches_on_dask(executor, function, tasks, sizes, consume,
                                 progress, resources, keep, at_once)
        else:
            _run_on_dask(executor, function, tasks, total, consume, progress,
                         keep, resources, at_once=at_once, stopped=stopped)
        return results
    in_flight = {}
    limit = 2 * executor_workers(executor)
    next_task = 0
    done = 0
    try:
        while done < total and (in_flight or not stopped[0]):
            while next_task < total and len(in_flight) < limit and \
                    not stopped[0]:
                future = executor.submit(function, *next(tasks))
                in_flight[future] = next_task
                next_task += 1
            finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for future in finished:
                index = in_flight.pop(future)
                consume(index, future.result())
                done += 1
            progress(done / max(total, 1))
    except BaseException:
        for future in in_flight:
            future.cancel()
        wait(list(in_flight))
        raise
    return results


def write_in_task(sink, function, source, window, *arguments):
    """``function(source, window, *arguments)``'s block written to ``sink``
    in the task (a thread, a process or a Dask worker sharing the sink's
    folder); returns None so nothing travels back."""
    sink.write(window, function(source, window, *arguments))


def _run_on_dask(client, function, tasks, total, consume, progress, keep,
                 resources=None, name=None, at_once=False, stopped=(False,)):
    """:func:`run_tasks` on a Dask client (see there); no task starts once
    ``stopped[0]`` is True."""
    import operator
    import uuid

    from distributed import as_completed

    name = name or getattr(function, "__name__", None) or getattr(
        getattr(function, "func", None), "__name__", "tile")
    if function not in (_run_batch_packed, _run_batch_kept):  # those do
        function = functools.partial(
            _on_task_threads_heap_kept if TASK_HEAP_KEPT else _in_kept_heap,
            function)
    run = uuid.uuid4().hex[:12]
    if at_once and DASK_SUBMIT_ROUND_AT_ONCE and not keep:
        return _run_round_on_dask(client, function, tasks, total, consume,
                                  progress, resources, name, run)
    limit = DASK_IN_FLIGHT_PER_THREAD * distributed.cluster_threads(client)
    in_flight = {}  # the future the driver waits on -> (index, state)
    # not distributed.wait: it needs a default client; results are fetched
    # in the background as tasks finish (one round trip each otherwise,
    # made one after the other by this thread)
    completed = as_completed(loop=client.loop, with_results=True,
                             raise_errors=False)
    next_task = 0
    done = 0
    try:
        while done < total and (in_flight or not stopped[0]):
            while next_task < total and len(in_flight) < limit and \
                    not stopped[0]:
                key = f"{name}-{run}-{next_task}"
                future = client.submit(function, *next(tasks), key=key,
                                       pure=False, resources=resources)
                if keep:
                    # the split runs where the result is: with resources
                    # (a GPU task's state may live on its device) on a
                    # worker that has them, never moved to another kind
                    message = client.submit(operator.getitem, future, 0,
                                            key=key + "-message",
                                            resources=resources)
                    state = client.submit(operator.getitem, future, 1,
                                          key=key + "-state",
                                          resources=resources)
                    in_flight[message] = (next_task, state)
                    completed.add(message)
                else:
                    in_flight[future] = (next_task, None)
                    completed.add(future)
                next_task += 1
            finished = [next(completed)]
            finished += completed.next_batch(block=False)
            for future, value in finished:
                index, state = in_flight.pop(future)
                value = _dask_result(future, value, name)
                consume(index, (value, state) if keep else value)
                done += 1
            progress(done / max(total, 1))
    except BaseException:
        outstanding = list(in_flight)
        outstanding += [state for _, state in in_flight.values()
                        if state is not None]
        if outstanding:
            client.cancel(outstanding, force=True)
        raise


def _run_round_on_dask(client, function, tasks, total, consume, progress,
                       resources, name, run):
    """:func:`_run_on_dask` with every task submitted at once, in one
    message (:data:`DASK_SUBMIT_ROUND_AT_ONCE`), started in task order
    (``client.map`` gives them priorities in that order)."""
    from distributed import as_completed

    keys = [f"{name}-{run}-{index:07d}" for index in range(total)]
    futures = client.map(functools.partial(_starred, function),
                         [_Arguments(task) for task in tasks], key=keys,
                         pure=False, resources=resources)
    index_of = {future.key: index for index, future in enumerate(futures)}
    done = 0
    try:
        for future, value in as_completed(futures, loop=client.loop,
                                          with_results=True,
                                          raise_errors=False):
            consume(index_of[future.key], _dask_result(future, value, name))
            done += 1
            progress(done / max(total, 1))
    except BaseException:
        # finished ones too: their results would stay on the workers for
        # as long as this frame lives (a traceback holds it)
        client.cancel(futures, force=True)
        raise


class Packed:
    """Messages (instances of one dataclass whose fields are numpy arrays)
    that pickle as one array per field, the fields of all messages
    concatenated, and come back as views of those arrays; ``keys`` (any
    picklable, optional) index them: ``packed[key]``, ``packed.items``.

    Dask sends every array of a message as a frame of its own and a worker
    serializes a result in its event loop for each worker that fetches
    it: components' answers (234 tiles x 3 arrays, 3 MB on neuse40) took
    ~18 ms a fetch on the H100 host, one worker after the other, so the
    label round's workers started 15-25 ms apart (docs/benchmarks.md,
    Dask, eighth session).  Packed, a fetch sends a few large buffers.
    Messages of mixed types or dtypes pickle as they are.

    A Packed is a message: not changed after it is made.  Its pickled
    state is made once and kept, and an unpickled one builds its messages
    only when they are asked for, so a Packed that only passes through a
    process (a task's argument on Dask's scheduler, which unpickles the
    graph and pickles each task again for its worker) costs no per-message
    work there.  36 tasks of 7 components answers each (114 KB a task):
    7-11 ms for the scheduler to unpickle with the messages built, 2.5-3.6
    ms without, on the 2-core box; the label round of neuse40 on the H200
    hosts' CPUs 2.0-3.6 ms against 3-6, measured on different hosts and
    inside the 8-worker runs' spread: no end-to-end gain is claimed
    (docs/benchmarks.md, Dask, twenty-second session).  The kept state
    sits beside the built messages: a pickled Packed of arrays holds
    their bytes twice in the process that made it."""

    __slots__ = ("_items", "keys", "_index", "_state")

    def __init__(self, items, keys=None):
        self._items = list(items)
        self.keys = None if keys is None else list(keys)
        self._index = None
        self._state = None

    @property
    def items(self):
        """The messages, in order (built from the pickled state the first
        time they are asked for)."""
        if self._items is None:
            self._items = _unpacked(self._state)
        return self._items

    def __getitem__(self, key):
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self.keys)}
        return self.items[self._index[key]]

    def __len__(self):
        return len(self.items)

    def __getstate__(self):
        if self._state is None:
            self._state = _packed_state(self._items, self.keys)
        return self._state

    def __setstate__(self, state):
        self._index = None
        self._items = None
        self._state = state
        self.keys = state[-1]


def _packed_state(items, keys):
    """A :class:`Packed`'s pickled state: ``("plain", items, keys)``, or
    ``("packed", dataclass, field names, shapes, one array per field,
    keys)``."""
    kind = type(items[0]) if items else None
    if kind is None or not dataclasses.is_dataclass(kind) or any(
            type(item) is not kind for item in items):
        return ("plain", items, keys)
    names = [field.name for field in dataclasses.fields(kind)]
    columns = [[getattr(item, name) for item in items] for name in names]
    if any(not isinstance(value, np.ndarray) or value.dtype
           != column[0].dtype for column in columns for value in column):
        return ("plain", items, keys)
    shapes = [[value.shape for value in column] for column in columns]
    data = [np.concatenate([value.reshape(-1) for value in column])
            for column in columns]
    return ("packed", kind, names, shapes, data, keys)


def _unpacked(state):
    """The messages of a :class:`Packed`'s pickled ``state``."""
    if state[0] == "plain":
        return list(state[1])
    _, kind, names, shapes, data, _ = state
    # writeable (a read-only array would make numba compile its kernels
    # again for that type)
    data = [array if array.flags.writeable else array.copy()
            for array in data]
    columns = []
    for array, column_shapes in zip(data, shapes):
        stops = np.cumsum([math.prod(shape) for shape in column_shapes])
        columns.append([array[stop - math.prod(shape):stop].reshape(shape)
                        for stop, shape in zip(stops, column_shapes)])
    return [kind(**dict(zip(names, values))) for values in zip(*columns)]


# On a Dask cluster, :func:`run_joined_rounds` may run its join as a task
# on a worker and submit the second round at once behind it (tasks taking
# the join's future): no round trip through this process between the
# rounds.  Off: on the H100 host's CPUs (components, neuse40, 8 one-thread
# workers of a LocalCluster, 2026-11-25 02:47-02:54 UTC) it measured the
# same as the join here (medians 1.07 s against 1.03 s, 1.22 s against
# 1.23 s): each of its two hops between workers (round 1's results to the
# join's worker, the answers from there to the others) took ~40 ms from
# one task's end to the next task's start, as long as the driver's merge
# and the second round's submission together (docs/benchmarks.md, Dask,
# eighth session).  Kept for clusters whose driver is far from the
# workers (round 1's results and the answers then stay on the cluster).
DASK_JOIN_ON_WORKER = False


def run_joined_rounds(executor, first, first_tasks, join, join_arguments,
                      second, second_tasks, first_progress=None,
                      second_progress=None, first_resources=None,
                      second_resources=None, batch=None, part=None):
    """Two rounds of independent tasks joined by one call between them:
    ``first(*task)`` for each of ``first_tasks``, then ``join(*
    join_arguments, results)`` (round 1's results, a list in task order)
    returning ``(shared, value)``, then ``second(shared, *task)`` for each
    of ``second_tasks``, whose results are dropped (they write their
    output themselves).  Returns ``value``.  ``part(shared, task)``: the
    share of ``shared`` a second task needs (given to it in place of
    ``shared`` when the join runs here: a task's arguments travel with
    it).

    Every round's arguments and results are small (as for
    ``run_tasks(at_once=True)``); ``batch`` as in :func:`run_tasks` for
    round 1; ``*_progress`` get each round's finished fraction and may
    cancel (then every outstanding task is cancelled).  In this process
    and on a ``concurrent.futures`` executor the join runs here, between
    the rounds (:func:`run_tasks`), and on a Dask cluster by default; with
    :data:`DASK_JOIN_ON_WORKER` all three are submitted at once: the join
    is a task taking round 1's futures, on a worker, and round 2's tasks
    take the join's future, so Dask starts them the moment it finishes
    (:func:`_joined_rounds_on_dask`).  The same calls either way, so the
    same results."""
    first_progress = first_progress or Progress()
    second_progress = second_progress or Progress()
    second_tasks = list(second_tasks)
    if distributed.is_dask_client(executor) and DASK_JOIN_ON_WORKER and \
            len(second_tasks) > 2 * distributed.cluster_threads(executor):
        # (fewer tasks are not root-like to Dask: it would send them all
        # to the join's worker, for work stealing to spread)
        return _joined_rounds_on_dask(
            executor, first, list(first_tasks), join, tuple(join_arguments),
            second, second_tasks, first_progress, second_progress,
            first_resources, second_resources, batch)
    results = run_tasks(first, first_tasks, executor, first_progress,
                        resources=first_resources, batch=batch, at_once=True)
    shared, value = join(*join_arguments, results)
    if part is None:
        second, tasks = functools.partial(second, shared), second_tasks
    else:
        tasks = [(part(shared, task),) + tuple(task) for task in second_tasks]
    run_tasks(second, tasks, executor, second_progress,
              on_result=lambda index, result: None,
              resources=second_resources, at_once=True)
    return value


def _joined_rounds_on_dask(client, first, first_tasks, join, join_arguments,
                           second, second_tasks, first_progress,
                           second_progress, first_resources,
                           second_resources, batch):
    """:func:`run_joined_rounds` on a Dask client: round 1 (in batches with
    ``batch="auto"``) by one ``client.map``, the join by one task taking
    their futures (it runs where most of their bytes are), round 2 by one
    ``client.map`` of tasks taking the join's future, and a task handing
    the join's value to this process; nothing of round 1 comes here.
    Round 2's tasks are root-like for Dask's scheduler (many tasks of one
    group behind one task) when they outnumber twice the worker threads:
    queued, each started on the next free thread, not all where the join
    ran."""
    import operator
    import uuid

    from distributed import as_completed

    run = uuid.uuid4().hex[:12]
    first_name = _task_name(first)
    total = len(first_tasks)
    sizes = None
    if batch == "auto":
        sizes = batch_sizes(total, distributed.cluster_threads(client))
    if sizes is not None and len(sizes) < total:
        starts = [0] + list(itertools.accumulate(sizes))
        arguments = [_Arguments((first, first_tasks[a:b],
                                 BATCHES_HEAP_KEPT))
                     for a, b in zip(starts, starts[1:])]
        function = functools.partial(_starred, _run_batch_packed)
    else:
        arguments = [_Arguments(task) for task in first_tasks]
        function = functools.partial(_starred, functools.partial(
            _in_kept_heap, first))
    firsts = client.map(function, arguments,
                        key=[f"{first_name}-{run}-{k:07d}"
                             for k in range(len(arguments))],
                        pure=False, resources=first_resources)
    batched = sizes is not None and len(sizes) < total
    joined = client.submit(_join_task, join, _Arguments(join_arguments),
                           batched, *firsts, key=f"{_task_name(join)}-{run}",
                           pure=False)
    value = client.submit(operator.getitem, joined, 1,
                          key=f"{_task_name(join)}-value-{run}", pure=False)
    second_name = _task_name(second)
    seconds = client.map(
        functools.partial(_second_task, second), [joined] * len(second_tasks),
        [_Arguments(task) for task in second_tasks],
        key=[f"{second_name}-{run}-{k:07d}" for k in range(len(second_tasks))],
        pure=False, resources=second_resources)
    kind = {f.key: 0 for f in firsts}
    kind.update({f.key: 2 for f in seconds})
    kind[joined.key] = 1
    kind[value.key] = 1
    names = {0: first_name, 1: _task_name(join), 2: second_name}
    done = [0, 0, 0]
    result = None
    everything = firsts + [joined, value] + seconds
    try:
        for future in as_completed(everything, loop=client.loop):
            part = kind[future.key]
            if future.status != "finished":
                _dask_result(future, None, names[part])  # raises
            done[part] += 1
            if part == 0:
                first_progress(done[0] / max(len(firsts), 1))
            elif part == 2:
                second_progress(done[2] / max(len(seconds), 1))
            elif future.key == value.key:
                result = future.result()
    except BaseException:
        # finished ones too (round 1's results, the join's): they would
        # stay on the workers for as long as this frame lives
        client.cancel(everything, force=True)
        raise
    return result


def _join_task(join, arguments, batched, *results):
    """The join of :func:`_joined_rounds_on_dask`, on a worker: round 1's
    results (batches flattened) in task order."""
    if batched:
        results = [result for batch in results for result in batch.items]
    with task_numba_threads():
        return join(*arguments.values, list(results))


def _run_batch_packed(function, tasks, heap_kept_after=False):
    """:func:`_run_batch`'s results as one :class:`Packed` (a round 1
    batch of :func:`_joined_rounds_on_dask`)."""
    return Packed(_run_batch(function, tasks, heap_kept_after))


def _second_task(second, joined, arguments):
    """A round 2 task of :func:`_joined_rounds_on_dask`: ``second(shared,
    *task)`` with the join's shared part."""
    return _in_kept_heap(second, joined[0], *arguments.values)


def _task_name(function):
    """A task function's name for its Dask keys."""
    return getattr(function, "__name__", None) or getattr(
        getattr(function, "func", None), "__name__", "tile")


class _Arguments:
    """A task's arguments, opaque to Dask (a tuple starting with a
    function, as a batch's is, would be read as a task of the graph)."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = tuple(values)

    def __getstate__(self):
        return self.values

    def __setstate__(self, values):
        self.values = values


def _starred(function, arguments):
    """``function(*arguments)``: a task of :func:`_run_round_on_dask`."""
    return function(*arguments.values)


@contextmanager
def task_numba_threads():
    """For the ``with`` block (a Dask tile task): numba's parallel kernels
    on this thread use :data:`DASK_TASK_NUMBA_THREADS` threads (numba's
    setting is the calling thread's), set back afterwards."""
    import numba
    previous = numba.get_num_threads()
    if DASK_TASK_NUMBA_THREADS is None or \
            previous <= DASK_TASK_NUMBA_THREADS:
        yield
        return
    numba.set_num_threads(DASK_TASK_NUMBA_THREADS)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def _on_task_threads(function, *arguments):
    """``function(*arguments)`` under :func:`task_numba_threads`: a Dask
    task of a :class:`task_pool.TaskPool`."""
    with task_numba_threads():
        return function(*unkept(arguments))


def _on_task_threads_heap_kept(function, *arguments):
    """:func:`_on_task_threads` with freed memory kept in the heap after
    the step or task, for the worker's next one (:data:`STEP_HEAP_KEPT`,
    :data:`TASK_HEAP_KEPT`; the pool's close and the tiled run's end set
    the worker's own settings back: :func:`workers_malloc_settings_back`)."""
    with task_numba_threads():
        keep_freed_memory()
        return function(*unkept(arguments))


def _in_kept_heap(function, *arguments):
    """``function(*arguments)`` with freed memory reused inside it
    (:func:`heap_kept_for_tiles`), on the task's threads
    (:func:`task_numba_threads`): a Dask tile task."""
    with task_numba_threads(), heap_kept_for_tiles():
        return function(*unkept(arguments))


def _run_batch(function, tasks, heap_kept_after=False):
    """``function(*task)`` for each task of a batch, in order, freed
    memory reused from tile to tile (:func:`heap_kept_for_tiles`; with
    ``heap_kept_after``, the driver's :data:`BATCHES_HEAP_KEPT`, also
    after the batch), on the task's threads (:func:`task_numba_threads`)."""
    if heap_kept_after and HEAP_KEPT_IN_BATCHES:
        return _on_task_threads_heap_kept(
            lambda: [function(*task) for task in tasks])
    with task_numba_threads(), heap_kept_for_tiles():
        return [function(*task) for task in tasks]


def _run_batch_kept(function, tasks, heap_kept_after=False):
    """:func:`_run_batch` of tasks returning ``(message, state)``: the
    batch's ``(messages, states)``, split by Dask so that only the
    messages travel."""
    results = _run_batch(function, tasks, heap_kept_after)
    return [message for message, _ in results], \
        [state for _, state in results]


@dataclass(frozen=True)
class KeptPart:
    """One tile's state kept on the workers inside its batch's state (a
    Dask future of a list): ``future`` and the tile's ``index`` in it."""

    future: object
    index: int


def kept_groups(states):
    """The kept states of a round (``run_tasks(keep=True)``'s, in task
    order) grouped by the Dask future that holds them: a list of
    ``(future, [(index in the future's list or None, task number)])``, in
    order of first appearance.  A later task given one group's future runs
    where those states are.  Index None: the state is the future itself
    (an unbatched task's) or a plain value (not on Dask)."""
    groups = {}
    for number, state in enumerate(states):
        if isinstance(state, KeptPart):
            future, index = state.future, state.index
        else:
            future, index = state, None
        key = getattr(future, "key", None) or id(future)
        groups.setdefault(key, (future, []))[1].append((index, number))
    return list(groups.values())


def _run_batches_on_dask(client, function, tasks, sizes, consume,
                         progress, resources=None, keep=False, at_once=False):
    """:func:`run_tasks` on a Dask client, ``sizes[k]`` tasks in the k-th
    Dask task (with ``keep``, states as :class:`KeptPart`)."""
    import itertools

    starts = [0] + list(itertools.accumulate(sizes))[:-1]

    def batches():
        for size in sizes:
            yield (function, list(itertools.islice(tasks, size)),
                   BATCHES_HEAP_KEPT)

    def consume_batch(index, results):
        if keep:
            messages, future = results
            results = [(message, KeptPart(future, k))
                       for k, message in enumerate(messages)]
        else:
            results = results.items
        for k, result in enumerate(results):
            consume(starts[index] + k, result)

    _run_on_dask(client, _run_batch_kept if keep else _run_batch_packed,
                 batches(),
                 len(starts), consume_batch, progress, keep, resources,
                 name=getattr(function, "__name__", None) or getattr(
                     getattr(function, "func", None), "__name__", "tile"),
                 at_once=at_once)


def _dask_result(future, value, name):
    """The value ``as_completed(with_results=True, raise_errors=False)``
    gave with ``future``; a failed task's error raised, explained."""
    if future.status == "finished":
        return value
    try:
        return future.result()  # raises the task's error (or cancel)
    except Exception as error:
        explained = distributed.explain_failure(error, name)
        if explained is not None:
            raise explained from None
        raise


@dataclass(frozen=True)
class KeptStep:
    """A :class:`task_pool.TaskPool` task's result on a Dask worker
    (``keep``): its ``message`` (with the worker's address when the pool
    places tasks by locality) and its ``state``.  Later tasks are given the
    future of the whole result and take its state (:func:`unkept`), so one
    task, not a split, holds the state."""

    message: object
    state: object


def unkept(arguments):
    """``arguments`` with every :class:`KeptStep` replaced by its state."""
    return tuple(a.state if isinstance(a, KeptStep) else a
                 for a in arguments)
