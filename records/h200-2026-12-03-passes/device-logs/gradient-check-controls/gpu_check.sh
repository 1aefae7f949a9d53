#!/bin/bash
# The gradient checks with rounding controls and the per-layer check, on the GPU machine.
source .device-env/setup.sh >/dev/null
export GROUPCONV_CACHE=$PWD/.devscratch/cubins PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/machine.txt
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_training.py \
  tests/test_mobilenet_probe.py -k "close_to_fp64 or probe_s_gradient_check or block_agrees" \
  > $OUT/gpu-tests.log 2>&1
echo "gpu tests rc $?" | tee -a $OUT/gpu-tests.log
tail -3 $OUT/gpu-tests.log
timeout 330 python3 tools/training_check.py records/h200-2026-12-03-passes $OUT/training-gradients \
  --gradients-only 2>&1 | grep -v "^dispatch: geometry" > $OUT/training-gradients.log
echo "training check rc ${PIPESTATUS[0]}" | tee -a $OUT/training-gradients.log
grep -c "OUTSIDE" $OUT/training-gradients.log
grep "OUTSIDE" $OUT/training-gradients.log | cut -c1-400
