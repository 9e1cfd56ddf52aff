"""The tiled paths' tile rounds on the GPU (core/costdistance/_cuda_tiled.py,
core/components/_cuda_tiled.py): tile states and labels kept on the
device, spilled or labelled again when the device budget is too small,
outputs identical to the in-memory CPU runs.  Rasters are sized from the
kernels' tile constants so that the tiled path's tiles (2 x the GPU tile)
cross several GPU tiles and leave partial tiles at the edges."""

import os
import pickle
import sys

import numpy as np
import pytest

from gridgraph.core import connected_components, cost_distance
from gridgraph.core.components import _cuda as components_cuda
from gridgraph.core.components import _cuda_tiled as components_tiled
from gridgraph.core.costdistance import _cuda, _cuda_tiled

# the CPU tiles' task spy, from the tests folder
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from test_tiled_costdistance import tree_task_spy  # noqa: E402

CD_SIDE = 2 * _cuda.TILE  # the tiled path's tile: 8 on the simulator
CC_SIDE = 2 * components_cuda.TILE_W


def _plateau_cost(shape, seed):
    rng = np.random.default_rng(seed)
    cost = rng.integers(0, 3, shape).astype(np.float32)  # zeros: ties
    cost[rng.random(shape) < 0.12] = np.nan
    return cost


def _same_cost_outputs(tiled, in_memory):
    for name in ("accumulated", "direction", "allocation"):
        got = np.asarray(getattr(tiled, name))
        want = getattr(in_memory, name)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_cost_distance_states_spilled_to_the_host(monkeypatch, tmp_path):
    """With no device budget every tile state but the last is spilled to
    the host cache and uploaded again by its next task: same outputs (to
    disk, three source ids, ties and barriers)."""
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 5)
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1), (CD_SIDE, CD_SIDE + 1)]
    for cell in sources:
        cost[cell] = 1.0
    monkeypatch.setattr(_cuda_tiled, "DEVICE_STATE_BYTES", 0)
    spilled = []
    put = _cuda_tiled.DeviceStates.put

    def counting_put(self, tile, state):
        put(self, tile, state)
        spilled.append(self.used <= state.nbytes if _cuda_tiled.
                       is_device_state(state) else None)

    monkeypatch.setattr(_cuda_tiled.DeviceStates, "put", counting_put)
    tiled = cost_distance(cost, sources, 8, source_ids=[1, 2, 3],
                          backend="cuda", tile_size=CD_SIDE,
                          out_dir=str(tmp_path))
    assert spilled and all(spilled)  # at most one tile held on the device
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8,
                                            source_ids=[1, 2, 3],
                                            backend="cpu"))


def test_device_tile_is_a_host_state():
    """A DeviceTile reads, indexes and pickles as the host (distance,
    hops) pair, so any cache or executor may hold it."""
    from gridgraph.core.tiling import ArraySource, Window
    cost = np.ones((CD_SIDE, CD_SIDE + 3))
    cost[2, 2] = np.nan
    window = Window(0, 0, *cost.shape)
    (band, pending_key), tile = _cuda_tiled.solve_round_tile(
        ArraySource(cost), window, None, None, np.array([0]),
        np.full(2 * (cost.shape[0] + cost.shape[1]) - 4, np.inf), 1,
        np.array([[-1, 0], [0, -1], [0, 1], [1, 0]]), np.ones(4), np.inf)
    distance, hops = tile
    assert distance[0] == 0 and distance[2 * cost.shape[1] + 2] == -np.inf
    assert distance[-1] == cost.shape[0] - 1 + cost.shape[1] - 1
    assert hops[0] == 0
    again = pickle.loads(pickle.dumps(tile))
    assert isinstance(again, tuple)
    np.testing.assert_array_equal(again[0], distance)
    np.testing.assert_array_equal(tile[1], hops)
    assert band[0] == 0.0 and pending_key == np.inf


@pytest.mark.parametrize("keep_bytes", [None, 0])
def test_components_tiles_on_the_gpu(monkeypatch, tmp_path, keep_bytes):
    """The components' tile rounds on the GPU (labels kept on the device,
    or with no budget labelled again) give the in-memory CPU labels, in
    both modes and connectivities, to disk and in memory."""
    monkeypatch.setattr(components_tiled, "KEEP_BYTES", keep_bytes)
    rng = np.random.default_rng(11)
    shape = (2 * CC_SIDE + 3, 2 * CC_SIDE + 5)  # 3 x 3 tiles
    values = rng.integers(0, 3, shape).astype(np.float64)
    values[rng.random(shape) < 0.1] = np.nan
    for connectivity, mode in ((4, "equal"), (8, "nonzero")):
        want = connected_components(values, connectivity, mode,
                                    backend="cpu")
        for out_dir in (None, str(tmp_path)):
            got = connected_components(values, connectivity, mode,
                                       backend="cuda", tile_size=CC_SIDE,
                                       out_dir=out_dir)
            assert got.count == want.count
            np.testing.assert_array_equal(np.asarray(got.labels),
                                          want.labels)
            assert np.asarray(got.labels).dtype == want.labels.dtype


def test_tiled_gpu_tasks_on_a_thread_pool():
    """The GPU tile tasks under a pool executor (two at once: reads and
    writes overlap, the device work one task at a time; device states in
    the driver's cache): the same outputs as in memory on the CPU."""
    from concurrent.futures import ThreadPoolExecutor
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 7)
    sources = [(1, 1), (shape[0] - 2, shape[1] - 2)]
    for cell in sources:
        cost[cell] = 1.0
    with ThreadPoolExecutor(2) as pool:
        tiled = cost_distance(cost, sources, 8, source_ids=[1, 2],
                              backend="cuda", tile_size=CD_SIDE,
                              executor=pool)
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8,
                                            source_ids=[1, 2],
                                            backend="cpu"))


@pytest.mark.parametrize("ids,connectivity", [([1, 2, 3], 8), ([4, 4, 4], 8),
                                              ([1, 2, 3], 16)])
def test_tiled_gpu_reads_the_trees_without_hops_first(monkeypatch, ids,
                                                       connectivity):
    """The GPU tiles, as the CPU's, read their trees without the hops
    first (rounds.HOPS_ONLY_FOR_TIES; the device counts the tied cells,
    _cuda_tiled._count_ties): real-valued costs run no hops round, a
    zero-cost plateau stops the first pass at its first tied tile, runs
    the hops and does the unfinished tiles again.  The same tasks with the
    same tie counts as the CPU tiles, in the same order, and the in-memory
    run's rasters."""
    shape = (3 * CD_SIDE + 3, 3 * CD_SIDE - 1)
    rng = np.random.default_rng(21)
    smooth = rng.random(shape) + 0.5
    smooth[rng.random(shape) < 0.08] = np.nan
    plateau = smooth.copy()
    plateau[2 * CD_SIDE:2 * CD_SIDE + 6, 3:9] = 0.0  # ties, in two tiles
    sources = [(1, 2), (shape[0] - 2, shape[1] - 3), (CD_SIDE + 1, 12)]
    calls = tree_task_spy(monkeypatch, CD_SIDE, -(-shape[1] // CD_SIDE))
    for cost, ties in ((smooth, False), (plateau, True)):
        for cell in sources:
            cost[cell] = 1.0
        expected = cost_distance(cost, sources, connectivity,
                                 source_ids=ids, backend="cpu")
        runs = {}
        for backend in ("cpu", "cuda"):
            calls.clear()
            result = cost_distance(cost, sources, connectivity,
                                   source_ids=ids, backend=backend,
                                   tile_size=CD_SIDE)
            _same_cost_outputs(result, expected)
            assert (result.hops_visits > 0) == ties, backend
            runs[backend] = list(calls)
        assert runs["cuda"] == runs["cpu"]
        first = [found for _, _, use, found in runs["cuda"] if not use]
        assert first and all(found == 0 for found in first[:-1])
        assert (first[-1] > 0) == ties
        assert any(use for _, _, use, _ in runs["cuda"]) == ties


@pytest.mark.parametrize("ids", [[1, 2, 3], [4, 4, 4]])
def test_tiled_gpu_ties_written_to_disk(tmp_path, ids):
    """A plateau's ties with the outputs written by the GPU tasks
    (_cuda_tiled.write_outputs, whose tiles with ties are written once the
    hops are known): the in-memory run's rasters, and no file but the
    outputs left."""
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 17)
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1), (CD_SIDE, CD_SIDE + 1)]
    for cell in sources:
        cost[cell] = 1.0
    tiled = cost_distance(cost, sources, 8, source_ids=ids, backend="cuda",
                          tile_size=CD_SIDE, out_dir=str(tmp_path))
    assert tiled.hops_visits > 0
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8, source_ids=ids,
                                            backend="cpu"))
    assert sorted(os.listdir(tmp_path)) == [
        "accumulated.npy", "allocation.npy", "direction.npy"]


def test_tiled_gpu_allocation_of_one_id_reads_no_tree(monkeypatch):
    """With one source id and no direction the GPU tiles read no tree
    (no predecessor kernel): the id wherever a source reaches within the
    maximum cost, 0 past it and on barriers
    (_cuda_tiled._single_allocation), and no hops round on a plateau."""
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 23)
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1)]
    for cell in sources:
        cost[cell] = 1.0
    frames = []
    predecessors = _cuda_tiled._Frame.predecessors

    def counted(self, *arguments):
        frames.append(self)
        return predecessors(self, *arguments)

    monkeypatch.setattr(_cuda_tiled._Frame, "predecessors", counted)
    outputs = ("accumulated", "allocation")
    options = dict(source_ids=[6, 6], max_cost=3.0)
    tiled = cost_distance(cost, sources, 8, backend="cuda",
                          tile_size=CD_SIDE, outputs=outputs, **options)
    assert not frames and tiled.hops_visits == 0
    cpu = cost_distance(cost, sources, 8, backend="cpu", **options)
    for name in outputs:
        np.testing.assert_array_equal(getattr(tiled, name),
                                      getattr(cpu, name), err_msg=name)
    assert set(np.unique(tiled.allocation).tolist()) == {0, 6}
    # cut off by the maximum cost: reachable cells left at 0
    assert ((tiled.allocation == 0) & ~np.isnan(cost)).any()


@pytest.mark.parametrize("outputs", [("accumulated",), ("direction",)])
def test_tiled_gpu_only_the_asked_outputs(outputs, tmp_path):
    """Only the asked-for outputs (no trees for accumulated cost alone):
    the in-memory CPU run's, the others None."""
    shape = (CD_SIDE + 5, 2 * CD_SIDE + 1)
    cost = _plateau_cost(shape, 9)
    sources = [(0, 1), (shape[0] - 1, shape[1] - 2)]
    for cell in sources:
        cost[cell] = 1.0
    tiled = cost_distance(cost, sources, 4, source_ids=[3, 4],
                          backend="cuda", tile_size=CD_SIDE,
                          out_dir=str(tmp_path), outputs=outputs)
    cpu = cost_distance(cost, sources, 4, source_ids=[3, 4], backend="cpu")
    for name in ("accumulated", "direction", "allocation"):
        if name in outputs:
            np.testing.assert_array_equal(np.asarray(getattr(tiled, name)),
                                          getattr(cpu, name), err_msg=name)
        else:
            assert getattr(tiled, name) is None


# --------------------------------------------------------------------------
# memory, faults and cancels on the GPU tile rounds


class _SmallGpu:
    """A context whose GPU has ``free`` bytes free (of 16 GiB)."""

    def __init__(self, free):
        self.free = free

    def get_memory_info(self):
        return self.free, 16 * 2**30


def _small_gpu(monkeypatch, usable):
    from gridgraph.core import _cuda_common
    # usable = free - 256 MiB of room for the context
    context = _SmallGpu(256 * 2**20 + usable)
    monkeypatch.setattr(_cuda_common.cuda, "current_context",
                        lambda: context)


def _gridgraph_run_threads():
    """The run's own threads still alive (the process-wide warm-up and
    pinned-copy helpers excluded)."""
    import threading
    return [t.name for t in threading.enumerate()
            if t.name.startswith("gridgraph-")
            and not t.name.startswith(("gridgraph-warmup", "gridgraph-copy"))]


def _nothing_left(folder):
    import os
    left = [os.path.join(root, name) for root, dirs, files in os.walk(folder)
            for name in dirs + files]
    assert left == [], left  # no output, .partial or scratch folder
    assert _gridgraph_run_threads() == []


def test_tiled_gpu_too_small_names_the_fix(monkeypatch, tmp_path):
    """A tile too large for the GPU's free memory (an explicit tile_size
    on a small GPU): BackendUnavailableError naming tile_size and the CPU
    backend before anything is uploaded, for both operations; nothing
    left in the output folder."""
    from gridgraph.core import BackendUnavailableError
    cost = _plateau_cost((CD_SIDE + 3, CD_SIDE + 2), 3)
    cost[0, 0] = 1.0
    # one cost-distance task on a CD_SIDE tile needs more than 1 KiB
    _small_gpu(monkeypatch, 1024)
    with pytest.raises(BackendUnavailableError,
                       match=r"(?s)tiled cost distance.*tile_size.*"
                             r"backend='cpu'"):
        cost_distance(cost, [(0, 0)], 8, backend="cuda", tile_size=CD_SIDE,
                      out_dir=str(tmp_path))
    _nothing_left(tmp_path)
    values = np.ones((CC_SIDE + 3, CC_SIDE + 1), np.float32)
    with pytest.raises(BackendUnavailableError,
                       match=r"(?s)tiled connected components.*tile_size.*"
                             r"backend='cpu'"):
        connected_components(values, 8, backend="cuda", tile_size=CC_SIDE,
                             out_dir=str(tmp_path))
    _nothing_left(tmp_path)


def test_device_budgets_leave_room_for_one_task(monkeypatch):
    """The caches keep states and labels only up to the usable memory less
    one task's working set (floor 0), and a fixed budget when the driver
    cannot say how much is free (never unbounded)."""
    from gridgraph.core import BackendUnavailableError
    from gridgraph.core.tiling import ArraySource, TileGrid
    task = _cuda_tiled.task_device_bytes(CD_SIDE, CD_SIDE, 2)
    _small_gpu(monkeypatch, task + 1000)
    assert _cuda_tiled.DeviceStates({}, CD_SIDE, 2).budget == 1000
    # two more tasks in flight (a pool of 3): their states too
    _small_gpu(monkeypatch, task + 1000 + 2 * 24 * CD_SIDE ** 2)
    assert _cuda_tiled.DeviceStates({}, CD_SIDE, 2, workers=3).budget \
        == 1000
    _small_gpu(monkeypatch, task + 1000)
    values = np.ones((2 * CC_SIDE, CC_SIDE), np.float32)
    windows = [TileGrid(values.shape, CC_SIDE).window(r, 0)
               for r in range(2)]
    rounds = components_tiled.TileRounds(ArraySource(values), windows, 8,
                                         "nonzero", None)
    assert rounds.budget <= task + 1000 - rounds.task_bytes
    _small_gpu(monkeypatch, rounds.task_bytes + 100)
    assert components_tiled.TileRounds(
        ArraySource(values), windows, 8, "nonzero", None).budget \
        == 100
    _small_gpu(monkeypatch, rounds.task_bytes - 1)
    with pytest.raises(BackendUnavailableError, match="tile_size"):
        components_tiled.TileRounds(ArraySource(values), windows, 8,
                                    "nonzero", None)

    def no_query():
        raise RuntimeError("no memory query")

    from gridgraph.core import _cuda_common
    monkeypatch.setattr(_cuda_common.cuda, "current_context", no_query)
    assert _cuda_tiled.DeviceStates({}, CD_SIDE, 2).budget \
        == _cuda_tiled.UNKNOWN_DEVICE_STATE_BYTES
    assert components_tiled.TileRounds(
        ArraySource(values), windows, 8, "nonzero", None).budget \
        == components_tiled.UNKNOWN_KEEP_BYTES


def test_tiled_gpu_disk_full_while_writing_bands(monkeypatch, tmp_path):
    """A band write that fails (disk full) in the GPU output round: the
    typed DiskFullError surfaces, no output, .partial or scratch is left,
    and no writer thread outlives the run; the same for components."""
    import errno
    import threading

    from gridgraph.core import DiskFullError
    from gridgraph.core import tile_io
    lock = threading.Lock()
    calls = []

    def failing_fifth(real):
        """``real``, failing with ENOSPC at its fifth call of any thread."""
        def call(*arguments):
            with lock:
                calls.append(arguments)
                fail = len(calls) == 5
            if fail:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*arguments)
        return call

    monkeypatch.setattr(tile_io.NpySink, "_write",
                        failing_fifth(tile_io.NpySink._write))
    shape = (CD_SIDE + 1, CD_SIDE + 3)
    cost = _plateau_cost(shape, 4)
    cost[0, 0] = 1.0
    # cost distance's outputs written with pwrite fail at the fifth band
    from gridgraph.core.costdistance import rounds
    monkeypatch.setattr(rounds, "MAPPED_OUTPUT_WRITES", False)
    with pytest.raises(DiskFullError):
        cost_distance(cost, [(0, 0)], 8, backend="cuda", tile_size=CD_SIDE,
                      out_dir=str(tmp_path))
    assert len(calls) >= 5
    _nothing_left(tmp_path)
    # ...and through mappings (the default) at the fifth band copied
    put_into = tile_io._put_into
    calls.clear()
    monkeypatch.setattr(rounds, "MAPPED_OUTPUT_WRITES", True)
    monkeypatch.setattr(tile_io, "_put_into", failing_fifth(put_into))
    with pytest.raises(DiskFullError):
        cost_distance(cost, [(0, 0)], 8, backend="cuda", tile_size=CD_SIDE,
                      out_dir=str(tmp_path))
    assert len(calls) >= 5
    _nothing_left(tmp_path)
    monkeypatch.setattr(tile_io, "_put_into", put_into)
    # components: labels written with pwrite fail at the fifth window;
    # written through mappings, the disk is found full when the file's
    # blocks are reserved (posix_fallocate), before any tile is labelled
    from gridgraph.core.components import tiled as label_round
    values = np.random.default_rng(2).integers(0, 3, (2 * CC_SIDE + 1,
                                                      CC_SIDE + 3))
    monkeypatch.setattr(label_round, "MAPPED_LABEL_WRITES", False)
    calls.clear()
    with pytest.raises(DiskFullError):
        connected_components(values.astype(np.float32), 8, backend="cuda",
                             tile_size=CC_SIDE, out_dir=str(tmp_path))
    assert len(calls) >= 5
    _nothing_left(tmp_path)

    def full_disk(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(label_round, "MAPPED_LABEL_WRITES", True)
    monkeypatch.setattr(tile_io.os, "posix_fallocate", full_disk)
    with pytest.raises(DiskFullError):
        connected_components(values.astype(np.float32), 8, backend="cuda",
                             tile_size=CC_SIDE, out_dir=str(tmp_path))
    _nothing_left(tmp_path)


@pytest.mark.parametrize("operation", ["cost distance", "components"])
def test_tiled_gpu_cancel_during_the_rounds(operation, tmp_path):
    """The progress callback stops the run in the middle of the GPU
    rounds: CancelledError, nothing left, no reader or writer threads."""
    from gridgraph.core import CancelledError
    seen = []

    def cancel_midway(fraction):
        seen.append(fraction)
        return fraction < 0.5

    with pytest.raises(CancelledError):
        if operation == "cost distance":
            cost = _plateau_cost((2 * CD_SIDE + 1, CD_SIDE + 3), 6)
            cost[0, 0] = 1.0
            cost_distance(cost, [(0, 0)], 8, backend="cuda",
                          tile_size=CD_SIDE, out_dir=str(tmp_path),
                          progress=cancel_midway)
        else:
            values = np.random.default_rng(3).integers(
                0, 3, (2 * CC_SIDE + 1, CC_SIDE + 3)).astype(np.float32)
            connected_components(values, 8, backend="cuda",
                                 tile_size=CC_SIDE, out_dir=str(tmp_path),
                                 progress=cancel_midway)
    assert 0.0 < max(seen) < 1.0
    _nothing_left(tmp_path)


def test_tiled_gpu_max_cost_and_uint8_nodata():
    """On the GPU tile rounds: a maximum cost (cells past it unreached),
    and uint8 costs with a nodata value (barriers) -- the in-memory CPU
    run's outputs, bit for bit."""
    shape = (CD_SIDE + 3, CD_SIDE + 5)  # 2 x 2 tiles, partial at the edges
    cost = _plateau_cost(shape, 8)
    sources = [(0, 0), (shape[0] - 1, 2)]
    for cell in sources:
        cost[cell] = 1.0
    cpu = cost_distance(cost, sources, 8, source_ids=[1, 2], max_cost=4.5,
                        backend="cpu")
    assert np.isnan(cpu.accumulated).sum() > np.isnan(cost).sum()  # cut
    _same_cost_outputs(
        cost_distance(cost, sources, 8, source_ids=[1, 2], max_cost=4.5,
                      backend="cuda", tile_size=CD_SIDE), cpu)
    rng = np.random.default_rng(9)
    small = rng.integers(1, 4, shape).astype(np.uint8)
    small[rng.random(shape) < 0.15] = 255
    for cell in sources:
        small[cell] = 2
    assert (small == 255).any()
    _same_cost_outputs(
        cost_distance(small, sources, 4, source_ids=[5, 6], nodata=255,
                      backend="cuda", tile_size=CD_SIDE),
        cost_distance(small, sources, 4, source_ids=[5, 6], nodata=255,
                      backend="cpu"))


class _FakeDeviceTile:
    """Stands for a DeviceTile in the cache tests: nbytes, to_host."""

    on_device = True
    nbytes = 100

    def __init__(self, value):
        self.value = value
        self.copied = 0

    def to_host(self):
        self.copied += 1
        return (np.full(2, self.value), np.zeros(2, np.int64))


class _HostCache(dict):
    def put(self, tile, state):
        self[tile] = state


def test_device_states_never_spill_a_lent_tile():
    """A tile handed to a task is not spilled (a pool thread may be
    changing it) until its new state comes back; spilled tiles come back
    as HostTile, which the label and output rounds run on the GPU."""
    from gridgraph.core.costdistance.tiled.trees import _on_device
    host = _HostCache()
    states = _cuda_tiled.DeviceStates(host, budget_bytes=150)
    first, second, third = (_FakeDeviceTile(v) for v in (1.0, 2.0, 3.0))
    states.put(1, first)
    assert states.get(1) is first  # lent to a task
    states.put(2, second)  # over budget: 1 is lent, nothing spilled
    assert first.copied == 0 and states.used == 200
    states.put(3, third)  # 2 is the least recently used not lent
    assert second.copied == 1 and 2 in host and 1 not in host
    spilled = states.get(2)
    assert isinstance(spilled, _cuda_tiled.HostTile) and _on_device(spilled)
    np.testing.assert_array_equal(spilled[0], [2.0, 2.0])
    states.put(1, first)  # back from its task: may be spilled now
    assert states.get(99) is None


def test_device_states_returned_after_a_first_pass(monkeypatch):
    """Label and output tasks only read their states (nothing put back):
    once a first pass without the hops has stopped at a tie, its tiles
    are handed back (DeviceStates.returned) before the hops rounds put new
    states, so those may spill them again."""
    host = _HostCache()
    states = _cuda_tiled.DeviceStates(host, budget_bytes=150)
    first, second = _FakeDeviceTile(1.0), _FakeDeviceTile(2.0)
    states.put(1, first)
    assert states.get(1) is first  # read by a label task
    states.returned()
    states.put(2, second)  # over budget: 1 is no longer lent
    assert first.copied == 1 and 1 in host and states.used == 100

    # a plateau with three source ids: the label round's first pass reads
    # device states, stops at a tie and hands them back before the hops
    from gridgraph.core.costdistance import rounds
    shape = (2 * CD_SIDE + 3, 2 * CD_SIDE - 1)
    cost = _plateau_cost(shape, 29)
    sources = [(0, 0), (shape[0] - 1, shape[1] - 1), (CD_SIDE, CD_SIDE + 1)]
    for cell in sources:
        cost[cell] = 1.0
    monkeypatch.setattr(_cuda_tiled, "DEVICE_STATE_BYTES", 1 << 30)
    lent = []
    run_hops = rounds.Trees.run_hops

    def counted(self, progress):
        lent.append(sorted(self.states.lent))
        return run_hops(self, progress)

    monkeypatch.setattr(rounds.Trees, "run_hops", counted)
    tiled = cost_distance(cost, sources, 8, source_ids=[1, 2, 3],
                          backend="cuda", tile_size=CD_SIDE)
    assert lent == [[]] and tiled.hops_visits > 0
    _same_cost_outputs(tiled, cost_distance(cost, sources, 8,
                                            source_ids=[1, 2, 3],
                                            backend="cpu"))


def test_dask_worker_tasks_return_host_states():
    """On a Dask worker a task's state leaves as a host copy (HostTile):
    no device memory held between tasks, its size visible to Dask."""
    distributed = pytest.importorskip("distributed")
    tile = _FakeDeviceTile(4.0)
    assert _cuda_tiled._for_executor(tile) is tile  # not on a worker
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                  processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        state = client.submit(_cuda_tiled._for_executor, tile).result()
    assert isinstance(state, _cuda_tiled.HostTile)
    np.testing.assert_array_equal(state[0], [4.0, 4.0])
