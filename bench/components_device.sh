#!/bin/bash
# Components on the GPU machine's CPU, one call: the one-thread scans
# (thread time, ours against OpenCV and the general cell scan), the 2-core
# goal table at 2048² and 4096² (phases, interleaved with OpenCV), and the
# 1-16 thread row at 4096² (bench/cpu.py).  Each step has its own time
# limit and prints its rows as it goes, so a cut step keeps what it did.
#
#   cd .dev-wt/cpu && bash bench/components_device.sh "$OUT"
set -u
out=${1:?usage: components_device.sh OUTDIR}
python3 -m pip install -q --no-index --no-deps --target "$HOME/site" \
    ../../.whl/*.whl
mkdir -p "$HOME/pkg" && ln -sfn "$PWD" "$HOME/pkg/gridgraph"
export PYTHONPATH="$HOME/site:$HOME/pkg:${PYTHONPATH:-}"
{
    date -u; uptime; nproc; lscpu | grep "Model name"
    python3 -c "import cv2, numba, numpy, scipy; print('opencv', \
cv2.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, \
'scipy', scipy.__version__)"
    cat CODE 2>/dev/null
} 2>&1 | tee "$out/env.txt"
echo "## one thread: taskset -c 0 bench/components_one_thread.py 2048"
timeout "${ONE_THREAD_S:-70}" taskset -c 0 python3 \
    bench/components_one_thread.py 2048 --repeat 7 2>&1 | tee "$out/one_thread.txt"
echo "## goal table: taskset -c 0,1 bench/components_phases.py 2048 4096"
timeout "${PHASES_S:-120}" taskset -c 0,1 python3 \
    bench/components_phases.py 2048 4096 --repeat 5 2>&1 | tee "$out/phases.txt"
echo "## scaling: bench/cpu.py --sizes 4096 --threads 1 2 4 8 16"
timeout "${SCALING_S:-90}" python3 bench/cpu.py --sizes 4096 --repeat 3 \
    --operations none --threads 1 2 4 8 16 --scaling-cost none \
    --json "$out/scaling.json" 2>&1 | tee "$out/scaling.txt"
date -u; uptime
