"""The compiled row loops of tile reads and writes (core/_row_io.py):
windows of a file raster read and written one row a call, against numpy's
slicing of the same file, and the errors of a row that fails (a file cut
short, a descriptor that cannot write, a full disk) raised as before."""

import os

import numpy as np
import pytest

from gridgraph.core import DiskFullError, InvalidInputError, tiling
from gridgraph.core import _row_io, tile_io

from faults_helpers import small_disk  # noqa: F401 - a fixture


def random_windows(rng, shape, count):
    """Windows of every kind: single rows and columns, the raster's edges,
    whole rows (read in one call), and any other."""
    rows, cols = shape
    windows = [tiling.Window(0, 0, rows, cols), tiling.Window(0, 0, 1, 1),
               tiling.Window(rows - 1, cols - 1, 1, 1),
               tiling.Window(3, 0, 5, cols), tiling.Window(0, cols - 1, rows,
                                                           1)]
    for _ in range(count):
        row = int(rng.integers(0, rows))
        col = int(rng.integers(0, cols))
        windows.append(tiling.Window(row, col,
                                     int(rng.integers(1, rows - row + 1)),
                                     int(rng.integers(1, cols - col + 1))))
    return windows


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32,
                                   np.float64])
def test_file_windows_read_as_numpy_slices_them(tmp_path, monkeypatch,
                                                dtype, compiled):
    """Every kind of window, with the compiled loop and with Python's
    calls (COMPILED_ROW_IO off: a C library without pread)."""
    monkeypatch.setattr(tile_io, "COMPILED_ROW_IO", compiled)
    rng = np.random.default_rng(7)
    shape = (61, 83)
    values = (rng.random(shape) * 1000).astype(dtype)
    path = tmp_path / "values.npy"
    np.save(path, values)
    source = tiling.open_source(np.load(path, mmap_mode="r"))
    assert isinstance(source, tile_io.FileArraySource)
    for window in random_windows(rng, shape, 60):
        block = source.read(window)
        np.testing.assert_array_equal(
            block, values[window.row:window.row + window.rows,
                          window.col:window.col + window.cols],
            err_msg=str(window))
        assert block.flags.c_contiguous and block.dtype == dtype


def test_columns_of_a_memmap_read_row_by_row(tmp_path):
    """A memmap of some columns of a .npy file: its rows are strided in
    the file, so even whole-width windows take the row loop."""
    values = np.arange(30 * 50, dtype=np.float32).reshape(30, 50)
    path = tmp_path / "values.npy"
    np.save(path, values)
    columns = np.load(path, mmap_mode="r")[:, 7:31]
    source = tiling.open_source(columns)
    assert isinstance(source, tile_io.FileArraySource)
    assert source.row_stride > 24 * 4
    for window in random_windows(np.random.default_rng(9), (30, 24), 20):
        np.testing.assert_array_equal(
            source.read(window),
            values[window.row:window.row + window.rows,
                   7 + window.col:7 + window.col + window.cols])


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_sink_windows_written_as_numpy_assigns_them(tmp_path, dtype):
    rng = np.random.default_rng(8)
    shape = (47, 71)
    expected = np.zeros(shape, dtype)
    sink = tiling.NpySink(tmp_path / "out.npy", shape, dtype)
    for window in random_windows(rng, shape, 60):
        block = (rng.random((window.rows, window.cols)) * 100).astype(dtype)
        sink.write(window, block)
        expected[window.row:window.row + window.rows,
                 window.col:window.col + window.cols] = block
    np.testing.assert_array_equal(sink.finish(), expected)


def test_a_file_cut_short_fails_at_its_first_missing_row(tmp_path):
    """The compiled loop stops at the row past the end of the file and
    says which; the read then raises the error naming the byte."""
    values = np.arange(40 * 30, dtype=np.int32).reshape(40, 30)
    path = tmp_path / "values.npy"
    np.save(path, values)
    source = tiling.open_source(np.load(path, mmap_mode="r"))
    row_bytes = 30 * 4
    # inside the window's part of row 25: 10 of its 48 bytes there
    cut = source.offset + 25 * row_bytes + 30
    with open(path, "r+b") as handle:
        handle.truncate(cut)
    window = tiling.Window(20, 5, 10, 12)
    block = np.empty((10, 12), np.int32)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = source.offset + 20 * row_bytes + 5 * 4
        assert _row_io.pread_rows(fd, block.ctypes.data, 12 * 4, 10, start,
                                  row_bytes) == 5
        np.testing.assert_array_equal(block[:5], values[20:25, 5:17])
    finally:
        os.close(fd)
    with pytest.raises(InvalidInputError, match=f"ended early at byte {cut}"):
        source.read(window)
    # the rows before the cut still read
    np.testing.assert_array_equal(source.read(tiling.Window(20, 5, 5, 12)),
                                  values[20:25, 5:17])


def test_a_row_that_cannot_be_written_raises_its_error(tmp_path):
    """pwrite on a descriptor open for reading fails at once: the loop
    says row 0, and the write raises the system's error (EBADF)."""
    path = tmp_path / "out.bin"
    path.write_bytes(bytes(64 * 64))
    block = np.ones((4, 8), np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _row_io.pwrite_rows(fd, block.ctypes.data, 8, 4, 0, 64) == 0
        sink = tiling.NpySink(tmp_path / "sink.npy", (64, 64), np.uint8)
        with pytest.raises(OSError):
            sink._write(fd, tiling.Window(2, 3, 4, 8), block)
        sink.abort()
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(64 * 64)


def test_strided_writes_on_a_full_disk_raise_the_disk_full_error(
        small_disk, monkeypatch):
    """Windows narrower than the raster written with pwrite into a sparse
    file larger than the disk: the disk fills part-way through the rows
    (the compiled loop stops there), and the write raises DiskFullError
    naming the folder."""
    stops = []
    pwrite_rows = _row_io.pwrite_rows

    def recorded(fd, address, row_bytes, rows, start, stride):
        done = pwrite_rows(fd, address, row_bytes, rows, start, stride)
        stops.append((done, rows))
        return done

    monkeypatch.setattr(_row_io, "pwrite_rows", recorded)
    shape = (1024, 1024)  # 4 MB of int32 on a 2 MB disk
    sink = tiling.NpySink(small_disk / "labels.npy", shape, np.int32)
    assert not sink.mapped
    block = np.ones((256, 512), np.int32)
    with pytest.raises(DiskFullError) as error:
        for row in range(0, 1024, 256):
            for col in (0, 512):
                sink.write(tiling.Window(row, col, 256, 512), block)
    assert f"the disk holding {small_disk} is full" in str(error.value)
    assert stops[-1][0] < stops[-1][1]  # the compiled loop stopped short
    assert all(done == rows for done, rows in stops[:-1])
    sink.abort()
    assert os.listdir(small_disk) == []
