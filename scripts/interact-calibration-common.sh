# shellcheck shell=bash
# Sourced by the interact calibration scripts (scripts/interact-*-calibration.sh): the main
# experiment's agent settings on the training split (scripts/interact-experiments.sh), and how a
# calibration keeps its evidence and writes its report. Needs MERIT and RESULTS set.
SPIDER=${SPIDER:-../shared/data/spider}
train_set=(--tasks data/interact-train/tasks.jsonl --db-root data/interact-train
  --sqlite-dir "$SPIDER/database" --max-turns 20 --observation-chars 2000 --max-tokens 320
  --model qwen2.5-coder-1.5b-instruct --fold-repeats --schema-in-opening)
train_tasks=(--tasks data/interact-train/tasks.jsonl --db-root data/interact-train
  --sqlite-dir "$SPIDER/database")
run() { echo "+ $*" >&2; "$@"; }
keep_evidence() { # keep_evidence RUN_DIR: log (compressed), settings, summaries to RESULTS/NAME
  local name; name=$(basename "$1")
  mkdir -p "$RESULTS/$name"
  gzip -9n < "$1/episodes.jsonl" > "$RESULTS/$name/episodes.jsonl.gz"
  cp "$1/settings.json" "$RESULTS/$name/"
  "$MERIT" interact summaries "$1" --out "$RESULTS/$name/summaries.jsonl"
}
shown() { # shown COMMAND...: the command as a reader would type it, then its output
  local line="$*"
  echo '```bash'; echo "merit${line#"$MERIT"}"; echo '```'; echo; "$@"; echo
}
# calibrate_without_memory OPTION...: the training tasks without memory with OPTION (an agent
# aid) in $RUNS/train-none, against the same tasks without it ($BEFORE/train-none): evidence
# and $RESULTS/report.md (the arms report with the pairing, and `merit interact missed`).
# ALSO_RUNS (space-separated run folders, optional): earlier calibrations the rule compares
# with too, reported between the two.
calibrate_without_memory() {
  local out="$RUNS/train-none" also
  read -r -a also <<< "${ALSO_RUNS:-}"
  run "$MERIT" interact run "${train_set[@]}" --out "$out" "$@" > /dev/null
  keep_evidence "$out"
  local report=("$MERIT" interact report --baseline "$BEFORE/train-none" "$BEFORE/train-none"
    "${also[@]}" "$out")
  local missed=("$MERIT" interact missed "$BEFORE/train-none" "${also[@]}" "$out" "${train_tasks[@]}")
  # A report newer than the run's log is kept: the queue passes over a finished calibration at
  # every start, and the pinned binary would overwrite a report regenerated since with a newer
  # one's columns (a fresh clone's report is newer than the log restored from the checkpoint).
  if [[ -e "$RESULTS/report.md" && "$RESULTS/report.md" -nt "$out/episodes.jsonl" ]]; then
    return 0
  fi
  { shown "${report[@]}"; shown "${missed[@]}"; } > "$RESULTS/report.md.tmp"
  mv "$RESULTS/report.md.tmp" "$RESULTS/report.md"
}
