#!/usr/bin/env bash
# Calibration of the repair aids (issue 16) on a fixed slice of Spider *train*, never dev.
#
# Each configuration is one `merit run` of the Iterative method (no memory: the aids are
# method-neutral, so they are chosen where only they can make a difference; a configuration
# with the `merit` part runs Iterative and MERIT, for the memory's own options) on the same
# questions, with the same shared initial predictions (the default 0.5B model writes them;
# the reply cache shares them between configurations). Resumable: run it again after a kill
# and every configuration continues where it stopped; finished ones only rewrite their report.
#
#   setsid nohup scripts/repair-calibration.sh > runs/repair-calibration.log 2>&1 &
#
# Results: docs/results/repair/calibration/<config>/ (report, figures, episode logs) and a
# summary table in docs/results/repair/calibration/README.md (written by `merit report`).
set -euo pipefail
cd "$(dirname "$0")/.."

MERIT=${MERIT:-target/release/merit}
SPIDER=${SPIDER:-../shared/data/spider}
LIMIT=${LIMIT:-60}
# Comma-separated db_id values: only their questions (`merit run --databases`), e.g. a slice
# as dense per database as the dev run's.
DATABASES=${DATABASES:-}
K=${K:-7}
RUNS=${RUNS:-runs/repair-calibration}
RESULTS=${RESULTS:-docs/results/repair/calibration}
BIG=qwen2.5-coder-1.5b-instruct
# Configurations, in the order they run: each aid alone, then combinations. Names: `big` =
# the 1.5B model writes the repairs, `guard` = --repeat-guard, `hints` = --hints schema,values,
# `grammar` = --grammar, `fresh` = --layout fresh; `paper` = none of them. `merit` = the
# methods are Iterative and MERIT (else Iterative alone), `change` = --precedents change,
# `free` = --free-aliases (with grammar: the grammar's free alias rule), `positive` = MERIT
# without negative memory (the method `merit-positive-only`, the paper's Table 4 ablation).
#
# The memory calibration (MERIT's precedent view, after the interim dev result of
# docs/results/repair/README.md showed the 1.5B repairer copying precedent queries) runs the
# same way on a longer slice, so that memory has a stream to fill:
#   LIMIT=150 RUNS=runs/repair-calibration-memory \
#   RESULTS=docs/results/repair/calibration/memory-150 \
#   CONFIGS="merit-big-fresh-guard-hints-grammar merit-big-fresh-guard-hints-grammar-change" \
#   scripts/repair-calibration.sh
CONFIGS=${CONFIGS:-paper guard hints grammar fresh big-paper guard-hints-grammar fresh-guard-hints-grammar big-guard-hints big-fresh-guard-hints-grammar}

options() {
  local config=$1 out=""
  [ "$config" = paper ] && { echo ""; return; }
  for part in ${config//-/ }; do
    case "$part" in
      big) out+=" --repair-model $BIG" ;;
      paper) ;;
      guard) out+=" --repeat-guard" ;;
      hints) out+=" --hints schema,values" ;;
      grammar) out+=" --grammar" ;;
      fresh) out+=" --layout fresh" ;;
      merit) ;;
      change) out+=" --precedents change" ;;
      free) out+=" --free-aliases" ;;
      positive) ;;
      *) echo "unknown part $part of configuration $config" >&2; exit 2 ;;
    esac
  done
  echo "$out"
}

methods() {
  case "-$1-" in
    *-positive-*) echo iterative,merit-positive-only ;;
    *-merit-*) echo iterative,merit ;;
    *) echo iterative ;;
  esac
}

mkdir -p "$RUNS" "$RESULTS"
for config in $CONFIGS; do
  dir="$RUNS/$config"
  # shellcheck disable=SC2046,SC2207 # options are split into flags on purpose
  common=(--dataset spider --split train --data "$SPIDER" --db-dir "$SPIDER/database"
    --methods "$(methods "$config")" --seeds 0 --k "$K" --limit "$LIMIT" $(options "$config")
    ${DATABASES:+--databases "$DATABASES"})
  echo "== $(date -u +%H:%M:%S) $config: merit run ${common[*]}"
  started=$SECONDS
  if [ -f "$dir/manifest.json" ]; then
    "$MERIT" run "${common[@]}" --resume "$dir" > /dev/null
  else
    "$MERIT" run "${common[@]}" --out "$dir" > /dev/null
  fi
  mkdir -p "$RESULTS/$config/episodes"
  # Wall time of each invocation (a resume of a finished run costs seconds): the sum is the
  # configuration's cost on this machine, model calls served from the cache included.
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $((SECONDS - started)) s" >> "$dir/wall.txt"
  cp "$dir/wall.txt" "$RESULTS/$config/wall.txt"
  "$MERIT" report "$dir" --out "$RESULTS/$config" > /dev/null
  cp "$dir"/episodes/*.jsonl "$RESULTS/$config/episodes/"
  cp "$dir/manifest.json" "$dir/initial.jsonl" "$RESULTS/$config/"
done
echo "== $(date -u +%H:%M:%S) done"
