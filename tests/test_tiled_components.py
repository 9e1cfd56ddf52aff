"""Tiled connected components: identical to the in-memory run for every
tile size (docs/architecture.md), checked on literal grids, scipy,
and adversarial rasters (spirals across many tiles, nodata, plateaus)."""

import concurrent.futures
import os

import numpy as np
import pytest
import scipy.ndimage as ndi
from hypothesis import given, settings
from hypothesis import strategies as st

from gridgraph.core import CancelledError, InvalidInputError, connected_components
from gridgraph.core import tile_tasks, tiling

from faults_helpers import small_disk  # noqa: F401 - a fixture
from rasters import fractal_surface, spiral_mask

TILE_SIZES = (8, 16, 64)
STRUCTURE = {4: ndi.generate_binary_structure(2, 1),
             8: ndi.generate_binary_structure(2, 2)}


def in_memory(values, **options):
    return connected_components(values, backend="cpu", **options)


def assert_tiled_in_out_dir_matches_in_memory(out_dir):
    """A 77 x 91 fractal raster labelled on the tiled path (tiles of 16,
    4-connected, ``equal``) into ``out_dir``: the in-memory labels."""
    values = (fractal_surface((77, 91), seed=4) // 60).astype(np.float32)
    expected = in_memory(values, connectivity=4, mode="equal")
    result = connected_components(values, connectivity=4, mode="equal",
                                  tile_size=16, out_dir=out_dir,
                                  backend="cpu")
    np.testing.assert_array_equal(result.labels, expected.labels)


def tiled(values, tile_size, **options):
    return connected_components(values, backend="cpu", tile_size=tile_size,
                                **options)


def assert_same(values, tile_sizes=TILE_SIZES, **options):
    expected = in_memory(values, **options)
    for tile_size in tile_sizes:
        result = tiled(values, tile_size, **options)
        assert result.count == expected.count, tile_size
        assert result.labels.dtype == expected.labels.dtype
        np.testing.assert_array_equal(result.labels, expected.labels,
                                      err_msg=f"tile_size={tile_size}")
    return expected


# A 10 x 10 grid cut by 8 x 8 tiles: component 1 starts at (0, 6) in the
# first tile, leaves it, runs down the right edge, back along the bottom row
# and up the left column into the first tile again as a second piece there.
SEAM_GRID = np.array([
    [0, 0, 0, 0, 0, 0, 1, 0, 0, 1],
    [0, 0, 1, 1, 1, 0, 1, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 1, 1, 1, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 1, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 1, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
])
SEAM_LABELS = np.array([
    [0, 0, 0, 0, 0, 0, 1, 0, 0, 1],
    [0, 0, 2, 2, 2, 0, 1, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 1, 1, 1, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 3, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 1, 1],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
])


@pytest.mark.parametrize("connectivity", [4, 8])
def test_literal_grid_across_seams(connectivity):
    result = tiled(SEAM_GRID, 8, mode="nonzero", connectivity=connectivity)
    assert result.count == 3
    np.testing.assert_array_equal(result.labels, SEAM_LABELS)


def test_literal_corner_link_needs_eight_connectivity():
    # cells (7, 7) and (8, 8) meet only at the corner of four 8 x 8 tiles
    grid = np.zeros((12, 12), dtype=np.int32)
    grid[7, 7] = grid[8, 8] = 5
    grid[7, 8] = grid[8, 7] = 0
    four = tiled(grid, 8, connectivity=4, mode="nonzero")
    eight = tiled(grid, 8, connectivity=8, mode="nonzero")
    assert four.count == 2 and eight.count == 1
    assert four.labels[7, 7] == 1 and four.labels[8, 8] == 2
    assert eight.labels[7, 7] == eight.labels[8, 8] == 1
    # the other diagonal of the same corner
    grid = np.zeros((12, 12), dtype=np.int32)
    grid[7, 8] = grid[8, 7] = 5
    eight = tiled(grid, 8, connectivity=8, mode="equal")
    assert eight.count == 2  # background zeros are one component (equal mode)
    assert eight.labels[7, 8] == eight.labels[8, 7] == 2


def test_equal_mode_literal():
    grid = np.array([[1, 1, 2, 2, 2, 2, 2, 2, 2, 3],
                     [1, 2, 2, 1, 1, 1, 1, 1, 1, 3]] * 5)
    result = tiled(grid, 8, connectivity=4, mode="equal")
    expected = in_memory(grid, connectivity=4, mode="equal")
    np.testing.assert_array_equal(result.labels, expected.labels)
    # the 2s zig-zag down every row pair, so they form one component
    assert len(np.unique(result.labels[grid == 2])) == 1
    assert result.labels[0, 0] == 1 and result.labels[0, 2] == 2


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 8]), st.sampled_from(["equal", "nonzero"]),
       st.sampled_from([8, 16]), st.floats(0, 0.5))
def test_random_rasters_match_in_memory_and_scipy(rows, cols, seed,
                                                  connectivity, mode,
                                                  tile_size, nodata_share):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, (rows, cols)).astype(np.float32)
    values[rng.random((rows, cols)) < nodata_share] = np.nan
    expected = in_memory(values, connectivity=connectivity, mode=mode)
    result = tiled(values, tile_size, connectivity=connectivity, mode=mode)
    assert result.count == expected.count
    np.testing.assert_array_equal(result.labels, expected.labels)
    if mode == "nonzero":
        foreground = (values != 0) & ~np.isnan(values)
        scipy_labels, scipy_count = ndi.label(foreground,
                                              STRUCTURE[connectivity])
        assert result.count == scipy_count
        np.testing.assert_array_equal(result.labels, scipy_labels)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_spiral_crossing_many_tiles(connectivity):
    mask = spiral_mask(150)
    expected = assert_same(mask, connectivity=connectivity, mode="nonzero")
    assert expected.count == 1
    # the gaps between the arm's turns are background: in equal mode they
    # form a second spiral, interleaved with the first
    assert_same(mask.astype(np.int16), connectivity=connectivity, mode="equal")


@pytest.mark.parametrize("shape", [(67, 45), (8, 200), (129, 7), (1, 1)])
def test_sizes_not_multiples_of_the_tile(shape):
    values = (fractal_surface(shape, seed=5) // 100).astype(np.int32)
    for connectivity in (4, 8):
        assert_same(values, connectivity=connectivity, mode="equal")


def test_nodata_heavy_raster():
    rng = np.random.default_rng(7)
    values = rng.integers(1, 3, (90, 77)).astype(np.int16)
    values[rng.random(values.shape) < 0.7] = -9999
    for mode in ("equal", "nonzero"):
        expected = assert_same(values, connectivity=8, mode=mode,
                               nodata=-9999)
        assert (expected.labels[values == -9999] == 0).all()


def test_plateau_and_empty_rasters():
    plateau = np.full((70, 70), 3.5)
    expected = assert_same(plateau, connectivity=4, mode="equal")
    assert expected.count == 1 and (expected.labels == 1).all()
    nothing = np.full((20, 20), np.nan)
    expected = assert_same(nothing, connectivity=8, mode="equal")
    assert expected.count == 0


def test_checkerboard_many_components_per_tile():
    board = np.indices((64, 48)).sum(axis=0) % 2
    expected = assert_same(board, connectivity=4, mode="equal")
    assert expected.count == board.size


def test_out_dir_memmap_source_and_executor(tmp_path):
    values = (fractal_surface((100, 90), seed=2) // 80).astype(np.float32)
    path = tmp_path / "values.npy"
    np.save(path, values)
    memmap = np.load(path, mmap_mode="r")
    expected = in_memory(values, connectivity=8)
    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, connectivity=8, tile_size=16,
                                  out_dir=out, backend="cpu")
    assert isinstance(result.labels, np.memmap)
    assert result.labels.filename == str(out / "labels.npy")
    np.testing.assert_array_equal(result.labels, expected.labels)
    np.testing.assert_array_equal(np.load(out / "labels.npy"), expected.labels)
    # a window of a memmap (rows and a column range) is read from its file
    window = memmap[10:70, 5:80]
    np.testing.assert_array_equal(
        tiled(window, 8, connectivity=8).labels,
        in_memory(np.array(window), connectivity=8).labels)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = connected_components(values, connectivity=8, tile_size=16,
                                        executor=pool, backend="cpu")
    np.testing.assert_array_equal(threaded.labels, expected.labels)


def test_geotiff_source(tmp_path):
    from gridgraph.core import io
    values = (fractal_surface((70, 50), seed=9) // 100).astype(np.int16)
    values[:5, :5] = -1
    path = str(tmp_path / "values.tif")
    io.write_raster(path, values, (0, 1, 0, 0, 0, -1), "", nodata=-1)
    result = connected_components(path, tile_size=16, backend="cpu")
    expected = in_memory(values, nodata=-1)
    np.testing.assert_array_equal(result.labels, expected.labels)


def test_memory_limit_routes_to_tiles(tmp_path):
    values = (fractal_surface((256, 256), seed=4) // 100).astype(np.int32)
    expected = in_memory(values)
    # 256^2 cells need ~1.5 MB in memory: a 1 MB limit forces tiles, which
    # the out_dir memmap (ignored on the in-memory path) gives away
    result = connected_components(values, memory_limit_mb=1, out_dir=tmp_path,
                                  backend="cpu")
    assert isinstance(result.labels, np.memmap)
    np.testing.assert_array_equal(result.labels, expected.labels)
    roomy = connected_components(values, memory_limit_mb=1000,
                                 out_dir=tmp_path, backend="cpu")
    assert not isinstance(roomy.labels, np.memmap)


def test_outputs_too_large_without_out_dir():
    values = np.zeros((512, 512), dtype=np.uint8)
    with pytest.raises(InvalidInputError, match="out_dir"):
        connected_components(values, memory_limit_mb=0.5, backend="cpu")


@pytest.mark.parametrize("bad", [4, 12, 100, -8, 2.5, "16"])
def test_bad_tile_size(bad):
    with pytest.raises(InvalidInputError, match="tile_size"):
        connected_components(np.zeros((4, 4)), tile_size=bad)


def test_bad_out_dir(tmp_path):
    with pytest.raises(InvalidInputError, match="not a folder"):
        connected_components(np.zeros((20, 20)), tile_size=8,
                             out_dir=tmp_path / "missing")


def test_progress_and_cancel():
    values = (fractal_surface((64, 64), seed=1) // 100).astype(np.int32)
    seen = []
    connected_components(values, tile_size=16, progress=seen.append,
                         backend="cpu")
    assert seen[-1] == 1.0
    assert all(a <= b for a, b in zip(seen, seen[1:]))
    assert len(seen) >= 32  # two rounds over 16 tiles

    calls = []

    def cancel_in_second_round(fraction):
        calls.append(fraction)
        return fraction < 0.6

    with pytest.raises(CancelledError):
        connected_components(values, tile_size=16,
                             progress=cancel_in_second_round, backend="cpu")


def test_morton_order_and_grid():
    grid = tiling.TileGrid((20, 33), 8)
    assert (grid.tile_rows, grid.tile_cols) == (3, 5)
    assert grid.window(2, 4) == tiling.Window(16, 32, 4, 1)
    order = grid.morton_order()
    assert order[:8] == [(0, 0), (0, 1), (1, 0), (1, 1),
                         (0, 2), (0, 3), (1, 2), (1, 3)]
    assert sorted(order) == [(r, c) for r in range(3) for c in range(5)]


@pytest.mark.parametrize("total,threads", [(234, 8), (234, 1), (50, 2),
                                           (7, 8), (1000, 16), (64, 2)])
def test_batch_sizes_in_even_waves(total, threads):
    """tile_tasks.batch_sizes: BATCHES_PER_THREAD batches a thread (fewer
    when there are fewer tiles, at least one tile each), of two sizes one
    apart, the larger first, every tile once; with EVEN_BATCH_WAVES off,
    batches of one size and the last smaller."""
    sizes = tiling.batch_sizes(total, threads)
    assert sum(sizes) == total and min(sizes) >= 1
    assert len(sizes) == min(total, tile_tasks.BATCHES_PER_THREAD * threads)
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] - sizes[-1] <= 1
    if (total, threads) == (234, 8):  # neuse40 at 8 workers: 4 waves
        assert sizes == [8] * 10 + [7] * 22
    assert tiling.batch_sizes(0, threads) == []


@pytest.mark.parametrize("total,threads", [(234, 8), (50, 2), (7, 8)])
def test_batch_sizes_of_one_size_when_not_even(monkeypatch, total, threads):
    monkeypatch.setattr(tile_tasks, "EVEN_BATCH_WAVES", False)
    sizes = tiling.batch_sizes(total, threads)
    largest = max(1, total // (tile_tasks.BATCHES_PER_THREAD * threads))
    assert sum(sizes) == total and min(sizes) >= 1
    assert sizes[:-1] == [largest] * (len(sizes) - 1)
    assert 1 <= sizes[-1] <= largest
    assert tiling.batch_sizes(0, threads) == []


def test_tiled_labels_to_geotiff_by_strips(tmp_path):
    from osgeo import gdal
    values = (fractal_surface((300, 200), seed=3) // 100).astype(np.int32)
    result = connected_components(values, tile_size=64, out_dir=tmp_path,
                                  backend="cpu")
    path = str(tmp_path / "labels.tif")
    tiling.write_geotiff(result.labels, path, (0, 10, 0, 0, 0, -10), "",
                         nodata=0, strip_rows=37)
    dataset = gdal.Open(path)
    np.testing.assert_array_equal(dataset.ReadAsArray(), result.labels)
    assert dataset.GetGeoTransform() == (0, 10, 0, 0, 0, -10)
    assert dataset.GetRasterBand(1).GetNoDataValue() == 0
    assert dataset.GetRasterBand(1).GetBlockSize() == [256, 256]


def test_automatic_tiles_leave_every_worker_several():
    # a budget that allows one 2048 tile: with 4 workers the tiles are
    # halved until each worker has MIN_TILES_PER_WORKER, down to 256
    import concurrent.futures

    from gridgraph.core import tiling
    shape = (2048, 2048)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        alone = tiling.plan(shape, None, 1024, 1000, 1, pool)
    assert alone.tile_size == 2048
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        grid = tiling.plan(shape, None, 1024, 1000, 1, pool)
    assert grid.count >= tiling.MIN_TILES_PER_WORKER * 4
    assert grid.tile_size == 512
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        floor = tiling.plan(shape, None, 1024, 1000, 1, pool)
    assert floor.tile_size == tiling.MIN_WORKER_TILE_SIZE
    # a given tile size is kept
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert tiling.plan(shape, 2048, 1024, 1000, 1, pool).tile_size == 2048


@pytest.mark.parametrize("mapped", [True, False])
def test_labels_written_through_mappings_or_pwrite(tmp_path, monkeypatch,
                                                   mapped):
    """The label round's writes into out_dir (tasks in threads, windows
    not aligned to pages): through shared mappings of the reserved file or
    with pwrite, the same file."""
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES", mapped)
    values = (fractal_surface((77, 91), seed=4) // 60).astype(np.float32)
    expected = in_memory(values, connectivity=4, mode="equal")
    out = tmp_path / "out"
    out.mkdir()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = connected_components(values, connectivity=4, mode="equal",
                                      tile_size=16, executor=pool,
                                      out_dir=out, backend="cpu")
    assert result.count == expected.count > 20
    np.testing.assert_array_equal(np.load(out / "labels.npy"),
                                  expected.labels)
    assert sorted(p.name for p in out.iterdir()) == ["labels.npy"]


def test_labels_file_reserved_up_front_on_a_full_disk(small_disk):
    """The labels file is reserved (posix_fallocate) before round 1: on a
    disk too small for it the run fails there, before any tile work, with
    the message naming the disk, the size and the fix, and no partial
    file left (never a SIGBUS in a writer)."""
    from gridgraph.core import DiskFullError
    values = (np.random.default_rng(6).random((800, 800)) < 0.5).astype(
        np.uint8)  # int32 labels: 2.4 MB on a 2 MB disk
    marks = []

    def progress(fraction):
        marks.append(fraction)
        return True

    with pytest.raises(DiskFullError) as error:
        connected_components(values, mode="nonzero", tile_size=256,
                             out_dir=str(small_disk), backend="cpu",
                             progress=progress)
    message = str(error.value)
    assert f"the disk holding {small_disk} is full" in message
    assert "MB were needed" in message and "labels.npy" in message
    assert "free space there, or choose another folder" in message
    assert marks == []  # no tile ran
    assert os.listdir(small_disk) == []


def test_tiles_on_an_executor_label_in_one_strip(monkeypatch):
    """Tiles run by an executor are labelled by the task's own thread
    (``strips=1``: the executor runs tiles side by side, one per worker
    thread); in process the kernel keeps its strips (None: one per CPU).
    The labels are the same either way."""
    from gridgraph.core.components import _cpu
    seen = []
    real_label = _cpu.label

    def label(*arguments, strips=None):
        seen.append(strips)
        return real_label(*arguments, strips=strips)

    monkeypatch.setattr(_cpu, "label", label)
    values = (fractal_surface((70, 90), seed=8) // 70).astype(np.float32)
    expected = in_memory(values, connectivity=8)
    seen.clear()
    in_process = tiled(values, 16, connectivity=8)
    assert len(seen) == 2 * 5 * 6 and set(seen) == {None}
    seen.clear()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = tiled(values, 16, connectivity=8, executor=pool)
    assert len(seen) == 2 * 5 * 6 and set(seen) == {1}
    for result in (in_process, threaded):
        np.testing.assert_array_equal(result.labels, expected.labels)


def assert_failed_run_leaves_older_labels(tmp_path, error, match):
    """A tiled components run on a 2-thread pool into an out_dir holding an
    older labels.npy fails with ``error`` matching ``match``; out_dir holds
    nothing new and the older file is left alone."""
    values = (fractal_surface((77, 91), seed=4) // 60).astype(np.float32)
    out = tmp_path / "out"
    out.mkdir()
    np.save(out / "labels.npy", np.arange(3))
    with pytest.raises(error, match=match):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            connected_components(values, connectivity=4, mode="equal",
                                 tile_size=16, executor=pool, out_dir=out,
                                 backend="cpu")
    assert sorted(p.name for p in out.iterdir()) == ["labels.npy"]
    np.testing.assert_array_equal(np.load(out / "labels.npy"), np.arange(3))


def test_row_runs_cover_each_tile_row_in_order():
    """TileGrid.row_runs: every tile once, runs of adjacent tiles of one
    tile row, row by row, each row cut into near equal runs."""
    grid = tiling.TileGrid((70, 200), 16)  # 5 x 13 tiles
    for length, sizes in ((None, [13]), (13, [13]), (7, [6, 7]),
                          (4, [3, 3, 3, 4]), (1, [1] * 13), (99, [13])):
        runs = grid.row_runs(length)
        assert [len(run) for run in runs] == sizes * 5, length
        assert [tile for run in runs for tile in run] == [
            (r, c) for r in range(5) for c in range(13)]
        for run in runs:  # one tile row, adjacent columns
            assert {r for r, _ in run} == {run[0][0]}
            assert [c for _, c in run] == list(range(run[0][1],
                                                     run[0][1] + len(run)))
    assert tiling.union_window([grid.window(4, 11), grid.window(4, 12)]) \
        == tiling.Window(64, 176, 6, 24)


@pytest.fixture
def run_lengths(monkeypatch):
    """The length of every run the label round labels, in call order
    (a spy on components.tiled.label_run)."""
    from gridgraph.core.components import tiled as components_tiled
    seen = []
    real_label_run = components_tiled.label_run

    def label_run(sink, source, run, *rest):
        seen.append(len(run))
        return real_label_run(sink, source, run, *rest)

    monkeypatch.setattr(components_tiled, "label_run", label_run)
    return seen


@pytest.mark.parametrize("writes", ["mapped", "populate", "huge", "pwrite"])
@pytest.mark.parametrize("runs", [None, 1, 2, 3, "auto", "row"])
def test_label_round_in_runs_identical(tmp_path, monkeypatch, run_lengths,
                                      runs, writes):
    """The label round in runs of adjacent tiles (LABEL_RUN_TILES), each
    written through one window: through a mapping (its pages populated
    first or not, or advised MADV_HUGEPAGE) or gathered and written with
    pwrite; in process and on
    a thread pool, 5 x 6 tiles cut short at the edges: the in-memory
    labels, nothing else in out_dir."""
    from gridgraph.core import tile_io
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "LABEL_RUN_TILES", runs)
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES",
                        writes != "pwrite")
    monkeypatch.setattr(tile_io, "POPULATE_MAPPED_WRITES",
                        writes == "populate")
    monkeypatch.setattr(tile_io, "HUGE_PAGE_MAPPED_WRITES", writes == "huge")
    seen = run_lengths
    values = (fractal_surface((77, 91), seed=4) // 60).astype(np.float32)
    expected = in_memory(values, connectivity=8, mode="equal")
    for workers in (None, 2):
        out = tmp_path / f"out-{workers}"
        out.mkdir()
        seen.clear()
        pool = concurrent.futures.ThreadPoolExecutor(workers) if workers \
            else None
        try:
            result = connected_components(
                values, connectivity=8, mode="equal", tile_size=16,
                executor=pool, out_dir=out, backend="cpu")
        finally:
            if pool is not None:
                pool.shutdown()
        assert result.count == expected.count > 20
        np.testing.assert_array_equal(result.labels, expected.labels)
        assert sorted(p.name for p in out.iterdir()) == ["labels.npy"]
        if runs is None:
            assert seen == []  # tile by tile
        else:
            assert sum(seen) == 30
            longest = {1: 1, 2: 2, 3: 3, "row": 6,
                       # 30 tiles // 4 a thread: 7 in process (a whole
                       # row), 3 on two threads
                       "auto": 6 if workers is None else 3}[runs]
            assert max(seen) == longest


def test_label_runs_bounded_in_bytes(tmp_path, monkeypatch, run_lengths):
    """A run's labels stay within RUN_BYTES (its mapped pages are in the
    writer's resident set): whole tile rows of 6 tiles of 16 x 16 int32
    labels are cut into runs of at most 2 tiles under a 2-tile bound."""
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "LABEL_RUN_TILES", "row")
    monkeypatch.setattr(components_tiled, "RUN_BYTES", 2 * 16 * 16 * 4 + 5)
    seen = run_lengths
    assert_tiled_in_out_dir_matches_in_memory(tmp_path)
    assert seen == [2, 2, 2] * 5


@pytest.mark.parametrize("mapped", [True, False])
def test_label_run_failing_leaves_nothing(tmp_path, monkeypatch, mapped):
    """A tile failing inside a run (after others of the run were
    written): the run's error is raised, out_dir holds nothing new and an
    older labels.npy is left alone."""
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "LABEL_RUN_TILES", 3)
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES", mapped)
    real_filler = components_tiled.tile_label_filler

    def tile_label_filler(source, window, *rest):
        if (window.row, window.col) == (32, 32):  # the last of its run
            raise OSError("the tile's read failed")
        return real_filler(source, window, *rest)

    monkeypatch.setattr(components_tiled, "tile_label_filler",
                        tile_label_filler)
    assert_failed_run_leaves_older_labels(tmp_path, OSError,
                                          "the tile's read failed")


def test_window_writer_with_pwrite_must_cover_its_window(tmp_path):
    """Gathered into a band for pwrite, blocks that leave a gap in the
    window are refused (the gap would be written as garbage): nothing of
    the band is written."""
    sink = tiling.NpySink(tmp_path / "l.npy", (8, 12), np.int32)
    assert not sink.mapped
    with pytest.raises(RuntimeError, match="cover 16 of its 32 cells"):
        with sink.window_writer(tiling.Window(4, 0, 4, 8)) as put:
            put(tiling.Window(4, 0, 4, 4), np.ones((4, 4), np.int32))
    labels = sink.finish()
    assert not labels.any()


def test_window_writer_with_pwrite_band_bounded(tmp_path, monkeypatch):
    """A band larger than PWRITE_BAND_BYTES is not gathered: each block is
    written at once, the same file."""
    from gridgraph.core import tile_io
    monkeypatch.setattr(tile_io, "PWRITE_BAND_BYTES", 4 * 4 * 4)
    sink = tiling.NpySink(tmp_path / "l.npy", (8, 12), np.int32)
    written = []
    real_write = tiling.NpySink.write
    monkeypatch.setattr(tiling.NpySink, "write", lambda self, window, block:
                        written.append(window) or real_write(self, window,
                                                             block))
    for band, parts in ((tiling.Window(4, 0, 4, 4), 1),
                        (tiling.Window(0, 4, 4, 8), 2)):
        with sink.window_writer(band) as put:
            for k in range(parts):
                part = tiling.Window(band.row, band.col + 4 * k, 4, 4)
                put(part, np.full((4, 4), 1 + band.col + k, np.int32))
    assert written == [tiling.Window(4, 0, 4, 4), tiling.Window(0, 4, 4, 4),
                       tiling.Window(0, 8, 4, 4)]  # one band, two blocks
    expected = np.zeros((8, 12), np.int32)
    expected[4:, :4] = 1
    expected[:4, 4:8] = 5
    expected[:4, 8:] = 6
    np.testing.assert_array_equal(sink.finish(), expected)


@pytest.mark.parametrize("writer", ["mapped", "band", "each", "array"])
def test_window_writer_takes_fillers(tmp_path, monkeypatch, writer):
    """A block may be a filler, ``fill(out)`` writing the part's values
    into the place it is given (the label round renumbers straight into
    the labels file): mapped, it fills the part of the mapping itself;
    the band for pwrite, the sink writing block by block and an
    in-memory sink get the same values as from arrays."""
    from gridgraph.core import tile_io
    if writer == "each":
        monkeypatch.setattr(tile_io, "PWRITE_BAND_BYTES", 4 * 4 * 4)
    sink = tiling.make_sink(None if writer == "array" else tmp_path, "l",
                            (8, 12), np.int32, mapped=writer == "mapped")
    seen = []

    def filler(value):
        def fill(out):
            seen.append((out.shape, out.base is not None))
            out[...] = value
        return fill

    band = tiling.Window(4, 0, 4, 12)
    with tiling.window_writer(sink, band) as put:
        for k in range(3):
            put(tiling.Window(4, 4 * k, 4, 4), filler(k + 1) if k != 1
                else np.full((4, 4), 2, np.int32))
    expected = np.zeros((8, 12), np.int32)
    for k in range(3):
        expected[4:, 4 * k:4 * k + 4] = k + 1
    np.testing.assert_array_equal(sink.finish(), expected)
    assert [shape for shape, _ in seen] == [(4, 4), (4, 4)]
    if writer in ("mapped", "band"):  # a view of the mapping or band
        assert all(is_view for _, is_view in seen)


def test_populate_refused_falls_back_to_the_copy(tmp_path, monkeypatch):
    """Where the kernel refuses MADV_POPULATE_WRITE (EINVAL before Linux
    5.14; here an advice no kernel knows) the copy faults the pages in:
    the same labels, and the advice is not tried again."""
    from gridgraph.core import tile_io
    monkeypatch.setattr(tile_io, "POPULATE_MAPPED_WRITES", True)
    monkeypatch.setattr(tile_io, "HUGE_PAGE_MAPPED_WRITES", False)
    monkeypatch.setattr(tile_io, "MADV_POPULATE_WRITE", 4095)
    monkeypatch.setattr(tile_io, "_populate_refused", False)
    assert_tiled_in_out_dir_matches_in_memory(tmp_path)
    assert tile_io._populate_refused


def test_huge_page_advice_refused_writes_the_same(tmp_path, monkeypatch):
    """Where the kernel refuses MADV_HUGEPAGE (here an advice no kernel
    knows) the mapped writes go on with plain pages: the same labels."""
    import mmap

    from gridgraph.core import tile_io
    monkeypatch.setattr(tile_io, "HUGE_PAGE_MAPPED_WRITES", True)
    monkeypatch.setattr(mmap, "MADV_HUGEPAGE", 4095, raising=False)
    assert_tiled_in_out_dir_matches_in_memory(tmp_path)


@pytest.mark.parametrize("release, thp, fs_type, expected", [
    ("6.18.44-fc-v1272-gpu", "always [madvise] never", "ext4", True),
    ("6.16.0", "[always] madvise never", "xfs", True),
    ("7.1.2-arch1", "always [madvise] never", "ext4", True),
    ("6.15.9", "always [madvise] never", "ext4", False),   # before 6.16
    ("6.1.0-27-amd64", "always [madvise] never", "ext4", False),  # Debian 12
    ("6.18.1", "always madvise [never]", "ext4", False),   # THP off
    ("6.18.1", None, "ext4", False),                        # no THP at all
    ("6.18.1", "always [madvise] never", "tmpfs", False),
    ("6.18.1", "always [madvise] never", "nfs4", False),
    ("6.18.1", "always [madvise] never", None, False),
    ("unknown", "always [madvise] never", "ext4", False),
])
def test_large_folio_rule(release, thp, fs_type, expected):
    """Mapped writes are advised MADV_HUGEPAGE, unpopulated, only where
    the kernel makes large page-cache folios for the file system."""
    from gridgraph.core import tile_io
    assert tile_io.large_folios_for(release, thp, fs_type) is expected


def test_file_system_type_from_the_deepest_mount(monkeypatch, tmp_path):
    """The file system of a folder: the mount with the longest mount point
    above it (escaped spaces read back), not a sibling sharing a prefix;
    the choice is cached per folder and follows the switch."""
    from gridgraph.core import tile_io
    inner = tmp_path / "a b" / "out"
    inner.mkdir(parents=True)
    sibling = str(tmp_path) + "x"
    root = str(tmp_path).replace(" ", "\\040")
    mounts = "\n".join([
        "/dev/vda / ext4 rw 0 0",
        f"tmpfs {root}/a\\040b tmpfs rw 0 0",
        f"server:/x {sibling} nfs4 rw 0 0",
        "bad line"])
    monkeypatch.setattr(tile_io, "_read_text", lambda path: mounts
                        if path == "/proc/self/mounts" else
                        "always [madvise] never")
    assert tile_io.file_system_type(str(inner)) == "tmpfs"
    assert tile_io.file_system_type(str(tmp_path)) == "ext4"
    assert tile_io.file_system_type(sibling) == "nfs4"
    monkeypatch.setattr(tile_io, "_large_folio_dirs", {})
    monkeypatch.setattr(tile_io, "HUGE_PAGE_MAPPED_WRITES", "auto")
    assert tile_io.large_folio_writes(str(inner / "labels.npy")) is False
    assert str(inner) in tile_io._large_folio_dirs
    monkeypatch.setattr(tile_io, "HUGE_PAGE_MAPPED_WRITES", True)
    assert tile_io.large_folio_writes(str(inner / "labels.npy")) is True


def test_populate_failing_otherwise_is_logged(caplog, monkeypatch):
    """An error of MADV_POPULATE_WRITE other than the old kernels' refusal
    (EINVAL, ENOSYS, EOPNOTSUPP) is logged once per errno (the copy then
    faults the pages in) and the advice is tried again next time; a
    refusal is silent and ends the tries."""
    import errno
    import logging

    from gridgraph.core import tile_io

    class Mapping:
        def __init__(self, code):
            self.code, self.calls = code, 0

        def madvise(self, *arguments):
            self.calls += 1
            raise OSError(self.code, os.strerror(self.code))

    monkeypatch.setattr(tile_io, "_populate_refused", False)
    monkeypatch.setattr(tile_io, "_populate_logged", set())
    window = tiling.Window(0, 0, 2, 8)
    with caplog.at_level(logging.WARNING, logger=tile_io.__name__):
        for _ in range(2):
            mapping = Mapping(errno.ENOMEM)
            tile_io._populate(mapping, 0, window, 0, 8, 4)
            assert mapping.calls == 1
        assert not tile_io._populate_refused
        assert len(caplog.records) == 1
        assert "MADV_POPULATE_WRITE" in caplog.text
        tile_io._populate(Mapping(errno.EINVAL), 0, window, 0, 8, 4)
        assert tile_io._populate_refused and len(caplog.records) == 1



def test_packed_messages_pickle_as_one_array_per_field():
    """tile_tasks.Packed: tile answers pickle as one array per field and
    come back equal (values, dtypes, shapes, writeable: numba would
    compile again for read-only arrays), indexed by their keys; messages
    of mixed dtypes pickle as they are."""
    import pickle

    from gridgraph.core.components.tiled import TileAnswer
    from gridgraph.core.tile_tasks import Packed
    rng = np.random.default_rng(5)
    answers = [TileAnswer(number=rng.integers(0, 9, k),
                          is_root=rng.random(k) < 0.5,
                          starts_before=np.arange(12)[::3])
               for k in (3, 0, 7)]
    tiles = [(0, 0), (0, 1), (1, 0)]
    packed = Packed(answers, tiles)
    state = packed.__getstate__()
    assert state[0] == "packed" and len(state[4]) == 3
    copy = pickle.loads(pickle.dumps(packed, protocol=5))
    for tile, answer in zip(tiles, answers):
        for name in ("number", "is_root", "starts_before"):
            got, want = getattr(copy[tile], name), getattr(answer, name)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype and got.flags.writeable
    mixed = Packed([answers[0], TileAnswer(
        number=np.zeros(2, np.int32), is_root=np.zeros(2, bool),
        starts_before=np.zeros(2, np.int64))])
    assert mixed.__getstate__()[0] == "plain"
    assert pickle.loads(pickle.dumps(mixed)).items[1].number.dtype == \
        np.int32


def test_packed_passes_through_a_process_without_building_its_messages():
    """A Packed unpickled and pickled again (a task's argument on Dask's
    scheduler) builds no message and sends the state it received; the
    messages are built, equal to the originals, where they are asked
    for; an empty Packed round-trips."""
    import pickle

    from gridgraph.core.components.tiled import TileAnswer
    from gridgraph.core.tile_tasks import Packed
    answers = [TileAnswer(number=np.arange(k, dtype=np.int64),
                          is_root=np.arange(k) % 2 == 0,
                          starts_before=np.arange(4, dtype=np.int64) * k)
               for k in (2, 5)]
    passed = pickle.loads(pickle.dumps(Packed(answers, ["a", "b"]),
                                       protocol=5))
    assert passed._items is None  # nothing built on the way
    again = pickle.loads(pickle.dumps(passed, protocol=5))
    assert passed._items is None and again._items is None
    assert len(again) == 2 and again.keys == ["a", "b"]
    for key, answer in zip(["a", "b"], answers):
        np.testing.assert_array_equal(again[key].number, answer.number)
        np.testing.assert_array_equal(again[key].starts_before,
                                      answer.starts_before)
    assert len(pickle.loads(pickle.dumps(Packed([])))) == 0
