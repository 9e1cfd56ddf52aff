"""Every output of a run on a Dask cluster (``executor=`` a client)
identical to the in-process run: components, the MST and cost distance,
with the rounds' variants (label runs, the merge on a worker, workers on
two hosts, the edge list's sample sort) and tiles sized from the
workers' memory.
"""

import os

import numpy as np
import pytest

from gridgraph.core import (connected_components, cost_distance, distributed,
                            minimum_spanning_tree)

from dask_helpers import (TILE, save_npy, assert_same, costs, SOURCES,
                          scheduler_tasks, no_new_tasks)

pytest.importorskip("distributed")

# sys.path without the folder above the checkout, for the workers
pytestmark = pytest.mark.usefixtures("worker_sys_path")


def assert_components_on_dask(client, tmp_path, seed, shape=(64, 72)):
    """Components (8-connected, ``nonzero``) of a random mask run on the
    cluster into ``tmp_path/out``: the in-process labels, and ``out``
    holds labels.npy only."""
    values = (np.random.default_rng(seed).random(shape) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    result = connected_components(memmap, connectivity=8, mode="nonzero",
                                  tile_size=TILE, executor=client,
                                  out_dir=out)
    assert result.count == expected.count > 20
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]


@pytest.mark.parametrize("connectivity,mode", [(4, "equal"), (8, "nonzero")])
def test_components_identical(client, tmp_path, connectivity, mode):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 3, (21, 19)) if mode == "equal" else \
        (rng.random((21, 19)) < 0.3).astype(np.int64)
    expected = connected_components(values, connectivity=connectivity,
                                    mode=mode)
    memmap = save_npy(tmp_path, "values", values.astype(np.int16))
    result = connected_components(memmap, connectivity=connectivity,
                                  mode=mode, tile_size=TILE, executor=client)
    assert result.count == expected.count > 5
    assert_same(result, expected, ["labels"])


def set_heap_kept(on):
    """tile_tasks.HEAP_KEPT_IN_BATCHES in a worker."""
    from gridgraph.core import tile_tasks
    tile_tasks.HEAP_KEPT_IN_BATCHES = on


@pytest.mark.parametrize("writes,kept,switches", [
    ("mapped", False, False), ("pwrite", False, False),
    ("mapped", True, False), ("pwrite", True, False),
    ("mapped", False, True), ("mapped", True, True)])
def test_components_many_tiles_batched(client, tmp_path, monkeypatch,
                                       request, writes, kept, switches):
    """72 tiles on 2 workers: both rounds batched (9 tiles a Dask task,
    fewer at the end), labels written by the tasks into out_dir (through
    shared mappings of the reserved file or with pwrite) or gathered
    here; with ``kept`` round 1's
    labels stay on the workers, one future per batch, and round 3
    renumbers them there; ``switches``: the heap kept in the batches
    (set on the workers too)."""
    from gridgraph.core import tiling
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES",
                        writes == "mapped")
    client.run(set_heap_kept, switches)
    request.addfinalizer(lambda: client.run(set_heap_kept, False))
    monkeypatch.setattr(components_tiled, "KEPT_LABELS_SHARE",
                        0.25 if kept else 0.0)
    groups = []
    real_kept_groups = tiling.kept_groups
    monkeypatch.setattr(tiling, "kept_groups", lambda states: groups.append(
        real_kept_groups(states)) or groups[-1])
    values = (np.random.default_rng(11).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    for out_dir in (out, None):
        result = connected_components(memmap, connectivity=8, mode="nonzero",
                                      tile_size=TILE, executor=client,
                                      out_dir=out_dir)
        assert result.count == expected.count > 20
        assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]  # no partial file
    if kept:  # a group per summary batch, the tiles in batch order
        sizes = tiling.batch_sizes(72, 2)
        assert [len(parts) for _, parts in groups[0]] == sizes
        assert [index for _, parts in groups[0] for index, _ in parts] == [
            k for size in sizes for k in range(size)]
    else:
        assert not groups


@pytest.mark.parametrize("connectivity", [4, 8])
def test_mst_identical_every_output(client, tmp_path, connectivity):
    values = np.random.default_rng(5).integers(0, 9, (19, 22)).astype(
        np.float32)
    values[4, 5] = np.nan
    expected = minimum_spanning_tree(values, connectivity=connectivity)
    memmap = save_npy(tmp_path, "values", values)
    result = minimum_spanning_tree(memmap, connectivity=connectivity,
                                   tile_size=TILE, executor=client)
    assert_same(result, expected, ["edges", "weights", "parent_direction"])
    assert (result.total_weight, result.trees) == (expected.total_weight,
                                                   expected.trees)
    out = tmp_path / "out"
    out.mkdir()
    no_edges = minimum_spanning_tree(memmap, connectivity=connectivity,
                                     tile_size=TILE, executor=client,
                                     edges=False, out_dir=out)
    assert_same(no_edges, expected, ["parent_direction"])
    assert no_edges.total_weight == expected.total_weight
    assert sorted(os.listdir(out)) == ["parent_direction.npy"]


@pytest.mark.parametrize("connectivity", [4, 8, 16])
def test_cost_distance_identical_every_output(client, tmp_path,
                                              connectivity):
    cost = costs((20, 23), connectivity)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3],
                             connectivity=connectivity)
    memmap = save_npy(tmp_path, "cost", cost)
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(memmap, SOURCES, source_ids=[1, 2, 3],
                           connectivity=connectivity, tile_size=TILE,
                           executor=client, out_dir=out)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    assert set(np.unique(expected.allocation)) == {0, 1, 2, 3}
    assert sorted(os.listdir(out)) == ["accumulated.npy", "allocation.npy",
                                       "direction.npy"]


@pytest.mark.parametrize("ids", [[1, 1, 1], [1, 2, 3]])
def test_cost_distance_hops_only_for_ties(client, tmp_path, ids):
    # real-valued costs: no tie, no hops visit; a plateau in one corner:
    # the hops run after the first pass of the labels (several ids) or of
    # the outputs (one id) and the tied tiles are made again on the
    # workers; the in-memory rasters either way
    rng = np.random.default_rng(5)
    smooth = rng.random((40, 37)) + 0.5
    plateau = smooth.copy()
    plateau[26:34, 2:10] = 1.0
    for cost, tie in ((smooth, False), (plateau, True)):
        expected = cost_distance(cost, SOURCES, source_ids=ids)
        out = tmp_path / f"out{int(tie)}"
        out.mkdir()
        result = cost_distance(save_npy(tmp_path, f"cost{int(tie)}", cost),
                               SOURCES, source_ids=ids, tile_size=TILE,
                               executor=client, out_dir=out)
        assert_same(result, expected,
                    ["accumulated", "direction", "allocation"])
        assert (result.hops_visits > 0) == tie


@pytest.mark.parametrize("per_worker", [1, 3])
def test_cost_distance_tasks_in_flight_per_worker(client, tmp_path,
                                                  monkeypatch, per_worker):
    # solves and hops visits queued ahead on the workers (more tasks in
    # flight than worker threads) reach the same fixed point
    from gridgraph.core import tiling
    from gridgraph.core.costdistance import rounds
    monkeypatch.setattr(rounds, "ROUND_TASKS_PER_WORKER", per_worker)
    monkeypatch.setattr(rounds, "HOPS_TASKS_PER_WORKER", per_worker)
    most = {}

    class CountingPool(tiling.TaskPool):
        def submit(self, tag, function, *arguments):
            super().submit(tag, function, *arguments)
            most[self.name] = max(most.get(self.name, 0), len(self))

    monkeypatch.setattr(rounds.tiling, "TaskPool", CountingPool)
    cost = costs((40, 37), 8)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3])
    out = tmp_path / "out"
    out.mkdir()
    result = cost_distance(save_npy(tmp_path, "cost", cost), SOURCES,
                           source_ids=[1, 2, 3], tile_size=TILE,
                           executor=client, out_dir=out)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])
    workers = tiling.executor_workers(client)
    # (never more than workers * per_worker: the rounds' loops stop there)
    if per_worker > 1:  # the 40 x 37 raster has tiles enough to queue
        assert max(most.values()) > workers


def test_cost_distance_source_raster_and_subset(client, tmp_path):
    cost = costs((18, 17), 9)
    sources = np.zeros(cost.shape, np.int32)
    sources[2, 3], sources[15, 14] = 7, 9
    cost[2, 3] = cost[15, 14] = 2.0
    expected = cost_distance(cost, sources)
    result = cost_distance(save_npy(tmp_path, "cost", cost),
                           save_npy(tmp_path, "sources", sources),
                           tile_size=TILE, executor=client,
                           outputs=("accumulated", "allocation"))
    assert_same(result, expected, ["accumulated", "allocation"])
    assert result.direction is None


@pytest.mark.parametrize("runs,mapped,at_once", [
    (None, True, False), (2, True, False), ("auto", False, False),
    ("row", True, False), ("auto", True, True)])
def test_components_label_runs_on_dask(client, tmp_path, monkeypatch, runs,
                                       mapped, at_once):
    """The label round in runs of adjacent tiles (LABEL_RUN_TILES: tile by
    tile, 2, about a batch, whole tile rows), written by the workers into
    out_dir through one mapping a run (its pages populated first, the
    default on the workers) or gathered and written with pwrite: the
    in-process labels, nothing else left; each round submitted at once
    (DASK_SUBMIT_ROUND_AT_ONCE) or task by task."""
    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    monkeypatch.setattr(components_tiled, "LABEL_RUN_TILES", runs)
    monkeypatch.setattr(components_tiled, "MAPPED_LABEL_WRITES", mapped)
    monkeypatch.setattr(tile_tasks, "DASK_SUBMIT_ROUND_AT_ONCE", at_once)
    assert_components_on_dask(client, tmp_path, 13)


@pytest.mark.parametrize("on_worker", [True, False])
def test_components_merge_as_a_task_on_a_worker(client, tmp_path,
                                                monkeypatch, on_worker):
    """tile_tasks.DASK_JOIN_ON_WORKER: the merge runs as a Dask task on a
    worker (never in this process) and the label round's tasks are handed
    to the scheduler with round 1's, before any of its results is in; off
    (the default), the merge runs here between the rounds.  The
    in-process labels either way, only labels.npy left, no task left on
    the scheduler."""
    from distributed import get_task_stream

    from gridgraph.core import tile_tasks
    from gridgraph.core.components import tiled as components_tiled
    assert not tile_tasks.DASK_JOIN_ON_WORKER  # the default
    monkeypatch.setattr(tile_tasks, "DASK_JOIN_ON_WORKER", on_worker)
    events = []
    real_merge, real_map = components_tiled.merge, client.map

    def merge_here(*arguments):
        events.append("merge here")
        return real_merge(*arguments)

    def spy_map(function, *iterables, **keywords):
        events.append("map " + str(keywords["key"][0]).split("-")[0])
        return real_map(function, *iterables, **keywords)

    monkeypatch.setattr(components_tiled, "merge", merge_here)
    monkeypatch.setattr(client, "map", spy_map)
    values = (np.random.default_rng(13).random((64, 72)) < 0.45).astype(
        np.uint8)
    expected = connected_components(values, connectivity=8, mode="nonzero")
    events.clear()
    memmap = save_npy(tmp_path, "values", values)
    out = tmp_path / "out"
    out.mkdir()
    before = scheduler_tasks(client)
    with get_task_stream(client=client) as stream:
        result = connected_components(
            memmap, connectivity=8, mode="nonzero", tile_size=TILE,
            executor=client, out_dir=out,
            progress=lambda fraction: events.append("progress"))
    assert result.count == expected.count > 20
    assert_same(result, expected, ["labels"])
    assert os.listdir(out) == ["labels.npy"]
    assert no_new_tasks(client, before)
    merged_on_workers = [  # (not the task handing the count on)
        record for record in stream.data
        if str(record["key"]).startswith("merge_summaries-")
        and "-value-" not in str(record["key"])]
    first_progress = events.index("progress")
    if on_worker:
        assert len(merged_on_workers) == 1
        assert "merge here" not in events
        assert events[:first_progress] == ["map tile_summary",
                                           "map label_run_answered"]
    else:
        assert merged_on_workers == []
        assert events.count("merge here") == 1
        assert events.index("map label_run_answered") > \
            events.index("merge here") \
            > first_progress


@pytest.mark.parametrize("hosts", [1, 2])
def test_components_workers_on_two_hosts_write_with_pwrite(
        client, tmp_path, monkeypatch, hosts):
    """Labels are written through shared mappings only when every worker
    is on one host (one page cache); workers on two hosts (here: the
    scheduler made to report two) write with pwrite, which sends only
    the bytes written.  The same labels either way."""
    from gridgraph.core import tiling
    monkeypatch.setattr(distributed, "cluster_hosts", lambda client: {
        f"10.0.0.{k}" for k in range(hosts)})
    made = []
    real_make_sink = tiling.make_sink

    def make_sink(*arguments, **keywords):
        made.append(real_make_sink(*arguments, **keywords))
        return made[-1]

    monkeypatch.setattr(tiling, "make_sink", make_sink)
    assert_components_on_dask(client, tmp_path, 15, (40, 44))
    assert [sink.mapped for sink in made] == [hosts == 1]


@pytest.mark.parametrize("connectivity", [8, 16])
def test_cost_distance_thread_pool_identical(tmp_path, connectivity):
    """The same scheduling of tile solves in a thread pool (several tiles
    in flight, solved from different snapshots) gives the in-memory pairs
    bit for bit."""
    from concurrent.futures import ThreadPoolExecutor
    cost = costs((33, 29), 40 + connectivity)
    for row, col in SOURCES:
        cost[row, col] = 1.0
    expected = cost_distance(cost, SOURCES, source_ids=[1, 2, 3],
                             connectivity=connectivity)
    with ThreadPoolExecutor(3) as pool:
        result = cost_distance(save_npy(tmp_path, "cost", cost), SOURCES,
                               source_ids=[1, 2, 3],
                               connectivity=connectivity, tile_size=TILE,
                               executor=pool)
    assert_same(result, expected, ["accumulated", "direction", "allocation"])


@pytest.mark.parametrize("where", ["threads", "dask"])
def test_mst_edge_list_by_sample_sort(cluster, tmp_path, monkeypatch, where):
    """With tasks elsewhere (threads; Dask workers sharing out_dir) the
    sorted edge list comes from a sample sort over per-tile run files:
    ranges of 100 edges here, so dozens of ranges cut through the runs;
    identical to the in-memory list (NaN weights last)."""
    from concurrent.futures import ThreadPoolExecutor

    from gridgraph.core.mst.tiled import edge_list
    monkeypatch.setattr(edge_list, "RANGE_EDGES", 100)
    calls = []
    original = edge_list.sample_sort
    monkeypatch.setattr(edge_list, "sample_sort",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    values = np.random.default_rng(8).integers(0, 7, (29, 26)).astype(
        np.float32)
    values[3, 4] = values[10, :5] = np.nan
    expected = minimum_spanning_tree(values, connectivity=8)
    out = tmp_path / "out"
    out.mkdir()
    memmap = save_npy(tmp_path, "values", values)
    pool = ThreadPoolExecutor(2) if where == "threads" else None
    executor = pool if pool is not None else cluster[1]
    try:
        result = minimum_spanning_tree(memmap, connectivity=8,
                                       tile_size=TILE, executor=executor,
                                       out_dir=out)
    finally:
        if pool is not None:
            pool.shutdown()
    assert calls == [1]
    assert_same(result, expected, ["edges", "weights", "parent_direction"])
    assert result.total_weight == expected.total_weight
    assert sorted(os.listdir(out)) == ["edges.npy", "parent_direction.npy",
                                       "weights.npy"]


def test_tiles_sized_from_the_workers_memory(client):
    """A Dask executor always tiles, with automatic tiles sized from the
    smallest worker memory limit per thread, not the driver's memory."""
    from gridgraph.core import tiling
    from gridgraph.core.costdistance import tiled
    workers = client.scheduler_info()["workers"].values()
    per_thread = min(w["memory_limit"] / w["nthreads"] for w in workers)
    shape = (70000, 50000)
    grid = tiling.plan(shape, None, None, tiled.IN_MEMORY_BYTES_PER_CELL,
                       tiled.TILE_BYTES_PER_CELL, client)
    assert grid.tile_size == tiling.auto_tile_size(
        shape, per_thread, tiled.TILE_BYTES_PER_CELL, 1)
    small = tiling.plan((16, 16), None, None, 1, 1, client)
    assert small is not None and small.tile_size == 16  # not in memory
    limited = tiling.plan(shape, None, 64, tiled.IN_MEMORY_BYTES_PER_CELL,
                          tiled.TILE_BYTES_PER_CELL, client)
    assert limited.tile_size == tiling.auto_tile_size(
        shape, 64 * 2**20, tiled.TILE_BYTES_PER_CELL, 1)
    assert tiling.executor_workers(client) == sum(
        w["nthreads"] for w in workers)
