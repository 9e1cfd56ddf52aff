#!/bin/bash
# Components on the GPU machine's CPU, one call: the 2-core goal table at
# 2048² and 4096² (bench/components_phases.py: random 0.6 and fractal
# masks, 4- and 8-connected, nonzero and equal mode, ours at 1 and 2 strips
# interleaved with OpenCV Spaghetti at 1 and 2 threads, every labelling
# checked against scipy), system time and page faults per call
# (bench/components_faults.py), then the one-thread scans against an older
# checkout (bench/components_one_thread.py, thread time) when one is
# carried in old/gridgraph_old.  Each step has its own time limit and
# prints its rows as it goes, so a cut step keeps what it did.
#
#   cd .dev-wt/cpu && bash bench/components_device.sh "$OUT"
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
} 2>&1 | tee "$out/env.txt"
echo "## goal table: taskset -c 0,1 bench/components_phases.py 2048 4096"
timeout "${PHASES_S:-150}" taskset -c 0,1 python3 \
    bench/components_phases.py 2048 4096 --repeat 5 2>&1 | tee "$out/phases.txt"
echo "## fresh memory: taskset -c 0,1 bench/components_faults.py 2048 4096"
timeout "${FAULTS_S:-25}" taskset -c 0,1 python3 \
    bench/components_faults.py 2048 4096 2>&1 | tee "$out/faults.txt"
echo "## one thread: taskset -c 0 bench/components_one_thread.py 2048"
timeout "${ONE_THREAD_S:-60}" taskset -c 0 python3 \
    bench/components_one_thread.py 2048 --repeat 5 2>&1 | tee "$out/one_thread.txt"
date -u; uptime
