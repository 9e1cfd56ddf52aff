#!/bin/bash
# The Dask scale table on the GPU machine (docs/benchmarks.md, "Dask
# executor"), in calls that each fit the device's 600 s limit:
#   bench/dask_device.sh table   -- 1 worker (cost distance in one process,
#                                   MST and components in another at the
#                                   same time: 2 of 16 cores), then 8 and 16
#   bench/dask_device.sh four    -- 4 workers, then the GPU-worker check
#   bench/dask_device.sh fortyfirst_counts -- every operation at 1, 4, 8
#                                   and 16 workers on one host (HEAD's table)
#   bench/dask_device.sh sixteen -- cost distance at 16 workers alone
#   bench/dask_device.sh mapped -- components with pwrite / mapped label
#                                   writes, 1 and 8 workers; MST at 8
#   bench/dask_device.sh fifth   -- components (and its kept-labels and
#                                   fifth-session variants) at 1 and 8 x 3
#                                   workers with task streams; MST at 1, 8
#                                   (in the call of 2026-11-24 17:58 UTC the
#                                   defaults were the fifth session's
#                                   switches, and components-s4 the
#                                   defaults of now)
#   bench/dask_device.sh sixth   -- the CPUs, the tile probe (bench/
#                                   dask_tile_probe.py), components with
#                                   outputs on ext4 and tmpfs, unpinned and
#                                   pinned (--pin); MST at 1 and 8
#   bench/dask_device.sh sixth2  -- components: one strip per tile (now)
#                                   against a strip per CPU, tile files,
#                                   unpinned and pinned; the probe
#   bench/dask_device.sh seventh -- the label round's writes: runs of
#                                   adjacent tiles through one mapping,
#                                   whole tile rows, pages populated first
#                                   (MADV_POPULATE_WRITE), against tile by
#                                   tile: the probe (faults per page of the
#                                   labels file), then components at 1
#                                   worker and 8 three times, interleaved
#   bench/dask_device.sh seventh2 -- components with the defaults (runs,
#                                   populated) against tile by tile, whole
#                                   tile rows and runs of 4 tiles, and runs
#                                   gathered into bands written with pwrite:
#                                   1 worker twice, 8 three times
#   bench/dask_device.sh eighth  -- components: the merge in the driver
#                                   (default) against the merge as a task on
#                                   a worker (components-workerjoin), 1 and 8
#                                   workers interleaved, timelines
#   bench/dask_device.sh ninth   -- components: the label round's tiles
#                                   labelled ahead of the merge against
#                                   after it, 1 and 8 workers interleaved
#   bench/dask_device.sh ninth2  -- the same, one prepared run a thread
#                                   against none and all, ABBA (--turns 2)
#                                   (their variants were removed)
#   bench/dask_device.sh eleventh -- components: the labels file's pages
#                                   faulted in by 4 threads of the driver
#                                   during round 1, against not, ABBA
#                                   (the variant was removed after it)
#   bench/dask_device.sh eleventh_mst -- the MST at 8 and 1 workers with
#                                   timelines (its rounds and task stream)
#   bench/dask_device.sh eleventh_mst2 -- the same at 8, 1, 8 workers with
#                                   every kernel warmed up by the preflight,
#                                   numba's cache empty at the start
#   bench/dask_device.sh eleventh_mst3 -- the MST at 8, 1, 8, 1, 8 workers
#                                   after the serial split of the removed
#                                   separators was cut
#   bench/dask_device.sh eleventh_cd -- cost distance at 8 and 1 workers
#                                   with timelines
#   bench/dask_device.sh fifteenth_cd -- cost distance without Dask's
#                                   message batching against with it
#                                   (-batched), 8, 1, 8 workers, the
#                                   scheduler in its own process
#   bench/dask_device.sh sixteenth_cd -- cost distance with each step's
#                                   message pushed from its task against a
#                                   message task (-split), 8, 1, 8 workers,
#                                   --step-trace
#   bench/dask_device.sh sixteenth_heap -- cost distance with freed memory
#                                   kept in the workers' heaps between steps
#                                   against trimmed (-trimmed), 8, 1, 8
#   bench/dask_device.sh seventeenth -- every operation with the defaults
#                                   on one host, the scheduler in its own
#                                   process: cost distance at 8, 1, 8
#                                   workers, components at 8 and 1 over
#                                   three turns, the MST at 8 and 1
#   bench/dask_device.sh eighteenth -- cost distance's outputs written
#                                   through mappings and the heap kept
#                                   between tile tasks against each off and
#                                   both off, 8 workers ABBA, then 1;
#                                   components with and without the heap
#                                   kept between tasks, 8 and 1
#   bench/dask_device.sh eighteenth_survey -- cost distance's survey in
#                                   batches at once against a task a tile,
#                                   8 workers, ABBA
#   bench/dask_device.sh eighteenth_mst -- the MST with and without the
#                                   heap kept between tile tasks, 8 and 1
#   bench/dask_device.sh nineteenth -- cost distance with the hops rounds
#                                   only when a cell ties against always
#                                   (-hopsalways), 8 workers ABBA, then 1
#   bench/dask_device.sh nineteenth_ties -- the same on the DEM rounded
#                                   down (costs that tie everywhere)
#   bench/dask_device.sh nineteenth_wait -- cost distance with no start
#                                   beside a lower neighbour in flight
#                                   against the defaults, 8 workers, three
#                                   turns; then the defaults at 1
#   bench/dask_device.sh nineteenth_512 -- cost distance in tiles of 512
#                                   (936 tiles), 8 then 1 worker
#   bench/dask_device.sh nineteenth_delta -- cost distance's start slack
#                                   of 1 and 0.5 tile crossings and the
#                                   wait for lower neighbours against the
#                                   defaults, 8 workers, two turns
#   bench/dask_device.sh twentieth_tmpfs -- components (two turns) and cost
#                                   distance with their outputs on ext4 and
#                                   on a tmpfs, 8 then 1 worker
#   bench/dask_device.sh twentyfirst -- components with the label
#                                   round's runs shorter towards the end
#                                   against one length (-eventail), 8, 1, 8
#                                   workers ABBA with timelines; cost
#                                   distance and the MST at 8 and 1
#   bench/dask_device.sh twentyfirst_waves -- round 1's batches in
#                                   whole waves against a smaller last one
#                                   (-lastsmall): components 8, 1, 8 ABBA,
#                                   cost distance and the MST at 8 ABBA
#   bench/dask_device.sh twentyfirst_fetch -- components' label round
#                                   without its results fetched against
#                                   with (-fetched), 8, 1, 8 ABBA
#   bench/dask_device.sh twentysecond -- components: the answers of the
#                                   count's width (default) against int64
#                                   (-wide) and the merge on a worker
#                                   (-workerjoin), 8, 1, 8 ABBA, timelines
#                                   with the scheduler's and workers' logs;
#                                   cost distance and the MST at 8 and 1
#   bench/dask_device.sh twentysecond_writes -- components' label round
#                                   through mappings (default) against
#                                   pwrite of runs and of tile rows, 8, 1,
#                                   8 ABBA, timelines
#   bench/dask_device.sh twentysecond_zeros -- components with the labels
#                                   file's pages cached by the driver in
#                                   round 1 against not, 8, 1, 8 ABBA
#   bench/dask_device.sh twentysecond_packed -- components, 8, 1, 8, two
#                                   turns, timelines (the label round's
#                                   start with lazily unpacked answers)
#   bench/dask_device.sh twentysecond_runs2 -- components' label round in
#                                   runs of 2 tiles against ~6.5, 8 workers
#                                   ABBA, hops (the first tasks' spread)
#   bench/dask_device.sh twentythird -- components 8, 1, 8 workers; the
#                                   tile probe's label runs written through
#                                   mappings populated, advised huge pages,
#                                   unreserved, cached, on ext4 and tmpfs,
#                                   before and after 100 GiB of memory
#                                   touched once; components again
#   bench/dask_device.sh twentythird_cpus -- whether the CPUs slow each
#                                   other down (bench/cpu_sharing.py: a
#                                   clock-bound, an arithmetic-bound and a
#                                   memory-bound loop at 1-16 processes,
#                                   and CPU 0 paired with each other CPU),
#                                   beside the tile probe's labelling
#                                   without and with writes at 1-16
#   bench/dask_device.sh twentythird_all -- the CPUs' loops at 1 and 8
#                                   processes, then all three operations
#                                   at 8, 1, 8 workers on the same host
#   bench/dask_device.sh twentythird_sizes -- the tile probe's round 1
#                                   and labelling without writes at 1 and
#                                   8 processes, tiles of 256 to 2048 (does
#                                   a tile's working set decide how the
#                                   work scales?), and the CPUs' loops
#   bench/dask_device.sh twentythird_rows -- a tile's rows read from
#                                   Python a call each (-pyrows, before)
#                                   against the compiled loop: components
#                                   8, 1, 8 workers ABBA over two turns;
#                                   cost distance and the MST at 8
#   bench/dask_device.sh twentysecond_probe -- the tile probe: label runs
#                                   written into a file whose pages are
#                                   cached first by a mapping or by pwrite
#                                   of zeros, against not, 1 and 8 procs
#   bench/dask_device.sh fifteenth_other -- the same for components (three
#                                   turns) and the MST, 8 and 1 workers
#   bench/dask_device.sh fifteenth_sched -- cost distance's scheduling
#                                   variants (hops without waiting, hops
#                                   slack 4) at
#                                   8 workers over two turns; defaults at 1
#   bench/dask_device.sh fourteenth_cd -- cost distance with the
#                                   scheduler in its own process at 8, 1, 8
#                                   workers, then on a LocalCluster at 8, 1
#   bench/dask_device.sh fourteenth_pipe -- cost distance with 1 and 2
#                                   hops visits in flight per worker, 8 and
#                                   1 workers (BOTH_IF_UNDER=s: then solves
#                                   2 a worker too, at 8, if time is left)
#   bench/dask_device.sh fourteenth_other -- components and the MST with
#                                   the scheduler in its own process, 8 and 1
#   bench/dask_device.sh twentyfourth_all -- every operation at 8, 1, 8
#                                   workers at HEAD, the CPUs' sharing
#   bench/dask_device.sh fortieth_final -- components with the defaults
#                                   against components-hugepop at 8, 1, 8
#                                   workers, ABBA; cost distance and the MST
#                                   at 8 and 1 worker
#   bench/dask_device.sh fortieth_ahead -- components with the label
#                                   round submitted with round 1 (the
#                                   default) against after the merge, at 8,
#                                   1, 8 workers, ABBA (AHEAD_TURNS turns,
#                                   AHEAD_VARIANTS more), then timelines at 8
#                                   (its variants and the switch were removed
#                                   after it)
#   bench/dask_device.sh thirtyninth_confirm -- thirtyninth_final without
#                                   cost distance and the MST
#   bench/dask_device.sh thirtyninth_final -- mapped row-run writes
#                                   (bench/mapped_writes.py), components with the
#                                   defaults against components-nohuge at
#                                   8, 1, 8 workers; cost distance and the
#                                   MST at 8 and 1
#   bench/dask_device.sh thirtyninth_huge -- components with the label
#                                   runs' mappings advised MADV_HUGEPAGE,
#                                   not populated, at 8, 1, 8 workers
#   bench/dask_device.sh thirtyninth_tiles -- fresh pages' cost at 1 and
#                                   8 processes, then components at 8, 1, 8
#                                   workers with tiles of 1024, 2048, 1536
#   bench/dask_device.sh thirtyseventh_heap -- components with round
#                                   1's batches' heap kept (the default)
#                                   and set back at each batch's end, at 8,
#                                   1, 8 workers, ABBA, then timelines at 8
#   bench/dask_device.sh thirtysixth_runs -- components at 8, 1, 8
#                                   workers twice each, then twice at 8
#                                   with timelines
#   bench/dask_device.sh thirtysixth_pages -- the kernel's write paths
#                                   at 1 and 8 processes, then components
#                                   on Dask at 8, 1, 8 workers
#   bench/dask_device.sh thirtyfifth_bound -- components' tile work
#                                   without Dask (the tile probe: round 1,
#                                   labelling, labelling with the label
#                                   writes; 1 and 8 processes, twice) beside
#                                   components on Dask at 8, 1, 8 workers,
#                                   and the CPUs' sharing, on one host
#   bench/dask_device.sh ab      -- cost distance at 8 workers with one
#                                   scheduling switch each (against the
#                                   8-worker row of table)
# Run from the checkout's root; results (JSON rows with output digests,
# logs) go to $OUT.  The machine needs the numpy 2.3.5 wheel (DEVICE.md) and
# Dask: wheels of distributed and its dependencies (pip download
# --only-binary=:all: --python-version 3.12 ... distributed==2024.12.1),
# installed with pip --no-index --find-links.
set -u
OUT=${OUT:-/tmp/gg-dask-out}
W=/tmp/gg-dask
mkdir -p "$OUT"
# --scheduler-process starts Dask's processes with the "dask" command,
# which a pip --target install does not put on the PATH
if ! command -v dask > /dev/null; then
    mkdir -p /tmp/gg-bin
    printf '#!/bin/sh\nexec python3 -m dask "$@"\n' > /tmp/gg-bin/dask
    chmod +x /tmp/gg-bin/dask
    export PATH="/tmp/gg-bin:$PATH"
fi
B="python3 bench/dask.py --neuse40 --tile-size 1024 --workdir $W --keep"
python3 bench/dask.py --neuse40 --inputs-only --workdir $W
# the machine line: kernel, CPUs, the file system of the outputs, the
# transparent huge page settings
machine() {
    { uname -r; nproc; grep -m1 "model name" /proc/cpuinfo; df -T $W;
      cat /sys/kernel/mm/transparent_hugepage/enabled \
          /sys/kernel/mm/transparent_hugepage/defrag; } \
        > "$OUT/machine.txt" 2>&1
}
# components with task-stream timelines into cc.json/run.log: $B's options
components_timelines() {
    machine
    $B "$@" --timeline --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
}
cd_against() {
    # cost distance with the defaults against the variant $1, the
    # scheduler in its own process, 8, 1, 8 workers; rows into $OUT/$2,
    # further options after them
    local variant=$1 json=$2
    shift 2
    machine
    $B --workers 8 1 8 --operations costdistance "$variant" \
        --scheduler-process --json "$OUT/$json" "$@" > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
}

# cost distance at 8, 1 and 8 workers with timelines, the scheduler in a
# process of its own (--scheduler-process: as on a cluster named by its
# address), into cd-sp.json/run.log
cd_scheduler_process() {
    machine
    $B --workers 8 1 8 --operations costdistance --timeline \
        --scheduler-process --json "$OUT/cd-sp.json" > "$OUT/run.log" 2>&1
    echo "costdistance (scheduler process) done at $SECONDS s" \
        >> "$OUT/run.log"
}
# $B at 8 workers over $2 turns with the operations $3 (a quoted list),
# then at 1 worker with $4; rows into $OUT/${1}8.json and ${1}1.json
eight_then_one() {
    machine
    $B --workers 8 --operations $3 --turns "$2" --scheduler-process \
        --json "$OUT/${1}8.json" > "$OUT/run.log" 2>&1
    echo "8 workers done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 1 --operations $4 --scheduler-process \
        --json "$OUT/${1}1.json" >> "$OUT/run.log" 2>&1
    echo "1 worker done at $SECONDS s" >> "$OUT/run.log"
}
case "$1" in
table)
    $B --workers 1 --operations costdistance --json "$OUT/w1-cd.json" \
        > "$OUT/w1-cd.log" 2>&1 &
    $B --workers 1 --operations mst components --json "$OUT/w1-other.json" \
        > "$OUT/w1-other.log" 2>&1 &
    wait
    $B --workers 8 16 --operations costdistance components mst \
        --json "$OUT/w8-16.json" > "$OUT/w8-16.log" 2>&1
    ;;
ab)
    $B --workers 8 --operations costdistance --no-prefer-free-workers \
        --json "$OUT/ab-no-prefer-free.json" > "$OUT/ab-no-prefer-free.log" 2>&1
    $B --workers 8 --operations costdistance --no-hops-wait-for-neighbours \
        --json "$OUT/ab-no-hops-wait.json" > "$OUT/ab-no-hops-wait.log" 2>&1
    ;;
mapped)
    # components' label round: pwrite against writes through shared
    # mappings (the default since this call), 1 worker and 8 three times;
    # then MST at 8 workers (and at 1 when the call has time left)
    $B --workers 1 8 8 8 --operations components --components-pwrite \
        --json "$OUT/cc-pwrite.json" > "$OUT/run.log" 2>&1
    $B --workers 1 8 8 8 --operations components \
        --json "$OUT/cc-mapped.json" >> "$OUT/run.log" 2>&1
    $B --workers 8 --operations mst --json "$OUT/mst8.json" \
        >> "$OUT/run.log" 2>&1
    if [ "$SECONDS" -lt "${MST1_IF_UNDER:-0}" ]; then
        $B --workers 1 --operations mst --json "$OUT/mst1.json" \
            >> "$OUT/run.log" 2>&1
    fi
    ;;
fifth)
    # everything in one call, so that efficiencies compare on one machine
    $B --workers 1 8 8 8 --task-stream \
        --operations components components-kept components-s5 \
        --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 1 8 --operations mst --json "$OUT/mst.json" \
        >> "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
sixth)
    # what the 8-worker components runs lose (docs/benchmarks.md, sixth
    # session): the machine's CPUs, the tile probe without Dask (k
    # processes; CPU, faults; ext4 against tmpfs; pinned), components on
    # Dask with outputs on ext4 and tmpfs, unpinned and pinned one worker
    # per core; MST at 1 and 8 workers with the defaults
    { nproc; lscpu; grep -m1 "model name" /proc/cpuinfo; df -T /tmp /dev/shm; } \
        > "$OUT/machine.txt" 2>&1
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe /dev/shm/gg-probe --repeats 2 --strips 0 \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    R="--operations components --out-roots $W /dev/shm/gg-dask"
    $B --workers 1 8 $R --json "$OUT/cc-a.json" > "$OUT/run.log" 2>&1
    $B --workers 1 8 $R --pin --json "$OUT/cc-pin-a.json" >> "$OUT/run.log" 2>&1
    $B --workers 8 $R --json "$OUT/cc-b.json" >> "$OUT/run.log" 2>&1
    $B --workers 8 $R --pin --json "$OUT/cc-pin-b.json" >> "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 1 8 --operations mst --json "$OUT/mst.json" \
        >> "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    rm -rf /dev/shm/gg-dask /dev/shm/gg-probe
    ;;
sixth2)
    # after the first sixth call: tiles on an executor labelled in one
    # strip (the default now) against a strip per CPU (components-strips,
    # as before), the label round's tiles into files of their own joined
    # by the driver (components-tilefiles), unpinned and pinned; the probe
    # with one strip per tile
    { nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/machine.txt"
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 1 \
        --modes summary labels labels-mapped labels-tilefiles \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    $B --workers 1 8 8 --json "$OUT/cc.json" \
        --operations components components-strips \
        > "$OUT/run.log" 2>&1
    # (the call also ran components-tilefiles: removed in the eighth
    # session with its switch)
    $B --workers 1 8 8 --pin --json "$OUT/cc-pin.json" \
        --operations components >> "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
seventh)
    machine
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 2 --plain \
        --modes labels labels-mapped labels-mapped-populate labels-runs \
        labels-runs-populate labels-rows labels-rows-populate \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    $B --workers 1 8 8 8 --json "$OUT/cc.json" \
        --operations components components-runs components-rows \
        components-runs-populate components-populate > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
seventh2)
    $B --workers 1 8 8 1 8 --json "$OUT/cc2.json" \
        --operations components components-tiles components-rows-populate \
        components-runs4-populate components-rows-pwrite \
        components-runs-pwrite > "$OUT/run2.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run2.log"
    ;;
s7timeline)
    # seventh session: where the 8-worker components run's wall goes
    # (--timeline: the driver's steps, each round's tasks per worker),
    # the landed defaults against each round submitted at once, guided
    # batches and runs, both (share 1 and 2); clusters 1, 8, 8, 1, 8;
    # then the probe: runs' writes into a file whose pages are cached
    machine
    $B --workers 1 8 8 1 8 --timeline --json "$OUT/cc.json" \
        --operations components components-atonce > "$OUT/run.log" 2>&1
    # (the call also ran components-fast, -guided and -fast2: guided
    # batches, removed in the eighth session)
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 1 --plain \
        --modes labels labels-runs-populate labels-runs-populate-cached \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    ;;
s7final)
    # seventh session, the second call: the session's defaults (each
    # round at once, the preflight by client.run, round 1's idle workers
    # faulting the label pages in) against the session's start
    # (components-before) and against the page faulting off; clusters 1,
    # 8, 8, 1, 8, 8, 1, 8, timelines
    # (and components-noprefault: the page faulting, removed since)
    components_timelines --workers 1 8 8 1 8 8 1 8 \
        --operations components components-before
    ;;
eighth)
    # eighth session: components' merge in the driver (the default) against
    # the merge as a task on a worker with the label round submitted behind
    # it (components-workerjoin); clusters 1, 8, 8, 1, 8, 8, 1, 8, timelines
    components_timelines --workers 1 8 8 1 8 8 1 8 \
        --operations components components-workerjoin
    ;;
ninth)
    # ninth session: the label round's tiles labelled ahead of the merge
    # (then the default) against the label round after the merge, whole
    # (components-noahead; both variants removed since, with their
    # switch); clusters 1, 8, 8, 1, 8, 8, 1, 8, timelines
    components_timelines --workers 1 8 8 1 8 8 1 8 \
        --operations components components-noahead
    ;;
ninth2)
    # ninth session, second call: one prepared run a worker thread (then
    # the default) against none and all (variants removed since), in ABBA
    # order on each cluster (the first call ran the default first on every
    # cluster: a fresh cluster's first run was the slower at 1 worker in
    # all three)
    components_timelines --workers 8 1 8 8 1 8 --turns 2 \
        --operations components components-noahead components-allahead
    ;;
tenth)
    # tenth session: where 8 workers' extra CPU per tile goes, without
    # Dask: fresh pages per tile against the heap kept, the label writes
    # through mappings plain and into cached pages; vmstat counters per
    # run (the call also ran labels-runs-populate-huge: the mappings
    # advised MADV_HUGEPAGE, removed with its switch)
    machine
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 2 \
        --modes summary labels labels-runs-populate \
        labels-runs-populate-cached \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    components_timelines --workers 8 1 8 8 1 8 --turns 2 \
        --operations components
    ;;
tenth2)
    # tenth session, second call: the heap kept in tile tasks
    # (components-heap, the default since) against fresh pages (then the
    # default), ABBA; the call also ran the label mappings advised
    # MADV_HUGEPAGE, alone and with the heap kept (removed since)
    components_timelines --workers 8 1 8 8 1 8 --turns 2 \
        --operations components-fresh components
    ;;
tenth4)
    # tenth session, fourth call: the kept heap set back 1 s after a
    # worker's last tile task (then the default, HEAP_RELEASE_DELAY_S)
    # against at each task's end (components-heapeach, the default again:
    # no faster), ABBA; clusters 8 1 8 8 1 8 8 1 8
    components_timelines --workers 8 1 8 8 1 8 8 1 8 --turns 2 \
        --operations components
    ;;
tenth5)
    # tenth session, fifth call: tiles of 512 against 1024 (a tile's
    # labels then 1 MiB instead of 4: 8 workers' tiles within the caches),
    # each cluster running components twice; clusters 8 1 8, each size
    machine
    for size in 512 1024; do
        python3 bench/dask.py --neuse40 --tile-size $size --workdir $W \
            --keep --workers 8 1 8 --turns 2 --operations components \
            --timeline --json "$OUT/cc-$size.json" >> "$OUT/run.log" 2>&1
    done
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
tenth6)
    # tenth session, sixth call: MST and cost distance with the heap kept
    # in tile tasks (the default since the second call), 8 workers then 1
    machine
    $B --workers 8 1 --operations mst --json "$OUT/mst.json" \
        > "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations costdistance --json "$OUT/cd.json" \
        >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
eleventh)
    # (ran with components-ahead4 beside components; removed since)
    components_timelines --workers 8 1 8 8 1 8 --turns 2 \
        --operations components
    ;;
eleventh_mst)
    machine
    $B --workers 8 1 --operations mst --timeline --json "$OUT/mst.json" \
        > "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
eleventh_mst2)
    # the warm-ups fixed; numba's cache empty, as on a fresh install
    export NUMBA_CACHE_DIR=$(mktemp -d /tmp/gg-numba-cache.XXXX)
    machine
    $B --workers 8 1 8 --operations mst --timeline --json "$OUT/mst.json" \
        > "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
eleventh_mst3)
    # the MST's removed separators split without np.isin (and the
    # warm-ups): 8, 1, 8, 1, 8 workers
    machine
    $B --workers 8 1 8 1 8 --operations mst --timeline \
        --json "$OUT/mst.json" > "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
eleventh_cd)
    # cost distance at 8 and 1 workers with timelines (its rounds)
    machine
    $B --workers 8 1 --operations costdistance --timeline \
        --json "$OUT/cd.json" > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
fourteenth_cd)
    # cost distance with the scheduler in a process of its own at 8, 1
    # and 8 workers, then on a LocalCluster (the scheduler on the driver's
    # event loop) at 8 and 1
    cd_scheduler_process
    $B --workers 8 1 --operations costdistance --timeline \
        --json "$OUT/cd-local.json" >> "$OUT/run.log" 2>&1
    echo "costdistance (LocalCluster) done at $SECONDS s" >> "$OUT/run.log"
    ;;
fourteenth_sp)
    # fourteenth_cd's first part alone
    cd_scheduler_process
    ;;
fourteenth_pipe)
    # cost distance on a LocalCluster: hops visits (and solves) in flight
    # per worker, 1 (as before) against 2, at 8 and 1 workers each
    machine
    $B --workers 8 1 --operations costdistance --timeline \
        --hops-tasks-per-worker 1 --json "$OUT/cd-h1.json" > "$OUT/run.log" 2>&1
    $B --workers 8 1 --operations costdistance --timeline \
        --hops-tasks-per-worker 2 --json "$OUT/cd-h2.json" >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    if [ "$SECONDS" -lt "${BOTH_IF_UNDER:-0}" ]; then
        $B --workers 8 --operations costdistance --timeline \
            --hops-tasks-per-worker 2 --round-tasks-per-worker 2 \
            --json "$OUT/cd-h2r2.json" >> "$OUT/run.log" 2>&1
    fi
    ;;
fifteenth_cd)
    # cost distance with Dask's message batching off (the default since)
    # against Dask's own intervals (costdistance-batched), the scheduler in
    # a process of its own, at 8, 1 and 8 workers
    machine
    $B --workers 8 1 8 --operations costdistance costdistance-batched \
        --timeline --scheduler-process --json "$OUT/cd-sp.json" \
        > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
fifteenth_sched)
    # cost distance's scheduling variants at 8 workers, ABBA over two
    # turns: hops without the wait for lower neighbours (-hopsnowait),
    # hops with twice the slack (-hops4); then the defaults at 1 worker
    # (call 3 of 2026-11-29 also ran costdistance-move, since removed)
    machine
    $B --workers 8 --operations costdistance \
        costdistance-hopsnowait costdistance-hops4 --turns 2 --timeline \
        --scheduler-process --json "$OUT/cd-sched-8.json" \
        > "$OUT/run.log" 2>&1
    echo "8 workers done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd-sched-1.json" >> "$OUT/run.log" 2>&1
    echo "1 worker done at $SECONDS s" >> "$OUT/run.log"
    ;;
fifteenth_hops1)
    # hops visits one a worker (-hops1) against two (the default), at 8
    # and 1 workers, with the steps' latencies (--step-trace)
    machine
    $B --workers 8 1 --operations costdistance costdistance-hops1 \
        --step-trace --scheduler-process --json "$OUT/cd-hops1.json" \
        > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
sixteenth_cd)
    # a step of one task with its message pushed (the default) against
    # the step's message as a task of its own (-split), with the steps'
    # latencies
    cd_against costdistance-split cd-pushed.json --step-trace
    ;;
sixteenth_heap)
    # the workers' freed memory kept in the heap from one tile step to the
    # next (the default since) against trimmed after each step (-trimmed;
    # in the call of 2026-11-29 04:53 UTC trimming was the default and
    # the variant costdistance-stepheap kept the heap)
    cd_against costdistance-trimmed cd-heap.json
    ;;
fifteenth_kept)
    # components with round 1's labels kept on the workers against
    # labelled again, 8 and 1 workers, three turns
    machine
    $B --workers 8 1 --operations components components-kept --turns 3 \
        --timeline --scheduler-process --json "$OUT/components-kept.json" \
        > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
eighteenth)
    # cost distance's output round written through mappings and the
    # tile-by-tile rounds' heap kept between tasks (the defaults since)
    # against each off and both off (-before), 8 workers ABBA over two
    # turns; then the defaults and -before at 1; components with and
    # without the heap kept between tasks, 8 and 1, three turns
    machine
    $B --workers 8 --operations costdistance costdistance-before \
        costdistance-pwrite costdistance-tasktrim --turns 2 \
        --scheduler-process --json "$OUT/cd8.json" > "$OUT/run.log" 2>&1
    echo "costdistance at 8 done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 1 --operations costdistance costdistance-before \
        --scheduler-process --json "$OUT/cd1.json" >> "$OUT/run.log" 2>&1
    echo "costdistance at 1 done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations components components-tasktrim --turns 3 \
        --scheduler-process --json "$OUT/components.json" \
        >> "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
nineteenth)
    # cost distance with the hops rounds run only when the trees read
    # without them find a tie (the default since; neuse40's real-valued
    # DEM has none) against always run (-hopsalways), 8 workers ABBA over
    # two turns, then both at 1
    eight_then_one cd 2 "costdistance costdistance-hopsalways" \
        "costdistance costdistance-hopsalways"
    ;;
nineteenth_ties)
    # the same on costs that tie everywhere (costdistanceties: the DEM
    # rounded down), where the first pass without the hops stops at once
    # and the hops rounds run
    eight_then_one cdties 2 \
        "costdistanceties costdistanceties-hopsalways" \
        "costdistanceties costdistanceties-hopsalways"
    ;;
nineteenth_wait)
    # WAIT_FOR_LOWER_NEIGHBOURS on against off (the default), 8 workers
    # ABBA over three turns; the 1-worker run is the same either way (a
    # tile is started alone there)
    eight_then_one cd 3 "costdistance costdistance-wait" costdistance
    ;;
twentieth_tmpfs)
    # the outputs on the VM's ext4 /tmp against a tmpfs, components (two
    # turns) and cost distance at 8 workers, then 1: the share of the
    # 8-worker runs that is writing into one file's page cache on ext4
    # (dirty page limits and writeback shown before and after)
    machine
    T=/dev/shm/gg-dask
    if [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -lt \
            16000000 ] 2>/dev/null; then
        mkdir -p /mnt/gg-tmpfs && mount -t tmpfs -o size=16g tmpfs \
            /mnt/gg-tmpfs && T=/mnt/gg-tmpfs/gg-dask
    fi
    mkdir -p "$T"
    { df -T "$T" "$W"; grep -H . /proc/sys/vm/dirty_*;
      cat /sys/fs/cgroup/memory.max 2>/dev/null;
      grep -E "^(nr_dirty|nr_writeback|nr_dirtied|nr_written) " /proc/vmstat
    } > "$OUT/dirty.txt" 2>&1
    $B --workers 8 1 --operations components --turns 2 --out-roots "$W" \
        "$T" --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations costdistance --out-roots "$W" "$T" \
        --scheduler-process --json "$OUT/cd.json" >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    grep -E "^(nr_dirty|nr_writeback|nr_dirtied|nr_written) " /proc/vmstat \
        >> "$OUT/dirty.txt"
    rm -rf "$T"
    if mountpoint -q /mnt/gg-tmpfs; then umount /mnt/gg-tmpfs; fi
    ;;
twentyfirst)
    # components with the label round's runs shorter towards the end (the
    # default in that call, removed after it) against runs of one length
    # (-eventail, removed with it), 8, 1, 8 workers,
    # ABBA, timelines (the workers' settings in two round trips and the
    # merge's numbering in one kernel in both); then cost distance and
    # the MST with the defaults at 8 and 1
    components_timelines --workers 8 1 8 --operations components \
        components-eventail --turns 2 --scheduler-process
    $B --workers 8 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd.json" >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    if [ "$SECONDS" -lt 330 ]; then
        $B --workers 8 1 --operations mst --scheduler-process \
            --json "$OUT/mst.json" >> "$OUT/run.log" 2>&1
        echo "mst done at $SECONDS s" >> "$OUT/run.log"
    fi
    ;;
twentyfirst_waves)
    # round 1's batches in whole waves (4 a thread, the default) against
    # batches of one size and a smaller last one (-lastsmall): components
    # at 8, 1, 8 workers ABBA with timelines, then cost distance and the
    # MST at 8 workers ABBA
    components_timelines --workers 8 1 8 --operations components \
        components-lastsmall --turns 2 --scheduler-process
    $B --workers 8 --operations costdistance costdistance-lastsmall \
        --turns 2 --scheduler-process --json "$OUT/cd.json" \
        >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    if [ "$SECONDS" -lt 400 ]; then
        $B --workers 8 --operations mst mst-lastsmall --turns 2 \
            --scheduler-process --json "$OUT/mst.json" >> "$OUT/run.log" 2>&1
        echo "mst done at $SECONDS s" >> "$OUT/run.log"
    fi
    ;;
twentysecond)
    # components: the merge's answers of the count's width (int32, the
    # default; in that call NARROW_ANSWERS, removed after it) against int64
    # (-wide, removed with it), and the merge as a task on a
    # worker with the label round submitted behind it (-workerjoin: last
    # measured in the eighth session, before the batching intervals were
    # set to 0 for a run), 8, 1, 8 workers ABBA with timelines (each
    # round's hops from the scheduler's and workers' logs); then cost
    # distance and the MST with the defaults at 8 and 1
    components_timelines --workers 8 1 8 --operations components \
        components-wide components-workerjoin --turns 2 --scheduler-process
    $B --workers 8 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd.json" >> "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    if [ "$SECONDS" -lt 380 ]; then
        $B --workers 8 1 --operations mst --scheduler-process \
            --json "$OUT/mst.json" >> "$OUT/run.log" 2>&1
        echo "mst done at $SECONDS s" >> "$OUT/run.log"
    fi
    ;;
twentysecond_writes)
    # components' label round writing through mappings of the labels file
    # (the default) against pwrite of each run's rows (-runs-pwrite) and of
    # whole tile rows (-rows-pwrite), 8, 1, 8 workers ABBA with timelines
    components_timelines --workers 8 1 8 --operations components \
        components-runs-pwrite components-rows-pwrite --turns 2 \
        --scheduler-process
    ;;
twentysecond_zeros)
    # components with the labels file's pages put in the page cache by
    # the driver during round 1 (the default in that call, ZEROS_AHEAD,
    # removed after it) against not (-nozeros, removed with it), 8, 1, 8
    # workers ABBA with timelines
    components_timelines --workers 8 1 8 --operations components \
        components-nozeros --turns 2 --scheduler-process
    ;;
twentysecond_packed)
    # components with a Packed's pickled state kept and its messages built
    # only when asked for (the label tasks' answers pass through the
    # scheduler without per-message work): 8, 1, 8 workers, two turns,
    # timelines with hops (compare the label round's start with the
    # calls before, same code otherwise)
    components_timelines --workers 8 1 8 --operations components \
        --turns 2 --scheduler-process
    ;;
twentysecond_runs2)
    # the label round's start with runs of 2 tiles (-runs2, a third of the
    # answers a task) against the default (~6.5 tiles), 8 workers ABBA,
    # two turns, timelines with hops: does the first tasks' 10-15 ms
    # spread over the workers shrink with the bytes a task carries?
    components_timelines --workers 8 --operations components \
        components-runs2 --turns 2 --scheduler-process
    ;;
twentythird)
    # does a page the VM's host never backed cost the label round's
    # writes, and do large page-cache folios (ext4 has them since Linux
    # 6.16) or delayed allocation write the labels file cheaper?
    # components at 8, 1, 8 workers; the probe (1 and 8 processes, the
    # heap kept as Dask's tile tasks keep it), then the same after
    # touching 100 GiB of fresh memory once; components at 8, 1, 8 again
    machine
    { ls /sys/bus/virtio/drivers; grep -i balloon /proc/vmstat;
      head -n 5 /proc/meminfo; grep " / " /proc/mounts; } \
        > "$OUT/memory.txt" 2>&1
    $B --workers 8 1 8 --operations components --scheduler-process \
        --json "$OUT/cc-fresh.json" > "$OUT/run.log" 2>&1
    echo "components (fresh) done at $SECONDS s" >> "$OUT/run.log"
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe /dev/shm/gg-probe --repeats 2 \
        --plain --heap --pretouch-gib 100 \
        --modes labels labels-runs-populate labels-runs-huge \
        labels-runs-sparse labels-runs-cached \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    head -n 5 /proc/meminfo >> "$OUT/memory.txt"
    rm -rf /dev/shm/gg-probe
    $B --workers 8 1 8 --operations components --scheduler-process \
        --json "$OUT/cc-touched.json" >> "$OUT/run.log" 2>&1
    echo "components (after the probe) done at $SECONDS s" >> "$OUT/run.log"
    ;;
twentythird_cpus)
    machine
    python3 bench/cpu_sharing.py --procs 1 2 4 8 16 --pairs \
        --json "$OUT/cpus.json" > "$OUT/cpus.log" 2>&1
    echo "cpus done at $SECONDS s" >> "$OUT/cpus.log"
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 2 4 8 16 --dirs $W/probe --repeats 1 --plain --heap \
        --modes labels labels-runs-populate \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    ;;
twentythird_all | twentyfourth_all)
    # every operation at 8, 1, 8 workers with the host's CPU sharing (the
    # twenty-fourth session ran it on its code: the compiled row I/O in)
    machine
    python3 bench/cpu_sharing.py --procs 1 8 \
        --json "$OUT/cpus.json" > "$OUT/cpus.log" 2>&1
    $B --workers 8 1 8 --operations components costdistance mst \
        --scheduler-process --json "$OUT/all.json" > "$OUT/run.log" 2>&1
    echo "all three done at $SECONDS s" >> "$OUT/run.log"
    ;;
fortyfirst_counts)
    # the issue's table at HEAD: every operation at 1, 4, 8 and 16
    # workers on one host (components ABBA over the counts, two turns
    # each; cost distance once a count, 1 worker last: a cut call keeps
    # what finished; the MST in fortyfirst_counts_mst), each in its own
    # log; plus the kernel's
    # page-zeroing settings (init_on_alloc) for the write-path notes
    machine
    { cat /proc/cmdline; grep -h "INIT_ON_ALLOC\|INIT_ON_FREE" \
          /boot/config-"$(uname -r)" 2>/dev/null;
      zcat /proc/config.gz 2>/dev/null | grep "INIT_ON_ALLOC\|INIT_ON_FREE";
      grep -h . /sys/module/page_alloc/parameters/* 2>/dev/null;
      free -g; } >> "$OUT/machine.txt" 2>&1
    $B --workers 8 1 4 16 8 1 --turns 2 --operations components \
        --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 16 8 4 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd.json" > "$OUT/cd.log" 2>&1
    echo "cost distance done at $SECONDS s" >> "$OUT/cd.log"
    ;;
fortyfirst_counts_mst)
    # the rest of fortyfirst_counts (one call would pass the 600 s limit):
    # the MST at 16, 8, 4 and 1 workers
    machine
    $B --workers 16 8 4 1 --operations mst --scheduler-process \
        --json "$OUT/mst.json" > "$OUT/mst.log" 2>&1
    echo "MST done at $SECONDS s" >> "$OUT/mst.log"
    ;;
fortieth_final)
    # components with the defaults against the label runs' mappings
    # advised MADV_HUGEPAGE and populated (components-hugepop), ABBA at 8,
    # 1, 8 workers; then cost distance and the MST at 8 and 1 worker with
    # the defaults (each in its own log: a cut call keeps what finished)
    machine
    $B --workers 8 1 8 --turns 2 --operations components components-hugepop \
        --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd.json" > "$OUT/cd.log" 2>&1
    echo "cost distance done at $SECONDS s" >> "$OUT/cd.log"
    $B --workers 8 1 --operations mst --scheduler-process \
        --json "$OUT/mst.json" > "$OUT/mst.log" 2>&1
    echo "MST done at $SECONDS s" >> "$OUT/mst.log"
    ;;
fortieth_ahead)
    # tile_tasks.DASK_ROUND_AHEAD (commit 5b92192, reverted after this
    # call): the label round submitted with round 1, its answers handed off
    # through a file once the merge has run, against submitted after the
    # merge (components-noahead); ABBA at 8, 1, 8 workers, then timelines
    # at 8.  Its variants no longer exist.
    machine
    $B --workers 8 1 8 --turns ${AHEAD_TURNS:-3} --operations components \
        components-noahead ${AHEAD_VARIANTS:-} --scheduler-process \
        --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 --turns 1 --operations components components-noahead \
        --scheduler-process --timeline --json "$OUT/cc-timeline.json" \
        > "$OUT/timeline.log" 2>&1
    echo "timelines done at $SECONDS s" >> "$OUT/timeline.log"
    ;;
thirtyninth_confirm)
    # thirtyninth_final without cost distance and the MST (a call that
    # fits what was left of the session's device time)
    machine
    python3 bench/mapped_writes.py --tile-rows 16 --parts 3 13 \
        --procs 1 8 --modes populate huge huge-populate --repeats 1 \
        > "$OUT/mapped.log" 2>&1
    grep -E "thp_file" /proc/vmstat > "$OUT/vmstat-before.txt"
    $B --workers 8 1 8 --turns ${CONFIRM_TURNS:-2} --operations components \
        components-nohuge ${CONFIRM_VARIANTS:-components-hugepop} --scheduler-process \
        --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    grep -E "thp_file" /proc/vmstat > "$OUT/vmstat-after.txt"
    ;;
thirtyninth_final)
    # components with the defaults (the label runs' mappings advised
    # MADV_HUGEPAGE where the kernel makes large folios) against populated
    # without the advice, 8, 1, 8 workers, ABBA; then cost distance and
    # the MST at 8 and 1 worker with the defaults
    machine
    python3 bench/mapped_writes.py --tile-rows 16 --parts 1 3 13 \
        --procs 1 8 --modes populate huge plain --repeats 2 \
        > "$OUT/mapped.log" 2>&1
    grep -E "thp_file" /proc/vmstat > "$OUT/vmstat-before.txt"
    $B --workers 8 1 8 --turns 2 --operations components components-nohuge \
        --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    grep -E "thp_file" /proc/vmstat > "$OUT/vmstat-after.txt"
    $B --workers 8 1 --operations costdistance mst --scheduler-process \
        --json "$OUT/others.json" > "$OUT/others.log" 2>&1
    echo "cost distance and MST done at $SECONDS s" >> "$OUT/others.log"
    ;;
thirtyninth_huge)
    # the label runs' mappings advised MADV_HUGEPAGE and not populated
    # (components-huge), against not populated alone (components-runs)
    # and the defaults, 8, 1, 8 workers, ABBA; the kernel's THP counters
    machine
    grep -E "thp_file|thp_fault" /proc/vmstat > "$OUT/vmstat-before.txt"
    $B --workers 8 1 8 --turns 2 --operations components components-huge \
        components-runs --scheduler-process --json "$OUT/cc.json" \
        > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    grep -E "thp_file|thp_fault" /proc/vmstat > "$OUT/vmstat-after.txt"
    ;;
thirtyninth_tiles)
    # what touching fresh, just-freed and long-freed memory costs at 1 and
    # 8 processes (bench/fresh_pages.py), then components at 8, 1, 8
    # workers with tiles of 1024, 2048 and 1536, each on its own clusters
    machine
    python3 bench/fresh_pages.py --procs 1 8 --mb 880 --pause 5 \
        > "$OUT/fresh.log" 2>&1
    for size in 1024 2048 1536 2048 1024; do
        $B --tile-size $size --workers 8 1 8 --turns 2 \
            --operations components --scheduler-process \
            --json "$OUT/cc-$size-$SECONDS.json" >> "$OUT/run.log" 2>&1
        echo "tiles of $size done at $SECONDS s" >> "$OUT/run.log"
    done
    ;;
thirtyseventh_heap)
    # tile_tasks.BATCHES_HEAP_KEPT: round 1's batches leave freed memory
    # in the worker's heap for the next batch and the label round
    machine
    $B --workers 8 1 8 --turns 3 --operations components \
        components-batchtrim --scheduler-process --json "$OUT/cc.json" \
        > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 --turns 2 --operations components components-batchtrim \
        --scheduler-process --timeline --json "$OUT/cc-timeline.json" \
        > "$OUT/timeline.log" 2>&1
    echo "timelines done at $SECONDS s" >> "$OUT/timeline.log"
    ;;
thirtysixth_runs)
    # (the thirty-sixth session's call ran components with the label
    # round in runs of near equal cells, a whole number a worker, against
    # components-runs7 (each tile row cut into runs of at most 7 tiles,
    # the default at 8 workers), at commit 5ad3e7a; measured slower and
    # reverted.)  Now: components at 8, 1, 8 workers, twice each, then
    # twice at 8 with timelines
    machine
    $B --workers 8 1 8 --turns 2 --operations components \
        --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 --turns 2 --operations components \
        --scheduler-process --timeline --json "$OUT/cc-timeline.json" \
        > "$OUT/timeline.log" 2>&1
    echo "timelines done at $SECONDS s" >> "$OUT/timeline.log"
    ;;
thirtysixth_pages)
    # where the label round's page-cache pages are made: 880 MiB written by
    # 1 and 8 processes through the kernel's paths (one file or one each,
    # mapped or pwrite, anonymous, tmpfs), then components on Dask at 8,
    # 1, 8 workers.  (The thirty-sixth session's call also ran the
    # variants components-pages-{read,write} and the fadvise default of
    # commit bb35805, round 1's tiles bringing the labels file's pages in;
    # measured slower, reverted with their switch.)
    machine
    python3 bench/write_paths.py --procs 1 8 --repeats 2 --dir $W/wp \
        > "$OUT/write-paths.log" 2>&1
    $B --workers 8 1 8 --turns 2 --operations components \
        --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
thirtyfifth_bound)
    # how far Dask's components run is from the same tile work done by
    # bare processes on this host (the probe's 1-process runs come first
    # and pay a fresh VM's first writes: not a bound on T1)
    machine
    python3 bench/cpu_sharing.py --procs 1 8 \
        --json "$OUT/cpus.json" > "$OUT/cpus.log" 2>&1
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 2 --plain --heap \
        --modes summary labels labels-runs-populate \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    $B --workers 8 1 8 --operations components --scheduler-process \
        --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    ;;
twentythird_sizes)
    machine
    python3 bench/cpu_sharing.py --procs 1 8 \
        --json "$OUT/cpus.json" > "$OUT/cpus.log" 2>&1
    for size in 256 512 1024 2048; do
        python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
            --tile-size $size --procs 1 8 --repeats 2 --plain --heap \
            --modes summary labels \
            --json "$OUT/probe-$size.json" > "$OUT/probe-$size.log" 2>&1
        echo "probe ($size) done at $SECONDS s" >> "$OUT/probe-$size.log"
    done
    ;;
twentythird_rows)
    machine
    $B --workers 8 1 8 --operations components components-pyrows \
        --turns 2 --scheduler-process --json "$OUT/cc.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 --operations costdistance costdistance-pyrows mst \
        mst-pyrows --scheduler-process --json "$OUT/cd-mst.json" \
        >> "$OUT/run.log" 2>&1
    echo "cost distance, mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
twentysecond_probe)
    # the tile probe: the label round's runs written through mappings of
    # the labels file (-runs) against its pages put in the page cache
    # first, by one populated mapping (-cached) or by one thread's pwrite
    # of zeros (-zeroed, large folios where ext4 makes them), and against
    # no writes (labels); 1 and 8 processes, two repeats; the file folio
    # counters before and after
    machine
    python3 - <<'PY'
import importlib.util
spec = importlib.util.spec_from_file_location("bench_dask", "bench/dask.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.make_inputs("/tmp/gg-dask", (17630, 12555))
PY
    grep -H . /sys/kernel/mm/transparent_hugepage/hugepages-*/stats/file_alloc \
        > "$OUT/folios.txt" 2>&1
    python3 bench/dask_tile_probe.py --mask $W/mask-17630x12555.npy \
        --procs 1 8 --dirs $W/probe --repeats 2 \
        --modes labels labels-runs labels-runs-cached labels-runs-zeroed \
        --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
    echo "probe done at $SECONDS s" >> "$OUT/probe.log"
    grep -H . /sys/kernel/mm/transparent_hugepage/hugepages-*/stats/file_alloc \
        >> "$OUT/folios.txt" 2>&1
    ;;
twentyfirst_fetch)
    # components' label round waiting for each task's end only (the
    # default in that call, removed after it) against fetching its result
    # (None) as before (-fetched, removed with it), 8, 1, 8 workers ABBA
    # with timelines
    components_timelines --workers 8 1 8 --operations components \
        components-fetched --turns 2 --scheduler-process
    ;;
nineteenth_512)
    # tiles of 512: four times the tiles (more to start at once, each
    # solve's state a quarter as large) against their per-task costs
    machine
    python3 bench/dask.py --neuse40 --tile-size 512 --workdir $W --keep \
        --workers 8 1 --operations costdistance --scheduler-process \
        --json "$OUT/cd512.json" > "$OUT/run.log" 2>&1
    echo "costdistance (tiles of 512) done at $SECONDS s" >> "$OUT/run.log"
    ;;
nineteenth_delta)
    # the distance rounds' scheduling: fewer tiles solved again (a start
    # slack of 1 or 0.5 tile crossings, or no start beside a lower
    # neighbour in flight) against fewer tiles at once; 8 workers only (at
    # 1 worker a tile is started alone, by least key, whatever these say)
    machine
    $B --workers 8 --operations costdistance costdistance-delta1 \
        costdistance-delta05 costdistance-wait --turns 2 --scheduler-process \
        --json "$OUT/cd8.json" > "$OUT/run.log" 2>&1
    echo "costdistance at 8 done at $SECONDS s" >> "$OUT/run.log"
    ;;
eighteenth_survey)
    # cost distance with the survey round in batches submitted at once
    # (the default since) against a task a tile (-surveytiles), 8 workers,
    # ABBA over two turns, with timelines (the survey's task stream)
    machine
    $B --workers 8 --operations costdistance costdistance-surveytiles \
        --turns 2 --timeline --scheduler-process \
        --json "$OUT/cd-survey.json" > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
eighteenth_mst)
    # the MST with the heap kept between its tile tasks (the default
    # since) against set back after each (-tasktrim), 8 then 1 worker
    machine
    $B --workers 8 1 --operations mst mst-tasktrim --scheduler-process \
        --json "$OUT/mst.json" > "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
seventeenth)
    machine
    $B --workers 8 1 8 --operations costdistance --scheduler-process \
        --json "$OUT/cd.json" > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations components --turns 3 --scheduler-process \
        --json "$OUT/components.json" >> "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations mst --scheduler-process \
        --json "$OUT/mst.json" >> "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
fifteenth_other)
    # the same for components (three turns) and the MST, at 8 and 1
    machine
    $B --workers 8 1 --operations components components-batched \
        --turns 3 --timeline --scheduler-process \
        --json "$OUT/components-sp.json" > "$OUT/run.log" 2>&1
    echo "components done at $SECONDS s" >> "$OUT/run.log"
    $B --workers 8 1 --operations mst mst-batched --scheduler-process \
        --json "$OUT/mst-sp.json" >> "$OUT/run.log" 2>&1
    echo "mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
fourteenth_other)
    # components and the MST with the scheduler in a process of its own
    # at 8 and 1 workers
    machine
    $B --workers 8 1 --operations components mst --timeline \
        --scheduler-process --json "$OUT/other-sp.json" > "$OUT/run.log" 2>&1
    echo "components, mst done at $SECONDS s" >> "$OUT/run.log"
    ;;
twelfth_cd)
    # cost distance at 8, 1 and 8 workers with timelines: a TaskPool step
    # as two Dask tasks (the state inside the step's own)
    machine
    $B --workers 8 1 8 --operations costdistance --timeline \
        --json "$OUT/cd.json" > "$OUT/run.log" 2>&1
    echo "costdistance done at $SECONDS s" >> "$OUT/run.log"
    ;;
sixteen)
    $B --workers 16 --operations costdistance \
        --json "$OUT/w16-cd.json" > "$OUT/w16-cd.log" 2>&1
    ;;
four)
    $B --workers 4 --operations costdistance components mst \
        --json "$OUT/w4.json" > "$OUT/w4.log" 2>&1
    # GPU workers: 1 and 2 worker processes sharing the GPU, CUDA tile
    # kernels, a 4096 x 4096 crop of the DEM; compared with the CPU run
    G="python3 bench/dask.py --shape 4096 4096 --tile-size 1024 --workdir $W-gpu --keep"
    $G --workers 2 --backend cpu --operations costdistance components \
        --json "$OUT/gpu-ref.json" > "$OUT/gpu-ref.log" 2>&1
    $G --workers 1 2 --backend cuda --gpu-workers \
        --operations costdistance components \
        --json "$OUT/gpu.json" > "$OUT/gpu.log" 2>&1
    ;;
esac
tail -n 3 "$OUT"/*.log
cat "$OUT/machine.txt" 2>/dev/null | head -n 3
[ -f "$OUT/probe.json" ] && python3 - "$OUT/probe.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
print(data["info"])
print("mode dir procs pin heap span cpu/tile_ms user sys minflt "
      "faults/page steal")
for r in data["rows"]:
    print(r.get("memory", ""), r["mode"], r["dir"] or "-", r["procs"],
          r["pin"] or "-",
          "heap" if r["heap"] else "-", r["span"], r["cpu_per_tile_ms"],
          r["user"], r["sys"], r["minflt"], r.get("faults_per_page", ""),
          r["steal_share"], r.get("vmstat", ""))
PY
python3 - "$OUT" <<'PY'
import glob, json, sys
rows = []
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    data = json.load(open(path))
    if data.get("bench") != "dask":
        continue  # the tile probe's
    for row in data["rows"]:
        rows.append((path.split("/")[-1], row))
first = {}
for name, row in rows:
    key = (row["operation"].split("-")[0], "gpu" in name)
    ref = first.setdefault(key, row["digests"])
    print(name, row["operation"], row.get("out_root", ""), row["workers"],
          round(row["seconds"], 2), row.get("worker_usage", ""),
          row.get("phases", ""),
          "identical" if row["digests"] == ref else "DIFFERENT", row["note"])
PY
