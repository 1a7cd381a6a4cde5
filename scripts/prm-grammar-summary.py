#!/usr/bin/env python3
"""Summary of scripts/prm-grammar-measure.sh: the teacher unconstrained (`plain`) against the
teacher under the rubric grammar (`grammar`) on the same pairs.

  prm-grammar-summary.py OUT [REFERENCE]

Reads OUT/plain.jsonl, OUT/grammar.jsonl (annotation files) and OUT/plain.log, OUT/grammar.log
(the embedded model's `call done` lines) and writes OUT/summary.md atomically (and prints it).
REFERENCE, optional, is an earlier unconstrained annotation file of the same pairs (.jsonl or
.jsonl.gz): its agreement with OUT/plain.jsonl is the judge's own repeatability, the yardstick
for the agreement between the two settings.

Agreement is read from what the PRM learns: whether the judge recommends the memory for
injection, its overall-utility score, and, for a state with two usable pairs, which of its two
memories ranks higher in the order the scalar reward gives (recommended above unrecommended,
then by overall utility; `prm::rubric::scalar_utility`).
"""
import gzip
import json
import os
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FIELD = re.compile(r"(\w+)=(\d+)")


def read_annotations(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {(r["state_id"], r["memory_id"]): r for r in rows}


def read_calls(path):
    calls = []
    with open(path, errors="replace") as f:
        for line in f:
            line = ANSI.sub("", line)
            if "call done" in line:
                calls.append({k: int(v) for k, v in FIELD.findall(line)})
    return calls


def rank_key(row):
    """The order of the scalar reward, or None for an unusable reply."""
    rubric = row["result"].get("rubric")
    if rubric is None:
        return None
    return (rubric["flags"]["recommend_injection"], rubric["principles"]["overall_utility"]["score"])


def agreement(a, b):
    """Agreement of two annotation files on the pairs both judged usably."""
    both = [k for k in a if k in b and rank_key(a[k]) is not None and rank_key(b[k]) is not None]
    if not both:
        return {"pairs": 0}
    recommend = sum(rank_key(a[k])[0] == rank_key(b[k])[0] for k in both)
    overall = sum(rank_key(a[k])[1] == rank_key(b[k])[1] for k in both)
    distance = sum(abs(rank_key(a[k])[1] - rank_key(b[k])[1]) for k in both) / len(both)
    by_state = {}
    for k in sorted(both):
        by_state.setdefault(k[0], []).append(k)
    orders = same_order = 0
    for keys in by_state.values():
        if len(keys) != 2:
            continue
        sign = lambda rows: (rank_key(rows[keys[0]]) > rank_key(rows[keys[1]])) - (
            rank_key(rows[keys[0]]) < rank_key(rows[keys[1]]))
        orders += 1
        same_order += sign(a) == sign(b)
    return {"pairs": len(both), "recommend": recommend, "overall": overall,
            "distance": distance, "states": orders, "same_order": same_order}


def setting_row(name, rows, calls):
    usable = sum(rank_key(r) is not None for r in rows.values())
    generated = sum(c.get("generated", 0) for c in calls)
    generation_s = sum(c.get("generation_ms", 0) for c in calls) / 1000
    prompt_s = sum(c.get("prompt_ms", 0) for c in calls) / 1000
    speed = generated / generation_s if generation_s else float("nan")
    return (f"| {name} | {len(rows)} | {usable} | {len(calls)} | {generated:,} | "
            f"{generation_s:,.0f} | {speed:.2f} | {prompt_s:,.0f} | {generation_s + prompt_s:,.0f} |"), (
        generated, generation_s + prompt_s, speed)


def agreement_row(name, result):
    if result["pairs"] == 0:
        return f"| {name} | 0 | n/a | n/a | n/a | n/a |"
    n = result["pairs"]
    order = (f"{result['same_order']}/{result['states']}" if result["states"] else "n/a")
    return (f"| {name} | {n} | {result['recommend']}/{n} | {result['overall']}/{n} | "
            f"{result['distance']:.2f} | {order} |")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    for name in ("plain.jsonl", "grammar.jsonl", "plain.log", "grammar.log"):
        if not os.path.isfile(os.path.join(out, name)):
            sys.exit(f"prm-grammar-summary: {os.path.join(out, name)} is missing (made by "
                     "scripts/prm-grammar-measure.sh)")
    plain = read_annotations(os.path.join(out, "plain.jsonl"))
    grammar = read_annotations(os.path.join(out, "grammar.jsonl"))
    if set(plain) != set(grammar):
        sys.exit("prm-grammar-summary: the two files hold different pairs; is the measurement unfinished?")
    plain_row, (plain_tokens, plain_s, plain_speed) = setting_row(
        "unconstrained", plain, read_calls(os.path.join(out, "plain.log")))
    grammar_row, (grammar_tokens, grammar_s, grammar_speed) = setting_row(
        "`--grammar`", grammar, read_calls(os.path.join(out, "grammar.log")))
    if not plain_tokens or not plain_s or not plain_speed:
        sys.exit("prm-grammar-summary: plain.log holds no model call with generated tokens; "
                 "was it written with MERIT_LOG=merit_models=debug?")
    lines = [
        f"# The rubric grammar against the unconstrained teacher ({len(plain)} pairs)",
        "",
        "| setting | pairs | usable | model calls | generated tokens | generation s | tokens/s | prompt s | model s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        plain_row,
        grammar_row,
        "",
        f"`--grammar` generated {grammar_tokens / plain_tokens:.2f}x the tokens, at "
        f"{grammar_speed / plain_speed:.2f}x the unconstrained speed, in {grammar_s / plain_s:.2f}x "
        "the model time (the two took turns pair by pair, so both saw the same load).",
        "",
        "Agreement on the pairs both judged usably (recommend: same `recommend_injection`; "
        "overall: same overall-utility score; |Δ overall|: mean absolute difference; order: "
        "states with two such pairs whose two memories the scalar reward orders alike):",
        "",
        "| files | pairs | recommend | overall | mean abs Δ overall | order |",
        "|---|---:|---:|---:|---:|---:|",
        agreement_row("unconstrained vs `--grammar`", agreement(plain, grammar)),
    ]
    if len(sys.argv) == 3:
        reference = read_annotations(sys.argv[2])
        lines.append(agreement_row("unconstrained vs the same judge earlier (repeatability)",
                                   agreement(plain, reference)))
    text = "\n".join(lines) + "\n"
    path = os.path.join(out, "summary.md")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text, end="")


if __name__ == "__main__":
    main()
