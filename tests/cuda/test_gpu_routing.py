"""A raster that fits the memory limit but not the GPU runs through the
tiled path with tiles that fit the GPU, and gives the in-memory answer.

The GPU's free memory is faked small (the simulator has no real limit)."""

import numpy as np
import pytest

from gridgraph.core import _cuda_common, connected_components, cost_distance
from rasters import fractal_surface


@pytest.fixture
def small_gpu(monkeypatch):
    """A GPU with room for about 1600 cells of a kernel needing at most
    ~40 bytes per cell (the rasters below have 3000 to 6300 cells)."""
    calls = []

    def usable():
        calls.append(1)
        return 40 * 40 * 40

    monkeypatch.setattr(_cuda_common, "usable_device_memory", usable)
    return calls


def test_gpu_tile_size(monkeypatch):
    monkeypatch.setattr(_cuda_common, "usable_device_memory", lambda: 100_000)

    def cells_bytes(n):
        return 10 * n
    assert _cuda_common.gpu_tile_size(10_000, cells_bytes) is None
    # 64 x 64 cells take 40 960 bytes <= half of 100 000; 128 x 128 do not
    assert _cuda_common.gpu_tile_size(10_001, cells_bytes) == 64
    assert _cuda_common.gpu_tile_size(10**9, lambda n: 10**6 * n) == 8


def test_components_too_large_for_the_gpu(small_gpu, monkeypatch):
    from gridgraph.core.components import tiled
    plans = []
    original = tiled.connected_components_tiled

    def spy(plan, *args):
        plans.append(plan)
        return original(plan, *args)

    monkeypatch.setattr(tiled, "connected_components_tiled", spy)
    values = np.random.default_rng(3).integers(0, 3, (70, 90)).astype(np.int64)
    expected = connected_components(values, connectivity=8, backend="cpu")
    result = connected_components(values, connectivity=8, backend="cuda")
    assert small_gpu, "the GPU memory query was not consulted"
    np.testing.assert_array_equal(result.labels, expected.labels)
    assert result.count == expected.count
    assert plans and plans[0].grid.count > 1
    assert plans[0].grid.tile_size * plans[0].grid.tile_size <= 40 * 40


def test_cost_distance_too_large_for_the_gpu(small_gpu):
    cost = fractal_surface((60, 52), seed=5).astype(np.float32)
    cost = np.round(cost / 200)  # integer costs: many exact ties
    sources = np.array([(0, 0), (59, 51), (30, 20)])
    expected = cost_distance(cost, sources, connectivity=8, backend="cpu")
    result = cost_distance(cost, sources, connectivity=8, backend="cuda")
    assert small_gpu
    assert getattr(result, "tile_solves", 0) > 1  # it took the tiled path
    np.testing.assert_array_equal(result.accumulated, expected.accumulated)
    np.testing.assert_array_equal(result.direction, expected.direction)
    np.testing.assert_array_equal(result.allocation, expected.allocation)
