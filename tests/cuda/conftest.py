"""CUDA-backend tests: run under numba's CUDA simulator on CI.

``make test`` runs this folder in its own pytest process with
``NUMBA_ENABLE_CUDASIM=1`` in the environment (it must be set before numba
is imported).  On a machine with a GPU the same tests run on the device.
Without either they are skipped, with that reason, rather than reported as
passed.
"""

import os

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


def _cuda_usable():
    if SIMULATED:
        return True
    from gridgraph.core._common import cuda_available
    return cuda_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_usable():
        return
    skip = pytest.mark.skip(
        reason="no CUDA device: run with NUMBA_ENABLE_CUDASIM=1 (make test "
               "does) to test the CUDA kernels in the simulator")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
