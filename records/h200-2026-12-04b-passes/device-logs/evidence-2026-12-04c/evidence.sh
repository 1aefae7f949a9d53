#!/usr/bin/env bash
# On the GPU machine, in the background: Nsight captures of the weight gradient's losses beside
# cuDNN's, then the training check of every probe network at N = 8 and 32.
set -u
W=/tmp/ev; mkdir -p $W
export PYTHONPATH=$PWD/workflow:${PYTHONPATH:-}
R=records/h200-2026-12-04b-passes
date -u +%FT%TZ > $W/started
python3 tools/backward_captures.py capture $R/raw/shapes.json $W/captures \
  weight_grad:resnext101-32x8d-n32-c1024-14x14-g32:wg_nhwc \
  weight_grad:resnext101-32x8d-n32-c1024-14x14-g32:wg_nchw \
  weight_grad:resnext101-32x8d-n32-c1024-14x14-g32:torch_default \
  weight_grad:efficientnet-b3-n16-c40-150x150-g40:wg_nhwc \
  weight_grad:efficientnet-b3-n16-c40-150x150-g40:torch_tuned_nhwc \
  weight_grad:stress-bign-n256-c96-56x56-g96:wg_nhwc \
  weight_grad:stress-bign-n256-c96-56x56-g96:torch_tuned_nhwc \
  weight_grad:mobilenetv2-train-n128-c32-112x112-g32:wg_nhwc \
  weight_grad:mobilenetv2-train-n128-c32-112x112-g32:torch_default_nhwc \
  > $W/captures.log 2>&1
echo "captures rc $?" >> $W/captures.log
python3 tools/backward_captures.py table $W/captures > $W/captures-table.log 2>&1
date -u +%FT%TZ > $W/captures-done
python3 tools/training_check.py $R $W/training --ns 8 32 > $W/tc.log 2>&1
echo "training rc $?" >> $W/tc.log
date -u +%FT%TZ > $W/done
