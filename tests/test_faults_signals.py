"""The failure contract (issue 8), part 3: interruption (SIGTERM, SIGKILL of
a ``scripts/qgis-process`` tiled run) and concurrency (tiled runs in a thread
pool, two qgis_process runs at once)."""

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import (QGIS_PROCESS, cell_centre, qgis_process_environment,
                      read_raster, write_geotiff, write_points)
from faults_helpers import (CD, MST, assert_inputs_unchanged, entries,
                            run_qgis_process, snapshot)

# 2048 x 2048 cells in tiles of 32: a tiled cost distance that lasts well
# past the signal on a fast idle machine too (the tests never wait for it)
SIDE, TILE = 2048, 32


@pytest.fixture(scope="module")
def slow_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slow-inputs")
    values = np.random.default_rng(1).uniform(1, 5, size=(SIDE, SIDE))
    return {"cost": write_geotiff(folder / "cost.tif", values),
            "point": write_points(folder / "p.gpkg", [cell_centre(3, 3)]),
            "folder": folder}


def start_tiled_run(inputs, output, temporary):
    """A qgis_process tiled cost distance in its own session (process
    group), with its own temporary folder."""
    environment = {**qgis_process_environment(), "TMPDIR": str(temporary),
                   "GRIDGRAPH_SCRATCH_DIR": ""}
    return subprocess.Popen(
        [QGIS_PROCESS, "run", CD, "--", f"INPUT={inputs['cost']}",
         f"SOURCES={inputs['point']}", f"TILE_SIZE={TILE}",
         f"OUTPUT={output}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=environment, start_new_session=True)


def wait_for_scratch(temporary, process, timeout=120):
    """Wait until the run has made its tiled scratch folder (it is then
    computing), and a moment longer (it must still be computing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(name.startswith("gridgraph-tiled-")
               for _, folders, _ in os.walk(temporary) for name in folders):
            time.sleep(0.2)
            return
        if process.poll() is not None:
            pytest.fail("the run ended before it was interrupted:\n"
                        + process.communicate()[0][-2000:])
        time.sleep(0.05)
    pytest.fail("the run never made its scratch folder")


def test_sigterm_during_a_tiled_run_removes_everything(tmp_path,
                                                       slow_inputs):
    temporary, outputs = tmp_path / "tmp", tmp_path / "outputs"
    temporary.mkdir()
    outputs.mkdir()
    before = snapshot(slow_inputs["folder"])
    process = start_tiled_run(slow_inputs, outputs / "cost.tif", temporary)
    wait_for_scratch(temporary, process)
    process.send_signal(signal.SIGTERM)  # to the wrapper script
    text = process.communicate(timeout=120)[0]
    assert process.returncode != 0, text
    assert "interrupted by SIGTERM" in text, text[-2000:]
    assert "Traceback" not in text
    assert entries(outputs) == []
    assert entries(temporary) == [], "the interrupted run left files behind"
    assert_inputs_unchanged(before, snapshot(slow_inputs["folder"]))


def test_sigkill_leftovers_are_removed_by_the_next_run(tmp_path,
                                                       slow_inputs):
    temporary, outputs = tmp_path / "tmp", tmp_path / "outputs"
    temporary.mkdir()
    outputs.mkdir()
    process = start_tiled_run(slow_inputs, outputs / "cost.tif", temporary)
    wait_for_scratch(temporary, process)
    os.killpg(process.pid, signal.SIGKILL)  # the wrapper and qgis_process
    process.communicate(timeout=60)
    left = [os.path.relpath(os.path.join(root, name), temporary)
            for root, folders, _ in os.walk(temporary) for name in folders]
    # killed mid-run: its private temporary folder (holding the scratch)
    assert any(name.startswith("qgis-process-run-") for name in left), left
    # a second run (small, same temporary and outputs folders) sweeps them
    small = write_geotiff(tmp_path / "small.tif", np.ones((4, 4)))
    code, text = run_qgis_process(
        MST, {"INPUT": small, "OUTPUT_DIRECTION": outputs / "d.tif"},
        environment={"TMPDIR": str(temporary), "GRIDGRAPH_SCRATCH_DIR": ""})
    assert code == 0, text
    assert entries(temporary) == [], "the killed run's leftovers stayed"
    assert entries(outputs) == ["d.tif"]


# ------------------------------------------------------------- concurrency

def test_tiled_runs_in_a_thread_pool_equal_a_lone_run(tmp_path):
    """Several tiled runs on one GeoTIFF at once, in a thread pool, each
    with a thread pool of its own: identical to a lone run (each thread
    reads through its own GDAL handle)."""
    from gridgraph.core import (connected_components, cost_distance,
                                minimum_spanning_tree)
    values = np.random.default_rng(2).integers(0, 4, size=(96, 80))
    path = write_geotiff(tmp_path / "v.tif", values.astype(float))
    runs = {
        "components": lambda executor=None: connected_components(
            path, tile_size=16, executor=executor).labels,
        "cost": lambda executor=None: cost_distance(
            path, [(0, 0)], tile_size=16, executor=executor).accumulated,
        "mst": lambda executor=None: minimum_spanning_tree(
            path, tile_size=16, executor=executor).parent_direction,
    }
    lone = {name: np.array(run()) for name, run in runs.items()}
    with ThreadPoolExecutor(4) as inner, ThreadPoolExecutor(6) as outer:
        futures = [(name, outer.submit(run, inner))
                   for _ in range(2) for name, run in runs.items()]
        for name, future in futures:
            np.testing.assert_array_equal(np.array(future.result()),
                                          lone[name])


def test_gdal_source_reads_through_one_handle_per_thread(tmp_path):
    from gridgraph.core import tiling
    path = write_geotiff(tmp_path / "v.tif", np.arange(64.0).reshape(8, 8))
    source = tiling.open_source(path)
    window = tiling.Window(0, 0, 8, 8)
    readers = []
    # all three reads wait for each other: three threads read, never one
    # thread three times (on a loaded box the pool's first thread could
    # take every task before the others start)
    together = threading.Barrier(3, timeout=60)

    def read():
        together.wait()
        block = source.read(window)
        readers.append(source._local.reader)  # kept: ids stay unique
        return block
    with ThreadPoolExecutor(3) as pool:
        blocks = list(pool.map(lambda _: read(), range(3)))
    for block in blocks:
        np.testing.assert_array_equal(block, np.arange(64.0).reshape(8, 8))
    assert len({id(reader) for reader in readers}) == 3


def test_two_qgis_process_runs_at_once_equal_a_lone_run(tmp_path):
    values = np.random.default_rng(3).uniform(1, 5, size=(64, 64))
    cost = write_geotiff(tmp_path / "cost.tif", values)
    point = write_points(tmp_path / "p.gpkg", [cell_centre(5, 5)])
    environment = {**qgis_process_environment(), "GRIDGRAPH_SCRATCH_DIR": ""}

    def start(name):
        return subprocess.Popen(
            [QGIS_PROCESS, "run", CD, "--", f"INPUT={cost}",
             f"SOURCES={point}", "TILE_SIZE=16",
             f"OUTPUT={tmp_path / name}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=environment)
    together = [start("a.tif"), start("b.tif")]
    texts = [process.communicate(timeout=300)[0] for process in together]
    assert [process.returncode for process in together] == [0, 0], texts
    lone = start("lone.tif")
    assert lone.wait(timeout=300) == 0
    expected = read_raster(tmp_path / "lone.tif")[0]
    for name in ("a.tif", "b.tif"):
        np.testing.assert_array_equal(read_raster(tmp_path / name)[0],
                                      expected)


def test_leftovers_of_dead_runs_are_swept_and_live_ones_kept(
        run_algorithm, gridgraph_provider, tmp_path, monkeypatch):
    """Scratch folders and hidden temporary outputs named after a process
    that no longer exists are removed by the next run; those of a live
    process (this one) and other files are kept."""
    from gridgraph.core import scratch
    dead = subprocess.Popen(["true"])
    dead.wait()
    scratch_root, outputs = tmp_path / "scratch", tmp_path / "outputs"
    scratch_root.mkdir()
    outputs.mkdir()
    monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(scratch_root))
    host = scratch.host_tag()
    stale = [scratch_root / f"gridgraph-tiled-{host}-{dead.pid}-0123abcd",
             outputs / f".gridgraph-tmp-{host}-{dead.pid}-0123abcd-d.tif"]
    live = [scratch_root / f"gridgraph-tiled-{host}-{os.getpid()}-0123abcd",
            outputs / "unrelated.txt",
            outputs / f".gridgraph-tmp-0000beef-{dead.pid}-0123abcd-x.tif"]
    stale[0].mkdir()
    (stale[0] / "accumulated.npy").write_bytes(b"x" * 100)
    stale[1].write_bytes(b"partial")
    live[0].mkdir()
    for path in live[1:]:
        path.write_bytes(b"keep")
    raster = write_geotiff(tmp_path / "v.tif", np.ones((4, 4)))
    run_algorithm(MST, {"INPUT": raster,
                        "OUTPUT_DIRECTION": str(outputs / "d.tif")})
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in live)
