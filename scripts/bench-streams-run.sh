#!/usr/bin/env bash
# A real embedded repair run, one stream at a time against N streams at once through one
# batched model (issue 17): the same questions and options, each from an empty reply cache.
# Prints both wall times, their ratio, and how often the batched run's replies differ from the
# one-at-a-time run's (initial predictions: independent calls, compared one by one; episodes:
# identical attempt lists or not).
#
#   scripts/bench-streams-run.sh [STREAMS] [LIMIT]        (defaults: 4 streams, 12 questions)
#
# Spider *train* questions (never dev); four methods, one seed, K=3, so that there are four
# streams with different prompts. Writes under runs/bench-streams/ (removed first).
set -euo pipefail
cd "$(dirname "$0")/.."
MERIT=${MERIT:-target/release/merit}
SPIDER=${SPIDER:-../shared/data/spider}
STREAMS=${1:-4}
LIMIT=${2:-12}
OUT=runs/bench-streams
rm -rf "$OUT"
mkdir -p "$OUT"
for parallel in 1 "$STREAMS"; do
  started=$(date +%s.%N)
  "$MERIT" run --dataset spider --split train --data "$SPIDER" --db-dir "$SPIDER/database" \
    --methods ${METHODS:-iterative,merit,dynamic-rag,reflexion} --seeds 0 --k 3 --limit "$LIMIT" \
    --parallel "$parallel" --cache "$OUT/cache-$parallel" --out "$OUT/run-$parallel" > /dev/null 2>&1
  ended=$(date +%s.%N)
  echo "$parallel $(echo "$ended - $started" | bc)" >> "$OUT/wall.txt"
done
python3 - "$OUT" "$STREAMS" <<'EOF'
import json, sys, pathlib
out, streams = pathlib.Path(sys.argv[1]), sys.argv[2]
wall = dict(line.split() for line in (out / "wall.txt").read_text().splitlines())
one, many = float(wall["1"]), float(wall[streams])
print(f"wall time: 1 stream at a time {one:.1f} s, {streams} at once {many:.1f} s, "
      f"ratio {one / many:.2f}x")
def lines(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
a = {r["question_id"]: r["sql"] for r in lines(out / "run-1" / "initial.jsonl")}
b = {r["question_id"]: r["sql"] for r in lines(out / f"run-{streams}" / "initial.jsonl")}
differ = sum(a[q] != b[q] for q in a)
print(f"initial predictions differing: {differ} of {len(a)}")
same = total = 0
for log in sorted((out / "run-1" / "episodes").glob("*.jsonl")):
    other = out / f"run-{streams}" / "episodes" / log.name
    x = {r["question_id"]: [t.get("sql") for t in r["attempts"]] for r in lines(log)}
    y = {r["question_id"]: [t.get("sql") for t in r["attempts"]] for r in lines(other)}
    for q in x:
        total += 1
        same += x[q] == y.get(q)
print(f"episodes with identical attempts: {same} of {total}")
EOF
