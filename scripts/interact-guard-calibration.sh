#!/usr/bin/env bash
# Calibration of `--repeat-guard` on the interact *training* split (2026-12-05).
#
# The 1.5B agent repeats its previous step word for word in 55% of its steps without memory
# (441 of 802 on the training split, runs/interact-hints/train-none) and the budget runs out
# on those repeats: most failed episodes end at the budget or at the call cap, some after
# running a query the judge would have passed. `--repeat-guard` (crates/merit-interact:
# `agent::AgentConfig::repeat_guard`) does not take a repeat: it asks the model once more with
# the earlier result, as the repair loop's guard does (one of the aids with which repair on the
# train calibration slice went from 0 to 15 of 39, with the 1.5B repair model). It changes every arm, the no-memory one too, so it is
# measured without memory:
#   train-none  the 60 training tasks without memory, with the guard
# paired with the same tasks without it (runs/interact-hints/train-none, 12 of 60). Decided
# before it runs: every evaluation arm takes the guard (the no-memory arm run again with it)
# unless this stream solves fewer tasks in phase 1 than the one without it (12 of 60).
# Resumable (runs skip logged episodes); about two hours of the two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/interact-guard}
RESULTS=${RESULTS:-docs/results/interact/guard-calibration}
BEFORE=${BEFORE:-runs/interact-hints}
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"

# shellcheck source=scripts/interact-calibration-common.sh
source scripts/interact-calibration-common.sh

calibrate_without_memory --repeat-guard
