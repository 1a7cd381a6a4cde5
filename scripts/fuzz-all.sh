#!/usr/bin/env bash
# Fuzzes every target of fuzz/ (or FUZZ_TARGETS) until each has FUZZ_SECONDS of CPU time in
# all (issue 22: at least 30 minutes a target), logging each run to FUZZ_LOG, append-only:
#
#   date  target  cpu_seconds  wall_seconds  inputs  exit
#
# CPU seconds, not wall seconds, are what count, so that the script can also run beside a
# model run on idle cycles only and still log what the targets really got:
#
#   setsid nohup env FUZZ_IDLE=1 scripts/fuzz-all.sh >> runs/fuzz.log 2>&1 < /dev/null &
#
# FUZZ_IDLE=1 makes the script and everything it starts SCHED_IDLE and lowers its session's
# scheduling group to nice 19 (Linux autogroups: a process started with setsid is its own
# group, which competes with the model run's group as an equal whatever the nice value of the
# tasks inside it), and it sets FUZZ_WALL_FACTOR=4 and FUZZ_TIMEOUT=60 unless they are given.
# Measured on the 2-core machine beside a repair run (the model's CPU time over 20-30 s with
# the fuzzer running, then paused): `nice -n 19` alone in its own session took 30% of the
# model's CPU (1.27 against 1.80 cores), SCHED_IDLE alone about as much (the model near one
# core), both together 6-9% (1.75 against 1.86, 1.72 against 1.88); start it with setsid, so
# that the group it lowers is its own. At idle priority the fuzzer can be kept off the CPU
# for seconds, hence the looser per-input limit (FUZZ_TIMEOUT, see scripts/fuzz.sh). Each run lasts
# at most FUZZ_CHUNK wall seconds and asks for FUZZ_WALL_FACTOR wall seconds per CPU second
# still missing; runs repeat until the target's CPU total is reached. A kill loses at most the
# current run's line; started again, the script goes on from the log. The experiments queue's
# `fuzz` step runs this script with the defaults (alone on the machine, wall = CPU).
#
# Several instances may run at once (the queue's step starts two, one a core, and the idle
# one may still be running beside them): each target is locked by the instance fuzzing it
# (flock on fuzz/target/locks/TARGET), and another instance passes it over.
#
# A crash or hang is left in fuzz/artifacts/TARGET/ (the run's exit status is logged and the
# script goes on with the next target): each becomes a regression test before it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${FUZZ_IDLE:-0}" = 1 ]; then
  . scripts/idle.sh
  FUZZ_WALL_FACTOR=${FUZZ_WALL_FACTOR:-4}
  FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-60}
  export FUZZ_TIMEOUT
fi
FUZZ_SECONDS=${FUZZ_SECONDS:-1800}
FUZZ_LOG=${FUZZ_LOG:-docs/results/fuzz/runs.tsv}
FUZZ_TARGETS=${FUZZ_TARGETS:-}
FUZZ_CHUNK=${FUZZ_CHUNK:-1800}
FUZZ_WALL_FACTOR=${FUZZ_WALL_FACTOR:-1}

# CPU seconds target $1 has had so far, from the log.
fuzzed() {
  awk -F'\t' -v t="$1" '$2 == t { s += $3 } END { printf "%d\n", s }' "$FUZZ_LOG"
}

mkdir -p "$(dirname "$FUZZ_LOG")"
[ -f "$FUZZ_LOG" ] || printf 'date\ttarget\tcpu_seconds\twall_seconds\tinputs\texit\n' > "$FUZZ_LOG"
# A fresh machine has the nightly toolchain but not cargo-fuzz; without either the step is
# skipped with a message (exit 0) rather than ending the queue before the steps after it.
if ! cargo +nightly fuzz --version > /dev/null 2>&1 && ! cargo install --locked cargo-fuzz; then
  echo "fuzz: no nightly toolchain or cargo-fuzz could not be installed; skipped" >&2
  exit 0
fi
targets=$FUZZ_TARGETS
[ -n "$targets" ] || targets=$(cd fuzz && cargo +nightly fuzz list)
mkdir -p fuzz/target/locks
for target in $targets; do
  exec {lock}> "fuzz/target/locks/$target"
  if ! flock -n "$lock"; then
    echo "== $(date -u +%FT%TZ) fuzz $target: another instance has it; next target"
    exec {lock}>&-
    continue
  fi
  while :; do
    have=$(fuzzed "$target")
    left=$((FUZZ_SECONDS - have))
    [ "$left" -le 0 ] && break
    wall=$((left * FUZZ_WALL_FACTOR))
    [ "$wall" -gt "$FUZZ_CHUNK" ] && wall=$FUZZ_CHUNK
    [ "$wall" -lt 60 ] && wall=60
    echo "== $(date -u +%FT%TZ) fuzz $target for ${wall}s wall (${have}s CPU so far)"
    (cd fuzz && cargo +nightly fuzz build "$target")
    output=$(mktemp)
    times=$(mktemp)
    started=$SECONDS
    status=0
    # GNU time reports the CPU time of the fuzzer and everything it waited for.
    /usr/bin/time -f '%U %S' -o "$times" scripts/fuzz.sh "$target" "$wall" > "$output" 2>&1 ||
      status=$?
    tail -n 5 "$output"
    # libFuzzer's closing line: "Done N runs in S second(s)".
    inputs=$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "$output" | tail -n 1)
    cpu=$(awk 'END { printf "%d\n", $1 + $2 }' "$times")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$target" "$cpu" "$((SECONDS - started))" \
      "${inputs:-?}" "$status" >> "$FUZZ_LOG"
    if [ "$status" -ne 0 ]; then
      # The whole output (the stack of a crash or timeout) stays beside the artifact.
      mkdir -p "fuzz/artifacts/$target"
      cp "$output" "fuzz/artifacts/$target/run-$(date -u +%Y%m%dT%H%M%SZ).log"
      echo "fuzz $target exited $status: see fuzz/artifacts/$target/" >&2
      rm -f "$output" "$times"
      break
    fi
    rm -f "$output" "$times"
  done
  exec {lock}>&-
done
