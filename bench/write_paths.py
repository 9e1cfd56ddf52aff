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
import argparse, mmap, os, resource, time, json, multiprocessing as mp
import numpy as np

MADV_POPULATE_WRITE = 23

def child(mode, path, index, k, share, barrier, q):
    barrier.wait()
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    data = np.full(share // 4, index + 1, np.uint32)
    if mode in ("one-mmap", "own-mmap", "shm-mmap"):
        fd = os.open(path, os.O_RDWR)
        off = 0 if mode != "one-mmap" else index * share
        m = mmap.mmap(fd, share, mmap.MAP_SHARED, offset=off)
        m.madvise(MADV_POPULATE_WRITE, 0, share)
        np.frombuffer(m, np.uint32)[:] = data
        del m
        os.close(fd)
    elif mode in ("one-pwrite", "own-pwrite"):
        fd = os.open(path, os.O_RDWR)
        off = 0 if mode != "one-pwrite" else index * share
        step = 1 << 20
        mv = memoryview(data).cast("B")
        for s in range(0, share, step):
            os.pwrite(fd, mv[s:s + step], off + s)
        os.close(fd)
    elif mode == "anon":
        m = mmap.mmap(-1, share, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(MADV_POPULATE_WRITE, 0, share)
        np.frombuffer(m, np.uint32)[:] = data
        del m
    t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_SELF)
    q.put((t0, t1, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/wp")
    p.add_argument("--shm", default="/dev/shm/wp")
    p.add_argument("--mb", type=int, default=880)
    p.add_argument("--procs", type=int, nargs="+", default=[1, 8])
    p.add_argument("--modes", nargs="+", default=["one-mmap", "own-mmap", "one-pwrite", "own-pwrite", "anon", "shm-mmap"])
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True); os.makedirs(a.shm, exist_ok=True)
    ctx = mp.get_context("fork")
    for rep in range(a.repeats):
        for mode in a.modes:
            for k in a.procs:
                total = a.mb << 20
                share = (total // k) // mmap.PAGESIZE * mmap.PAGESIZE
                base = a.shm if mode == "shm-mmap" else a.dir
                paths = []
                if mode.startswith("one"):
                    path = os.path.join(base, "one.bin")
                    with open(path, "wb") as f:
                        os.posix_fallocate(f.fileno(), 0, share * k)
                    paths = [path] * k
                elif mode != "anon":
                    for i in range(k):
                        path = os.path.join(base, f"own{i}.bin")
                        with open(path, "wb") as f:
                            if mode != "shm-mmap":
                                os.posix_fallocate(f.fileno(), 0, share)
                            else:
                                f.truncate(share)
                        paths.append(path)
                else:
                    paths = [None] * k
                barrier = ctx.Barrier(k); q = ctx.Queue()
                ps = [ctx.Process(target=child, args=(mode, paths[i], i, k, share, barrier, q)) for i in range(k)]
                for x in ps: x.start()
                res = [q.get() for _ in ps]
                for x in ps: x.join()
                span = max(r[1] for r in res) - min(r[0] for r in res)
                row = dict(mode=mode, procs=k, repeat=rep, span=round(span, 4),
                           user=round(sum(r[2] for r in res), 3), sys=round(sum(r[3] for r in res), 3))
                print(json.dumps(row), flush=True)
                for path in set(p for p in paths if p):
                    os.unlink(path)

if __name__ == "__main__":
    main()
