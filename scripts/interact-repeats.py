#!/usr/bin/env python3
"""Word-for-word repeated steps in interact run logs (episodes.jsonl, or .jsonl.gz).

A step is a repeat when its action (name, target and arguments) equals the step just before it
in the same episode. Prints a Markdown table: run, episodes, steps, repeats and their share,
episodes with three or more repeats, phase-1 successes.

    python3 scripts/interact-repeats.py runs/interact/eval-none runs/interact/eval-cosine

`merit interact report` gives the same figures in its second table (steps repeating the one
before, episodes with three or more). This script stays only while
scripts/interact-hint-calibration.sh, whose pinned binary predates them, still calls it; it
goes when that calibration has written its report.
"""
import gzip
import json
import os
import sys


def log_of(path):
    for name in ("episodes.jsonl", "episodes.jsonl.gz"):
        candidate = os.path.join(path, name)
        if os.path.isfile(candidate):
            return candidate
    return path


def records(path):
    path = log_of(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as lines:
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line (a run killed mid-write): the run cuts it on resume


def main(paths):
    print("| run | episodes | steps | repeats | share | episodes with ≥3 repeats | phase 1 solved |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        episodes = steps = repeats = looping = solved = 0
        for record in records(path):
            episodes += 1
            trajectory = record["trajectory"]
            solved += bool(trajectory["outcome"]["phase1_passed"])
            previous, here = None, 0
            for step in trajectory["steps"]:
                action = json.dumps(step["action"], sort_keys=True)
                steps += 1
                if action == previous:
                    here += 1
                previous = action
            repeats += here
            looping += here >= 3
        share = f"{100 * repeats / steps:.1f}%" if steps else "n/a"
        print(f"| {path} | {episodes} | {steps} | {repeats} | {share} | {looping} | {solved} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
