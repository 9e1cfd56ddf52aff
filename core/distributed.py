"""Tile tasks on a Dask cluster: the client, the cluster's size and the
preflight.

``executor=`` of the core functions is None (this process), a
:class:`concurrent.futures.Executor`, a ``dask.distributed.Client`` or a
scheduler address such as ``"tcp://host:8786"`` (GridGraph then opens its
own client and closes it when the run ends).  Dask is imported only here and
only when one of the last two is given, so a CPU-only install without Dask
still runs.

With a Dask executor:

- the raster must be a file every worker can open (a path on shared storage,
  a GDAL virtual file system path such as ``/vsis3/...``, or a file-backed
  numpy memmap); an in-memory array is refused (it would be pickled whole
  into every task);
- the workers' thread count and memory limits size the tiles, not the
  driver's memory;
- :func:`preflight` runs one small task on every worker before any tile
  work: same GridGraph code, the input opens with the same shape and dtype,
  ``out_dir`` is the same writable folder (a token file the driver wrote
  must be readable there), and the operation's kernels are compiled (a
  warm-up run on a tiny raster), so a misconfigured worker fails the run up
  front with its address in the message;
- tile tasks are pure (they copy before they mutate), so the scheduler may
  run one twice or recompute a lost result from its inputs when a worker
  dies; large per-tile state stays on the workers as futures that later
  tasks take as arguments (:func:`run_tasks` with ``keep=True``);
- GPU workers are those started with the ``GPU`` resource (``dask worker
  --resources GPU=1``): with the CUDA backend the tasks that run CUDA
  kernels ask for that resource, so Dask places them only there and runs
  one at a time per worker process, and the tiles are sized from the
  device memory those workers report (:func:`gpu_tile_side`).
"""

import asyncio
import functools
import hashlib
import math
import os
import threading
import uuid
from contextlib import contextmanager

from .errors import BackendUnavailableError, GridGraphError, InvalidInputError

# Seconds to wait for a scheduler before saying it is unreachable.
CONNECT_TIMEOUT_S = 5
# Seconds for the preflight tasks (kernels may compile on a cold worker):
# past them the run fails naming the workers that had not answered.
PREFLIGHT_TIMEOUT_S = 600
# Seconds for a call that runs a short function on every worker or on the
# scheduler (``client.run``, ``run_on_scheduler``: the preflight's checks,
# the settings a run sets and sets back, the GPU workers' report): a worker
# whose event loop hangs would otherwise hang the run.  The settings are
# best-effort (a timeout leaves them); the checks fail the run.
DASK_CALL_TIMEOUT_S = 120
# Seconds for the calls that set a run's settings back once one of its
# calls has timed out: a hung worker or scheduler would make each of them
# wait the whole DASK_CALL_TIMEOUT_S again before the run's error comes.
DASK_CALL_TIMEOUT_AFTER_HANG_S = 5
# Seconds for the preflight's checks by ``client.run`` (answered from each
# worker's event loop); past them every worker is checked by a task
# instead, within PREFLIGHT_TIMEOUT_S, which names the late workers.
PREFLIGHT_CHECK_TIMEOUT_S = 120
# What a timed-out Dask call raises (asyncio's is the builtin from Python
# 3.11 on, a class of its own before).
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)
# Seconds a Dask stream waits after sending a batch before it sends the
# next one, for the length of a tiled run (None: Dask's own intervals, set
# back after the run).  Dask batches the messages between the client, the
# scheduler and the workers; a message that comes less than an interval
# after the last batch waits for the interval's end: 10 ms from the client,
# 5 ms from the scheduler to a worker, 2 ms from a worker and from the
# scheduler to the client (fixed in its code, no setting).  The cost
# distance's rounds are a chain of short steps (a tile task, its message
# to this driver, the driver's next task), each crossing those streams a
# few times, so a step waited ~25 ms whatever the task's length
# (docs/benchmarks.md, "Fifteenth session").
DASK_BATCH_INTERVAL_S = 0.0
# Dask's own intervals (distributed 2024.12: client.py, scheduler.py,
# worker.py), set back where a run found another run's
DASK_FROM_CLIENT_S, DASK_TO_WORKER_S = 0.01, 0.005
DASK_TO_CLIENT_S = DASK_FROM_WORKER_S = 0.002


class ClusterError(GridGraphError, RuntimeError):
    """The Dask cluster could not run the tile tasks (a worker failed the
    preflight, or tasks kept killing workers)."""


# --------------------------------------------------------------------------
# what an executor is


def is_dask_client(executor):
    """True for a ``distributed.Client`` (checked without importing Dask)."""
    kind = type(executor)
    return kind.__name__ == "Client" and \
        kind.__module__.split(".")[0] == "distributed"


def is_distributed(executor):
    """True for a Dask client or a scheduler address."""
    return isinstance(executor, str) or is_dask_client(executor)


def check_address(address):
    """A scheduler address ``protocol://host:port``, stripped."""
    address = address.strip()
    if "://" not in address or address.endswith("://"):
        raise InvalidInputError(
            f"the Dask scheduler address must look like tcp://host:8786, got "
            f"{address!r}: give the address the scheduler prints when it "
            "starts, or leave it empty to run in this process")
    return address


def connect(address, timeout=None):
    """A new client on the scheduler at ``address``; fails fast (after
    :data:`CONNECT_TIMEOUT_S`) with the address in the message."""
    address = check_address(address)
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a dependency
        raise InvalidInputError(
            "a Dask scheduler was given but dask[distributed] is not "
            "installed: pip install 'dask[distributed]', or leave the "
            "scheduler empty to run in this process") from None
    timeout = timeout or CONNECT_TIMEOUT_S
    _probe(address, timeout)
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise InvalidInputError(
            f"cannot reach the Dask scheduler at {address} ({error}): check "
            "that the scheduler runs and the address and port are right, or "
            "leave the scheduler empty to run in this process") from None


def _probe(address, timeout):
    """Fail at once when nothing listens at a tcp:// address (Dask's own
    connect retries until its timeout)."""
    import socket
    from urllib.parse import urlsplit
    if not address.startswith("tcp://"):
        return
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise InvalidInputError(
            f"the Dask scheduler address {address!r} has no host and port: "
            "give it as tcp://host:8786")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise InvalidInputError(
            f"cannot reach the Dask scheduler at {address} ({error}): check "
            "that the scheduler runs and the address and port are right, or "
            "leave the scheduler empty to run in this process") from None


@contextmanager
def client_for(executor):
    """The executor as a Dask client for the ``with`` block: the client
    itself, or one opened on an address and closed afterwards."""
    if is_dask_client(executor):
        yield executor
        return
    client = connect(executor)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def executor_scope(executor):
    """``executor`` ready for :func:`run_tasks`: a scheduler address becomes
    a client that lives for the ``with`` block; anything else is yielded
    as it is."""
    if isinstance(executor, str):
        with client_for(executor) as client:
            yield client
    else:
        yield executor


def worker_interval(dask_worker=None, interval=None, old=None):
    """Runs on a worker (``client.run``): its stream to the scheduler's
    batching interval set to ``interval``, or set back to ``old[its
    address]`` (a worker not in ``old``, such as one that joined since, is
    left as it is).  Returns the interval found; one found at
    ``interval`` was set by another run still going on the same cluster,
    for which Dask's own is returned (set back to the other run's value
    it would stay there after both)."""
    stream = dask_worker.batched_stream
    found = stream.interval if stream.interval != interval \
        else DASK_FROM_WORKER_S
    stream.interval = interval if old is None else \
        old.get(dask_worker.address, stream.interval)
    return found


class RunIntervals:
    """Dask's message batching intervals of one tiled run
    (:func:`tile_executor`), set to :data:`DASK_BATCH_INTERVAL_S`: this
    client's stream to the scheduler and the scheduler's streams to the
    workers and to this client set here, the workers' streams
    set by :meth:`set_on_workers` or by the preflight's ``client.run``
    (:func:`_check_setting_interval`, one round trip fewer) and set
    back with the run's other worker settings (:func:`run_end_on_worker`).
    ``workers_old``: address -> the interval each worker had (None until
    known); ``workers_touched``: whether the workers' may have been set."""

    def __init__(self, client, seconds):
        self.client = client
        self.seconds = seconds
        self.own = None
        self.scheduler = None
        self.workers_old = None
        self.workers_touched = False
        self.timeout = DASK_CALL_TIMEOUT_S

    def hung(self):
        """A call of the run timed out: the settings' later calls wait
        :data:`DASK_CALL_TIMEOUT_AFTER_HANG_S` only."""
        self.timeout = min(self.timeout, DASK_CALL_TIMEOUT_AFTER_HANG_S)

    def set_here_and_on_scheduler(self):
        client, seconds = self.client, self.seconds
        own = getattr(client.scheduler_comm, "interval", None)
        if own == seconds:
            own = DASK_FROM_CLIENT_S
        if own is not None:
            client.scheduler_comm.interval = seconds
        self.own = own
        try:
            self.scheduler = client.run_on_scheduler(
                _scheduler_interval(client.id), interval=seconds,
                callback_timeout=self.timeout)
        except _TIMEOUTS:
            self.hung()
            self.scheduler = None
        except Exception:  # noqa: BLE001 - a refused or older scheduler
            self.scheduler = None

    def set_on_workers(self):
        self.workers_touched = True
        try:
            self.workers_old = self.client.run(
                worker_interval, interval=self.seconds, on_error="ignore",
                callback_timeout=self.timeout)
        except _TIMEOUTS:
            self.hung()
            self.workers_old = None
        except Exception:  # noqa: BLE001
            self.workers_old = None

    def restore_here_and_on_scheduler(self):
        client = self.client
        if self.own is not None and client.scheduler_comm is not None:
            client.scheduler_comm.interval = self.own
        try:
            if self.scheduler:
                client.run_on_scheduler(_scheduler_interval(client.id),
                                        old=self.scheduler,
                                        callback_timeout=self.timeout)
        except Exception:  # noqa: BLE001 - a cluster gone after a failure
            pass


def _scheduler_interval(client_id):
    """The function that sets the scheduler's streams' intervals (run by
    ``run_on_scheduler``), defined here so that cloudpickle sends it by
    value: the scheduler need not have GridGraph installed.  ``old``:
    name -> interval to set back, as :func:`worker_interval`."""
    to_client, to_worker = DASK_TO_CLIENT_S, DASK_TO_WORKER_S

    def on_scheduler(dask_scheduler=None, interval=None, old=None):
        streams = dict(dask_scheduler.stream_comms)
        if client_id in dask_scheduler.client_comms:
            streams[client_id] = dask_scheduler.client_comms[client_id]
        found = {}
        for name, stream in streams.items():
            found[name] = stream.interval if stream.interval != interval \
                else to_client if name == client_id else to_worker
            stream.interval = interval if old is None else \
                old.get(name, stream.interval)
        return found
    return on_scheduler


def run_end_on_worker(dask_worker=None, interval=None, old=None):
    """Runs on every worker at a tiled run's end (``client.run``, one
    round trip): the stream's batching interval set back
    (:func:`worker_interval`: to ``old``, or, where the preflight that
    would have told it failed, Dask's own if it is still at the run's
    ``interval``; None: the workers' were not touched) and, whatever that
    meets, the worker's own malloc settings back where a step
    kept freed memory (:func:`tile_tasks.own_malloc_settings_if_kept`)."""
    from .tile_tasks import own_malloc_settings_if_kept
    try:
        if old is not None:
            worker_interval(dask_worker, old=old)
        elif interval is not None and \
                dask_worker.batched_stream.interval == interval:
            dask_worker.batched_stream.interval = DASK_FROM_WORKER_S
    finally:
        own_malloc_settings_if_kept()


# --------------------------------------------------------------------------
# the cluster's size


# The workers the scheduler listed at a tiled run's preflight, by client
# id and driver thread, for the length of the run (tile_executor): the run's sizing calls
# (threads, memory, hosts) read them instead of asking the scheduler again,
# a round trip each (~1 ms on the H200 host, five in a components run).
# A worker that joins during the run gets tasks all the same; only the
# sizes the run was planned with stay as they were.
_RUN_WORKERS = {}


def _workers_info(client):
    """The scheduler's ``workers`` of ``scheduler_info()``: the list of the
    tiled run this thread is in with this client (:data:`_RUN_WORKERS`),
    else asked now."""
    kept = _RUN_WORKERS.get((getattr(client, "id", None),
                             threading.get_ident()))
    if kept:
        return kept[-1]
    return client.scheduler_info()["workers"]


@contextmanager
def _run_workers(client, workers):
    """``workers`` (a ``scheduler_info()["workers"]``) stand for the
    cluster's in this thread for the ``with`` block (:data:`_RUN_WORKERS`,
    by client and thread: a run in another thread asks for its own; runs
    may nest)."""
    key = (client.id, threading.get_ident())
    stack = _RUN_WORKERS.setdefault(key, [])
    stack.append(workers)
    try:
        yield
    finally:
        stack.pop()
        if not stack:
            _RUN_WORKERS.pop(key, None)


def cluster_workers(client, info=None):
    """``{address: (threads, memory_limit_bytes or None)}`` of the workers
    (``info``: a ``scheduler_info()["workers"]`` already asked for);
    refuses a cluster without workers."""
    workers = _workers_info(client) if info is None else info
    if not workers:
        raise ClusterError(
            f"the Dask cluster at {client.scheduler.address} has no worker: "
            "start workers (dask worker <scheduler address>) and run again")
    return {address: (int(info.get("nthreads") or 1),
                      int(info.get("memory_limit") or 0) or None)
            for address, info in workers.items()}


def cluster_hosts(client):
    """The hosts (addresses) the cluster's workers listen on."""
    return {info.get("host") for info in _workers_info(client).values()}


def one_host(executor):
    """Whether every tile task of ``executor`` runs on this one machine:
    in process, on a pool, or on a Dask cluster whose workers all listen
    on one host (workers on two addresses count as two machines).  Only
    then do writers share one page cache, which writes through shared
    mappings need: on a network file system each machine writes back
    whole pages, so two machines writing the two ends of one page (the
    seam of two label runs) would each overwrite the other's bytes;
    ``pwrite`` sends the bytes written only."""
    if not is_distributed(executor):
        return True
    with client_for(executor) as client:
        return len(cluster_hosts(client)) <= 1


def cluster_threads(client, workers=None):
    """How many tile tasks the cluster runs at once (its threads;
    ``workers``: a :func:`cluster_workers` already asked for)."""
    workers = cluster_workers(client) if workers is None else workers
    return sum(threads for threads, _ in workers.values())


def memory_per_thread(client, workers=None):
    """The smallest worker memory limit per thread, in bytes (None when no
    worker has a limit; ``workers`` as for :func:`cluster_threads`)."""
    workers = cluster_workers(client) if workers is None else workers
    shares = [limit / threads for threads, limit in workers.values()
              if limit is not None]
    return int(min(shares)) if shares else None


# --------------------------------------------------------------------------
# GPU workers

# The Dask resource a GPU worker is started with (one per GPU it may use).
GPU_RESOURCE = "GPU"


def gpu_workers(client):
    """Addresses of the workers that have the ``GPU`` resource."""
    workers = _workers_info(client)
    return sorted(address for address, info in workers.items()
                  if (info.get("resources") or {}).get(GPU_RESOURCE, 0) >= 1)


def task_resources(backend, executor):
    """The Dask resources of a tile task running ``backend``'s kernels:
    one GPU for CUDA on a Dask client (placed on GPU workers only, one at a
    time per worker process), None otherwise."""
    if backend == "cuda" and is_dask_client(executor):
        return {GPU_RESOURCE: 1}
    return None


def resolve_backend(executor, backend):
    """The backend a run uses (:func:`gridgraph.core._common.resolve_backend`
    in this process).  On a Dask cluster the workers decide: ``cuda`` needs
    workers with the GPU resource, ``auto`` is CUDA when there are some,
    else the CPU; the driver needs no GPU."""
    from ._common import resolve_backend as resolve_here
    name = "auto" if backend is None else str(backend).lower()
    if not is_distributed(executor) or name not in ("auto", "cuda"):
        return resolve_here(backend)
    with client_for(executor) as client:
        if gpu_workers(client):
            return "cuda"
        address = client.scheduler.address
    if name == "cuda":
        raise BackendUnavailableError(
            f"the cuda backend was requested but no worker of the Dask "
            f"cluster at {address} has the {GPU_RESOURCE} resource: start "
            f"the GPU workers with 'dask worker {address} --resources "
            f"{GPU_RESOURCE}=1' (one worker process per GPU, or several "
            "sharing one), or use backend='cpu'")
    return "cpu"


def device_report():
    """Runs on a GPU worker: ``(host, device, usable bytes or None,
    problem or None)``: the CUDA device this process uses and the device
    memory its kernels may take."""
    import socket
    host = socket.gethostname()
    try:
        from ._common import cuda_available
        if not cuda_available():
            return host, None, None, (
                "has the GPU resource but numba finds no usable CUDA device "
                "(driver, numba-cuda)")
        from numba import cuda

        from ._cuda_common import usable_device_memory
        device = cuda.current_context().device
        ident = str(getattr(device, "uuid", None) or getattr(device, "id", 0))
        usable = usable_device_memory()
        if usable is not None and not math.isfinite(usable):
            usable = None  # the CUDA simulator: no real device memory
        return host, ident, None if usable is None else int(usable), None
    except Exception as error:  # reported with the worker's address
        return host, None, None, (
            f"cannot use its CUDA device ({type(error).__name__}: {error})")


def gpu_tile_side(executor, bytes_for_cells):
    """Check the cluster's GPU workers and size tiles for their devices:
    the largest power-of-two tile side (>= 8) whose kernel memory
    ``bytes_for_cells(n_cells)`` takes at most half of the least device
    memory a GPU worker may use (its device's usable memory shared by the
    GPU workers on that device), or None when no worker can say.  Raises
    :class:`ClusterError` naming a GPU worker without a usable device."""
    with client_for(executor) as client:
        addresses = gpu_workers(client)
        try:
            reports = client.run(device_report, workers=addresses,
                                 callback_timeout=DASK_CALL_TIMEOUT_S)
        except _TIMEOUTS:
            raise ClusterError(
                f"the Dask GPU workers did not report their CUDA devices "
                f"within {DASK_CALL_TIMEOUT_S} s: check that every GPU "
                "worker is running (its event loop may be blocked)") from None
    problems = [f"worker {address}: {report[3]}"
                for address, report in sorted(reports.items()) if report[3]]
    if problems:
        raise ClusterError(
            "the Dask GPU workers cannot run the CUDA tile kernels: "
            + "; ".join(problems) + ". Install the NVIDIA driver and "
            "numba-cuda there, or run with backend='cpu'")
    sharing = {}
    for host, device, _, _ in reports.values():
        sharing[(host, device)] = sharing.get((host, device), 0) + 1
    shares = [usable // sharing[(host, device)]
              for host, device, usable, _ in reports.values()
              if usable is not None]
    if not shares:
        return None
    usable = min(shares)
    side = 8
    while bytes_for_cells(4 * side * side) <= usable // 2:
        side *= 2
    return side


def fit_tiles_to_gpus(plan, executor, backend, tile_size, bytes_for_cells,
                      replan):
    """On a Dask cluster with the CUDA backend: check the GPU workers
    (:func:`gpu_tile_side`) and, with automatic tiles (``tile_size`` None or
    0), ``replan(side)`` when their devices need smaller tiles than
    ``plan``'s.  ``bytes_for_cells(n_cells, dtype)`` is the kernel's device
    memory.  Anything else: ``plan`` as it is."""
    if plan is None or backend != "cuda" or not is_distributed(executor):
        return plan
    side = gpu_tile_side(executor,
                         lambda n: bytes_for_cells(n, plan.source.dtype))
    if side is None or tile_size or side >= plan.grid.tile_size:
        return plan
    return replan(side)


# --------------------------------------------------------------------------
# preflight


@functools.lru_cache(maxsize=None)
def code_fingerprint():
    """The plugin's version and a digest of the engine's source: workers
    must run the same code as the driver (results are compared bit for
    bit).  Taken once per process: the code a process runs is the code it
    loaded."""
    core = os.path.dirname(os.path.abspath(__file__))
    version = "unknown"
    try:
        with open(os.path.join(os.path.dirname(core), "metadata.txt")) as meta:
            for line in meta:
                if line.startswith("version="):
                    version = line.split("=", 1)[1].strip()
    except OSError:
        pass
    digest = hashlib.sha256()
    for folder, subfolders, files in sorted(os.walk(core)):
        subfolders[:] = sorted(s for s in subfolders if s != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                digest.update(os.path.relpath(os.path.join(folder, name),
                                              core).encode())
                with open(os.path.join(folder, name), "rb") as handle:
                    digest.update(handle.read())
    return f"{version}+{digest.hexdigest()[:12]}"


def source_path(source):
    """The path of a file-backed raster source, None for an in-memory one."""
    return getattr(source, "path", None)


def worker_check(sources, out_dir, token, warm_up, warmed=None):
    """Runs on a worker: what :func:`preflight` compares.  Returns a dict;
    problems are reported as strings, never raised, so every worker's
    answer arrives.  ``warmed``: instead of running ``warm_up``, report
    (``"warmed"``) whether this process has passed the warm-up of that
    key already."""
    from . import tiling
    answer = {"fingerprint": code_fingerprint(), "pid": os.getpid(),
              "sources": [], "problems": [],
              "warmed": warmed is not None and warmed in _WARMED_UP}
    for source in sources:
        try:
            shape, dtype = tiling.reopen_source(source)
            answer["sources"].append((tuple(shape), str(dtype)))
        except Exception as error:  # reported with the worker's address
            answer["sources"].append(None)
            answer["problems"].append(
                f"cannot open the input {source_path(source)!r} "
                f"({type(error).__name__}: {error}) from its working folder "
                f"{os.getcwd()!r}")
    if out_dir is not None:
        try:
            with open(os.path.join(out_dir, token[0])) as handle:
                if handle.read() != token[1]:
                    raise OSError("the token file holds other content")
            probe = os.path.join(out_dir,
                                 f".gridgraph-probe-{uuid.uuid4().hex}")
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as error:
            answer["problems"].append(
                f"cannot use the output folder {out_dir!r} as the driver sees "
                f"it ({error})")
    if warm_up is not None and _warm_up_key(warm_up) not in _WARMED_UP:
        try:
            warm_up()
            _WARMED_UP.add(_warm_up_key(warm_up))
        except Exception as error:
            answer["problems"].append(
                f"cannot run the tile kernels ({type(error).__name__}: "
                f"{error})")
    return answer


# The warm-ups this worker process has passed (its kernels are compiled):
# later runs' preflights skip them.
_WARMED_UP = set()


def _warm_up_key(warm_up):
    """A warm-up function (or a functools.partial of one) as a hashable
    key: its module, name and arguments."""
    function = getattr(warm_up, "func", warm_up)
    return (function.__module__, function.__qualname__,
            tuple(map(repr, getattr(warm_up, "args", ()))),
            tuple(sorted((k, repr(v)) for k, v in getattr(
                warm_up, "keywords", {}).items())))


# The preflight's checks run on every worker at once through
# ``client.run`` (one message, answered from each worker's event loop;
# no task) and only a worker that has not passed the warm-up yet runs
# the checks again as a task with it (compiling may take long: not in
# the event loop).  On a warm cluster the preflight is then one round
# trip: 34-37 ms as tasks at 8 workers on the H100 host (8-10 ms at 1;
# docs/benchmarks.md, Dask, seventh session).  False: always as tasks.
PREFLIGHT_BY_RUN = True


def _worker_answers(client, workers, sources, out_dir, token, warm_up,
                    intervals=None):
    """Each worker's :func:`worker_check` answer, in ``workers``' order
    (:data:`PREFLIGHT_BY_RUN`; ``intervals``: a :class:`RunIntervals` whose
    workers' intervals the ``client.run`` sets on the way)."""
    answers = {}
    if PREFLIGHT_BY_RUN:
        key = None if warm_up is None else _warm_up_key(warm_up)
        seconds = None if intervals is None else intervals.seconds
        if seconds is not None:
            intervals.workers_touched = True
        try:
            answers = client.run(_check_setting_interval(
                sources, out_dir, token, key, seconds), workers=workers,
                callback_timeout=PREFLIGHT_CHECK_TIMEOUT_S)
        except _TIMEOUTS:
            # a worker slow to answer from its event loop (its first
            # imports, an input on a stalled network file system) or hung:
            # every worker checked by a task instead, within the
            # preflight's own time, which names the workers that are late
            # (the workers' old intervals unknown: the run's end sets back
            # those found at the run's)
            if intervals is not None:
                intervals.hung()
            answers = {}
        if seconds is not None and answers:
            intervals.workers_old = {
                address: answer.pop("interval") for address, answer in
                answers.items() if "interval" in answer}
    if warm_up is not None:
        answers = {address: answer for address, answer in answers.items()
                   if answer["warmed"]}
    cold = [address for address in workers if address not in answers]
    futures = [client.submit(worker_check, sources, out_dir, token,
                             warm_up, workers=[address],
                             allow_other_workers=False, pure=False,
                             key=f"gridgraph-preflight-{uuid.uuid4().hex}")
               for address in cold]
    if futures:
        _wait_for_preflight(client, futures, cold)
    answers.update(zip(cold, client.gather(futures)))
    return [answers[address] for address in workers]


def _wait_for_preflight(client, futures, addresses):
    """Wait :data:`PREFLIGHT_TIMEOUT_S` for the preflight tasks of the
    workers ``addresses``; past it, cancel them and raise
    :class:`PreflightTimeout` naming the workers that had not answered."""
    import time
    deadline = time.monotonic() + PREFLIGHT_TIMEOUT_S
    for future in futures:
        left = deadline - time.monotonic()
        if future.done() or left <= 0:
            continue
        try:
            # (a task's own error is raised by the gather after this)
            future.exception(timeout=left)
        except _TIMEOUTS:
            break
    late = [address for address, future in zip(addresses, futures)
            if not future.done()]
    if late:
        try:
            client.cancel(futures, force=True)
        except Exception:  # noqa: BLE001 - a cluster gone
            pass
        raise PreflightTimeout(late)


class PreflightTimeout(Exception):
    """Workers whose preflight did not finish in time (their addresses)."""

    def __init__(self, workers):
        super().__init__(", ".join(workers))
        self.workers = workers


def _check_setting_interval(sources, out_dir, token, warmed, interval):
    """What the preflight's ``client.run`` runs on each worker: the
    worker's own :func:`worker_check` (``warmed``: the warm-up's key) and,
    with ``interval``, its stream's batching interval set for the run, the
    one found in the answer (``"interval"``; :func:`worker_interval`).
    Sent by value (a nested function), calling only what every GridGraph
    version's workers have, so that a worker running other code still
    answers and is named in the preflight's message."""
    module = __name__

    def check(dask_worker=None):
        import importlib
        here = importlib.import_module(module)
        answer = here.worker_check(sources, out_dir, token, None, warmed)
        setter = getattr(here, "worker_interval", None)
        if interval is not None and setter is not None and \
                hasattr(dask_worker, "batched_stream"):
            answer["interval"] = setter(dask_worker, interval)
        return answer
    return check


def preflight(client, sources, out_dir=None, warm_up=None, intervals=None,
              info=None):
    """Check every worker before any tile work; raise :class:`ClusterError`
    naming the workers that cannot take part and why.

    ``sources`` are the raster sources the tasks will read (file-backed;
    an in-memory one is refused here), ``out_dir`` the folder workers will
    write into, ``warm_up`` a function of no argument that compiles the
    operation's kernels.  ``intervals``: a :class:`RunIntervals` whose
    workers' batching intervals are set on the way (and what they were
    recorded, even when the preflight then fails); ``info``: the
    scheduler's ``workers`` already asked for.  Returns the answers in
    address order.
    """
    for source in sources:
        if source_path(source) is None:
            raise InvalidInputError(
                "an in-memory array cannot be processed on a Dask cluster "
                "(it would be copied into every task): write it to a file "
                "the workers can open (a GeoTIFF, or a numpy memmap / .npy "
                "file opened with np.load(path, mmap_mode='r')) on shared "
                "storage, or run without a Dask scheduler")
    expected = [(tuple(s.shape), str(s.dtype)) for s in sources]
    token = None
    if out_dir is not None:
        token = (f".gridgraph-token-{uuid.uuid4().hex}", uuid.uuid4().hex)
        with open(os.path.join(out_dir, token[0]), "w") as handle:
            handle.write(token[1])
    try:
        workers = sorted(cluster_workers(client, info))
        try:
            answers = _worker_answers(client, workers, sources, out_dir,
                                      token, warm_up, intervals)
        except PreflightTimeout as late:
            if intervals is not None:
                intervals.hung()
            raise ClusterError(
                f"the preflight check did not finish within "
                f"{PREFLIGHT_TIMEOUT_S} s on the Dask worker(s) "
                f"{', '.join(late.workers)} (compiling GridGraph's kernels "
                "on a new worker takes about a minute): check that those "
                "workers are running and not overloaded, then run again"
                ) from None
        except Exception as error:
            raise ClusterError(
                f"the preflight check could not run on the Dask workers "
                f"({type(error).__name__}: {error}): check that every worker "
                "has GridGraph and its dependencies installed") from None
    finally:
        if token is not None:
            try:
                os.remove(os.path.join(out_dir, token[0]))
            except OSError:
                pass
    mine = code_fingerprint()
    problems = []
    for address, answer in zip(workers, answers):
        found = list(answer["problems"])
        if answer["fingerprint"] != mine:
            found.insert(0, f"runs GridGraph {answer['fingerprint']}, the "
                            f"driver {mine}")
        for source, seen, wanted in zip(sources, answer["sources"], expected):
            if seen is not None and seen != wanted:
                found.append(
                    f"sees {source_path(source)!r} as {seen[0]} {seen[1]}, "
                    f"the driver as {wanted[0]} {wanted[1]}")
        problems.extend(f"worker {address}: {p}" for p in found)
    if problems:
        raise ClusterError(
            "the Dask workers cannot run this job: " + "; ".join(problems)
            + ". Give paths every worker can open (absolute paths on shared "
            "storage, or a GDAL virtual file system path such as /vsis3/...), "
            "an out_dir on shared storage, and install the same GridGraph "
            "on the workers as on this machine")
    return answers


# --------------------------------------------------------------------------
# failures


def explain_failure(error, function_name):
    """A :class:`ClusterError` for a task failure caused by the cluster
    (workers killed, lost connection), or None for the task's own error."""
    kind = type(error).__name__
    module = type(error).__module__ or ""
    if kind == "KilledWorker":
        return ClusterError(
            f"a {function_name} task was running on Dask workers that died "
            f"more times than the scheduler allows ({error}); the workers "
            "may run out of memory: give them more memory, lower TILE_SIZE, "
            "or raise distributed.scheduler.allowed-failures")
    if module.startswith("distributed") or kind in ("CommClosedError",
                                                     "FutureCancelledError"):
        return ClusterError(
            f"the Dask cluster failed while running {function_name} tasks "
            f"({kind}: {error}): check the scheduler and workers and run "
            "again")
    return None


# --------------------------------------------------------------------------
# the drivers' entry


@contextmanager
def tile_executor(executor, sources, out_dir=None, warm_up=None):
    """The executor a tiled driver runs its tasks on, for the ``with``
    block.  A Dask client (or a client opened on a scheduler address, and
    closed afterwards) is checked by :func:`preflight` first; anything else
    is yielded as it is."""
    if not is_distributed(executor):
        yield executor
        return
    with client_for(executor) as client:
        usable = out_dir is not None and os.path.isdir(out_dir) and \
            os.access(out_dir, os.W_OK)
        seconds = DASK_BATCH_INTERVAL_S
        intervals = RunIntervals(client, seconds)
        try:
            if seconds is not None:
                intervals.set_here_and_on_scheduler()
            # the workers' intervals are set by the preflight's own
            # client.run, and set back with the malloc settings by one
            # client.run at the end: two round trips fewer a run
            info = client.scheduler_info()["workers"]
            preflight(client, sources, out_dir if usable else None, warm_up,
                      intervals=intervals if seconds is not None else None,
                      info=info)
            if seconds is not None and not PREFLIGHT_BY_RUN:
                intervals.set_on_workers()
            with _run_workers(client, info):
                yield client
        finally:
            intervals.restore_here_and_on_scheduler()
            # steps that started after their pool's close (recomputed from
            # lineage, or not yet cancelled) keep freed memory: the
            # workers' own malloc settings back at the run's end
            try:
                client.run(run_end_on_worker,
                           interval=seconds if intervals.workers_touched
                           else None, old=intervals.workers_old,
                           on_error="ignore",
                           callback_timeout=intervals.timeout)
            except Exception:  # noqa: BLE001 - a cluster gone: nothing kept
                pass


def is_future(value):
    """True for a Dask future (checked without importing Dask)."""
    kind = type(value)
    return kind.__name__ == "Future" and \
        kind.__module__.split(".")[0] == "distributed"
