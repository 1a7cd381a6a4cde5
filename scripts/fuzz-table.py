#!/usr/bin/env python3
"""Totals per fuzz target from the fuzzing log, as the README's fuzz table gives them.

Usage: scripts/fuzz-table.py [docs/results/fuzz/runs.tsv]

Reads the log `scripts/fuzz-all.sh` appends to (date, target, cpu_seconds, wall_seconds,
inputs, exit; `?` where libFuzzer printed no count) and prints one Markdown row per target:
CPU time in all, wall time in all, inputs run (a lower bound where a run has no count), the
runs logged and those that ended with a non-zero exit (a finding or an interruption: each is
explained in the README). Every target of fuzz/fuzz_targets/ is listed, in name order, those
not fuzzed yet with zeros, so the table also shows what is left.
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

TARGETS = Path(__file__).resolve().parent.parent / "fuzz" / "fuzz_targets"


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/results/fuzz/runs.tsv"
    totals = defaultdict(lambda: {"cpu": 0, "wall": 0, "inputs": 0, "unknown": 0, "runs": 0, "failed": 0})
    with open(path, newline="") as log:
        for row in csv.DictReader(log, delimiter="\t"):
            entry = totals[row["target"]]
            entry["cpu"] += int(row["cpu_seconds"])
            entry["wall"] += int(row["wall_seconds"])
            if row["inputs"] == "?":
                entry["unknown"] += 1
            else:
                entry["inputs"] += int(row["inputs"])
            entry["runs"] += 1
            entry["failed"] += row["exit"] != "0"
    for target in TARGETS.glob("*.rs"):
        totals[target.stem]  # every target gets a row, fuzzed or not
    print("| target | CPU time | wall time | inputs | runs | non-zero exits |")
    print("|---|---:|---:|---:|---:|---:|")
    for target in sorted(totals):
        entry = totals[target]
        inputs = f"{entry['inputs']:,}" + ("+" if entry["unknown"] else "")
        print(
            f"| `{target}` | {entry['cpu'] / 60:.1f} min | {entry['wall'] / 60:.1f} min | "
            f"{inputs} | {entry['runs']} | {entry['failed']} |"
        )


if __name__ == "__main__":
    main()
