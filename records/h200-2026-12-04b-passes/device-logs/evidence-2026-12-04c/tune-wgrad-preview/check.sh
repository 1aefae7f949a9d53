#!/usr/bin/env bash
# On the GPU machine, in the background: the GPU tests of the tuning stage and the backward, then
# the tuning stage itself through Snakemake in a scratch device folder.
set -u
W=/tmp/ev; mkdir -p $W
export PYTHONPATH=$PWD/workflow:${PYTHONPATH:-}
date -u +%FT%TZ > $W/started
python3 -m pytest -m gpu -q -x tests/test_gpu_wgrad_tuning.py tests/test_gpu_backward.py > $W/gpu-tests.log 2>&1
echo "rc $?" >> $W/gpu-tests.log
date -u +%FT%TZ > $W/tests-done
python3 -m snakemake --cores all results/devtest/raw/passes/tuning/wg_nhwc.json \
  results/devtest/raw/passes/tuning/wg_nchw.json --configfile config/config.yaml \
  config/gpu-run.yaml config/lean-run.yaml --config mode=live device=devtest record_name=x \
  > $W/tune.log 2>&1
echo "rc $?" >> $W/tune.log
cp -r results/devtest/raw/passes/tuning $W/ 2>/dev/null; cp results/devtest/logs/tune_wgrad-*.log $W/ 2>/dev/null
date -u +%FT%TZ > $W/done
