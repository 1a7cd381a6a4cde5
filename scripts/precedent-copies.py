#!/usr/bin/env python3
"""How often a memory method's repairs copy the SQL of the precedents it was shown.

Usage: scripts/precedent-copies.py RUN_DIR [RUN_DIR ...]

Reads the episode logs of each run directory (`episodes/<method>-seed<s>.jsonl`, or `.jsonl.gz`
as committed). A memory entry's id is written on the episode that produced it
(`memory_written`), so every retrieved id leads back to its source episode in the same stream.
For each revision of a memory method shown at least one precedent, the revision counts as a
copy when its SQL is at least THRESHOLD similar (difflib's ratio on lower-cased,
whitespace-collapsed text) to some query of a retrieved precedent's source episode; the copy
is attributed to the closest such query: the final query of a repaired source (`positive,
final`), an earlier failing query of a repaired source (`positive, failing`), or a query of an
unrepaired source (`negative`). As a baseline, the same test is applied to Iterative's
revision at the same step of the same question (same seed, when Iterative ran it) against the
same precedents: how often a revision written without memory looks like them anyway (same
database, related questions). The last column is the share of every precedent shown to a
revision that comes from the question's own database (the copying needs one).
"""
import difflib
import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

THRESHOLD = 0.9


def read_logs(run: Path) -> dict:
    streams = {}
    for log in sorted((run / "episodes").iterdir()):
        name = log.name
        if not (name.endswith(".jsonl") or name.endswith(".jsonl.gz")):
            continue
        opener = gzip.open if name.endswith(".gz") else open
        with opener(log, "rt") as lines:
            for line in lines:
                episode = json.loads(line)
                key = (episode["method"], episode["seed"])
                streams.setdefault(key, {})[episode["question_id"]] = episode
    return streams


def normalise(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.strip().lower())


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, normalise(a), normalise(b)).ratio()


def closest(sql: str, sources: list) -> tuple:
    """(similarity, kind) of the closest query among the source episodes' attempts."""
    best = (0.0, None)
    for source in sources:
        attempts = source["attempts"]
        repaired = attempts[-1]["status"] == "correct"
        for index, attempt in enumerate(attempts):
            if repaired:
                kind = "positive, final" if index == len(attempts) - 1 else "positive, failing"
            else:
                kind = "negative"
            score = similarity(sql, attempt["sql"])
            if score > best[0]:
                best = (score, kind)
    return best


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    streams = {}
    for run in sys.argv[1:]:
        streams.update(read_logs(Path(run)))
    print("| stream | revisions shown precedents | copies | copies % | positive, final | "
          "positive, failing | negative | Iterative, same steps and precedents | "
          "shown precedents from the question's database |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (method, seed), episodes in sorted(streams.items()):
        written = {e["memory_written"]: e for e in episodes.values() if e.get("memory_written")}
        if not written:
            continue
        iterative = streams.get(("iterative", seed), {})
        shown = copies = 0
        kinds = Counter()
        baseline_shown = baseline_copies = 0
        precedents = same_database = 0
        for question, episode in episodes.items():
            attempts = episode["attempts"]
            for step, attempt in enumerate(attempts[1:], start=1):
                sources = [written[m] for m in attempt["retrieved"] if m in written]
                if not sources:
                    continue
                precedents += len(sources)
                same_database += sum(s["db_id"] == episode["db_id"] for s in sources)
                shown += 1
                score, kind = closest(attempt["sql"], sources)
                if score >= THRESHOLD:
                    copies += 1
                    kinds[kind] += 1
                other = iterative.get(question, {}).get("attempts", [])
                if step < len(other):
                    baseline_shown += 1
                    baseline_copies += closest(other[step]["sql"], sources)[0] >= THRESHOLD
        baseline = (f"{baseline_copies}/{baseline_shown} ({100 * baseline_copies / baseline_shown:.1f}%)"
                    if baseline_shown else "n/a")
        print(f"| {method} seed {seed} | {shown} | {copies} | "
              f"{100 * copies / max(shown, 1):.1f} | {kinds['positive, final']} | "
              f"{kinds['positive, failing']} | {kinds['negative']} | {baseline} | "
              f"{same_database}/{precedents} ({100 * same_database / max(precedents, 1):.1f}%) |")


if __name__ == "__main__":
    main()
