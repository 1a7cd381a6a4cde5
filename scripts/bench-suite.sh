#!/usr/bin/env bash
# Reruns the README's benchmark tables whose raw output had not been kept, and keeps it: each
# benchmark's whole output goes to OUT/<name>.txt (default docs/results/bench/<today>/), after
# a header with the command, the binary's source commit, the CPU and the load average, so the
# README's figures can be read back from the repository.
#
#   scripts/bench-suite.sh [MERIT_BINARY]     # default: the release build (built if missing)
#
# Timings want a quiet machine: run it between experiments, or pause a running model process
# with `kill -STOP PID` and resume it with `kill -CONT PID` afterwards (what the 2026-12-07 run
# did; a paused process does nothing, and the live-mode experiment's clock is logical). Every
# benchmark prints ratios against a baseline measured in the same run, which carry across
# machines better than the absolute times.
#
# Environment: OUT (folder), SPIDER (default ../shared/data/spider), GOLDEN (the golden pairs
# file), LLAMA_BENCH (llama.cpp's llama-batched-bench, built by scripts/setup-test-server.sh;
# without it the single-stream comparison is skipped), ONLY (space-separated subset of: eval
# memory retrieval models episode repair; `retrieval` is the memory benchmark without the CLI,
# not in the default; `episode` is `merit bench models` with its defaults: the cold
# prompt, the 7-step episode with and without prefix reuse, the embedder, and two
# conversations taking turns with one KV cache and with two), SUFFIX (appended to each file's name, e.g. `-omp-active` for a rerun
# under other settings, whose environment the header then records).
set -euo pipefail
cd "$(dirname "$0")/.."

MERIT=${1:-}
SPIDER=${SPIDER:-../shared/data/spider}
GOLDEN=${GOLDEN:-../shared/data/golden/eval_vectors_dev.jsonl}
OUT=${OUT:-docs/results/bench/$(date -u +%F)}
ONLY=${ONLY:-eval memory models episode repair}
# `retrieval` alone needs no merit binary: it is the memory benchmark through merit-memory's
# example, which builds without the model backends (minutes instead of half an hour).
if [ -z "$MERIT" ] && [ "$ONLY" != retrieval ]; then
  cargo build --release -p merit-cli
  MERIT=target/release/merit
fi
LLAMA_BENCH=${LLAMA_BENCH:-$(ls ~/.cache/merit/test-server/*/bin/llama-batched-bench 2>/dev/null | head -n 1 || true)}
mkdir -p "$OUT"

# The commit the binary was built from: a pinned binary's source-commit beside it, else HEAD
# (with a note when the checkout has uncommitted source changes).
if [ -n "$MERIT" ] && [ -f "$(dirname "$MERIT")/source-commit" ]; then
  commit=$(cat "$(dirname "$MERIT")/source-commit")
else
  commit=$(git rev-parse HEAD)
  git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || commit="$commit (plus uncommitted changes)"
fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
simd=avx2
case "$flags" in *avx512f*) simd=avx512 ;; esac

# run NAME COMMAND...: the command's output (stdout and stderr) to OUT/NAME.txt, written to a
# temporary file first so an interrupted benchmark leaves no half file under the final name.
run() {
  local name=$1
  shift
  local file="$OUT/$name${SUFFIX:-}.txt"
  echo "== $name: $*" >&2
  {
    echo "# merit benchmark: $name"
    echo "# command: $*"
    echo "# binary source commit: $commit"
    echo "# date: $(date -u +%FT%TZ)"
    echo "# OpenMP environment: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset}"
    echo "# cpu: $cpu, $(nproc) cores, $simd; /proc/loadavg before: $(cat /proc/loadavg) (the 4th field: processes running now)"
    echo
    "$@" 2>&1
  } > "$file.tmp"
  mv "$file.tmp" "$file"
}

for bench in $ONLY; do
  case "$bench" in
    eval)
      run eval "$MERIT" bench eval --questions "$SPIDER/dev.json" --db-dir "$SPIDER/database" \
        --pairs "$GOLDEN"
      ;;
    memory)
      run memory "$MERIT" bench memory --variants merit,dynamic-rag,type-reliability
      ;;
    retrieval)
      cargo build --release -p merit-memory --example bench_retrieval
      run retrieval target/release/examples/bench_retrieval 1000,10000,100000 384 300 5 \
        merit,dynamic-rag,type-reliability
      ;;
    models)
      if [ -n "$LLAMA_BENCH" ] && [ -x "$LLAMA_BENCH" ]; then
        run models-single-stream "$MERIT" bench models --db-dir "$SPIDER/database" --no-episode \
          --no-embedder --repeat 5 --llama-bench "$LLAMA_BENCH"
      else
        echo "skipping models: no llama-batched-bench (scripts/setup-test-server.sh builds it)" >&2
      fi
      ;;
    episode)
      run models-episode "$MERIT" bench models --db-dir "$SPIDER/database"
      ;;
    repair)
      run repair-scripted "$MERIT" bench repair --scripted --dataset spider --data "$SPIDER" \
        --db-dir "$SPIDER/database" --methods iterative,reflexion,dynamic-rag,merit \
        --seeds 0,1,2 --k 7
      ;;
    *)
      echo "unknown benchmark '$bench' (eval, memory, retrieval, models, episode, repair)" >&2
      exit 2
      ;;
  esac
done
echo "raw outputs in $OUT" >&2
