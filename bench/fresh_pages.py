"""What touching memory costs a process on this machine: pages the guest
never used, pages freed a moment ago, and pages freed seconds ago.

k processes (forked, released together by a barrier) each fault in their
share of ``--mb`` MiB of private anonymous memory
(``madvise(MADV_POPULATE_WRITE)``), free it, do it again at once, then
after ``--pause`` seconds.  On a VM whose balloon reports free pages to
the host (virtio-balloon's free page reporting), pages freed a while ago
are the host's again and cost a host fault each when touched; pages freed
a moment ago are still backed.  Prints one JSON line per (processes,
pass): the span from the first process's start to the last one's end and
the processes' system CPU seconds, then the balloon's feature bits.
Usage::

    python3 bench/fresh_pages.py --procs 1 8 --mb 880 --pause 5
"""
import argparse
import glob
import json
import mmap
import multiprocessing as mp
import os
import queue
import resource
import time

MADV_POPULATE_WRITE = 23  # <linux/mman.h>


def touch(share):
    """Fault in ``share`` bytes of fresh private memory, then free them."""
    handle = mmap.mmap(-1, share, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    handle.madvise(MADV_POPULATE_WRITE, 0, share)
    handle.close()


def child(share, pause, barrier, answers):
    """Three passes, each started with the other processes."""
    try:
        for name in ("first", "again", "after-pause"):
            if name == "after-pause":
                time.sleep(pause)
            barrier.wait()
            before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            start = time.perf_counter()
            touch(share)
            stop = time.perf_counter()
            answers.put((name, start, stop,
                         resource.getrusage(resource.RUSAGE_SELF).ru_stime
                         - before))
    except BaseException as error:  # noqa: BLE001 - handed to the parent
        answers.put(error)


def balloon():
    """The virtio balloon's feature bits (bit 5: free page reporting)."""
    for device in glob.glob("/sys/bus/virtio/devices/*"):
        with open(os.path.join(device, "device")) as handle:
            if handle.read().strip() == "0x0005":
                with open(os.path.join(device, "features")) as handle:
                    bits = handle.read().strip()
                return {"features": bits[:8],
                        "free_page_reporting": bits[5:6] == "1"}
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--mb", type=int, default=880)
    parser.add_argument("--pause", type=float, default=5.0)
    args = parser.parse_args()
    context = mp.get_context("fork")
    for procs in args.procs:
        share = (args.mb << 20) // procs // mmap.PAGESIZE * mmap.PAGESIZE
        barrier = context.Barrier(procs)
        answers = context.Queue()
        children = [context.Process(target=child, args=(
            share, args.pause, barrier, answers)) for _ in range(procs)]
        for process in children:
            process.start()
        got = []
        while len(got) < 3 * procs:
            try:
                answer = answers.get(timeout=1.0)
            except queue.Empty:  # a child killed (OOM, a signal) sends none
                dead = [p.exitcode for p in children
                        if p.exitcode not in (None, 0)]
                if not dead:
                    continue
                answer = RuntimeError(f"a child process died (exit code "
                                      f"{dead[0]}) before it answered")
            if isinstance(answer, BaseException):  # a failed child's error
                for process in children:
                    process.kill()
                    process.join()
                raise answer
            got.append(answer)
        for process in children:
            process.join()
        for name in ("first", "again", "after-pause"):
            mine = [answer for answer in got if answer[0] == name]
            print(json.dumps({
                "procs": procs, "pass": name, "mb": args.mb,
                "span": round(max(a[2] for a in mine)
                              - min(a[1] for a in mine), 4),
                "sys": round(sum(a[3] for a in mine), 3)}), flush=True)
    print(json.dumps({"balloon": balloon()}))


if __name__ == "__main__":
    main()
