#!/usr/bin/env bash
# `prm annotate --grammar` against the unconstrained judge on the same (state, memory) pairs,
# under the same load:
#
#   MERIT=BIN RUN=DIR OUT=DIR scripts/prm-grammar-measure.sh
#
# RUN is a memory run (its states and turn memories give the pairs); the teacher is the embedded
# MODEL. The two settings take turns, one pair each (`--limit 1`, both files advance through the
# same stable order of pairs), so a change of load on the machine falls on both alike; each has
# its own empty reply cache, so nothing replays. Every embedded-model call is logged
# (MERIT_LOG=merit_models=debug: generated tokens, prompt and generation milliseconds) to
# OUT/plain.log and OUT/grammar.log. Resumable: a setting whose file already holds i pairs is
# not asked for its i-th again. When both hold PAIRS, scripts/prm-grammar-summary.py writes
# OUT/summary.md (usable replies, tokens, time, agreement); REFERENCE (optional), an earlier
# unconstrained annotation file of the same pairs, adds the judge's own repeatability.
set -euo pipefail
cd "$(dirname "$0")/.."
MERIT=${MERIT:?MERIT=path of the merit binary}
RUN=${RUN:?RUN=a memory run directory}
OUT=${OUT:?OUT=folder for the two annotation files and logs}
PAIRS=${PAIRS:-30}
PER_STATE=${PER_STATE:-2}
MODEL=${MODEL:-qwen2.5-coder-1.5b-instruct}
export MERIT_LOG=merit_models=debug
mkdir -p "$OUT"

# Lines in an annotation file (0 when there is none; `grep -c` prints 0 and fails on an empty one).
pairs_in() { if [ -f "$1" ]; then grep -c . "$1" || true; else echo 0; fi; }

for ((i = 1; i <= PAIRS; i++)); do
  for setting in plain grammar; do
    file=$OUT/$setting.jsonl
    [ "$(pairs_in "$file")" -ge "$i" ] && continue
    flags=()
    [ "$setting" = grammar ] && flags=(--grammar)
    echo "== $(date -u +%FT%TZ) pair $i of $PAIRS, $setting" >&2
    "$MERIT" interact prm annotate --run "$RUN" --out "$file" --model "$MODEL" \
      --per-state "$PER_STATE" --limit 1 --cache "$OUT/cache-$setting" "${flags[@]}" \
      2>> "$OUT/$setting.log"
    if [ "$(pairs_in "$file")" -lt "$i" ]; then
      echo "prm-grammar-measure: $setting has no pair $i (no pairs left in $RUN?); stopping" >&2
      exit 1
    fi
  done
done
python3 scripts/prm-grammar-summary.py "$OUT" ${REFERENCE:+"$REFERENCE"}
