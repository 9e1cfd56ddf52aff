"""The tiled MST's leaf forest as low-end bits from the GPU
(``_cuda.forest_low_bits``, mstfast): the same edges as the CPU kernel's
forest, on rasters with NaN holes and plateaus, 4- and 8-connected."""

import numpy as np
import pytest

from gridgraph.core._common import Progress

from gridgraph.core.mst import _cpu, _cuda

from rasters import fractal_surface


def cpu_low_bits(values, valid, connectivity, weight_index):
    ids, _ = _cpu.unsorted_forest(values, valid, connectivity, weight_index,
                                  np.float32, Progress())
    low_bits = np.zeros(values.size, dtype=np.uint8)
    for e in ids:
        low_bits[e >> 2] |= np.uint8(1 << (e & 3))
    return low_bits, ids.size


@pytest.mark.parametrize("connectivity, weight_index", [(8, 0), (4, 3)])
def test_low_bits_equal_cpu_forest(connectivity, weight_index):
    values = fractal_surface((23, 19), seed=5)
    values[np.random.default_rng(2).random(values.shape) < 0.15] = np.nan
    values[:6, :7] = np.floor(values[:6, :7] * 2)  # plateaus: ties
    valid = ~np.isnan(values)
    low_bits, k = _cuda.forest_low_bits(values, valid, connectivity,
                                        weight_index, np.float32)
    expected, expected_k = cpu_low_bits(values, valid, connectivity,
                                        weight_index)
    assert k == expected_k
    np.testing.assert_array_equal(low_bits, expected)
