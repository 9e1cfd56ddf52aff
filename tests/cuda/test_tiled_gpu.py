"""The tiled paths' tile rounds on the GPU (core/costdistance/_cuda_tiled.py,
core/components/_cuda_tiled.py): tile states and labels kept on the
device, spilled or labelled again when the device budget is too small,
outputs identical to the in-memory CPU runs.  Rasters are sized from the
kernels' tile constants so that the tiled path's tiles (2 x the GPU tile)
cross several GPU tiles and leave partial tiles at the edges."""

import pickle

import numpy as np
import pytest

from gridgraph.core import connected_components, cost_distance
from gridgraph.core.components import _cuda as components_cuda
from gridgraph.core.components import _cuda_tiled as components_tiled
from gridgraph.core.costdistance import _cuda, _cuda_tiled

CD_SIDE = 2 * _cuda.TILE  # the tiled path's tile: 8 on the simulator
CC_SIDE = 2 * components_cuda.TILE_W


def _plateau_cost(shape, seed):
    rng = np.random.default_rng(seed)
    cost = rng.integers(0, 3, shape).astype(np.float32)  # zeros: ties
    cost[rng.random(shape) < 0.12] = np.nan
    return cost


def _same_cost_outputs(tiled, in_memory):
    for name in ("accumulated", "direction", "allocation"):
        got = np.asarray(getattr(tiled, name))
        want = getattr(in_memory, name)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_cost_distance_states_spilled_to_the_host(monkeypatch, tmp_path):
    """With no device budget every tile state but the last is spilled to
    the host cache and uploaded again by its next task: same outputs (to
    disk, three source ids, ties and barriers)."""
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 5)
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1), (CD_SIDE, CD_SIDE + 1)]
    for cell in sources:
        cost[cell] = 1.0
    monkeypatch.setattr(_cuda_tiled, "DEVICE_STATE_BYTES", 0)
    spilled = []
    put = _cuda_tiled.DeviceStates.put

    def counting_put(self, tile, state):
        put(self, tile, state)
        spilled.append(self.used <= state.nbytes if _cuda_tiled.
                       is_device_state(state) else None)

    monkeypatch.setattr(_cuda_tiled.DeviceStates, "put", counting_put)
    tiled = cost_distance(cost, sources, 8, source_ids=[1, 2, 3],
                          backend="cuda", tile_size=CD_SIDE,
                          out_dir=str(tmp_path))
    assert spilled and all(spilled)  # at most one tile held on the device
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8,
                                            source_ids=[1, 2, 3],
                                            backend="cpu"))


def test_device_tile_is_a_host_state():
    """A DeviceTile reads, indexes and pickles as the host (distance,
    hops) pair, so any cache or executor may hold it."""
    from gridgraph.core.tiling import ArraySource, Window
    cost = np.ones((CD_SIDE, CD_SIDE + 3))
    cost[2, 2] = np.nan
    window = Window(0, 0, *cost.shape)
    (band, pending_key), tile = _cuda_tiled.solve_round_tile(
        ArraySource(cost), window, None, None, np.array([0]),
        np.full(2 * (cost.shape[0] + cost.shape[1]) - 4, np.inf), 1,
        np.array([[-1, 0], [0, -1], [0, 1], [1, 0]]), np.ones(4), np.inf)
    distance, hops = tile
    assert distance[0] == 0 and distance[2 * cost.shape[1] + 2] == -np.inf
    assert distance[-1] == cost.shape[0] - 1 + cost.shape[1] - 1
    assert hops[0] == 0
    again = pickle.loads(pickle.dumps(tile))
    assert isinstance(again, tuple)
    np.testing.assert_array_equal(again[0], distance)
    np.testing.assert_array_equal(tile[1], hops)
    assert band[0] == 0.0 and pending_key == np.inf


@pytest.mark.parametrize("keep_bytes", [None, 0])
def test_components_tiles_on_the_gpu(monkeypatch, tmp_path, keep_bytes):
    """The components' tile rounds on the GPU (labels kept on the device,
    or with no budget labelled again) give the in-memory CPU labels, in
    both modes and connectivities, to disk and in memory."""
    monkeypatch.setattr(components_tiled, "KEEP_BYTES", keep_bytes)
    rng = np.random.default_rng(11)
    shape = (3 * CC_SIDE + 3, 2 * CC_SIDE + 5)
    values = rng.integers(0, 3, shape).astype(np.float64)
    values[rng.random(shape) < 0.1] = np.nan
    for connectivity, mode in ((4, "equal"), (8, "nonzero")):
        want = connected_components(values, connectivity, mode,
                                    backend="cpu")
        for out_dir in (None, str(tmp_path)):
            got = connected_components(values, connectivity, mode,
                                       backend="cuda", tile_size=CC_SIDE,
                                       out_dir=out_dir)
            assert got.count == want.count
            np.testing.assert_array_equal(np.asarray(got.labels),
                                          want.labels)
            assert np.asarray(got.labels).dtype == want.labels.dtype


def test_tiled_gpu_tasks_on_a_thread_pool():
    """The GPU tile tasks under a pool executor (two at once: reads and
    writes overlap, the device work one task at a time; device states in
    the driver's cache): the same outputs as in memory on the CPU."""
    from concurrent.futures import ThreadPoolExecutor
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 7)
    sources = [(1, 1), (shape[0] - 2, shape[1] - 2)]
    for cell in sources:
        cost[cell] = 1.0
    with ThreadPoolExecutor(2) as pool:
        tiled = cost_distance(cost, sources, 8, source_ids=[1, 2],
                              backend="cuda", tile_size=CD_SIDE,
                              executor=pool)
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8,
                                            source_ids=[1, 2],
                                            backend="cpu"))


@pytest.mark.parametrize("outputs", [("accumulated",), ("direction",)])
def test_tiled_gpu_only_the_asked_outputs(outputs, tmp_path):
    """Only the asked-for outputs (no trees for accumulated cost alone):
    the in-memory CPU run's, the others None."""
    shape = (CD_SIDE + 5, 2 * CD_SIDE + 1)
    cost = _plateau_cost(shape, 9)
    sources = [(0, 1), (shape[0] - 1, shape[1] - 2)]
    for cell in sources:
        cost[cell] = 1.0
    tiled = cost_distance(cost, sources, 4, source_ids=[3, 4],
                          backend="cuda", tile_size=CD_SIDE,
                          out_dir=str(tmp_path), outputs=outputs)
    cpu = cost_distance(cost, sources, 4, source_ids=[3, 4], backend="cpu")
    for name in ("accumulated", "direction", "allocation"):
        if name in outputs:
            np.testing.assert_array_equal(np.asarray(getattr(tiled, name)),
                                          getattr(cpu, name), err_msg=name)
        else:
            assert getattr(tiled, name) is None
