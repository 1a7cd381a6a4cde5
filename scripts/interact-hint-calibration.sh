#!/usr/bin/env bash
# Calibration of the turn-level memory hint on the interact *training* split (2026-12-05).
#
# Reading issue 18's cosine evaluation arm showed its agent repeating a step word for word
# more often than the agent without memory (220 of 297 steps against 137 of 257 on the first
# 22 tasks), with the turn hint piled up once per folded repeat and worded "worth repeating".
# Both were changed (crates/merit-interact: `agent::ReactAgent::run_with_memory`,
# `memory::advisor::render_turn_hint`), and an episode memory's action list now shows a run of
# equal consecutive steps once with its count (`memory::episode::action_line`) instead of
# copying the stored episode's loops into the prompt. Whether the change helps is decided here, on training
# tasks only, before any evaluation arm runs with it:
#   train-none    the 60 training tasks without memory
#   train-cosine  the training stream with cosine memory written online, as in the main
#                 experiment, with the new hint
# and the report pairs both with the main experiment's training stream (the old hint,
# runs/interact/train-cosine). Decided before it runs: the evaluation arms take the new hint
# (a training stream rerun with it, and the PRM and selectors built on that stream) unless its
# training stream solves fewer tasks in phase 1 than the old one's 9 of 60. Resumable (runs skip logged episodes); about four hours of the
# two cores. Restarted once from its first task, at 13 of 60 and before any comparison, with
# one more change (runs/interact-hints/source-commits.tsv): a statement with an unbound
# parameter placeholder is refused instead of run with NULLs (a copied memory's `?`).
set -euo pipefail
cd "$(dirname "$0")/.."

SPIDER=${SPIDER:-../shared/data/spider}
RUNS=${RUNS:-runs/interact-hints}
RESULTS=${RESULTS:-docs/results/interact/hint-calibration}
OLD_STREAM=${OLD_STREAM:-runs/interact/train-cosine}
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"
run() { echo "+ $*" >&2; "$@"; }

# The main experiment's agent settings (scripts/interact-experiments.sh), unchanged.
train_set=(--tasks data/interact-train/tasks.jsonl --db-root data/interact-train
  --sqlite-dir "$SPIDER/database" --max-turns 20 --observation-chars 2000 --max-tokens 320
  --model qwen2.5-coder-1.5b-instruct --fold-repeats --schema-in-opening)

# The new stream first: the adoption rule needs only it.
for arm in cosine none; do
  out="$RUNS/train-$arm"
  memory=(); [ "$arm" = cosine ] && memory=(--memory cosine)
  run "$MERIT" interact run "${train_set[@]}" --out "$out" "${memory[@]}" > /dev/null
  mkdir -p "$RESULTS/train-$arm"
  gzip -9n < "$out/episodes.jsonl" > "$RESULTS/train-$arm/episodes.jsonl.gz"
  cp "$out/settings.json" "$RESULTS/train-$arm/"
  "$MERIT" interact summaries "$out" --out "$RESULTS/train-$arm/summaries.jsonl"
done

# The repeats per run are in `merit interact report`'s behaviour table from main after this
# calibration's pin (the committed report.md adds that table, with its command).
report=("$MERIT" interact report --baseline "$RUNS/train-none" "$RUNS/train-none" "$OLD_STREAM"
  "$RUNS/train-cosine")
{
  echo '```bash'; echo "merit${report[*]#"$MERIT"}"; echo '```'; echo; "${report[@]}"
} > "$RESULTS/report.md.tmp"
mv "$RESULTS/report.md.tmp" "$RESULTS/report.md"
