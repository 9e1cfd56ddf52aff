#!/bin/bash
# Components on the GPU machine's CPU, one call: the 2-core goal table at
# 2048² and 4096² (bench/components_phases.py: random 0.6 and fractal
# masks, 4- and 8-connected, nonzero and equal mode, ours at 1 and 2 strips
# interleaved with OpenCV Spaghetti at 1 and 2 threads, every labelling
# checked against scipy), system time and page faults per call
# (bench/components_faults.py), wall per cell at 2048² and 4096²
# (bench/components_per_cell.py), then the one-thread scans against an older
# checkout (bench/components_one_thread.py, thread time) when one is
# carried in old/gridgraph_old; with STEPS=scaling (or a list of steps),
# the per-strip probe (bench/components_scaling.py) on CPUs 0,1 and 0,8 and
# the wide spin test on CPU pairs.  Each step has its own time limit and
# prints its rows as it goes, so a cut step keeps what it did.
#
#   cd .dev-wt/cpu && STEPS="phases scaling" bash bench/components_device.sh "$OUT"
set -u
out=${1:?usage: components_device.sh OUTDIR}
python3 -m pip install -q --no-index --no-deps --target "$HOME/site" \
    ../../.whl/*.whl
mkdir -p "$HOME/pkg" && ln -sfn "$PWD" "$HOME/pkg/gridgraph"
export PYTHONPATH="$HOME/site:$HOME/pkg:$PWD/old:${PYTHONPATH:-}"
{
    date -u; uptime; nproc; lscpu | grep "Model name"
    python3 -c "import cv2, numba, numpy, scipy; print('opencv', \
cv2.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, \
'scipy', scipy.__version__)"
    cat CODE 2>/dev/null
    lscpu -e 2>/dev/null | head -20
    cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list
    cat /sys/kernel/mm/transparent_hugepage/enabled
} 2>&1 | tee "$out/env.txt"
steps=" ${STEPS:-phases faults per_cell one_thread} "
if [[ $steps == *" scaling "* ]]; then
echo "## scaling: wide spin on CPU pairs, per-strip probe on 0,1 and 0,8"
timeout 30 python3 bench/components_scaling.py --spin-pairs 0,1 0,2 0,8 \
    0,15 2>&1 | tee "$out/spin.txt"
timeout "${SCALING_S:-150}" taskset -c 0,1 python3 \
    bench/components_scaling.py 2048 4096 --repeat 5 --cases \
    ${SCALING_CASES:-random:8:nonzero random:4:nonzero fractal:8:nonzero \
    random:4:equal random:8:equal} 2>&1 | tee "$out/scaling.txt"
timeout "${SCALING_08_S:-30}" taskset -c 0,8 python3 \
    bench/components_scaling.py 4096 --repeat 5 --cases random:8:nonzero \
    2>&1 | tee "$out/scaling-0-8.txt"
fi
if [[ $steps == *" phases "* ]]; then
echo "## goal table: taskset -c 0,1 bench/components_phases.py 2048 4096"
timeout "${PHASES_S:-130}" taskset -c 0,1 python3 \
    bench/components_phases.py 2048 4096 --repeat 5 2>&1 | tee "$out/phases.txt"
fi
if [[ $steps == *" faults "* ]]; then
echo "## fresh memory: taskset -c 0,1 bench/components_faults.py 2048 4096"
timeout "${FAULTS_S:-15}" taskset -c 0,1 python3 \
    bench/components_faults.py 2048 4096 2>&1 | tee "$out/faults.txt"
fi
if [[ $steps == *" per_cell "* ]]; then
echo "## per cell: taskset -c 0,1 bench/components_per_cell.py"
timeout "${PER_CELL_S:-20}" taskset -c 0,1 python3 \
    bench/components_per_cell.py 2>&1 | tee "$out/per_cell.txt"
fi
if [[ $steps == *" one_thread "* ]]; then
echo "## one thread: taskset -c 0 bench/components_one_thread.py 2048"
timeout "${ONE_THREAD_S:-40}" taskset -c 0 python3 \
    bench/components_one_thread.py 2048 --repeat 5 2>&1 | tee "$out/one_thread.txt"
fi
date -u; uptime
