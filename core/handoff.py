"""A second round submitted with the first, its answers handed off later.

Two rounds joined by one call in the driver (components' round 1, the
merge, the label round) leave every worker idle from its last round 1
task until the second round's tasks reach it: on the H100 host's CPUs
(components, neuse40, 8 one-thread Dask workers, 2026-12-05) 37-51 ms
from round 1's last task to the first label task, and round 1's workers
finished 20 ms apart before that, in runs of 0.36-0.47 s
(docs/benchmarks.md, Dask, thirty-sixth and thirty-eighth sessions).

Here the second round's tasks are submitted right behind the first
round's, each with a :class:`Handoff`: a picklable reference to the part
of the join's answers it needs, which the driver publishes, once the
join has run, as one file in a scratch folder beside the output
(:class:`HandoffBoard`).  A task that starts before the answers are out
does the work that does not need them (components: labels its run's
first tiles) and then waits for them; after a second it leaves its
worker's thread count (Dask's ``secede``), so that a round 1 task sent
there behind it (retried after a worker died) is not kept waiting.  The
same calls with the same answers, so the same results.

Only for workers on the driver's host (the folder is read at once; a
network file system's attribute cache could hide the file for seconds).
The driver removes the folder when the rounds end, and at once when they
fail or are cancelled: a task waiting then stops with
:class:`HandoffStopped`.  A task retried after the answers are out finds
them at once.
"""

import os
import pickle
import shutil
import time

import numpy as np

from . import scratch

# How often a waiting task looks for the answers file (seconds).
POLL_SECONDS = 0.0002
# A task waiting this long leaves its Dask worker's thread count
# (``secede``): a round 1 task Dask sent to the worker behind it (one
# retried after another worker died) then runs.  Not at once: each
# thread left lets Dask start the worker's next queued task, which would
# wait too (the 8-worker runs of 2026-12-06 started all 36 label runs
# that way, several threads a worker).
SECEDE_AFTER_SECONDS = 1.0
# A waiting task gives up after this long without the answers (the driver
# died without removing the folder: a SIGKILL).
WAIT_SECONDS = 600.0
ANSWERS_NAME = "answers"


class HandoffStopped(RuntimeError):
    """The driver stopped the rounds before handing off the answers."""


class Handoff:
    """Task ``index``'s part of the answers published in ``folder``."""

    __slots__ = ("folder", "index")

    def __init__(self, folder, index):
        self.folder = folder
        self.index = index

    def __getstate__(self):
        return self.folder, self.index

    def __setstate__(self, state):
        self.folder, self.index = state

    def fetch(self, wait=False):
        """The part, or None while it is not out (``wait``: until it is)."""
        path = os.path.join(self.folder, ANSWERS_NAME)
        part = _read_part(path, self.index)
        if part is not None or not wait:
            if part is None and not os.path.isdir(self.folder):
                raise HandoffStopped(_stopped_message(self.folder))
            return part
        with _off_worker_threads(SECEDE_AFTER_SECONDS) as threads:
            start = time.monotonic()
            while True:
                part = _read_part(path, self.index)
                if part is not None:
                    return part
                if not os.path.isdir(self.folder) or _task_cancelled():
                    raise HandoffStopped(_stopped_message(self.folder))
                waited = time.monotonic() - start
                if waited > WAIT_SECONDS:
                    raise HandoffStopped(
                        f"no answers in {self.folder} after {WAIT_SECONDS:.0f}"
                        " s: the run's driver stopped without removing it; "
                        "run again")
                threads.waited(waited)
                time.sleep(POLL_SECONDS)


def _stopped_message(folder):
    return (f"the run was stopped before its answers were handed off "
            f"({folder} is gone)")


def _read_part(path, index):
    """Part ``index`` of the answers file at ``path`` (None: not out)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        count = int(np.frombuffer(os.pread(fd, 8, 0), np.int64)[0])
        if not 0 <= index < count:
            raise IndexError(f"part {index} of {count} in {path}")
        offsets = np.frombuffer(os.pread(fd, 16, 8 * (1 + index)), np.int64)
        size = int(offsets[1] - offsets[0])
        data = os.pread(fd, size, int(offsets[0]))
        if len(data) != size:
            raise OSError(f"{path} ends early (part {index})")
        return pickle.loads(data)
    finally:
        os.close(fd)


class HandoffBoard:
    """The driver's side: a scratch folder in ``parent`` (the output's
    folder) holding the answers once :meth:`publish` has run; removed by
    :meth:`close` (tasks still waiting then stop)."""

    def __init__(self, parent):
        self.folder = scratch.make_run_folder("handoff", parent)

    def handoff(self, index):
        return Handoff(self.folder, index)

    def publish(self, parts):
        """The parts, task by task, as one file (written, then renamed into
        place: a task reads all of it or none)."""
        blobs = [pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
                 for part in parts]
        header = np.zeros(len(blobs) + 2, np.int64)
        header[0] = len(blobs)
        header[1] = 8 * header.size
        np.cumsum([len(blob) for blob in blobs], out=header[2:])
        header[2:] += header[1]
        partial = os.path.join(self.folder, ANSWERS_NAME + ".partial")
        with scratch.disk_errors(self.folder, int(header[-1]),
                                 "the label round's answers"):
            with open(partial, "wb") as out:
                out.write(header.tobytes())
                for blob in blobs:
                    out.write(blob)
            os.replace(partial, os.path.join(self.folder, ANSWERS_NAME))

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


class _off_worker_threads:
    """On a Dask worker, a task that has waited ``after`` seconds
    (:meth:`waited`) leaves the worker's thread count (``secede``), and
    takes a thread again when the wait ends (``rejoin``): a task queued
    behind it runs meanwhile.  Elsewhere nothing."""

    def __init__(self, after):
        self.after = after
        self.seceded = False

    def __enter__(self):
        return self

    def waited(self, seconds):
        if self.seceded or seconds < self.after:
            return
        try:
            from distributed import secede
            from distributed.worker import get_worker
            get_worker()
        except (ImportError, ValueError):
            self.after = float("inf")  # not a Dask task
            return
        secede()
        self.seceded = True

    def __exit__(self, *exc):
        if self.seceded:
            from distributed import rejoin
            rejoin()


def _task_cancelled():
    """Whether Dask has cancelled the task this thread runs (False outside
    a Dask task)."""
    try:
        from distributed.worker import get_worker, thread_state
        key = thread_state.key
        state = get_worker().state.tasks.get(key)
    except (ImportError, ValueError, AttributeError):
        return False
    return state is None or state.state in ("cancelled", "released",
                                            "forgotten")
