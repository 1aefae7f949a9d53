#!/usr/bin/env bash
# Runs on the GPU machine from the repository root:  bash tools/device_run.sh smoke|atlas|extras
# Installs the carried wheels, runs the GPU tests and the workflow live, and packs what must come
# back (logs, raw records) into $OUT. Each step's log goes to $OUT as well.
set -uo pipefail
step=${1:?usage: tools/device_run.sh smoke|atlas|extras}
out=${OUT:-/tmp/out}
mkdir -p "$out"
source .device-env/setup.sh || exit 1
export PYTHONPATH=$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*"; }

log "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -c "import torch, pycuda, snakemake; print(torch.__version__, torch.backends.cudnn.version(), pycuda.VERSION_TEXT, snakemake.__version__)"

case "$step" in
smoke)
  log "gpu tests"
  python3 -m pytest -m gpu -q -x tests 2>&1 | tee "$out/pytest-gpu.log" | tail -30
  log "smoke workflow"
  snakemake --cores 1 atlas --configfile config/smoke.yaml --config mode=live device=h200-smoke \
    2>&1 | tee "$out/smoke.log" | grep -vE '^\s*$' | tail -40
  tar czf "$out/smoke-results.tgz" results/h200-smoke
  ;;
atlas)
  log "gpu tests"
  python3 -m pytest -m gpu -q tests 2>&1 | tee "$out/pytest-gpu.log" | tail -15
  log "atlas"
  start=$(date +%s)
  snakemake --cores 1 atlas --config mode=live 2>&1 | tee "$out/atlas.log" | grep -E 'verify|time\]|Finished|Error|error' | tail -60
  log "atlas wall time: $(( $(date +%s) - start )) s"
  snakemake --cores 1 snapshot_record --config mode=live record_name=${RECORD_DATE:-$(date -u +%F)} 2>&1 | tail -3
  tar czf "$out/record.tgz" records
  ;;
extras)
  for target in ${EXTRA_TARGETS:-mobilenet_probe nsight crosscheck}; do
    log "$target"
    snakemake --cores 1 "$target" --config mode=live 2>&1 | tee "$out/$target.log" | tail -15
  done
  tar czf "$out/extras.tgz" results/h200/raw results/h200/provenance
  ;;
esac
log "done"
