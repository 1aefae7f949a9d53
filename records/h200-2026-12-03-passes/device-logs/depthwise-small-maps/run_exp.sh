#!/bin/bash
source .device-env/setup.sh >/dev/null
export GROUPCONV_CACHE=$PWD/.devscratch/cubins PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
E=.devscratch/exp
timeout 300 python3 $E/bench_dw.py $OUT 2>&1 | grep -v "^dispatch:" | tail -60
timeout 200 ncu --target-processes all -k regex:"conv|k10|k8_|floor|dw_direct|depthwise" \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --csv --page details \
  python3 $E/bench_dw.py $OUT --ncu > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu rc $?"; wc -l $OUT/ncu.csv; tail -3 $OUT/ncu.err
