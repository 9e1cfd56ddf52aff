"""The tiled paths' partial output files (``tile_io.NpySink``): named for
their owner (host, pid), so that those of a killed run are removed by the
next run writing into the same folder, and never left behind by a disk
that fills up while one is made."""

import os
import subprocess

import numpy as np
import pytest

from gridgraph.core import DiskFullError, connected_components, scratch, tiling

from faults_helpers import small_disk  # noqa: F401 - a fixture


def test_partial_output_is_named_for_its_owner(tmp_path):
    """A sink's partial file is hidden, names this host and process (the
    pattern the sweep reads), and is removed by an abort."""
    sink = tiling.NpySink(tmp_path / "labels.npy", (4, 5), np.int32)
    name = os.path.basename(sink.partial)
    match = scratch._OWNED.match(name)
    assert match is not None, name
    assert match.group(1) == scratch.host_tag()
    assert int(match.group(2)) == os.getpid()
    assert name.startswith(".") and "labels.npy" in name
    sink.abort()
    assert os.listdir(tmp_path) == []


def test_a_killed_runs_partial_outputs_are_swept(tmp_path):
    """Partial outputs left by a process that no longer exists on this
    host (a run killed before it could clean up) are removed when the next
    tiled run makes its outputs in that folder; a live process's, another
    host's and other files are kept, and the run's own output is right."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = scratch.host_tag()
    stale = tmp_path / (f".gridgraph-partial-{host}-{dead.pid}-0123abcd-"
                        "labels.npy.x1y2.partial")
    kept = [tmp_path / (f".gridgraph-partial-{host}-{os.getpid()}-0123abcd-"
                        "accumulated.npy.a1b2.partial"),
            tmp_path / (f".gridgraph-partial-0000beef-{dead.pid}-0123abcd-"
                        "labels.npy.c3d4.partial"),
            tmp_path / "notes.txt"]
    for path in [stale] + kept:
        path.write_bytes(b"x" * 64)
    values = (np.random.default_rng(3).random((40, 50)) < 0.5).astype(
        np.uint8)
    expected = connected_components(values, mode="nonzero")
    result = connected_components(values, mode="nonzero", tile_size=16,
                                  out_dir=str(tmp_path), backend="cpu")
    np.testing.assert_array_equal(result.labels, expected.labels)
    assert not stale.exists()
    assert all(path.exists() for path in kept)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["labels.npy"] + [path.name for path in kept])


def test_a_full_disk_while_making_a_partial_output(small_disk):
    """A disk with no page left when a sink writes its file's header: the
    disk-full message (not a bare OSError), and no partial file left."""
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 1):  # until not even a byte fits
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    with pytest.raises(DiskFullError) as error:
        tiling.NpySink(small_disk / "labels.npy", (100, 100), np.int32)
    assert f"the disk holding {small_disk} is full" in str(error.value)
    assert os.listdir(small_disk) == ["filler"]
