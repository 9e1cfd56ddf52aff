"""A pool of tile tasks submitted one by one and collected as they finish
(:class:`TaskPool`), for drivers that pick the next task from the last
answers: the cost distance's propagation (``costdistance/rounds.py``).
Rounds of independent tasks run through :func:`tile_tasks.run_tasks`;
this module shares its task wrappers (numba's threads, the kept heap).
"""

import functools
from concurrent.futures import FIRST_COMPLETED, wait

from . import distributed, tile_tasks
from .tile_tasks import (KeptStep, _dask_result, _on_task_threads,
                         _on_task_threads_heap_kept, release_free_memory,
                         workers_malloc_settings_back)

# On a Dask cluster a TaskPool step that keeps its state (``keep``) is one
# task: its message reaches the driver as an event the task logs (Dask's
# ``log_event``: worker, scheduler, this client, on the streams the task's
# own completion takes), not as the result of a second task split off on
# the worker and fetched through the scheduler.  The split waited for a
# worker thread (behind the next step when two are queued a worker) and
# took six hops to the driver (docs/benchmarks.md, Dask, fifteenth
# session).  The step's result (a KeptStep) stays the state's future, so
# Dask still recomputes a lost state from its lineage; a step run twice
# logs twice and the driver takes the first.
PUSHED_MESSAGES = True
# Seconds a finished step's event may come after its completion before
# the driver fetches the message with a task instead (an event never
# comes when the scheduler drops it, e.g. a topic it no longer keeps).
PUSHED_MESSAGE_GRACE_S = 2.0
# Seconds between the driver's checks for finished steps without their
# event while it waits.
PUSHED_MESSAGE_POLL_S = 0.05


class TaskPool:
    """Tile tasks submitted one by one and collected as they finish, for
    drivers that decide the next task from the last results (the cost
    distance's propagation).

    ``submit(tag, function, *arguments)`` starts a task (in-process: runs
    it at once); ``next_done()`` waits for a finished one and returns
    ``(tag, result)``; ``len(pool)`` counts those not collected yet.  With
    ``keep=True`` results are ``(message, state)`` as in
    :func:`tile_tasks.run_tasks`
    (state a future on a Dask client); ``resources`` as there.
    ``cancel()`` cancels what is outstanding (on errors and on cancel).
    """

    def __init__(self, executor, keep=False, name="tile", resources=None,
                 locality=False):
        self.executor = executor
        self.resources = resources
        self.keep = keep
        self.name = name
        self.outstanding = {}
        self._done = []
        self._serial = 0
        self._dask = distributed.is_dask_client(executor)
        # where each tag's last result is (a worker address), and the
        # tasks in flight per worker: see can_start
        self.worker_of = {}
        self._threads = None
        self._busy = {}
        self._topic = None  # Dask's event topic of pushed messages
        # the workers' freed memory kept between steps
        # (tile_tasks.STEP_HEAP_KEPT)
        self._heap_kept = self._dask and tile_tasks.STEP_HEAP_KEPT
        if self._dask:
            import uuid

            from distributed import as_completed
            self._completed = as_completed(loop=executor.loop,
                                           with_results=True,
                                           raise_errors=False)
            self._run = uuid.uuid4().hex[:12]
            if keep and PUSHED_MESSAGES:
                import queue
                self._topic = f"gridgraph-{name}-{self._run}"
                self._arrived = queue.SimpleQueue()  # (kind, key, payload)
                self._by_key = {}  # key -> the step's future
                self._finished_at = {}  # key -> when, finished, no event
                self._listener = _EventQueue(self._arrived)
                executor.subscribe_topic(self._topic, self._listener)
            if locality and keep and resources is None:
                self._threads = {
                    address: threads for address, (threads, _) in
                    distributed.cluster_workers(executor).items()}
                self._busy = dict.fromkeys(self._threads, 0)

    def __len__(self):
        return len(self.outstanding) + len(self._done)

    def can_start(self, tag):
        """Whether a task for ``tag`` would start at once: with locality
        (a Dask cluster, ``keep``), the worker holding ``tag``'s last state
        has a thread free (or, for a tag without one, some worker has);
        always True otherwise.  Dask runs a task where its state is, so a
        driver that starts the tiles whose worker is busy leaves others
        idle until work stealing moves a task and its state."""
        if self._threads is None:
            return True
        where = self.worker_of.get(tag)
        if where is None or where not in self._threads:
            return self._free_worker() is not None
        return self._busy[where] < self._threads[where]

    def _free_worker(self):
        for address, threads in self._threads.items():
            if self._busy[address] < threads:
                return address
        return None

    def submit(self, tag, function, *arguments):
        if self.executor is None:
            self._done.append((tag, function(*arguments)))
            release_free_memory()
            return
        if not self._dask:
            self.outstanding[self.executor.submit(function, *arguments)] = \
                (tag, None)
            return
        key = f"{self.name}-{self._run}-{self._serial}"
        self._serial += 1
        client = self.executor
        function = functools.partial(
            _on_task_threads_heap_kept if self._heap_kept
            else _on_task_threads, function)
        target = None
        restriction = {}
        if self._threads is not None:
            target = self.worker_of.get(tag)
            if target not in self._threads:
                # no state yet (or its worker left): a free worker, as a
                # hint only (any other may run it, e.g. when it dies)
                target = self._free_worker()
                if target is not None:
                    restriction = dict(workers=[target],
                                       allow_other_workers=True)
            if target is not None:
                self._busy[target] += 1
        if self._topic is not None:
            function = functools.partial(
                _pushed_step, function, self._threads is not None,
                self._topic, key)
        elif self.keep:
            function = functools.partial(
                _kept_step, function, self._threads is not None)
        future = client.submit(function, *arguments, key=key, pure=False,
                               resources=self.resources, **restriction)
        state = None
        if self._topic is not None:
            # the step's future is its state; its message comes as an event
            self.outstanding[future] = (tag, future, target)
            self._by_key[key] = future
            arrived = self._arrived
            future.add_done_callback(
                lambda done: arrived.put(("done", done.key, None)))
            return
        if self.keep:
            # the task's own result is the state later tasks take (a
            # KeptStep: they unwrap it); only the message is split off,
            # where the result is (one small task, not two: each Dask
            # task costs the driver's process ~3 ms of its event loop)
            state = future
            future = client.submit(_message_of, future,
                                   key=key + "-message",
                                   resources=self.resources)
        self.outstanding[future] = (tag, state, target)
        self._completed.add(future)

    def next_done(self):
        """``(tag, result)`` of a finished task (waits for one)."""
        if self._done:
            return self._done.pop(0)
        if self._topic is not None:
            return self._next_pushed()
        if self._dask:
            future, value = next(self._completed)
            tag, state, target = self.outstanding.pop(future)
            if target is not None:
                self._busy[target] -= 1
            value = _dask_result(future, value, self.name)
            if self._threads is not None:
                value, self.worker_of[tag] = value
            return tag, ((value, state) if self.keep else value)
        future = next(iter(wait(list(self.outstanding),
                                return_when=FIRST_COMPLETED).done))
        tag, _ = self.outstanding.pop(future)
        return tag, future.result()

    def _next_pushed(self):
        """:meth:`next_done` with pushed messages: the first message event
        of an outstanding step; a failed step's error raised; a message
        fetched with a task when its step finished
        :data:`PUSHED_MESSAGE_GRACE_S` ago without one."""
        import pickle
        import queue
        import time
        while True:
            now = time.monotonic()
            for key, since in self._finished_at.items():
                if now - since > PUSHED_MESSAGE_GRACE_S:
                    return self._take(key, self._fetch_message(key))
            try:
                kind, key, payload = self._arrived.get(
                    timeout=PUSHED_MESSAGE_POLL_S)
            except queue.Empty:
                continue
            future = self._by_key.get(key)
            if future is None:
                continue  # a step run again, or cancelled
            if kind == "message":
                return self._take(key, pickle.loads(payload))
            if future.status in ("error", "cancelled"):
                _dask_result(future, None, self.name)  # raises
            # finished (or lost and run again): its event is on its way
            self._finished_at[key] = time.monotonic()

    def _fetch_message(self, key):
        """The message of step ``key`` by a task (its event lost)."""
        future = self.executor.submit(_message_of, self._by_key[key],
                                      key=key + "-message",
                                      resources=self.resources)
        try:
            return future.result()
        except Exception as error:
            explained = distributed.explain_failure(error, self.name)
            if explained is not None:
                raise explained from None
            raise

    def _take(self, key, message):
        future = self._by_key.pop(key)
        self._finished_at.pop(key, None)
        tag, state, target = self.outstanding.pop(future)
        if target is not None:
            self._busy[target] -= 1
        if self._threads is not None:
            message, self.worker_of[tag] = message
        return tag, (message, state)

    def close(self):
        """Stop listening for message events (on a Dask cluster): late
        events are dropped here, and the scheduler forgets the topic
        (best-effort; at most ``distributed.admin.low-level-log-length``
        events a topic stay there when it cannot).  With
        :data:`tile_tasks.STEP_HEAP_KEPT` every worker's own malloc
        settings are set back where a step kept freed memory (best-effort;
        a step starting later, recomputed or not yet cancelled, is set back
        at the end of the run: distributed.tile_executor)."""
        if self._heap_kept:
            self._heap_kept = False
            if self._serial:
                workers_malloc_settings_back(self.executor)
        if self._topic is None:
            return
        topic, self._topic = self._topic, None
        self._listener.queue = None  # the client keeps the handler
        client, client_id = self.executor, self.executor.id

        def forget(dask_scheduler=None):  # sent by value
            dask_scheduler.unsubscribe_topic(topic, client_id)
            getattr(dask_scheduler._broker, "_topics", {}).pop(topic, None)

        try:
            client.run_on_scheduler(
                forget, callback_timeout=distributed.DASK_CALL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - refused, or a cluster gone
            try:
                client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001
                pass

    def cancel(self):
        futures = list(self.outstanding)
        if self._dask:
            futures += [state for _, state, _ in self.outstanding.values()
                        if state is not None]
            if futures:
                self.executor.cancel(futures, force=True)
        else:
            for future in futures:
                future.cancel()
            wait(futures)
        self.outstanding.clear()
        self._done.clear()
        if self._topic is not None:
            self._by_key.clear()
            self._finished_at.clear()
        self.close()


def _kept_step(function, located, *arguments):
    """``function(*arguments)``'s ``(message, state)`` as a
    :class:`KeptStep`; with ``located`` the message is ``(message,
    address)``: the address of the worker that ran it (where the state
    stays; TaskPool's locality).  ``function`` is given the arguments
    as they came: :func:`_on_task_threads` unwraps them."""
    message, state = function(*arguments)
    if located:
        from distributed import get_worker
        message = (message, get_worker().address)
    return KeptStep(message, state)


class _EventQueue:
    """A pool's handler of its message events (on the client's event loop):
    each event's ``(key, payload)`` queued for the driver's thread, none
    once the pool closed.  It holds only the queue: the client keeps its
    handlers after unsubscribing."""

    def __init__(self, queue):
        self.queue = queue

    def __call__(self, event):
        queue = self.queue
        if queue is not None:
            key, payload = event[1]
            queue.put(("message", key, payload))


def _pushed_step(function, located, topic, key, *arguments):
    """:func:`_kept_step`, its message also sent to the driver as an event
    of ``topic`` (``[key, pickled message]``: events travel as msgpack)
    before the step returns."""
    import pickle

    from distributed import get_worker
    step = _kept_step(function, located, *arguments)
    get_worker().log_event(topic, [key, pickle.dumps(step.message,
                                                     protocol=5)])
    return step


def _message_of(step):
    """A :class:`KeptStep`'s message (the part that travels)."""
    return step.message
