"""Connected components on the CPU backend: core-level tests (no QGIS).

How correctness is established:
1. literal grids labelled by hand (both modes, both connectivities, nodata,
   odd shapes, every input dtype);
2. oracles on hypothesis-generated rasters: ``nonzero`` mode must equal
   ``scipy.ndimage.label`` array for array; ``equal`` mode must equal a
   per-value scipy labelling renumbered by first cell (written here) and
   ``skimage.measure.label(..., background=sentinel)``;
3. adversarial rasters (spiral, checkerboards, plateaus, combs), strip
   seams of the concurrent path, GeoTIFF / memmap / odd-layout sources,
   argument errors, progress and cancellation.
"""

import re

import numpy as np
import pytest
import scipy.ndimage as ndi
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from skimage.measure import label as skimage_label

from gridgraph.core import (CancelledError, InvalidInputError,
                            connected_components)
from gridgraph.core._common import Progress, valid_mask
from gridgraph.core.components import _cpu, _cpu_team
from gridgraph.tests.rasters import fractal_surface, spiral_mask

ORACLE_SETTINGS = settings(max_examples=80, deadline=None)


def cpu_components(values, **keywords):
    keywords.setdefault("backend", "cpu")
    result = connected_components(values, **keywords)
    return result.labels, result.count


def structure(connectivity):
    return ndi.generate_binary_structure(2, 1 if connectivity == 4 else 2)


def equal_mode_oracle(values, valid, connectivity):
    """Labels of ``equal`` mode built from scipy: one binary labelling per
    distinct value, pieces renumbered by their first cell in scan order."""
    pieces = []
    for value in np.unique(values[valid]):
        mask = valid & (values == value)
        components, count = ndi.label(mask, structure(connectivity))
        for component in range(1, count + 1):
            cells = np.flatnonzero(components == component)
            pieces.append((cells[0], cells))
    labels = np.zeros(values.size, dtype=np.int32)
    for number, (_, cells) in enumerate(sorted(pieces, key=lambda p: p[0]),
                                        start=1):
        labels[cells] = number
    return labels.reshape(values.shape), len(pieces)


def skimage_equal_mode(values, valid, connectivity):
    """Second oracle: skimage on integer codes of the values, nodata -1."""
    codes = np.full(values.shape, -1, dtype=np.int64)
    if valid.any():
        codes[valid] = np.unique(values[valid], return_inverse=True)[1]
    labels = skimage_label(codes, connectivity=1 if connectivity == 4 else 2,
                           background=-1)
    return labels, int(labels.max())


# --------------------------------------------------------------------------
# literal grids

NONZERO_GRID = np.array([[1, 0, 0, 1, 1, 0],
                         [0, 1, 0, 0, 1, 0],
                         [0, 0, 0, 0, 0, 1],
                         [1, 1, 0, 1, 0, 1]])

EQUAL_GRID = np.array([[1, 1, 2, 2, 3, 3],
                       [1, 2, 2, 3, 3, 1],
                       [4, 4, 2, 3, 1, 1],
                       [4, 2, 4, 3, 1, 5]])

LITERAL_CASES = [
    # (grid, mode, connectivity, expected labels, expected count)
    (NONZERO_GRID, "nonzero", 4,
     [[1, 0, 0, 2, 2, 0],
      [0, 3, 0, 0, 2, 0],
      [0, 0, 0, 0, 0, 4],
      [5, 5, 0, 6, 0, 4]], 6),
    # the diagonals (0,0)-(1,1) and (1,4)-(2,5) join components
    (NONZERO_GRID, "nonzero", 8,
     [[1, 0, 0, 2, 2, 0],
      [0, 1, 0, 0, 2, 0],
      [0, 0, 0, 0, 0, 2],
      [3, 3, 0, 4, 0, 2]], 4),
    (EQUAL_GRID, "equal", 4,
     [[1, 1, 2, 2, 3, 3],
      [1, 2, 2, 3, 3, 4],
      [5, 5, 2, 3, 4, 4],
      [5, 6, 7, 3, 4, 8]], 8),
    # the crossing diagonals (2,2)-(3,1) (value 2) and (2,1)-(3,2) (value 4)
    # both link, each within its own value
    (EQUAL_GRID, "equal", 8,
     [[1, 1, 2, 2, 3, 3],
      [1, 2, 2, 3, 3, 4],
      [5, 5, 2, 3, 4, 4],
      [5, 2, 5, 3, 4, 6]], 6),
    # nonzero mode on the equal grid: all cells non-zero, one component
    (EQUAL_GRID, "nonzero", 4, np.ones((4, 6), dtype=int), 1),
]


@pytest.mark.parametrize("grid, mode, connectivity, expected, count",
                         LITERAL_CASES)
def test_literal_grids(grid, mode, connectivity, expected, count):
    labels, found = cpu_components(grid, connectivity=connectivity, mode=mode)
    np.testing.assert_array_equal(labels, np.array(expected))
    assert found == count
    assert labels.dtype == np.int32


def test_u_shape_takes_the_label_of_its_first_cell():
    # two arms start separately (provisional labels 1 and 2) and meet at
    # the bottom; a third component starts between them in scan order
    grid = np.array([[1, 0, 1, 0, 0],
                     [1, 0, 1, 0, 1],
                     [1, 1, 1, 0, 0]])
    labels, count = cpu_components(grid, mode="nonzero")
    np.testing.assert_array_equal(labels, [[1, 0, 1, 0, 0],
                                           [1, 0, 1, 0, 2],
                                           [1, 1, 1, 0, 0]])
    assert count == 2


def test_staircase_first_arm_is_not_the_leftmost():
    # arms start on successive rows from right to left and join only in the
    # last row; the component's first cell is the top of the middle arm
    grid = np.array([[1, 0, 0, 0, 1, 0, 1],
                     [0, 0, 1, 0, 1, 0, 1],
                     [1, 0, 1, 0, 1, 0, 1],
                     [1, 1, 1, 1, 1, 1, 1]])
    for connectivity in (4, 8):
        labels, count = cpu_components(grid, mode="nonzero",
                                       connectivity=connectivity)
        np.testing.assert_array_equal(labels, [[1, 0, 0, 0, 2, 0, 2],
                                               [0, 0, 2, 0, 2, 0, 2],
                                               [2, 0, 2, 0, 2, 0, 2],
                                               [2, 2, 2, 2, 2, 2, 2]])
        assert count == 2


def test_explicit_nodata_splits_components():
    grid = np.array([[5, 5, -9999, 5],
                     [5, -9999, 5, 5],
                     [-9999, 5, 5, -9999]], dtype=np.int16)
    labels, count = cpu_components(grid, connectivity=4, nodata=-9999)
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [1, 0, 2, 2],
                                           [0, 2, 2, 0]])
    assert count == 2
    # diagonals bridge the nodata cells
    labels, count = cpu_components(grid, connectivity=8, nodata=-9999)
    np.testing.assert_array_equal(labels, [[1, 1, 0, 1],
                                           [1, 0, 1, 1],
                                           [0, 1, 1, 0]])
    assert count == 1


def test_nodata_is_background_in_nonzero_mode():
    grid = np.array([[1, 7, 1, 1],
                     [0, 7, 0, 1]])
    labels, count = cpu_components(grid, mode="nonzero", nodata=7)
    np.testing.assert_array_equal(labels, [[1, 0, 2, 2],
                                           [0, 0, 0, 2]])
    assert count == 2


def test_nan_cells_are_not_vertices():
    grid = np.array([[1.5, np.nan, 1.5],
                     [np.nan, 1.5, np.nan]])
    labels, count = cpu_components(grid, connectivity=4)
    np.testing.assert_array_equal(labels, [[1, 0, 2], [0, 3, 0]])
    assert count == 3
    labels, count = cpu_components(grid, connectivity=8)
    np.testing.assert_array_equal(labels, [[1, 0, 1], [0, 1, 0]])
    assert count == 1
    labels, count = cpu_components(grid, connectivity=8, mode="nonzero")
    np.testing.assert_array_equal(labels, [[1, 0, 1], [0, 1, 0]])
    assert count == 1


@pytest.mark.parametrize("mode", ["equal", "nonzero"])
@pytest.mark.parametrize("connectivity", [4, 8])
def test_all_nodata_raster(mode, connectivity):
    for grid, nodata in ((np.full((3, 4), -1, dtype=np.int32), -1),
                         (np.full((3, 4), np.nan), None)):
        labels, count = cpu_components(grid, mode=mode, nodata=nodata,
                                       connectivity=connectivity)
        assert count == 0
        np.testing.assert_array_equal(labels, np.zeros((3, 4)))
        assert labels.dtype == np.int32


def test_all_zero_raster_in_nonzero_mode_and_one_clump_in_equal_mode():
    grid = np.zeros((5, 3), dtype=np.uint8)
    labels, count = cpu_components(grid, mode="nonzero")
    assert count == 0 and not labels.any()
    labels, count = cpu_components(grid, mode="equal")
    assert count == 1 and (labels == 1).all()


def test_single_cell():
    assert cpu_components(np.array([[3]]))[1] == 1
    np.testing.assert_array_equal(cpu_components(np.array([[3]]))[0], [[1]])
    labels, count = cpu_components(np.array([[0]]), mode="nonzero")
    assert count == 0 and labels.tolist() == [[0]]
    labels, count = cpu_components(np.array([[np.nan]]))
    assert count == 0 and labels.tolist() == [[0]]


def test_empty_raster():
    labels, count = cpu_components(np.zeros((0, 5)))
    assert count == 0 and labels.shape == (0, 5)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_one_row_and_one_column_strips(connectivity):
    row = np.array([[1, 1, 0, 2, 2, 2, 0, 0, 1]])
    equal = [[1, 1, 2, 3, 3, 3, 4, 4, 5]]
    nonzero = [[1, 1, 0, 2, 2, 2, 0, 0, 3]]
    for grid, transform in ((row, np.asarray), (row.T, np.transpose)):
        labels, count = cpu_components(grid, connectivity=connectivity)
        np.testing.assert_array_equal(labels, transform(np.array(equal)))
        assert count == 5
        labels, count = cpu_components(grid, connectivity=connectivity,
                                       mode="nonzero")
        np.testing.assert_array_equal(labels, transform(np.array(nonzero)))
        assert count == 3


def test_odd_non_square_grid():
    grid = np.array([[2, 2, 9, 9, 9],
                     [9, 2, 9, 2, 2],
                     [9, 9, 2, 2, 9]])
    labels, count = cpu_components(grid, connectivity=4)
    np.testing.assert_array_equal(labels, [[1, 1, 2, 2, 2],
                                           [3, 1, 2, 4, 4],
                                           [3, 3, 4, 4, 5]])
    assert count == 5
    # 8: (1,1)-(2,2) joins the 2s, (1,2)-(2,1) joins the 9s, and the 9 at
    # (2,4) touches only 2s
    labels, count = cpu_components(grid, connectivity=8)
    np.testing.assert_array_equal(labels, [[1, 1, 2, 2, 2],
                                           [2, 1, 2, 1, 1],
                                           [2, 2, 1, 1, 3]])
    assert count == 3


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.float64, np.uint32,
                                   np.int64, np.float32, np.uint16, np.int8])
@pytest.mark.parametrize("mode, connectivity, expected, count",
                         [(case[1], case[2], case[3], case[4])
                          for case in LITERAL_CASES[:4]])
def test_input_dtypes(dtype, mode, connectivity, expected, count):
    grid = NONZERO_GRID if mode == "nonzero" else EQUAL_GRID
    labels, found = cpu_components(grid.astype(dtype), mode=mode,
                                   connectivity=connectivity)
    np.testing.assert_array_equal(labels, np.array(expected))
    assert found == count


def test_values_that_differ_only_far_from_zero_are_distinct():
    big = np.array([[4_000_000_000, 4_000_000_001, 4_000_000_001]],
                   dtype=np.uint32)
    np.testing.assert_array_equal(cpu_components(big)[0], [[1, 2, 2]])
    close = np.array([[1.0, 1.0 + 1e-12, 1.0]])
    np.testing.assert_array_equal(cpu_components(close)[0], [[1, 2, 3]])
    signed = np.array([[-32768, -32768, 32767]], dtype=np.int16)
    np.testing.assert_array_equal(cpu_components(signed)[0], [[1, 1, 2]])
    # -0.0 == 0.0: one value for equal mode, background for nonzero mode
    zeros = np.array([[0.0, -0.0, 1.0]])
    np.testing.assert_array_equal(cpu_components(zeros)[0], [[1, 1, 2]])
    np.testing.assert_array_equal(
        cpu_components(zeros, mode="nonzero")[0], [[0, 0, 1]])


# --------------------------------------------------------------------------
# oracles on random rasters

@st.composite
def small_rasters(draw, max_side=14):
    """(values, nodata, valid) with few distinct values so components form."""
    shape = draw(st.tuples(st.integers(1, max_side), st.integers(1, max_side)))
    kind = draw(st.sampled_from(["int16", "uint8", "float64", "uint32"]))
    if kind == "float64":
        elements = st.sampled_from([0.0, -0.0, 1.5, 2.0, np.inf, -np.inf,
                                    np.nan])
        nodata = draw(st.sampled_from([None, 2.0]))
    else:
        top = draw(st.integers(1, 4))
        # negative values are foreground in nonzero mode
        elements = st.integers(-2 if kind == "int16" else 0, top)
        nodata = draw(st.sampled_from([None, top]))
    values = draw(hnp.arrays(np.dtype(kind), shape, elements=elements))
    return values, nodata, valid_mask(values, nodata)


@ORACLE_SETTINGS
@given(small_rasters(), st.sampled_from([4, 8]))
def test_nonzero_mode_equals_scipy(raster, connectivity):
    values, nodata, valid = raster
    labels, count = cpu_components(values, mode="nonzero", nodata=nodata,
                                   connectivity=connectivity)
    expected, expected_count = ndi.label(valid & (values != 0),
                                         structure(connectivity))
    assert labels.dtype == expected.dtype == np.int32
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count


@ORACLE_SETTINGS
@given(small_rasters(), st.sampled_from([4, 8]))
def test_equal_mode_equals_two_oracles(raster, connectivity):
    values, nodata, valid = raster
    labels, count = cpu_components(values, mode="equal", nodata=nodata,
                                   connectivity=connectivity)
    expected, expected_count = equal_mode_oracle(values, valid, connectivity)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count
    expected, expected_count = skimage_equal_mode(values, valid, connectivity)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count


@ORACLE_SETTINGS
@given(small_rasters(max_side=20), st.sampled_from([4, 8]),
       st.sampled_from(["equal", "nonzero"]), st.integers(2, 20))
def test_strips_give_the_same_labels(raster, connectivity, mode, strips):
    # the concurrent path: labels per strip, then merged across the seams
    values, _, valid = raster
    single = _cpu.label(values, valid, connectivity, mode, Progress(),
                        strips=1)
    split = _cpu.label(values, valid, connectivity, mode, Progress(),
                       strips=strips)
    np.testing.assert_array_equal(split[0], single[0])
    assert split[1] == single[1]


@pytest.mark.parametrize("connectivity", [4, 8])
def test_automatic_strips_on_a_large_raster(connectivity):
    # big enough for the automatic concurrent path (one strip per CPU)
    shape = (1100, 1000)
    assert _cpu._strip_count(*shape) == min(_cpu._cpu_count(), 1100 // 64)
    rng = np.random.default_rng(7)
    mask = rng.random(shape) < 0.6
    labels, count = cpu_components(mask.astype(np.uint8), mode="nonzero",
                                   connectivity=connectivity)
    expected, expected_count = ndi.label(mask, structure(connectivity))
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count
    classes = np.floor(fractal_surface(shape, seed=3) / 100)
    labels, count = cpu_components(classes, connectivity=connectivity)
    expected, expected_count = skimage_equal_mode(
        classes, np.ones(classes.shape, dtype=bool), connectivity)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count


# --------------------------------------------------------------------------
# adversarial rasters

@pytest.mark.parametrize("connectivity", [4, 8])
def test_spiral_is_one_component(connectivity):
    mask = spiral_mask(61)
    labels, count = cpu_components(mask, mode="nonzero",
                                   connectivity=connectivity)
    assert count == 1
    np.testing.assert_array_equal(labels, mask.astype(np.int32))
    # equal mode: the arm and the gap between its turns
    labels, count = cpu_components(mask.astype(np.int8),
                                   connectivity=connectivity)
    expected, expected_count = equal_mode_oracle(
        mask, np.ones(mask.shape, dtype=bool), connectivity)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count
    # strips cut the spiral many times
    split, split_count = _cpu.label(mask, np.ones(mask.shape, dtype=bool),
                                    connectivity, "nonzero", Progress(),
                                    strips=9)
    assert split_count == 1
    np.testing.assert_array_equal(split, mask.astype(np.int32))


def test_checkerboards():
    rows, cols = 9, 12
    board = (np.indices((rows, cols)).sum(axis=0) % 2 == 0).astype(np.uint8)
    labels, count = cpu_components(board, mode="nonzero", connectivity=8)
    assert count == 1
    np.testing.assert_array_equal(labels, board)
    labels, count = cpu_components(board, mode="nonzero", connectivity=4)
    assert count == board.sum()
    np.testing.assert_array_equal(
        labels[board == 1], np.arange(1, board.sum() + 1))
    # equal mode: the two colours cross on every diagonal
    labels, count = cpu_components(board, mode="equal", connectivity=8)
    assert count == 2
    np.testing.assert_array_equal(labels, np.where(board == 1, 1, 2))
    labels, count = cpu_components(board, mode="equal", connectivity=4)
    assert count == rows * cols
    np.testing.assert_array_equal(labels.ravel(),
                                  np.arange(1, rows * cols + 1))


def test_all_distinct_values_give_one_component_per_cell():
    grid = np.arange(35, dtype=np.float32).reshape(5, 7)[::-1]
    for connectivity in (4, 8):
        labels, count = cpu_components(grid, connectivity=connectivity)
        assert count == 35
        np.testing.assert_array_equal(labels.ravel(), np.arange(1, 36))


@pytest.mark.parametrize("connectivity", [4, 8])
def test_plateaus_of_a_quantized_surface(connectivity):
    surface = fractal_surface((97, 131), seed=5)
    classes = np.floor(surface / 50)
    classes[surface > 900] = np.nan
    valid = ~np.isnan(classes)
    labels, count = cpu_components(classes, connectivity=connectivity)
    expected, expected_count = equal_mode_oracle(classes, valid, connectivity)
    np.testing.assert_array_equal(labels, expected)
    assert count == expected_count
    plateau = np.full((40, 33), 7, dtype=np.int16)
    labels, count = cpu_components(plateau, connectivity=connectivity)
    assert count == 1 and (labels == 1).all()


def test_comb_teeth_join_in_the_last_row():
    comb = np.zeros((30, 41), dtype=np.uint8)
    comb[:, ::2] = 1
    comb[-1] = 1
    for connectivity in (4, 8):
        labels, count = cpu_components(comb, mode="nonzero",
                                       connectivity=connectivity)
        assert count == 1
        np.testing.assert_array_equal(labels, comb)


# --------------------------------------------------------------------------
# sources and layouts

def test_geotiff_path_honours_the_band_nodata(tmp_path):
    from gridgraph.core import io
    grid = np.array([[5, 5, -9999, 5],
                     [5, -9999, 5, 5],
                     [-9999, 5, 5, -9999]], dtype=np.int16)
    path = io.write_raster(str(tmp_path / "clumps.tif"), grid,
                           (0.0, 1.0, 0.0, 3.0, 0.0, -1.0), "", nodata=-9999)
    labels, count = cpu_components(path, connectivity=4)
    np.testing.assert_array_equal(labels, [[1, 1, 0, 2],
                                           [1, 0, 2, 2],
                                           [0, 2, 2, 0]])
    assert count == 2
    labels, count = cpu_components(path, connectivity=8, mode="nonzero")
    np.testing.assert_array_equal(labels, [[1, 1, 0, 1],
                                           [1, 0, 1, 1],
                                           [0, 1, 1, 0]])
    assert count == 1


def test_memmap_input(tmp_path):
    values = np.lib.format.open_memmap(str(tmp_path / "grid.npy"), mode="w+",
                                       dtype=np.int16, shape=EQUAL_GRID.shape)
    values[:] = EQUAL_GRID
    values.flush()
    readonly = np.load(str(tmp_path / "grid.npy"), mmap_mode="r")
    labels, count = cpu_components(readonly, connectivity=8)
    np.testing.assert_array_equal(labels, LITERAL_CASES[3][3])
    assert count == 6


def test_strided_and_big_endian_inputs():
    wide = np.repeat(EQUAL_GRID, 2, axis=1)[:, ::2]  # a non-contiguous view
    assert not wide.flags.c_contiguous
    np.testing.assert_array_equal(cpu_components(wide)[0],
                                  LITERAL_CASES[2][3])
    swapped = EQUAL_GRID.astype(">i4")
    np.testing.assert_array_equal(cpu_components(swapped)[0],
                                  LITERAL_CASES[2][3])
    fortran = np.asfortranarray(EQUAL_GRID.astype(np.float64))
    np.testing.assert_array_equal(cpu_components(fortran, connectivity=8)[0],
                                  LITERAL_CASES[3][3])
    half = EQUAL_GRID.astype(np.float16)
    np.testing.assert_array_equal(cpu_components(half)[0],
                                  LITERAL_CASES[2][3])
    boolean = NONZERO_GRID.astype(bool)
    np.testing.assert_array_equal(cpu_components(boolean, mode="nonzero")[0],
                                  LITERAL_CASES[0][3])


@pytest.mark.parametrize("mode", ["equal", "nonzero"])
@pytest.mark.parametrize("tile_size", [None, 16])
def test_bool_bytes_other_than_one_are_true(mode, tile_size):
    # numpy reads any non-zero byte of a bool array as True; a bool view
    # of other bytes labels as its 0/1 copy does (equal mode would split
    # a region of True cells by their bytes), in memory and by tiles
    rng = np.random.default_rng(3)
    raw = (rng.random((40, 37)) < 0.55) * rng.integers(1, 256, (40, 37))
    raw = raw.astype(np.uint8)
    assert raw.max() > 1
    viewed = raw.view(bool)
    canonical = raw != 0
    before = raw.copy()
    for connectivity in (4, 8):
        expected = cpu_components(canonical, mode=mode,
                                  connectivity=connectivity)
        got = cpu_components(viewed, mode=mode, connectivity=connectivity,
                             tile_size=tile_size)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]
        np.testing.assert_array_equal(raw, before)  # input untouched
    if mode == "equal":
        # what the canonical copy guards against: by bytes, more clumps
        by_bytes = cpu_components(raw, mode="equal")[1]
        assert by_bytes > cpu_components(canonical, mode="equal")[1]


@pytest.mark.parametrize("mode", ["equal", "nonzero"])
def test_input_not_modified(mode):
    grid = np.array([[1.0, np.nan, 0.0, 2.0],
                     [1.0, 1.0, 0.0, 0.0]])
    before = grid.copy()
    valid = valid_mask(grid, None)
    valid_before = valid.copy()
    _cpu.label(grid, valid, 4, mode, Progress(), strips=2)
    np.testing.assert_array_equal(grid, before)
    np.testing.assert_array_equal(valid, valid_before)
    cpu_components(grid, mode=mode, nodata=2.0)
    np.testing.assert_array_equal(grid, before)


# --------------------------------------------------------------------------
# arguments, progress, cancellation

@pytest.mark.parametrize("connectivity", [6, 16, 0, "8", 4.5, None])
def test_bad_connectivity_is_named(connectivity):
    named = re.escape(repr(connectivity))
    with pytest.raises(InvalidInputError,
                       match=f"connectivity .*got {named}$"):
        cpu_components(EQUAL_GRID, connectivity=connectivity)


@pytest.mark.parametrize("mode", ["clump", "Equal", "", None])
def test_bad_mode_is_named(mode):
    with pytest.raises(InvalidInputError,
                       match=f"mode .*got {re.escape(repr(mode))}$"):
        cpu_components(EQUAL_GRID, mode=mode)


# the calls that skip the general checks and the plan (a plain array, the
# default options, the CPU), and calls one argument away from them
PLAIN_VARIANTS = {
    "plain": (True, {}),
    "equal mode": (True, {"mode": "equal"}),
    "float values": (True, {"dtype": np.float32}),
    "auto backend": (True, {"backend": "auto"}),
    "nodata": (False, {"nodata": 7}),
    "progress": (False, {"progress": lambda fraction: None}),
    "memory limit": (False, {"memory_limit_mb": 4096}),
    "tile size 0": (False, {"tile_size": 0}),
    "numpy connectivity": (False, {"connectivity": np.int64(8)}),
    "bool values": (False, {"dtype": np.bool_}),
    "memmap": (False, {"memmap": True}),
}


@pytest.mark.parametrize("variant", PLAIN_VARIANTS)
def test_plain_calls_skip_the_plan_with_the_same_labels(monkeypatch, tmp_path,
                                                        variant):
    from gridgraph.core._common import cuda_available
    from gridgraph.core.components import tiled
    plain, keywords = PLAIN_VARIANTS[variant]
    keywords = dict(keywords)
    if variant == "auto backend" and cuda_available():
        plain = False  # auto is the GPU here
    mask = (fractal_surface((150, 170), seed=4) > 500)
    values = mask.astype(keywords.pop("dtype", np.uint8))
    if values.dtype != np.bool_:
        values[3, 5] = 7  # a third value for equal mode
    if keywords.pop("memmap", False):
        np.save(tmp_path / "values.npy", values)
        values = np.load(tmp_path / "values.npy", mmap_mode="r")
    keywords.setdefault("connectivity", 8)
    keywords.setdefault("mode", "nonzero")
    keywords.setdefault("backend", "cpu")
    # the general path's labels: with a progress callable, the plan runs
    expected = connected_components(
        np.array(values), progress=lambda fraction: None,
        **{name: value for name, value in keywords.items()
           if name != "progress"})
    planned = []
    real_plan = tiled.plan
    monkeypatch.setattr(tiled, "plan", lambda *arguments: planned.append(1)
                        or real_plan(*arguments))
    result = connected_components(values, **keywords)
    assert bool(planned) != plain
    np.testing.assert_array_equal(result.labels, expected.labels)
    assert result.count == expected.count and result.count > 1
    assert result.labels.dtype == np.int32


def test_progress_is_monotone_and_reaches_one():
    fractions = []
    cpu_components(np.arange(12).reshape(3, 4), progress=fractions.append)
    assert fractions, "progress was never reported"
    assert fractions[-1] == 1.0
    assert fractions == sorted(fractions)
    assert all(0.0 <= fraction <= 1.0 for fraction in fractions)


def test_progress_returning_false_cancels():
    with pytest.raises(CancelledError):
        cpu_components(EQUAL_GRID, progress=lambda fraction: False)


@pytest.mark.parametrize("strips", [1, 3])
def test_cancel_is_honoured_at_the_next_block(monkeypatch, strips):
    # blocks of two rows: the kernel reports between blocks of every pass.
    # One thread runs every strip: progress is reported on the calling
    # thread between its own calls, and strips go to threads as they come
    # free, so on two threads how many calls are the caller's depends on
    # timing (CI: 14 reports once); the shares are tested in
    # test_components_cells.py.
    # the kernel calls of _cpu.label (a team reports before and after)
    monkeypatch.setattr(_cpu_team, "TEAM_MAX_CELLS", 0)
    monkeypatch.setattr(_cpu, "_CELLS_PER_CALL", 2 * 50)
    monkeypatch.setattr(_cpu, "_cpu_count", lambda: 1)
    grid = np.ones((40, 50), dtype=np.uint8)
    fractions = []
    _cpu.label(grid, np.ones(grid.shape, dtype=bool), 4, "equal",
               Progress(fractions.append), strips=strips)
    assert len(fractions) >= 15
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    calls = []

    def cancel_on_fifth(fraction):
        calls.append(fraction)
        return len(calls) < 5

    with pytest.raises(CancelledError):
        _cpu.label(grid, np.ones(grid.shape, dtype=bool), 4, "equal",
                   Progress(cancel_on_fifth), strips=strips)
    assert len(calls) == 5
    assert calls[-1] < 1.0


@pytest.mark.parametrize("mode", ["equal", "nonzero"])
def test_int64_labels_past_two_to_the_31_cells(monkeypatch, mode):
    # A raster of 2**31 cells does not fit this test machine; pretend this
    # one needs 64-bit labels to run the int64 kernels, and check that they
    # give the int32 answer.
    classes = np.floor(fractal_surface((45, 38), seed=11) / 120)
    valid = np.ones(classes.shape, dtype=bool)
    narrow, narrow_count = _cpu.label(classes, valid, 8, mode, Progress(),
                                      strips=3)
    monkeypatch.setattr(_cpu, "index_dtype", lambda cells: np.int64)
    wide, wide_count = _cpu.label(classes, valid, 8, mode, Progress(),
                                  strips=3)
    assert narrow.dtype == np.int32 and wide.dtype == np.int64
    np.testing.assert_array_equal(wide, narrow)
    assert wide_count == narrow_count


@pytest.mark.parametrize("layout", ["strided columns", "fortran order",
                                    "reversed rows", "empty", "one row",
                                    "all nan", "float16", "big endian",
                                    "read-only"])
def test_plain_calls_of_any_array_layout_match_the_general_path(layout):
    """The plain call's path (``_plain_in_memory_call``) takes any 2-D
    array of integers or floats as it comes, where the general path loads
    it first: strided and Fortran-ordered views, reversed rows, empty and
    one-row arrays, an all-NaN raster (no component), float16, big-endian
    and read-only buffers give the labels and count of a call that takes
    the general path (a progress callable), and scipy's (an oracle that
    shares no code with either path)."""
    base = (np.random.default_rng(1).random((60, 90)) < 0.6).astype(
        np.uint8)
    values = {
        "strided columns": base[:, ::2], "fortran order":
        np.asfortranarray(base), "reversed rows": base[::-1],
        "empty": np.zeros((0, 5), np.uint8), "one row": base[:1],
        "all nan": np.full((4, 4), np.nan), "float16":
        base.astype(np.float16), "big endian": base.astype(">i4"),
        "read-only": np.frombuffer(base.tobytes(), np.uint8).reshape(
            base.shape)}[layout]
    for mode in ("equal", "nonzero"):
        plain = connected_components(values, 8, mode, backend="cpu")
        general = connected_components(values, 8, mode, backend="cpu",
                                       progress=lambda fraction: None)
        np.testing.assert_array_equal(plain.labels, general.labels)
        assert plain.count == general.count
        assert plain.count == (0 if layout in ("empty", "all nan") else
                               plain.labels.max())
        valid = ~np.isnan(values) if values.dtype.kind == "f" else \
            np.ones(values.shape, bool)
        expected, expected_count = (
            equal_mode_oracle(values, valid, 8) if mode == "equal" else
            ndi.label(valid & (values != 0), structure(8)))
        np.testing.assert_array_equal(plain.labels, expected)
        assert plain.count == expected_count
