#!/usr/bin/env bash
# Calibration of `--forced-submit-fallback` on the interact *training* split (2026-12-05).
#
# When a charge leaves the budget at or below zero, the protocol's environment ends the task as
# failed unless the next action is a submit. The 1.5B agent often writes something else there:
# 19 to 27 of the 60 episodes of each evaluation arm so far ended that way ("refused the forced
# submit" in `merit interact report`), and `merit interact missed` found episodes that had run
# a query the judge would have passed and never submitted it. `--forced-submit-fallback`
# (crates/merit-interact: `agent::AgentConfig::forced_submit_fallback`) submits the phase's
# newest query that ran without an error in place of that last action. Every turn before the
# flag is what it was, so on the training tasks without memory every model call is the one
# runs/interact-hints/train-none made (replayed from the reply cache: minutes), and an
# episode the fallback changes is one that was lost without it:
#   train-none  the 60 training tasks without memory, with the fallback
# paired with the same tasks without it (runs/interact-hints/train-none, 12 of 60). Decided
# before it runs: every evaluation arm takes the fallback unless this stream solves fewer tasks
# in phase 1 than the one without it (12 of 60; by the argument above it cannot, so the rule
# checks the argument). Resumable (runs skip logged episodes).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/interact-fallback}
RESULTS=${RESULTS:-docs/results/interact/fallback-calibration}
BEFORE=${BEFORE:-runs/interact-hints}
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"

# shellcheck source=scripts/interact-calibration-common.sh
source scripts/interact-calibration-common.sh

calibrate_without_memory --forced-submit-fallback
