"""What a components tile costs when 1 or k processes run tiles at once.

Components at 8 Dask workers spends 1.5-1.7x the CPU seconds per tile it
spends at 1 worker (docs/benchmarks.md, Dask, fifth session).  This probe
takes Dask out: k forked processes (one thread each, numba's kernels
compiled before the fork) draw tiles of the raster from a shared counter
and do one round's work per tile, started together at a barrier; each
reports its wall, user and system seconds and page faults
(``getrusage``; ``faults_per_page``: the run's minor faults over the
labels file's pages).  The rounds' work, one mode each:

- ``summary``: round 1 (``tile_summary``: read, label, border message);
- ``labels``: round 3 without writing (read, label again, renumber);
- ``labels-mapped``, ``labels-pwrite``: round 3 writing one shared
  ``.npy`` (``NpySink``: through shared mappings with its blocks
  reserved, the default; or ``pwrite``);
- ``labels-tilefiles``: round 3, each tile's block to a file of its own
  (plain buffered write: one inode per tile, as per-tile outputs would);
- ``labels-runs``, ``labels-rows``: round 3 drawing runs of adjacent
  tiles of one tile row (``--run-tiles`` long; whole tile rows), each
  run written through one mapping of its rows (``components.tiled.
  label_run``); ``-populate`` after a mapped mode: its windows' pages
  faulted in writable first (``tile_io.POPULATE_MAPPED_WRITES``);
  ``-cached`` after any of these: the labels file's pages put in the
  page cache (dirty, by one mapping of the whole file populated
  writable) before the processes start, so the writes only map them;
  ``-zeroed``: the same by ``pwrite`` of zeros from one thread (the
  file system's large folios for writes; ``cache_seconds`` its time);
  ``-huge`` after a mapped mode: each run's mapping advised
  ``MADV_HUGEPAGE`` before its pages are populated (a fault may then read
  the file ahead in folios of 2 MiB where the file system has large
  folios, ext4 since Linux 6.16; none were made on the device's VMs,
  twenty-third session, though the faults halved); ``-sparse``: the
  labels file not
  reserved (``posix_fallocate``), its blocks allocated as pages are
  dirtied (delayed allocation) instead of converted from unwritten
  extents;
- all with the kernel in one strip (``--strips 1``, as tiles on an
  executor now run; 0: a strip per CPU, as they ran before);
- ``compute``: an ALU loop only (what sharing a core or a lower clock
  costs); ``stream``: copying a 64 MiB buffer (memory bandwidth).

Variants: ``--dirs`` (ext4 and tmpfs: the file system's share),
pinning (``pin``: one process per physical core; ``smt``: two processes
per core on its sibling threads), ``heap`` (freed memory kept in the heap:
no fresh pages per tile; else glibc as Dask's nanny sets it,
``MALLOC_TRIM_THRESHOLD_=65536``).  Prints one JSON row per run, and the
machine's CPU topology and steal time (a VM's CPUs taken by others).

    python3 bench/dask_tile_probe.py --mask /tmp/gg-dask/mask-17630x12555.npy \
        --procs 1 8 --dirs /tmp/gg-probe /dev/shm/gg-probe --json out.json
"""

import argparse
import ctypes
import json
import multiprocessing
import os
import resource
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale  # noqa: E402,F401  (makes gridgraph importable)

sys.path.remove(HERE)


def topology():
    """``{cpu: (package, core)}`` from sysfs, and the first thread of each
    physical core, in core order."""
    cpus = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            package = int(open(base + "physical_package_id").read())
            core = int(open(base + "core_id").read())
        except OSError:
            package, core = 0, cpu
        cpus[cpu] = (package, core)
    firsts, seen = [], {}
    for cpu, key in sorted(cpus.items()):
        seen.setdefault(key, []).append(cpu)
    for key in sorted(seen):
        firsts.append(seen[key])
    return cpus, firsts


def steal():
    """(steal, total) jiffies of all CPUs from /proc/stat."""
    fields = open("/proc/stat").readline().split()[1:]
    values = [int(v) for v in fields]
    return values[7] if len(values) > 7 else 0, sum(values)


def _mallopt(trim, mmap):
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-1, trim)  # M_TRIM_THRESHOLD
    if mmap:
        libc.mallopt(-3, mmap)  # M_MMAP_THRESHOLD


def _child(rank, state, mode, cpu_set, heap, barrier, counter, results):
    from gridgraph.core.components import tiled
    if cpu_set is not None:
        os.sched_setaffinity(0, cpu_set)
    if heap:
        _mallopt(1 << 30, 32 << 20)
    else:
        _mallopt(65536, 0)  # Dask's nanny: MALLOC_TRIM_THRESHOLD_=65536
    source, windows, items, shape, answers, sink, tile_dir = state
    from gridgraph.core import tile_io
    mode, modifiers = split_mode(mode)
    tile_io.POPULATE_MAPPED_WRITES = bool({"populate", "huge"} & modifiers)
    if "huge" in modifiers:
        import mmap
        populate = tile_io._populate

        def huge_then_populate(handle, *args):
            handle.madvise(mmap.MADV_HUGEPAGE)
            return populate(handle, *args)

        tile_io._populate = huge_then_populate
    scratch = np.ones(8 << 20) if mode == "stream" else None
    target = np.empty_like(scratch) if scratch is not None else None
    barrier.wait()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    tiles = 0
    while True:
        with counter.get_lock():
            index = counter.value
            counter.value += 1
        if index >= len(items):
            break
        window = windows[items[index][0]]
        tiles += len(items[index])
        if mode in ("labels-runs", "labels-rows"):
            tiled.label_run(sink, source, [(windows[k], answers[k])
                                           for k in items[index]], shape, 4,
                            "nonzero", None, np.int32, "cpu", STRIPS)
        elif mode == "summary":
            tiled.tile_summary(source, window, shape, 4, "nonzero", None,
                               "cpu", STRIPS)
        elif mode == "compute":
            _spin(SPIN_STEPS)
        elif mode == "stream":
            np.copyto(target, scratch)
        else:
            block = tiled.tile_labels(source, window, shape, 4, "nonzero",
                                      None, answers[index], np.int32, "cpu",
                                      STRIPS)
            if mode in ("labels-mapped", "labels-pwrite"):
                sink.write(window, block)
            elif mode == "labels-tilefiles":
                with open(os.path.join(tile_dir, f"{index}.raw"),
                          "wb") as handle:
                    handle.write(block.data)
    stop = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    results.put(dict(rank=rank, start=start, stop=stop, tiles=tiles,
                     user=after.ru_utime - before.ru_utime,
                     sys=after.ru_stime - before.ru_stime,
                     minflt=after.ru_minflt - before.ru_minflt,
                     nivcsw=after.ru_nivcsw - before.ru_nivcsw))


_SPIN = None
# the CPU kernel's strips per tile (--strips; 0: None, one per CPU, which
# the call of 2026-11-24 20:25 UTC ran with unpinned)
STRIPS = 1
# ~10-20 ms per "tile" of the compute mode (a real tile: 6-14 ms)
SPIN_STEPS = int(os.environ.get("PROBE_SPIN", 40_000_000))


def _spin(n):
    return _SPIN(n)


def main():
    global _SPIN, STRIPS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mask", required=True)
    parser.add_argument("--tile-size", type=int, default=1024)
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--dirs", nargs="+", default=["/tmp/gg-probe"])
    parser.add_argument("--modes", nargs="+", default=[
        "compute", "stream", "summary", "labels", "labels-mapped",
        "labels-tilefiles"])
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each multi-process variant (the "
                        "1-process runs go once)")
    parser.add_argument("--strips", type=int, default=1,
                        help="the kernel's strips per tile (0: one per "
                        "CPU the process may use)")
    parser.add_argument("--run-tiles", type=int, default=7,
                        help="labels-runs: tiles per run (7: the length "
                        "of a Dask batch at 8 one-thread workers)")
    parser.add_argument("--plain", action="store_true",
                        help="no pinned or heap-kept variants")
    parser.add_argument("--heap", action="store_true",
                        help="with --plain: every run keeps freed memory "
                        "in the heap (as Dask's tile tasks do)")
    parser.add_argument("--pretouch-gib", type=float, default=0,
                        help="after the runs, touch this many GiB of "
                        "fresh memory once (a VM's memory its host has "
                        "never backed costs a fault on the host too), "
                        "then run everything again")
    parser.add_argument("--json")
    args = parser.parse_args()
    STRIPS = args.strips or None
    os.environ["NUMBA_NUM_THREADS"] = "1"
    from numba import njit

    from gridgraph.core import tiling
    from gridgraph.core.components import tiled

    @njit(cache=False)
    def spin(n):
        x = 0
        for i in range(n):
            x = (x * 1103515245 + 12345 + i) & 0xFFFFFFFF
        return x

    _SPIN = spin
    spin(10)
    values = np.load(args.mask, mmap_mode="r")
    source = tiling.open_source(values)
    grid = tiling.TileGrid(values.shape, args.tile_size)
    tiles = grid.morton_order()
    windows = [grid.window(r, c) for r, c in tiles]
    shape = values.shape
    start = time.perf_counter()
    summaries = [tiled.tile_summary(source, w, shape, 4, "nonzero", None)
                 for w in windows]
    answers, count = tiled.merge(grid, dict(zip(tiles, summaries)), False,
                                 False)
    answers = [answers[t] for t in tiles]
    # the label round's kernels compiled (loaded) before the fork
    tiled.tile_labels(source, windows[0], shape, 4, "nonzero", None,
                      answers[0], np.int32)
    # runs of adjacent tiles (indices into the Morton-ordered windows)
    place = {tile: k for k, tile in enumerate(tiles)}
    items = {"labels-runs": [[place[t] for t in run] for run in
                             grid.row_runs(args.run_tiles)],
             "labels-rows": [[place[t] for t in run] for run in
                             grid.row_runs(None)]}
    print(f"answers in {time.perf_counter() - start:.1f} s "
          f"({count} components)", flush=True)
    cpus, cores = topology()
    info = dict(cpus=len(cpus), cores=len(cores),
                threads_per_core=max(len(c) for c in cores),
                core_threads=cores[:32])
    print(json.dumps(info), flush=True)
    rows = []
    context = multiprocessing.get_context("fork")
    passes = ["fresh", "pretouched"] if args.pretouch_gib else [""]
    for memory in passes:
        if memory == "pretouched":
            touched = pretouch(args.pretouch_gib)
            print(json.dumps(touched), flush=True)
            info["pretouch"] = touched
        for repeat in range(args.repeats):
            for mode in args.modes:
                dirs = args.dirs if mode.startswith("labels-") else [None]
                for folder in dirs:
                    for procs in args.procs:
                        if repeat and procs == 1:
                            continue  # the 1-process runs once: long
                        chosen = [(None, args.heap)] if args.plain \
                            else variants(mode, procs, info)
                        for pin, heap in chosen:
                            if pin == "pin" and procs > len(cores):
                                continue
                            rows.append(one_run(
                                context, mode, folder, procs, pin, heap,
                                cores, source, windows, items.get(
                                    split_mode(mode)[0],
                                    [[k] for k in range(len(windows))]),
                                shape, answers, repeat))
                            rows[-1]["memory"] = memory
                            print(json.dumps(rows[-1]), flush=True)
                            if args.json:
                                with open(args.json, "w") as handle:
                                    json.dump(dict(info=info, rows=rows),
                                              handle, indent=0)


def pretouch(gib):
    """Write every page of ``gib`` GiB of fresh anonymous memory once, in
    a child process, then free it: afterwards the guest's free memory is
    memory its host has backed.  Stops at MemAvailable less 8 GiB, or
    after 120 s; returns what it touched and how long it took."""
    import mmap

    available = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) << 10
    want = min(int(gib * (1 << 30)), max(0, available - (8 << 30)))

    def touch(queue):
        chunk, chunks, start = 1 << 30, [], time.perf_counter()
        while len(chunks) * chunk < want \
                and time.perf_counter() - start < 120:
            buffer = mmap.mmap(-1, chunk)
            np.frombuffer(buffer, dtype=np.uint8)[::4096] = 1
            chunks.append(buffer)
        queue.put(dict(pretouch_gib=len(chunks),
                       pretouch_s=round(time.perf_counter() - start, 2)))

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=touch, args=(queue,))
    child.start()
    touched = queue.get()
    child.join()
    return touched


MODIFIERS = ("cached", "zeroed", "huge", "sparse", "populate")


def split_mode(mode):
    """A mode's name without its modifiers (``-cached`` ...), and the set
    of those."""
    modifiers = set()
    for name in MODIFIERS:
        if f"-{name}" in mode:
            modifiers.add(name)
            mode = mode.replace(f"-{name}", "")
    return mode, modifiers


def variants(mode, procs, info):
    """(pin, heap) runs of a mode: at 1 process the plain one; at more,
    also pinned one per core, two per core where cores have two threads
    (compute, stream, labels), the heap kept (summary, labels)."""
    if procs == 1:
        return [(None, False)]
    chosen = [(None, False)]
    if procs <= info["cores"]:
        chosen.append(("pin", False))
    if info["threads_per_core"] > 1 and mode in ("compute", "stream",
                                                  "labels"):
        chosen.append(("smt", False))
    if mode in ("summary", "labels") or mode.startswith("labels-runs"):
        chosen.append((None, True))
    return chosen


VMSTAT_KEYS = ("pgfault", "thp_fault_alloc", "thp_fault_fallback",
               "compact_stall", "thp_file_alloc", "pgalloc_normal")


def vmstat():
    """A few of /proc/vmstat's counters (huge pages, compaction, faults)."""
    counters = {}
    try:
        for line in open("/proc/vmstat"):
            key, value = line.split()
            if key in VMSTAT_KEYS:
                counters[key] = int(value)
    except OSError:
        pass
    return counters


def cache_pages(path):
    """Every page of the file at ``path`` in the page cache, dirty: one
    shared mapping of the whole file populated writable, then unmapped."""
    import mmap

    from gridgraph.core import tile_io
    with open(path, "r+b") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED,
                            prot=mmap.PROT_READ | mmap.PROT_WRITE)
    mapping.madvise(tile_io.MADV_POPULATE_WRITE)
    mapping.close()


def zero_pages(sink):
    """Every page of ``sink``'s data in the page cache, dirty, written by
    ``pwrite`` of zeros in 64 MiB calls from this one thread (page-cache
    folios as large as the file system makes them for writes); returns the
    seconds it took."""
    start = time.perf_counter()
    size = sink.dtype.itemsize * sink.shape[0] * sink.shape[1]
    zeros = bytes(64 << 20)
    fd = os.open(sink.partial, os.O_WRONLY)
    try:
        done = 0
        while done < size:
            done += os.pwrite(fd, memoryview(zeros)[:min(len(zeros),
                                                        size - done)],
                              sink.offset + done)
    finally:
        os.close(fd)
    return round(time.perf_counter() - start, 4)


def one_run(context, mode, folder, procs, pin, heap, cores, source, windows,
            items, shape, answers, repeat):
    from gridgraph.core import tiling
    sink = tile_dir = cache_seconds = None
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        if mode.startswith(("labels-mapped", "labels-pwrite", "labels-runs",
                            "labels-rows")):
            modifiers = split_mode(mode)[1]
            mapped = not mode.startswith("labels-pwrite")
            sink = tiling.NpySink(os.path.join(folder, "labels.npy"), shape,
                                  np.int32,
                                  mapped=mapped and "sparse" not in modifiers)
            if "sparse" in modifiers:
                sink.mapped = mapped  # writes through mappings, unreserved
            if "cached" in modifiers:
                cache_pages(sink.partial)
            elif "zeroed" in modifiers:
                cache_seconds = zero_pages(sink)
        elif mode == "labels-tilefiles":
            tile_dir = os.path.join(folder, "tiles")
            os.makedirs(tile_dir, exist_ok=True)
    sets = [None] * procs
    if pin == "pin":
        sets = [{cores[i][0]} for i in range(procs)]
    elif pin == "smt":
        threads = [cpu for core in cores for cpu in core]
        sets = [{threads[i % len(threads)]} for i in range(procs)]
    barrier = context.Barrier(procs)
    counter = context.Value("q", 0)
    results = context.Queue()
    state = (source, windows, items, shape, answers, sink, tile_dir)
    steal_before = steal()
    vm_before = vmstat()
    wall = time.perf_counter()
    children = [context.Process(target=_child, args=(
        rank, state, mode, sets[rank], heap, barrier, counter, results))
        for rank in range(procs)]
    for child in children:
        child.start()
    reports = [results.get() for _ in children]
    for child in children:
        child.join()
    finish_start = time.perf_counter()
    if sink is not None:
        sink.finish()
        os.remove(sink.path)
    finish = time.perf_counter() - finish_start
    if tile_dir is not None:
        shutil.rmtree(tile_dir)
    wall = time.perf_counter() - wall
    steal_after = steal()
    vm_after = vmstat()
    span = max(r["stop"] for r in reports) - min(r["start"] for r in reports)
    total = lambda key: sum(r[key] for r in reports)  # noqa: E731
    return dict(
        mode=mode, dir=folder, procs=procs, pin=pin or "", heap=heap,
        repeat=repeat, span=round(span, 4), wall=round(wall, 3),
        finish=round(finish, 4), cache_seconds=cache_seconds, user=round(total("user"), 3),
        sys=round(total("sys"), 3),
        cpu_per_tile_ms=round(1000 * (total("user") + total("sys"))
                              / len(windows), 3),
        minflt=total("minflt"), nivcsw=total("nivcsw"),
        faults_per_page=round(total("minflt") / -(-4 * shape[0] * shape[1]
                                                  // 4096), 3),
        steal_share=round((steal_after[0] - steal_before[0])
                          / max(1, steal_after[1] - steal_before[1]), 4),
        vmstat={key: vm_after[key] - vm_before.get(key, 0)
                for key in vm_after})


if __name__ == "__main__":
    main()
