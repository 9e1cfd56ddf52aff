"""The branch-light per-cell scan (core/components/_cpu.py: ``nonzero``
and ``equal`` modes at both connectivities; 8-connected nonzero also by
blocks; both modes at both connectivities also by the scans written for
them, ``TIGHT_4``/``TIGHT_8``) label for label against the per-cell scan
it replaced (tests/components_previous.py)
and against scipy-built oracles.

The new scan computes its links as 0/1 masks, takes the left neighbour's
label through one select and defers a row's merges to the end of the row
(Rem's union-find, core/_unionfind.merge_sets); what could go wrong is a
merge lost or made wrongly at a row's end, at a strip seam, or on a pattern
where every cell merges (checkerboards, stripes, spirals, combs), and NaN,
``valid`` and dtype handling now done inside the kernel (no mask built).
"""

import sys

import numpy as np
import pytest
import scipy.ndimage as ndi

from gridgraph.core._common import Progress
from gridgraph.core._unionfind import merge_sets
from gridgraph.core.components import _cpu, _cpu_team
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
    # cell by cell by the scans written for one case (TIGHT_4 and TIGHT_8,
    # both modes) and by the general one; nonzero mode 8-connected also by
    # blocks
    scans = [(_cpu.BLOCKS_8, True, True), (_cpu.BLOCKS_8, False, False)]
    if mode == "nonzero":
        scans = [(True, True, True), (False, True, True),
                 (False, False, False)]
    # each by one compiled call a thread (_cpu_team) and by the kernel
    # calls of _cpu.label (TEAM_MAX_CELLS 0)
    saved = (_cpu.BLOCKS_8, _cpu.TIGHT_4, _cpu.TIGHT_8,
             _cpu_team.TEAM_MAX_CELLS)
    try:
        for _cpu.BLOCKS_8, _cpu.TIGHT_4, _cpu.TIGHT_8 in scans:
            if connectivity == 4 and _cpu.BLOCKS_8:
                continue  # blocks are 8-connected only
            for _cpu_team.TEAM_MAX_CELLS in (saved[3], 0):
                for strip_count in strips:
                    labels, count = _cpu.label(values, valid, connectivity,
                                               mode, Progress(),
                                               strips=strip_count)
                    np.testing.assert_array_equal(labels, expected)
                    assert count == expected_count
    finally:
        (_cpu.BLOCKS_8, _cpu.TIGHT_4, _cpu.TIGHT_8,
         _cpu_team.TEAM_MAX_CELLS) = saved


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


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.bool_])
def test_smooth_one_byte_rasters_with_and_without_valid(mode, connectivity,
                                                        dtype):
    """One-byte rasters' run bounds are found 64 cells at a time (blocks
    with no bound skipped): runs that start or stop on a word's first or
    last cell, rows whose width is no multiple of 64 (the tail cell by
    cell), narrower than a block, and ``valid`` masks smooth (whole words
    invalid) and rough."""
    surface = fractal_surface((96, 173), seed=4)
    rng = np.random.default_rng(9)
    for level in np.percentile(surface, [30, 60]):
        values = np.where(surface > level, np.floor(surface / 150) + 1, 0)
        values = values.astype(dtype)
        hole = fractal_surface((96, 173), seed=5)
        smooth_valid = hole > np.percentile(hole, 25)
        rough_valid = rng.random(values.shape) < 0.9
        for cols in (173, 168, 16, 9, 7):
            part = np.ascontiguousarray(values[:, :cols])
            check(part, connectivity, mode, strips=(1, 3))
            for valid in (smooth_valid, rough_valid):
                check(part, connectivity, mode,
                      np.ascontiguousarray(valid[:, :cols]), strips=(1, 3))
    # runs bounded exactly at word edges: stripes of 8 and 16 cells
    cols = np.arange(64)
    for width in (8, 16):
        stripes = np.tile((cols // width) % 2, (12, 1)).astype(dtype)
        check(stripes, connectivity, mode, strips=(1, 3))
        check(stripes, connectivity, mode, np.tile(cols % 24 < 16, (12, 1)),
              strips=(1, 3))


def test_run_bounds_of_64_cell_blocks():
    """One-byte rows' run bounds come from 64-cell blocks, 8 bounds a
    block written with no branch and the rest in a loop
    (``_cpu_runs._run_bounds_nonzero``): against the bounds numpy finds,
    with blocks of 0 to 64 bounds, runs ending on a block's last cell,
    widths around a block (the tail cell by cell), non-0/1 bytes and
    valid masks."""
    from gridgraph.core.components._cpu_runs import _bounds_before, \
        _run_bounds_nonzero, bound_words_of_runs
    rng = np.random.default_rng(17)
    for trial in range(600):
        cols = int(rng.choice([1, 7, 63, 64, 65, 127, 128, 130, 200, 256]))
        # runs of random lengths: up to 64 bounds in a block
        longest = int(rng.choice([1, 2, 5, 40]))
        row = np.repeat(rng.random(cols) < 0.5,
                        rng.integers(1, longest + 1, cols))[:cols]
        values = (row * rng.integers(1, 256, cols)).astype(np.uint8)
        check_valid = trial % 3 == 0
        inside = rng.random(cols) < 0.8 if check_valid else \
            np.ones(1, dtype=np.bool_)
        if trial % 6 == 0:
            # a mask viewed from bytes: any non-zero byte is valid
            inside = rng.integers(0, 4, cols).astype(np.uint8).view(np.bool_)
        vertices = (values != 0) & (inside.view(np.uint8) != 0
                                    if check_valid else True)
        edges = np.diff(np.concatenate(([0], vertices.astype(np.int8),
                                        [0])))
        runs = np.full((cols + 9, 3), -1, dtype=np.int64)
        kept = np.full((2, cols // 64 + 2), 7, dtype=np.uint64)
        count = _run_bounds_nonzero(values, inside, check_valid, runs, kept)
        np.testing.assert_array_equal(runs[:count, 0],
                                      np.flatnonzero(edges == 1))
        np.testing.assert_array_equal(runs[:count, 1],
                                      np.flatnonzero(edges == -1))
        # the bound words kept for the row below: a bit a bound column
        # (the stop at the row's end a bit when the row ends in a partial
        # block), and the bounds before each word
        bound_cols = np.flatnonzero(edges != 0)
        if cols % 64 == 0:
            bound_cols = bound_cols[bound_cols < cols]
        bits = np.zeros(kept.shape[1] * 64, dtype=bool)
        bits[bound_cols] = True
        words = np.packbits(bits.reshape(-1, 8)[:, ::-1], axis=1)[:, 0]
        np.testing.assert_array_equal(
            kept[0], words.reshape(-1, 8).copy().view("<u8")[:, 0])
        np.testing.assert_array_equal(
            kept[1], np.concatenate(([0], np.cumsum(
                bits.reshape(-1, 64).sum(axis=1))[:-1])))
        # counts before any column, as the row below asks for them
        for col in range(cols + 2):
            assert _bounds_before(kept, np.uint64(col)) == \
                np.count_nonzero(bound_cols < col)
        # and the same counts from the run list (a call's first row; no
        # bit for a stop at the row's end)
        again = np.full_like(kept, 5)
        bound_words_of_runs(runs, count, again, cols)
        for col in range(cols + 2):
            assert _bounds_before(again, np.uint64(col)) == \
                np.count_nonzero(bound_cols[bound_cols < cols] < col)


def _equal_bounds_cell_by_cell(values, inside, check_valid):
    """``equal`` mode's run bounds as the cell-by-cell loop found them
    (before the 64-cell blocks): a valid cell starts a run unless its
    left neighbour is valid and of an equal value (``==``: NaN equals
    nothing, -0.0 equals 0.0), and a run stops before a cell that is not
    valid or of another value; without a valid mask the valid cells are
    those equal to themselves (not NaN)."""
    # any non-zero byte of the mask is valid (a mask viewed from bytes)
    vertices = inside.view(np.uint8) != 0 if check_valid else \
        values == values
    same = np.concatenate(([False], values[1:] == values[:-1]))
    left = np.concatenate(([False], vertices[:-1]))
    starts = np.flatnonzero(vertices & ~(left & same))
    stops = np.flatnonzero(left & ~(vertices & same))
    return starts, np.concatenate((stops, [values.size]))[:starts.size]


def test_equal_run_bounds_of_64_cell_blocks():
    """``equal`` mode's run bounds (``_cpu_runs._run_bounds_equal``: 64-cell
    blocks of one-byte rows, starts and stops written 8 a block with no
    branch, the rest in a loop; stops copied from the next starts without
    a valid mask) against the cell-by-cell bounds: a value change at every
    position of a block (and two, at every pair of positions), blocks of 0
    to 64 bounds, widths around a block and not a multiple of 8 or 64
    (the tail cell by cell), int8 / bool / non-0/1 bytes, valid masks,
    and wider types (float: NaN, -0.0 and 0.0) cell by cell."""
    from gridgraph.core.components._cpu_runs import _run_bounds_equal

    def check(values, inside, check_valid):
        cols = values.size
        runs = np.full((cols + 9, 3), -1, dtype=np.int64)
        count = _run_bounds_equal(values, inside, check_valid, runs)
        starts, stops = _equal_bounds_cell_by_cell(values, inside,
                                                   check_valid)
        assert count == starts.size
        np.testing.assert_array_equal(runs[:count, 0], starts)
        np.testing.assert_array_equal(runs[:count, 1], stops)

    no_mask = np.ones(1, dtype=np.bool_)
    # one value change (and two) at every position of a 64-cell block,
    # in the first, a middle and the last whole block, and the tail
    for cols in (64, 65, 128, 200):
        for first in range(cols):
            values = np.zeros(cols, dtype=np.uint8)
            values[first:] = 1
            check(values, no_mask, False)
            inside = np.ones(cols, dtype=np.bool_)
            inside[first] = False
            check(values, inside, True)
            check(1 - values, inside, True)
        for first in range(0, 64, 3):
            for second in range(first + 1, 130, 5):
                values = np.full(cols, 7, dtype=np.uint8)
                values[first] = 9
                values[second % cols:] = 200
                check(values, no_mask, False)
                inside = np.ones(cols, dtype=np.bool_)
                inside[second % cols] = False
                check(values, inside, True)
    rng = np.random.default_rng(29)
    widths = [1, 7, 8, 9, 63, 64, 65, 71, 127, 128, 130, 192, 200, 256,
              1000]
    for trial in range(900):
        cols = int(rng.choice(widths))
        longest = int(rng.choice([1, 2, 5, 40]))
        kinds = int(rng.choice([2, 3, 256]))
        row = np.repeat(rng.integers(0, kinds, cols),
                        rng.integers(1, longest + 1, cols))[:cols]
        dtype = (np.uint8, np.int8, np.bool_)[trial % 3]
        values = (row % 2 if dtype == np.bool_ else row).astype(dtype)
        check_valid = trial % 2 == 0
        inside = rng.random(cols) < float(rng.choice([0.5, 0.9, 1.0])) \
            if check_valid else no_mask
        check(values, inside, check_valid)
        if check_valid:  # the same mask viewed from bytes 0 to 3
            check(values, (inside * rng.integers(1, 4, cols)).astype(
                np.uint8).view(np.bool_), True)
    # wider types, cell by cell: NaN (valid only with a mask), -0.0
    for trial in range(200):
        cols = int(rng.choice(widths))
        row = rng.choice(np.array([0.0, -0.0, 1.0, np.nan, 2.5]), cols)
        values = np.repeat(row, rng.integers(1, 4, cols))[:cols].astype(
            (np.float32, np.float64)[trial % 2])
        check_valid = trial % 3 == 0
        inside = rng.random(cols) < 0.8 if check_valid else no_mask
        check(values, inside, check_valid)
        check(np.round(values * 3).astype(np.int16)
              if not np.isnan(values).any() else
              np.nan_to_num(values).astype(np.int16), inside, check_valid)


def test_byte_masks_of_both_forms():
    """The two forms of the 64-cell byte masks the run bounds use
    (``_cpu_runs.byte_mask_intrinsics``: one vector compare bitcast to a
    word on x86-64; eight 64-bit lanes and multiplies elsewhere) give the
    same words as numpy, cell i at bit i: bytes 0, 1, 0x7F, 0x80, 0xFF
    (the lanes' high-bit trick) and random ones, blocks at every offset."""
    from numba import njit

    from gridgraph.core.components._cpu_runs import byte_mask_intrinsics
    bitcast_nonzero, bitcast_unequal = byte_mask_intrinsics(True)
    lanes_nonzero, lanes_unequal = byte_mask_intrinsics(False)

    @njit
    def words(cells, first, other):
        return (bitcast_nonzero(cells, first), lanes_nonzero(cells, first),
                bitcast_unequal(cells, first, other),
                lanes_unequal(cells, first, other))

    def word_of(bits):
        return int(np.packbits(bits[::-1]).view(">u8")[0])

    rng = np.random.default_rng(37)
    edge_bytes = np.array([0, 1, 2, 0x7F, 0x80, 0x81, 0xFE, 0xFF],
                          dtype=np.uint8)
    for trial in range(1500):
        cells = rng.choice(edge_bytes, 200) if trial % 3 else \
            rng.integers(0, 256, 200).astype(np.uint8)
        first, other = (int(index) for index in rng.integers(0, 137, 2))
        nonzero = word_of(cells[first:first + 64] != 0)
        unequal = word_of(cells[first:first + 64]
                          != cells[other:other + 64])
        assert words(cells, np.uint64(first), np.uint64(other)) == (
            nonzero, nonzero, unequal, unequal)


@pytest.mark.skipif(sys.platform != "linux", reason="mprotect via libc")
def test_run_bounds_read_no_cell_past_the_row():
    """Both modes' run bounds of one-byte rows (64-cell vector loads of
    the values, of the cells one column left and of the valid mask) read
    no cell past the row: rows and masks that end where a page that
    cannot be read begins (a read past them would crash the test)."""
    import ctypes
    import mmap

    from gridgraph.core.components._cpu_runs import _run_bounds_equal, \
        _run_bounds_nonzero
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_int)
    mapped = mmap.mmap(-1, 4 * page)
    memory = np.frombuffer(mapped, dtype=np.uint8)
    base = memory.ctypes.data
    guards = (base + page, base + 3 * page)
    rng = np.random.default_rng(41)
    for guard in guards:
        assert libc.mprotect(guard, page, 0) == 0, \
            ctypes.get_errno()  # PROT_NONE
    try:
        for cols in (1, 63, 64, 65, 127, 128, 129, 200, 256):
            values = memory[page - cols:page]
            inside = memory[3 * page - cols:3 * page].view(np.bool_)
            for trial in range(20):
                values[:] = np.repeat(rng.integers(0, 3, cols),
                                      rng.integers(1, 9, cols))[:cols]
                inside[:] = rng.random(cols) < 0.8
                for check_valid in (False, True):
                    mask = inside if check_valid else np.ones(1, np.bool_)
                    runs = np.full((cols + 9, 3), -1, dtype=np.int64)
                    count = _run_bounds_equal(values, mask, check_valid,
                                              runs)
                    starts, stops = _equal_bounds_cell_by_cell(
                        values, mask, check_valid)
                    np.testing.assert_array_equal(runs[:count, 0], starts)
                    np.testing.assert_array_equal(runs[:count, 1], stops)
                    kept = np.empty((2, cols // 64 + 2), dtype=np.uint64)
                    count = _run_bounds_nonzero(values, mask, check_valid,
                                                runs, kept)
                    vertices = (values != 0) & (mask if check_valid
                                                else True)
                    edges = np.diff(np.concatenate(
                        ([0], vertices.astype(np.int8), [0])))
                    np.testing.assert_array_equal(
                        runs[:count, 0], np.flatnonzero(edges == 1))
    finally:
        for guard in guards:
            libc.mprotect(guard, page, mmap.PROT_READ | mmap.PROT_WRITE)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_runs_swept_below_rows_of_runs(mode, connectivity):
    """Rows of runs below rows of runs (at most a run per 16 cells),
    labelled in one sweep over both run lists (``_cpu_runs._link_runs``),
    in both modes: runs that touch where the runs above touch too
    (``equal`` mode, 8-connected: the two diagonal links there), runs
    above that start or end a cell before or after a run (8-connected: a
    diagonal link of one cell), runs linked to many runs above (merges)
    and runs above linked to many runs, the first and last runs of a row,
    gaps of invalid cells, three or more values, and floats (NaN cells
    invalid without a mask; -0.0 equals 0.0): labels against the
    oracle's and the previous kernel's."""
    rng = np.random.default_rng(31)
    cols = 640
    # staggered stripes: every run's bound a cell or two off, or on, the
    # bound above it
    for shift in (-2, -1, 0, 1, 2):
        values = np.zeros((16, cols), dtype=np.uint8)
        for row in range(16):
            values[row] = ((np.arange(cols) + shift * row) // 24) % 3
        check(values, connectivity, mode, strips=(1, 3))
        check(values, connectivity, mode,
              valid=rng.random(values.shape) < 0.995, strips=(1, 3))
    # checkerboards of wide squares: corners meet at every run bound
    for width in (20, 33):
        board = ((np.arange(48)[:, None] // width + np.arange(cols)[None]
                  // width) % 2).astype(np.uint8)
        check(board, connectivity, mode, strips=(1, 3))
        check(board.astype(np.float64) - 0.5, connectivity, mode,
              strips=(1, 3))
    # combs: one wide run below (or above) many narrow ones
    comb = np.zeros((12, cols), dtype=np.uint8)
    comb[::2, ::20] = 1
    comb[::2, 1::20] = 1
    check(comb, connectivity, mode, strips=(1, 3))
    check(comb[::-1].copy(), connectivity, mode, strips=(1, 3))
    # a run whose first run above of its value is two or three runs in,
    # after runs of other values, and runs above of its value beyond it
    # (merges)
    ladder = np.zeros((6, cols), dtype=np.uint8)
    ladder[0] = (np.arange(cols) // 20) % 4
    ladder[1, :] = 9
    ladder[1, 10:75] = 2
    ladder[1, 75:150] = 3
    ladder[2:] = (np.arange(cols) // 7) % 5
    ladder[3, 100:400] = 4
    check(ladder, connectivity, mode, strips=(1, 3))
    check(ladder[::-1].copy(), connectivity, mode, strips=(1, 3))
    # a comb's teeth on a full row: many runs below one run, and above
    teeth = comb.copy()
    teeth[1::4] = 1
    check(teeth, connectivity, mode, strips=(1, 3))
    check(teeth[::-1].copy(), connectivity, mode, strips=(1, 3))
    for trial in range(16):
        rows = int(rng.integers(2, 20))
        wide = int(rng.choice([64, 130, 400]))
        values = np.empty((rows, wide), dtype=np.uint8)
        for row in range(rows):
            widths = rng.integers(16, 48, wide // 16 + 1)
            values[row] = np.repeat(rng.integers(0, int(rng.choice(
                [2, 3, 5, 16])), widths.size), widths)[:wide]
        # runs above bounded where the ones below are, give or take a cell
        values[1::2] = np.roll(values[0::2][:rows // 2],
                               int(rng.integers(-1, 2)), axis=1)
        valid = rng.random(values.shape) < 0.99 if trial % 2 else None
        check(values, connectivity, mode, valid=valid, strips=(1, 3))
        floats = np.choose(values % 4, [0.0, -0.0, 1.5, np.nan]).astype(
            np.float32)
        check(floats, connectivity, mode, strips=(1, 3))
        # (the oracle labels no valid NaN cell: a valid mask leaves NaN out)
        check(floats, connectivity, mode,
              valid=~np.isnan(floats) & (rng.random(values.shape) < 0.99),
              strips=(1, 3))


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_blocks_of_many_bounds_below_smooth_rows(mode, connectivity):
    """A row labelled by runs (the row above smooth) whose 64-cell blocks
    hold more than the 8 bounds written with no branch: labels against
    scipy's."""
    rng = np.random.default_rng(23)
    values = np.ones((24, 256), dtype=np.uint8)
    for row in range(1, 24, 2):
        start = int(rng.integers(0, 200))
        gaps = int(rng.integers(5, 30))  # 10 to 60 bounds in a block
        values[row, start:start + 2 * gaps:2] = 0
    values[::6, 100:140] = 0
    check(values, connectivity, mode)
    check(values, connectivity, mode, valid=rng.random(values.shape) < 0.97)


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
def test_rows_kept_as_run_lists_across_calls_seams_and_cell_rows(
        monkeypatch, mode, connectivity):
    """Rows labelled by runs keep their run list in their label row
    (core/components/_cpu_runs.py) for the second pass to fill: a strip's
    next call must read the list its previous call left in its last row
    (calls of 1, 2 and 5 rows), a seam's rows are unpacked before the
    seam merge, a cell-scanned row reads the labels of a kept row above,
    and a row whose list does not fit (more than (cols - 1) / 3 runs)
    writes its labels."""
    surface = fractal_surface((60, 131), seed=8)
    rng = np.random.default_rng(13)
    smooth = (surface > np.median(surface)).astype(np.uint8)
    mixed = smooth.copy()
    mixed[7::9] = rng.random((len(range(7, 60, 9)), 131)) < 0.6  # rough
    mixed[20] = np.arange(131) % 2  # 66 runs after a smooth row: no fit
    for per_call in (1, 2, 5):
        monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", per_call * 131)
        for values in (smooth, mixed, mixed * (1 + (surface > 600))):
            check(values, connectivity, mode, strips=(1, 2, 7))


# the strip runner: one task per strip (first pass) and per worker share
# (second pass), the calling thread running share 0; a process-wide pool


def test_more_workers_than_cpus_grow_the_shared_pool(monkeypatch):
    # strips and second-pass shares on 5 workers (the pool grows to 4
    # threads beside the caller) label exactly as one strip does
    rng = np.random.default_rng(5)
    values = rng.integers(0, 3, (90, 41))
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 5)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 3 * 41)
    for mode in ("equal", "nonzero"):
        for connectivity in (4, 8):
            expected = _cpu.label(values, None, connectivity, mode,
                                  Progress(), strips=1)
            got = _cpu.label(values, None, connectivity, mode, Progress(),
                             strips=5)
            np.testing.assert_array_equal(got[0], expected[0])
            assert got[1] == expected[1]
    assert _cpu._POOL[0]._max_workers >= 4


def _label_in_forked_child(values, expected, answers):
    got = _cpu.label(values, None, 4, "equal", Progress(), strips=2)
    answers.put(bool(np.array_equal(got[0], expected)))


def test_a_forked_child_labels_with_its_own_pool(monkeypatch):
    # the shared pool exists in the parent; a forked child (a process pool
    # executor's worker) gets none of its threads and must not wait on them
    import multiprocessing
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 3 * 41)
    values = np.random.default_rng(7).integers(0, 3, (90, 41))
    expected = _cpu.label(values, None, 4, "equal", Progress(), strips=2)[0]
    assert _cpu._POOL, "the parent's labelling made the shared pool"
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_label_in_forked_child,
                            args=(values, expected, answers))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung on the parent's pool")
    assert child.exitcode == 0
    assert answers.get(timeout=5) is True


@pytest.mark.parametrize("failing", ["first", "second"])
def test_a_failing_share_on_a_pool_thread_is_raised_here(monkeypatch,
                                                         failing):
    # an error in a share run by a pool thread reaches the caller; the
    # other shares stop at their next call (no hang, nothing swallowed);
    # the kernel calls of _cpu.label (a team's: test_components_team.py)
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 3)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 2 * 30)
    # the general scan, the one patched below
    monkeypatch.setattr(_cpu, "TIGHT_4", False)
    values = np.ones((60, 30), dtype=np.uint8)
    if failing == "first":
        real = _cpu._first_pass_nonzero

        def first_pass(*args):
            top = args[7]
            if top > 0:  # a strip other than the caller's
                raise MemoryError("share of strip at row %d" % top)
            return real(*args)
        monkeypatch.setattr(_cpu, "_first_pass_nonzero", first_pass)
    else:
        real = _cpu._second_pass
        monkeypatch.setattr(_cpu, "STRING_STORE_FILLS", False)

        def second_pass(labels, final, run_rows, row_start, row_stop):
            if row_start >= 30:
                raise MemoryError("second pass at row %d" % row_start)
            return real(labels, final, run_rows, row_start, row_stop)
        monkeypatch.setattr(_cpu, "_second_pass", second_pass)
    with pytest.raises(MemoryError):
        _cpu.label(values, None, 4, "nonzero", Progress(), strips=3)


def test_cancel_with_pool_threads_stops_every_share(monkeypatch):
    import time
    from gridgraph.core import CancelledError
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)  # calls, no team
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 3)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 30)  # a row a call
    monkeypatch.setattr(_cpu, "TIGHT_4", False)  # the scan patched below
    values = np.ones((90, 30), dtype=np.uint8)
    calls = []
    real = _cpu._first_pass_nonzero

    def first_pass(*args):
        calls.append(args[8])  # row_start
        if args[7] > 0:  # the pool threads' strips: 5 ms a row
            time.sleep(0.005)
        return real(*args)
    monkeypatch.setattr(_cpu, "_first_pass_nonzero", first_pass)
    with pytest.raises(CancelledError):
        _cpu.label(values, None, 4, "nonzero",
                   Progress(lambda fraction: len(calls) < 3), strips=3)
    # the caller's share stopped at the cancel, the pool's two shares at
    # their next row: far from the 90 rows (60 of them on the pool) that
    # a share ignoring the cancel would label
    assert len(calls) < 30


@pytest.mark.parametrize("strips", [1, 2, 5])
def test_resolve_numbers_roots_in_order_without_branches(strips):
    # _resolve against a plain dictionary walk on random forests whose
    # non-roots point at smaller labels (the union-by-minimum invariant),
    # label ranges split into strips as the kernels use them
    rng = np.random.default_rng(strips)
    size = 400
    bounds = np.linspace(1, size + 1, strips + 1).round().astype(np.int64)
    first_labels = bounds[:-1].copy()
    # leave a gap of unused labels at each strip's end
    next_labels = np.maximum(bounds[1:] - rng.integers(0, 20, strips),
                             first_labels)
    for dtype in (np.int32, np.int64):
        parent = np.zeros(size + 2, dtype=dtype)
        used = [label for s in range(strips)
                for label in range(first_labels[s], next_labels[s])]
        expected = {}
        count = 0
        for index, label in enumerate(used):
            if index == 0 or rng.random() < 0.3:
                parent[label] = label
                count += 1
                expected[label] = count
            else:
                parent[label] = used[rng.integers(0, index)]
                expected[label] = expected[int(parent[label])]
        got_count = _cpu._resolve(parent, first_labels, next_labels)
        assert got_count == count
        assert [int(parent[label]) for label in used] == \
            [expected[label] for label in used]


def test_strips_split_the_estimated_cost_not_the_rows():
    """Strips get equal shares of the first pass's estimated cost
    (``_balanced_bounds``): smooth rows labelled run by run cost less
    than rough ones, so a raster rough at the top and smooth below puts
    the first seam high; the labels are those of one strip, and a strip
    that would get no row falls back to equal rows."""
    rng = np.random.default_rng(21)
    # smooth (4 runs a row, and a few notches) under a rough top quarter
    values = np.tile((np.arange(200) // 25) % 2, (240, 1)).astype(np.uint8)
    values[rng.random((240, 200)) < 0.01] ^= 1
    values[:60] = rng.random((60, 200)) < 0.6
    valid = np.ones((1, 1), dtype=np.bool_)
    for nonzero in (True, False):
        starts, stops = _cpu._strip_bounds(240, 240, 200, 2,
                                           (values, valid, False, nonzero))
        assert starts[0] == 0 and stops[-1] == 240
        assert np.array_equal(starts[1:], stops[:-1])
        assert 30 < starts[1] < 100  # equal rows would put it at 120
    for mode, connectivity in MODES_AND_CONNECTIVITIES:
        check(values, connectivity, mode, strips=(1, 2, 3))
    # three strips over two rows of which one is rough: no empty strip
    tiny = np.zeros((3, 64), dtype=np.uint8)
    tiny[0] = rng.random(64) < 0.5
    bounds = _cpu._balanced_bounds(tiny, valid, False, True, 3, 3)
    assert np.all(np.diff(bounds) > 0) and bounds[-1] == 3


def test_a_slow_thread_takes_fewer_strips(monkeypatch):
    """Threads take the next strip when done with one (``_run_jobs``): a
    thread slowed by something else on its core labels fewer strips
    instead of holding the call up.  With the pool thread's strips slowed,
    the calling thread labels most of the 8 (a fixed share each would
    leave it 4, one strip a job on a pool of one thread 1)."""
    import threading
    import time
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)  # calls, no team
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    values = (np.random.default_rng(31).random((96, 40)) < 0.6).astype(
        np.uint8)
    expected = _cpu.label(values, None, 4, "nonzero", Progress(), strips=1)
    real = _cpu._first_pass_nonzero_tight
    strips_of = {"calling": set(), "pool": set()}

    def first_pass(*args):
        calling = threading.current_thread() is threading.main_thread()
        strips_of["calling" if calling else "pool"].add(args[7])  # top
        if not calling:
            time.sleep(0.2)
        return real(*args)
    monkeypatch.setattr(_cpu, "_first_pass_nonzero_tight", first_pass)
    got = _cpu.label(values, None, 4, "nonzero", Progress(), strips=8)
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]
    assert len(strips_of["calling"]) + len(strips_of["pool"]) == 8
    assert len(strips_of["calling"]) >= 6, strips_of


def test_second_pass_of_numbered_strips_runs_beside_the_numbering(
        monkeypatch):
    """Roots are numbered strip by strip on the calling thread, and the
    pool runs the second pass over a strip's rows once its labels are
    numbered (a strip's cells hold only labels of its own range): rows of
    the first strip are relabelled before the last strip is numbered.
    Labels as with one strip, both modes (4-connected: 8-connected
    ``nonzero`` mode may take the block scan, numbered in one go)."""
    import threading
    import time
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)  # calls, no team
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
    values = np.random.default_rng(32).integers(0, 3, (80, 30))
    events = []
    lock = threading.Lock()
    real_resolve, real_second = _cpu._resolve_range, _cpu._second_pass

    def resolve_range(parent, first_label, next_label, count):
        if first_label > 1:  # not the first strip: slow
            time.sleep(0.05)
        result = real_resolve(parent, first_label, next_label, count)
        with lock:
            events.append(("numbered", int(first_label)))
        return result

    def second_pass(labels, final, run_rows, row_start, row_stop):
        with lock:
            events.append(("second", row_start))
        return real_second(labels, final, run_rows, row_start, row_stop)
    for mode in ("nonzero", "equal"):
        expected = _cpu.label(values, None, 4, mode, Progress(), strips=1)
        monkeypatch.setattr(_cpu, "_resolve_range", resolve_range)
        monkeypatch.setattr(_cpu, "_second_pass", second_pass)
        monkeypatch.setattr(_cpu, "STRING_STORE_FILLS", False)
        events.clear()
        got = _cpu.label(values, None, 4, mode, Progress(), strips=4)
        monkeypatch.undo()
        monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)
        monkeypatch.setattr(_cpu, "_cpu_count", lambda: 2)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]
        last_numbered = max(index for index, event in enumerate(events)
                            if event[0] == "numbered")
        first_rows = [index for index, event in enumerate(events)
                      if event == ("second", 0)]
        assert first_rows and first_rows[0] < last_numbered, events
        assert sum(event[0] == "numbered" for event in events) == 4


def test_the_union_find_array_is_kept_between_calls(monkeypatch):
    """The union-find array is kept for the next call (its pages are then
    already faulted in) and holds the last call's labels: a call must not
    read an entry it did not write.  Larger calls replace it; arrays over
    ``_KEPT_UNION_FIND_ENTRIES`` labels are not kept; calls at once each
    get their own."""
    import concurrent.futures
    monkeypatch.setattr(_cpu, "_KEPT_UNION_FIND", [])
    rng = np.random.default_rng(33)
    # every value distinct: a label per cell, the whole array written
    distinct = rng.permutation(60 * 50).reshape(60, 50).astype(np.float64)
    _cpu.label(distinct, None, 4, "equal", Progress(), strips=3)
    kept = _cpu._KEPT_UNION_FIND[0]
    assert kept.size == distinct.size + 1
    kept[:] = -7  # junk no call may read
    for mode, connectivity in MODES_AND_CONNECTIVITIES:
        check(rng.integers(0, 3, (40, 37)), connectivity, mode,
              strips=(1, 2, 5))
    assert _cpu._KEPT_UNION_FIND[0] is kept
    assert kept[1] != -7  # the smaller calls labelled in it
    values = rng.integers(0, 3, (70, 50))
    expected = [_cpu.label(values, None, 8, "equal", Progress(), strips=1)
                for _ in range(2)]
    assert _cpu._KEPT_UNION_FIND[0] is not kept  # a larger one replaced it
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda strips: _cpu.label(values, None, 8, "equal", Progress(),
                                      strips=strips), [1, 2, 3, 4] * 3))
    for got in results:
        np.testing.assert_array_equal(got[0], expected[0][0])
        assert got[1] == expected[0][1]
    monkeypatch.setattr(_cpu, "_KEPT_UNION_FIND", [])
    monkeypatch.setattr(_cpu, "_KEPT_UNION_FIND_ENTRIES", values.size)
    _cpu.label(values, None, 8, "equal", Progress(), strips=2)
    assert _cpu._KEPT_UNION_FIND == []  # values.size + 1 entries: too many


def test_a_cancel_waits_only_for_the_calls_running_on_the_pool():
    """Once the calling thread has no job left it polls progress while the
    pool threads finish theirs (``_run_jobs``): a cancel asked then stops
    the pool's job at its next call.  A blocking wait for the pool would
    see the cancel only after all 20 slow calls (1 s)."""
    import threading
    import time
    from gridgraph.core import CancelledError
    from gridgraph.core.components import _cpu_pool
    calling = threading.get_ident()
    pool_calls = []
    pool_started = threading.Event()

    def call():
        if threading.get_ident() != calling:
            pool_calls.append(1)
            pool_started.set()
            time.sleep(0.05)
        else:
            # the pool thread holds the other job before the calling
            # thread could take both
            assert pool_started.wait(5)
    jobs = [[call] * 20, [call] * 20]
    cancel = threading.Event()
    timer = threading.Timer(0.15, cancel.set)
    timer.start()
    pool = _cpu_pool._pool(2)
    started = time.perf_counter()
    try:
        with pool as executor, pytest.raises(CancelledError):
            _cpu_pool._run_jobs(executor, jobs, Progress(
                lambda fraction: not cancel.is_set()), 0.0, 1.0, 2)
    finally:
        timer.cancel()
    elapsed = time.perf_counter() - started
    # one job ran on the pool thread (the calling thread's 20 calls take
    # no time), and stopped a call or two after the cancel at 0.15 s
    # (about 4 calls, 0.25 s); the bounds leave room for a loaded box and
    # still fail a blocking wait (20 calls, 1 s)
    assert 1 <= len(pool_calls) <= 14, len(pool_calls)
    assert elapsed < 0.85, elapsed


@pytest.mark.parametrize("mode, connectivity", MODES_AND_CONNECTIVITIES)
@pytest.mark.parametrize("cols", [1, 2, 3, 8, 9, 17])
def test_narrow_rows_with_and_without_valid(mode, connectivity, cols):
    """The two-pass row scans (``_scan_row_split``) peel the first and
    last columns (no cell left, no cell above-right: one cell is both),
    and the run bounds of rows under a 64-cell block go cell by cell:
    rough rows at these widths, one-byte and float values, with and
    without a valid mask."""
    rng = np.random.default_rng(cols)
    for dtype in (np.uint8, np.float32):
        values = rng.integers(0, 3, (40, cols)).astype(dtype)
        check(values, connectivity, mode)
        check(values, connectivity, mode, valid=rng.random((40, cols)) < 0.8)


@pytest.mark.parametrize("string_stores", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_rows_filled_from_run_lists(dtype, string_stores):
    """``_cpu_runs.fill_runs`` (its stores run past a segment's end into the
    next segment, except near the row's end) and
    ``_string_stores.fill_runs_by_string_stores`` (``rep stosl`` /
    ``rep stosq`` on x86-64): every cell of rows of 1 to 70 cells equals
    the run list's, for runs of one cell, runs that touch (no gap between
    them), runs at either end of the row and rows without runs; the cells
    past the row (a wider buffer) are never written."""
    from gridgraph.core.components._cpu_runs import fill_runs as vector_fill
    from gridgraph.core.components._string_stores import \
        fill_runs_by_string_stores
    fill_runs = fill_runs_by_string_stores if string_stores else vector_fill
    rng = np.random.default_rng(41)
    for trial in range(3000):
        cols = int(rng.integers(1, 71))
        bounds = np.sort(rng.choice(cols + 1, size=2 * int(rng.integers(
            0, cols // 2 + 2)), replace=True))
        if trial % 3 == 0:  # touching runs: each stop is the next start
            bounds = np.unique(bounds)
            runs = np.stack([bounds[:-1], bounds[1:]], axis=1)
        else:
            runs = bounds.reshape(-1, 2)
        runs = runs[runs[:, 0] < runs[:, 1]]
        run_list = np.zeros((runs.shape[0] + 1, 3), dtype=np.int64)
        run_list[:runs.shape[0], :2] = runs
        run_list[:runs.shape[0], 2] = rng.integers(
            1, np.iinfo(dtype).max, runs.shape[0])
        expected = np.zeros(cols, dtype=dtype)
        for start, stop, label in run_list[:runs.shape[0]]:
            expected[start:stop] = label
        buffer = np.full(cols + 16, -5, dtype=dtype)
        fill_runs(buffer[:cols], run_list, runs.shape[0])
        np.testing.assert_array_equal(buffer[:cols], expected)
        assert (buffer[cols:] == -5).all()


@pytest.mark.parametrize("mode", ["nonzero", "equal"])
def test_string_store_fills_give_the_same_labels(monkeypatch, mode):
    """The second pass with its run rows filled by string stores
    (``_cpu.STRING_STORE_FILLS``, the default on Intel CPUs) labels as the
    vector stores do: smooth (fractal) and rough (random) masks, integer
    values with a valid mask, 4- and 8-connected, one strip and several,
    rows narrower than a vector store and wider than a block."""
    surface = fractal_surface((300, 333), seed=5)
    rng = np.random.default_rng(43)
    rasters = [((surface > np.median(surface)).astype(np.uint8), None),
               ((rng.random((300, 333)) < 0.6).astype(np.uint8), None),
               ((surface * 4).astype(np.int16),
                rng.random((300, 333)) < 0.9),
               ((rng.random((200, 7)) < 0.7).astype(np.uint8), None)]
    for values, valid in rasters:
        for connectivity in (4, 8):
            for strips in (1, 3):
                labelled = []
                for string_stores in (False, True):
                    monkeypatch.setattr(_cpu, "STRING_STORE_FILLS",
                                        string_stores)
                    labels, count = _cpu.label(values, valid, connectivity,
                                               mode, Progress(), strips)
                    labelled.append((labels.copy(), count))
                np.testing.assert_array_equal(labelled[0][0],
                                              labelled[1][0])
                assert labelled[0][1] == labelled[1][1]


def test_cpu_vendor_read_from_cpuinfo(tmp_path, monkeypatch):
    """String-store fills are chosen by the CPU's vendor: read from a
    cpuinfo file's ``vendor_id``; Intel's turns them on, others' not."""
    from gridgraph.core.components import _string_stores
    monkeypatch.setattr(_string_stores, "_X86_64", True)
    for vendor, fast in (("GenuineIntel", True), ("AuthenticAMD", False)):
        cpuinfo = tmp_path / vendor
        cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n"
                           "cpu family\t: 6\n")
        assert _string_stores.cpu_vendor(str(cpuinfo)) == vendor
        monkeypatch.setattr(_string_stores, "cpu_vendor",
                            lambda cpuinfo=None, vendor=vendor: vendor)
        assert _string_stores.fast_here() is fast
        monkeypatch.undo()
        monkeypatch.setattr(_string_stores, "_X86_64", True)
    monkeypatch.setattr(_string_stores, "_X86_64", False)
    assert _string_stores.cpu_vendor(str(tmp_path / "GenuineIntel")) is None
