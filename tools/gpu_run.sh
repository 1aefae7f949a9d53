#!/usr/bin/env bash
# Run the atlas live on a GPU machine, from the repository root, and pack what it made.
#   tools/gpu_run.sh smoke    the GPU tests, then the smoke config live (a few minutes)
#   tools/gpu_run.sh start    the full run in the background (in a copy of the tree, so the
#                             checkout may change meanwhile), then `wait`
#   tools/gpu_run.sh wait     wait up to WAIT_S seconds (default 480) for it; when done, pack
#                             into $OUT (a folder the caller collects)
#   tools/gpu_run.sh full     the full run in the foreground
# The full run: [GPU tests], [SMOKE=1: the smoke config live, timed], the live atlas,
# EXTRA_TARGETS (default: mobilenet_probe), the stage times, a snapshot into
# records/<device>-<RECORD_NAME>/, and with RERUN_CHECK=1 a live rerun after a one-line edit of
# kernels/k3_four_wide.cu, timed. `PACK_NOW=1 tools/gpu_run.sh wait` packs as soon as the
# snapshot exists, while the rerun check may still run.
# Environment: OUT (default /tmp/groupconv-out), ENV_SETUP (a file to source first, e.g. one
# that installs PyCUDA and Snakemake), EXTRA_CONFIG (config files layered on config.yaml),
# GPU_TESTS=1 (GPU_TEST_PATHS: which test files, default all; GPU_TEST_K: a pytest -k
# expression that selects among them), GATE_KERNEL (a kernel the run measures only if its GPU tests, those of
# GPU_TEST_PATHS whose names hold it, pass: when they fail, config/gpu-run-without-<kernel>.yaml
# is written and layered on, so the atlas runs without it and the record says so), RECORD_NAME (default: today's date), DEVICE (default h200),
# CORES (default all: jobs that measure time still run alone).
set -uo pipefail
step=${1:?usage: tools/gpu_run.sh smoke|start|wait|full}
out=${OUT:-/tmp/groupconv-out}
work=/tmp/groupconv-run
copy=/tmp/groupconv-repo
device=${DEVICE:-h200}
mkdir -p "$out" "$work"
# Only the steps that run Python set up the environment: `start` and `wait` return quickly
# (a caller polls with `wait`), so they spend no time installing.
setup() { if [ -n "${ENV_SETUP:-}" ]; then source "$ENV_SETUP" || exit 1; fi; }
export PYTHONPATH=$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*"; }
smk() { snakemake --cores "${CORES:-all}" "$@"; }  # every core; measuring jobs still run alone
cfg=(--configfile config/config.yaml ${EXTRA_CONFIG:-})

pack() {  # the new record and the run's logs, in parts of at most 15 MiB
  # (join with: cat record.tgz.part-* | tar xz)
  local new
  # The newest record of the device by its creation stamp, as the workflow picks it (not by
  # file time, which a copy or checkout changes).
  new=$(python3 -m groupconv_atlas.study.records newest "$device")
  tar czf /tmp/record.tgz "$new" records/INDEX.json "results/$device/logs" 2>/dev/null
  split -b 15M /tmp/record.tgz "$out/record.tgz.part-"
  # the run's own logs (and the smoke run's stage times) in one file
  (cd "$work" && tar czf "$out/run-logs.tgz" ./*.log ./*.json 2>/dev/null)
  ls -la "$out"
}

machine() {  # the GPU as found, then, with GPU_TESTS=1, the GPU tests into $1 (returns their exit)
  log "machine"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  local status=0
  if [ -n "${GATE_KERNEL:-}" ]; then
    log "gpu tests of $GATE_KERNEL (the gate)"
    # shellcheck disable=SC2086
    python3 -m pytest -m gpu -q -rs -k "$GATE_KERNEL" ${GPU_TEST_PATHS:-tests} > "${1%.log}-$GATE_KERNEL.log" 2>&1
    status=$?
    log "gpu tests of $GATE_KERNEL exit $status"; tail -15 "${1%.log}-$GATE_KERNEL.log"
  fi
  if [ -n "${GPU_TESTS:-}" ]; then
    log "gpu tests"
    # shellcheck disable=SC2086
    python3 -m pytest -m gpu -q -rs ${GPU_TEST_K:+-k "$GPU_TEST_K"} ${GPU_TEST_PATHS:-tests} > "$1" 2>&1
    log "gpu tests exit $?"; tail -25 "$1"
  fi
  return $status
}

gate() {  # GATE_KERNEL failed its GPU tests: the atlas runs without it, by a config layered on
  local kernel=$1 file=config/gpu-run-without-$1.yaml
  # shellcheck disable=SC2086
  python3 - "$kernel" "$file" config/config.yaml ${EXTRA_CONFIG:-} <<'PY'
import sys, yaml
from groupconv_atlas.study.config_check import resolve_kernel_lists
kernel, path, *layers = sys.argv[1:]
merged = {}
for layer in layers:  # later files win per section, as Snakemake layers them
    for key, value in (yaml.safe_load(open(layer)) or {}).items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
resolve_kernel_lists(merged)  # `kernels: all` as the registry's list, the candidates from it
drop = lambda names: [n for n in names if n != kernel]
nsight = merged.get("nsight", {})
gated = {"kernels": drop(merged["kernels"]),
         "timing": {"candidates": drop(merged["timing"]["candidates"])},
         "nsight": {"implementations": drop(nsight.get("implementations", [])),
                    "pairs": [p for p in nsight.get("pairs", []) if p[1] != kernel]}}
with open(path, "w") as fh:
    fh.write(f"# Written by tools/gpu_run.sh: {kernel} failed its GPU tests on this machine, so this\n"
             f"# run measured the atlas without it (the tests' log is in the record's device logs).\n")
    yaml.safe_dump(gated, fh)
PY
  cfg+=(--configfile "$file")
  log "$kernel failed its GPU tests: the atlas runs without it ($file)"
}

smoke_atlas() {  # the smoke config live, timed, its log into $1
  log "smoke atlas"
  local start
  start=$(date +%s)
  smk -k atlas --configfile config/config.yaml config/smoke.yaml \
    --config mode=live > "$1" 2>&1
  log "smoke atlas exit $? after $(( $(date +%s) - start )) s"
  smk stage_times --configfile config/config.yaml config/smoke.yaml --config mode=live >> "$1" 2>&1
  python3 tools/stage_times.py "results/$device-smoke"
  cp "results/$device-smoke/raw/stage_times.json" "$(dirname "$1")/smoke-run-stage-times.json" \
    2>/dev/null
  grep -E "Error|Exception|steps \(" "$1" | tail -20
}

case "$step" in
smoke)
  setup
  machine "$out/pytest-gpu.log"
  smoke_atlas "$out/smoke.log"
  tar czf "$out/smoke-results.tgz" "results/$device-smoke/raw" "results/$device-smoke/logs" \
    "results/$device-smoke/atlas.json" "results/$device-smoke/provenance" 2>/dev/null
  ;;
full)
  setup
  if ! machine "$work/pytest-gpu.log"; then gate "$GATE_KERNEL"; fi
  if [ -n "${SMOKE:-}" ]; then smoke_atlas "$work/smoke-run.log"; fi
  log "atlas"
  start=$(date +%s)
  smk -k atlas "${cfg[@]}" --config mode=live > "$work/atlas.log" 2>&1
  status=$?
  wall=$(( $(date +%s) - start ))
  log "atlas exit $status after $wall s"
  for target in ${EXTRA_TARGETS:-mobilenet_probe}; do
    log "$target"
    smk -k "$target" "${cfg[@]}" --config mode=live > "$work/$target.log" 2>&1
    log "$target exit $?"
  done
  # Wall time per stage, a pipeline output the snapshot carries into the record (the atlas
  # call's own wall time is in this log, above).
  smk stage_times "${cfg[@]}" --config mode=live > "$work/stage-times-job.log" 2>&1
  python3 tools/stage_times.py "results/$device" | tee "$work/stage-times.log"
  smk snapshot_record "${cfg[@]}" --config mode=live \
    record_name="${RECORD_NAME:-$(date -u +%F)}" > "$work/snapshot.log" 2>&1
  log "snapshot exit $?"
  touch "$work/snapshotted"
  if [ -n "${RERUN_CHECK:-}" ]; then
    # What a one-kernel edit costs live: the reruns it triggers, timed.
    echo "// edited" >> kernels/k3_four_wide.cu
    start=$(date +%s)
    smk -k atlas "${cfg[@]}" --config mode=live > "$work/rerun-after-k3-edit.log" 2>&1
    log "rerun after a k3 edit: exit $? after $(( $(date +%s) - start )) s"
    git checkout -q -- kernels/k3_four_wide.cu 2>/dev/null || sed -i '$ d' kernels/k3_four_wide.cu
    grep -A30 "Job stats" "$work/rerun-after-k3-edit.log" | head -30
  fi
  touch "$work/done"
  ;;
start)
  rm -rf "$work" "$copy" && mkdir -p "$work" "$copy" && cp -a . "$copy"/
  (cd "$copy" && setsid nohup bash tools/gpu_run.sh full > "$work/run.log" 2>&1 < /dev/null &)
  exec bash tools/gpu_run.sh wait
  ;;
wait)
  cd "$copy" 2>/dev/null || { echo "no run copy at $copy: 'start' first"; exit 1; }
  deadline=$(( $(date +%s) + ${WAIT_S:-480} ))
  while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    if [ -n "${PACK_NOW:-}" ] && [ -f "$work/snapshotted" ]; then break; fi
    sleep 5
  done
  cat "$work/run.log"
  grep -hE '^\[(verify|time|tune)' "results/$device"/logs/*.log 2>/dev/null | tail -3
  if [ -f "$work/done" ]; then pack; echo RUN-DONE
  elif [ -n "${PACK_NOW:-}" ] && [ -f "$work/snapshotted" ]; then pack; echo RUN-PACKED-EARLY
  else echo RUN-RUNNING; fi
  ;;
esac
