#!/usr/bin/env python3
"""Descriptive breakdowns of a repair run against its Iterative streams, from the episode logs.

    scripts/repair-breakdown.py docs/results/repair/dev/chosen [--reference iterative]

Prints, for every other method's seed, its final accuracy difference from the reference
method's seed 0 (Iterative's seeds are identical) and the questions each gets right that the
other does not, split by the repair step that fixed them (the first or a later one), with
both streams' repair prompt tokens; the initial failures repaired in each half of each stream, by the reference
and by the stream; then, pooled over seeds, the initial failures repaired by the type of the
initial failure. Reads `episodes/*.jsonl` or `episodes/*.jsonl.gz` (committed runs are
compressed). These are descriptions, not tests: `merit report` has the paired intervals.
"""

import argparse
import collections
import gzip
import json
import pathlib
import re
import sys


def read_streams(run):
    streams = {}
    for path in sorted((run / "episodes").iterdir()):
        match = re.fullmatch(r"(.+)-seed(\d+)\.jsonl(\.gz)?", path.name)
        if not match:
            continue
        opener = gzip.open if match.group(3) else open
        with opener(path, "rt") as lines:
            episodes = [json.loads(line) for line in lines if line.strip()]
        streams[(match.group(1), int(match.group(2)))] = {
            e["question_id"]: e for e in episodes
        }
    return streams


def solved(episode):
    return episode["attempts"][-1]["status"] == "correct"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=pathlib.Path)
    parser.add_argument("--reference", default="iterative")
    args = parser.parse_args()
    streams = read_streams(args.run)
    reference = streams.get((args.reference, 0))
    if reference is None:
        sys.exit(f"{args.run}: no {args.reference} seed 0 stream")
    n = len(reference)
    print(f"## Against {args.reference} seed 0 ({n} questions)\n")
    print("| stream | correct | Δ pp | right only here / only there |")
    print("|---|---:|---:|---|")
    for (method, seed), episodes in sorted(streams.items()):
        if method == args.reference:
            continue
        if episodes.keys() != reference.keys():
            print(f"| {method} seed {seed} | unfinished ({len(episodes)} of {n}) | | |")
            continue
        mine = sum(solved(e) for e in episodes.values())
        theirs = sum(solved(e) for e in reference.values())
        only_here = sum(solved(episodes[q]) and not solved(reference[q]) for q in reference)
        only_there = sum(not solved(episodes[q]) and solved(reference[q]) for q in reference)
        print(
            f"| {method} seed {seed} | {mine} | {100 * (mine - theirs) / n:+.2f} "
            f"| {only_here} / {only_there} |"
        )
    print("\n## Questions right in only one of the two, by the repair step that fixed them\n")
    print(
        "| stream | right only here: at step 1 / later | right only in the reference: "
        "at step 1 / later | repair prompt tokens (M): here / reference |"
    )
    print("|---|---|---|---|")
    for (method, seed), episodes in sorted(streams.items()):
        if method == args.reference or episodes.keys() != reference.keys():
            continue
        here = [episodes[q] for q in reference if solved(episodes[q]) and not solved(reference[q])]
        there = [reference[q] for q in reference if solved(reference[q]) and not solved(episodes[q])]

        def by_step(won):
            first = sum(e["attempts"][-1]["step"] == 1 for e in won)
            return f"{first} / {len(won) - first}"

        def repair_prompt_tokens(stream):
            return sum(
                a["prompt_tokens"] for e in stream.values() for a in e["attempts"] if a["step"] > 0
            ) / 1e6

        print(
            f"| {method} seed {seed} | {by_step(here)} | {by_step(there)} "
            f"| {repair_prompt_tokens(episodes):.2f} / {repair_prompt_tokens(reference):.2f} |"
        )
    print("\n## Initial failures repaired in each half of the stream (the stream's own order)\n")
    print("| stream | first half: reference / this | second half: reference / this |")
    print("|---|---|---|")
    for (method, seed), episodes in sorted(streams.items()):
        if method == args.reference or episodes.keys() != reference.keys():
            continue
        ordered = sorted(episodes.values(), key=lambda e: e["position"])
        failures = [e for e in ordered if e["attempts"][0]["status"] != "correct"]
        half = len(failures) // 2
        cells = []
        for part in (failures[:half], failures[half:]):
            theirs = sum(solved(reference[e["question_id"]]) for e in part)
            cells.append(f"{theirs} / {sum(solved(e) for e in part)} of {len(part)}")
        print(f"| {method} seed {seed} | " + " | ".join(cells) + " |")
    print("\n## Initial failures repaired, by the initial failure's type (pooled over seeds)\n")
    by_method = collections.defaultdict(lambda: collections.Counter())
    totals = collections.defaultdict(lambda: collections.Counter())
    for (method, _seed), episodes in sorted(streams.items()):
        for episode in episodes.values():
            first = episode["attempts"][0]
            if first["status"] == "correct":
                continue
            kind = first.get("failure_type") or "unknown"
            totals[method][kind] += 1
            by_method[method][kind] += solved(episode)
    kinds = sorted({k for counter in totals.values() for k in counter})
    print("| method | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for method in sorted(totals):
        cells = [f"{by_method[method][k]} / {totals[method][k]}" for k in kinds]
        print(f"| {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
