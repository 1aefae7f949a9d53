#!/usr/bin/env bash
# Run the atlas live on a GPU machine, from the repository root, and pack what it made. The run
# is one Snakemake call, `snakemake live_record` (workflow/rules/live.smk): the GPU tests, the
# atlas (without a gate kernel whose tests failed; the record says so), the extra targets, the
# stage times, the snapshot into records/<device>-<record_name>/, and with rerun_check a timed
# rerun after a kernel edit in a scratch copy of the tree. This script maps its environment onto
# that call's configuration, runs it, and waits and packs within a bounded time per command.
#   tools/gpu_run.sh smoke    the smoke config live, no record (a few minutes)
#   tools/gpu_run.sh start    the full run in the background, in a copy of the tree (so the
#                             checkout may change meanwhile), then `wait`
#   tools/gpu_run.sh wait     wait up to WAIT_S seconds (default 480) for it; when done, pack
#                             into $OUT (a folder the caller collects). PACK_NOW=1: pack as soon
#                             as the snapshot exists, while the rerun check may still run
#   tools/gpu_run.sh full     the full run in the foreground
# A run may outlast the machine it started on. Each `wait` that ends with the run still going
# leaves its state in $OUT (state.tgz.part-*: the jobs finished so far and Snakemake's records of
# them, taken as of one instant, with the jobs then running marked incomplete). `start` with
# RESUME_STATE=<folder of those parts>, on another machine, goes on from there: the finished jobs
# stay done, the interrupted ones run again (rerun-incomplete, profiles/default), and paired
# samples never span two machines because each timing job runs whole on one.
# Environment, and the configuration key each one sets (workflow/schemas/config.schema.yaml):
#   EXTRA_CONFIG    config files layered on config/config.yaml (--configfile, in order)
#   RECORD_NAME     record_name (default: today's date, UTC)
#   GATE_KERNEL     gate_kernel: a kernel measured only if its GPU tests pass here
#   GPU_TEST_PATHS  gpu_test_paths (test files, space-separated; default: tests)
#   GPU_TESTS=1     gpu_tests: every GPU test of those files first (GPU_TEST_K: gpu_test_k);
#                   0 or empty is off, as for every switch below
#   EXTRA_TARGETS   extra_targets (space-separated; default: mobilenet_probe; empty: none)
#   RERUN_CHECK=1   rerun_check
#   PASSES=1        a record of the backward passes alone: the call's target is snapshot_passes
#                   (`snakemake backward_passes`, then its snapshot into
#                   records/<device>-<record_name>-passes/), which a session's GPU time holds
#                   where a whole record does not; with GPU_TESTS=1 the GPU tests of
#                   GPU_TEST_PATHS run first (pytest, logged; the passes verify every output
#                   themselves). The other entries above are the atlas's and change nothing here.
# `start` and `full` need GROUPCONV_GIT_COMMIT: the commit the tree was sent from, which every
# job's provenance names (a copied tree's own .git may be stale).
# And OUT (default /tmp/groupconv-out), ENV_SETUP (a file to source first, e.g. one that
# installs PyCUDA and Snakemake), DEVICE (the results folder and record's device, default the
# GPU's own key: h100 on an "NVIDIA H100 80GB HBM3"), CORES
# (default all: jobs that measure time still run alone), RUN_DIR (the run's log and status,
# default /tmp/groupconv-run), COPY_DIR (the copy's folder, default /tmp/groupconv-repo),
# RESUME_STATE (above).
set -uo pipefail
step=${1:?usage: tools/gpu_run.sh smoke|start|wait|full}
out=${OUT:-/tmp/groupconv-out}
work=${RUN_DIR:-/tmp/groupconv-run}  # the run's own log, status and record name
copy=${COPY_DIR:-/tmp/groupconv-repo}  # the copy of the tree the background run works in
mkdir -p "$out" "$work"
# Only the steps that run Python set up the environment: `start` and `wait` return quickly
# (a caller polls with `wait`), so they spend no time installing.
setup() { if [ -n "${ENV_SETUP:-}" ]; then source "$ENV_SETUP" || exit 1; fi; }
export PYTHONPATH=$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# The results folder and the record are named for the GPU that is here (groupconv.sessions.
# device_key of its own name), unless DEVICE names it; the ceilings job refuses a DEVICE that
# names another GPU.
gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p; }
device=${DEVICE:-$(python3 -c 'import sys; from groupconv.sessions import device_key
print(device_key(sys.argv[1]))' "$(gpu_name)" 2>/dev/null || echo unknown-gpu)}
log() { echo "== $(date -u +%H:%M:%S) $*"; }
list() { local IFS=,; echo "[$*]"; }  # words as a YAML list, one --config value
# A switch of the environment (GPU_TESTS, RERUN_CHECK, PASSES, PACK_NOW): on unless unset, empty
# or 0, so that GPU_TESTS=0 means off.
on() { [ -n "${1:-}" ] && [ "$1" != 0 ]; }

# The configuration: Snakemake layers the files; the environment becomes --config entries.
# shellcheck disable=SC2206
layers=(config/config.yaml ${EXTRA_CONFIG:-})
record_name=${RECORD_NAME:-$(date -u +%F)}
entries=(mode=live "device=$device" "record_name=$record_name")
if [ -n "${GATE_KERNEL:-}" ]; then entries+=("gate_kernel=$GATE_KERNEL"); fi
# shellcheck disable=SC2086
if [ -n "${GPU_TEST_PATHS:-}" ]; then entries+=("gpu_test_paths=$(list $GPU_TEST_PATHS)"); fi
if on "${GPU_TESTS:-}"; then entries+=(gpu_tests=True); fi
if [ -n "${GPU_TEST_K:-}" ]; then entries+=("gpu_test_k=$GPU_TEST_K"); fi
# shellcheck disable=SC2086
if [ -n "${EXTRA_TARGETS+set}" ]; then entries+=("extra_targets=$(list $EXTRA_TARGETS)"); fi
if on "${RERUN_CHECK:-}"; then entries+=(rerun_check=True); fi

# The one Snakemake call's target, and the record it snapshots (by its folder's suffix).
target=live_record suffix=
if on "${PASSES:-}"; then target=snapshot_passes suffix=-passes; fi

live_record() {  # the run: the one Snakemake call, with the step's layers and entries
  snakemake "$target" --cores "${CORES:-all}" --keep-going \
    --configfile "${layers[@]}" --config "${entries[@]}"
}

sent_commit() {  # the commit each job's provenance names (study/records/provenance.py git_state)
  # A copied tree may carry a .git that is stale or none at all, so the sender names its commit.
  if [ -z "${GROUPCONV_GIT_COMMIT:-}" ]; then
    echo "GROUPCONV_GIT_COMMIT is unset: give the commit this tree was sent from" \
      "(git rev-parse HEAD in the checkout); a copied tree's own .git may be stale" >&2
    exit 2
  fi
  export GROUPCONV_GIT_COMMIT
  log "commit $GROUPCONV_GIT_COMMIT (as sent)"
}

machine() {
  log "machine"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
}

pack_state() {  # the run's state as of now, for `start` with RESUME_STATE (run in $copy)
  # Files changed after the stamp belong to jobs still running (or ending during the pack): they
  # are left out, and their jobs' incomplete markers, taken after the stamp, make them rerun.
  local stamp=$work/state.stamp list=$work/state.list tgz=$work/state.tgz
  touch "$stamp"
  { find "results/$device" .snakemake/metadata -type f ! -newer "$stamp" 2>/dev/null
    find .snakemake/incomplete -type f 2>/dev/null; } > "$list"
  tar czf "$tgz" -T "$list" && rm -f "$out"/state.tgz.part-* &&
    split -b 15M "$tgz" "$out/state.tgz.part-"
  (cd "$work" && tar czf "$out/run-logs.tgz" ./*.log 2>/dev/null)
  log "state: $(wc -l < "$list") files, $(du -h "$tgz" | cut -f1) packed for a resume"
}

resume_state() {  # unpack RESUME_STATE into $copy; every file unpacked gets one mtime
  local list=$work/resumed.list now
  cat "$RESUME_STATE"/state.tgz.part-* | tar xzv -C "$copy" > "$list" || exit 1
  # One mtime for all of them, later than every source: Snakemake reruns a job when an input is
  # newer than its output, and neither the copy here nor the unpacking kept the order of times
  # the jobs made. Equal times are not newer, so no finished job reruns for its time alone.
  # (A second's wait first: the time has whole seconds, the copy's finer ones.)
  sleep 1; now=$(date +%s)
  (cd "$copy" && grep -v '/$' "$list" | xargs -d '\n' touch -c -d "@$now")
  log "resumed from $RESUME_STATE: $(grep -cv '/$' "$list") files"
}

pack() {  # the new record and the run's logs, in parts of at most 15 MiB
  # (join with: cat record.tgz.part-* | tar xz)
  local new="records/$device-$(cat "$work/record_name" 2>/dev/null)$suffix"
  # Else the newest record of the device by its creation stamp, as the workflow picks it (not
  # by file time, which a copy or checkout changes).
  [ -f "$new/record.json" ] ||
    new=$(python3 -m groupconv_atlas.study.records.committed newest "$device")
  tar czf /tmp/record.tgz "$new" records/INDEX.json "results/$device/logs" \
    "results/$device/live" 2>/dev/null
  rm -f "$out"/record.tgz.part-*
  split -b 15M /tmp/record.tgz "$out/record.tgz.part-"
  # the run's own log (and the stage times it printed) in one file
  (cd "$work" && tar czf "$out/run-logs.tgz" ./*.log 2>/dev/null)
  ls -la "$out"
}

case "$step" in
smoke)
  setup
  machine
  layers=(config/config.yaml config/smoke.yaml)
  entries+=(snapshot=False "extra_targets=[]")
  device=$device-smoke
  entries+=("device=$device")  # the later entry wins
  start=$(date +%s)
  live_record > "$out/smoke.log" 2>&1
  log "smoke run exit $? after $(( $(date +%s) - start )) s"
  grep -E "Error|Exception|steps \(" "$out/smoke.log" | tail -20
  python3 tools/stage_times.py "results/$device"
  tar czf "$out/smoke-results.tgz" "results/$device/raw" "results/$device/logs" \
    "results/$device/atlas.json" "results/$device/provenance" "results/$device/live" 2>/dev/null
  ;;
full)
  setup
  sent_commit
  machine
  echo "$record_name" > "$work/record_name"
  if on "${PASSES:-}" && on "${GPU_TESTS:-}"; then
    log "pytest -m gpu ${GPU_TEST_PATHS:-tests}"
    # shellcheck disable=SC2086
    python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider ${GPU_TEST_PATHS:-tests} \
      > "$work/gpu-tests.log" 2>&1
    log "GPU tests exit $?"
  fi
  log "snakemake $target --configfile ${layers[*]} --config ${entries[*]}"
  start=$(date +%s)
  live_record > "$work/live-record.log" 2>&1
  log "live run exit $? after $(( $(date +%s) - start )) s"
  grep -E "Error|Exception|steps \(" "$work/live-record.log" | tail -20
  python3 tools/stage_times.py "results/$device" | tee "$work/stage-times.log"
  rerun="results/$device/live/rerun-check.json"
  if [ -f "$rerun" ]; then cat "$rerun"; fi
  touch "$work/done"
  ;;
start)
  sent_commit
  rm -rf "$work" "$copy" && mkdir -p "$work" "$copy" && cp -a . "$copy"/
  # A new run: the copy's report of an earlier one would read as this one's snapshot.
  rm -f "$copy/results/$device/live/live-atlas.json"
  if [ -n "${RESUME_STATE:-}" ]; then resume_state; fi
  # The whole background list writes to the log: the shell that forks for it then holds no
  # descriptor of the caller's, so a caller reading this command's output to its end (a captured
  # subprocess) is not kept waiting for the run.
  (cd "$copy" && setsid nohup bash tools/gpu_run.sh full < /dev/null &) > "$work/run.log" 2>&1
  exec bash tools/gpu_run.sh wait
  ;;
wait)
  cd "$copy" 2>/dev/null || { echo "no run copy at $copy: 'start' first"; exit 1; }
  deadline=$(( $(date +%s) + ${WAIT_S:-480} ))
  # The measuring call (live_atlas, ending in the snapshot) has finished when its report exists.
  snapshotted="results/$device/live/live-atlas.json"
  if on "${PASSES:-}"; then
    snapshotted="records/$device-$(cat "$work/record_name" 2>/dev/null)-passes/record.json"
  fi
  while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    if on "${PACK_NOW:-}" && [ -f "$snapshotted" ]; then break; fi
    sleep 5
  done
  cat "$work/run.log"
  grep -hE '^\[(verify|time|tune)' "results/$device"/logs/*.log 2>/dev/null | tail -3
  if [ -f "$work/done" ]; then pack; echo RUN-DONE
  elif on "${PACK_NOW:-}" && [ -f "$snapshotted" ]; then pack; echo RUN-PACKED-EARLY
  else pack_state; echo RUN-RUNNING; fi
  ;;
esac
