"""backend="cuda" on a machine without a usable CUDA device.

The CUDA kernels themselves are tested in tests/cuda/ (numba's simulator
on CI).  Here, in the normal suite: asking for the cuda backend without a
device raises BackendUnavailableError naming what is missing, for every
operation, and ``auto`` falls back to the CPU.
"""

import numpy as np
import pytest

from gridgraph.core import (BackendUnavailableError, connected_components,
                            cost_distance, minimum_spanning_tree)
from gridgraph.core import _common

OPERATIONS = {
    "components": lambda backend: connected_components(
        np.ones((3, 3), np.uint8), backend=backend),
    "costdistance": lambda backend: cost_distance(
        np.ones((3, 3)), [(0, 0)], backend=backend),
    "mst": lambda backend: minimum_spanning_tree(
        np.ones((3, 3), np.float32), backend=backend),
}


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(_common, "cuda_available", lambda: False)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_cuda_without_device_raises(no_cuda, operation):
    with pytest.raises(BackendUnavailableError,
                       match="no usable CUDA device.*backend='cpu'"):
        OPERATIONS[operation]("cuda")


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_auto_without_device_runs_on_cpu(no_cuda, operation):
    OPERATIONS[operation]("auto")


@pytest.mark.skipif(_common.cuda_available(),
                    reason="this machine has a CUDA device (or the simulator "
                           "is on): the real no-device path cannot be tried")
def test_real_resolution_without_device():
    with pytest.raises(BackendUnavailableError):
        _common.resolve_backend("cuda")
    assert _common.resolve_backend("auto") == "cpu"
