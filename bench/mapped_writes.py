"""What writing a new file through shared mappings of row runs costs, by
how many parts each row is cut into and how the mapping is prepared.

The label round of components on the tiled path writes its labels file in
runs of adjacent tiles of one tile row, each through one shared mapping of
the run's raster rows (core/tile_io.py, ``NpySink.window_writer``): a run
writes a part of each row.  Here ``--procs`` forked processes write a
fresh file of ``--tile-rows`` x 1024 rows of ``--cols`` uint32 cells (its
blocks reserved by ``posix_fallocate``, the page cache dropped first),
every tile row cut into ``--parts`` column ranges, one mapping a part,
prepared by one of these modes:

- ``populate``: each row's part faulted in writable first
  (``madvise(MADV_POPULATE_WRITE)``), the default before the
  thirty-ninth session;
- ``plain``: the copy faults the pages in;
- ``huge``: the mapping advised ``MADV_HUGEPAGE`` (large page-cache folios
  where the kernel makes them), the copy faults them in;
- ``huge-populate``: both.

One JSON line per run: page faults and system seconds of all processes,
and each process's span.  Usage (as root, to drop the page cache)::

    python3 bench/mapped_writes.py --parts 1 2 3 13 --procs 1 2 --repeats 2
"""
import argparse
import json
import mmap
import multiprocessing as mp
import os
import resource
import time

import numpy as np

MADV_POPULATE_WRITE = 23  # <linux/mman.h>
TILE = 1024
HEADER = 128  # a .npy header's usual length: rows are not page aligned
MODES = ["populate", "plain", "huge", "huge-populate"]


def fresh_file(path, rows, cols):
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, HEADER + rows * cols * 4)
    finally:
        os.close(fd)
    try:  # the file's pages out of the page cache (root only)
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("1")
    except OSError:
        pass


def write_part(path, cols, mode, tile_row, first, last):
    """One run: columns first:last of tile row ``tile_row``'s rows."""
    start = HEADER + tile_row * TILE * cols * 4
    base = start - start % mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDWR)
    try:
        handle = mmap.mmap(fd, start - base + TILE * cols * 4,
                           flags=mmap.MAP_SHARED, offset=base)
    finally:
        os.close(fd)
    if mode.startswith("huge"):
        handle.madvise(mmap.MADV_HUGEPAGE)
    if mode.endswith("populate"):
        for row in range(TILE):
            begin = start - base + (row * cols + first) * 4
            aligned = begin - begin % mmap.PAGESIZE
            handle.madvise(MADV_POPULATE_WRITE, aligned,
                           begin + (last - first) * 4 - aligned)
    rows = np.frombuffer(handle, np.uint32, count=TILE * cols,
                         offset=start - base).reshape(TILE, cols)
    rows[:, first:last] = tile_row + 1
    del rows
    handle.close()


def child(path, cols, mode, runs, barrier, answers):
    try:
        barrier.wait()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        for run in runs:
            write_part(path, cols, mode, *run)
        stop = time.perf_counter()
        after = resource.getrusage(resource.RUSAGE_SELF)
        answers.put((after.ru_minflt - before.ru_minflt,
                     after.ru_stime - before.ru_stime, stop - start))
    except BaseException as error:  # noqa: BLE001 - handed to the parent
        answers.put(error)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--cols", type=int, default=12555)  # neuse40's
    parser.add_argument("--tile-rows", type=int, default=8)
    parser.add_argument("--parts", nargs="+", type=int, default=[1, 3, 13])
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    path = os.path.join(args.dir, "gg-mapped-writes.bin")
    context = mp.get_context("fork")
    try:
        for _ in range(args.repeats):
            for parts in args.parts:
                bounds = [args.cols * k // parts for k in range(parts + 1)]
                runs = [(r, bounds[k], bounds[k + 1])
                        for r in range(args.tile_rows) for k in range(parts)]
                for procs in args.procs:
                    for mode in args.modes:
                        fresh_file(path, args.tile_rows * TILE, args.cols)
                        # whole tile rows a process, as Dask's runs go
                        shares = [[run for run in runs
                                   if run[0] * procs // args.tile_rows == p]
                                  for p in range(procs)]
                        barrier = context.Barrier(procs)
                        answers = context.Queue()
                        children = [context.Process(target=child, args=(
                            path, args.cols, mode, share, barrier, answers))
                            for share in shares]
                        for process in children:
                            process.start()
                        got = [answers.get() for _ in children]
                        for process in children:
                            process.join()
                        for answer in got:
                            if isinstance(answer, BaseException):
                                raise answer
                        print(json.dumps({
                            "parts": parts, "procs": procs, "mode": mode,
                            "faults": sum(a[0] for a in got),
                            "sys": round(sum(a[1] for a in got), 3),
                            "spans": [round(a[2], 3) for a in got]}),
                            flush=True)
    finally:
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    main()
