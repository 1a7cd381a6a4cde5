#!/usr/bin/env bash
# The MERIT interact experiments on the embedded models (issues 6 and 7), end to end.
#
# Resumable by design: run it again after a kill and every step continues where it stopped
# (generation appends and skips finished targets, runs skip logged episodes, annotation skips
# judged pairs, training replays its model calls from the reply cache). Long: hours on two
# cores; start it in the background:
#
#   setsid nohup scripts/interact-experiments.sh > runs/interact-experiments.log 2>&1 &
#
# Sizes and models are environment variables (defaults below). Results (Markdown, JSON, SVG)
# go to docs/results/interact/, each next to the command that made it.
set -euo pipefail
cd "$(dirname "$0")/.."

SPIDER=${SPIDER:-../shared/data/spider}
GEN_MODEL=${GEN_MODEL:-qwen2.5-coder-1.5b-instruct}
# The agent (and the user simulator, which runs on the same model). The 0.5B agent solves
# nothing in the protocol's plain form; see docs/results/interact/README.md.
AGENT_MODEL=${AGENT_MODEL:-qwen2.5-coder-1.5b-instruct}
# The agent options for small models (both documented deviations, recorded in every run's
# settings.json): fold word-for-word repeats into a note, show the schema with the opening.
AGENT_OPTS=${AGENT_OPTS:---fold-repeats --schema-in-opening}
# Options of every run with memory (and of the episode selector's training rollouts), e.g.
# `--turn-memories-once` (scripts/interact-once-calibration.sh); recorded in settings.json.
MEMORY_OPTS=${MEMORY_OPTS:-}
# Tasks of each split actually run (the first N of the task file); empty: all of them.
TRAIN_LIMIT=${TRAIN_LIMIT:-}
EVAL_LIMIT=${EVAL_LIMIT:-}
# Evaluation arms besides none, cosine and learned, in three groups: EXTRA_ARMS before Pass@k,
# INDOMAIN_ARMS right after it (both within STOP_AFTER=passk), LATER_ARMS after the
# counterfactual. Every arm is a whole evaluation run (hours at 60 tasks on two cores: about
# six each on the AVX2-only machine of 2026-12-07), so what issue 18 asks for comes first.
# Any arm may go in any group: topick (the TopicK coverage baseline), vanilla (the
# non-agentic LLM), demo (the Demo agent, its worked examples from the training
# run's first successes), and Table 3's baselines and ablations, Table 7's retention and the
# retrieval size: bm25 memrl memento no-episode no-turn no-rl all inject2 ... inject5. The
# ablations, retention and retrieval size vary MERIT itself (the learned selectors), as the
# paper's Table 3, Table 7 and Figure 3b do: no-episode and no-turn switch a memory level off,
# no-rl selects with the untrained agent model instead of the PPO-trained selectors, all keeps
# the experience of failed episodes too, injectN injects N memories per retrieval.
# indomain (beyond the paper) is cosine memory written on the evaluation split's own databases:
# the training split shares none of them (Spider keeps its splits' databases apart), so every
# other arm's memories come from other databases; this one's come from a stream of tasks
# generated from the Spider dev questions of the evaluation databases that seed no evaluation
# task (data/interact-dev-memory, INDOMAIN_TASKS of them; those whose reference SQL equals an
# evaluation task's are left out of the stream), answered in order with memory written online.
# On these splits it is the one arm whose memories can hold what the evaluation databases need,
# so the likeliest to show an effect; with its task generation and stream it costs about 15
# hours here, so it runs right after Pass@k and its report (session 45 moved it there from
# before Pass@k: on the slower machine issue 18's named items then land that much sooner).
EXTRA_ARMS=${EXTRA_ARMS:-vanilla demo topick}
INDOMAIN_ARMS=${INDOMAIN_ARMS:-indomain}
LATER_ARMS=${LATER_ARMS:-bm25 memrl memento no-episode no-turn no-rl all inject2 inject3 inject4 inject5}
INDOMAIN_TASKS=${INDOMAIN_TASKS:-60}
# Held-out checks of the turn selector: one training per (inputs, seed), HOLDOUT_TASKS
# training tasks held out (the smoke's four training tasks leave fewer than four with states).
HOLDOUT_SEEDS=${HOLDOUT_SEEDS:-0 1 2}
HOLDOUT_TASKS=${HOLDOUT_TASKS:-3}
# Pass@k (the paper's Figure 3a): these arms run again with sampling at PASS_K_TEMPERATURE,
# once per seed in PASS_K_SEEDS, and each arm's tries are reported together.
# Each try is a whole evaluation run, so the tries cover a subset: every PASS_K_EVERY-th task
# of the evaluation file (the file grew by appending, so every second task mixes the first
# sets' read-only tasks with the new ones' writes and follow-ups), at most PASS_K_LIMIT of them
# (empty: all): 2 arms x 3 tries x 30 tasks is about 12 hours of the two cores, the main
# arms' 60 tasks twice that again.
PASS_K_ARMS=${PASS_K_ARMS:-cosine learned}
PASS_K_SEEDS=${PASS_K_SEEDS:-1 2 3}
PASS_K_LIMIT=${PASS_K_LIMIT:-30}
PASS_K_EVERY=${PASS_K_EVERY:-2}
PASS_K_TEMPERATURE=${PASS_K_TEMPERATURE:-0.7}
# Run folders made by hand (another checkpoint, another --inject) added to the final report.
REPORT_RUNS=${REPORT_RUNS:-}
# PPO sizes: the turn level trains offline on PRM scores (cheap); every episode-level rollout
# is a whole agent episode.
TURN_UPDATES=${TURN_UPDATES:-60}
TURN_BATCH=${TURN_BATCH:-32}
EPISODE_UPDATES=${EPISODE_UPDATES:-8}
EPISODE_BATCH=${EPISODE_BATCH:-8}
# The frozen turn of the counterfactual (the paper's 7; the small model's episodes are short).
FORK_TURN=${FORK_TURN:-3}
# Logged evaluation episodes forked (the first N that reach FORK_TURN); empty: all. Each fork
# is the rest of an episode, once per arm (none, BM25, cosine, learned): 24, as in the
# committed table, is about two hours here, all sixty about five.
FORK_LIMIT=${FORK_LIMIT:-24}
# Issue 18: at least 60 tasks a split, so paired comparisons can resolve something; the sets
# grow from the committed ones (generation appends), now with Management tasks, phase-2
# follow-ups and knowledge-base entries (GEN_OPTS).
TRAIN_TASKS=${TRAIN_TASKS:-60}
EVAL_TASKS=${EVAL_TASKS:-60}
GEN_OPTS=${GEN_OPTS:---writes --follow-ups --knowledge}
TRAIN_SEEDS=${TRAIN_SEEDS:-300}
EVAL_SEEDS=${EVAL_SEEDS:-200}
GEN_MAX_SEED_SAMPLE=${GEN_MAX_SEED_SAMPLE:-1600}
PRM_PAIRS=${PRM_PAIRS:-300}
# Candidates judged per state: the student must tell memories apart on one state, which pairs
# drawn independently (about one per state) cannot teach it; its agreement table then holds
# whole tasks out (--split-by task: no state, nor a neighbouring turn of its episode, on both
# sides). See docs/results/interact/README.md, the PRM section.
PRM_PER_STATE=${PRM_PER_STATE:-4}
# How the agreement table holds pairs out (task, state or pair); task, as above, for every
# committed result (a smoke run over a handful of tasks has too few tasks for three buckets).
PRM_SPLIT_BY=${PRM_SPLIT_BY:-task}
# More options of `prm annotate`: the queue's v2 experiments pass --grammar (the teacher's
# reply decoded under the rubric's JSON grammar; docs/results/interact/prm-grammar/README.md).
PRM_OPTS=${PRM_OPTS:-}
RUNS=${RUNS:-runs/interact}
RESULTS=${RESULTS:-docs/results/interact}
STOP_AFTER=${STOP_AFTER:-all}   # gen | baseline | memory | learn | passk | counterfactual | all
# The agent's budget in every run, rollout and fork. 20 model calls is the BIRD-Interact
# reference CLI's default (its scripts use 60): the small embedded model rarely submits, and
# each further turn re-reads a growing conversation on the CPU. Observations are cut in the
# prompt only (the logs keep them whole). 320 tokens hold a thought and a long query; the
# 0.5B model otherwise repeats its action up to the 1024-token default on every turn.
MAX_TURNS=${MAX_TURNS:-20}
OBSERVATION_CHARS=${OBSERVATION_CHARS:-2000}
MAX_TOKENS=${MAX_TOKENS:-320}

# The binary pinned in the run folder (scripts/pin-binary.sh), so that a run resumed across
# sessions and machines runs the code it started with; a failed pin stops the script here.
MERIT=${MERIT:-$(scripts/pin-binary.sh "$RUNS")}
mkdir -p "$RUNS" "$RESULTS"
step() { echo "== $(date -u +%FT%TZ) $*" >&2; }
run() { echo "+ $*" >&2; "$@"; }
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
# The evidence of a finished run: its log (compressed), settings and one-line episode summaries,
# so every figure can be recomputed (`merit interact report` reads the logs back after
# `gunzip`). Kept as soon as each run ends, since the whole script spans many sessions.
keep_evidence() { # keep_evidence RUN_DIR
  local name; name=$(basename "$1")
  mkdir -p "$RESULTS/runs/$name"
  gzip -9n < "$1/episodes.jsonl" > "$RESULTS/runs/$name/episodes.jsonl.gz"
  cp "$1/settings.json" "$RESULTS/runs/$name/"
  "$MERIT" interact summaries "$1" --out "$RESULTS/runs/$name/summaries.jsonl"
}
# The failed episodes that had run a query the judge would have passed (`merit interact
# missed`, in binaries from 2026-12-05 on; an older pin skips it).
record_missed() { # record_missed RUN...
  if "$MERIT" interact missed --help > /dev/null 2>&1; then
    record "$RESULTS/missed.md" "$MERIT" interact missed "$@" --tasks data/interact-dev/tasks.jsonl \
      --db-root data/interact-dev --sqlite-dir "$SPIDER/database"
  fi
}
record() { # record FILE COMMAND...: run the command, keep its stdout and the command in FILE
  local file=$1; shift
  local shown="$*"
  { echo '```bash'; echo "merit${shown#"$MERIT"}"; echo '```'; echo; } > "$file.tmp"
  "$@" >> "$file.tmp"
  mv "$file.tmp" "$file"
}

# 1. Task sets, SQL first, with the 1.5B model (the 0.5B drafts fail verification).
# About one target in four passes verification with the 1.5B model, so a seed sample can run
# out of targets before the set is full: the sample is then doubled (up to GEN_MAX_SEED_SAMPLE).
# Widening keeps what is done: the sample is a prefix of one fixed order (seed.rs,
# `spread_over_databases`), and targets already written or rejected are skipped by id.
generate() { # generate SPLIT SEEDS_FILE SEED_SAMPLE TARGET
  local split=$1 seeds=$2 sample=$3 target=$4 out=data/interact-$1
  while :; do
    local have; have=$(lines "$out/tasks.jsonl")
    [ "$have" -ge "$target" ] && break
    run "$MERIT" interact gen --seeds "$seeds" --split "$split" --tables "$SPIDER/tables.json" \
      --db-dir "$SPIDER/database" --out "$out" --model "$GEN_MODEL" $GEN_OPTS \
      --seed-sample "$sample" --limit $((target - have))
    if [ "$(lines "$out/tasks.jsonl")" -eq "$have" ]; then
      if [ "$sample" -ge "$GEN_MAX_SEED_SAMPLE" ]; then
        echo "targets exhausted at $have" >&2
        break
      fi
      sample=$((sample * 2))
      echo "every target of the seed sample is done at $have tasks; sample widened to $sample" >&2
    fi
  done
}
step "task generation"
generate dev "$SPIDER/dev.json" "$EVAL_SEEDS" "$EVAL_TASKS"
generate train "$SPIDER/train.json" "$TRAIN_SEEDS" "$TRAIN_TASKS"
record "$RESULTS/task-sets.md" "$MERIT" interact stats data/interact-train/tasks.jsonl \
  data/interact-dev/tasks.jsonl --db-dir "$SPIDER/database" \
  --seeds "$SPIDER/train.json" --seeds "$SPIDER/dev.json"
[ "$STOP_AFTER" = gen ] && exit 0

# shellcheck disable=SC2206 # AGENT_OPTS is a list of flags on purpose
common=(--sqlite-dir "$SPIDER/database" --max-turns "$MAX_TURNS" --observation-chars "$OBSERVATION_CHARS" --max-tokens "$MAX_TOKENS" --model "$AGENT_MODEL" $AGENT_OPTS)
train_set=(--tasks data/interact-train/tasks.jsonl --db-root data/interact-train "${common[@]}")
eval_set=(--tasks data/interact-dev/tasks.jsonl --db-root data/interact-dev "${common[@]}")
train_only=(); [ -n "$TRAIN_LIMIT" ] && train_only=(--limit "$TRAIN_LIMIT")
eval_only=(); [ -n "$EVAL_LIMIT" ] && eval_only=(--limit "$EVAL_LIMIT")
fork_only=(); [ -n "$FORK_LIMIT" ] && fork_only=(--limit "$FORK_LIMIT")
pass_k_only=(--every "$PASS_K_EVERY" "${eval_only[@]}"); [ -n "$PASS_K_LIMIT" ] && pass_k_only=(--every "$PASS_K_EVERY" --limit "$PASS_K_LIMIT")
# shellcheck disable=SC2206 # MEMORY_OPTS is a list of flags on purpose
memory_opts=($MEMORY_OPTS)
# shellcheck disable=SC2206 # PRM_OPTS is a list of flags on purpose
prm_opts=($PRM_OPTS)

# 2. The no-memory baseline on the evaluation split (issue 6).
step "baseline"
run "$MERIT" interact run "${eval_set[@]}" "${eval_only[@]}" --out "$RUNS/eval-none" > /dev/null
keep_evidence "$RUNS/eval-none"
# BASELINE_NAME names the file; the 0.5B agent in the protocol's plain form is
#   AGENT_MODEL=qwen2.5-coder-0.5b-instruct AGENT_OPTS= RUNS=runs/interact-0.5b \
#   BASELINE_NAME=baseline-0.5b-plain STOP_AFTER=baseline scripts/interact-experiments.sh
record "$RESULTS/${BASELINE_NAME:-baseline}.md" "$MERIT" interact report "$RUNS/eval-none"
[ "$STOP_AFTER" = baseline ] && exit 0

# 3. Memory: built online on the training split, then evaluated from it (frozen).
step "memory runs"
run "$MERIT" interact run "${train_set[@]}" "${train_only[@]}" --out "$RUNS/train-cosine" --memory cosine \
  "${memory_opts[@]}" > /dev/null
keep_evidence "$RUNS/train-cosine"
from=(--memory-from "$RUNS/train-cosine/memory" --frozen-memory "${memory_opts[@]}")
run "$MERIT" interact run "${eval_set[@]}" "${eval_only[@]}" --out "$RUNS/eval-cosine" --memory cosine "${from[@]}" > /dev/null
keep_evidence "$RUNS/eval-cosine"
[ "$STOP_AFTER" = memory ] && exit 0

# 4. The process reward model and both learned selectors (issue 7).
step "PRM and selectors"
# PRM_PAIRS is the sample's total size: annotate only the pairs still missing from it.
judged=$(lines "$RUNS/prm/annotations.jsonl")
if [ "$judged" -lt "$PRM_PAIRS" ]; then
  run "$MERIT" interact prm annotate --run "$RUNS/train-cosine" --out "$RUNS/prm/annotations.jsonl" \
    --model "$GEN_MODEL" --limit $((PRM_PAIRS - judged)) --per-state "$PRM_PER_STATE" "${prm_opts[@]}"
fi
# Each training runs once: a finished one (its last file written) is not repeated when the
# script is started again, because the runs after it load its checkpoint and a checkpoint
# retrained on another machine (another build of the pinned commit) need not be the same
# bytes; a resumed evaluation would then mix two selectors. Delete the file to retrain.
[ -f "$RUNS/prm/agreement.md" ] || record "$RESULTS/prm-agreement.md" "$MERIT" interact prm train \
  --annotations "$RUNS/prm/annotations.jsonl" --out "$RUNS/prm" --split-by "$PRM_SPLIT_BY"
[ -f "$RUNS/selectors/turn-decisions.json" ] || record "$RESULTS/turn-selector.md" \
  "$MERIT" interact train-selector --level turn --run "$RUNS/train-cosine" \
  --prm "$RUNS/prm/student.safetensors" --out "$RUNS/selectors" --updates "$TURN_UPDATES" --batch "$TURN_BATCH"
[ -f "$RUNS/selectors/episode-decisions.json" ] || record "$RESULTS/episode-selector.md" \
  "$MERIT" interact train-selector --level episode "${train_set[@]}" "${train_only[@]}" \
  --memory-from "$RUNS/train-cosine/memory" --with-turn-selector "$RUNS/selectors/turn.safetensors" \
  "${memory_opts[@]}" --out "$RUNS/selectors" --updates "$EPISODE_UPDATES" --batch "$EPISODE_BATCH"
cp "$RUNS/selectors/"*-curve.svg "$RUNS/selectors/"*-curve.jsonl "$RUNS/selectors/"*-decisions.json "$RESULTS/"
learned=(--memory learned --episode-selector "$RUNS/selectors/episode.safetensors"
  --turn-selector "$RUNS/selectors/turn.safetensors")
run "$MERIT" interact run "${eval_set[@]}" "${eval_only[@]}" --out "$RUNS/eval-learned" "${learned[@]}" \
  "${from[@]}" > /dev/null
keep_evidence "$RUNS/eval-learned"
step "report: memory vs none"
main_arms=("$RUNS/eval-none" "$RUNS/eval-cosine" "$RUNS/eval-learned")
record "$RESULTS/memory-vs-none.md" "$MERIT" interact report --baseline "$RUNS/eval-none" "${main_arms[@]}"
record_missed "${main_arms[@]}"
[ "$STOP_AFTER" = learn ] && exit 0

# 5. Baselines (issue 18) and Pass@k; after them the counterfactual (Table 4), the ablations
# (Table 3) and retention (Table 7), which regenerate earlier side tables at the new size.
arms=("${main_arms[@]}")
# The in-database memory of the `indomain` arm (see INDOMAIN_TASKS above): its task set, then
# the stream that writes the memory.
indomain_memory() {
  local out=data/interact-dev-memory
  mkdir -p "$out"
  # The seeds are fixed once (a later evaluation file would not change them).
  [ -f "$out/seeds.json" ] || python3 scripts/interact-indomain.py seeds "$SPIDER/dev.json" \
    data/interact-dev/tasks.jsonl "$out/seeds.json"
  generate dev-memory "$out/seeds.json" "$EVAL_SEEDS" "$INDOMAIN_TASKS"
  record "$RESULTS/task-set-indomain.md" "$MERIT" interact stats "$out/tasks.jsonl" \
    data/interact-dev/tasks.jsonl --db-dir "$SPIDER/database"
  python3 scripts/interact-indomain.py stream "$out/tasks.jsonl" data/interact-dev/tasks.jsonl \
    "$out/stream.jsonl"
  run "$MERIT" interact run --tasks "$out/stream.jsonl" --db-root "$out" "${common[@]}" \
    --out "$RUNS/indomain-cosine" --memory cosine "${memory_opts[@]}" > /dev/null
  keep_evidence "$RUNS/indomain-cosine"
}
eval_arm() { # eval_arm NAME: one evaluation run of the arm, added to the final report
  local arm=$1 args
  case $arm in
    indomain)
      indomain_memory
      args=(--memory cosine --memory-from "$RUNS/indomain-cosine/memory" --frozen-memory
        "${memory_opts[@]}") ;;
    bm25 | topick | memrl | memento) args=(--memory "$arm" "${from[@]}") ;;
    vanilla) args=(--agent vanilla) ;;
    demo) args=(--demos "$RUNS/train-cosine/episodes.jsonl") ;;
    no-episode) args=("${learned[@]}" --no-episode-memory "${from[@]}") ;;
    no-turn) args=("${learned[@]}" --no-turn-memory "${from[@]}") ;;
    no-rl) args=(--memory model "${from[@]}") ;;
    inject[2-5]) args=("${learned[@]}" --inject "${arm#inject}" "${from[@]}") ;;
    all)
      run "$MERIT" interact run "${train_set[@]}" "${train_only[@]}" --out "$RUNS/train-cosine-all" \
        --memory cosine --retention all "${memory_opts[@]}" > /dev/null
      args=("${learned[@]}" --memory-from "$RUNS/train-cosine-all/memory" --frozen-memory --retention all
        "${memory_opts[@]}") ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  run "$MERIT" interact run "${eval_set[@]}" "${eval_only[@]}" --out "$RUNS/eval-$arm" "${args[@]}" > /dev/null
  keep_evidence "$RUNS/eval-$arm"
  arms+=("$RUNS/eval-$arm")
}
step "baselines"
for arm in $EXTRA_ARMS; do eval_arm "$arm"; done

# 6. Pass@k: sampled tries of the main memory arms.
step "pass@k"
for arm in $PASS_K_ARMS; do
  case $arm in
    none) args=() ;;
    cosine) args=(--memory cosine "${from[@]}") ;;
    learned) args=("${learned[@]}" "${from[@]}") ;;
    *) echo "unknown Pass@k arm $arm" >&2; exit 2 ;;
  esac
  tries=()
  for seed in $PASS_K_SEEDS; do
    out="$RUNS/eval-$arm-sampled-$seed"
    run "$MERIT" interact run "${eval_set[@]}" "${pass_k_only[@]}" --out "$out" "${args[@]}" \
      --temperature "$PASS_K_TEMPERATURE" --sample-seed "$seed" > /dev/null
    keep_evidence "$out"
    tries+=("$out")
  done
  record "$RESULTS/pass-at-k-$arm.md" "$MERIT" interact report --pass-at-k "${tries[@]}"
  arms+=("${tries[@]}")
done

# What issue 18 asks for ends here: the comparison of every arm so far (rewritten with the
# ablations below when they run).
step "report: main arms, baselines and Pass@k"
record "$RESULTS/memory-vs-none.md" "$MERIT" interact report --baseline "$RUNS/eval-none" "${arms[@]}"
record_missed "${arms[@]}"

# The in-database memory arm (see INDOMAIN_TASKS above), then the report again with it. It
# belongs to the passk stop (the queue's interact-adopted step ends there), after the report
# that holds everything issue 18 names.
step "in-database memory"
for arm in $INDOMAIN_ARMS; do eval_arm "$arm"; done
if [ -n "$INDOMAIN_ARMS" ]; then
  record "$RESULTS/memory-vs-none.md" "$MERIT" interact report --baseline "$RUNS/eval-none" "${arms[@]}"
  record_missed "${arms[@]}"
fi
[ "$STOP_AFTER" = passk ] && exit 0

# 7. The counterfactual at a frozen turn (Table 4).
step "counterfactual"
# The no-memory episodes are forked: their prefix holds no memory, and the fork without memory
# repeats the logged episode from the reply cache, so only the memory arms cost model time.
run "$MERIT" interact counterfactual --run "$RUNS/eval-none" --turn "$FORK_TURN" "${eval_set[@]}" \
  --memory-from "$RUNS/train-cosine/memory" --turn-selector "$RUNS/selectors/turn.safetensors" \
  "${fork_only[@]}" --out "$RESULTS/counterfactual.md" --log "$RUNS/counterfactual.forks.jsonl" > /dev/null
[ "$STOP_AFTER" = counterfactual ] && exit 0

step "ablations and retention"
for arm in $LATER_ARMS; do eval_arm "$arm"; done
step "report: all arms"
# shellcheck disable=SC2206 # REPORT_RUNS is a list of folders on purpose
arms+=($REPORT_RUNS)
record "$RESULTS/memory-vs-none.md" "$MERIT" interact report --baseline "$RUNS/eval-none" "${arms[@]}"
record_missed "${arms[@]}"
# The side tables of the results README, each from the runs above (issue 18: every committed
# file comes from this script).
have() { for run in "$@"; do [ -f "$run/episodes.jsonl" ] || return 1; done; }
# Each against MERIT itself (eval-learned), as the paper's tables compare.
ablations=("$RUNS/eval-learned" "$RUNS/eval-no-episode" "$RUNS/eval-no-turn" "$RUNS/eval-no-rl")
if have "${ablations[@]}"; then
  record "$RESULTS/ablations.md" "$MERIT" interact report --baseline "$RUNS/eval-learned" "${ablations[@]}"
fi
if have "$RUNS/eval-learned" "$RUNS/eval-all"; then
  record "$RESULTS/retention.md" "$MERIT" interact report --baseline "$RUNS/eval-learned" \
    "$RUNS/eval-learned" "$RUNS/eval-all"
fi
sizes=("$RUNS/eval-learned")
for n in 2 3 4 5; do sizes+=("$RUNS/eval-inject$n"); done
if have "${sizes[@]}"; then
  record "$RESULTS/retrieval-size.md" "$MERIT" interact report --baseline "$RUNS/eval-learned" "${sizes[@]}"
fi
# Held-out checks: the turn selector trained with HOLDOUT_TASKS tasks set aside, full and features-only
# inputs, three seeds each; then every checkpoint scored on the evaluation run's states.
checkpoints=(--selector "$RUNS/selectors/turn.safetensors")
: > "$RESULTS/turn-selector-holdout.md.tmp"
for inputs in full features; do
  for seed in $HOLDOUT_SEEDS; do
    out="$RUNS/holdout-$inputs-s$seed"
    { echo "## Inputs \`$inputs\`, seed $seed"; echo; } >> "$RESULTS/turn-selector-holdout.md.tmp"
    record "$out.md" "$MERIT" interact train-selector --level turn --run "$RUNS/train-cosine" \
      --prm "$RUNS/prm/student.safetensors" --out "$out" --updates "$TURN_UPDATES" \
      --batch "$TURN_BATCH" --holdout-tasks "$HOLDOUT_TASKS" --seed "$seed" --inputs "$inputs"
    cat "$out.md" >> "$RESULTS/turn-selector-holdout.md.tmp"
    echo >> "$RESULTS/turn-selector-holdout.md.tmp"
    checkpoints+=(--selector "$out/turn.safetensors")
  done
done
mv "$RESULTS/turn-selector-holdout.md.tmp" "$RESULTS/turn-selector-holdout.md"
record "$RESULTS/turn-selector-eval-states.md" "$MERIT" interact score-selector \
  --run "$RUNS/eval-cosine" --prm "$RUNS/prm/student.safetensors" "${checkpoints[@]}"

# 8. The evidence of runs added by hand (REPORT_RUNS) and of the train-cosine-all stream; every
# other run kept its own as it ended.
step "evidence"
for dir in "${arms[@]}" "$RUNS/train-cosine-all"; do
  if [ -f "$dir/episodes.jsonl" ]; then keep_evidence "$dir"; fi
done
step "done"
