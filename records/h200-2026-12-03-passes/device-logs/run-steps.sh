set -uo pipefail
work=/tmp/gc-run; layers="config/config.yaml config/gpu-run.yaml config/lean-run.yaml"
source .device-env/setup.sh || exit 1
export PYTHONPATH=$PWD/workflow:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*" >> $work/run.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> $work/run.log
git rev-parse HEAD >> $work/run.log
log "pytest backward passes training"
timeout 330 python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider --junitxml=$work/gpu-tests-backward.xml \
  tests/test_gpu_backward.py tests/test_gpu_passes.py tests/test_gpu_training.py > $work/pytest-backward.log 2>&1
log "pytest exit $?"
log "snakemake backward_passes"
snakemake backward_passes --cores all --configfile $layers --config mode=live record_name=2026-12-03 > $work/passes.log 2>&1
log "backward_passes exit $?"
touch $work/passes-done
log "pytest conv2d layouts"
timeout 240 python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider --junitxml=$work/gpu-tests-op.xml \
  tests/test_gpu_conv2d_layouts.py tests/test_gpu_conv2d.py > $work/pytest-op.log 2>&1
log "pytest exit $?"
log "snakemake network_probe"
snakemake network_probe --cores all --configfile $layers --config mode=live record_name=2026-12-03 > $work/probe.log 2>&1
log "network_probe exit $?"
touch $work/done
