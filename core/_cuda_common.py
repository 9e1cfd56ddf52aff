"""Pieces shared by the CUDA kernels of every operation.

Imported only when the ``cuda`` backend runs (the operations import their
``_cuda`` module lazily), so a machine without CUDA never loads it.  Under
numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, used by CI) the same
kernels run as Python threads; the few libdevice intrinsics used here get
plain-Python equivalents there, and the launch shapes shrink so that tiny
test rasters still cross tile seams.

Contents: bit casts and non-contracted float arithmetic, a device-memory
check, staged host <-> device copies, valid cells tested on the device,
block-aggregated appends, an exclusive prefix sum, an OR/AND reduction,
and a stable LSD radix sort of int64 keys (optionally carrying a second
int64 array).
"""

import math
import os
import sys
import threading
import time

import numpy as np
from numba import config, cuda

from ._common import nodata_in_dtype
from .errors import BackendUnavailableError

SIMULATOR = bool(config.ENABLE_CUDASIM)


def _lock_simulator_shared_arrays():
    """Make the simulator's ``cuda.shared.array`` thread-safe.

    The simulator finds a block's shared array by the calling line in a
    table it fills on first use, without a lock: two threads of a launch's
    first block can both miss, allocate, and end up writing different
    arrays (seen once in 1500 launches of a two-array kernel), which
    breaks any kernel at random.  Same lookup, under a lock.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared_class = kernelapi.FakeCUDAShared
    if getattr(shared_class, "locked_by_gridgraph", False):
        return
    unlocked_array = shared_class.array
    lock = threading.Lock()

    def array(self, shape, dtype):
        if shape == 0 or not hasattr(self, "_allocations"):
            return unlocked_array(self, shape, dtype)  # dynamic: no table
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                found = np.empty(shape, dtype)
                self._allocations[key] = found
        return found

    shared_class.array = array
    shared_class.locked_by_gridgraph = True


if SIMULATOR:
    _lock_simulator_shared_arrays()

# Threads per block and items per thread of the generic kernels (scan,
# reduction, radix sort).  The simulator runs every thread as a Python
# thread and every barrier costs milliseconds there, so it gets tiny blocks.
SCAN_THREADS = 8 if SIMULATOR else 256
SCAN_ITEMS = 32 if SIMULATOR else 8
SORT_THREADS = 8 if SIMULATOR else 64
SORT_ITEMS = 4 if SIMULATOR else 64
# Row stride of the per-thread digit counters in shared memory: two spare
# slots put the rows of consecutive digits in different banks.
SORT_STRIDE = SORT_THREADS + 2
SORT_COUNTERS = (1 << 8) * SORT_STRIDE
RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
FLAT_THREADS = 32 if SIMULATOR else 256

INT64_MAX = np.iinfo(np.int64).max


# --------------------------------------------------------------------------
# Bit casts and float arithmetic that NVVM may not fuse into an FMA (numba
# compiles CUDA code with FMA contraction on unless told otherwise, which
# would change the last bit of ``d + a * b`` compared with the CPU).

if SIMULATOR:
    def float32_bits(x):
        """Bit pattern of float32 ``x`` as a signed integer."""
        return int(np.array(x, dtype=np.float32).view(np.int32))

    def float64_bits(x):
        """Bit pattern of float64 ``x`` as a signed integer."""
        return int(np.array(x, dtype=np.float64).view(np.int64))

    def add_rn(x, y):
        """float64 ``x + y`` rounded to nearest, never fused."""
        return np.float64(x) + np.float64(y)

    def mul_rn(x, y):
        """float64 ``x * y`` rounded to nearest, never fused."""
        return np.float64(x) * np.float64(y)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, cache=True)
    def float32_bits(x):
        """Bit pattern of float32 ``x`` as a signed integer."""
        return libdevice.float_as_int(np.float32(x))

    @cuda.jit(device=True, cache=True)
    def float64_bits(x):
        """Bit pattern of float64 ``x`` as a signed integer."""
        return libdevice.double_as_longlong(np.float64(x))

    @cuda.jit(device=True, cache=True)
    def add_rn(x, y):
        """float64 ``x + y`` rounded to nearest, never fused."""
        return libdevice.dadd_rn(np.float64(x), np.float64(y))

    @cuda.jit(device=True, cache=True)
    def mul_rn(x, y):
        """float64 ``x * y`` rounded to nearest, never fused."""
        return libdevice.dmul_rn(np.float64(x), np.float64(y))


# --------------------------------------------------------------------------
# Host-side helpers.

def blocks_for(n, per_block):
    """Number of blocks of ``per_block`` items that cover ``n`` items (>= 1)."""
    return max(1, (int(n) + per_block - 1) // per_block)


def usable_device_memory():
    """Bytes the kernels may allocate on the current GPU (free memory less
    room for the context, kernels and allocator slack), or None when the
    driver cannot say."""
    try:
        free, _ = cuda.current_context().get_memory_info()
    except Exception:  # pragma: no cover - a driver without the query
        return None
    return free - max(256 * 2**20, free // 20)


def release_deferred_frees():
    """Free the device arrays numba keeps for deferred deallocation (up to
    a fifth of the device), so that a memory query that follows sees them
    free; nothing where the context has no such queue (the simulator)."""
    try:
        deallocations = cuda.current_context().deallocations
    except Exception:  # the simulator; a driver without a context
        return
    deallocations.clear()


def gpu_tile_size(n_cells, bytes_for_cells):
    """None when ``bytes_for_cells(n_cells)`` fits the GPU, else the largest
    power-of-two tile side (>= 8) whose cells take at most half of it, so
    the operation's tiled path can run its tiles there."""
    usable = usable_device_memory()
    if usable is None or bytes_for_cells(n_cells) <= usable:
        return None
    side = 8
    while bytes_for_cells(4 * side * side) <= usable // 2:
        side *= 2
    return side


def gpu_tiled_plan(values, band, memory_limit_mb, executor, bytes_for_cells,
                   plan):
    """For a raster the in-memory CUDA kernel cannot hold: the operation's
    tiled ``plan`` with tiles that fit the GPU (None when it fits).

    ``bytes_for_cells(n_cells, dtype)`` is the kernel's device memory for
    ``n_cells`` cells of the raster's dtype.
    """
    from . import tiling
    source = tiling.open_source(values, band)
    rows, cols = source.shape
    side = gpu_tile_size(rows * cols,
                         lambda n: bytes_for_cells(n, source.dtype))
    if side is None:
        return None
    return plan(values, band, side, memory_limit_mb, executor)


def check_device_memory(bytes_needed, what):
    """Raise before allocating when the GPU cannot hold ``bytes_needed``.

    The in-memory CUDA kernels need the whole raster and their work arrays
    on the device; until the block hierarchy runs on the GPU, a raster too
    large for it must go to the CPU backend.
    """
    try:
        free, total = cuda.current_context().get_memory_info()
    except Exception:  # pragma: no cover - a driver without the query
        return
    # Leave room for the CUDA context, kernels and allocator slack.
    usable = free - max(256 * 2**20, free // 20)
    if bytes_needed > usable:
        raise BackendUnavailableError(
            f"{what} needs about {bytes_needed / 2**30:.1f} GiB of GPU memory "
            f"but the GPU has {free / 2**30:.1f} GiB free of "
            f"{total / 2**30:.1f} GiB: set tile_size (TILE_SIZE) so that the "
            "tiled path runs the raster on the GPU tile by tile, or use "
            "backend='cpu'")


class PhaseTimer:
    """Adds the wall time of each phase to ``stats[name]`` (synchronising
    the device first); does nothing when ``stats`` is None.  For benchmarks:
    the synchronisation costs a little."""

    def __init__(self, stats):
        self.stats = stats
        self.last = time.perf_counter()

    def mark(self, name):
        """Close the phase that ran since the previous mark."""
        if self.stats is None:
            return
        cuda.synchronize()
        now = time.perf_counter()
        self.stats[name] = self.stats.get(name, 0.0) + now - self.last
        self.last = now


# --------------------------------------------------------------------------
# Large copies between the host and the device.
#
# Measured on an H100 box (2026-11-24, 1 GiB): device to host into fresh
# pageable memory 2.6 GB/s (the page faults of the fresh numpy array, on
# the copying thread), into touched pageable memory 10.9 GB/s, into pinned
# memory 55 GB/s; host to device from pageable memory 8 GB/s; pinning 1 GiB
# takes 1 s.  So large copies go through two small pinned staging buffers
# (pinned once per process): the DMA engine fills one while host threads
# copy the other to or from the numpy array, many threads at once, which
# spreads the page faults over the cores.

STAGE_BYTES = (1 << 12) if SIMULATOR else (64 << 20)
# Below this a plain copy is as fast.
STAGED_MIN_BYTES = 0 if SIMULATOR else (16 << 20)
_STAGES = []
_HOST_POOL = []
# The staging buffers are one pair per process: tile tasks in threads (the
# tiled components, the habitat network with an executor) copy one at a
# time, or one tile's bytes would land in another's array.
_STAGES_LOCK = threading.RLock()


def _stages():
    with _STAGES_LOCK:
        if not _STAGES:
            _STAGES.extend((cuda.pinned_array(STAGE_BYTES, dtype=np.uint8),
                            cuda.stream()) for _ in range(2))
    return _STAGES


def _host_pool():
    if not _HOST_POOL:
        from concurrent.futures import ThreadPoolExecutor
        workers = 2 if SIMULATOR else max(1, min(16, os.cpu_count() or 1))
        _HOST_POOL.append(ThreadPoolExecutor(workers, "gridgraph-copy"))
    return _HOST_POOL[0]


def _parallel_copy(source, target):
    """target[:] = source (flat uint8 arrays), in pieces on the host pool
    (numpy releases the GIL while it copies)."""
    pool = _host_pool()
    pieces = pool._max_workers
    size = source.size
    bounds = [size * i // pieces for i in range(pieces + 1)]
    futures = [pool.submit(np.copyto, target[a:b], source[a:b])
               for a, b in zip(bounds, bounds[1:]) if b > a]
    for future in futures:
        future.result()


def _byte_view(device_array):
    return device_array.reshape(device_array.size).view(np.uint8)


def copy_to_host(device_array, count=None):
    """The first ``count`` elements (all by default) of a flat device array
    as a new numpy array, copied through the pinned staging buffers."""
    count = device_array.size if count is None else int(count)
    out = np.empty(count, dtype=device_array.dtype)
    nbytes = out.nbytes
    if nbytes < STAGED_MIN_BYTES or count == 0:
        if count:
            device_array[:count].copy_to_host(out)
        return out
    cuda.synchronize()  # the kernels that wrote it ran on other streams
    source = _byte_view(device_array[:count])
    target = out.view(np.uint8)
    stages = _stages()
    chunks = [(a, min(a + STAGE_BYTES, nbytes))
              for a in range(0, nbytes, STAGE_BYTES)]

    def issue(i):
        a, b = chunks[i]
        buffer, stream = stages[i % 2]
        source[a:b].copy_to_host(buffer[:b - a], stream=stream)

    with _STAGES_LOCK:
        issue(0)
        for i, (a, b) in enumerate(chunks):
            if i + 1 < len(chunks):
                issue(i + 1)  # its buffer was emptied in the previous pass
            buffer, stream = stages[i % 2]
            stream.synchronize()
            _parallel_copy(buffer[:b - a], target[a:b])
    return out


def copy_to_device(array):
    """A new flat device array holding ``array`` (C order, native byte
    order), copied through the pinned staging buffers."""
    host = np.ascontiguousarray(array).reshape(-1)
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    if host.nbytes < STAGED_MIN_BYTES or host.size == 0:
        return cuda.to_device(host)
    out = cuda.device_array(host.size, dtype=host.dtype)
    target = _byte_view(out)
    source = host.view(np.uint8)
    nbytes = host.nbytes
    stages = _stages()
    with _STAGES_LOCK:
        for i, a in enumerate(range(0, nbytes, STAGE_BYTES)):
            b = min(a + STAGE_BYTES, nbytes)
            buffer, stream = stages[i % 2]
            stream.synchronize()  # its previous chunk has left the buffer
            _parallel_copy(source[a:b], buffer[:b - a])
            target[a:b].copy_to_device(buffer[:b - a], stream=stream)
        for _, stream in stages:
            stream.synchronize()
    return out


def device_scalar(array, index):
    """Read one element of a device array on the host."""
    return array[index:index + 1].copy_to_host()[0]


# --------------------------------------------------------------------------
# Valid cells on the device: NaN and the nodata value are tested in the
# raster's own dtype, exactly as gridgraph.core._common.valid_mask does on
# the host (which would cost a pass over the raster and a copy of the mask).

@cuda.jit(cache=True)
def _prepare_cells(raw, n, check_nan, has_nodata, nodata, cast, values,
                   valid):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i >= n:
        return
    x = raw[i]
    ok = True
    if check_nan and x != x:
        ok = False
    if has_nodata and x == nodata[0]:
        ok = False
    valid[i] = 1 if ok else 0
    if cast:
        values[i] = x


def nodata_test(dtype, nodata):
    """(test NaN, nodata in ``dtype`` or None): what
    :func:`gridgraph.core._common.valid_mask` compares with."""
    dtype = np.dtype(dtype)
    return np.issubdtype(dtype, np.floating), nodata_in_dtype(dtype, nodata)


def valid_cells_device(array, nodata, dtype=None):
    """Copy ``array`` to the device; returns flat device arrays (values in
    ``dtype``, default the array's own, and valid as uint8)."""
    raw = np.ascontiguousarray(array).reshape(-1)
    if not raw.dtype.isnative:
        raw = raw.astype(raw.dtype.newbyteorder("="))
    if raw.dtype == np.float16:  # no float16 kernels: the host's test
        from ._common import valid_mask
        valid = copy_to_device(valid_mask(raw, nodata).view(np.uint8))
        return copy_to_device(raw.astype(dtype or np.float32)), valid
    n = raw.size
    check_nan, nodata_value = nodata_test(raw.dtype, nodata)
    d_raw = copy_to_device(raw)
    cast = dtype is not None and raw.dtype != np.dtype(dtype)
    values = cuda.device_array(n, dtype=dtype) if cast else d_raw
    valid = cuda.device_array(n, dtype=np.uint8)
    nodata_array = cuda.to_device(np.array(
        [0 if nodata_value is None else nodata_value], dtype=raw.dtype))
    if n:
        _prepare_cells[blocks_for(n, FLAT_THREADS), FLAT_THREADS](
            d_raw, n, check_nan, nodata_value is not None, nodata_array,
            cast, values, valid)
    return values, valid


# --------------------------------------------------------------------------
# Block-wide building blocks (every thread of the block must call them).

@cuda.jit(device=True, cache=True)
def find_root(parent, x):
    """Root of x in a union-find forest, read only: for kernels where other
    threads may be reading the same entries and none is being joined."""
    while True:
        p = parent[x]
        if p == x:
            return x
        x = p


@cuda.jit(device=True, cache=True)
def find_halving(parent, x):
    """Root of x in a union-find forest, pointing every other entry on the
    way at its grandparent (path halving).  Safe beside concurrent finders
    and unions: it only writes entries that are no longer roots (they never
    become roots again) and only stores an ancestor, so every tree keeps its
    members and ``parent[x] <= x`` still holds where unions keep it."""
    while True:
        p = parent[x]
        if p == x:
            return x
        g = parent[p]
        if g != p:
            parent[x] = g
        x = g


@cuda.jit(device=True, cache=True)
def block_reserve(n_items, counter, scratch):
    """Reserve ``n_items`` consecutive slots of a global output list.

    ``counter`` (int64[1]) holds the list's length; ``scratch`` is a shared
    int64[2] array.  One global atomic per block instead of one per item.
    Returns the first reserved slot (meaningless when ``n_items`` is 0).
    """
    if cuda.threadIdx.x == 0:
        scratch[0] = 0
    cuda.syncthreads()
    local = np.int64(0)
    if n_items > 0:
        local = cuda.atomic.add(scratch, 0, n_items)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        scratch[1] = cuda.atomic.add(counter, 0, scratch[0])
    cuda.syncthreads()
    return scratch[1] + local


@cuda.jit(device=True, cache=True)
def block_exclusive_sum(value, scratch):
    """Exclusive prefix sum of ``value`` over the threads of the block.

    ``scratch`` is a shared int64 array with one slot per thread.  Returns
    (this thread's exclusive prefix, the block total).
    """
    t = cuda.threadIdx.x
    n = cuda.blockDim.x
    scratch[t] = value
    cuda.syncthreads()
    offset = 1
    while offset < n:
        add = np.int64(0)
        if t >= offset:
            add = scratch[t - offset]
        cuda.syncthreads()
        scratch[t] += add
        cuda.syncthreads()
        offset *= 2
    inclusive = scratch[t]
    total = scratch[n - 1]
    cuda.syncthreads()
    return inclusive - value, total


# --------------------------------------------------------------------------
# Exclusive prefix sum of an int64 device array, in place.

@cuda.jit(cache=True)
def _scan_chunks(values, n, chunk_totals):
    scratch = cuda.shared.array(SCAN_THREADS, np.int64)
    start = (np.int64(cuda.blockIdx.x) * SCAN_THREADS
             + cuda.threadIdx.x) * SCAN_ITEMS
    total = np.int64(0)
    for k in range(SCAN_ITEMS):
        if start + k < n:
            total += values[start + k]
    prefix, block_total = block_exclusive_sum(total, scratch)
    running = prefix
    for k in range(SCAN_ITEMS):
        if start + k < n:
            v = values[start + k]
            values[start + k] = running
            running += v
    if cuda.threadIdx.x == 0:
        chunk_totals[cuda.blockIdx.x] = block_total


@cuda.jit(cache=True)
def _add_chunk_offsets(values, n, chunk_offsets):
    offset = chunk_offsets[cuda.blockIdx.x]
    start = (np.int64(cuda.blockIdx.x) * SCAN_THREADS
             + cuda.threadIdx.x) * SCAN_ITEMS
    for k in range(SCAN_ITEMS):
        if start + k < n:
            values[start + k] += offset


def exclusive_scan(values, n):
    """Replace ``values[:n]`` (int64 device array) by its exclusive prefix
    sums.  Callers that need the total give the array one extra trailing
    zero and scan it too."""
    per_block = SCAN_THREADS * SCAN_ITEMS
    n_blocks = blocks_for(n, per_block)
    totals = cuda.device_array(n_blocks, dtype=np.int64)
    _scan_chunks[n_blocks, SCAN_THREADS](values, n, totals)
    if n_blocks > 1:
        exclusive_scan(totals, n_blocks)
        _add_chunk_offsets[n_blocks, SCAN_THREADS](values, n, totals)


# --------------------------------------------------------------------------
# Which bits vary over an int64 array: OR and AND of all elements.

@cuda.jit(cache=True)
def _or_and(values, n, result):
    scratch = cuda.shared.array(2, np.int64)
    if cuda.threadIdx.x == 0:
        scratch[0] = 0
        scratch[1] = -1
    cuda.syncthreads()
    start = (np.int64(cuda.blockIdx.x) * SCAN_THREADS
             + cuda.threadIdx.x) * SCAN_ITEMS
    any_bits = np.int64(0)
    all_bits = np.int64(-1)
    for k in range(SCAN_ITEMS):
        if start + k < n:
            v = values[start + k]
            any_bits |= v
            all_bits &= v
    cuda.atomic.or_(scratch, 0, any_bits)
    cuda.atomic.and_(scratch, 1, all_bits)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.atomic.or_(result, 0, scratch[0])
        cuda.atomic.and_(result, 1, scratch[1])


def varying_bits(values, n):
    """Bit mask of the bits that differ between elements of ``values[:n]``."""
    result = cuda.to_device(np.array([0, -1], dtype=np.int64))
    blocks = blocks_for(n, SCAN_THREADS * SCAN_ITEMS)
    _or_and[blocks, SCAN_THREADS](values, n, result)
    any_bits, all_bits = (int(v) for v in result.copy_to_host())
    return any_bits ^ all_bits


# --------------------------------------------------------------------------
# Stable LSD radix sort of int64 keys (signed order), 8 bits per pass.

@cuda.jit(device=True, cache=True)
def _digit(key, shift, flip):
    d = (key >> shift) & (RADIX - 1)
    if flip:
        d ^= RADIX >> 1  # the sign bit: negative keys first
    return d


@cuda.jit(cache=True)
def _radix_histogram(keys, n, shift, flip, table, n_blocks):
    """table[d * n_blocks + b] = keys of block b with digit d.

    Each thread counts its own keys in its own column of counters (no
    atomics: keys of a block often share the high digits), then each
    thread sums the rows of its digits.
    """
    counts = cuda.shared.array(SORT_COUNTERS, np.int16)
    t = cuda.threadIdx.x
    for d in range(RADIX):
        counts[d * SORT_STRIDE + t] = 0
    cuda.syncthreads()
    start = (np.int64(cuda.blockIdx.x) * SORT_THREADS + t) * SORT_ITEMS
    for k in range(SORT_ITEMS):
        if start + k < n:
            counts[_digit(keys[start + k], shift, flip) * SORT_STRIDE + t] += 1
    cuda.syncthreads()
    for d in range(t, RADIX, SORT_THREADS):
        total = 0
        for j in range(SORT_THREADS):
            total += counts[d * SORT_STRIDE + j]
        table[np.int64(d) * n_blocks + cuda.blockIdx.x] = total


@cuda.jit(cache=True)
def _radix_scatter(digit_keys, keys, carried, move_carried, n, shift, flip,
                   offsets, n_blocks, keys_out, carried_out):
    """Move every key to offsets[d, block] + its rank among the block's keys
    of digit d.  Thread t owns SORT_ITEMS consecutive keys, so ranking by
    (thread, item) keeps the pass stable; counts[d][t] holds how many keys
    of digit d thread t has, and a scan along each digit's row gives each
    thread its first rank, without a scan across digits."""
    # int16: a rank within a block stays below SORT_THREADS * SORT_ITEMS
    counts = cuda.shared.array(SORT_COUNTERS, np.int16)
    t = cuda.threadIdx.x
    for d in range(RADIX):
        counts[d * SORT_STRIDE + t] = 0
    cuda.syncthreads()
    start = (np.int64(cuda.blockIdx.x) * SORT_THREADS + t) * SORT_ITEMS
    for k in range(SORT_ITEMS):
        if start + k < n:
            d = _digit(digit_keys[start + k], shift, flip)
            counts[d * SORT_STRIDE + t] += 1
    cuda.syncthreads()
    for d in range(t, RADIX, SORT_THREADS):
        running = 0
        for j in range(SORT_THREADS):
            c = counts[d * SORT_STRIDE + j]
            counts[d * SORT_STRIDE + j] = running
            running += c
    cuda.syncthreads()
    for k in range(SORT_ITEMS):
        i = start + k
        if i < n:
            d = _digit(digit_keys[i], shift, flip)
            rank = counts[d * SORT_STRIDE + t]
            counts[d * SORT_STRIDE + t] = rank + 1
            target = offsets[np.int64(d) * n_blocks + cuda.blockIdx.x] + rank
            keys_out[target] = keys[i]
            if move_carried:
                carried_out[target] = carried[i]


def radix_sort(keys, n, carried=None):
    """Sort ``keys[:n]`` (int64, signed order) stably; with ``carried``,
    sort by (keys, carried) as one 128-bit key, keys most significant.

    Digits that are the same in every element are skipped.  Returns the
    device arrays holding the result (the inputs or their scratch twins).
    """
    if n <= 1:
        return keys, carried
    per_block = SORT_THREADS * SORT_ITEMS
    n_blocks = blocks_for(n, per_block)
    table = cuda.device_array(RADIX * n_blocks + 1, dtype=np.int64)
    keys_tmp = cuda.device_array(n, dtype=np.int64)
    move_carried = carried is not None
    carried_tmp = cuda.device_array(n if move_carried else 1, dtype=np.int64)
    if carried is None:
        carried = carried_tmp
    passes = []
    if move_carried:
        vary = varying_bits(carried, n)
        passes += [("carried", shift) for shift in range(0, 64, RADIX_BITS)
                   if (vary >> shift) & (RADIX - 1)]
    vary = varying_bits(keys, n)
    passes += [("keys", shift) for shift in range(0, 64, RADIX_BITS)
               if (vary >> shift) & (RADIX - 1)]
    for which, shift in passes:
        digit_keys = keys if which == "keys" else carried
        flip = shift == 64 - RADIX_BITS
        _radix_histogram[n_blocks, SORT_THREADS](
            digit_keys, n, shift, flip, table, n_blocks)
        exclusive_scan(table, RADIX * n_blocks)
        _radix_scatter[n_blocks, SORT_THREADS](
            digit_keys, keys, carried, move_carried, n, shift, flip, table,
            n_blocks, keys_tmp, carried_tmp)
        keys, keys_tmp = keys_tmp, keys
        if move_carried:
            carried, carried_tmp = carried_tmp, carried
    return keys, (carried if move_carried else None)


def ceil_log2(n):
    """Smallest b with 2**b >= n (0 for n <= 1)."""
    return 0 if n <= 1 else int(math.ceil(math.log2(n)))
