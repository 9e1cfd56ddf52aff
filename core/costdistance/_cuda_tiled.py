"""The tiled cost distance's tile tasks on the GPU, the tiles' states kept
on the device between rounds.

The CPU tasks (:mod:`.tiled`) read a tile, build its frame (the tile with
a ``margin``-wide halo of neighbours) and compute predecessors and labels
on the host; with ``backend="cuda"`` the old tasks did the same and only
ran the searches on the GPU, copying 16 bytes a cell each way per solve.
Here a tile's state is a :class:`DeviceTile`: its costs (NaN on
barriers), distances and hops in device memory.  The raster is read once
per tile (its first solve); the frame, the predecessors (``_cuda.
_predecessors``: the rule of the in-memory kernels, the same cells as
``_cpu.canonical_predecessors``), the allocation labels (pointer jumping
to the first known cell of each path, as ``_cpu.walk_to_roots`` walks)
and the output blocks are computed on the device; only band messages,
halos and the finished output blocks cross the bus.

A :class:`DeviceTile` also behaves as the host state ``(distance, hops)``
(iteration, indexing and pickling copy it to the host), so every driver
and executor can hold it: the in-process driver keeps tiles in
:class:`DeviceStates` (an LRU cache with a device memory budget that
spills the least recently used tiles to the host cache, as
:class:`HostTile`), a Dask worker returns host copies (:func:`_for_executor`:
device memory is not held past a task, and Dask sees the states' sizes),
and every task uploads a host state again (:func:`_device_tile`).

Every value is computed by the same kernels and expressions as the
in-memory CUDA backend, so the outputs are the CPU backend's, bit for bit.

Memory: before a task uploads or builds anything it checks (after freeing
numba's deferred deallocations) that the GPU holds one task's working set
(:func:`task_device_bytes`) and raises BackendUnavailableError naming the
fix (a smaller ``tile_size``, or ``backend="cpu"``) instead of a raw out of
memory error mid-round; :class:`DeviceStates` keeps states only up to the
usable memory less that working set.

Re-running a task: ``solve_round_tile`` and ``hops_tile`` lower the
distances and hops of the DeviceTile they are given in place (``_lower``,
``_relax_distances``, ``_inner_hops``).  That is idempotent: the values
written are minima over the same seeds and neighbours, so a task run again
on a state it already lowered finds nothing lower and returns the same band
messages and state.  On a Dask worker a task returns a host copy
(:func:`_for_executor`), so a retried task starts from its input's host
arrays anyway.
"""

import sys
import threading
from collections import OrderedDict

import numpy as np
from numba import cuda

from .._cuda_common import (FLAT_THREADS, blocks_for, check_device_memory,
                            copy_to_device, copy_to_host, device_scalar,
                            release_deferred_frees, usable_device_memory,
                            valid_cells_device)
from . import _cuda
from ._cuda import _step_from
from .tiled.band import band_cells
from .tiled.budget import HOPS_UNREACHED, PREDECESSOR_UNREACHED

# Share of the GPU's free memory (when the cache is made) that holds tile
# states; the rest is for one tile's frame and the solve's work arrays.
DEVICE_STATE_SHARE = 0.5
# A fixed budget in bytes instead (tests: 0 spills every state but one).
DEVICE_STATE_BYTES = None
# The states' budget when the driver cannot say how much memory is free.
UNKNOWN_DEVICE_STATE_BYTES = 2**30
# Device bytes a frame cell of one task needs at its peak (the output
# round): the tile's own state (costs <= 8, distances 8, hops 8), the
# frame's costs, distances and hops (24), labels, flags and known cells
# (10), predecessors (1), roots (8) and the output blocks (accumulated 8,
# direction 4, allocation 8).  The hops round needs less (no labels,
# blocks or roots; tight masks 2).
TASK_BYTES_PER_CELL = 88
# A state's bytes a cell (costs at most float64, distances, hops).
STATE_BYTES_PER_CELL = 24
# Output blocks are written in this many row bands per output, in
# parallel (pwrite releases the GIL; one thread wrote ~2 GB/s), by a pool
# made per task and shut down with it (no threads outlive a run).
WRITE_BANDS = 8
# The tasks' device work, one task at a time per process (tile tasks on a
# pool's threads overlap their reads and writes only): kernels on the
# default stream serialise anyway, and the CUDA simulator cannot run two.
DEVICE_LOCK = threading.RLock()


# --------------------------------------------------------------------------
# the state


class DeviceTile:
    """A tile's state on the GPU: ``cost`` (the tile's costs in the
    kernels' dtype, NaN on barriers), ``dist`` (float64: +inf unreached,
    -inf barriers) and ``hops`` (int64, HOPS_UNREACHED unset), flat.

    As a host state it is ``(distance, hops)``: iterating, indexing or
    pickling it copies them to the host."""

    on_device = True

    def __init__(self, rows, cols, cost, dist, hops, delta):
        self.rows = rows
        self.cols = cols
        self.cost = cost
        self.dist = dist
        self.hops = hops
        self.delta = delta

    @property
    def nbytes(self):
        return self.rows * self.cols * (self.cost.dtype.itemsize + 16)

    def to_host(self):
        return copy_to_host(self.dist), copy_to_host(self.hops)

    def __len__(self):
        return 2

    def __iter__(self):
        return iter(self.to_host())

    def __getitem__(self, index):
        return (copy_to_host(self.dist), copy_to_host(self.hops))[index]

    def __reduce__(self):
        return tuple, (self.to_host(),)


def is_device_state(state):
    return getattr(state, "on_device", False)


class HostTile(tuple):
    """A host state ``(distance, hops)`` of a run on the GPU (a state
    :class:`DeviceStates` spilled): every task, the label and output
    rounds' too, uploads it again rather than running on the CPU."""

    for_device = True


def task_device_bytes(rows, cols, margin):
    """GPU memory one tile task needs for a ``rows`` x ``cols`` tile with a
    ``margin``-wide halo (its state included)."""
    frame = (rows + 2 * margin) * (cols + 2 * margin)
    return frame * TASK_BYTES_PER_CELL \
        + 32 * (frame // (_cuda.TILE * _cuda.TILE) + 1)


def check_task_memory(rows, cols, margin):
    """BackendUnavailableError (naming tile_size and backend='cpu') when
    the GPU cannot hold one task on a ``rows`` x ``cols`` tile besides what
    it holds already (the kept states)."""
    release_deferred_frees()  # numba frees dropped arrays lazily
    check_device_memory(task_device_bytes(rows, cols, margin),
                        f"a {rows} x {cols} tile of the tiled cost distance")


class DeviceStates:
    """The in-process driver's tile states: :class:`DeviceTile` objects
    kept on the GPU up to ``budget_bytes`` (least recently used spilled to
    ``host``, the driver's host cache, as ``(distance, hops)``); anything
    else goes to ``host`` as it is.

    The budget is the usable device memory less one task's working set on
    a ``tile_size`` tile (:func:`task_device_bytes`) and the states of the
    other ``workers - 1`` tasks in flight (uploaded, not yet put), at most
    DEVICE_STATE_SHARE of it.  A tile handed to a task (:meth:`get`) is
    never spilled until the task's new state comes back (:meth:`put`): a
    pool thread may be changing it; a spill copies under DEVICE_LOCK."""

    def __init__(self, host, tile_size=0, margin=0, budget_bytes=None,
                 workers=1):
        self.host = host
        if budget_bytes is None:
            budget_bytes = DEVICE_STATE_BYTES
        if budget_bytes is None:
            with DEVICE_LOCK:
                if tile_size:  # fail before the first round
                    check_task_memory(tile_size, tile_size, margin)
                usable = usable_device_memory()
            if usable is None:
                budget_bytes = UNKNOWN_DEVICE_STATE_BYTES
            else:
                in_flight = (max(workers, 1) - 1) * tile_size * tile_size \
                    * STATE_BYTES_PER_CELL
                budget_bytes = max(0, min(
                    DEVICE_STATE_SHARE * usable,
                    usable - task_device_bytes(tile_size, tile_size, margin)
                    - in_flight))
        self.budget = budget_bytes
        self.used = 0
        self.device = OrderedDict()
        self.lent = set()

    def get(self, tile):
        if tile in self.device:
            self.device.move_to_end(tile)
            self.lent.add(tile)
            return self.device[tile]
        state = self.host.get(tile)
        return None if state is None else HostTile(state)

    def returned(self):
        """Every task that read states without putting them back (label
        and output tasks, which only read) has finished: their tiles may
        be spilled again (a first pass stopped at a tie is followed by the
        hops rounds, which put new states)."""
        self.lent.clear()

    def put(self, tile, state):
        self.lent.discard(tile)
        old = self.device.pop(tile, None)
        if old is not None:
            self.used -= old.nbytes
        if not is_device_state(state):
            self.host.put(tile, state)
            return
        self.device[tile] = state
        self.used += state.nbytes
        # least recently used first; never the state just put
        for victim in list(self.device)[:-1]:
            if self.used <= self.budget:
                break
            if victim in self.lent:
                continue
            victim_state = self.device.pop(victim)
            self.used -= victim_state.nbytes
            with DEVICE_LOCK:
                host_state = victim_state.to_host()
            self.host.put(victim, host_state)


def _on_dask_worker():
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


def _for_executor(tile):
    """A task's new state as it leaves the task: on a Dask worker its host
    copy (a :class:`HostTile`: Dask sees its size and may spill it, the
    device memory is freed, a retried task starts from it), else the
    :class:`DeviceTile` itself."""
    if _on_dask_worker():
        with DEVICE_LOCK:
            return HostTile(tile.to_host())
    return tile


# --------------------------------------------------------------------------
# kernels


@cuda.jit(cache=True)
def _init_tile(cost, valid, n, unset, dist, hops):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        if valid[i]:
            dist[i] = np.inf
        else:
            cost[i] = np.nan
            dist[i] = -np.inf
        hops[i] = unset


@cuda.jit(cache=True)
def _barrier_costs(cost, valid, n):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n and not valid[i]:
        cost[i] = np.nan


@cuda.jit(cache=True)
def _gather(values, cells, m, out):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        out[k] = values[cells[k]]


@cuda.jit(cache=True)
def _lower(cells, values, m, zero_hops, dist, hops):
    """dist[cells[k]] = values[k]; hops 0 for the first ``zero_hops`` (the
    sources)."""
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        dist[cells[k]] = values[k]
        if k < zero_hops:
            hops[cells[k]] = 0


@cuda.jit(device=True, inline=True)
def _ring_index(fr, fc, rows, cols, margin):
    """Index in the halo (frame order, the tile skipped) of frame cell
    (fr, fc), -1 inside the tile."""
    frame_cols = cols + 2 * margin
    if fr < margin:
        return fr * frame_cols + fc
    if fr >= margin + rows:
        return margin * frame_cols + rows * 2 * margin \
            + (fr - margin - rows) * frame_cols + fc
    if fc < margin:
        return margin * frame_cols + (fr - margin) * 2 * margin + fc
    if fc >= margin + cols:
        return margin * frame_cols + (fr - margin) * 2 * margin + fc - cols
    return -1


@cuda.jit(cache=True)
def _build_frame(rows, cols, margin, cost, dist, hops, halo_distance,
                 halo_hops, halo_cost, halo_label, halo_flag, with_labels,
                 frame_cost, frame_dist, frame_hops, frame_label, frame_flag,
                 frame_known):
    """The tile and its halo in one frame: float64 costs (NaN on barriers
    and outside the raster, where the halo's distance is -inf), distances,
    hops; with ``with_labels`` the halo's labels and flags, and which cells
    are known (the halo)."""
    frame_cols = cols + 2 * margin
    cell = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if cell >= (rows + 2 * margin) * frame_cols:
        return
    fr = cell // frame_cols
    fc = cell - fr * frame_cols
    k = _ring_index(fr, fc, rows, cols, margin)
    if k < 0:
        inner = (fr - margin) * cols + fc - margin
        frame_cost[cell] = np.float64(cost[inner])
        frame_dist[cell] = dist[inner]
        frame_hops[cell] = hops[inner]
        if with_labels:
            frame_label[cell] = 0
            frame_flag[cell] = 0
            frame_known[cell] = 0
        return
    d = halo_distance[k]
    frame_dist[cell] = d
    frame_cost[cell] = halo_cost[k] if d > -np.inf else np.nan
    frame_hops[cell] = halo_hops[k]
    if with_labels:
        if halo_label.shape[0] > 0:
            frame_label[cell] = halo_label[k]
            frame_flag[cell] = halo_flag[k]
        else:
            frame_label[cell] = 0
            frame_flag[cell] = 0
        frame_known[cell] = 1


@cuda.jit(cache=True)
def _set_hops(cells, m, value, hops):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        hops[cells[k]] = value


@cuda.jit(cache=True)
def _inner_hops(frame_hops, rows, cols, margin, hops):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < rows * cols:
        r = i // cols
        c = i - r * cols
        hops[i] = frame_hops[(r + margin) * (cols + 2 * margin) + c + margin]


@cuda.jit(cache=True)
def _label_sources(cells, ids, m, label, flag, known):
    k = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if k < m:
        label[cells[k]] = ids[k]
        flag[cells[k]] = 0
        known[cells[k]] = 1


@cuda.jit(cache=True)
def _frame_roots(pred, known, n, frame_cols, offsets, root):
    """root[i]: i for known cells and cells without a predecessor, else the
    cell its predecessor code points at."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        p = pred[i]
        if known[i] or p < 0:
            root[i] = i
        else:
            root[i] = i + offsets[p, 0] * frame_cols + offsets[p, 1]


@cuda.jit(cache=True)
def _take_root_labels(root, n, label, flag):
    """Every cell takes the label of its root (roots are never written, so
    no cell reads one being written)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        x = root[i]
        if x != i:
            label[i] = label[x]
            flag[i] = flag[x]


@cuda.jit(cache=True)
def _output_blocks(rows, cols, margin, frame_dist, pred, frame_label,
                   single, single_id, degrees, accumulated, direction,
                   allocation, want_accumulated, want_direction,
                   want_allocation):
    """The tile's output blocks from its frame (as ``tiled.tile_outputs``):
    accumulated cost (NaN where unreached), GRASS direction (0 at sources,
    NaN where unreached) and allocation (0 where unreached)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i >= rows * cols:
        return
    r = i // cols
    cell = (r + margin) * (cols + 2 * margin) + i - r * cols + margin
    p = pred[cell]
    if want_accumulated:
        accumulated[i] = np.nan if p == PREDECESSOR_UNREACHED \
            else frame_dist[cell]
    if want_direction:
        if p >= 0:
            direction[i] = degrees[p]
        elif p == PREDECESSOR_UNREACHED:
            direction[i] = np.nan
        else:
            direction[i] = 0.0
    if want_allocation:
        if p == PREDECESSOR_UNREACHED:
            allocation[i] = 0
        elif single:
            allocation[i] = single_id
        else:
            allocation[i] = frame_label[cell]


@cuda.jit(cache=True)
def _count_ties(cost, dist, hops, frame_rows, frame_cols, margin, rows, cols,
                connectivity, offsets, passed, half_step, count):
    """count[0] += the tile's cells (the frame's inner ``rows`` x ``cols``)
    that are reached, not sources (hops 0) and have two tight neighbours
    or more: the only cells whose predecessor the hops decide (as
    ``_cpu.canonical_predecessors`` counts them without the hops)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i >= rows * cols:
        return
    r = i // cols
    row = r + margin
    col = i - r * cols + margin
    cell = row * frame_cols + col
    cb = np.float64(cost[cell])
    own = dist[cell]
    if cb != cb or not own < np.inf or hops[cell] == 0:
        return
    tight = 0
    for k in range(connectivity):
        neighbour, candidate = _step_from(cost, dist, frame_rows, frame_cols,
                                          row, col, k, offsets, passed,
                                          half_step, cb, own)
        if neighbour >= 0 and candidate == own:
            tight += 1
    if tight > 1:
        cuda.atomic.add(count, 0, 1)


@cuda.jit(cache=True)
def _single_allocation(dist, n, single_id, out):
    """The allocation of a run with one source id: that id where a source
    reaches (finite distance), 0 elsewhere; no tree read."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        d = dist[i]
        out[i] = single_id if (d < np.inf and d > -np.inf) else 0


@cuda.jit(cache=True)
def _finite_or_nan(dist, n, out):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        d = dist[i]
        out[i] = d if (d < np.inf and d > -np.inf) else np.nan


# --------------------------------------------------------------------------
# per-shape constants (a handful of tile shapes per run)

_CACHE_LOCK = threading.Lock()
_GRIDS = {}
_BANDS = {}


def _grid(rows, cols, connectivity, step_lengths):
    key = (rows, cols, connectivity,
           tuple(float(s) for s in np.asarray(step_lengths).reshape(-1)))
    with _CACHE_LOCK:
        grid = _GRIDS.get(key)
        if grid is None:
            if len(_GRIDS) > 64:
                _GRIDS.clear()
            grid = _GRIDS[key] = _cuda._Grid(rows, cols, connectivity,
                                             step_lengths)
        return grid


def _band(rows, cols, margin):
    """(flat band cells of the tile on the host, on the device, and the
    band cells' frame indices on the device)."""
    key = (rows, cols, margin)
    with _CACHE_LOCK:
        band = _BANDS.get(key)
        if band is None:
            if len(_BANDS) > 64:
                _BANDS.clear()
            band_r, band_c = band_cells(rows, cols, margin)
            flat = band_r * cols + band_c
            framed = (band_r + margin) * (cols + 2 * margin) + band_c + margin
            band = _BANDS[key] = (flat, cuda.to_device(flat),
                                  cuda.to_device(framed))
        return band


def _launch(n):
    return blocks_for(n, FLAT_THREADS), FLAT_THREADS


def _gather_host(values, cells_device):
    m = cells_device.size
    out = cuda.device_array(m, dtype=values.dtype)
    if m:
        _gather[_launch(m)](values, cells_device, m, out)
    return out.copy_to_host()


def _framed(cells, cols, margin):
    """Flat tile cells as flat frame cells."""
    cells = np.asarray(cells, dtype=np.int64)
    rows_of, cols_of = np.divmod(cells, max(cols, 1))
    return (rows_of + margin) * (cols + 2 * margin) + cols_of + margin


# --------------------------------------------------------------------------
# the tile and its frame


def _device_tile(cost_source, window, nodata, state, step_lengths, margin):
    """``state`` as a :class:`DeviceTile`: itself, or the tile read and
    uploaded (its host ``(distance, hops)`` when given, else fresh); first
    the check that the GPU holds the task (:func:`check_task_memory`)."""
    if is_device_state(state):
        with DEVICE_LOCK:
            check_task_memory(window.rows, window.cols, margin)
        return state
    raw = cost_source.read(window)  # outside the lock: reads overlap
    with DEVICE_LOCK:
        check_task_memory(window.rows, window.cols, margin)
        return _upload_tile(raw, window, nodata, state, step_lengths)


def _upload_tile(raw, window, nodata, state, step_lengths):
    rows, cols = window.rows, window.cols
    n = rows * cols
    cost, valid = valid_cells_device(raw, nodata,
                                     _cuda.cost_dtype(raw.dtype))
    if state is None:
        dist = cuda.device_array(n, dtype=np.float64)
        hops = cuda.device_array(n, dtype=np.int64)
        if n:
            _init_tile[_launch(n)](cost, valid, n, HOPS_UNREACHED, dist, hops)
    else:
        # a host state (spilled, or moved from another process): its
        # barriers already hold -inf
        dist = copy_to_device(np.asarray(state[0], dtype=np.float64))
        hops = copy_to_device(np.asarray(state[1], dtype=np.int64))
        if n:
            _barrier_costs[_launch(n)](cost, valid, n)
    del valid
    delta = _cuda.default_delta(cost, n, step_lengths) if n else np.inf
    return DeviceTile(rows, cols, cost, dist, hops, delta)


class _Frame:
    """A tile's frame on the device (``tiled.trees._tile_frame``'s
    arrays): costs (float64, NaN on barriers), distances, hops, and with
    ``labels`` the halo's labels, flags and known cells."""

    def __init__(self, tile, margin, halo, labels=False):
        rows, cols = tile.rows, tile.cols
        self.rows, self.cols, self.margin = rows, cols, margin
        self.frame_rows = rows + 2 * margin
        self.frame_cols = cols + 2 * margin
        n = self.n = self.frame_rows * self.frame_cols
        self.cost = cuda.device_array(n, dtype=np.float64)
        self.dist = cuda.device_array(n, dtype=np.float64)
        self.hops = cuda.device_array(n, dtype=np.int64)
        size = n if labels else 0
        self.label = cuda.device_array(max(size, 1), dtype=np.int64)
        self.flag = cuda.device_array(max(size, 1), dtype=np.uint8)
        self.known = cuda.device_array(max(size, 1), dtype=np.uint8)
        with_halo_labels = labels and halo.label is not None
        halo_label = cuda.to_device(
            halo.label if with_halo_labels else np.zeros(0, np.int64))
        halo_flag = cuda.to_device(
            halo.flag if with_halo_labels else np.zeros(0, np.uint8))
        _build_frame[_launch(n)](
            rows, cols, margin, tile.cost, tile.dist, tile.hops,
            cuda.to_device(np.asarray(halo.distance, dtype=np.float64)),
            cuda.to_device(np.asarray(halo.hops, dtype=np.int64)),
            cuda.to_device(np.asarray(halo.cost, dtype=np.float64)),
            halo_label, halo_flag, labels, self.cost, self.dist, self.hops,
            self.label, self.flag, self.known)

    def predecessors(self, connectivity, step_lengths):
        grid = _grid(self.frame_rows, self.frame_cols, connectivity,
                     step_lengths)
        pred = cuda.device_array(self.n, dtype=np.int8)
        _cuda._predecessors[_launch(self.n)](
            self.cost, self.dist, self.hops, self.frame_rows,
            self.frame_cols, connectivity, grid.offsets, grid.passed,
            grid.half_step, pred)
        return pred, grid

    def tied_cells(self, grid):
        """The tile's cells whose predecessor needs the hops
        (:func:`_count_ties`); read before the hops rounds ran, only the
        sources' hops 0 are known."""
        count = cuda.to_device(np.zeros(1, dtype=np.int64))
        n = self.rows * self.cols
        if n:
            _count_ties[_launch(n)](
                self.cost, self.dist, self.hops, self.frame_rows,
                self.frame_cols, self.margin, self.rows, self.cols,
                grid.connectivity, grid.offsets, grid.passed,
                grid.half_step, count)
        return int(device_scalar(count, 0))

    def label_trees(self, pred, grid, source_local, source_ids):
        """Every cell's label and flag: those of the first known cell on
        its predecessor path (the halo, or a source with its id: the first
        listing of a cell wins)."""
        source_local = np.asarray(source_local, dtype=np.int64)
        if source_local.size:
            framed, first = np.unique(
                _framed(source_local, self.cols, self.margin),
                return_index=True)
            ids = np.asarray(source_ids, dtype=np.int64)[first]
            m = framed.size
            _label_sources[_launch(m)](cuda.to_device(framed),
                                       cuda.to_device(ids), m, self.label,
                                       self.flag, self.known)
        n = self.n
        root = cuda.device_array(n, dtype=np.int64)
        _frame_roots[_launch(n)](pred, self.known, n, self.frame_cols,
                                 grid.offsets, root)
        changed = cuda.to_device(np.ones(1, dtype=np.int32))
        while int(device_scalar(changed, 0)):
            changed[0] = 0
            _cuda._jump_roots[_launch(n)](root, n, changed)
        _take_root_labels[_launch(n)](root, n, self.label, self.flag)


# --------------------------------------------------------------------------
# the round tasks (the signatures of tiled's)


def solve_round_tile(cost_source, window, nodata, state, source_local, seeds,
                     margin, offsets, step_lengths, max_cost, passed=None):
    """``tiled.solve_round_tile`` on the GPU: returns ``((band_distance,
    inf), DeviceTile)``.  The sources get (0, 0) and the band cells whose
    received distance beats their own take it (as ``_apply_seeds``), then
    the tile is relaxed from them (``solve_seeded``'s phase "distance").
    No settle bound on the GPU: every cell is settled, none left pending
    (the driver's ``bound`` is for the CPU's Dijkstra)."""
    tile = _device_tile(cost_source, window, nodata, state, step_lengths,
                        margin)
    with DEVICE_LOCK:
        rows, cols = window.rows, window.cols
        band, band_device, _ = _band(rows, cols, margin)
        current = _gather_host(tile.dist, band_device)
        sources = np.unique(np.asarray(source_local, dtype=np.int64))
        if sources.size:
            current[np.isin(band, sources)] = 0.0
        seeds = np.asarray(seeds, dtype=np.float64)
        lowered = seeds < current  # barriers hold -inf: never beaten
        current[lowered] = seeds[lowered]
        cells = np.concatenate([sources, band[lowered]])
        if cells.size == 0:
            return (current, np.inf), _for_executor(tile)
        values = np.concatenate([np.zeros(sources.size), seeds[lowered]])
        m = cells.size
        _lower[_launch(m)](cuda.to_device(cells), cuda.to_device(values), m,
                           sources.size, tile.dist, tile.hops)
        grid = _grid(rows, cols, len(offsets), step_lengths)
        wake, tile_key = grid.tiles_around(cells, values)
        _cuda._relax_distances(grid, tile.cost, tile.dist, tile.hops, False,
                               HOPS_UNREACHED, float(max_cost),
                               cuda.to_device(wake), cuda.to_device(tile_key),
                               tile.delta, None, None)
        return ((_gather_host(tile.dist, band_device), np.inf),
                _for_executor(tile))


def hops_tile(cost_source, window, nodata, state, margin, source_local,
              halo, offsets, passed, step_lengths):
    """``tiled.hops_tile`` on the GPU: returns ``(band_hops, DeviceTile)``.

    The tile's frame is relaxed (``solve_seeded``'s phase "hops": tight
    moves only) from its sources (hops 0) and the reached halo cells.
    Paths that leave the tile into the halo and come back may lower a tile
    cell below what the CPU's search (halo read only) gives on one visit,
    but both are lengths of tight paths and the rounds stop only at the
    global least fixed point, so the final hops are the same."""
    tile = _device_tile(cost_source, window, nodata, state, step_lengths,
                        margin)
    with DEVICE_LOCK:
        rows, cols = window.rows, window.cols
        frame = _Frame(tile, margin, halo)
        sources = _framed(
            np.unique(np.asarray(source_local, dtype=np.int64)), cols, margin)
        if sources.size:
            _set_hops[_launch(sources.size)](cuda.to_device(sources),
                                             sources.size, 0, frame.hops)
        halo_distance = np.asarray(halo.distance)
        reached = np.flatnonzero((halo_distance > -np.inf)
                                 & (halo_distance < np.inf))
        seeds = np.concatenate([sources,
                                _ring_cells(rows, cols, margin)[reached]])
        _, band_device, _ = _band(rows, cols, margin)
        if seeds.size == 0:
            return _gather_host(tile.hops, band_device), _for_executor(tile)
        grid = _grid(frame.frame_rows, frame.frame_cols, len(offsets),
                     step_lengths)
        keys = np.concatenate([np.zeros(sources.size),
                               halo_distance[reached]])
        wake, tile_key = grid.tiles_around(seeds, keys)
        _cuda._relax_hops(grid, _cuda._tight(grid, frame.cost, frame.dist),
                          frame.dist, frame.hops, HOPS_UNREACHED,
                          cuda.to_device(wake), cuda.to_device(tile_key),
                          np.inf, None, None)
        n = rows * cols
        if n:
            _inner_hops[_launch(n)](frame.hops, rows, cols, margin,
                                    tile.hops)
        return _gather_host(tile.hops, band_device), _for_executor(tile)


def _ring_cells(rows, cols, margin):
    """Frame indices of the halo cells, in halo order."""
    key = ("ring", rows, cols, margin)
    with _CACHE_LOCK:
        ring = _BANDS.get(key)
    if ring is None:
        frame_cols = cols + 2 * margin
        inside = np.zeros((rows + 2 * margin, frame_cols), bool)
        inside[margin:margin + rows, margin:margin + cols] = True
        ring = np.flatnonzero(~inside.reshape(-1))
        with _CACHE_LOCK:
            _BANDS[key] = ring
    return ring


def _trees(tile, margin, source_local, source_ids, halo, offsets,
           step_lengths, labels, use_hops=True):
    """``(frame, pred, ties)`` of a tile (``tiled.trees.tile_trees`` on the
    GPU): without ``use_hops`` ``ties`` counts the cells whose
    predecessor the hops decide, and with ties the trees are not labelled
    (read without the hops they may hold a cycle on a zero-cost plateau,
    where the pointer jumping would never end)."""
    frame = _Frame(tile, margin, halo, labels)
    pred, grid = frame.predecessors(len(offsets), step_lengths)
    ties = 0 if use_hops else frame.tied_cells(grid)
    if labels and not ties:
        frame.label_trees(pred, grid, source_local, source_ids)
    return frame, pred, ties


def tile_band_labels(cost_source, window, nodata, state, margin,
                     source_local, source_ids, halo, offsets, passed,
                     step_lengths, use_hops=True):
    """``tiled.tile_band_labels`` on the GPU: ``(band_label, band_flag,
    ties)``, the labels zeros when the tile's cells tie without the
    hops."""
    tile = _device_tile(cost_source, window, nodata, state, step_lengths,
                        margin)
    with DEVICE_LOCK:
        frame, _, ties = _trees(tile, margin, source_local, source_ids, halo,
                                offsets, step_lengths, True, use_hops)
        band, _, framed = _band(window.rows, window.cols, margin)
        if ties:  # labelled again with the hops
            return (np.zeros(band.size, np.int64),
                    np.zeros(band.size, np.uint8), ties)
        return (_gather_host(frame.label, framed),
                _gather_host(frame.flag, framed), 0)


def tile_output_blocks(cost_source, window, nodata, state, margin,
                       source_local, source_ids, halo, offsets, passed,
                       step_lengths, outputs, single_id, dtypes=None,
                       use_hops=True):
    """``tiled.tile_outputs`` on the GPU: ``(blocks, ties)``, the blocks
    as device arrays (flat) by output name, None when the tile's cells
    tie without the hops; ``dtypes`` (by name) the sinks' dtypes."""
    from . import GRASS_DIRECTION_DEGREES
    dtypes = dict(dtypes or {})
    rows, cols = window.rows, window.cols
    n = rows * cols
    tile = _device_tile(cost_source, window, nodata, state, step_lengths,
                        margin)
    with DEVICE_LOCK:
        if halo is None:  # no tree read: no direction, one source id
            blocks = {}
            if "accumulated" in outputs:
                blocks["accumulated"] = cuda.device_array(n, np.float64)
                if n:
                    _finite_or_nan[_launch(n)](tile.dist, n,
                                               blocks["accumulated"])
            if "allocation" in outputs:
                blocks["allocation"] = cuda.device_array(
                    n, dtypes.get("allocation", np.int64))
                if n:
                    _single_allocation[_launch(n)](
                        tile.dist, n, single_id, blocks["allocation"])
            return blocks, 0
        single = single_id is not None
        frame, pred, ties = _trees(tile, margin, source_local, source_ids,
                                   halo, offsets, step_lengths, not single,
                                   use_hops)
        if ties:  # made once the hops are known
            return None, ties
        blocks = {
            "accumulated": cuda.device_array(
                n if "accumulated" in outputs else 1, dtype=np.float64),
            "direction": cuda.device_array(
                n if "direction" in outputs else 1, dtype=np.float32),
            "allocation": cuda.device_array(
                n if "allocation" in outputs else 1,
                dtype=dtypes.get("allocation", np.int64))}
        if n:
            _output_blocks[_launch(n)](
                rows, cols, margin, frame.dist, pred, frame.label, single,
                single_id if single else 0,
                cuda.to_device(GRASS_DIRECTION_DEGREES.astype(np.float32)),
                blocks["accumulated"], blocks["direction"],
                blocks["allocation"], "accumulated" in outputs,
                "direction" in outputs, "allocation" in outputs)
        return {name: blocks[name] for name in outputs}, 0


def tile_outputs(cost_source, window, nodata, state, *arguments,
                 use_hops=True):
    """``tiled.tile_outputs`` on the GPU: ``(blocks, ties)``, the blocks
    as host arrays (None with ties)."""
    shape = (window.rows, window.cols)
    with DEVICE_LOCK:
        blocks, ties = tile_output_blocks(cost_source, window, nodata, state,
                                          *arguments, use_hops=use_hops)
        if blocks is None:
            return None, ties
        return {name: copy_to_host(block).reshape(shape)
                for name, block in blocks.items()}, 0


def write_outputs(sinks, cost_source, window, *arguments, use_hops=True):
    """``tiled.write_outputs`` on the GPU: each block copied to the host
    (pinned staging) and written in row bands in parallel on a pool made
    for the task and shut down when its writes are done or one failed (no
    thread outlives the task); returns the tile's tie count (with ties
    nothing is written)."""
    from concurrent.futures import ThreadPoolExecutor, wait
    rows, cols = window.rows, window.cols
    with DEVICE_LOCK:
        blocks, ties = tile_output_blocks(
            cost_source, window, *arguments,
            dtypes={name: sink.dtype for name, sink in sinks.items()},
            use_hops=use_hops)
        if blocks is None:
            return ties
        hosts = {name: copy_to_host(blocks.pop(name)).reshape(rows, cols)
                 for name in sinks}
    bounds = [rows * i // WRITE_BANDS for i in range(WRITE_BANDS + 1)]
    with ThreadPoolExecutor(WRITE_BANDS, "gridgraph-tile-writes") as pool:
        futures = []
        for name, sink in sinks.items():
            host = hosts.pop(name)
            for a, b in zip(bounds, bounds[1:]):
                if b > a:
                    part = type(window)(window.row + a, window.col, b - a,
                                        cols)
                    futures.append(pool.submit(sink.write, part, host[a:b]))
        wait(futures)  # all done (or failed) before the sinks may be aborted
    for future in futures:
        future.result()
    return 0
