#!/usr/bin/env bash
# Calibration of the repeat guard with a sampled re-ask on the interact *training* split
# (2026-12-06).
#
# With the greedy guard (scripts/interact-guard-calibration.sh) the 1.5B agent answered the
# note with the same repeat in 122 of its first 126 re-asks (first 15 training episodes), so
# the guard changed little. `--repeat-guard-temperature 0.7` (crates/merit-interact:
# `agent::AgentConfig::repeat_guard_temperature`) samples the re-ask alone at the temperature
# of the Pass@k tries, seeded (seed 0, part of the reply-cache key). Measured like the greedy
# guard, without memory:
#   train-none  the 60 training tasks without memory, guard with a sampled re-ask
# paired with the same tasks without any guard (runs/interact-hints/train-none, 12 of 60).
# Decided before it runs: every evaluation arm takes the sampled guard (in place of the greedy
# one) if this run solves at least as many tasks in phase 1 as the run without a guard and
# as the greedy guard's run (runs/interact-guard/train-none); otherwise the greedy guard's
# own rule stands. Resumable (runs skip logged episodes); about three hours of the two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/interact-guard-sampled}
RESULTS=${RESULTS:-docs/results/interact/guard-sampled-calibration}
BEFORE=${BEFORE:-runs/interact-hints}
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"

# shellcheck source=scripts/interact-calibration-common.sh
source scripts/interact-calibration-common.sh

ALSO_RUNS=${ALSO_RUNS:-runs/interact-guard/train-none} \
  calibrate_without_memory --repeat-guard --repeat-guard-temperature 0.7
