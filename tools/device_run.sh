#!/usr/bin/env bash
# Runs on the GPU machine from the repository root.
#   bash tools/device_run.sh smoke          GPU tests + an eight-shape live atlas (minutes)
#   bash tools/device_run.sh start          starts the full session in the background, then waits
#   bash tools/device_run.sh wait           waits for it (a later call), then packs what comes back
# The full session: GPU tests, the live atlas, the MobileNet probe and Nsight captures, then a
# snapshot into records/<device>-<date>/. Everything that must come back lands in $OUT.
set -uo pipefail
step=${1:?usage: tools/device_run.sh smoke|start|wait|full}
out=${OUT:-/tmp/out}
work=/tmp/atlas-session
copy=/tmp/atlas-repo
mkdir -p "$out" "$work"
source .device-env/setup.sh || exit 1
export PYTHONPATH=$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*"; }

pack() {  # what comes back: at most 8 files of at most 16 MiB: the new record and the logs,
  # split into 15 MiB parts (join with: cat record.tgz.part-* | tar xz)
  local new
  new=$(ls -td records/*/ 2>/dev/null | head -1)
  tar czf /tmp/record.tgz "$new" results/h200/logs 2>/dev/null
  split -b 15M /tmp/record.tgz "$out/record.tgz.part-"
  cp "$work"/*.log "$out"/ 2>/dev/null
  ls -la "$out"
}

case "$step" in
smoke)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -m pytest -m gpu -q -x tests 2>&1 | tee "$out/pytest-gpu.log" | tail -30
  snakemake --cores 1 -k atlas nsight --configfile config/smoke.yaml --config mode=live \
    device=h200-smoke2 > "$out/smoke.log" 2>&1
  echo "smoke workflow exit $?"; grep -E "Error|error|Exception|steps \(" "$out/smoke.log" | tail -25
  tar czf "$out/smoke-results.tgz" results/h200-smoke2
  ;;
full)
  log "machine"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  if [ -n "${RUN_GPU_TESTS:-}" ]; then
    log "gpu tests"
    python3 -m pytest -m gpu -q tests > "$work/pytest-gpu.log" 2>&1; tail -5 "$work/pytest-gpu.log"
  fi
  log "atlas"
  start=$(date +%s)
  # EXTRA_CONFIG: config files layered on config/config.yaml (e.g. config/repeat-session.yaml).
  cfg=(--configfile config/config.yaml ${EXTRA_CONFIG:-})
  snakemake --cores 1 -k atlas "${cfg[@]}" --config mode=live > "$work/atlas.log" 2>&1
  log "atlas exit $? after $(( $(date +%s) - start )) s"
  for target in ${EXTRA_TARGETS:-mobilenet_probe nsight}; do
    log "$target"
    snakemake --cores 1 -k "$target" "${cfg[@]}" --config mode=live > "$work/$target.log" 2>&1
    log "$target exit $?"
  done
  snakemake --cores 1 snapshot_record "${cfg[@]}" --config mode=live \
    record_name=${RECORD_DATE:-$(date -u +%F)} \
    > "$work/snapshot.log" 2>&1
  log "snapshot exit $?"
  if [ -n "${SKIP_RERUN_CHECKS:-}" ]; then touch "$work/done"; exit 0; fi
  # What an edit invalidates (dry runs against the finished live run).
  cp kernels/k3_four_wide.cu /tmp/k3.bak && echo "// edited" >> kernels/k3_four_wide.cu
  snakemake -n --cores 1 atlas --config mode=live > "$work/rerun-after-k3-edit.log" 2>&1
  cp /tmp/k3.bak kernels/k3_four_wide.cu
  printf 'statistics:\n  threshold: 0.10\n' > /tmp/threshold.yaml
  snakemake -n --cores 1 atlas --configfile config/config.yaml /tmp/threshold.yaml \
    --config mode=live > "$work/rerun-after-threshold-edit.log" 2>&1
  grep -A14 "Job stats" "$work"/rerun-after-*.log
  touch "$work/done"
  ;;
start)
  # The session runs in its own copy: a later call re-sends the working tree into the repo root,
  # which must not change sources under a running workflow.
  rm -rf "$work" && mkdir -p "$work" "$copy" && cp -a . "$copy"/
  (cd "$copy" && setsid nohup bash tools/device_run.sh full > "$work/session.log" 2>&1 < /dev/null &)
  exec bash tools/device_run.sh wait
  ;;
wait)
  cd "$copy" 2>/dev/null || { echo "no session copy at $copy: run 'start' first"; exit 1; }
  deadline=$(( $(date +%s) + ${WAIT_S:-560} ))
  while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  cat "$work/session.log"
  grep -hE '^\[(verify|time)|\[ceilings\]|\[crosscheck\]' results/h200/logs/*.log 2>/dev/null | tail -5
  if [ -f "$work/done" ]; then pack; echo SESSION-DONE; else echo SESSION-RUNNING; fi
  ;;
esac
