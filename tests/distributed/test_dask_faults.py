"""Failures on a Dask cluster leave nothing behind: a worker killed
mid-run changes no output, no retries left is a clean error, a cancel
cancels every outstanding future, a failing round leaves no task.
"""

import os
import signal

import numpy as np
import pytest

from gridgraph.core import (CancelledError, GridGraphError,
                            connected_components, cost_distance,
                            minimum_spanning_tree)

from dask_helpers import (TILE, save_npy, assert_same, costs, SOURCES,
                          scheduler_tasks, no_new_tasks)

pytest.importorskip("distributed")

# sys.path without the folder above the checkout, for the workers
pytestmark = pytest.mark.usefixtures("worker_sys_path")


def test_worker_killed_mid_run_changes_nothing(killable_client, tmp_path):
    client = killable_client
    cost = costs((24, 24), 21)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3])
    memmap = save_npy(tmp_path, "cost", cost)
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    killed = []

    def kill_after_the_survey(fraction):
        # past the survey round: tile states now live on the workers
        if fraction > 0.15 and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(memmap, SOURCES, source_ids=[1, 2, 3],
                           tile_size=TILE, executor=client, out_dir=out,
                           progress=kill_after_the_survey)
    assert killed
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


@pytest.mark.slow  # kept labels are off by default: the mechanism only
def test_worker_killed_with_kept_labels_changes_nothing(killable_client,
                                                        tmp_path,
                                                        monkeypatch):
    # components keep round 1's tile labels on the workers; a worker killed
    # as the label round starts loses some: Dask recomputes them from their
    # summary tasks and the labels are still identical
    from gridgraph.core.components import tiled as components_tiled
    client = killable_client
    values = (np.random.default_rng(8).random((40, 37)) < 0.4).astype(
        np.int16)
    expected = connected_components(values, mode="nonzero")
    assert not components_tiled._keep_labels(client, values.size)  # default
    monkeypatch.setattr(components_tiled, "KEPT_LABELS_SHARE", 0.25)
    assert components_tiled._keep_labels(client, values.size)
    assert not components_tiled._keep_labels(None, values.size)
    memmap = save_npy(tmp_path, "values", values)
    pids = client.run(os.getpid)
    victim = sorted(pids)[-1]
    killed = []

    def kill_at_the_label_round(fraction):
        if fraction >= 0.5 and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, mode="nonzero", tile_size=TILE,
                                  executor=client, out_dir=out,
                                  progress=kill_at_the_label_round)
    assert killed
    assert result.count == expected.count
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]


def test_no_retries_left_is_a_clean_error(tmp_path):
    import dask
    from distributed import Client, LocalCluster
    values = np.random.default_rng(2).integers(0, 9, (24, 24)).astype(
        np.float32)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)

        def kill_every_worker(fraction):
            if fraction > 0:
                for pid in pids.values():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

        with pytest.raises(GridGraphError) as error:
            minimum_spanning_tree(memmap, tile_size=TILE, executor=client,
                                  out_dir=out, progress=kill_every_worker)
    message = str(error.value)
    assert "died" in message and "allowed-failures" in message
    assert os.listdir(out) == []


def test_cancel_cancels_outstanding_futures(client, tmp_path):
    memmap = save_npy(tmp_path, "v", np.random.default_rng(4).random(
        (32, 32)).astype(np.float32))
    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def cancel_at_first_tile(fraction):
        calls.append(fraction)
        return False

    before = scheduler_tasks(client)
    with pytest.raises(CancelledError):
        minimum_spanning_tree(memmap, tile_size=TILE, executor=client,
                              out_dir=out, progress=cancel_at_first_tile)
    assert len(calls) == 1  # nothing ran on after the cancel
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("settings", [
    {"LABEL_RUN_TILES": None, "DASK_BATCH": None},
    {"LABEL_RUN_TILES": 1, "DASK_SUBMIT_ROUND_AT_ONCE": False},
    {"LABEL_RUN_TILES": 1, "DASK_SUBMIT_ROUND_AT_ONCE": True}],
    ids=["tiles", "runs", "runs_at_once"])
def test_cancel_in_the_label_round(client, tmp_path, monkeypatch, settings):
    """Components cancelled in the label round with tasks outstanding (a
    task a tile: tile by tile without batches, or runs of one tile, one by
    one or at once), writing through mappings: CancelledError, and once
    the workers are done nothing is left in out_dir (no partial file: a
    task still running finds it gone and fails)."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    for name, value in settings.items():
        monkeypatch.setattr(tile_tasks if name.startswith("DASK_SUBMIT")
                            else components_tiled, name, value)
    values = (np.random.default_rng(12).random((64, 72)) < 0.45).astype(
        np.uint8)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    marks = []

    def cancel_in_the_label_round(fraction):
        marks.append(fraction)
        return fraction <= components_tiled.LABEL_SPAN[0]

    before = scheduler_tasks(client)
    with pytest.raises(CancelledError):
        connected_components(memmap, connectivity=8, mode="nonzero",
                             tile_size=TILE, executor=client, out_dir=out,
                             progress=cancel_in_the_label_round)
    assert marks[-1] > components_tiled.LABEL_SPAN[0]
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("on_worker", [False, True])
def test_round_1_failing_leaves_no_task(client, tmp_path, monkeypatch,
                                        on_worker):
    """Components' round 1 failing on its last tile (submitted at once;
    the merge here or as a task on a worker): round 1's error is raised,
    and its finished tasks are released too (no task left on the
    scheduler while the error's traceback lives) and out_dir holds
    nothing."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    real_summary = components_tiled.tile_summary

    def tile_summary(source, window, *rest):
        if (window.row, window.col) == (56, 64):  # the last tile
            raise OSError("the tile's read failed")
        return real_summary(source, window, *rest)

    monkeypatch.setattr(components_tiled, "tile_summary", tile_summary)
    values = (np.random.default_rng(18).random((64, 72)) < 0.45).astype(
        np.uint8)
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    before = scheduler_tasks(client)
    with pytest.raises(OSError, match="the tile's read failed"):
        connected_components(memmap, connectivity=8, mode="nonzero",
                             tile_size=TILE, executor=client, out_dir=out)
    assert no_new_tasks(client, before), sorted(
        scheduler_tasks(client) - before)
    assert os.listdir(out) == []


@pytest.mark.parametrize("on_worker", [True, False])
def test_worker_killed_in_the_label_round(killable_client, tmp_path,
                                          monkeypatch, on_worker):
    """A worker killed as the label round starts (the merge ran on a
    worker, the label runs behind it, or the merge ran here): Dask
    recomputes what it held (the merge's answers, round 1's summaries)
    and retries its runs; the labels are still the in-process ones, only
    labels.npy left."""
    from gridgraph.core import tile_tasks
    client = killable_client
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    values = (np.random.default_rng(16).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    killed = []

    def kill_at_the_label_round(fraction):
        from gridgraph.core.components import tiled as components_tiled
        if fraction > components_tiled.LABEL_SPAN[0] and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, connectivity=8, mode="nonzero",
                                  tile_size=TILE, executor=client,
                                  out_dir=out,
                                  progress=kill_at_the_label_round)
    assert killed
    assert result.count == expected.count
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]
