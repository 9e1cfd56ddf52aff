"""GPU workers on a Dask cluster: a worker started with the ``GPU`` resource
runs the CUDA tile kernels (here numba's CUDA simulator, set in the worker
processes only), a worker without it never gets a CUDA task, the tiles are
sized from the device memory the GPU workers report, and the outputs are
identical to the in-process CPU run.  The driver needs no GPU.

A cluster of one GPU worker and one CPU worker (one thread each) serves the
module; rasters are tiny: the simulator runs every GPU thread in Python.
"""

import copy
import os
import sys

import numpy as np
import pytest

from gridgraph.core import (BackendUnavailableError, GridGraphError,
                            connected_components, cost_distance, distributed)

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # the CUDA simulator: ~50 s

TILE = 8


@pytest.fixture(scope="module")
def gpu_cluster():
    import dask
    from distributed import Client, LocalCluster
    above = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    saved = list(sys.path)
    # the workers start with this sys.path (see tests/conftest.py)
    sys.path[:] = [p for p in sys.path
                   if os.path.abspath(p or os.curdir) != above]
    try:
        # the simulator's GPU threads and a cold numba cache can hold a
        # worker's GIL for minutes on a loaded CI box; its missed heartbeats
        # must not make the scheduler restart it under a new address (the
        # placement checked below is by address)
        with dask.config.set({"distributed.scheduler.worker-ttl": None}), \
                LocalCluster(n_workers=1, threads_per_worker=1,
                             processes=True, host="127.0.0.1",
                             dashboard_address=None, resources={"GPU": 1},
                             env={"NUMBA_ENABLE_CUDASIM": "1"}) as cluster, \
                Client(cluster, set_as_default=False) as client:
            # a second worker without the GPU resource (nor the simulator)
            spec = copy.deepcopy(cluster.worker_spec[0])
            spec["options"].pop("resources", None)
            spec["options"].pop("env", None)
            cluster.worker_spec["cpu"] = spec
            cluster.sync(cluster._correct_state)
            client.wait_for_workers(2, timeout=60)
            assert client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.worker_ttl) is None
            yield client
    finally:
        sys.path[:] = saved


def save_npy(folder, name, array):
    path = os.path.join(folder, name + ".npy")
    np.save(path, array)
    return np.load(path, mmap_mode="r")


def workers_of(client):
    info = client.scheduler_info()["workers"]
    gpu = [a for a, w in info.items() if w.get("resources", {}).get("GPU")]
    cpu = [a for a in info if a not in gpu]
    return gpu, cpu


def test_backend_and_tiles_from_the_gpu_workers(gpu_cluster):
    client = gpu_cluster
    gpu, cpu = workers_of(client)
    assert len(gpu) == 1 and len(cpu) == 1
    assert distributed.gpu_workers(client) == gpu
    # the driver has no GPU (or ignores it): the cluster decides
    assert distributed.resolve_backend(client, "auto") == "cuda"
    assert distributed.resolve_backend(client, "cuda") == "cuda"
    assert distributed.resolve_backend(client, "cpu") == "cpu"
    assert distributed.task_resources("cuda", client) == {"GPU": 1}
    assert distributed.task_resources("cpu", client) is None
    reports = client.run(distributed.device_report, workers=gpu)
    assert reports[gpu[0]][3] is None  # a usable (simulated) device
    # tiles: half the device memory the worker may use, shared by the
    # GPU workers on one device
    usable = reports[gpu[0]][2]
    side = distributed.gpu_tile_side(client, lambda n: 64 * n)
    if usable is None:
        assert side is None
    else:
        assert 64 * side * side <= usable // 2 < 64 * 4 * side * side


def test_cuda_without_gpu_workers_names_the_fix():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        assert distributed.resolve_backend(client, "auto") == "cpu"
        with pytest.raises(BackendUnavailableError, match="--resources GPU=1"):
            distributed.resolve_backend(client, "cuda")


def test_a_gpu_worker_without_a_device_is_named(gpu_cluster, monkeypatch):
    # the CPU worker, had it the GPU resource: its report names the problem
    client = gpu_cluster
    _, cpu = workers_of(client)
    monkeypatch.setattr(distributed, "gpu_workers", lambda c: cpu)
    report = client.run(distributed.device_report, workers=cpu)[cpu[0]]
    if report[3] is None:
        pytest.skip("this machine's workers see a CUDA device")
    with pytest.raises(GridGraphError, match=cpu[0]):
        distributed.gpu_tile_side(client, lambda n: n)


def test_cuda_tasks_run_on_the_gpu_worker_only(gpu_cluster, tmp_path):
    from distributed import get_task_stream
    client = gpu_cluster
    gpu, cpu = workers_of(client)
    rng = np.random.default_rng(4)
    # whole costs: paths tie, so the trees read without the hops meet a
    # tie and the hops rounds run (hops_tile) before the outputs
    cost = rng.integers(1, 5, (16, 16)).astype(np.float64)
    cost[rng.random(cost.shape) < 0.1] = -1
    sources = [(2, 3), (13, 12)]
    expected = cost_distance(cost, sources, source_ids=[1, 2], nodata=-1,
                             backend="cpu")
    values = (rng.random((16, 16)) < 0.5).astype(np.int16)
    expected_labels = connected_components(values, mode="nonzero",
                                           backend="cpu")
    cost_file = save_npy(str(tmp_path), "cost", cost)
    values_file = save_npy(str(tmp_path), "values", values)
    with get_task_stream(client) as stream:
        result = cost_distance(cost_file, sources, source_ids=[1, 2],
                               nodata=-1, backend="cuda", tile_size=TILE,
                               executor=client)
        labels = connected_components(values_file, mode="nonzero",
                                      backend="cuda", tile_size=TILE,
                                      executor=client)
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(getattr(result, name),
                                      getattr(expected, name), err_msg=name)
    assert result.hops_visits > 0
    np.testing.assert_array_equal(labels.labels, expected_labels.labels)
    placed = {}
    for task in stream.data:
        name = task["key"] if isinstance(task["key"], str) else \
            task["key"][0]
        if name.endswith(("-message", "-state")):
            continue  # the getitem tasks splitting a result: anywhere
        placed.setdefault(name.split("-")[0], set()).add(task["worker"])
    # the CUDA tasks: on the GPU worker only
    for name in ("solve_round_tile", "hops_tile", "tile_band_labels",
                 "tile_outputs", "tile_summary", "tile_labels"):
        assert placed.get(name) == {gpu[0]}, (name, placed)


def test_gpu_workers_read_the_trees_without_hops(gpu_cluster, tmp_path):
    """Real-valued costs (no tie): no hops round runs (the label and
    output tasks, on the GPU worker as the test above checks, read the
    trees without the hops), and the outputs, written by the tasks into
    out_dir, are the in-process CPU run's."""
    client = gpu_cluster
    rng = np.random.default_rng(9)
    cost = rng.uniform(1, 5, (16, 16))
    cost[rng.random(cost.shape) < 0.1] = -1
    sources = [(2, 3), (13, 12)]
    expected = cost_distance(cost, sources, source_ids=[1, 2], nodata=-1,
                             backend="cpu")
    cost_file = save_npy(str(tmp_path), "cost", cost)
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(cost_file, sources, source_ids=[1, 2], nodata=-1,
                           backend="cuda", tile_size=TILE, executor=client,
                           out_dir=str(out))
    assert result.hops_visits == 0
    for name in ("accumulated", "direction", "allocation"):
        np.testing.assert_array_equal(getattr(result, name),
                                      getattr(expected, name), err_msg=name)
