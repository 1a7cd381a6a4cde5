#!/usr/bin/env python3
"""The calibration table of the repair aids, recomputed from committed episode logs.

Usage: scripts/calibration-summary.py [FOLDER [MERIT]]
  (defaults: docs/results/repair/calibration, target/release/merit)

For every `<config>/` under FOLDER that holds `episodes/*.jsonl` (the raw logs `merit run`
wrote), runs `merit report` on those logs (which also rewrites the config's report files) and
prints one Markdown row per method: initial failures, failures repaired, oscillation, repair calls and
tokens (the shared initial generation excluded) as the report computes them, plus the share of
revisions that still fail to execute (counted here from the logs) and the wall time recorded
in `<config>/wall.txt`.
"""
import json
import re
import subprocess
import sys
from pathlib import Path


def summarize(config: Path, merit: str) -> list:
    """One row per method of the configuration (Iterative alone, or Iterative and a memory
    method where the configuration runs both)."""
    # Repairs, oscillation, calls and tokens as `merit report` computes them (one definition).
    report = json.loads(
        subprocess.run([merit, "report", str(config), "--json", "--out", str(config)],
                       check=True, capture_output=True, text=True).stdout)
    # What the report does not count: revisions that still fail to execute, per method.
    revisions, not_executing = {}, {}
    for log in sorted((config / "episodes").glob("*.jsonl")):
        for line in log.read_text().splitlines():
            episode = json.loads(line)
            method = episode["method"]
            for attempt in episode["attempts"][1:]:
                revisions[method] = revisions.get(method, 0) + 1
                not_executing[method] = not_executing.get(method, 0) + (
                    attempt["status"] in ("execution_error", "timeout"))
    wall = 0
    wall_file = config / "wall.txt"
    if wall_file.exists():
        wall = sum(int(m.group(1)) for m in re.finditer(r" (\d+) s$", wall_file.read_text(), re.M))
    rows = []
    for summary in report["methods"]:
        method = summary["method"]
        run = summary["runs"][0]
        done = revisions.get(method, 0)
        rows.append({
            "config": config.name if len(report["methods"]) == 1 else f"{config.name}: {method}",
            "questions": run["questions"],
            "failures": run["initial_failures"],
            "repaired": run["repaired"],
            "oscillation": run["oscillation_pct"],
            "not_executing": 100.0 * not_executing.get(method, 0) / done if done else 0.0,
            "calls": run.get("repair_calls", run["calls"]),
            "tokens": run.get("repair_tokens", run["prompt_tokens"] + run["completion_tokens"]),
            # The wall time is the configuration's, all its methods together.
            "wall": wall,
        })
    return rows


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/repair/calibration")
    merit = sys.argv[2] if len(sys.argv) > 2 else "target/release/merit"
    rows = [row for c in sorted(root.iterdir()) if (c / "episodes").is_dir()
            for row in summarize(c, merit)]
    print("| configuration | questions | initial failures | repaired | repaired % | oscillation % "
          "| revisions not executing % | repair calls | repair tokens (k) | wall (min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        share = 100.0 * r["repaired"] / r["failures"] if r["failures"] else 0.0
        print(f"| {r['config']} | {r['questions']} | {r['failures']} | {r['repaired']} | {share:.1f} "
              f"| {r['oscillation']:.1f} | {r['not_executing']:.1f} | {r['calls']} "
              f"| {r['tokens'] / 1000:.0f} | {r['wall'] / 60:.0f} |")


if __name__ == "__main__":
    main()
