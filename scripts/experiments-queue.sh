#!/usr/bin/env bash
# Every long experiment still open, one after another, so that one command keeps the machine's
# cores on them across sessions. Each step is itself resumable (see each script), so after a
# kill the queue is simply started again and skips what is finished:
#
#   setsid nohup scripts/experiments-queue.sh >> runs/queue.log 2>&1 &
#
# Steps (STEPS; the default order is calibration-memory calibration-dense repair
# interact-memory interact-hints interact-once interact-guard interact-guard-sampled interact-fallback fuzz live interact-adopted repair-posthoc
# calibration-aliases interact-rest-adopted, what each is below; a finished step is passed over in minutes):
#   calibration-memory  scripts/repair-calibration.sh on a 150-question Spider *train* slice,
#                  MERIT with the paper's precedent view against `--precedents change` (issue 16:
#                  the interim dev result showed the 1.5B repairer copying precedent queries);
#                  it goes before the rest of the dev run so that its answer is there first
#   calibration-dense  the same two memory configurations on 150 train questions from ten
#                  databases only (about 15 a database, as in the dev slice): on the spread
#                  slice 5% of the precedents MERIT showed came from the question's own
#                  database, on dev about half, and the copying the change view is meant to stop needs same-database
#                  precedents; the ten are every (77/10)th of the train databases with at least
#                  30 questions, sorted by name. Then MERIT without negative memory in both
#                  views (most copied queries there came from negative entries)
#   repair         scripts/repair-dev-run.sh        issue 16: the Spider dev repair run (pins its own binary)
#   repair-posthoc the dev run's post-hoc arms: MERIT with `--precedents change`, seed 0, in
#                  runs/repair-dev-posthoc (its own pin), results to docs/results/repair/dev-posthoc;
#                  queued after both train slices put the change view ahead of the paper's view
#                  and showed it cutting the copying of precedent queries (calibration README).
#                  Then MERIT without negative memory on seeds 1 and 2 (its seed 0 ran in the
#                  repair step: +3.0 pp over MERIT, interval reaching zero), so that the
#                  ablation is paired with all three of the chosen run's seeds
#   calibration-aliases  the calibration slice again, Iterative with the plain grammar against
#                  `--free-aliases` (the grammar's alias rule, a method-neutral aid for the
#                  product's defaults; the dev run keeps the configuration it was fixed with)
#   interact-main  (not in the default) scripts/interact-experiments.sh  issue 18, what it asks for: task sets at 60, the
#                  main arms, the selectors, the baselines, a memory written on the
#                  evaluation databases (`indomain`) and Pass@k (STOP_AFTER=passk)
#   live           scripts/live-dev-run.sh          issue 20: the live-mode experiment's arms
#   fuzz           scripts/fuzz-all.sh, two instances (one a core, sharing the targets through
#                  their locks): every fuzz target until it has FUZZ_SECONDS of CPU time
#                  in all (issue 22), logged to docs/results/fuzz/runs.tsv (date, target, CPU
#                  seconds, wall seconds, inputs run, exit status; the build is not counted).
#                  Targets fuzzed earlier on idle cycles beside the queue count (see that script)
#   interact-rest  (not in the default) scripts/interact-experiments.sh to its end: the earlier ablations, retention
#                  and retrieval-size arms regenerated at 60 tasks (what is done is skipped)
#   interact-memory interact-main up to its cosine evaluation arm only
#                  (STOP_AFTER=memory): what interact-hints is to be compared with, before the
#                  PRM and selectors are built on the training stream
#   interact-hints (2026-12-05) scripts/interact-hint-calibration.sh: the
#                  turn-level memory hint reworded and no longer piled up on folded repeats,
#                  measured on the training split (no memory, old hint, new hint) before any
#                  evaluation arm uses it; runs/interact-hints pins its own binary
#   interact-v2    (not in the default) interact-main again with the new turn hint, for when
#                  the calibration adopts it (its rule: scripts/interact-hint-calibration.sh):
#                  runs/interact-v2, pinned to V2_COMMIT (below), results to
#                  docs/results/interact/v2 (the old hint's files stay where they are)
#   interact-once  (2026-12-05) scripts/interact-once-calibration.sh: the training stream with
#                  the new hint and `--turn-memories-once` (each turn memory shown at most once
#                  per episode), against the same stream without it; runs/interact-once pins
#                  its own binary
#   interact-guard (2026-12-05) scripts/interact-guard-calibration.sh: the training tasks
#                  without memory with `--repeat-guard` (a word-for-word repeat is not taken;
#                  the model is asked once more), against the same tasks without it;
#                  runs/interact-guard pins its own binary
#   interact-guard-sampled (2026-12-06) scripts/interact-guard-sampled-calibration.sh: the
#                  same with the guard's re-ask sampled (`--repeat-guard-temperature 0.7`;
#                  greedy, the re-ask repeated again in 122 of the first 126);
#                  runs/interact-guard-sampled pins its own binary
#   interact-fallback (2026-12-05) scripts/interact-fallback-calibration.sh: the training
#                  tasks without memory with `--forced-submit-fallback` (under the budget's
#                  force-submit flag a non-submit is replaced by a submit of the phase's newest
#                  clean query), against the same tasks without it; a replay of that run's
#                  model calls from the reply cache up to the flag; runs/interact-fallback pins
#                  its own binary
#   interact-v2-<aids> (not in the default; aids among once, guard or sguard, fallback, in
#                  that order, which is the order the calibrations ran in)
#                  interact-v2 with what the later calibrations adopted: `-once` runs every
#                  memory arm with MEMORY_OPTS=--turn-memories-once, `-guard` every arm with
#                  `--repeat-guard` added to AGENT_OPTS (`-sguard`: with
#                  `--repeat-guard-temperature 0.7`), `-fallback` every arm with
#                  `--forced-submit-fallback`; runs/<name>, results to
#                  docs/results/interact/<name without interact->, pinned to V2_COMMIT (below),
#                  with the PRM teacher decoded under the rubric grammar (PRM_OPTS=--grammar)
#   interact-adopted the calibrations' rules, fixed before each ran, applied in order:
#                  interact-main when the new hint's training stream solved fewer than the old
#                  one's 9 of 60; else interact-v2, with `-once` when the training stream with
#                  `--turn-memories-once` solved at least as many as the new hint's without it,
#                  and `-guard` when the training tasks without memory with `--repeat-guard`
#                  solved at least as many as without it (12 of 60), `-sguard` instead when
#                  the sampled guard's run solved at least as many as both, and `-fallback` when
#                  those tasks with `--forced-submit-fallback` did; stops without running any
#                  while a calibration stream it needs is unfinished
#   interact-rest-<name> (not in the default) that experiment's script to its end
#                  (interact-rest's arms in its run folder)
#   interact-rest-adopted the same rules: interact-rest-<adopted> or interact-rest
#   interact       (not in the default) the whole interact script at once
# The order is the issues' order of importance for what each issue asks (the two calibrations
# and the dev run for issue 16, then issues 18, 20 and 22), with one exception decided on
# 2026-12-06: once the interact calibrations have fixed the adopted experiment's options, the
# two short steps that finish issues 22 and 20 (fuzz: about three hours of wall time; live:
# about four) go before that experiment (about sixty hours with its in-database arm), which
# they delay by a tenth while each finishes its issue some sixty hours sooner. The steps that
# only extend a result (the post-hoc dev arm, the alias calibration, the interact ablations,
# which regenerate earlier side tables) come after them: what is left is well over a hundred hours
# of the two cores.
#
# Each model step runs a binary pinned in its own run folder when the step first starts
# (scripts/pin-binary.sh: runs/repair-dev, runs/repair-calibration-memory,
# runs/repair-calibration-dense, runs/repair-calibration-aliases, runs/interact, runs/interact-hints, runs/interact-once, runs/interact-guard, runs/interact-guard-sampled, runs/interact-fallback, runs/interact-v2*,
# runs/pins/live-dev), for the reason the
# dev run gives: target/release may be rebuilt and machines replaced while a step lasts, and a
# resumed step must run the code it started with (the folder's source-commit names it, so
# another machine builds the same code). A step not yet started takes main as it is then.
#
# The queue restores runs/ from checkpoints/runs.tar.gz when it starts (where runs/ lacks a
# file) and saves it there every CHECKPOINT_MINUTES while it runs (scripts/checkpoint.sh):
# commit that archive before a session ends, so a new machine goes on where this one stopped.
#
# Stop the queue before editing this file in place: bash reads a script as it runs it, so an
# edit under a running queue can make it execute half a line. (Writing a new file and renaming
# it over this one is safe: the running queue keeps reading the old one.)
set -euo pipefail
cd "$(dirname "$0")/.."
# One line per embedded-model call in this log (prompt tokens, those reused from the KV cache,
# prompt and generation time): the guard calibration's re-asks at 7-10k prompt tokens took two
# to three minutes each, and these lines say whether prefix reuse or long context costs that.
export MERIT_LOG=${MERIT_LOG:-merit_models=debug}

STEPS=${STEPS:-calibration-memory calibration-dense repair interact-memory interact-hints interact-once interact-guard interact-guard-sampled interact-fallback fuzz live interact-adopted repair-posthoc calibration-aliases interact-rest-adopted}
FUZZ_SECONDS=${FUZZ_SECONDS:-1800}
FUZZ_LOG=${FUZZ_LOG:-docs/results/fuzz/runs.tsv}
# Every target of the fuzz project unless named (listed when the fuzz step starts, so a
# machine without the nightly toolchain can still run the other steps).
FUZZ_TARGETS=${FUZZ_TARGETS:-}

CHECKPOINT_MINUTES=${CHECKPOINT_MINUTES:-15}

scripts/checkpoint.sh restore
# The sleep runs as a job the loop waits on, so that stopping the loop (the trap below) stops
# the sleep too instead of leaving it behind holding the queue's output open.
(
  trap 'kill "$(jobs -p)" 2>/dev/null; exit 0' TERM
  while :; do
    sleep $((CHECKPOINT_MINUTES * 60)) &
    wait $!
    scripts/checkpoint.sh save || true
  done
) &
checkpointer=$!
trap 'kill $checkpointer 2>/dev/null || true; scripts/checkpoint.sh save || true' EXIT

# On a fresh machine (after `apt-get install -y cmake clang libclang-dev`) a pin is built again
# from the commit it was first built from; the models are fetched on first use.

# The pinned binary of a run folder; fails when there is none. Each step checks it
# (`merit=$(pinned DIR) || return 1`): a failed pin must stop the step, not fall through to
# `MERIT=` empty, which the step scripts take for "unset" and replace with their unpinned
# default build (a command substitution in an assignment prefix stops nothing on failure).
pinned() {
  local binary
  if binary=$(scripts/pin-binary.sh "$1") && [ -x "$binary" ]; then
    echo "$binary"
  else
    echo "queue: no pinned binary for $1; step stopped" >&2
    return 1
  fi
}

# Phase-1 passes in a finished 60-task stream; fails (saying so) while it is unfinished.
stream_solved() { # stream_solved RUN_DIR
  local stream=$1/episodes.jsonl
  if [ ! -f "$stream" ] || [ "$(wc -l < "$stream")" -lt 60 ]; then
    echo "queue: $1 is unfinished; the adopted experiment waits" >&2
    return 1
  fi
  python3 -c 'import json, sys; print(sum(json.loads(l)["trajectory"]["outcome"]["phase1_passed"] for l in open(sys.argv[1]) if l.strip()))' "$stream"
}
# The calibrations' rules (scripts/interact-hint-calibration.sh,
# scripts/interact-once-calibration.sh, scripts/interact-guard-calibration.sh,
# scripts/interact-guard-sampled-calibration.sh, scripts/interact-fallback-calibration.sh),
# fixed before
# each ran: interact-main when the new hint's training stream solved fewer than the old one's
# 9 of 60; else interact-v2, `-once` when the stream with `--turn-memories-once` solved at
# least as many as the new hint's without it, `-guard` when the training tasks without memory
# with `--repeat-guard` solved at least as many as without it (`-sguard` instead when those
# tasks with the sampled guard solved at least as many as both), `-fallback` when they did with
# `--forced-submit-fallback`. Fails while a stream it needs
# is unfinished.
adopted_experiment() {
  local hint once guarded unguarded sampled fallback name=interact-v2
  hint=$(stream_solved runs/interact-hints/train-cosine) || return 1
  echo "queue: the new hint's training stream solved $hint of 60 (the old one's: 9)" >&2
  if [ "$hint" -lt 9 ]; then echo interact-main; return; fi
  once=$(stream_solved runs/interact-once/train-cosine) || return 1
  echo "queue: with --turn-memories-once it solved $once of 60 (without: $hint)" >&2
  [ "$once" -ge "$hint" ] && name+=-once
  unguarded=$(stream_solved runs/interact-hints/train-none) || return 1
  guarded=$(stream_solved runs/interact-guard/train-none) || return 1
  echo "queue: without memory, with --repeat-guard $guarded of 60 (without: $unguarded)" >&2
  sampled=$(stream_solved runs/interact-guard-sampled/train-none) || return 1
  echo "queue: without memory, with the sampled guard $sampled of 60" >&2
  if [ "$sampled" -ge "$unguarded" ] && [ "$sampled" -ge "$guarded" ]; then
    name+=-sguard
  elif [ "$guarded" -ge "$unguarded" ]; then
    name+=-guard
  fi
  fallback=$(stream_solved runs/interact-fallback/train-none) || return 1
  echo "queue: without memory, with --forced-submit-fallback $fallback of 60 (without: $unguarded)" >&2
  [ "$fallback" -ge "$unguarded" ] && name+=-fallback
  echo "$name"
}
# The commit every interact-v2 experiment not yet started is pinned to (2026-12-06), instead
# of the last calibration's (a3c9bd2, as first planned): it adds `prm annotate --grammar`,
# which the experiment's 300 teacher rubrics use (docs/results/interact/prm-grammar: on the
# smoke's 30 pairs every rubric under the grammar was usable, against 20 of 30 without it, in
# 0.36x the model time, agreeing with the unconstrained rubrics no less than that judge agreed
# with its own earlier run, on 20 and 16 pairs), and the agent's fold note comparing whole results
# (a00fccc), a fix made after the calibrations. Nothing is lost by it: no run of an adopted
# experiment equals a calibration's (those ran the training split without memory or with
# other options), so none would have replayed from the reply cache, and every arm of the
# experiment runs the one pinned agent, so its comparisons stay paired.
V2_COMMIT=${V2_COMMIT:-84f1cc4f749f2ceff978f4b5537f5e9a87bad291}
# The experiment script in run folder runs/NAME (NAME: interact-v2, then any of `-once`,
# `-guard` or `-sguard`, `-fallback` in that order), pinned to V2_COMMIT (written to the
# folder's source-commit on first start; a folder started earlier keeps its own), with the
# options its name adopts.
continued_experiment() { # continued_experiment NAME STOP_AFTER
  local name=$1 stop_after=$2 memory_opts="" agent_opts merit aid
  agent_opts="--fold-repeats --schema-in-opening"
  case $name in
    interact-v2 | interact-v2-*) ;;
    *) echo "queue: no experiment $name" >&2; return 2 ;;
  esac
  for aid in $(tr '-' ' ' <<< "${name#interact-v2}"); do
    case $aid in
      once) memory_opts=--turn-memories-once ;;
      guard) agent_opts+=" --repeat-guard" ;;
      sguard) agent_opts+=" --repeat-guard --repeat-guard-temperature 0.7" ;;
      fallback) agent_opts+=" --forced-submit-fallback" ;;
      *) echo "queue: no experiment $name" >&2; return 2 ;;
    esac
  done
  if [ ! -f "runs/$name/source-commit" ]; then
    mkdir -p "runs/$name"
    echo "$V2_COMMIT" > "runs/$name/source-commit"
  fi
  merit=$(pinned "runs/$name") || return 1
  RUNS=runs/$name RESULTS=docs/results/interact/${name#interact-} STOP_AFTER=$stop_after \
    MEMORY_OPTS=$memory_opts AGENT_OPTS=$agent_opts PRM_OPTS=--grammar MERIT=$merit \
    scripts/interact-experiments.sh
}
# One step; a step that fails is logged and the queue goes on with the next one (the steps do
# not depend on each other), so that one failure in a session's absence does not leave the
# cores idle until the next session.
run_step() {
  local step=$1 merit
  case $step in
    calibration-memory)
      merit=$(pinned runs/repair-calibration-memory) || return 1
      LIMIT=150 RUNS=runs/repair-calibration-memory RESULTS=docs/results/repair/calibration/memory-150 \
        CONFIGS="merit-big-fresh-guard-hints-grammar merit-big-fresh-guard-hints-grammar-change" \
        MERIT=$merit scripts/repair-calibration.sh ;;
    calibration-dense)
      merit=$(pinned runs/repair-calibration-dense) || return 1
      LIMIT=150 RUNS=runs/repair-calibration-dense RESULTS=docs/results/repair/calibration/dense-150 \
        DATABASES=activity_1,climbing,cre_Doc_Tracking_DB,device,entrepreneur,hospital_1,machine_repair,network_2,scientist_1,swimming \
        CONFIGS="merit-big-fresh-guard-hints-grammar merit-big-fresh-guard-hints-grammar-change merit-big-fresh-guard-hints-grammar-change-positive merit-big-fresh-guard-hints-grammar-positive" \
        MERIT=$merit scripts/repair-calibration.sh ;;
    calibration-aliases)
      merit=$(pinned runs/repair-calibration-aliases) || return 1
      LIMIT=150 RUNS=runs/repair-calibration-aliases RESULTS=docs/results/repair/calibration/aliases-150 \
        CONFIGS="big-fresh-guard-hints-grammar big-fresh-guard-hints-grammar-free" \
        MERIT=$merit scripts/repair-calibration.sh ;;
    repair) scripts/repair-dev-run.sh ;;
    repair-posthoc)
      RUNS=runs/repair-dev-posthoc RESULTS=docs/results/repair/dev-posthoc \
        PLAN="change:merit:0 ablation:merit-positive-only:1,2" scripts/repair-dev-run.sh ;;
    live)
      merit=$(pinned runs/pins/live-dev) || return 1
      MERIT=$merit scripts/live-dev-run.sh ;;
    interact-main)
      merit=$(pinned runs/interact) || return 1
      STOP_AFTER=passk MERIT=$merit scripts/interact-experiments.sh ;;
    interact-memory)
      merit=$(pinned runs/interact) || return 1
      STOP_AFTER=memory MERIT=$merit scripts/interact-experiments.sh ;;
    interact-hints)
      merit=$(pinned runs/interact-hints) || return 1
      MERIT=$merit scripts/interact-hint-calibration.sh ;;
    interact-once)
      merit=$(pinned runs/interact-once) || return 1
      MERIT=$merit scripts/interact-once-calibration.sh ;;
    interact-guard)
      merit=$(pinned runs/interact-guard) || return 1
      MERIT=$merit scripts/interact-guard-calibration.sh ;;
    interact-guard-sampled)
      merit=$(pinned runs/interact-guard-sampled) || return 1
      MERIT=$merit scripts/interact-guard-sampled-calibration.sh ;;
    interact-fallback)
      merit=$(pinned runs/interact-fallback) || return 1
      MERIT=$merit scripts/interact-fallback-calibration.sh ;;
    interact-v2 | interact-v2-*)
      continued_experiment "$step" passk ;;
    interact-adopted)
      local chosen
      chosen=$(adopted_experiment) || return 1
      run_step "$chosen" ;;
    interact-rest-v2*)
      local name=interact-${step#interact-rest-}
      if [ ! -f "runs/$name/source-commit" ]; then
        echo "queue: runs/$name was never started; $step waits for $name" >&2
        return 1
      fi
      continued_experiment "$name" all ;;
    interact-rest-adopted)
      local chosen
      chosen=$(adopted_experiment) || return 1
      case $chosen in
        interact-main) run_step interact-rest ;;
        *) run_step "interact-rest-${chosen#interact-}" ;;
      esac ;;
    interact | interact-rest)
      merit=$(pinned runs/interact) || return 1
      MERIT=$merit scripts/interact-experiments.sh ;;
    fuzz)
      # One instance a core: each locks the target it fuzzes, so the two share the targets.
      FUZZ_SECONDS=$FUZZ_SECONDS FUZZ_LOG=$FUZZ_LOG FUZZ_TARGETS=$FUZZ_TARGETS scripts/fuzz-all.sh &
      local other=$!
      sleep 5   # the first takes the first target before the second looks
      local status=0
      FUZZ_SECONDS=$FUZZ_SECONDS FUZZ_LOG=$FUZZ_LOG FUZZ_TARGETS=$FUZZ_TARGETS scripts/fuzz-all.sh || status=$?
      wait "$other" || status=$?
      return "$status" ;;
    *) echo "unknown step $step" >&2; return 2 ;;
  esac
}

failed=()
for step in $STEPS; do
  echo "== $(date -u +%FT%TZ) queue: $step"
  status=0
  ( run_step "$step" ) || status=$?
  if [ "$status" -ne 0 ]; then
    echo "== $(date -u +%FT%TZ) queue: $step FAILED (exit $status); going on with the next step"
    failed+=("$step")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "== $(date -u +%FT%TZ) queue: done; failed: ${failed[*]}"
  exit 1
fi
echo "== $(date -u +%FT%TZ) queue: done"
