"""Helpers of the Dask tests (tests/distributed): rasters saved as
.npy memmaps every worker can open, result comparisons, the scheduler's
tasks, Dask's message batching intervals."""

import os
import time

import numpy as np

TILE = 8


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
