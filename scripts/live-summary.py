#!/usr/bin/env python3
"""What the live-mode report does not print, per arm, from the committed evidence.

`merit live-experiment` writes report.md (accuracy, paired intervals and sign tests against
the no-memory arm, feedback given and wrong). This adds, from each arm's answers and live
journal: how many answers executed at all, how many memories the automatic rule retired, and
the paired comparison with `none` on accuracy and on executing (a seeded bootstrap over the
questions and the exact two-sided sign test over the questions where the two arms differ;
the accuracy p-values also adjusted for the family of memory arms, by Holm's method);
then a second table, the copying of precedents: of the revisions shown at least one memory,
how many are near-copies of a query of a shown memory's source episode (the test of
scripts/precedent-copies.py: difflib ratio at least 0.9 on lower-cased, whitespace-collapsed
SQL), and, as the baseline, how often the no-memory arm's revision at the same step of the
same question is as close to the same memories' queries; third, those copies by the polarity
of the memory copied and the episode's final verdict; last, the memories each arm wrote,
by the signal that finalized them and whether the answer was in fact correct (an answer
nobody judged is remembered as a repair that worked).

    scripts/live-summary.py [ARMS_DIR]    # default docs/results/live/dev/arms

Reads ARMS_DIR/<arm>/answers.jsonl(.gz) and live.jsonl(.gz); an arm still running is read as
far as it has gone, and compared with `none` on the questions both have answered, but left out
of the Holm family until it has answered every question `none` has. The report's
own accuracy intervals come from merit_lab::stats; this small Python bootstrap exists only so
that the executing comparison, which the report does not make, can be recomputed without a
build (its accuracy intervals may differ slightly from the report's, which resamples differently).
"""
import gzip
import importlib.util
import json
import random
import sys
from math import comb
from pathlib import Path

# The one definition of "a copy of a precedent's query", shared with the repair runs' script.
_spec = importlib.util.spec_from_file_location(
    "precedent_copies", Path(__file__).with_name("precedent-copies.py"))
precedent_copies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(precedent_copies)

RESAMPLES = 10_000


def read_jsonl(folder, name):
    """The records of FOLDER/NAME.jsonl, or of its gzip-compressed copy."""
    plain, packed = folder / f"{name}.jsonl", folder / f"{name}.jsonl.gz"
    if plain.exists():
        with open(plain, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if packed.exists():
        with gzip.open(packed, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return []


def sign_test(won, lost):
    """Exact two-sided sign test over the discordant questions."""
    n = won + lost
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(won, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(base, arm, field):
    """Difference in percentage points, its 95% bootstrap interval, won, lost, sign-test p."""
    positions = sorted(set(base) & set(arm))
    diffs = [int(arm[p][field]) - int(base[p][field]) for p in positions]
    n = len(diffs)
    if n == 0:
        return 0.0, 0.0, 0.0, 0, 0, 1.0, 0
    rng = random.Random(0)
    means = sorted(
        sum(diffs[rng.randrange(n)] for _ in range(n)) / n * 100 for _ in range(RESAMPLES)
    )
    won, lost = diffs.count(1), diffs.count(-1)
    low, high = means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]
    return sum(diffs) / n * 100, low, high, won, lost, sign_test(won, lost), n


# The finalizing signals whose memory is a negative entry (merit_live::Signal): the user
# rejected the answer, or no attempt executed.
NEGATIVE_SIGNALS = {"user_rejected", "execution_failed"}


def copying(journal, answers, base_journal, base_answers):
    """(revisions shown memory, copies, baseline revisions, baseline copies, copied) of one
    arm, where `copied` counts the copies by the polarity of the memory whose query is the
    closest ("negative" or "positive") and whether the episode's answer was correct:
    {(polarity, correct): n}. The baseline's episode of the same question is found through the
    answers' question ids (a question's text can repeat in Spider dev)."""
    asked = {e["episode"]: e for e in journal if e.get("event") == "asked"}
    base_asked = {e["episode"]: e for e in base_journal if e.get("event") == "asked"}
    question_of = {r["episode"]: r["question_id"] for r in answers.values()}
    base = {r["question_id"]: base_asked.get(r["episode"], {}) for r in base_answers.values()}
    source = {e["memory"]: asked[e["episode"]] for e in journal
              if e.get("event") == "finalized" and e.get("memory") is not None
              and e["episode"] in asked}
    polarity = {e["memory"]: "negative" if e["signal"] in NEGATIVE_SIGNALS else "positive"
                for e in journal
                if e.get("event") == "finalized" and e.get("memory") is not None}
    correct = {r["episode"]: r["correct"] for r in answers.values()}
    shown = copies = base_shown = base_copies = 0
    copied = {}
    for episode in asked.values():
        for attempt in episode["attempts"]:
            step = attempt["step"]
            used = [u["id"] for u in episode.get("used", [])
                    if u.get("step") == step and u["id"] in source]
            if step == 0 or not used:
                continue
            queries = [a["sql"] for memory in used for a in source[memory]["attempts"]]
            shown += 1
            # The memory whose query is closest (a tie goes to the newer memory).
            closest, memory = max((precedent_copies.similarity(attempt["sql"], a["sql"]), memory)
                                  for memory in used for a in source[memory]["attempts"])
            if closest >= precedent_copies.THRESHOLD:
                copies += 1
                key = (polarity[memory], correct.get(episode["episode"], False))
                copied[key] = copied.get(key, 0) + 1
            other = base.get(question_of.get(episode["episode"]), {}).get("attempts", [])
            if step < len(other):
                base_shown += 1
                base_copies += max(precedent_copies.similarity(other[step]["sql"], q)
                                   for q in queries) >= precedent_copies.THRESHOLD
    return shown, copies, base_shown, base_copies, copied


def holm(p_values):
    """Holm's step-down adjustment of the p-values of a family of comparisons (the same rule
    as merit_lab::stats::holm_adjusted, which the interact report uses)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def written(journal, answers):
    """Memories written, by the signal that finalized them and the hidden oracle's verdict on
    the answer: {signal: (correct, wrong)}."""
    by_episode = {r["episode"]: r for r in answers.values()}
    counts = {}
    for event in journal:
        if event.get("event") != "finalized" or event.get("memory") is None:
            continue
        answer = by_episode.get(event["episode"])
        if answer is None:
            continue
        right, wrong = counts.get(event["signal"], (0, 0))
        counts[event["signal"]] = (right + answer["correct"], wrong + (not answer["correct"]))
    return counts


def format_p(p):
    """Two decimals, or `< 0.01` where two decimals would read 0.00."""
    return "< 0.01" if p < 0.01 else f"{p:.2f}"


def share(part, whole):
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "n/a"


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/live/dev/arms")
    arms = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        answers = {r["position"]: r for r in read_jsonl(folder, "answers")}
        journal = read_jsonl(folder, "live")
        retired = sum(1 for e in journal if e.get("event") == "retired")
        restored = sum(1 for e in journal if e.get("event") == "restored")
        arms[folder.name] = (answers, retired, restored, journal)
    if "none" not in arms:
        sys.exit(f"no `none` arm under {root}")
    base = arms["none"][0]
    compared = [name for name, arm in arms.items() if name != "none" and arm[0]]
    # Every memory arm is compared with the same baseline: the accuracy p-values are also
    # given adjusted for that family (Holm), over the finished arms read here (an unfinished
    # arm's p is over a subset of the questions and would change the family's size as it runs).
    finished = [name for name in compared if set(arms[name][0]) == set(base)]
    adjusted = dict(zip(finished, holm([paired(base, arms[name][0], "correct")[5]
                                        for name in finished])))
    print("| arm | answers | correct | executed | memories retired (restored) "
          "| accuracy vs none: pp [95%], won/lost, p | accuracy p, Holm over "
          f"{len(finished)} finished arms | executed vs none: pp [95%], won/lost, p |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for name, (answers, retired, restored, _) in arms.items():
        correct = sum(r["correct"] for r in answers.values())
        executed = sum(r["executed"] for r in answers.values())
        cells = []
        for field in ("correct", "executed"):
            if name not in compared:
                cells.append("–")
                continue
            d, low, high, won, lost, p, n = paired(base, answers, field)
            shown_p = format_p(p) if p < 0.01 else "= " + format_p(p)
            cells.append(f"{d:+.1f} [{low:+.1f}, {high:+.1f}], {won}/{lost}, p {shown_p} (n = {n})")
        if name in adjusted:
            holm_cell = format_p(adjusted[name])
        else:
            holm_cell = "unfinished" if name in compared else "–"
        print(f"| {name} | {len(answers)} | {correct} | {executed} | {retired} ({restored}) "
              f"| {cells[0]} | {holm_cell} | {cells[1]} |")
    print()
    print("| arm | revisions shown memory | near-copies of a shown memory's query "
          "| no memory, same steps and memories |")
    print("|---|---:|---:|---:|")
    base_journal = arms["none"][3]
    copied_by_arm = {}
    for name, (answers, _, _, journal) in arms.items():
        if name == "none":
            continue
        shown, copies, base_shown, base_copies, copied = copying(journal, answers,
                                                                 base_journal, base)
        print(f"| {name} | {shown} | {share(copies, shown)} | {share(base_copies, base_shown)} |")
        copied_by_arm[name] = copied
    print()
    print("| arm | near-copies of a negative memory's query: answer wrong / correct "
          "| of a positive memory's query: answer wrong / correct |")
    print("|---|---:|---:|")
    for name, copied in copied_by_arm.items():
        cells = [f"{copied.get((side, False), 0)} / {copied.get((side, True), 0)}"
                 for side in ("negative", "positive")]
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    print()
    print("| arm | memories written: signal (answers correct / wrong by the hidden oracle) |")
    print("|---|---|")
    for name, (answers, _, _, journal) in arms.items():
        if name == "none":
            continue
        counts = written(journal, answers)
        cells = ", ".join(f"{signal} {right}/{wrong}" for signal, (right, wrong) in sorted(counts.items()))
        print(f"| {name} | {cells or 'none'} |")


if __name__ == "__main__":
    main()
