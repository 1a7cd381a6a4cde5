#!/usr/bin/env bash
# The live-mode experiment of issue 20 on Spider dev: the same 300 questions, models and repair
# configuration as the repair results (scripts/repair-dev-run.sh, "chosen"), the oracle hidden
# from the agent, a seeded simulated user. Arms: no memory; memory with perfect feedback on
# every answer; feedback on half of the answers, right or wrong 20% / 40% of the time; and
# memory with nobody speaking (every answer finalized by the wait). Beside them, the repair
# experiment's Iterative and MERIT streams of the same questions (oracle-judged references).
#
#   setsid nohup scripts/live-dev-run.sh >> runs/live-dev.log 2>&1 &
#
# Resumable: run it again and each arm continues where its answers.jsonl stops (an answer in
# the journal but not in answers.jsonl is taken from the journal, never asked twice). The
# no-memory arm costs no model call once the repair run is done: its prompts are the repair
# run's Iterative prompts, served by the reply cache. Results: docs/results/live/dev/.
set -euo pipefail
cd "$(dirname "$0")/.."

# The binary pinned for this experiment (scripts/pin-binary.sh), so that a run resumed across
# sessions and machines runs the code it started with; a failed pin stops the script here.
MERIT=${MERIT:-$(scripts/pin-binary.sh runs/pins/live-dev)}
SPIDER=${SPIDER:-../shared/data/spider}
OUT=${OUT:-runs/live-dev}
RESULTS=${RESULTS:-docs/results/live/dev}
ARMS=${ARMS:-none oracle p=0.5,e=0 p=0.5,e=0.2 p=0.5,e=0.4 silent}
# The repair experiment's committed logs of the same stream (seed 0), shown beside the arms:
# Iterative and MERIT with the oracle judging every attempt (oracle MERIT, issue 20).
REFERENCE=${REFERENCE:-docs/results/repair/dev/chosen/episodes}

read -r -a arms <<< "$ARMS"
echo "== $(date -u +%H:%M:%S) live-experiment ${arms[*]}"
"$MERIT" live-experiment --arms "${arms[@]}" --finalize-after 5 \
  --dataset spider --split dev --data "$SPIDER" --db-dir "$SPIDER/database" --limit 300 \
  --k 7 --seeds 0 --repair-model qwen2.5-coder-1.5b-instruct \
  --layout fresh --repeat-guard --hints schema,values --grammar \
  --reference "iterative=$REFERENCE/iterative-seed0.jsonl.gz" \
  --reference "merit=$REFERENCE/merit-seed0.jsonl.gz" --out "$OUT"
mkdir -p "$RESULTS"
cp "$OUT/report.md" "$OUT/accuracy-over-stream.svg" "$RESULTS/"
for arm in "$OUT"/arms/*/; do
  name=$(basename "$arm")
  mkdir -p "$RESULTS/arms/$name"
  gzip -9n < "$arm/answers.jsonl" > "$RESULTS/arms/$name/answers.jsonl.gz"
  gzip -9n < "$arm/live.jsonl" > "$RESULTS/arms/$name/live.jsonl.gz"
done
# What the report leaves out (answers that executed, retirements, Holm-adjusted p-values, the
# copying of shown memories, the memories written by signal), from the committed evidence.
scripts/live-summary.py "$RESULTS/arms" > "$RESULTS/live-summary.md.tmp"
mv "$RESULTS/live-summary.md.tmp" "$RESULTS/live-summary.md"
echo "== $(date -u +%H:%M:%S) done: $RESULTS"
