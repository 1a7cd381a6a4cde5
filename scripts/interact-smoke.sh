#!/usr/bin/env bash
# A small end-to-end pass of scripts/interact-experiments.sh with the real embedded models,
# before its full run (about a day on two cores) is started or after the script changes: every
# step (baseline, memory, PRM annotation and training, both selectors, the learned arm, the
# baselines, Pass@k, the counterfactual, ablations, retention, retrieval size, held-out checks)
# runs once on a handful of tasks, so that a wrong flag or a missing file shows in about an
# hour instead of half-way through the real run.
#
#   scripts/interact-smoke.sh [BINARY]      # default target/release/merit
#
# The agent and memory options come from the environment as in the real script (AGENT_OPTS,
# MEMORY_OPTS), so an adopted experiment's options are smoke-tested with its pinned binary:
#   AGENT_OPTS="--fold-repeats --schema-in-opening --repeat-guard ..." \
#     scripts/interact-smoke.sh runs/interact-v2-.../merit
#
# It works in a scratch copy (SMOKE_DIR, default /tmp/merit-interact-smoke): the script, and
# task files cut down to the four shortest training Query tasks (so that the positive-only
# memory gets at least one success to keep) and three evaluation tasks (the shortest Query
# task, a Management task and a task with a phase-2 follow-up). An agent that solves none of
# the four leaves the memory empty and the PRM step with nothing to judge (the v2 agent's
# smoke did, at 8 turns): SMOKE_TRAIN_TASKS (comma-separated instance ids, say ones the
# same binary and options solved in a calibration run) go first, the shortest fill up to four.
# The turn cap (SMOKE_MAX_TURNS, default 8; the real runs allow 20) is part of the agent's
# opening, so a task solved under 20 turns may take another path under 8. Its reply cache is its own
# ($SMOKE_DIR/home), the models are the usual ones. Resumable like the real script: run it
# again and finished steps are skipped. Nothing under the repository is written.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
binary=$(realpath "${1:-target/release/merit}")
[ -x "$binary" ] || { echo "no merit binary at $binary (cargo build --release -p merit-cli)" >&2; exit 2; }
smoke=${SMOKE_DIR:-/tmp/merit-interact-smoke}
models=${MERIT_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/merit}/models

mkdir -p "$smoke/repo/scripts" "$smoke/repo/data" "$smoke/home"
ln -sfn "$models" "$smoke/home/models"
cp scripts/interact-experiments.sh scripts/interact-indomain.py "$smoke/repo/scripts/"
if [ ! -f "$smoke/repo/data/interact-dev/tasks.jsonl" ]; then
  cp -r data/interact-train data/interact-dev "$smoke/repo/data/"
  python3 - "$smoke/repo/data" "${SMOKE_TRAIN_TASKS:-}" <<'EOF'
import json, sys
root = sys.argv[1]
def load(split):
    with open(f"{root}/interact-{split}/tasks.jsonl") as f:
        return [json.loads(line) for line in f]
def save(split, tasks):
    with open(f"{root}/interact-{split}/tasks.jsonl", "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in tasks)
def size(task):
    return (len(str(task["sol_sql"])), task["instance_id"])
wanted = [i for i in sys.argv[2].split(",") if i]
every = {t["instance_id"]: t for t in load("train")}
missing = [i for i in wanted if i not in every]
if missing:
    sys.exit(f"SMOKE_TRAIN_TASKS names tasks the training set does not have: {missing}")
train = [every[i] for i in wanted]
train += sorted((t for t in every.values() if t["category"] == "Query" and t not in train), key=size)
train = train[:max(4, len(wanted))]
dev = load("dev")
picked = [min((t for t in dev if t["category"] == "Query"), key=size)]
picked += [t for t in dev if t["category"] != "Query"][:1]
picked += [t for t in dev if t.get("follow_up") and t not in picked][:1]
if len(picked) < 3:
    sys.exit("the evaluation set has no Management task or no follow-up to smoke-test")
save("train", train)
save("dev", picked)
print("smoke tasks:", [t["instance_id"] for t in train], [t["instance_id"] for t in picked])
EOF
fi

cd "$smoke/repo"
MERIT_HOME=$smoke/home MERIT=$binary SPIDER=${SPIDER:-$repo/../shared/data/spider} \
  RUNS=$smoke/runs RESULTS=$smoke/results TRAIN_TASKS=0 EVAL_TASKS=0 MAX_TURNS=${SMOKE_MAX_TURNS:-8} \
  PRM_PAIRS=30 PRM_PER_STATE=2 PRM_SPLIT_BY=pair TURN_UPDATES=2 TURN_BATCH=4 \
  EPISODE_UPDATES=1 EPISODE_BATCH=1 INDOMAIN_TASKS=${INDOMAIN_TASKS:-2} \
  PASS_K_SEEDS=1 PASS_K_LIMIT=2 FORK_LIMIT=1 FORK_TURN=2 \
  HOLDOUT_SEEDS=0 HOLDOUT_TASKS=1 LATER_ARMS="bm25 no-rl all inject2" \
  bash scripts/interact-experiments.sh
echo "interact smoke: every step ran; results in $smoke/results"
