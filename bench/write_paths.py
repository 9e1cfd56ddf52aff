"""How the kernel's ways of writing fresh output pages scale with processes.

k processes (forked, released together by a barrier) each write their
share of ``--mb`` MiB of uint32 values, by one of these paths:

- ``one-mmap``: one file for all (its blocks reserved by posix_fallocate),
  each process through a shared mapping of its part, faulted in writable
  first (``madvise(MADV_POPULATE_WRITE)``): how components' label round
  writes its labels file (tile_io.NpySink, mapped);
- ``own-mmap``: the same, a file per process;
- ``one-pwrite`` / ``own-pwrite``: ``pwrite`` in 1 MiB pieces into one
  file / a file per process;
- ``anon``: private anonymous memory, populated the same way (no file);
- ``shm-mmap``: a file per process on tmpfs (``--shm``), mapped.

One JSON line per (mode, processes, repeat): the span from the first
process's start to the last one's end, and the processes' user and
system CPU seconds.  Usage::

    python3 bench/write_paths.py --procs 1 8 --repeats 2 --dir /tmp/wp
"""
import argparse
import json
import mmap
import multiprocessing as mp
import os
import resource
import time

import numpy as np

MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python's mmap may not name it
MODES = ["one-mmap", "own-mmap", "one-pwrite", "own-pwrite", "anon",
         "shm-mmap"]


def write_share(mode, path, index, share):
    """Process ``index``'s share (``share`` bytes) written by ``mode``."""
    data = np.full(share // 4, index + 1, np.uint32)
    offset = index * share if mode.startswith("one") else 0
    if mode == "anon":
        handle = mmap.mmap(-1, share, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        handle.madvise(MADV_POPULATE_WRITE, 0, share)
        np.frombuffer(handle, np.uint32)[:] = data
        handle.close()
        return
    fd = os.open(path, os.O_RDWR)
    try:
        if mode.endswith("pwrite"):
            step = 1 << 20
            view = memoryview(data).cast("B")
            for start in range(0, share, step):
                os.pwrite(fd, view[start:start + step], offset + start)
            return
        handle = mmap.mmap(fd, share, mmap.MAP_SHARED, offset=offset)
        handle.madvise(MADV_POPULATE_WRITE, 0, share)
        target = np.frombuffer(handle, np.uint32)
        target[:] = data
        del target
        handle.close()
    finally:
        os.close(fd)


def child(mode, path, index, share, barrier, answers):
    """One process: waits for the others, writes, reports its times (or
    its error, so the parent never waits for an answer that cannot
    come)."""
    try:
        barrier.wait()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        write_share(mode, path, index, share)
        stop = time.perf_counter()
        after = resource.getrusage(resource.RUSAGE_SELF)
        answers.put((start, stop, after.ru_utime - before.ru_utime,
                     after.ru_stime - before.ru_stime))
    except BaseException as error:  # noqa: BLE001 - handed to the parent
        answers.put(error)


def make_files(mode, folder, procs, share):
    """The files of one run (None for anonymous memory), one per process:
    the same path for all in the one-file modes.  Reserved by
    posix_fallocate on a disk, sparse on tmpfs."""
    if mode == "anon":
        return [None] * procs
    names = ["one.bin"] if mode.startswith("one") else \
        [f"own{i}.bin" for i in range(procs)]
    size = share * procs if mode.startswith("one") else share
    paths = []
    for name in names:
        path = os.path.join(folder, name)
        paths.append(path)
        with open(path, "wb") as handle:
            if mode == "shm-mmap":
                handle.truncate(size)
            else:
                os.posix_fallocate(handle.fileno(), 0, size)
    return paths * procs if mode.startswith("one") else paths


def run(mode, folder, procs, total):
    """One timed run: the row for its JSON line."""
    context = mp.get_context("fork")
    share = (total // procs) // mmap.PAGESIZE * mmap.PAGESIZE
    paths = []
    try:
        paths = make_files(mode, folder, procs, share)
        barrier, answers = context.Barrier(procs), context.Queue()
        workers = [context.Process(target=child, args=(
            mode, paths[i], i, share, barrier, answers))
            for i in range(procs)]
        for worker in workers:
            worker.start()
        results = [answers.get() for _ in workers]
        for worker in workers:
            worker.join()
    finally:
        for path in set(path for path in paths if path):
            os.unlink(path)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return dict(span=round(max(r[1] for r in results)
                           - min(r[0] for r in results), 4),
                user=round(sum(r[2] for r in results), 3),
                sys=round(sum(r[3] for r in results), 3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/tmp/wp",
                        help="folder of the files on disk")
    parser.add_argument("--shm", default="/dev/shm/wp",
                        help="folder of the tmpfs files (shm-mmap)")
    parser.add_argument("--mb", type=int, default=880,
                        help="MiB written by all processes together")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(args.shm, exist_ok=True)
    for repeat in range(args.repeats):
        for mode in args.modes:
            for procs in args.procs:
                folder = args.shm if mode == "shm-mmap" else args.dir
                row = dict(mode=mode, procs=procs, repeat=repeat)
                row.update(run(mode, folder, procs, args.mb << 20))
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
