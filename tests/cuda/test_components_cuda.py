"""Connected components on the CUDA backend (simulator on CI).

How correctness is established: literal grids with literal labels; on
hypothesis-generated rasters (<= 12 x 12, so the simulator's 4 x 4 tiles
put seams everywhere) labels, count and dtype identical to the CPU backend,
and in ``nonzero`` mode to scipy.ndimage.label; a spiral that crosses every
seam many times; the public API dispatching to the kernels.
"""

import numpy as np
import pytest
import scipy.ndimage as ndi
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gridgraph.core import connected_components
from gridgraph.core._common import Progress
from gridgraph.core.components import _cpu, _cuda
from gridgraph.tests.rasters import spiral_mask

SIM_SETTINGS = settings(max_examples=25, deadline=None)
STRUCTURE = {4: ndi.generate_binary_structure(2, 1),
             8: ndi.generate_binary_structure(2, 2)}


def gpu_label(values, valid=None, connectivity=4, mode="equal"):
    if valid is None:
        valid = np.ones(values.shape, dtype=bool)
    return _cuda.label(values, valid, connectivity, mode, Progress())


def test_literal_nonzero_and_equal():
    grid = np.array([[1, 1, 0, 2],
                     [0, 1, 0, 2],
                     [3, 0, 0, 2]])
    labels, count = gpu_label(grid, mode="nonzero")
    assert count == 3
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [0, 1, 0, 2],
                                           [3, 0, 0, 2]])
    assert labels.dtype == np.int32
    labels, count = gpu_label(grid, mode="equal")
    # zeros are a value like any other in ``equal`` mode
    np.testing.assert_array_equal(labels, [[1, 1, 2, 3],
                                           [4, 1, 2, 3],
                                           [5, 2, 2, 3]])
    assert count == 5


def test_literal_eight_connectivity_across_tile_corner():
    # (3, 3) and (4, 4) touch only at a corner shared by four 4 x 4 tiles
    grid = np.zeros((8, 8), dtype=np.uint8)
    grid[3, 3] = grid[4, 4] = grid[2, 5] = grid[5, 2] = 1
    labels, count = gpu_label(grid, connectivity=8, mode="nonzero")
    assert count == 3
    assert labels[3, 3] == labels[4, 4] == 2
    assert labels[2, 5] == 1 and labels[5, 2] == 3
    labels, count = gpu_label(grid, connectivity=4, mode="nonzero")
    assert count == 4


def test_nodata_and_float_values():
    grid = np.array([[0.0, -0.0, np.nan, 2.5],
                     [1.5, 1.5, 2.5, 2.5]])
    valid = ~np.isnan(grid)
    labels, count = gpu_label(grid, valid, 4, "equal")
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [3, 3, 2, 2]])
    assert count == 3


def test_spiral_is_one_component():
    mask = spiral_mask(12)
    labels, count = gpu_label(mask.view(np.uint8), mode="nonzero")
    assert count == 1
    np.testing.assert_array_equal(labels > 0, mask)


def test_empty_and_all_background():
    labels, count = gpu_label(np.zeros((0, 5), dtype=np.int16))
    assert count == 0 and labels.shape == (0, 5)
    labels, count = gpu_label(np.zeros((3, 5), dtype=np.int16),
                              mode="nonzero")
    assert count == 0 and not labels.any()


@st.composite
def rasters(draw):
    rows = draw(st.integers(1, 12))
    cols = draw(st.integers(1, 12))
    values = draw(hnp.arrays(np.int8, (rows, cols), elements=st.integers(0, 2)))
    valid = draw(hnp.arrays(np.bool_, (rows, cols),
                            elements=st.sampled_from([True, True, True, False])))
    return values, valid


@SIM_SETTINGS
@given(rasters(), st.sampled_from([4, 8]), st.sampled_from(["equal", "nonzero"]))
def test_same_labels_as_cpu(raster, connectivity, mode):
    values, valid = raster
    expected, expected_count = _cpu.label(values, valid, connectivity, mode,
                                          Progress())
    labels, count = gpu_label(values, valid, connectivity, mode)
    assert count == expected_count
    assert labels.dtype == expected.dtype
    np.testing.assert_array_equal(labels, expected)
    if mode == "nonzero":
        oracle, oracle_count = ndi.label(valid & (values != 0),
                                         structure=STRUCTURE[connectivity])
        assert count == oracle_count
        np.testing.assert_array_equal(labels, oracle)


def test_public_api_dispatches_to_cuda(monkeypatch):
    calls = []
    original = _cuda.label_array

    def spy(*args):
        calls.append(args[2:4])
        return original(*args)

    monkeypatch.setattr(_cuda, "label_array", spy)
    grid = np.random.default_rng(3).integers(0, 2, (9, 11))
    gpu = connected_components(grid, connectivity=8, mode="nonzero",
                               backend="cuda")
    cpu = connected_components(grid, connectivity=8, mode="nonzero",
                               backend="cpu")
    assert calls == [(8, "nonzero")]
    assert gpu.count == cpu.count
    np.testing.assert_array_equal(gpu.labels, cpu.labels)


def test_input_not_modified():
    grid = np.random.default_rng(4).integers(0, 3, (6, 7)).astype(np.float32)
    valid = grid != 2
    before = grid.copy(), valid.copy()
    gpu_label(grid, valid, 8, "equal")
    np.testing.assert_array_equal(grid, before[0])
    np.testing.assert_array_equal(valid, before[1])


def test_too_large_for_the_gpu_raises(monkeypatch):
    from gridgraph.core import BackendUnavailableError
    from gridgraph.core import _cuda_common

    class SmallContext:
        def get_memory_info(self):
            return 64 * 2**20, 80 * 2**30

    monkeypatch.setattr(_cuda_common.cuda, "current_context",
                        lambda: SmallContext())
    with pytest.raises(BackendUnavailableError, match="backend='cpu'"):
        gpu_label(np.ones((4, 4), dtype=np.uint8))


@pytest.mark.parametrize("dtype, nodata", [(np.float32, 2.0), (np.int16, -1)])
def test_public_api_valid_cells_on_device(dtype, nodata):
    # valid cells tested on the device (the staged copies are tested in
    # test_cuda_common.py); several 4 x 4 simulator tiles
    rng = np.random.default_rng(6)
    grid = rng.choice([-1, 0, 1, 2], (13, 17)).astype(dtype)
    if dtype != np.int16:
        grid[rng.random(grid.shape) < 0.1] = np.nan
    for connectivity, mode in ((4, "equal"), (8, "nonzero")):
        gpu = connected_components(grid, connectivity, mode, nodata,
                                   backend="cuda")
        cpu = connected_components(grid, connectivity, mode, nodata,
                                   backend="cpu")
        assert gpu.count == cpu.count and gpu.labels.dtype == np.int32
        np.testing.assert_array_equal(gpu.labels, cpu.labels)
