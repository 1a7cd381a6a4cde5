#!/usr/bin/env bash
# Calibration of `--turn-memories-once` on the interact *training* split (2026-12-05).
#
# Reading issue 18's memory streams: 84% of the cosine arm's turn retrievals on the evaluation
# split (85% and 84% of the two training streams) injected a memory the episode had already
# been shown, and after such a retrieval the agent repeated its last step word for word 80-85%
# of the time, against 42-55% after a memory it had not seen (`merit interact report`'s
# behaviour table counts the repeats; the retrievals are in each episode's `injections`). The
# state hardly changes between turns of a stuck episode, so the same memory comes back and
# nudges the same step. `--turn-memories-once` (crates/merit-interact:
# `memory::AdvisorConfig::turn_memories_once`) retrieves each turn among the memories not yet
# shown in the episode. It changes nothing without memory, so the no-memory arms stand.
#
# Measured here on training tasks only, before any evaluation arm uses it:
#   train-cosine  the training stream with cosine memory written online, as in the main
#                 experiment (the adopted turn hint, interact-v2), with the option
# paired with the same stream without it (runs/interact-hints/train-cosine, 10 of 60) and the
# training tasks without memory (runs/interact-hints/train-none). Decided before it runs: the
# evaluation arms take the option (a training stream rerun with it, the PRM and the selectors
# built on that stream; scripts/experiments-queue.sh, `interact-v2-once`) unless its training
# stream solves fewer tasks in phase 1 than the stream without it (10 of 60). Resumable (runs
# skip logged episodes); about two and a half hours of the two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/interact-once}
RESULTS=${RESULTS:-docs/results/interact/once-calibration}
BEFORE=${BEFORE:-runs/interact-hints}
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"

# shellcheck source=scripts/interact-calibration-common.sh
source scripts/interact-calibration-common.sh

out="$RUNS/train-cosine"
run "$MERIT" interact run "${train_set[@]}" --out "$out" --memory cosine --turn-memories-once \
  > /dev/null
keep_evidence "$out"

# Paired with the stream without the option (the rule's comparison), then with no memory.
report=("$MERIT" interact report --baseline "$BEFORE/train-cosine" "$BEFORE/train-none"
  "$BEFORE/train-cosine" "$out")
against_none=("$MERIT" interact report --baseline "$BEFORE/train-none" "$BEFORE/train-none"
  "$BEFORE/train-cosine" "$out")
missed=("$MERIT" interact missed "$BEFORE/train-none" "$BEFORE/train-cosine" "$out"
  "${train_tasks[@]}")
{ shown "${report[@]}"; shown "${against_none[@]}"; shown "${missed[@]}"; } > "$RESULTS/report.md.tmp"
mv "$RESULTS/report.md.tmp" "$RESULTS/report.md"
