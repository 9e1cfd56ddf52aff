"""Shared CUDA helpers (simulator on CI): the staged host <-> device copies
and the valid-cell test on the device, against numpy."""

import numpy as np
import pytest

from gridgraph.core import _cuda_common
from gridgraph.core._common import valid_mask
from gridgraph.core._cuda_common import (STAGE_BYTES, copy_to_device,
                                         copy_to_host, valid_cells_device)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
@pytest.mark.parametrize("stages", [0, 1, 3.5])
def test_staged_copies_round_trip(dtype, stages):
    # sizes of no, one and several staging buffers, with a partial last one
    n = int(stages * STAGE_BYTES) // np.dtype(dtype).itemsize + 3
    host = (np.arange(n) * 2654435761 % 1000).astype(dtype)
    device = copy_to_device(host)
    np.testing.assert_array_equal(copy_to_host(device), host)
    assert copy_to_host(device).dtype == host.dtype
    np.testing.assert_array_equal(copy_to_host(device, n // 3), host[:n // 3])
    big_endian = host.astype(np.dtype(dtype).newbyteorder(">"))
    np.testing.assert_array_equal(copy_to_host(copy_to_device(big_endian)),
                                  host)


def test_staged_copies_of_a_2d_array_and_empty():
    host = np.arange(40 * 70, dtype=np.float32).reshape(40, 70)
    np.testing.assert_array_equal(copy_to_host(copy_to_device(host)),
                                  host.reshape(-1))
    assert copy_to_host(copy_to_device(np.empty(0, np.int16))).size == 0


def test_plain_copies_below_the_staging_threshold(monkeypatch):
    monkeypatch.setattr(_cuda_common, "STAGED_MIN_BYTES", 1 << 30)
    host = np.arange(1000, dtype=np.int64)
    np.testing.assert_array_equal(copy_to_host(copy_to_device(host), 10),
                                  host[:10])


@pytest.mark.parametrize("dtype, nodata", [
    (np.float32, None), (np.float32, -1.0), (np.float64, np.nan),
    (np.int16, -9999), (np.uint8, 300), (np.uint8, 2.5), (np.int64, 7),
    (np.float16, 0.1), (np.int16, -np.inf), (np.int16, np.float32("nan")),
    (np.float32, np.float32("nan"))])
def test_valid_cells_as_the_host_mask(dtype, nodata):
    rng = np.random.default_rng(1)
    values = rng.choice([-9999, -1, 0, 2, 7, 255], (13, 17)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        values[rng.random(values.shape) < 0.2] = np.nan
        values.flat[5] = dtype(0.1)
    d_values, d_valid = valid_cells_device(values, nodata, np.float64)
    np.testing.assert_array_equal(copy_to_host(d_valid).view(bool),
                                  valid_mask(values, nodata).reshape(-1))
    np.testing.assert_array_equal(copy_to_host(d_values),
                                  values.astype(np.float64).reshape(-1))
    same, _ = valid_cells_device(values, nodata)
    assert same.dtype == (np.float32 if dtype == np.float16 else dtype)


def test_staged_copies_from_threads_stay_apart():
    # the staging buffers are shared by the process: copies made by tile
    # tasks in threads must not mix their bytes
    from concurrent.futures import ThreadPoolExecutor
    n = int(2.5 * STAGE_BYTES) // 4 + 1
    hosts = [np.full(n, k, dtype=np.int32) + np.arange(n, dtype=np.int32)
             for k in range(4)]

    def round_trip(host):
        return copy_to_host(copy_to_device(host))

    with ThreadPoolExecutor(4) as pool:
        for host, back in zip(hosts * 2, pool.map(round_trip, hosts * 2)):
            np.testing.assert_array_equal(back, host)
