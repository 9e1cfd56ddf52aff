"""The branch-light per-cell scan (core/components/_cpu.py: ``nonzero``
and ``equal`` modes at both connectivities; 8-connected nonzero also by
blocks) label for label against the per-cell scan it replaced (tests/components_previous.py)
and against scipy-built oracles.

The new scan computes its links as 0/1 masks, takes the left neighbour's
label through one select and defers a row's merges to the end of the row
(Rem's union-find, core/_unionfind.merge_sets); what could go wrong is a
merge lost or made wrongly at a row's end, at a strip seam, or on a pattern
where every cell merges (checkerboards, stripes, spirals, combs), and NaN,
``valid`` and dtype handling now done inside the kernel (no mask built).
"""

import numpy as np
import pytest
import scipy.ndimage as ndi

from gridgraph.core._common import Progress
from gridgraph.core._unionfind import merge_sets
from gridgraph.core.components import _cpu
from gridgraph.tests.components_previous import previous_label
from gridgraph.tests.rasters import fractal_surface, spiral_mask

from gridgraph.tests.test_components import equal_mode_oracle


def structure(connectivity):
    return ndi.generate_binary_structure(2, 1 if connectivity == 4 else 2)


def check(values, connectivity, mode, valid=None, strips=(1, 2, 3, 7)):
    """Today's labels equal the previous kernel's and the oracle's (scipy
    for ``nonzero``, per-value scipy for ``equal``) at every strip count."""
    values = np.asarray(values)
    previous, previous_count = previous_label(values, valid, connectivity,
                                              mode)
    vertices = valid if valid is not None else (values == values)
    if mode == "nonzero":
        expected, expected_count = ndi.label(vertices & (values != 0),
                                             structure(connectivity))
    else:
        expected, expected_count = equal_mode_oracle(values, vertices,
                                                     connectivity)
    np.testing.assert_array_equal(previous, expected)
    assert previous_count == expected_count
    # 8-connected nonzero mode: by blocks and cell by cell, whichever
    # this machine's CPU takes by default
    scans = (True, False) if (mode, connectivity) == ("nonzero", 8) \
        else (_cpu.BLOCKS_8,)
    saved = _cpu.BLOCKS_8
    try:
        for blocks in scans:
            _cpu.BLOCKS_8 = blocks
            for strip_count in strips:
                labels, count = _cpu.label(values, valid, connectivity, mode,
                                           Progress(), strips=strip_count)
                np.testing.assert_array_equal(labels, expected)
                assert count == expected_count
    finally:
        _cpu.BLOCKS_8 = saved


MODES_AND_CONNECTIVITIES = [("nonzero", 4), ("nonzero", 8), ("equal", 4),
                            ("equal", 8)]


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
@pytest.mark.parametrize("density", [0.2, 0.41, 0.5, 0.593, 0.7, 0.9])
def test_random_masks(mode, connectivity, density):
    rng = np.random.default_rng(int(density * 1000) + connectivity)
    for shape in [(64, 97), (33, 2), (1, 75), (75, 1), (2, 2), (5, 130)]:
        check((rng.random(shape) < density).astype(np.uint8), connectivity,
              mode)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_many_classes_nan_and_valid(mode, connectivity):
    rng = np.random.default_rng(11 + connectivity)
    for classes in (2, 3, 7):
        values = rng.integers(0, classes, (47, 53)).astype(np.float32)
        values[rng.random(values.shape) < 0.08] = np.nan
        check(values, connectivity, mode)
        valid = (rng.random(values.shape) < 0.85) & ~np.isnan(values)
        check(values, connectivity, mode, valid)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_adversarial_patterns(mode, connectivity):
    rows, cols = np.indices((31, 40))
    patterns = [
        (rows + cols) % 2,                      # checkerboard
        (rows // 2 + cols // 3) % 2,            # coarse checkerboard
        rows % 2, cols % 2, (rows + cols) % 3 == 0,  # stripes, diagonals
        ((rows % 4) == 0) | ((cols % 5) == 0),  # grid lines
        np.where(rows == 30, 1, cols % 2),      # comb joined in the last row
        np.where(rows == 0, 1, cols % 2),       # comb joined in the first row
        spiral_mask(31)[:, :31],
        np.ones((31, 40)), np.zeros((31, 40)),  # all equal
        np.triu(np.ones((31, 40)), 3),          # staircase
        (np.arange(31 * 40).reshape(31, 40) % 7),  # many distinct values
    ]
    for pattern in patterns:
        values = np.asarray(pattern).astype(np.uint8)
        check(values, connectivity, mode)
        check(values[::-1].copy(), connectivity, mode)
        check(values.T.copy(), connectivity, mode)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_plateaus_of_a_fractal_surface(mode, connectivity):
    surface = fractal_surface((83, 101), seed=7)
    classes = np.floor(surface / 80)
    classes[surface > 950] = np.nan
    check(classes, connectivity, mode)
    check(classes - np.nanmedian(classes), connectivity, mode)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16,
                                   np.uint32, np.int32, np.int64, np.uint64,
                                   np.float32, np.float64, np.bool_])
@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_every_dtype(dtype, mode, connectivity):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 3, (29, 37)).astype(dtype)
    check(values, connectivity, mode, strips=(1, 3))


def test_merge_sets_joins_and_keeps_smaller_parents():
    rng = np.random.default_rng(0)
    size = 500
    parent = np.arange(size, dtype=np.int64)
    reference = np.arange(size)

    def root(node):
        while reference[node] != node:
            node = reference[node]
        return node

    for _ in range(700):
        first, second = rng.integers(0, size, 2)
        merge_sets(parent, first, second)
        a, b = root(first), root(second)
        reference[max(a, b)] = min(a, b)
        # every non-root points at a smaller node
        assert (parent <= np.arange(size)).all()
    roots = np.array([root(node) for node in range(size)])
    for node in range(size):
        walk = node
        while parent[walk] != walk:
            walk = parent[walk]
        assert walk == roots[node]


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_rough_and_smooth_rows_mixed(mode, connectivity):
    """Rows labelled run by run (after a smooth row) and cell by cell
    (after a rough one) in every order, with merges across the switch."""
    rng = np.random.default_rng(21 + connectivity)
    cols = 150
    rough = lambda: (rng.random(cols) < 0.6).astype(np.uint8)  # noqa: E731
    smooth = lambda: np.repeat(rng.integers(0, 2, cols // 25),  # noqa: E731
                               25).astype(np.uint8)
    for pattern in ["rrssrsrrrsss", "ssrsrrsrsr", "srrrrrrs", "rsssssssr"]:
        values = np.stack([rough() if kind == "r" else smooth()
                           for kind in pattern * 3])
        check(values, connectivity, mode)
        values[:, ::37] = 1   # vertical lines join the rows' runs
        check(values, connectivity, mode)
        check(values * rng.integers(1, 3, values.shape).astype(np.uint8),
              connectivity, mode)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
@pytest.mark.parametrize("seed", [1, 2])
def test_smooth_fractal_masks(mode, connectivity, seed):
    """Smooth masks take the run scan (8-connected nonzero too, instead of
    the blocks): long runs, few merges, holes and islands."""
    surface = fractal_surface((120, 173), seed=seed)
    for level in np.percentile(surface, [20, 50, 80]):
        mask = (surface > level).astype(np.uint8)
        assert _cpu._smooth(mask, np.ones((1, 1), bool), False)
        check(mask, connectivity, mode)
        check(np.where(surface > level, np.floor(surface / 100), 0),
              connectivity, mode)
