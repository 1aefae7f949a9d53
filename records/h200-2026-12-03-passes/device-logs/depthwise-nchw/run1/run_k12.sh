#!/bin/bash
# k12 on the GPU machine: the tuning stage of k12 and k11 over the atlas's shapes, bench_k12 (both
# with their tuned launches beside cuDNN's channels_last kernels, PyTorch's NCHW kernel and the
# floor's copy), then k12's GPU tests with every tuned kernel's odd geometries, then the
# sanitizer's tests of every kernel.
source .device-env/setup.sh >/dev/null
export PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/machine.txt
s=$(date +%s); el() { echo "[$(( $(date +%s) - s )) s] $*"; }
timeout 150 snakemake --cores 16 results/h200/raw/tuning/k12.json results/h200/raw/tuning/k11.json \
  --configfile config/config.yaml config/gpu-run.yaml --config mode=live > $OUT/tune.log 2>&1
el "tuning rc $?"; tail -n 1 results/h200/logs/tune_kernel-k1*.log; grep -i error $OUT/tune.log | head -5
cp results/h200/raw/tuning/k12.json $OUT/tuning-k12.json; cp results/h200/raw/tuning/k11.json $OUT/tuning-k11.json
timeout 190 python3 .devscratch/exp/bench_k12.py $OUT 2>&1 | tail -3
el "bench done"
timeout 120 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_mutants.py \
  tests/test_gpu_kernels.py -k "k12 or odd_geometries" > $OUT/gpu-tests-k12.log 2>&1
el "gpu tests rc $?"; tail -4 $OUT/gpu-tests-k12.log
timeout 110 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_sanitizer.py > $OUT/gpu-tests-sanitizer.log 2>&1
el "sanitizer rc $?"; tail -4 $OUT/gpu-tests-sanitizer.log
