#!/usr/bin/env bash
# Set committed records aside while the working tree is copied to a GPU machine, and back after.
# A live run reads no committed record (only conv2d's GPU tests read the newest one's tuning
# tables), while the records hold most of the tree's bytes; a copy without them is small.
#   tools/records_aside.sh hide [KEEP]   take every record but KEEP (default: the newest record of
#                                        the device with tuning tables, the one conv2d reads) out
#                                        of git's index and ignore it, so that a copy of
#                                        "tracked and not ignored" files leaves it out (and the
#                                        kept one's Nsight captures and logs); the files stay on
#                                        disk
#   tools/records_aside.sh restore      put them back in the index, exactly as committed (and
#                                        stage again any that a commit made meanwhile deleted)
# Commit nothing between hide and restore: the index then lacks the records set aside. hide
# installs a pre-commit hook that refuses any commit until restore (which removes it); a hook of
# the checkout's own is left in place and a warning says the guard is absent.
#   tools/records_aside.sh size         bytes a copy of the tree would hold now
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=.git/info/exclude
marker="# records set aside by records_aside.sh"
mkdir -p .git/info && touch "$exclude"
hook="$(git rev-parse --git-path hooks)/pre-commit"
hook_marker="# installed by tools/records_aside.sh hide; removed by restore"
case "${1:?usage: tools/records_aside.sh hide [KEEP] | restore | size}" in
hide)
  if grep -qxF "$marker" "$exclude"; then echo "records already set aside: restore first" >&2; exit 1; fi
  py=python3 && [ -x .venv/bin/python ] && py=.venv/bin/python
  keep=${2:-$(PYTHONPATH=workflow $py -c 'from groupconv.files import find_record
print(find_record("records", "newest", "'"${DEVICE:-h200}"'", having="raw/tuning/*.json").name)')}
  mapfile -t aside < <(git ls-files records | cut -d/ -f2 | grep -v INDEX.json | sort -u | grep -vxF "$keep")
  [ "${#aside[@]}" -gt 0 ] || { echo "nothing to set aside"; exit 0; }
  echo "$marker" >> "$exclude"
  for r in "${aside[@]}"; do
    git rm -r -q --cached "records/$r"
    echo "/records/$r/" >> "$exclude"
  done
  # Of the record kept, only what conv2d reads travels: its Nsight captures and logs stay.
  for sub in raw/nsight device-logs; do
    if [ -n "$(git ls-files "records/$keep/$sub" | head -1)" ]; then
      git rm -r -q --cached "records/$keep/$sub"
      echo "/records/$keep/$sub/" >> "$exclude"
      aside+=("$keep/$sub")
    fi
  done
  if [ -e "$hook" ] && ! grep -qxF "$hook_marker" "$hook"; then
    echo "warning: $hook exists; no guard against a commit before restore" >&2
  else
    mkdir -p "$(dirname "$hook")"
    printf '#!/bin/sh\n%s\n%s\n%s\nexit 1\n' "$hook_marker" \
      "echo 'records are set aside (tools/records_aside.sh hide): a commit now would delete them;' >&2" \
      "echo 'run tools/records_aside.sh restore first' >&2" > "$hook"
    chmod +x "$hook"
  fi
  echo "set aside: ${aside[*]} (kept: $keep)"
  ;;
restore)
  grep -qxF "$marker" "$exclude" || { echo "no records set aside"; exit 0; }
  mapfile -t aside < <(awk -v m="$marker" '$0 == m {on = 1; next} on && /^\/records\// {
    sub(/^\//, ""); sub(/\/$/, ""); print}' "$exclude")
  [ "${#aside[@]}" -gt 0 ] && git reset -q -- "${aside[@]}"
  awk -v m="$marker" '$0 == m {on = 1} !on' "$exclude" > "$exclude.tmp" && mv "$exclude.tmp" "$exclude"
  if [ -f "$hook" ] && grep -qxF "$hook_marker" "$hook"; then rm -f "$hook"; fi
  # A commit made while they were set aside recorded them as deleted: stage them again from the
  # files on disk (which `hide` never touches) and say so, rather than leave them untracked.
  for r in "${aside[@]}"; do
    if ! git cat-file -e "HEAD:$r" 2>/dev/null; then
      git add -- "$r"
      echo "warning: $r was deleted by a commit made while it was set aside; it is staged again:" \
        "commit it" >&2
    fi
  done
  echo "restored: ${aside[*]}"
  ;;
size)
  { git ls-files; git ls-files --others --exclude-standard; } | xargs -d '\n' du -cb 2>/dev/null | tail -1
  ;;
esac
