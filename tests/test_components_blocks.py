"""The block-based ``nonzero`` kernels (core/components/_cpu_blocks.py,
8-connected; 4-connected runs the per-cell scan) against
scipy.ndimage.label, label for label.

The hypothesis suites of test_components.py cover small rasters; here:
larger random masks at densities around the percolation thresholds (many
unions and many components), every strip count, odd shapes, and rasters
built so that the block scan order and the cell scan order of the
components' first cells disagree (the keys that renumber them), including
one whose first cells come in reverse order (the sort's fallback).
"""

import numpy as np
import pytest
import scipy.ndimage as ndi

from gridgraph.core._common import Progress
from gridgraph.core.components import _cpu, _cpu_blocks


@pytest.fixture(autouse=True)
def blocks_on_any_cpu(monkeypatch):
    """The blocks label rough 8-connected masks on every CPU here (by
    default only where they were measured faster)."""
    monkeypatch.setattr(_cpu, "BLOCKS_8", True)


def scipy_labels(mask, connectivity):
    structure = ndi.generate_binary_structure(2, 1 if connectivity == 4
                                              else 2)
    return ndi.label(mask, structure)


def check(values, connectivity, valid=None, strips=(1, 2, 3, 5)):
    mask = (values != 0) & (values == values)
    if valid is not None:
        mask &= valid
    expected, expected_count = scipy_labels(mask, connectivity)
    for strip_count in strips:
        labels, count = _cpu.label(values, valid, connectivity, "nonzero",
                                   Progress(), strips=strip_count)
        np.testing.assert_array_equal(labels, expected)
        assert count == expected_count


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("density", [0.3, 0.45, 0.6, 0.75, 0.95])
def test_random_masks_equal_scipy(connectivity, density):
    rng = np.random.default_rng(int(density * 100) + connectivity)
    for shape in [(64, 97), (65, 96), (1, 57), (57, 1), (2, 2), (3, 130)]:
        check((rng.random(shape) < density).astype(np.uint8), connectivity)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_valid_mask_nan_and_dtypes(connectivity):
    rng = np.random.default_rng(5)
    values = rng.integers(-1, 2, (41, 39)).astype(np.float32)
    values[rng.random(values.shape) < 0.1] = np.nan
    # a given mask excludes NaN cells, as valid_mask makes it
    valid = (rng.random(values.shape) < 0.9) & ~np.isnan(values)
    check(values, connectivity)
    check(values, connectivity, valid)
    for dtype in (np.int8, np.uint16, np.int64, np.float64):
        check((rng.random((23, 31)) < 0.6).astype(dtype), connectivity)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_uniform_and_patterned_rasters(connectivity):
    for values in (np.zeros((9, 11)), np.ones((9, 11)), np.ones((1, 1)),
                   np.indices((10, 13)).sum(axis=0) % 2,       # checkerboard
                   np.indices((10, 13))[0] % 2,                # stripes
                   np.indices((10, 13))[1] % 2,
                   (np.indices((12, 12)) % 2).prod(axis=0)):   # dots
        check(np.asarray(values, dtype=np.uint8), connectivity)


def nested_u_mask(pairs):
    """Components whose first cells come in the reverse of the order their
    first blocks do: component k starts with a lone bottom-row cell at
    column 2k of block row 0 (scanned early) and, by a U-shaped path below,
    reaches the top row at column width - 2k (its first cell)."""
    width = 4 * pairs + 8
    depth = 2 * pairs + 4
    mask = np.zeros((depth + 1, width + 1), dtype=np.uint8)
    for k in range(pairs):
        bottom = depth - 2 * k
        mask[1:bottom + 1, 2 * k] = 1           # down from row 1
        mask[bottom, 2 * k:width - 2 * k + 1] = 1
        mask[0:bottom + 1, width - 2 * k] = 1   # up to row 0
    return mask


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("pairs", [3, 40])
def test_first_cells_in_reverse_block_order(connectivity, pairs):
    mask = nested_u_mask(pairs)
    expected, count = scipy_labels(mask, connectivity)
    assert count == pairs
    # scipy numbers them right to left along the top row
    assert list(expected[0][expected[0] > 0]) == list(range(1, pairs + 1))
    check(mask, connectivity)


def test_sort_falls_back_on_many_moves():
    keys = np.arange(200, 0, -1, dtype=np.int64)
    items = np.arange(200, dtype=np.int64)
    _cpu_blocks._sort_nearly_sorted(keys, items, 0, 200)
    np.testing.assert_array_equal(keys, np.arange(1, 201))
    np.testing.assert_array_equal(items, np.arange(199, -1, -1))
    keys = np.array([5, 1, 2, 4, 3, 9], dtype=np.int32)
    items = np.arange(6, dtype=np.int32)
    _cpu_blocks._sort_nearly_sorted(keys, items, 1, 5)
    np.testing.assert_array_equal(keys, [5, 1, 2, 3, 4, 9])
    np.testing.assert_array_equal(items, [0, 1, 2, 4, 3, 5])


@pytest.mark.parametrize("connectivity", [4, 8])
def test_int64_block_labels(monkeypatch, connectivity):
    mask = (np.random.default_rng(3).random((37, 45)) < 0.6).astype(np.uint8)
    narrow, narrow_count = _cpu.label(mask, None, connectivity, "nonzero",
                                      Progress(), strips=3)
    monkeypatch.setattr(_cpu, "index_dtype", lambda cells: np.int64)
    wide, wide_count = _cpu.label(mask, None, connectivity, "nonzero",
                                  Progress(), strips=3)
    assert narrow.dtype == np.int32 and wide.dtype == np.int64
    np.testing.assert_array_equal(wide, narrow)
    assert wide_count == narrow_count


def test_top_row_first_cell_reached_by_left_links():
    """A component whose first block has bottom cells only and whose
    first cell in scan order is a top-row cell of a later block reached by
    left links alone (the key moves up), before a component that starts
    further right in the top row; and a component that starts in a bottom
    row with an earlier block than one starting later in the top row
    above it (block order is not cell order)."""
    cases = [
        # A: (1,0) (1,1) (0,2); B: (0,5); scipy numbers A first
        [[0, 0, 1, 0, 0, 1],
         [1, 1, 0, 0, 0, 0]],
        # A starts at (1,0), B at (0,2): B first though A's block is first
        [[0, 0, 1, 0],
         [1, 0, 0, 0]],
        # a chain of bottom-only blocks, then the top cell, then B
        [[0, 0, 0, 0, 0, 0, 1, 0, 1, 0],
         [1, 1, 1, 1, 1, 1, 0, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
         [1, 0, 1, 0, 0, 0, 0, 0, 0, 1]],
        # the key moves up, then the label joins one from the row above
        [[0, 0, 0, 0, 0, 0, 0, 1],
         [0, 0, 0, 1, 0, 0, 0, 1],
         [1, 1, 1, 0, 0, 1, 0, 1],
         [0, 0, 0, 0, 0, 0, 1, 0]],
    ]
    for case in cases:
        mask = np.array(case, dtype=np.uint8)
        check(mask, 8, strips=(1, 2))
        check(mask[:, ::-1].copy(), 8, strips=(1, 2))


@pytest.mark.parametrize("shape", [(2, 6), (3, 4), (4, 3), (5, 3)])
def test_every_small_mask(shape):
    """Every mask of a few cells (all 2^cells of them), 8-connected, one
    and two strips: every block decision, key move and union."""
    cells = shape[0] * shape[1]
    bits = (np.arange(2**cells)[:, None] >> np.arange(cells)) & 1
    for mask in bits.astype(np.uint8).reshape(-1, *shape):
        check(mask, 8, strips=(1, 2))
