#!/bin/bash
# k12 with the shifted window on the GPU machine: the tuning stage of k12 over the atlas's shapes,
# bench_k12 (k12 tuned and untuned beside cuDNN's channels_last kernels, PyTorch's NCHW kernel and
# the floor's copy).
source .device-env/setup.sh >/dev/null
export PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/machine.txt
s=$(date +%s); el() { echo "[$(( $(date +%s) - s )) s] $*"; }
timeout 60 snakemake --cores 16 results/h200/raw/tuning/k12.json \
  --configfile config/config.yaml config/gpu-run.yaml --config mode=live > $OUT/tune.log 2>&1
el "tuning rc $?"; tail -n 1 results/h200/logs/tune_kernel-k12.log; grep -i error $OUT/tune.log | head -5
cp results/h200/raw/tuning/k12.json $OUT/tuning-k12.json
timeout 75 python3 .devscratch/exp/bench_k12.py $OUT 2>&1 | tail -2
el "bench done"
