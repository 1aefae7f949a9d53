#!/bin/bash
# k11 on the GPU machine: the tuning stage of k11 and k10 over the atlas's shapes, bench_k11 (k11
# and k10 with their tuned launches beside cuDNN's channels_last kernels), then k11's GPU tests.
source .device-env/setup.sh >/dev/null
export GROUPCONV_CACHE=$PWD/.devscratch/cubins PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/machine.txt
timeout 110 snakemake --cores 16 results/h200/raw/tuning/k11.json results/h200/raw/tuning/k10.json \
  --configfile config/config.yaml config/gpu-run.yaml --config mode=live > $OUT/tune.log 2>&1
echo "tuning rc $?"; tail -n 1 results/h200/logs/tune_kernel-k1*.log; grep -i error $OUT/tune.log | head -5
cp results/h200/raw/tuning/k11.json $OUT/tuning-k11.json; cp results/h200/raw/tuning/k10.json $OUT/tuning-k10.json
timeout 100 python3 .devscratch/exp/bench_k11.py $OUT 2>&1 | tail -4
timeout 115 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_mutants.py \
  tests/test_gpu_kernels.py -k "k11 or odd_geometries" > $OUT/gpu-tests-k11.log 2>&1
echo "gpu tests rc $?"; tail -4 $OUT/gpu-tests-k11.log
