"""The CUDA kernels with 64-bit cell indices (simulator on CI).

Rasters of 2**31 - 1 cells or more get int64 parent/label/root arrays;
``index_dtype`` is patched here so small rasters take that path, and the
results must equal the CPU backend's (whose labels stay int32).
"""

import numpy as np
import pytest

from gridgraph.core._common import Progress
from gridgraph.core.components import _cpu as components_cpu
from gridgraph.core.components import _cuda as components_cuda
from gridgraph.core.costdistance import _cpu as cost_cpu
from gridgraph.core.costdistance import _cuda as cost_cuda
from gridgraph.core.costdistance import _step_lengths
from gridgraph.core.mst import _cpu as mst_cpu
from gridgraph.core.mst import _cuda as mst_cuda


@pytest.fixture
def int64_indices(monkeypatch):
    for module in (components_cuda, mst_cuda, cost_cuda):
        monkeypatch.setattr(module, "index_dtype", lambda n: np.int64)


def test_components(int64_indices):
    rng = np.random.default_rng(21)
    values = rng.integers(0, 3, (9, 11)).astype(np.int16)
    valid = rng.random(values.shape) > 0.1
    for connectivity, mode in ((4, "nonzero"), (8, "equal")):
        expected, expected_count = components_cpu.label(
            values, valid, connectivity, mode, Progress())
        labels, count = components_cuda.label(values, valid, connectivity,
                                              mode, Progress())
        assert labels.dtype == np.int64
        assert count == expected_count
        np.testing.assert_array_equal(labels, expected)


def test_mst(int64_indices):
    rng = np.random.default_rng(22)
    values = rng.integers(0, 4, (8, 9)).astype(np.float32)
    valid = rng.random(values.shape) > 0.1
    for connectivity in (4, 8):
        expected = mst_cpu.spanning_forest(values, valid, connectivity, 3,
                                           np.float32, Progress())
        edges, weights = mst_cuda.spanning_forest(
            values, valid, connectivity, 3, np.float32, Progress())
        np.testing.assert_array_equal(edges, expected[0])
        np.testing.assert_array_equal(weights, expected[1])


def test_cost_distance_with_pointer_jumping(int64_indices):
    rng = np.random.default_rng(23)
    cost = rng.integers(0, 3, (9, 10)).astype(np.float64)  # exact ties
    valid = rng.random(cost.shape) > 0.1
    cells = np.argwhere(valid)[[0, -1]]
    ids = np.array([5, 9])  # two ids: allocation by pointer jumping
    steps = _step_lengths(8, None)
    expected = cost_cpu.solve(cost, valid, cells, ids, 8, steps, np.inf,
                              Progress())
    result = cost_cuda.solve(cost, valid, cells, ids, 8, steps, np.inf,
                             Progress())
    np.testing.assert_array_equal(result[0], expected[0])
    # int64 hops and roots: the canonical trees, ties included
    np.testing.assert_array_equal(result[1], expected[1])
    np.testing.assert_array_equal(result[2], expected[2])
    assert set(np.unique(result[2])) == {0, 5, 9} or set(
        np.unique(result[2])) == {5, 9}
